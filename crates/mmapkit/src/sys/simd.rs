//! Vector kernels (`std::arch` intrinsics): they need `unsafe` (target
//! features checked at run time, raw-pointer loads and stores), so they
//! live here with the rest of mmapkit's `unsafe`, behind safe functions
//! that check the CPU and every bound themselves.

/// A vector kernel of [`window_count_u16`], for tests that run each one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kernel {
    Avx2,
    Avx512,
}

/// Counts each key `k = raw[i] ^ flip` with `lo <= k < lo + t.len()` in
/// `t[k - lo]` and returns how many keys are below `lo`, with the best
/// vector kernel the CPU has; `None` when it has none (the caller then
/// runs its scalar loop). `t.len()` must be in `1..=2^16 - lo`.
pub(crate) fn window_count_u16(raw: &[u16], flip: u16, lo: u16, t: &mut [u64]) -> Option<u64> {
    #[cfg(target_arch = "x86_64")]
    {
        window_count_with(Kernel::Avx512, raw, flip, lo, t)
            .or_else(|| window_count_with(Kernel::Avx2, raw, flip, lo, t))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (raw, flip, lo, t);
        None
    }
}

/// [`window_count_u16`] with one given kernel; `None` if the CPU lacks it.
pub(crate) fn window_count_with(
    k: Kernel,
    raw: &[u16],
    flip: u16,
    lo: u16,
    t: &mut [u64],
) -> Option<u64> {
    assert!(!t.is_empty() && lo as usize + t.len() <= 1 << 16, "window_count: window out of range");
    #[cfg(target_arch = "x86_64")]
    match k {
        Kernel::Avx512 if has_avx512() => {
            // SAFETY: the CPU has the kernel's features (checked in the arm's guard).
            return Some(unsafe { window_count_avx512(raw, flip, lo, t) });
        }
        Kernel::Avx2 if std::arch::is_x86_feature_detected!("avx2") => {
            // SAFETY: the CPU has AVX2 (checked in the arm's guard).
            return Some(unsafe { window_count_avx2(raw, flip, lo, t) });
        }
        _ => {}
    }
    let _ = (k, raw, flip, lo, t);
    None
}

#[cfg(target_arch = "x86_64")]
fn has_avx512() -> bool {
    std::arch::is_x86_feature_detected!("avx512f")
        && std::arch::is_x86_feature_detected!("avx512bw")
        && std::arch::is_x86_feature_detected!("avx512vbmi2")
}

/// [`window_count_avx2`] with 32 keys per step and no unpredictable
/// branch: the in-window offsets are compressed (in a register: the
/// memory form is slow on some CPUs) into a buffer, counted when it fills.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vbmi2,popcnt")]
unsafe fn window_count_avx512(raw: &[u16], flip: u16, lo: u16, t: &mut [u64]) -> u64 {
    use std::arch::x86_64::*;
    const FLUSH: usize = 4096;
    let width = t.len();
    debug_assert!((1..=1 << 16).contains(&width) && lo as usize + width <= 1 << 16);
    let mut below = 0u64;
    let vflip = _mm512_set1_epi16(flip as i16);
    let vlo = _mm512_set1_epi16(lo as i16);
    let vlast = _mm512_set1_epi16((width - 1) as u16 as i16);
    let vtop = _mm512_set1_epi16((u16::MAX - lo) as i16);
    // Room for FLUSH offsets plus one full 32-lane store past them.
    let mut buf = vec![0u16; FLUSH + 32];
    let mut n = 0usize;
    let mut blocks = raw.chunks_exact(32);
    for b in &mut blocks {
        // SAFETY: `b` holds 32 u16 (64 bytes); loadu takes any alignment.
        let v = unsafe { _mm512_loadu_si512(b.as_ptr().cast()) };
        let dv = _mm512_sub_epi16(_mm512_xor_si512(v, vflip), vlo);
        let inside = _mm512_cmple_epu16_mask(dv, vlast);
        // Below the window: d wrapped, d > 2^16 - 1 - lo (none when lo = 0).
        below += _mm512_cmpgt_epu16_mask(dv, vtop).count_ones() as u64;
        let packed = _mm512_maskz_compress_epi16(inside, dv);
        // SAFETY: n <= FLUSH, so the 64-byte store at n stays in `buf`.
        unsafe { _mm512_storeu_si512(buf.as_mut_ptr().add(n).cast(), packed) };
        n += inside.count_ones() as usize;
        if n >= FLUSH {
            buf[..n].iter().for_each(|&d| t[d as usize] += 1);
            n = 0;
        }
    }
    buf[..n].iter().for_each(|&d| t[d as usize] += 1);
    below + window_tail(blocks.remainder(), flip, lo, t)
}

/// `stats::select::window_count_scalar` for 16-bit keys `raw ^ flip`, 16 at a time:
/// vector compares find the keys below the window (counted by popcount)
/// and the few inside it (counted one by one); uniform data puts only a
/// few percent of the keys inside the median's window.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,popcnt")]
unsafe fn window_count_avx2(raw: &[u16], flip: u16, lo: u16, t: &mut [u64]) -> u64 {
    use std::arch::x86_64::*;
    let width = t.len();
    debug_assert!((1..=1 << 16).contains(&width) && lo as usize + width <= 1 << 16);
    let mut below = 0u64;
    let mut blocks = raw.chunks_exact(16);
    let vflip = _mm256_set1_epi16(flip as i16);
    let vlo = _mm256_set1_epi16(lo as i16);
    // d = k - lo (mod 2^16) is inside when d <= width - 1, and k is below
    // the window when d >= 2^16 - lo (it wrapped), i.e. d > 2^16 - 1 - lo.
    let vlast = _mm256_set1_epi16((width - 1) as u16 as i16);
    let vtop = _mm256_set1_epi16((u16::MAX - lo) as i16);
    let mut d = [0u16; 16];
    for b in &mut blocks {
        // SAFETY: `b` holds 16 u16 (32 bytes); loadu takes any alignment.
        let v = unsafe { _mm256_loadu_si256(b.as_ptr().cast()) };
        let dv = _mm256_sub_epi16(_mm256_xor_si256(v, vflip), vlo);
        let inside = _mm256_cmpeq_epi16(_mm256_min_epu16(dv, vlast), dv);
        let mut m = _mm256_movemask_epi8(inside) as u32;
        if lo > 0 {
            let not_below = _mm256_cmpeq_epi16(_mm256_min_epu16(dv, vtop), dv);
            below += 16 - (_mm256_movemask_epi8(not_below) as u32).count_ones() as u64 / 2;
        }
        if m != 0 {
            // SAFETY: `d` is 32 bytes; storeu takes any alignment.
            unsafe { _mm256_storeu_si256(d.as_mut_ptr().cast(), dv) };
            while m != 0 {
                let i = m.trailing_zeros() as usize / 2;
                t[d[i] as usize] += 1;
                m &= !(3 << (2 * i));
            }
        }
    }
    below + window_tail(blocks.remainder(), flip, lo, t)
}

/// Appends `src` to `out` with every byte `b` replaced by `repl`; returns
/// the number of replacements. The result is the same as a `memchr` loop
/// with `extend_from_slice` per match, which costs ~15 ns a match when
/// matches are a few bytes apart (185 M commas per GiB of CSV).
/// The keys after the last whole vector block, one at a time (both kernels).
fn window_tail(raw: &[u16], flip: u16, lo: u16, t: &mut [u64]) -> u64 {
    let mut below = 0;
    for &x in raw {
        let k = x ^ flip;
        let d = k.wrapping_sub(lo) as usize;
        if d < t.len() {
            t[d] += 1;
        } else if k < lo {
            below += 1;
        }
    }
    below
}

pub(crate) fn replace_byte(src: &[u8], b: u8, repl: &[u8], out: &mut Vec<u8>) -> u64 {
    let count = bytecount::count(src, b);
    if count == 0 {
        out.extend_from_slice(src);
        return 0;
    }
    let new_len = src.len() - count + count * repl.len();
    #[cfg(target_arch = "x86_64")]
    if repl.len() <= 16 {
        // Block stores write up to 16 bytes past the current end.
        out.reserve(new_len + 16);
        // SAFETY: SSE2 is part of the x86_64 baseline; `out` has room for
        // `new_len + 16` more bytes (reserved above), which bounds every
        // store (see replace_byte_sse2).
        unsafe { replace_byte_sse2(src, b, repl, out, new_len) };
        return count as u64;
    }
    out.reserve(new_len);
    let mut last = 0;
    for at in memchr::memchr_iter(b, src) {
        out.extend_from_slice(&src[last..at]);
        out.extend_from_slice(repl);
        last = at + 1;
    }
    out.extend_from_slice(&src[last..]);
    count as u64
}

/// [`replace_byte`] 16 bytes at a time: each block's match mask, then per
/// match one 16-byte copy of the bytes before it and one 16-byte store of
/// the replacement (both advanced by their true lengths, so later stores
/// overwrite the excess).
///
/// # Safety
/// `repl.len() <= 16`, `new_len` is the exact output length, and `out` has
/// capacity for `out.len() + new_len + 16` bytes: the output pointer only
/// grows and ends at `out.len() + new_len`, and no store writes more than
/// 16 bytes past it. Loads stay inside `src`: a block starting at `i` is
/// only taken while `i + 32 <= src.len()`, and its loads start at
/// `i + last` with `last <= 16`.
#[cfg(target_arch = "x86_64")]
unsafe fn replace_byte_sse2(src: &[u8], b: u8, repl: &[u8], out: &mut Vec<u8>, new_len: usize) {
    // SAFETY: the caller's contract (# Safety above) bounds every load
    // and store of the loop; the intrinsics need only SSE2 (baseline).
    unsafe {
        use std::arch::x86_64::*;
        debug_assert!(repl.len() <= 16 && out.capacity() - out.len() >= new_len + 16);
        let r = repl.len();
        let mut padded = [0u8; 16];
        padded[..r].copy_from_slice(repl);
        let rv = _mm_loadu_si128(padded.as_ptr() as *const __m128i);
        let nv = _mm_set1_epi8(b as i8);
        let s = src.as_ptr();
        let start = out.as_mut_ptr().add(out.len());
        let mut o = start;
        let mut i = 0usize;
        while i + 32 <= src.len() {
            let v = _mm_loadu_si128(s.add(i) as *const __m128i);
            let mut m = _mm_movemask_epi8(_mm_cmpeq_epi8(v, nv)) as u32;
            if m == 0 {
                _mm_storeu_si128(o as *mut __m128i, v);
                o = o.add(16);
                i += 16;
                continue;
            }
            let mut last = 0usize;
            while m != 0 {
                let p = m.trailing_zeros() as usize;
                _mm_storeu_si128(
                    o as *mut __m128i,
                    _mm_loadu_si128(s.add(i + last) as *const __m128i),
                );
                o = o.add(p - last);
                _mm_storeu_si128(o as *mut __m128i, rv);
                o = o.add(r);
                last = p + 1;
                m &= m - 1;
            }
            _mm_storeu_si128(o as *mut __m128i, _mm_loadu_si128(s.add(i + last) as *const __m128i));
            o = o.add(16 - last);
            i += 16;
        }
        for &c in &src[i..] {
            if c == b {
                std::ptr::copy_nonoverlapping(repl.as_ptr(), o, r);
                o = o.add(r);
            } else {
                *o = c;
                o = o.add(1);
            }
        }
        let written = o.offset_from(start) as usize;
        assert_eq!(written, new_len, "replace_byte: output length");
        out.set_len(out.len() + written);
    }
}

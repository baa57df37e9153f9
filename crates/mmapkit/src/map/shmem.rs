//! Copies into, out of and within memory that other threads may write at
//! the same time: the bytes of a [`SharedMap`](super::SharedMap), the
//! open part and the header of an [`AppendMap`](super::AppendMap), and
//! raw views a binding hands in.
//!
//! Every access to the shared side is an atomic `Relaxed` load or store:
//! 8-byte words where the shared side is aligned, single bytes at the
//! edges. On x86-64 and aarch64 these compile to plain moves, but under
//! the Rust memory model a race between them is defined (each byte read
//! is one some thread wrote, words are never torn), where a `memcpy`
//! racing with a write, or a `&[u8]` over bytes another thread writes, is
//! undefined behaviour. The private side (the caller's `&[u8]` or
//! `&mut [MaybeUninit<u8>]`) is accessed plainly. Ordering between
//! threads is the callers' business (they publish with their own
//! acquire/release atomics, as `RecordWriter` and the commit log do).

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};

const W: usize = 8;

/// Bytes before `p` reaches 8-byte alignment, at most `n`.
fn head(p: *const u8, n: usize) -> usize {
    ((W - (p as usize) % W) % W).min(n)
}

/// Copies `dst.len()` bytes from shared memory at `src` into `dst`.
///
/// # Safety
/// `[src, src + dst.len())` is mapped and readable for the whole call,
/// and nobody writes it with non-atomic accesses in this process while
/// the call runs (other writers use this module or atomics). `dst` may
/// not overlap it.
pub(super) unsafe fn load(src: *const u8, dst: &mut [MaybeUninit<u8>]) {
    let n = dst.len();
    let d = dst.as_mut_ptr().cast::<u8>();
    let h = head(src, n);
    let mut i = 0;
    while i < n {
        if i >= h && i + W <= n {
            // SAFETY: `src + i` is 8-byte aligned (i >= h) with 8 readable
            // bytes (caller); loads only, which std allows on any memory
            // mapped readable; `d + i` has room for 8 bytes.
            unsafe {
                let w = AtomicU64::from_ptr(src.add(i).cast::<u64>().cast_mut()).load(Relaxed);
                d.add(i).cast::<u64>().write_unaligned(w);
            }
            i += W;
        } else {
            // SAFETY: as above, one byte (any address is aligned for u8).
            unsafe {
                let b = AtomicU8::from_ptr(src.add(i).cast_mut()).load(Relaxed);
                d.add(i).write(b);
            }
            i += 1;
        }
    }
}

/// Copies `src` into shared memory at `dst`.
///
/// # Safety
/// `[dst, dst + src.len())` is mapped writable for the whole call, no
/// reference (`&[u8]`/`&mut [u8]`) covers it, and in this process it is
/// accessed concurrently only atomically (through this module or
/// atomics). `src` may not overlap it.
pub(super) unsafe fn store(dst: *mut u8, src: &[u8]) {
    let n = src.len();
    let s = src.as_ptr();
    let h = head(dst, n);
    let mut i = 0;
    while i < n {
        if i >= h && i + W <= n {
            // SAFETY: `dst + i` is 8-byte aligned with 8 writable bytes
            // (caller); `s + i` has 8 readable bytes.
            unsafe {
                let w = s.add(i).cast::<u64>().read_unaligned();
                AtomicU64::from_ptr(dst.add(i).cast::<u64>()).store(w, Relaxed);
            }
            i += W;
        } else {
            // SAFETY: as above, one byte.
            unsafe { AtomicU8::from_ptr(dst.add(i)).store(*s.add(i), Relaxed) };
            i += 1;
        }
    }
}

/// Bytes bounced through the stack per step of [`copy`].
const BOUNCE: usize = 4096;

/// `memmove` of `n` bytes from `src` to `dst`, both shared memory (they
/// may overlap, and need not share an alignment): bounced through a stack
/// buffer in steps whose order (forwards or backwards) keeps an overlap
/// correct.
///
/// # Safety
/// `[src, src + n)` is mapped readable and `[dst, dst + n)` mapped
/// writable for the whole call, with the conditions of [`load`] and
/// [`store`] on each.
pub(super) unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    let mut buf = [MaybeUninit::<u8>::uninit(); BOUNCE];
    let step = |k: usize, c: usize, buf: &mut [MaybeUninit<u8>; BOUNCE]| {
        // SAFETY: [k, k + c) is inside both ranges (caller); the bounce
        // buffer is ours and `load` initialised its first `c` bytes.
        unsafe {
            load(src.add(k), &mut buf[..c]);
            store(dst.add(k), std::slice::from_raw_parts(buf.as_ptr().cast::<u8>(), c));
        }
    };
    if (dst as usize) <= (src as usize) {
        let mut k = 0;
        while k < n {
            let c = BOUNCE.min(n - k);
            step(k, c, &mut buf);
            k += c;
        }
    } else {
        let mut k = n;
        while k > 0 {
            let c = BOUNCE.min(k);
            k -= c;
            step(k, c, &mut buf);
        }
    }
}

/// A copy of `len` bytes at `src`, shared memory that others may be
/// writing (a raw view of a map a binding was handed).
///
/// # Safety
/// `[src, src + len)` is mapped readable for the whole call and written
/// concurrently in this process only atomically (e.g. it is a view of a
/// [`SharedMap`](super::SharedMap), or memory nobody writes).
pub unsafe fn copy_from_view(src: *const u8, len: usize) -> Vec<u8> {
    let mut v = Vec::with_capacity(len);
    // SAFETY: the caller's contract; `v` has `len` bytes of spare room,
    // all initialised by `load` before `set_len`.
    unsafe {
        load(src, &mut v.spare_capacity_mut()[..len]);
        v.set_len(len);
    }
    v
}

/// Copies `dst.len()` bytes of a raw view at `src` into `dst`, like
/// [`copy_from_view`] but into the caller's buffer (a binding copies a
/// large Python buffer piece by piece, or straight into its destination).
///
/// # Safety
/// As [`copy_from_view`] for `[src, src + dst.len())`, which may not
/// overlap `dst`.
pub unsafe fn load_from_view(src: *const u8, dst: &mut [u8]) {
    // SAFETY: `u8` and `MaybeUninit<u8>` have one layout, and `load` only
    // writes initialised bytes; the rest is the caller's contract.
    unsafe {
        let d = &mut *(dst as *mut [u8] as *mut [MaybeUninit<u8>]);
        load(src, d);
    }
}

/// Copies `src` into a raw view at `dst` (a writable buffer a binding was
/// handed, e.g. a numpy array), with atomic stores: other threads may read
/// or write those bytes meanwhile.
///
/// # Safety
/// `[dst, dst + src.len())` is mapped writable for the whole call, no
/// reference covers it, and it is accessed concurrently in this process
/// only atomically (or by foreign code, which Rust does not reason
/// about). `src` may not overlap it.
pub unsafe fn store_to_view(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller's contract is `store`'s.
    unsafe { store(dst, src) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_at_every_alignment_and_overlap() {
        let base: Vec<u8> = (0..200u8).collect();
        for off in 0..9 {
            for n in [0, 1, 7, 8, 9, 31, 64, 100] {
                let mut out = vec![MaybeUninit::uninit(); n];
                // SAFETY: in bounds of `base`, which nobody writes.
                unsafe { load(base.as_ptr().add(off), &mut out) };
                // SAFETY: `load` initialised every byte.
                let got: Vec<u8> = out.iter().map(|b| unsafe { b.assume_init() }).collect();
                assert_eq!(got, &base[off..off + n]);
                let mut dst = vec![0u8; 120];
                // SAFETY: in bounds of `dst`, no reference alive over it.
                unsafe { store(dst.as_mut_ptr().add(off), &base[..n]) };
                assert_eq!(&dst[off..off + n], &base[..n]);
            }
        }
        for (src, dst, n) in [(0, 3, 9000), (3, 0, 9000), (5, 5, 10), (100, 1, 50)] {
            let mut v: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
            let mut want = v.clone();
            want.copy_within(src..src + n, dst);
            let p = v.as_mut_ptr();
            // SAFETY: both ranges are inside `v`; no reference is alive.
            unsafe { copy(p.add(src), p.add(dst), n) };
            assert_eq!(v, want, "{src}->{dst} x{n}");
        }
        // SAFETY: `base` is readable and unwritten.
        assert_eq!(unsafe { copy_from_view(base.as_ptr().add(3), 10) }, &base[3..13]);
        let mut got = [0u8; 21];
        // SAFETY: as above; `got` is ours.
        unsafe { load_from_view(base.as_ptr().add(5), &mut got) };
        assert_eq!(got, base[5..26]);
        let mut dst = vec![0u8; 40];
        // SAFETY: in bounds of `dst`, no reference alive over it.
        unsafe { store_to_view(dst.as_mut_ptr().add(3), &base[..21]) };
        assert_eq!(&dst[3..24], &base[..21]);
    }
}

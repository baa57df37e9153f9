//! Exact order statistics in bounded memory, on keys (see [`Element`]).
//!
//! Pass 1 counts every key's top 16 bits (for 8/16-bit types that is the
//! whole key: counting sort, done). Each wanted rank then lies in one
//! bucket; a bucket small enough ([`COLLECT`] keys) is collected and
//! sorted, a bigger one is histogrammed again on its next 16 bits. For
//! 32-bit data that is two passes; for 64-bit data almost always two (a
//! bucket keeps more than `COLLECT` keys only when more than
//! `COLLECT` values share their top 16 bits).

use super::source::Elements;
use super::Element;
use crate::{Error, Result};

/// Elements per parallel task.
pub(crate) const CHUNK: usize = 1 << 20;
/// A bucket with at most this many keys is collected and sorted (32 MiB).
pub(crate) const COLLECT: u64 = 1 << 22;
const RADIX: u32 = 16;

/// Result of pass 1: counts of the top `min(BITS, 16)` key bits, NaNs apart.
pub(crate) struct TopCounts {
    pub hist: Vec<u64>,
    pub nans: u64,
}

impl TopCounts {
    /// Non-NaN elements.
    pub fn valid(&self) -> u64 {
        self.hist.iter().sum()
    }
}

fn top_bits<T: Element>() -> u32 {
    T::BITS.min(RADIX)
}

/// Per-task state of pass 1: two interleaved `u32` sub-histograms (small
/// enough to stay in L2, and two so runs of equal values do not serialise on
/// one counter), flushed into `u64` totals before they could overflow.
struct Pass1 {
    total: Vec<u64>,
    h: Vec<u32>,
    pending: u64,
    nans: u64,
}

impl Pass1 {
    fn new(bins: usize) -> Self {
        Pass1 { total: vec![0; bins], h: vec![0; 2 * bins], pending: 0, nans: 0 }
    }

    fn flush(&mut self) {
        let bins = self.total.len();
        let (a, b) = self.h.split_at_mut(bins);
        for ((t, x), y) in self.total.iter_mut().zip(a.iter_mut()).zip(b.iter_mut()) {
            *t += *x as u64 + *y as u64;
            *x = 0;
            *y = 0;
        }
        self.pending = 0;
    }

    fn add<T: Element>(&mut self, chunk: &[T], shift: u32) {
        if self.pending + chunk.len() as u64 > u32::MAX as u64 {
            self.flush();
        }
        self.pending += chunk.len() as u64;
        let bins = self.total.len();
        if bins == 1 << 16 {
            // The common case (16-bit types, and the top 16 bits of wider
            // ones): fixed-size tables indexed by a u16, no bounds checks.
            let (a, b) = self.h.split_at_mut(bins);
            let h0: &mut [u32; 1 << 16] = a.try_into().expect("65536 bins");
            let h1: &mut [u32; 1 << 16] = b.try_into().expect("65536 bins");
            self.nans += count_pairs(chunk, h0, h1, |k| (k >> shift) as u16 as usize);
            return;
        }
        let (h0, h1) = self.h.split_at_mut(bins);
        self.nans += count_pairs(chunk, h0, h1, |k| (k >> shift) as usize);
    }
}

/// Counts each non-NaN element of `chunk` in bin `bin(key)`, alternating
/// between two tables (two independent increments per step, not a chain
/// on one counter); returns the number of NaNs.
#[inline(always)]
fn count_pairs<T: Element, H: std::ops::IndexMut<usize, Output = u32> + ?Sized>(
    chunk: &[T],
    h0: &mut H,
    h1: &mut H,
    bin: impl Fn(u64) -> usize,
) -> u64 {
    let mut nans = 0;
    let mut pairs = chunk.chunks_exact(2);
    for p in &mut pairs {
        let (x, y) = (p[0], p[1]);
        if x.is_nan() || y.is_nan() {
            for v in [x, y] {
                if v.is_nan() {
                    nans += 1;
                } else {
                    h0[bin(v.key())] += 1;
                }
            }
            continue;
        }
        h0[bin(x.key())] += 1;
        h1[bin(y.key())] += 1;
    }
    for &x in pairs.remainder() {
        if x.is_nan() {
            nans += 1;
        } else {
            h0[bin(x.key())] += 1;
        }
    }
    nans
}

/// Pass 1 over a slice (tests: the reference the kernels are checked on).
#[cfg(test)]
pub(crate) fn top_counts<T: Element>(data: &[T]) -> TopCounts {
    let bins = 1usize << top_bits::<T>();
    let shift = T::BITS - top_bits::<T>();
    if data.len() < bins {
        // Small input: one plain histogram, no parallel set-up.
        let mut hist = vec![0u64; bins];
        let mut nans = 0;
        for &x in data {
            if x.is_nan() {
                nans += 1;
            } else {
                hist[(x.key() >> shift) as usize] += 1;
            }
        }
        return TopCounts { hist, nans };
    }
    infallible(top_counts_in(data))
}

/// A slice source never fails.
pub(crate) fn infallible<R>(r: Result<R>) -> R {
    r.unwrap_or_else(|e| unreachable!("reading memory failed: {e}"))
}

/// Pass 1 (parallel).
pub(crate) fn top_counts_in<T: Element, S: Elements<T> + ?Sized>(src: &S) -> Result<TopCounts> {
    let bins = 1usize << top_bits::<T>();
    let shift = T::BITS - top_bits::<T>();
    let (hist, nans) = src
        .fold_chunks(
            || Pass1::new(bins),
            |mut acc, _, chunk| {
                acc.add(chunk, shift);
                acc
            },
            |mut a, mut b| {
                a.flush();
                b.flush();
                a.total.iter_mut().zip(&b.total).for_each(|(x, y)| *x += y);
                a.nans += b.nans;
                a
            },
        )
        .map(|mut acc| {
            acc.flush();
            (acc.total, acc.nans)
        })?;
    Ok(TopCounts { hist, nans })
}

/// A rank still being narrowed: its key starts with `prefix` (the top
/// `fixed` bits), and it is the `rank`-th (0-based) of the `count` keys
/// that do.
#[derive(Clone, Copy, Debug)]
struct Target {
    out: usize,
    prefix: u64,
    fixed: u32,
    rank: u64,
    count: u64,
}

/// Finds buckets by rank in a histogram (prefix sums + binary search).
struct Cumulative(Vec<u64>);

impl Cumulative {
    fn new(hist: &[u64]) -> Self {
        let mut acc = 0;
        Cumulative(
            hist.iter()
                .map(|&c| {
                    acc += c;
                    acc
                })
                .collect(),
        )
    }

    /// Bucket of the `rank`-th key: (bucket, rank within it, its count).
    /// [`changed`] past the last key: a pass counted fewer keys than an
    /// earlier one (memory written meanwhile).
    fn locate(&self, rank: u64) -> Result<(u64, u64, u64)> {
        let b = self.0.partition_point(|&end| end <= rank);
        let end = *self.0.get(b).ok_or_else(changed)?;
        let start = if b == 0 { 0 } else { self.0[b - 1] };
        Ok((b as u64, rank - start, end - start))
    }
}

/// The error when a later pass over the data disagrees with an earlier
/// one: another thread or process wrote the elements meanwhile (defined,
/// since such memory is only read by copies, but no exact answer exists).
fn changed() -> Error {
    Error::InvalidArgument(
        "the data changed while being read (written meanwhile by another thread or process)".into(),
    )
}

fn unique_prefixes(targets: &[Target]) -> Vec<u64> {
    let mut p: Vec<u64> = targets.iter().map(|t| t.prefix).collect();
    p.sort_unstable();
    p.dedup();
    p
}

/// The keys of the given ranks (0-based, among non-NaN elements in key
/// order; every rank must be below `top.valid()`).
pub(crate) fn select_keys<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    top: &TopCounts,
    ranks: &[u64],
) -> Result<Vec<u64>> {
    select_keys_limit(data, top, ranks, COLLECT)
}

/// [`select_keys`] collecting buckets of at most `limit` keys.
pub(crate) fn select_keys_limit<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    top: &TopCounts,
    ranks: &[u64],
    limit: u64,
) -> Result<Vec<u64>> {
    let mut out = vec![0u64; ranks.len()];
    let bits = top_bits::<T>();
    let cum = Cumulative::new(&top.hist);
    let mut pending: Vec<Target> = ranks
        .iter()
        .enumerate()
        .map(|(out, &r)| {
            let (prefix, rank, count) = cum.locate(r)?;
            Ok(Target { out, prefix, fixed: bits, rank, count })
        })
        .collect::<Result<_>>()?;
    while !pending.is_empty() {
        let fixed = pending[0].fixed;
        if fixed == T::BITS {
            for t in pending.drain(..) {
                out[t.out] = t.prefix;
            }
            break;
        }
        let shift = T::BITS - fixed;
        let (small, big): (Vec<Target>, Vec<Target>) =
            pending.drain(..).partition(|t| t.count <= limit);
        if !small.is_empty() {
            let prefixes = unique_prefixes(&small);
            let mut buckets = collect(data, &prefixes, shift)?;
            buckets.iter_mut().for_each(|b| b.sort_unstable());
            for t in small {
                let i = prefixes.binary_search(&t.prefix).expect("prefix collected");
                out[t.out] = *buckets[i].get(t.rank as usize).ok_or_else(changed)?;
            }
        }
        if !big.is_empty() {
            let prefixes = unique_prefixes(&big);
            let width = RADIX.min(shift);
            let hists = refine(data, &prefixes, shift, width)?;
            let bins = 1usize << width;
            let cums: Vec<Cumulative> = hists.chunks_exact(bins).map(Cumulative::new).collect();
            for t in big {
                let i = prefixes.binary_search(&t.prefix).expect("prefix histogrammed");
                let (b, rank, count) = cums[i].locate(t.rank)?;
                pending.push(Target {
                    out: t.out,
                    prefix: (t.prefix << width) | b,
                    fixed: fixed + width,
                    rank,
                    count,
                });
            }
        }
    }
    Ok(out)
}

/// Calls `hit(i, key)` for each non-NaN element of `chunk` whose key's
/// top bits (`key >> shift`) are `prefixes[i]` (sorted).
#[inline(always)]
fn under_prefixes<T: Element>(
    chunk: &[T],
    prefixes: &[u64],
    shift: u32,
    mut hit: impl FnMut(usize, u64),
) {
    let (lo, hi) = (prefixes[0], prefixes[prefixes.len() - 1]);
    for &x in chunk {
        if x.is_nan() {
            continue;
        }
        let k = x.key();
        let p = k >> shift;
        if p < lo || p > hi {
            continue;
        }
        if let Ok(i) = prefixes.binary_search(&p) {
            hit(i, k);
        }
    }
}

/// The keys whose top bits (`key >> shift`) are one of `prefixes`, one
/// vector per prefix.
fn collect<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    prefixes: &[u64],
    shift: u32,
) -> Result<Vec<Vec<u64>>> {
    let n = prefixes.len();
    data.fold_chunks(
        || vec![Vec::new(); n],
        |mut acc: Vec<Vec<u64>>, _, chunk| {
            under_prefixes(chunk, prefixes, shift, |i, k| acc[i].push(k));
            acc
        },
        |mut a, b| {
            for (x, y) in a.iter_mut().zip(b) {
                x.extend(y);
            }
            a
        },
    )
}

/// Histograms of the `width` bits below each prefix, concatenated.
fn refine<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    prefixes: &[u64],
    shift: u32,
    width: u32,
) -> Result<Vec<u64>> {
    let n = prefixes.len();
    let bins = 1usize << width;
    let low = shift - width;
    let mask = (bins - 1) as u64;
    data.fold_chunks(
        || vec![0u64; n * bins],
        |mut h, _, chunk| {
            under_prefixes(chunk, prefixes, shift, |i, k| {
                h[i * bins + ((k >> low) & mask) as usize] += 1
            });
            h
        },
        |mut a, b| {
            a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
            a
        },
    )
}

/// Elements sampled to place the window of [`select_keys_window`].
const SAMPLE: usize = 1 << 16;

/// Fast path for NaN-free data whose wanted ranks lie close together (a
/// median): a strided sample guesses a key window that very likely holds
/// every wanted rank; one pass then counts the keys below the window and
/// histograms the keys inside it (a table small enough for L1 instead of
/// 65536 counters). `None` when a rank falls outside the window (the
/// sample misled): the caller then does the ordinary counting passes, so
/// the answer is exact either way. (A streamed file is sampled in its
/// first block only: a file whose values drift along it, e.g. sorted,
/// misleads it and costs a second pass.)
pub(crate) fn select_keys_window<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    ranks: &[u64],
) -> Result<Option<Vec<u64>>> {
    select_keys_window_with(data, ranks, SAMPLE)
}

pub(crate) fn select_keys_window_with<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    ranks: &[u64],
    sample: usize,
) -> Result<Option<Vec<u64>>> {
    let n = data.count();
    if n == 0 || ranks.is_empty() {
        return Ok(None);
    }
    let mut keys: Vec<u64> = data.sample(sample)?.into_iter().map(|x| x.key()).collect();
    keys.sort_unstable();
    let s = keys.len();
    // ±8 standard deviations of a sample quantile's position, at least 2.
    let margin = ((s as f64).sqrt() * 4.0) as usize + 2;
    let pos = |r: u64| ((r as f64 / n as f64) * s as f64) as usize;
    let (Some(&rmin), Some(&rmax)) = (ranks.iter().min(), ranks.iter().max()) else {
        return Ok(None);
    };
    let lo_pos = pos(rmin).saturating_sub(margin);
    let hi_pos = (pos(rmax) + margin).min(s - 1);
    let (lo, hi) = (keys[lo_pos], keys[hi_pos]);
    if hi - lo >= 1 << 16 {
        return Ok(None); // wider than plain counting: no gain (only 16-bit data comes here)
    }
    let width = (hi - lo + 1) as usize;
    let (below, table) = data.fold_chunks(
        || (0u64, vec![0u64; width]),
        |(below, mut t), _, chunk| (below + window_count(chunk, lo, &mut t), t),
        |(a, mut t), (b, u)| {
            t.iter_mut().zip(&u).for_each(|(x, y)| *x += y);
            (a + b, t)
        },
    )?;
    let inside: u64 = table.iter().sum();
    if ranks.iter().any(|&r| r < below || r >= below + inside) {
        return Ok(None);
    }
    let cum = Cumulative::new(&table);
    ranks.iter().map(|&r| Ok(lo + cum.locate(r - below)?.0)).collect::<Result<_>>().map(Some)
}

/// Counts each key `k` of `chunk` with `lo <= k < lo + t.len()` in
/// `t[k - lo]`; returns how many keys are below `lo`.
pub(crate) fn window_count<T: Element>(chunk: &[T], lo: u64, t: &mut [u64]) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if T::BITS == 16 && !T::DTYPE.is_float() {
        // 16-bit integers: the key is the raw bits xor a constant (the
        // sign flip), which the vector kernels apply themselves.
        let raw: &[u16] = bytemuck::cast_slice(chunk);
        let flip = <T as bytemuck::Zeroable>::zeroed().key() as u16;
        if let Some(below) = crate::sys::simd::window_count_u16(raw, flip, lo as u16, t) {
            return below;
        }
    }
    window_count_scalar(chunk, lo, t)
}

pub(crate) fn window_count_scalar<T: Element>(chunk: &[T], lo: u64, t: &mut [u64]) -> u64 {
    let width = t.len();
    let mut below = 0;
    for &x in chunk {
        let k = x.key();
        let d = k.wrapping_sub(lo) as usize;
        if d < width {
            t[d] += 1;
        } else if k < lo {
            below += 1;
        }
    }
    below
}

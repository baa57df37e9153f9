//! Exact statistics over arrays larger than memory: [`median`],
//! [`quantiles`], [`histogram`], [`min`]/[`max`], [`sum`]/[`mean`].
//!
//! They work on typed slices (`&[T]` for the ten [`Element`] types) or,
//! through [`Data`] and [`MappedArray`], on a file mapped with
//! [`Map`](crate::map::Map) (a raw binary file with a dtype and offset, or
//! a `.npy` file). Every function is parallel (rayon, on the pool it is
//! called from: wrap the call in [`Threads::install`](crate::exec::Threads::install)
//! to choose the thread count; results do not depend on it) and needs
//! memory independent of the input length:
//!
//! * 8/16-bit integers: one counting pass (256 / 65536 counters). For the
//!   median and nearby quantiles of 16-bit data, a strided sample first
//!   guesses a narrow window of values holding the wanted ranks, and the one
//!   pass counts values below it and histograms only those inside (an
//!   L1-sized table); if the sample misled, the plain counting pass runs.
//! * Files ([`ArrayFile`]) are mapped when they are in the page cache and
//!   otherwise read front to back with large `pread`s into per-worker
//!   buffers (a mapping faults uncached data in with small, scattered
//!   reads); the kernels are the same, and so are the results.
//! * 32/64-bit integers and floats: two-pass radix selection on an
//!   order-preserving unsigned key (floats: sign-flipped bits): pass 1
//!   counts the top 16 bits, pass 2 collects the one bucket that holds the
//!   wanted rank (at most 4 Mi keys; a bigger bucket is narrowed by another
//!   16 bits first) and selects in it.
//!
//! # Agreement with numpy
//!
//! * [`median`] equals `np.median` exactly, including the mean of the two
//!   middle values for even lengths (computed in `float64` for integers, in
//!   the element type for floats) and its `float64` result for integers.
//! * [`quantiles`] with [`Method::InvertedCdf`] equals
//!   `np.quantile(a, q, method="inverted_cdf")` (an element of the array);
//!   [`Method::Linear`] equals numpy's default method for a Python-float
//!   `q`, except that numpy computes `b - a` in the integer type and wraps
//!   around on overflow (e.g. `int16` values −30000 and 30000), where this
//!   computes it exactly.
//! * NaN: without `skipna` any NaN makes the median, quantiles, min and max
//!   NaN (like `np.median`, `np.quantile`, `np.min`); with `skipna` NaNs are
//!   ignored (like `np.nanmedian`, `np.nanquantile`, `np.nanmin`), and an
//!   all-NaN input gives NaN. ±inf are ordinary values.
//! * [`histogram`] equals `np.histogram(a, bins, range)` bin for bin
//!   (same edges, same half-open bins with a closed last bin, same rules
//!   for out-of-range values and for autodetecting the range).
//! * [`sum`] of integers is exact (an `i128`, it never wraps like numpy's
//!   `int64` accumulator); of floats it is a compensated (Neumaier) `f64`
//!   sum, accurate to about one ulp of the exact sum whatever the length,
//!   so it may differ from numpy's pairwise sum in the last bits. [`mean`]
//!   is that sum divided by the count, as `f64`.
//! * Empty input: [`median`] and [`mean`] give NaN (numpy warns and returns
//!   NaN), [`min`]/[`max`]/[`quantiles`] give
//!   [`crate::Error::InvalidArgument`] (numpy
//!   raises `ValueError` / `IndexError`).

mod data;
mod element;
mod hist;
mod select;
mod source;
#[cfg(test)]
mod tests;

pub use crate::dtype::DType;
pub use data::{ArrayFile, CopiedData, Data, FileData, Input, MappedArray};
pub use element::{Element, Sum};
pub use hist::{histogram, Histogram};

use crate::{Error, Result};
use select::{infallible, select_keys, select_keys_window, top_counts_in, TopCounts};
use source::Elements;

/// A single value of an array, widened.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    /// A signed integer element.
    Int(i64),
    /// An unsigned integer element.
    UInt(u64),
    /// A float (a `float32` widened exactly), or a computed float result.
    Float(f64),
}

impl Value {
    /// The value as `f64`.
    pub fn as_f64(self) -> f64 {
        match self {
            Value::Int(v) => v as f64,
            Value::UInt(v) => v as f64,
            Value::Float(v) => v,
        }
    }
}

/// How a quantile between two elements is chosen.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// numpy's default: linear interpolation between the two neighbours
    /// of the virtual index `(n - 1) q`.
    Linear,
    /// The smallest element with at least a fraction `q` of the data at or
    /// below it (numpy's `"inverted_cdf"`); always an element.
    InvertedCdf,
}

crate::named_enum!(Method, "quantile method", {
    Linear => "linear",
    InvertedCdf => "inverted_cdf",
});

/// The median; see the [module docs](self) for NaN and empty input.
pub fn median<T: Element>(data: &[T], skipna: bool) -> f64 {
    infallible(median_in(data, skipna))
}

pub(crate) fn median_in<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    skipna: bool,
) -> Result<f64> {
    let (n, nans, top) = counts(data)?;
    if (nans > 0 && !skipna) || n == 0 {
        return Ok(f64::NAN);
    }
    Ok(if n % 2 == 1 {
        // numpy's mean of one element is the element (no a + a overflow).
        T::from_key(select(data, top, &[n / 2])?[0]).to_f64()
    } else {
        let k = select(data, top, &[n / 2 - 1, n / 2])?;
        T::mid(T::from_key(k[0]), T::from_key(k[1]))
    })
}

/// (non-NaN count, NaN count, pass-1 counts). 16-bit data (integers: no
/// NaN) skips pass 1: [`select`] tries the one-pass window first.
fn counts<T: Element, S: Elements<T> + ?Sized>(data: &S) -> Result<(u64, u64, Option<TopCounts>)> {
    Ok(if T::BITS == 16 {
        (data.count() as u64, 0, None)
    } else {
        let top = top_counts_in(data)?;
        (top.valid(), top.nans, Some(top))
    })
}

/// Keys of `ranks`, by the window fast path when pass 1 was skipped.
fn select<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    top: Option<TopCounts>,
    ranks: &[u64],
) -> Result<Vec<u64>> {
    let top = match top {
        Some(t) => t,
        None => {
            if let Some(k) = select_keys_window(data, ranks)? {
                return Ok(k);
            }
            top_counts_in(data)?
        }
    };
    select_keys(data, &top, ranks)
}

/// The quantiles `qs` (each in `[0, 1]`): `Value::Float` for
/// [`Method::Linear`], the element's own variant for
/// [`Method::InvertedCdf`] (NaN results are `Value::Float(NaN)`).
///
/// `float32` data interpolates in `float32` like `np.quantile` with a
/// Python-float `q`; use [`quantiles_wide`] for numpy's behaviour with an
/// array of `q`s (interpolation in `float64`).
pub fn quantiles<T: Element>(
    data: &[T],
    qs: &[f64],
    method: Method,
    skipna: bool,
) -> Result<Vec<Value>> {
    quantiles_with(data, qs, method, skipna, false)
}

/// [`quantiles`] interpolating `float32` data in `float64`.
pub fn quantiles_wide<T: Element>(
    data: &[T],
    qs: &[f64],
    method: Method,
    skipna: bool,
) -> Result<Vec<Value>> {
    quantiles_with(data, qs, method, skipna, true)
}

fn quantiles_with<T: Element>(
    data: &[T],
    qs: &[f64],
    method: Method,
    skipna: bool,
    wide: bool,
) -> Result<Vec<Value>> {
    quantiles_in(data, qs, method, skipna, wide)
}

pub(crate) fn quantiles_in<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    qs: &[f64],
    method: Method,
    skipna: bool,
    wide: bool,
) -> Result<Vec<Value>> {
    if let Some(q) = qs.iter().find(|q| !(0.0..=1.0).contains(*q)) {
        return Err(Error::InvalidArgument(format!(
            "quantiles must be in the range [0, 1], got {q}"
        )));
    }
    if data.count() == 0 {
        return Err(Error::InvalidArgument("cannot compute a quantile of an empty array".into()));
    }
    let (n, nans, top) = counts(data)?;
    if (nans > 0 && !skipna) || n == 0 {
        return Ok(vec![Value::Float(f64::NAN); qs.len()]);
    }
    // Per q: (lower rank, upper rank, interpolation weight), exactly as
    // numpy's _quantile computes them.
    let plan: Vec<(u64, u64, f64)> = qs
        .iter()
        .map(|&q| match method {
            Method::Linear => {
                let v = (n - 1) as f64 * q;
                if v >= (n - 1) as f64 {
                    // numpy points both neighbours at the last element and
                    // takes the weight against index -1.
                    (n - 1, n - 1, v + 1.0)
                } else {
                    let prev = v.floor();
                    (prev as u64, prev as u64 + 1, v - prev)
                }
            }
            Method::InvertedCdf => {
                let v = n as f64 * q - 1.0;
                let prev = v.floor();
                let idx = if v - prev == 0.0 { prev } else { prev + 1.0 };
                let idx = if idx < 0.0 { 0 } else { (idx as u64).min(n - 1) };
                (idx, idx, 0.0)
            }
        })
        .collect();
    let mut ranks: Vec<u64> = plan.iter().flat_map(|&(a, b, _)| [a, b]).collect();
    ranks.sort_unstable();
    ranks.dedup();
    let keys = select(data, top, &ranks)?;
    let at = |r: u64| T::from_key(keys[ranks.binary_search(&r).expect("rank selected")]);
    Ok(plan
        .into_iter()
        .map(|(lo, hi, t)| match method {
            Method::Linear => Value::Float(T::lerp(at(lo), at(hi), t, wide)),
            Method::InvertedCdf => at(lo).value(),
        })
        .collect())
}

/// Non-NaN key range and NaN count.
fn key_range<T: Element, S: Elements<T> + ?Sized>(data: &S) -> Result<(u64, u64, u64)> {
    data.fold_chunks(
        || (u64::MAX, 0, 0),
        |a, _, c| {
            let b = T::key_range(c);
            (a.0.min(b.0), a.1.max(b.1), a.2 + b.2)
        },
        |a, b| (a.0.min(b.0), a.1.max(b.1), a.2 + b.2),
    )
}

pub(crate) fn extreme_in<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    skipna: bool,
    max: bool,
) -> Result<Value> {
    if data.count() == 0 {
        return Err(Error::InvalidArgument(format!(
            "zero-size array to reduction operation {} which has no identity",
            if max { "maximum" } else { "minimum" }
        )));
    }
    let (lo, hi, nans) = key_range(data)?;
    if (nans > 0 && !skipna) || nans == data.count() as u64 {
        return Ok(Value::Float(f64::NAN));
    }
    Ok(T::from_key(if max { hi } else { lo }).value())
}

/// The smallest element (NaN rules in the [module docs](self)).
pub fn min<T: Element>(data: &[T], skipna: bool) -> Result<Value> {
    extreme_in(data, skipna, false)
}

/// The largest element (NaN rules in the [module docs](self)).
pub fn max<T: Element>(data: &[T], skipna: bool) -> Result<Value> {
    extreme_in(data, skipna, true)
}

/// The sum: exact for integers, compensated `f64` for floats. With
/// `skipna`, NaNs count as zero (like `np.nansum`).
pub fn sum<T: Element>(data: &[T], skipna: bool) -> Sum {
    infallible(sum_count_in(data, skipna)).0
}

/// The sum and the number of elements summed (non-NaN ones with `skipna`).
/// Chunk sums merge in chunk order, so the result does not depend on the
/// thread count or the source.
pub(crate) fn sum_count_in<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    skipna: bool,
) -> Result<(Sum, u64)> {
    let zero = if T::DTYPE.is_float() { Sum::Float(0.0, 0.0) } else { Sum::Int(0) };
    let mut parts = data.fold_chunks(
        Vec::new,
        |mut acc: Vec<(usize, Sum, u64)>, i, c| {
            if skipna && c.iter().any(|x| x.is_nan()) {
                let clean: Vec<T> = c.iter().copied().filter(|x| !x.is_nan()).collect();
                acc.push((i, T::sum_chunk(&clean), clean.len() as u64));
            } else {
                acc.push((i, T::sum_chunk(c), c.len() as u64));
            }
            acc
        },
        |mut a, b| {
            a.extend(b);
            a
        },
    )?;
    parts.sort_unstable_by_key(|p| p.0);
    Ok(parts.into_iter().fold((zero, 0), |(s, n), (_, t, m)| (s.merge(t), n + m)))
}

/// The arithmetic mean as `f64` (NaN for empty input). With `skipna`,
/// over the non-NaN elements (like `np.nanmean`).
pub fn mean<T: Element>(data: &[T], skipna: bool) -> f64 {
    infallible(mean_in(data, skipna))
}

pub(crate) fn mean_in<T: Element, S: Elements<T> + ?Sized>(data: &S, skipna: bool) -> Result<f64> {
    let (s, n) = sum_count_in(data, skipna)?;
    Ok(match s {
        Sum::Int(s) => s as f64 / n as f64,
        Sum::Float(s, c) => (s + c) / n as f64,
    })
}

impl Sum {
    /// The sum as `f64` (rounded once for integers and compensated floats).
    pub fn as_f64(self) -> f64 {
        match self {
            Sum::Int(s) => s as f64,
            Sum::Float(s, c) => s + c,
        }
    }
}

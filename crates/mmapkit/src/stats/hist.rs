//! `np.histogram` with equal-width bins, bin for bin.
//!
//! numpy computes the bin edges with `np.linspace` in a type that depends
//! on the input (`float32` arithmetic for a `float32` array without a
//! range, `float64` otherwise, rounded to `float32` edges for `float32`
//! data), then puts `x` in bin `i` when `edges[i] <= x < edges[i + 1]`
//! (the last bin also takes `x == edges[-1]`), comparing in the edges'
//! type. This does the same: an estimated index, corrected against the
//! edges, so the answer is exactly numpy's.

use super::select::top_counts_in;
use super::source::Elements;
use super::{key_range, Element};
use crate::{Error, Result};

/// Bin counts and the `bins + 1` edges (`float32` edges widened exactly).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    /// Elements per bin.
    pub counts: Vec<u64>,
    /// Bin edges, ascending.
    pub edges: Vec<f64>,
}

/// `np.linspace(start, stop, num)` computed in `f32` or `f64`.
fn linspace(start: f64, stop: f64, num: usize, in_f32: bool) -> Vec<f64> {
    let div = (num - 1) as f64;
    let mut y: Vec<f64> = if in_f32 {
        let (s, e) = (start as f32, stop as f32);
        let delta = e - s;
        let step = delta / div as f32;
        (0..num)
            .map(|i| if step == 0.0 { (i as f32 / div as f32) * delta + s } else { (i as f32) * step + s } as f64)
            .collect()
    } else {
        let delta = stop - start;
        let step = delta / div;
        (0..num)
            .map(|i| {
                if step == 0.0 {
                    (i as f64 / div) * delta + start
                } else {
                    (i as f64) * step + start
                }
            })
            .collect()
    };
    if num > 1 {
        y[num - 1] = if in_f32 { stop as f32 as f64 } else { stop };
    }
    y
}

/// Bin of `x` (already in the edges' type), given a kept value.
#[inline]
fn bin_of(x: f64, edges: &[f64], scale: f64) -> usize {
    let bins = edges.len() - 1;
    let est = (x - edges[0]) * scale;
    let mut i = if est >= bins as f64 {
        bins - 1
    } else if est > 0.0 {
        est as usize
    } else {
        0
    };
    while i > 0 && x < edges[i] {
        i -= 1;
    }
    while i + 1 < bins && x >= edges[i + 1] {
        i += 1;
    }
    i
}

/// `np.histogram(data, bins, range)`: `bins` equal-width bins over `range`,
/// or over `[min, max]` of the data when `range` is `None` (NaN or ±inf
/// in the data is then an error, as in numpy; with a range they are
/// dropped like any out-of-range value).
pub fn histogram<T: Element>(
    data: &[T],
    bins: usize,
    range: Option<(f64, f64)>,
) -> Result<Histogram> {
    histogram_in(data, bins, range)
}

pub(crate) fn histogram_in<T: Element, S: Elements<T> + ?Sized>(
    data: &S,
    bins: usize,
    range: Option<(f64, f64)>,
) -> Result<Histogram> {
    if bins == 0 {
        return Err(Error::InvalidArgument("`bins` must be positive".into()));
    }
    let is_f32 = T::DTYPE == crate::dtype::DType::F32;
    // (first, last, compute linspace in f32, keep-test bounds)
    let (first, last, in_f32, keep) = match range {
        Some((lo, hi)) => {
            if lo > hi {
                return Err(Error::InvalidArgument(
                    "max must be larger than min in range parameter".into(),
                ));
            }
            if !(lo.is_finite() && hi.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "supplied range of [{lo}, {hi}] is not finite"
                )));
            }
            // float32 data compares with the range rounded to float32.
            let keep = if is_f32 { (lo as f32 as f64, hi as f32 as f64) } else { (lo, hi) };
            let (lo, hi) = if lo == hi { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
            (lo, hi, false, Some(keep))
        }
        None if data.count() == 0 => (0.0, 1.0, false, None),
        None => {
            let (klo, khi, nans) = key_range(data)?;
            let (lo, hi) = if nans > 0 {
                (f64::NAN, f64::NAN)
            } else {
                (T::from_key(klo).to_f64(), T::from_key(khi).to_f64())
            };
            if !(lo.is_finite() && hi.is_finite()) {
                return Err(Error::InvalidArgument(format!(
                    "autodetected range of [{lo}, {hi}] is not finite"
                )));
            }
            // numpy adjusts the range in the data's own type (float32 stays
            // float32); integers become float64.
            let (lo, hi) = if lo == hi {
                if is_f32 {
                    ((lo as f32 - 0.5) as f64, (hi as f32 + 0.5) as f64)
                } else {
                    (lo - 0.5, hi + 0.5)
                }
            } else {
                (lo, hi)
            };
            (lo, hi, is_f32, None)
        }
    };
    let mut edges = linspace(first, last, bins + 1, in_f32);
    if is_f32 {
        edges.iter_mut().for_each(|e| *e = *e as f32 as f64);
    }
    if edges.windows(2).any(|w| w[0] >= w[1]) {
        return Err(Error::InvalidArgument(format!(
            "too many bins for data range: cannot create {bins} finite-sized bins"
        )));
    }
    let span = edges[bins] - edges[0];
    let scale = if span > 0.0 { bins as f64 / span } else { 0.0 };
    let in_range = |x: f64| match keep {
        Some((lo, hi)) => x >= lo && x <= hi,
        None => true,
    };

    let mut counts = vec![0u64; bins];
    if T::BITS <= 16 {
        // Count every distinct value once, then bin the values.
        let top = top_counts_in(data)?;
        for (k, &c) in top.hist.iter().enumerate() {
            let x = T::from_key(k as u64).to_f64();
            if c > 0 && in_range(x) {
                counts[bin_of(x, &edges, scale)] += c;
            }
        }
        return Ok(Histogram { counts, edges });
    }
    counts = data.fold_chunks(
        || vec![0u64; bins],
        |mut h, _, chunk| {
            for &x in chunk {
                // NaN fails the range test; without a range there is none.
                let v = x.to_f64();
                if !x.is_nan() && in_range(v) {
                    h[bin_of(v, &edges, scale)] += 1;
                }
            }
            h
        },
        |mut a, b| {
            a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
            a
        },
    )?;
    Ok(Histogram { counts, edges })
}

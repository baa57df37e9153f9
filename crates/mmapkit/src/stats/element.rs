//! The element types statistics work on, and the per-type arithmetic that
//! has to match numpy bit for bit (the mean of the two middle values, the
//! linear interpolation of quantiles).

use super::Value;
use crate::dtype::Native;

/// A numeric element type: the ten integer and float types numpy arrays
/// commonly hold.
///
/// Every element has an order-preserving unsigned *key* of `BITS` bits
/// (`a < b` ⇔ `key(a) < key(b)` for non-NaN values): integers flip the
/// sign bit, floats flip the sign bit of positives and every bit of
/// negatives (the usual radix-sort trick), so selection can run on keys.
pub trait Element: Native {
    /// Width of the key in bits (8, 16, 32 or 64).
    const BITS: u32;
    /// The order-preserving key (NaN keys are meaningless).
    fn key(self) -> u64;
    /// Inverse of [`Element::key`].
    fn from_key(k: u64) -> Self;
    /// Whether this is a NaN (false for integers).
    fn is_nan(self) -> bool;
    /// The value, for returning to callers.
    fn value(self) -> Value;
    /// The value converted to `f64` (rounded for 64-bit integers, like
    /// numpy's `astype(float64)`).
    fn to_f64(self) -> f64;
    /// numpy's `mean([a, b])` as `np.median` computes it for even lengths:
    /// `(f64(a) + f64(b)) / 2` for integers, `(a + b) / 2` in the element
    /// type for floats (so two huge `float32` values overflow to inf, as
    /// in numpy).
    fn mid(a: Self, b: Self) -> f64;
    /// numpy's `_lerp(a, b, t)` for `np.quantile(x, q)` with a Python float
    /// `q`: `a + (b - a) * t`, or `b - (b - a) * (1 - t)` when `t >= 0.5`,
    /// in the element type for floats and in `f64` for integers (where
    /// `b - a` is exact here; numpy computes it in the integer type and
    /// wraps on overflow). With `wide`, float32 interpolates in `f64` (from
    /// the `float32` difference), as numpy does for an array of `q`s.
    fn lerp(a: Self, b: Self, t: f64, wide: bool) -> f64;
    /// Sum of a chunk of at most 2^31 elements.
    fn sum_chunk(chunk: &[Self]) -> Sum;
    /// Keys of the smallest and largest non-NaN element of a chunk
    /// (`(u64::MAX, 0)` if none) and the number of NaNs.
    fn key_range(chunk: &[Self]) -> (u64, u64, u64);
}

/// A sum: exact for integers, compensated for floats.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sum {
    /// Exact integer sum (never wraps).
    Int(i128),
    /// Float sum and its Neumaier compensation term.
    Float(f64, f64),
}

impl Sum {
    /// Adds two partial sums of the same kind.
    pub(crate) fn merge(self, other: Sum) -> Sum {
        match (self, other) {
            (Sum::Int(a), Sum::Int(b)) => Sum::Int(a + b),
            (Sum::Float(s, c), Sum::Float(t, d)) if s.is_finite() && t.is_finite() => {
                let mut acc = Neumaier { sum: s, comp: c + d };
                acc.add(t);
                if acc.sum.is_finite() {
                    Sum::Float(acc.sum, acc.comp)
                } else {
                    Sum::Float(acc.sum, 0.0)
                }
            }
            // IEEE semantics for NaN / inf / overflow: the plain sum.
            (Sum::Float(s, _), Sum::Float(t, _)) => Sum::Float(s + t, 0.0),
            (a, _) => a,
        }
    }
}

/// Neumaier's compensated summation: error independent of the length.
struct Neumaier {
    sum: f64,
    comp: f64,
}

impl Neumaier {
    #[inline]
    fn add(&mut self, x: f64) {
        let t = self.sum + x;
        if self.sum.abs() >= x.abs() {
            self.comp += (self.sum - t) + x;
        } else {
            self.comp += (x - t) + self.sum;
        }
        self.sum = t;
    }
}

fn float_sum<T: Copy>(chunk: &[T], f: impl Fn(T) -> f64) -> Sum {
    // Four independent accumulators so the loop is not one long dependency chain.
    let mut acc = [(); 4].map(|_| Neumaier { sum: 0.0, comp: 0.0 });
    let mut quads = chunk.chunks_exact(4);
    for q in &mut quads {
        for (a, &x) in acc.iter_mut().zip(q) {
            a.add(f(x));
        }
    }
    for &x in quads.remainder() {
        acc[0].add(f(x));
    }
    let [a, b, c, d] = acc;
    let mut total = Neumaier { sum: a.sum, comp: a.comp + b.comp + c.comp + d.comp };
    total.add(b.sum);
    total.add(c.sum);
    total.add(d.sum);
    if total.sum.is_finite() && total.comp.is_finite() {
        Sum::Float(total.sum, total.comp)
    } else {
        // IEEE semantics for NaN / inf / overflow: the plain sum.
        Sum::Float(chunk.iter().map(|&x| f(x)).sum(), 0.0)
    }
}

macro_rules! int_element {
    ($t:ty, $u:ty, $bits:expr, $variant:ident, $wide:ty, $acc:ty) => {
        impl Element for $t {
            const BITS: u32 = $bits;
            #[inline(always)]
            fn key(self) -> u64 {
                // Flips the sign bit of signed types (a no-op mask for unsigned).
                ((self as $u) ^ ((<$t>::MIN as $u) & (1 << ($bits - 1)))) as u64
            }
            #[inline(always)]
            fn from_key(k: u64) -> Self {
                ((k as $u) ^ ((<$t>::MIN as $u) & (1 << ($bits - 1)))) as $t
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                false
            }
            fn value(self) -> Value {
                Value::$variant(self as $wide)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn mid(a: Self, b: Self) -> f64 {
                (a as f64 + b as f64) / 2.0
            }
            fn lerp(a: Self, b: Self, t: f64, _wide: bool) -> f64 {
                let diff = (b as i128 - a as i128) as f64;
                if t >= 0.5 {
                    b as f64 - diff * (1.0 - t)
                } else {
                    a as f64 + diff * t
                }
            }
            fn sum_chunk(chunk: &[Self]) -> Sum {
                Sum::Int(chunk.iter().map(|&x| x as $acc).sum::<$acc>() as i128)
            }
            fn key_range(chunk: &[Self]) -> (u64, u64, u64) {
                if chunk.is_empty() {
                    return (u64::MAX, 0, 0);
                }
                // Native min/max: vectorises, unlike u64 keys.
                let (lo, hi) = chunk
                    .iter()
                    .fold((<$t>::MAX, <$t>::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
                (lo.key(), hi.key(), 0)
            }
        }
    };
}

int_element!(i8, u8, 8, Int, i64, i64);
int_element!(u8, u8, 8, UInt, u64, i64);
int_element!(i16, u16, 16, Int, i64, i64);
int_element!(u16, u16, 16, UInt, u64, i64);
int_element!(i32, u32, 32, Int, i64, i64);
int_element!(u32, u32, 32, UInt, u64, i64);
int_element!(i64, u64, 64, Int, i64, i128);
int_element!(u64, u64, 64, UInt, u64, i128);

macro_rules! float_element {
    ($t:ty, $u:ty, $bits:expr) => {
        impl Element for $t {
            const BITS: u32 = $bits;
            #[inline(always)]
            fn key(self) -> u64 {
                let b = self.to_bits();
                let sign = 1 << ($bits - 1);
                (if b & sign != 0 { !b } else { b | sign }) as u64
            }
            #[inline(always)]
            fn from_key(k: u64) -> Self {
                let k = k as $u;
                let sign = 1 << ($bits - 1);
                <$t>::from_bits(if k & sign != 0 { k & !sign } else { !k })
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                self.is_nan()
            }
            fn value(self) -> Value {
                Value::Float(self as f64)
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn mid(a: Self, b: Self) -> f64 {
                ((a + b) / 2.0) as f64
            }
            fn lerp(a: Self, b: Self, t: f64, wide: bool) -> f64 {
                let diff = b - a;
                if wide {
                    let (a, b, diff) = (a as f64, b as f64, diff as f64);
                    return if t >= 0.5 { b - diff * (1.0 - t) } else { a + diff * t };
                }
                (if t >= 0.5 { b - diff * ((1.0 - t) as $t) } else { a + diff * (t as $t) }) as f64
            }
            fn sum_chunk(chunk: &[Self]) -> Sum {
                float_sum(chunk, |x| x as f64)
            }
            fn key_range(chunk: &[Self]) -> (u64, u64, u64) {
                let (mut lo, mut hi, mut nans) = (u64::MAX, 0u64, 0u64);
                for &x in chunk {
                    if x.is_nan() {
                        nans += 1;
                    } else {
                        let k = x.key();
                        lo = lo.min(k);
                        hi = hi.max(k);
                    }
                }
                (lo, hi, nans)
            }
        }
    };
}

float_element!(f32, u32, 32);
float_element!(f64, u64, 64);

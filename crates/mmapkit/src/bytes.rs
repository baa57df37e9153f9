//! Searching byte slices: the kernels [`crate::map::Map`]'s find/count
//! and every whole-file tool in [`crate::scan`] are built on. A bottom
//! module (it imports nothing from the crate), so `map` need not depend on
//! `scan`.
//!
//! All functions take plain slices, so they serve mapped memory and
//! read() buffers alike (the two I/O strategies differ only in I/O).
//! Matches are **non-overlapping**, scanning left to right (like
//! `bytes.count` and `grep -o`): in `aaaa`, `aa` occurs twice.

use memchr::memmem;

/// Offset of the first occurrence of `needle` (the empty needle is found at 0).
pub fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memmem::find(hay, needle)
}

/// Offsets of the non-overlapping occurrences of a non-empty `needle`,
/// left to right.
pub fn find_iter<'a>(hay: &'a [u8], needle: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
    memmem::find_iter(hay, needle)
}

/// Offset of the last occurrence of `needle` (the empty needle is found at the end).
pub fn rfind(hay: &[u8], needle: &[u8]) -> Option<usize> {
    memmem::rfind(hay, needle)
}

/// Number of non-overlapping occurrences; like Python's `bytes.count`,
/// the empty needle occurs `len + 1` times. Single bytes are counted with
/// SIMD (bytecount), which is far faster than a match iterator on dense
/// bytes such as CSV commas or newlines.
pub fn count(hay: &[u8], needle: &[u8]) -> u64 {
    match needle {
        [] => hay.len() as u64 + 1,
        [b] => bytecount::count(hay, *b) as u64,
        _ => memmem::find_iter(hay, needle).count() as u64,
    }
}

/// Whether `needle` has a proper prefix that is also a suffix ("aa",
/// "abab"): only such needles can have overlapping occurrences, so only
/// they need the non-overlapping rule's carry across range boundaries.
pub fn has_border(needle: &[u8]) -> bool {
    // KMP failure function; the last value is the longest proper border.
    let mut fail = vec![0usize; needle.len()];
    let mut k = 0;
    for i in 1..needle.len() {
        while k > 0 && needle[i] != needle[k] {
            k = fail[k - 1];
        }
        if needle[i] == needle[k] {
            k += 1;
        }
        fail[i] = k;
    }
    fail.last().is_some_and(|&b| b > 0)
}

/// Offsets of non-overlapping occurrences, at most `limit` of them.
/// Returns `None` for the empty needle, which has no useful answer.
pub fn find_all(hay: &[u8], needle: &[u8], limit: Option<usize>) -> Option<Vec<u64>> {
    if needle.is_empty() {
        return None;
    }
    let it = memmem::find_iter(hay, needle).map(|o| o as u64);
    Some(match limit {
        Some(n) => it.take(n).collect(),
        None => it.collect(),
    })
}

#[cfg(test)]
mod tests;

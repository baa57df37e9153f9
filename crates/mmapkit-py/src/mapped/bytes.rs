//! Bytes in and out of a map: any Python buffer written into it (through
//! `buffer::View`), a range copied out into one `bytes` object, and
//! searching.

use std::sync::atomic::Ordering;

use mmapkit::map::SharedMap;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::MappedFile;
use crate::buffer::new_bytes;
pub(super) use crate::buffer::with_view;
use crate::errors::IntoPy;

/// Above this many bytes a copy or search releases the GIL.
pub(super) const DETACH_BYTES: usize = 64 * 1024;

/// A copy of the bytes of any bytes-like object (search needles).
pub(super) fn bytes_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    with_view(obj, |v| v.to_vec())
}

/// Clamps Python-style `start`/`end` (negative from the end) to `0..=len`.
fn clamp(i: isize, len: usize) -> usize {
    if i < 0 {
        (len as isize + i).max(0) as usize
    } else {
        (i as usize).min(len)
    }
}

impl MappedFile {
    /// `bytes(m[start:end])`, copied once, with the GIL released for large
    /// copies and truncation reported.
    pub(super) fn copy_out(
        py: Python<'_>,
        m: &SharedMap,
        start: usize,
        end: usize,
    ) -> PyResult<Py<PyBytes>> {
        new_bytes(py, end - start, end - start > DETACH_BYTES, |out| m.read_into(start, out))?
            .py_err()
    }

    pub(super) fn search(
        &self,
        py: Python<'_>,
        sub: &Bound<'_, PyAny>,
        start: Option<isize>,
        end: Option<isize>,
        reverse: bool,
    ) -> PyResult<isize> {
        self.get()?;
        let (needle, len) = {
            let n = bytes_of(sub)?;
            (n, self.get()?.len())
        };
        let start = start.map_or(self.pos.load(Ordering::Relaxed).min(len), |s| clamp(s, len));
        let end = end.map_or(len, |e| clamp(e, len));
        let m = self.get()?;
        if end < start {
            return Ok(-1);
        }
        let run = |a: usize, e: usize| {
            if reverse {
                m.rfind(&needle, a, e)
            } else {
                m.find(&needle, a, e)
            }
        };
        if end - start <= DETACH_BYTES {
            return Ok(run(start, end).py_err()?.map_or(-1, |i| i as isize));
        }
        // The first DETACH_BYTES from where the search starts are searched
        // holding the GIL, as a short search would: a common word is found
        // there without letting the GIL go and taking it back. The rest
        // overlaps them by the needle's length less one, so a match
        // straddling the cut is found whole.
        let keep = needle.len().saturating_sub(1);
        let (near, rest) = if reverse {
            let cut = end - DETACH_BYTES;
            ((cut, end), (start, (cut + keep).min(end)))
        } else {
            let cut = start + DETACH_BYTES;
            ((start, cut), (cut.saturating_sub(keep).max(start), end))
        };
        let r = match run(near.0, near.1).py_err()? {
            Some(i) => Some(i),
            None => py.detach(|| run(rest.0, rest.1)).py_err()?,
        };
        Ok(r.map_or(-1, |i| i as isize))
    }
}

//! Whole-file tools (`mmapkit.count`, `find`, `find_all`, `grep`,
//! `replace`, `keep_lines`): argument conversion and GIL release around
//! the core's `scan` functions.

use std::path::PathBuf;

use mmapkit::scan::{ScanOptions, Strategy};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::PyTypeError;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use crate::errors::IntoPy;

/// A pattern given as bytes (or any buffer) or str (UTF-8).
pub(crate) fn pattern_bytes(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    if let Ok(s) = obj.extract::<String>() {
        return Ok(s.into_bytes());
    }
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(b.as_bytes().to_vec());
    }
    obj.extract::<Vec<u8>>()
        .map_err(|_| PyTypeError::new_err("pattern must be bytes or str"))
}

pub(crate) fn scan_options(strategy: &str, threads: usize) -> PyResult<ScanOptions> {
    let strategy: Strategy = strategy.parse().py_err()?;
    Ok(ScanOptions::new(strategy, threads))
}

/// Number of non-overlapping occurrences of `sub` in the file at `path`
/// (``count(path, b"\n")`` counts lines like ``wc -l``), on `threads`
/// threads (0: all cores).
#[pyfunction]
#[pyo3(signature = (path, sub, *, strategy = "auto", threads = 0))]
pub fn count(py: Python<'_>, path: PathBuf, sub: &Bound<'_, PyAny>, strategy: &str, threads: usize) -> PyResult<u64> {
    let needle = pattern_bytes(sub)?;
    let opts = scan_options(strategy, threads)?;
    py.detach(|| mmapkit::scan::count(&path, &needle, &opts)).py_err()
}

/// Offset of the first (or with ``last=True`` the last) occurrence of
/// `sub`, or -1. A match near the start returns at once.
#[pyfunction]
#[pyo3(signature = (path, sub, *, last = false, strategy = "auto", threads = 0))]
pub fn find(py: Python<'_>, path: PathBuf, sub: &Bound<'_, PyAny>, last: bool, strategy: &str, threads: usize) -> PyResult<i64> {
    let needle = pattern_bytes(sub)?;
    let opts = scan_options(strategy, threads)?;
    let r = py
        .detach(|| if last { mmapkit::scan::rfind(&path, &needle, &opts) } else { mmapkit::scan::find(&path, &needle, &opts) })
        .py_err()?;
    Ok(r.map_or(-1, |o| o as i64))
}

/// Offsets of the non-overlapping occurrences of `sub` (at most `max`),
/// as a numpy int64 array.
#[pyfunction]
#[pyo3(signature = (path, sub, *, max = None, strategy = "auto", threads = 0))]
pub fn find_all<'py>(
    py: Python<'py>,
    path: PathBuf,
    sub: &Bound<'py, PyAny>,
    max: Option<usize>,
    strategy: &str,
    threads: usize,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let needle = pattern_bytes(sub)?;
    let opts = scan_options(strategy, threads)?;
    let offs = py.detach(|| mmapkit::scan::find_all(&path, &needle, max, &opts)).py_err()?;
    Ok(offs.into_iter().map(|o| o as i64).collect::<Vec<_>>().into_pyarray(py))
}

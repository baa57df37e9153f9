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
    obj.extract::<Vec<u8>>().map_err(|_| PyTypeError::new_err("pattern must be bytes or str"))
}

pub(crate) fn scan_options(strategy: &str, threads: Option<i64>) -> PyResult<ScanOptions> {
    let strategy: Strategy = strategy.parse().py_err()?;
    Ok(ScanOptions::new(strategy, crate::exec::threads(threads)?))
}

/// Number of non-overlapping occurrences of `sub` in the file at `path`
/// (``count(path, b"\n")`` counts lines like ``wc -l``). Every tool takes
/// ``threads``: None (or 0) one per core, 1 sequential, n workers.
#[pyfunction]
#[pyo3(signature = (path, sub, *, strategy = "auto", threads = None))]
pub fn count(
    py: Python<'_>,
    path: PathBuf,
    sub: &Bound<'_, PyAny>,
    strategy: &str,
    threads: Option<i64>,
) -> PyResult<u64> {
    let needle = pattern_bytes(sub)?;
    let opts = scan_options(strategy, threads)?;
    py.detach(|| mmapkit::scan::count(&path, &needle, &opts)).py_err()
}

/// Offset of the first (or with ``last=True`` the last) occurrence of
/// `sub`, or -1. A match near the start returns at once.
#[pyfunction]
#[pyo3(signature = (path, sub, *, last = false, strategy = "auto", threads = None))]
pub fn find(
    py: Python<'_>,
    path: PathBuf,
    sub: &Bound<'_, PyAny>,
    last: bool,
    strategy: &str,
    threads: Option<i64>,
) -> PyResult<i64> {
    let needle = pattern_bytes(sub)?;
    let opts = scan_options(strategy, threads)?;
    let r = py
        .detach(|| {
            if last {
                mmapkit::scan::rfind(&path, &needle, &opts)
            } else {
                mmapkit::scan::find(&path, &needle, &opts)
            }
        })
        .py_err()?;
    Ok(r.map_or(-1, |o| o as i64))
}

/// Offsets of the non-overlapping occurrences of `sub` (at most `max`),
/// as a numpy int64 array.
#[pyfunction]
#[pyo3(signature = (path, sub, *, max = None, strategy = "auto", threads = None))]
pub fn find_all<'py>(
    py: Python<'py>,
    path: PathBuf,
    sub: &Bound<'py, PyAny>,
    max: Option<usize>,
    strategy: &str,
    threads: Option<i64>,
) -> PyResult<Bound<'py, PyArray1<i64>>> {
    let needle = pattern_bytes(sub)?;
    let opts = scan_options(strategy, threads)?;
    let offs = py.detach(|| mmapkit::scan::find_all(&path, &needle, max, &opts)).py_err()?;
    Ok(offs.into_iter().map(|o| o as i64).collect::<Vec<_>>().into_pyarray(py))
}

fn grep_options(
    pattern: &Bound<'_, PyAny>,
    ignore_case: bool,
    invert: bool,
    fixed: bool,
    max_count: Option<u64>,
) -> PyResult<mmapkit::scan::grep::GrepOptions> {
    // Bytes: a pattern need not be UTF-8 (the byte rule, as the CLI's).
    Ok(mmapkit::scan::grep::GrepOptions::default()
        .patterns(vec![pattern_bytes(pattern)?])
        .fixed(fixed)
        .ignore_case(ignore_case)
        .invert(invert)
        .max_count(max_count))
}

/// Lines matching the regex `pattern` (regex-crate syntax, like ``grep -E``;
/// matched as bytes, like ``LC_ALL=C grep``: ASCII classes and case folding)
/// as a list of ``(line_number, offset, line)`` (1-based line numbers, byte
/// offset of the line, the line without its newline); with
/// ``only_matching`` one entry per match (its offset and bytes).
#[pyfunction]
#[pyo3(signature = (path, pattern, *, ignore_case = false, invert = false, fixed = false,
                    only_matching = false, max_count = None, strategy = "auto", threads = None))]
#[allow(clippy::too_many_arguments)]
pub fn grep(
    py: Python<'_>,
    path: PathBuf,
    pattern: &Bound<'_, PyAny>,
    ignore_case: bool,
    invert: bool,
    fixed: bool,
    only_matching: bool,
    max_count: Option<u64>,
    strategy: &str,
    threads: Option<i64>,
) -> PyResult<Vec<(u64, u64, Py<PyBytes>)>> {
    let g = grep_options(pattern, ignore_case, invert, fixed, max_count)?;
    let opts = scan_options(strategy, threads)?;
    let lines = py
        .detach(|| mmapkit::scan::grep::grep_lines(&path, &g, only_matching, &opts, None))
        .py_err()?;
    Ok(lines.into_iter().map(|(n, o, t)| (n, o, PyBytes::new(py, &t).unbind())).collect())
}

/// Number of lines matching `pattern` (not matching, with ``invert``),
/// like ``grep -c``.
#[pyfunction]
#[pyo3(signature = (path, pattern, *, ignore_case = false, invert = false, fixed = false,
                    max_count = None, strategy = "auto", threads = None))]
#[allow(clippy::too_many_arguments)]
pub fn grep_count(
    py: Python<'_>,
    path: PathBuf,
    pattern: &Bound<'_, PyAny>,
    ignore_case: bool,
    invert: bool,
    fixed: bool,
    max_count: Option<u64>,
    strategy: &str,
    threads: Option<i64>,
) -> PyResult<u64> {
    let g = grep_options(pattern, ignore_case, invert, fixed, max_count)?;
    let opts = scan_options(strategy, threads)?;
    py.detach(|| mmapkit::scan::grep::grep_count(&path, &g, &opts)).py_err()
}

/// Replaces `pattern` with `replacement` in the file; returns the number of
/// replacements. A regex by default, as for ``grep`` and the CLI (per line,
/// ``$1`` captures, matched as bytes like ``LC_ALL=C sed``), literal bytes
/// with ``fixed=True`` (a regex without metacharacters, replaced by text
/// without ``$``, runs as the literal it is: the same matches).
/// Same-length literal replacements happen
/// in place; others are written to a temporary file that atomically
/// replaces the original (a crash leaves the old or the new file).
#[pyfunction]
#[pyo3(signature = (path, pattern, replacement, *, fixed = false, dry_run = false, backup = None,
                    sync = false, strategy = "auto", threads = None))]
#[allow(clippy::too_many_arguments)]
pub fn replace(
    py: Python<'_>,
    path: PathBuf,
    pattern: &Bound<'_, PyAny>,
    replacement: &Bound<'_, PyAny>,
    fixed: bool,
    dry_run: bool,
    backup: Option<String>,
    sync: bool,
    strategy: &str,
    threads: Option<i64>,
) -> PyResult<u64> {
    let pattern = pattern_bytes(pattern)?;
    let replacement = pattern_bytes(replacement)?;
    // A regex that is a plain literal (and a replacement without `$`)
    // runs as the literal: the core decides, as for the CLI.
    let ropts = mmapkit::scan::replace::ReplaceOptions::for_pattern(&pattern, &replacement, fixed)
        .dry_run(dry_run)
        .backup(backup)
        .sync(sync);
    let opts = scan_options(strategy, threads)?;
    let report = py
        .detach(|| mmapkit::scan::replace::replace(&path, &pattern, &replacement, &ropts, &opts))
        .py_err()?;
    Ok(report.replacements)
}

/// Keeps the first `n` lines of the file, truncating it in place (no
/// rewrite); returns the new size in bytes.
#[pyfunction]
pub fn keep_lines(py: Python<'_>, path: PathBuf, n: u64) -> PyResult<u64> {
    let opts = ScanOptions::default();
    let report = py.detach(|| mmapkit::scan::replace::keep_lines(&path, n, &opts)).py_err()?;
    Ok(report.new_len)
}

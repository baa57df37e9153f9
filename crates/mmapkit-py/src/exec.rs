//! `threads=`: the one conversion every function taking it uses.

use mmapkit::exec::Threads;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;

use crate::errors::IntoPy;

/// `None` or `0`: one thread per core; `1`: sequential; `n`: `n` workers
/// (see `mmapkit::exec`).
pub(crate) fn threads(n: Option<i64>) -> PyResult<Threads> {
    match n {
        None => Ok(Threads::AUTO),
        Some(n) if n < 0 => Err(PyValueError::new_err(format!(
            "threads must be None (or 0) for one per core, or a positive number, got {n}"
        ))),
        Some(n) => Threads::new(usize::try_from(n).unwrap_or(usize::MAX)).py_err(),
    }
}

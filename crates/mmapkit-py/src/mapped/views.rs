//! Zero-copy numpy views of a map.

use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyDict;

use super::MappedFile;

/// A zero-copy numpy array over the map (read-only for read maps).
/// `shape=None` means as many items as fit after `offset`. The array
/// keeps the map open and stays valid when the map grows.
pub(super) fn numpy<'py>(
    slf: &Bound<'py, MappedFile>,
    dtype: Option<&Bound<'py, PyAny>>,
    shape: Option<&Bound<'py, PyAny>>,
    offset: usize,
) -> PyResult<Bound<'py, PyAny>> {
    let py = slf.py();
    let np = py.import("numpy")?;
    let dtype = np.call_method1(
        "dtype",
        (dtype.map_or_else(|| "u1".into_pyobject(py).map(|s| s.into_any()), |d| Ok(d.clone()))?,),
    )?;
    let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
    let len = slf.get().get()?.len();
    if offset > len {
        return Err(PyValueError::new_err(format!(
            "offset {offset} is past the end of the map ({len} bytes)"
        )));
    }
    let (count, shape) = match shape {
        None => ((len - offset) / itemsize.max(1), None),
        Some(s) => {
            let dims: Vec<usize> = match s.extract::<usize>() {
                Ok(n) => vec![n],
                Err(_) => s.extract()?,
            };
            let n: usize = dims.iter().product();
            if n.checked_mul(itemsize).is_none_or(|b| b > len - offset) {
                return Err(PyValueError::new_err(format!(
                    "shape {dims:?} of {itemsize}-byte items does not fit in {} bytes after offset {offset}",
                    len - offset
                )));
            }
            (n, Some(dims))
        }
    };
    let kw = PyDict::new(py);
    kw.set_item("dtype", dtype)?;
    kw.set_item("count", count)?;
    kw.set_item("offset", offset)?;
    let arr = np.call_method("frombuffer", (slf,), Some(&kw))?;
    match shape {
        Some(dims) => arr.call_method1("reshape", (dims,)),
        None => Ok(arr),
    }
}

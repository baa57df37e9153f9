//! `mmapkit.stats` natives: exact statistics over a contiguous numpy array
//! (copied out 8 MiB block by block through `buffer.rs`, never viewed as a
//! slice: another Python thread may write it while the GIL is released) or
//! a file by path (mapped, or read with large `pread`s when not in the
//! page cache: `strategy`). Each returns the source's dtype name with the
//! result so `mmapkit/stats.py` can build numpy-typed results; the work
//! runs with the GIL released.

use std::path::PathBuf;

use mmapkit::scan::Strategy;
use mmapkit::stats::{ArrayFile, DType, Input, Method, Sum, Value};
use mmapkit::with_dtype;
use numpy::{IntoPyArray, PyArray1, PyArrayDescrMethods, PyUntypedArray, PyUntypedArrayMethods};
use pyo3::exceptions::{PyIndexError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::IntoPyObjectExt;

use crate::errors::IntoPy;

/// Runs `f` on the data of `src` (a numpy array, or a path read with
/// `dtype`/`offset`/`count`, or as `.npy` without a dtype, through
/// `strategy`) with the GIL released, on `threads` workers. Returns the
/// dtype name and `f`'s result.
#[allow(clippy::too_many_arguments)]
fn run<R: Send>(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    dtype: Option<&str>,
    offset: u64,
    count: Option<u64>,
    threads: Option<i64>,
    strategy: Option<&str>,
    f: impl Fn(Input<'_>) -> mmapkit::Result<R> + Send + Sync,
) -> PyResult<(&'static str, R)> {
    let threads = crate::exec::threads(threads)?;
    if let Ok(arr) = src.cast::<PyUntypedArray>() {
        if dtype.is_some() || offset != 0 || count.is_some() || strategy.is_some() {
            return Err(PyTypeError::new_err(
                "dtype, offset, count and strategy apply to paths, not to arrays",
            ));
        }
        let descr = arr.dtype();
        let Some(dt) = DType::ALL
            .into_iter()
            .find(|&dt| with_dtype!(dt, |T| descr.is_equiv_to(&numpy::dtype::<T>(py))))
        else {
            return Err(PyTypeError::new_err(format!(
                "unsupported dtype {descr}: mmapkit.stats handles int8..int64, uint8..uint64, float32 and float64 in native byte order"
            )));
        };
        if !arr.is_c_contiguous() {
            return Err(PyValueError::new_err(
                "array is not contiguous (mmapkit.stats copies such arrays; call it through mmapkit.stats)",
            ));
        }
        let len = arr.len();
        // The same bytes as flat uint8 (a view), read by buffer.rs's atomic copies.
        let bytes = arr.call_method1("reshape", (-1,))?.call_method1("view", ("u1",))?;
        let r = crate::buffer::with_contiguous(py, &bytes, |view| {
            let read = |at: usize, dst: &mut [u8]| view.copy_range_to(at, dst);
            threads.install(|| f(Input::copied(dt, len, &read)))?
        })?
        .py_err()?;
        return Ok((dt.name(), r));
    }
    let path: PathBuf = src.extract().map_err(|_| {
        PyTypeError::new_err("expected a numpy array, an object with __array__, or a path")
    })?;
    let dtype = dtype.map(str::parse::<DType>).transpose().py_err()?;
    let strategy: Strategy = strategy.unwrap_or("auto").parse().py_err()?;
    let r = py
        .detach(|| {
            let a = ArrayFile::open(&path, dtype, offset, count, strategy)?;
            let r = threads.install(|| a.with(&f))???;
            Ok((a.dtype().name(), r))
        })
        .py_err()?;
    Ok(r)
}

fn value_obj(py: Python<'_>, v: Value) -> PyResult<Py<PyAny>> {
    match v {
        Value::Int(i) => i.into_py_any(py),
        Value::UInt(u) => u.into_py_any(py),
        Value::Float(f) => f.into_py_any(py),
    }
}

/// One number summing up `src`: `which` is `"median"` or `"mean"`
/// (float64), `"sum"` (exact int, or compensated float), `"min"` or
/// `"max"` (an element, as int or float). Returns (dtype name, value).
#[pyfunction]
#[pyo3(signature = (src, which, *, dtype = None, offset = 0, count = None, skipna = false, threads = None, strategy = None))]
#[allow(clippy::too_many_arguments)]
pub fn stats_reduce(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    which: &str,
    dtype: Option<&str>,
    offset: u64,
    count: Option<u64>,
    skipna: bool,
    threads: Option<i64>,
    strategy: Option<&str>,
) -> PyResult<(&'static str, Py<PyAny>)> {
    enum Out {
        Float(f64),
        Sum(Sum),
        Value(Value),
    }
    let reduce: fn(Input<'_>, bool) -> mmapkit::Result<Out> = match which {
        "median" => |d, skipna| d.median(skipna).map(Out::Float),
        "mean" => |d, skipna| d.mean(skipna).map(Out::Float),
        "sum" => |d, skipna| d.sum(skipna).map(Out::Sum),
        "min" => |d, skipna| d.min(skipna).map(Out::Value),
        "max" => |d, skipna| d.max(skipna).map(Out::Value),
        _ => {
            return Err(PyValueError::new_err(format!(
                "unknown reduction {which:?} (expected median, mean, sum, min or max)"
            )))
        }
    };
    let (name, out) = run(py, src, dtype, offset, count, threads, strategy, |d| reduce(d, skipna))?;
    let obj = match out {
        Out::Float(f) => f.into_py_any(py)?,
        Out::Sum(Sum::Int(i)) => i.into_py_any(py)?,
        Out::Sum(f) => f.as_f64().into_py_any(py)?,
        Out::Value(v) => value_obj(py, v)?,
    };
    Ok((name, obj))
}

/// Quantiles `qs` of `src`: (dtype name, values as int or float); `wide`:
/// float32 data interpolates in float64 (numpy's way for an array of q).
/// No elements: IndexError, as numpy raises (`mmapkit/stats.py` makes it
/// its error that is also a ValueError), for arrays and files alike.
#[pyfunction]
#[pyo3(signature = (src, qs, *, method = "linear", wide = false, dtype = None, offset = 0, count = None, skipna = false, threads = None, strategy = None))]
#[allow(clippy::too_many_arguments)]
pub fn stats_quantile(
    py: Python<'_>,
    src: &Bound<'_, PyAny>,
    qs: Vec<f64>,
    method: &str,
    wide: bool,
    dtype: Option<&str>,
    offset: u64,
    count: Option<u64>,
    skipna: bool,
    threads: Option<i64>,
    strategy: Option<&str>,
) -> PyResult<(&'static str, Vec<Py<PyAny>>)> {
    let method: Method = method.parse().py_err()?;
    let (name, vals) = run(py, src, dtype, offset, count, threads, strategy, |d| {
        if d.is_empty() {
            return Ok(None);
        }
        d.quantiles(&qs, method, skipna, wide).map(Some)
    })?;
    let Some(vals) = vals else {
        return Err(PyIndexError::new_err("cannot take a quantile of an empty array"));
    };
    Ok((name, vals.into_iter().map(|v| value_obj(py, v)).collect::<PyResult<_>>()?))
}

/// (dtype name, counts, edges).
type HistogramResult<'py> = (&'static str, Bound<'py, PyArray1<i64>>, Bound<'py, PyArray1<f64>>);

/// Histogram of `src`: (dtype name, counts, edges).
#[pyfunction]
#[pyo3(signature = (src, bins = 10, range = None, *, dtype = None, offset = 0, count = None, threads = None, strategy = None))]
#[allow(clippy::too_many_arguments)]
pub fn stats_histogram<'py>(
    py: Python<'py>,
    src: &Bound<'py, PyAny>,
    bins: usize,
    range: Option<(f64, f64)>,
    dtype: Option<&str>,
    offset: u64,
    count: Option<u64>,
    threads: Option<i64>,
    strategy: Option<&str>,
) -> PyResult<HistogramResult<'py>> {
    let (name, h) =
        run(py, src, dtype, offset, count, threads, strategy, |d| d.histogram(bins, range))?;
    let counts: Vec<i64> = h.counts.into_iter().map(|c| c as i64).collect();
    Ok((name, counts.into_pyarray(py), h.edges.into_pyarray(py)))
}

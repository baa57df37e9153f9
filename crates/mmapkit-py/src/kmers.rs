//! `mmapkit.kmers`, `mmapkit.kmer_labels` and `mmapkit.RecordWriter`:
//! argument conversion and GIL release around the core's `kmer` and
//! `writer` modules.

use std::path::PathBuf;
use std::sync::RwLock;

use mmapkit::kmer::{self, KmerOptions, Mode, OutFormat};
use mmapkit::with_dtype;
use mmapkit::writer::{HeaderSpec, WriterOptions};
use numpy::{IntoPyArray, PyArrayMethods};
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use crate::errors::IntoPy;

/// Canonical k-mer vectors of every read of a FASTA/FASTQ file (plain or
/// gzip), in input order.
///
/// Without `out`: returns a numpy array of shape ``(reads, dims)``,
/// float32 frequencies (uint32 with ``counts=True``); 136 dims at k=4,
/// ordered like :func:`kmer_labels`. With `out`: writes the vectors there
/// (`format` ``"csv"``, ``"tsv"`` or ``"npy"``; default from the
/// extension) through a temporary file renamed into place (a symlink is
/// written through, the old file's mode kept; `out` being `path`, a FIFO
/// or a directory raises; ``"-"`` streams csv/tsv to stdout), and returns
/// the number of reads. `mode` is ``"single"``, ``"batch"`` or
/// ``"mmap"`` (same result, different designs); `threads` None (or 0)
/// uses one per core, 1 is sequential. Raises :class:`FormatError` naming the record for malformed
/// input.
#[pyfunction]
#[pyo3(signature = (path, k = 4, out = None, *, format = None, counts = false, mode = "mmap", threads = None, sync = false))]
#[allow(clippy::too_many_arguments)]
pub fn kmers(
    py: Python<'_>,
    path: PathBuf,
    k: usize,
    out: Option<PathBuf>,
    format: Option<&str>,
    counts: bool,
    mode: &str,
    threads: Option<i64>,
    sync: bool,
) -> PyResult<Py<PyAny>> {
    let mode: Mode = mode.parse().py_err()?;
    let opts = KmerOptions::default()
        .k(k)
        .counts(counts)
        .mode(mode)
        .threads(crate::exec::threads(threads)?)
        .sync(sync);
    match out {
        Some(out) => {
            let format: OutFormat = match format {
                Some(f) => f.parse().py_err()?,
                None => OutFormat::for_path(&out),
            };
            let s = py.detach(|| kmer::write(&path, &out, format, &opts)).py_err()?;
            Ok(s.records.into_pyobject(py)?.into_any().unbind())
        }
        None => {
            if format.is_some() {
                return Err(PyValueError::new_err(
                    "format= needs out= (without it a numpy array is returned)",
                ));
            }
            let (s, raw) = py.detach(|| kmer::vectors(&path, &opts)).py_err()?;
            let shape = [s.records as usize, s.dims];
            with_dtype!(opts.dtype(), |T| {
                let v: Vec<T> = mmapkit::dtype::collect_le(&raw);
                Ok(v.into_pyarray(py).reshape(shape)?.into_any().unbind())
            })
        }
    }
}

/// The canonical k-mers in vector order (``["AAAA", "AAAC", ...]``).
#[pyfunction]
pub fn kmer_labels(k: usize) -> PyResult<Vec<String>> {
    Ok(kmer::Kmerizer::new(k).py_err()?.labels())
}

/// Fixed-width records written straight into a mapped output file, by
/// index, from any thread (the GIL is released while copying).
///
/// ``RecordWriter(path, width, n=None, *, header=None, npy=None,
/// sync=False)``: `n` records of `width` bytes, or an output that grows
/// as needed when `n` is None. `header` puts fixed bytes before the
/// records; ``npy=(dtype, row_shape)`` writes a ``.npy`` header whose
/// first axis is the record count (e.g. ``npy=("<f4", (136,))``).
/// Nothing appears at `path` until :meth:`finish` renames the temporary
/// file (``.NAME.mmapkit-PID-N.tmp`` beside it) into place; a crash
/// before that never leaves a complete-looking file. As a context
/// manager it finishes on success and discards the output on an
/// exception. Not picklable (it is an open output).
#[pyclass(module = "mmapkit", frozen)]
pub struct RecordWriter {
    inner: RwLock<Option<mmapkit::writer::RecordWriter>>,
    width: usize,
    path: PathBuf,
}

impl RecordWriter {
    fn with<R>(
        &self,
        f: impl FnOnce(&mmapkit::writer::RecordWriter) -> mmapkit::Result<R>,
    ) -> PyResult<R> {
        let g = self.inner.read().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some(w) => f(w).py_err(),
            None => Err(PyValueError::new_err("the RecordWriter is finished or closed")),
        }
    }
}

#[pymethods]
impl RecordWriter {
    #[new]
    #[pyo3(signature = (path, width, n = None, *, header = None, npy = None, sync = false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        width: usize,
        n: Option<u64>,
        header: Option<Vec<u8>>,
        npy: Option<(String, Vec<u64>)>,
        sync: bool,
    ) -> PyResult<Self> {
        let header = match (header, npy) {
            (Some(_), Some(_)) => {
                return Err(PyValueError::new_err("give header= or npy=, not both"))
            }
            (Some(b), None) => HeaderSpec::Bytes(b),
            (None, Some((dtype, row_shape))) => HeaderSpec::Npy { dtype, row_shape },
            (None, None) => HeaderSpec::None,
        };
        let opts = WriterOptions::default().header(header).sync(sync).grow_records(0);
        let w =
            py.detach(|| mmapkit::writer::RecordWriter::create(&path, width, n, &opts)).py_err()?;
        Ok(RecordWriter { inner: RwLock::new(Some(w)), width, path })
    }

    /// Writes record `i` (exactly `width` bytes).
    fn write(&self, py: Python<'_>, i: u64, data: &[u8]) -> PyResult<()> {
        py.detach(|| self.with(|w| w.write(i, data)))
    }

    /// Writes consecutive records `start, start+1, ...` from `data` (a
    /// multiple of `width` bytes).
    fn write_many(&self, py: Python<'_>, start: u64, data: &[u8]) -> PyResult<()> {
        if !data.len().is_multiple_of(self.width) {
            return Err(PyValueError::new_err(format!(
                "{} bytes are not whole records of {} bytes",
                data.len(),
                self.width
            )));
        }
        py.detach(|| {
            self.with(|w| {
                for (j, rec) in data.chunks_exact(self.width).enumerate() {
                    w.write(start + j as u64, rec)?;
                }
                Ok(())
            })
        })
    }

    /// Drops the pages of records below `upto` from memory (they stay in
    /// the page cache and reach the disk normally).
    fn release(&self, py: Python<'_>, upto: u64) -> PyResult<()> {
        py.detach(|| self.with(|w| w.release(upto)))
    }

    /// Completes the file: checks every record was written once, writes
    /// the final header, trims, fsyncs if asked, renames into place.
    /// Returns the number of records.
    fn finish(&self, py: Python<'_>) -> PyResult<u64> {
        let w = self.inner.write().unwrap_or_else(|e| e.into_inner()).take();
        match w {
            Some(w) => py.detach(|| w.finish()).py_err(),
            None => Err(PyValueError::new_err("the RecordWriter is finished or closed")),
        }
    }

    /// Discards the output (removes the temporary file); the destination
    /// is left as it was.
    fn abort(&self) {
        drop(self.inner.write().unwrap_or_else(|e| e.into_inner()).take());
    }

    /// Bytes per record.
    #[getter]
    fn width(&self) -> usize {
        self.width
    }

    /// The destination path.
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }

    /// Records so far: `n` if given, else the highest index written + 1.
    #[getter]
    fn records(&self) -> PyResult<u64> {
        self.with(|w| Ok(w.records()))
    }

    fn __enter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    #[pyo3(signature = (*args))]
    fn __exit__(&self, py: Python<'_>, args: &Bound<'_, PyTuple>) -> PyResult<bool> {
        let failed = args.get_item(0).map(|t| !t.is_none()).unwrap_or(false);
        if failed {
            self.abort();
        } else if self.inner.read().unwrap_or_else(|e| e.into_inner()).is_some() {
            self.finish(py)?;
        }
        Ok(false)
    }

    fn __repr__(&self) -> String {
        let state = if self.inner.read().unwrap_or_else(|e| e.into_inner()).is_some() {
            "open"
        } else {
            "closed"
        };
        format!(
            "<mmapkit.RecordWriter path={:?} width={} {state}>",
            self.path.display().to_string(),
            self.width
        )
    }
}

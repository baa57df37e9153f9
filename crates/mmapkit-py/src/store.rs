//! Array stores and shared-memory segments: the native halves of
//! `mmapkit.ArrayStore` and `mmapkit.SharedArray` (dtype handling and the
//! numpy-facing API are in `python/mmapkit/arrays.py`).
//!
//! Both are `NpyBuffer`s: a `.npy` array's bytes lent through the buffer
//! protocol, so numpy views are zero-copy and keep the object (and its
//! mapping) alive. `close()` while views exist finishes what it can (trim,
//! flush) and defers unmapping until the last view is gone.

use std::any::Any;
use std::path::PathBuf;

use mmapkit::store::npy::Header;
use mmapkit::store::{self, ArrayStore, Segment, StoreOptions};
use numpy::{IntoPyArray, PyArray1};
use pyo3::ffi;
use pyo3::prelude::*;

use crate::buffer::{u64s, with_contiguous, with_u64s_and_out, Exported};
use crate::errors::IntoPy;

/// What a store and a segment share: a `.npy` array mapped in memory.
trait NpyData: Send + Any {
    /// The header as last published (a store's shape[0] is its length).
    fn header(&self) -> &Header;
    /// The array's bytes: (pointer, length); they never move.
    fn bytes(&self) -> (*const u8, usize);
    fn data_offset(&self) -> usize;
    fn is_writable(&self) -> bool;
    /// What close() does before unmapping.
    fn finish(&mut self) -> mmapkit::Result<()> {
        Ok(())
    }
    fn as_any(&mut self) -> &mut dyn Any;
}

impl NpyData for ArrayStore {
    fn header(&self) -> &Header {
        ArrayStore::header(self)
    }
    fn bytes(&self) -> (*const u8, usize) {
        (self.data_ptr(), self.data().len())
    }
    fn data_offset(&self) -> usize {
        ArrayStore::data_offset(self)
    }
    fn is_writable(&self) -> bool {
        ArrayStore::is_writable(self)
    }
    /// Trims and flushes.
    fn finish(&mut self) -> mmapkit::Result<()> {
        self.release()
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

impl NpyData for Segment {
    fn header(&self) -> &Header {
        Segment::header(self)
    }
    fn bytes(&self) -> (*const u8, usize) {
        (self.data_ptr(), self.nbytes())
    }
    fn data_offset(&self) -> usize {
        Segment::data_offset(self)
    }
    fn is_writable(&self) -> bool {
        Segment::is_writable(self)
    }
    fn as_any(&mut self) -> &mut dyn Any {
        self
    }
}

/// The base of `ArrayStoreCore` and `SharedSegment`: the array's bytes
/// through the buffer protocol (writable unless opened read-only), its
/// path and header, and close (unmapping waits for exported views).
#[pyclass(module = "mmapkit._native", name = "_NpyBuffer", subclass, frozen)]
pub struct NpyBuffer {
    data: Exported<Box<dyn NpyData>>,
    path: PathBuf,
}

impl NpyBuffer {
    fn new<T: NpyData>(data: T, path: PathBuf, closed_msg: &'static str) -> Self {
        NpyBuffer { data: Exported::new(Box::new(data), closed_msg), path }
    }

    fn with<R>(&self, f: impl FnOnce(&mut dyn NpyData) -> R) -> PyResult<R> {
        self.data.with(|d| f(d.as_mut()))
    }

    /// Runs `f` on the subclass's own core type.
    fn with_as<T: NpyData, R>(&self, f: impl FnOnce(&mut T) -> R) -> PyResult<R> {
        self.data
            .with(|d| f(d.as_any().downcast_mut::<T>().expect("a subclass holds its own type")))
    }
}

#[pymethods]
impl NpyBuffer {
    /// Finishes (a store trims and flushes) and unmaps; unmapping waits
    /// for live views.
    pub(crate) fn close(&self, py: Python<'_>) -> PyResult<()> {
        self.data.close(|d| py.detach(|| d.finish()).py_err())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.data.is_closed()
    }
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    #[getter]
    fn descr(&self) -> PyResult<String> {
        self.with(|d| d.header().descr.clone())
    }
    #[getter]
    fn shape(&self) -> PyResult<Vec<u64>> {
        self.with(|d| d.header().shape.clone())
    }
    /// Bytes lent through the buffer protocol.
    #[getter]
    fn nbytes(&self) -> PyResult<usize> {
        self.with(|d| d.bytes().1)
    }
    #[getter]
    fn data_offset(&self) -> PyResult<usize> {
        self.with(|d| d.data_offset())
    }
    #[getter]
    fn writable(&self) -> PyResult<bool> {
        self.with(|d| d.is_writable())
    }

    /// Exposes the array's bytes (read-only unless writable). The address
    /// never changes (a store grows in place), so views stay valid.
    #[allow(unsafe_code)] // PyO3 requires the slot to be an `unsafe fn`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        // SAFETY: the bytes stay mapped while the value is held (growth
        // never moves them, trimming keeps them), and the value is dropped
        // only once no export is counted.
        unsafe {
            slf.get().data.get_buffer(slf.as_any(), view, flags, |d| {
                let (ptr, len) = d.bytes();
                (ptr, len, !d.is_writable())
            })
        }
    }

    #[allow(unsafe_code)] // PyO3 requires the slot to be an `unsafe fn`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.data.release_buffer();
    }
}

/// The native half of `mmapkit.ArrayStore`: a growable `.npy` file.
#[pyclass(module = "mmapkit._native", extends = NpyBuffer, frozen)]
pub struct ArrayStoreCore {}

impl ArrayStoreCore {
    pub(crate) fn wrap(py: Python<'_>, store: ArrayStore, path: PathBuf) -> PyResult<Py<Self>> {
        let path = std::path::absolute(&path).unwrap_or(path);
        let base = NpyBuffer::new(store, path, "the ArrayStore is closed");
        Py::new(py, PyClassInitializer::from(base).add_subclass(ArrayStoreCore {}))
    }
}

/// The store of `slf`, for `f`.
pub(crate) fn store<R>(
    slf: &Bound<'_, ArrayStoreCore>,
    f: impl FnOnce(&mut ArrayStore) -> R,
) -> PyResult<R> {
    slf.as_super().get().with_as(f)
}

fn options(chunk_bytes: u64, reserve: Option<usize>, capacity: u64) -> StoreOptions {
    let o = StoreOptions::default().capacity_rows(capacity).chunk_bytes(chunk_bytes);
    match reserve {
        Some(r) => o.reserve(r),
        None => o,
    }
}

#[pymethods]
impl ArrayStoreCore {
    /// Creates (atomically replacing) an empty store.
    #[staticmethod]
    #[allow(clippy::too_many_arguments)] // mirrors the Python signature
    #[pyo3(signature = (path, descr, itemsize, row_shape, capacity = 0, chunk_bytes = 1048576, reserve = None))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        descr: &str,
        itemsize: usize,
        row_shape: Vec<u64>,
        capacity: u64,
        chunk_bytes: u64,
        reserve: Option<usize>,
    ) -> PyResult<Py<Self>> {
        let opts = options(chunk_bytes, reserve, capacity);
        let s =
            py.detach(|| ArrayStore::create(&path, descr, itemsize, &row_shape, &opts)).py_err()?;
        Self::wrap(py, s, path)
    }

    /// Opens an existing `.npy` file, read-only or as the one writer.
    #[staticmethod]
    #[pyo3(signature = (path, writable, itemsize = None, chunk_bytes = 1048576, reserve = None))]
    fn open(
        py: Python<'_>,
        path: PathBuf,
        writable: bool,
        itemsize: Option<usize>,
        chunk_bytes: u64,
        reserve: Option<usize>,
    ) -> PyResult<Py<Self>> {
        let opts = options(chunk_bytes, reserve, 0);
        let s = py.detach(|| ArrayStore::open_with(&path, writable, itemsize, &opts)).py_err()?;
        Self::wrap(py, s, path)
    }

    /// Appends whole rows given as a C-contiguous byte buffer; returns the
    /// new row count. The rows are published (header rewritten) after they
    /// are written.
    fn append(slf: &Bound<'_, Self>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        store(slf, |s| {
            with_contiguous(slf.py(), data, |v| {
                let n = s.whole_rows(v.len())?;
                // Straight from the caller's buffer into the new rows.
                s.append_with(n, |dst| {
                    v.copy_to(dst);
                    Ok::<_, std::convert::Infallible>(())
                })
                .map(|r| r.unwrap_or_else(|e| match e {}))
            })
        })??
        .py_err()
    }

    /// Makes room for `rows` more rows (allocated on disk).
    fn reserve(slf: &Bound<'_, Self>, rows: u64) -> PyResult<()> {
        store(slf, |s| slf.py().detach(|| s.reserve_rows(rows)))?.py_err()
    }

    /// Readers: sees rows appended since; returns the row count.
    fn refresh(slf: &Bound<'_, Self>) -> PyResult<u64> {
        store(slf, |s| slf.py().detach(|| s.refresh()))?.py_err()
    }

    /// Syncs data, then header, to disk.
    fn flush(slf: &Bound<'_, Self>) -> PyResult<()> {
        store(slf, |s| slf.py().detach(|| s.flush()))?.py_err()
    }

    /// Writers: cuts the published row count back to `rows` (≤ len) and
    /// flushes (the cut rows become capacity).
    fn truncate(slf: &Bound<'_, Self>, rows: u64) -> PyResult<()> {
        store(slf, |s| slf.py().detach(|| s.truncate_rows(rows)))?.py_err()
    }

    /// Copies rows `rows` (a C-contiguous uint64 buffer) into `out` (a
    /// writable C-contiguous buffer of `len(rows)` rows), with the GIL
    /// released, on up to `threads` workers (default: one per core) when
    /// the gather is large enough to split.
    #[pyo3(signature = (rows, out, threads = None))]
    fn gather(
        slf: &Bound<'_, Self>,
        rows: &Bound<'_, PyAny>,
        out: &Bound<'_, PyAny>,
        threads: Option<i64>,
    ) -> PyResult<()> {
        let py = slf.py();
        let threads = crate::exec::threads(threads)?;
        let r = store(slf, |s| {
            with_u64s_and_out(py, rows, out, |rows, out| {
                // Straight from the mapping into `out`, with atomic stores (see `buffer`).
                s.gather_rows_with(rows, out.len(), threads, |at, src| out.write_at(at, src))
            })
        })?;
        r?.py_err()
    }

    /// Rows `rows` (a C-contiguous uint64 buffer) gathered into a new
    /// array, with the GIL released, on up to `threads` workers (default:
    /// one per core) when the gather is large enough to split: `uint64`
    /// words holding `len(rows)` × `row_bytes` bytes (the last word padded;
    /// the caller views them as bytes). The memory is this call's own until
    /// it returns, so rows are copied with plain `memcpy`s, not the atomic
    /// stores `gather` needs for a caller's buffer.
    #[pyo3(signature = (rows, threads = None))]
    fn take<'py>(
        slf: &Bound<'py, Self>,
        rows: &Bound<'py, PyAny>,
        threads: Option<i64>,
    ) -> PyResult<Bound<'py, PyArray1<u64>>> {
        let py = slf.py();
        let threads = crate::exec::threads(threads)?;
        let rows = u64s(py, rows)?;
        let words = store(slf, |s| py.detach(|| s.take_rows(&rows, threads)))?.py_err()?;
        Ok(words.into_pyarray(py))
    }

    /// FileTruncatedError if another process truncated the file under the
    /// first `rows` rows (pages already lost, or the file now shorter than
    /// them); iterators over views call it before each batch and at the end.
    fn check_rows(slf: &Bound<'_, Self>, rows: u64) -> PyResult<()> {
        store(slf, |s| s.check_rows(rows))?.py_err()
    }

    /// Reads one byte of every page of rows `[lo, hi)` (faulting them in)
    /// and raises FileTruncatedError if any was lost to a truncation: Ok
    /// means those rows were the file's when looked at. Iterators of
    /// zero-copy batches call it before they hand one out.
    fn check_read(slf: &Bound<'_, Self>, lo: u64, hi: u64) -> PyResult<()> {
        store(slf, |s| s.check_read(lo, hi))?.py_err()
    }

    /// Gives unused capacity back to the file system.
    fn trim(slf: &Bound<'_, Self>) -> PyResult<()> {
        store(slf, |s| s.trim())?.py_err()
    }

    /// The shape of one row (the `.npy` shape without its first axis).
    #[getter]
    fn row_shape(slf: &Bound<'_, Self>) -> PyResult<Vec<u64>> {
        store(slf, |s| s.row_shape().to_vec())
    }
    /// Bytes per element.
    #[getter]
    fn itemsize(slf: &Bound<'_, Self>) -> PyResult<usize> {
        store(slf, |s| s.item_size())
    }
    /// Bytes per row.
    #[getter]
    fn row_bytes(slf: &Bound<'_, Self>) -> PyResult<usize> {
        store(slf, |s| s.row_bytes())
    }
    /// Rows that fit without allocating more (a reader: its length).
    #[getter]
    fn capacity(slf: &Bound<'_, Self>) -> PyResult<u64> {
        store(slf, |s| s.capacity())
    }

    fn __len__(slf: &Bound<'_, Self>) -> PyResult<usize> {
        store(slf, |s| s.len() as usize)
    }
}

/// The native half of `mmapkit.SharedArray`: a shared-memory segment
/// holding a `.npy` array. close() releases this handle (the memory when
/// no views remain); the last handle with unlink_on_close removes the name.
#[pyclass(module = "mmapkit._native", extends = NpyBuffer, frozen)]
pub struct SharedSegment {}

impl SharedSegment {
    fn wrap(py: Python<'_>, seg: Segment) -> PyResult<Py<Self>> {
        let path = seg.path().to_owned();
        let base = NpyBuffer::new(seg, path, "the SharedArray is closed");
        Py::new(py, PyClassInitializer::from(base).add_subclass(SharedSegment {}))
    }
}

/// The segment of `slf`, for `f`.
fn segment<R>(slf: &Bound<'_, SharedSegment>, f: impl FnOnce(&mut Segment) -> R) -> PyResult<R> {
    slf.as_super().get().with_as(f)
}

#[pymethods]
impl SharedSegment {
    /// Creates a named segment at `path` (EEXIST if it exists), zeroed and
    /// allocated (DiskFullError when the file system is too small).
    #[staticmethod]
    #[pyo3(signature = (path, descr, itemsize, shape, unlink_on_close = true))]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        descr: &str,
        itemsize: usize,
        shape: Vec<u64>,
        unlink_on_close: bool,
    ) -> PyResult<Py<Self>> {
        let seg = py
            .detach(|| Segment::create(&path, descr, itemsize, &shape, unlink_on_close))
            .py_err()?;
        Self::wrap(py, seg)
    }

    /// Attaches to the segment (or `.npy` file) at `path`.
    #[staticmethod]
    #[pyo3(signature = (path, writable = true, unlink_on_close = true))]
    fn attach(
        py: Python<'_>,
        path: PathBuf,
        writable: bool,
        unlink_on_close: bool,
    ) -> PyResult<Py<Self>> {
        let seg = py.detach(|| Segment::attach(&path, writable, unlink_on_close)).py_err()?;
        Self::wrap(py, seg)
    }

    /// An anonymous (memfd) segment, shared with children forked later.
    #[staticmethod]
    fn anonymous(
        py: Python<'_>,
        descr: &str,
        itemsize: usize,
        shape: Vec<u64>,
    ) -> PyResult<Py<Self>> {
        let seg = py.detach(|| Segment::anonymous(descr, itemsize, &shape)).py_err()?;
        Self::wrap(py, seg)
    }

    /// Whether closing the last handle removes the name (see
    /// `Segment::set_unlink_on_close`).
    fn set_unlink_on_close(slf: &Bound<'_, Self>, on: bool) -> PyResult<()> {
        segment(slf, |s| s.set_unlink_on_close(on))
    }

    /// Removes the name now (existing mappings stay valid).
    fn unlink(slf: &Bound<'_, Self>) -> PyResult<()> {
        segment(slf, |s| s.unlink())?.py_err()
    }

    /// Whether the segment has no name (a memfd, shared by inheritance only).
    #[getter]
    fn is_anonymous(slf: &Bound<'_, Self>) -> PyResult<bool> {
        segment(slf, |s| s.is_anonymous())
    }
}

/// Makes `path` a sparse file of `size` bytes, instantly (creates it if
/// missing; never shrinks an existing file).
#[pyfunction]
pub fn sparse(py: Python<'_>, path: PathBuf, size: i64) -> PyResult<()> {
    // Sizes as os.truncate takes them: beyond off_t is OverflowError (the
    // i64 conversion), negative is EINVAL.
    let size = u64::try_from(size).map_err(|_| {
        pyo3::exceptions::PyOSError::new_err((
            libc::EINVAL,
            "Invalid argument",
            path.display().to_string(),
        ))
    })?;
    py.detach(|| store::sparse(&path, size)).py_err()
}

/// Reads a `.npy` header: (descr literal, fortran_order, shape, data offset).
#[pyfunction]
pub fn npy_header(py: Python<'_>, path: PathBuf) -> PyResult<(String, bool, Vec<u64>, usize)> {
    let (h, off) = py.detach(|| store::array::read_header_of(&path)).py_err()?;
    Ok((h.descr, h.fortran_order, h.shape, off))
}

/// The file path of shared-memory segment `name` (in `dir`, default /dev/shm),
/// as a `str`: every `SharedArray.attach` by name calls this, and a
/// `pathlib.Path` took 6 of the 8 microseconds.
#[pyfunction]
#[pyo3(signature = (name, dir = None))]
pub fn segment_path(name: &str, dir: Option<PathBuf>) -> PyResult<std::ffi::OsString> {
    store::shared::segment_path(name, dir.as_deref()).map(PathBuf::into_os_string).py_err()
}

/// Removes the temp files that writers of `path` which died left beside it
/// (the core's `fs` naming: only those of processes that no longer
/// exist); returns how many.
#[pyfunction]
pub fn remove_stale_temp_files(path: PathBuf) -> usize {
    mmapkit::fs::remove_stale_temp_files_of(&path)
}

/// Creates directory `path` and its missing parents, durably (the core's
/// `fs::create_dir_durably`: the parent of each new directory is fsynced).
#[pyfunction]
pub fn create_dir_durably(py: Python<'_>, path: PathBuf) -> PyResult<()> {
    py.detach(|| mmapkit::fs::create_dir_durably(&path)).py_err()
}

/// Removes the file `path` and fsyncs its directory (the core's
/// `fs::remove_file_durably`); False when there was nothing to remove.
#[pyfunction]
pub fn remove_file_durably(py: Python<'_>, path: PathBuf) -> PyResult<bool> {
    py.detach(|| mmapkit::fs::remove_file_durably(&path)).py_err()
}

/// Writes `data` to `path` atomically: a temp file beside it, fsync,
/// rename over `path`, directory fsync (the core's `fs::AtomicFile`).
/// Readers see the old file or the new one, never a mix.
#[pyfunction]
pub fn write_file_atomic(py: Python<'_>, path: PathBuf, data: &Bound<'_, PyAny>) -> PyResult<()> {
    with_contiguous(py, data, |v| -> PyResult<()> {
        use std::io::Write;
        let mut f = mmapkit::fs::AtomicFile::create(&path, &[]).py_err()?;
        v.for_chunks(|b| f.file_mut().write_all(b)).map_err(|e| {
            // ENOSPC is DiskFullError, like the core's own writes.
            let args = (e.raw_os_error(), e.to_string(), f.temp_path().to_owned());
            match e.raw_os_error() {
                Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
                    crate::errors::DiskFullError::new_err(args)
                }
                _ => pyo3::exceptions::PyOSError::new_err(args),
            }
        })?;
        f.commit(true).py_err()
    })?
}

/// Groups of rows of several stores gathered in order by a background
/// thread of the Rust core, up to `depth` groups ahead (see the core's
/// `store::GatherAhead`): each item is a tuple of one `uint64` words array
/// per store, as `ArrayStoreCore.take` returns them. The thread works on
/// read-only handles of its own (the stores may be closed meanwhile) and
/// never needs the GIL; `__next__` waits with the GIL released. Dropping
/// the iterator stops the thread after its current gather.
#[pyclass(module = "mmapkit._native", frozen)]
pub struct GatherAhead {
    inner: std::sync::Mutex<store::GatherAhead>,
}

#[pymethods]
impl GatherAhead {
    /// Starts gathering `rows[lo:hi]` (a C-contiguous uint64 buffer) of
    /// every store in `stores` for each `(lo, hi)` of `groups`, each
    /// gather on up to `threads` workers (default: one per core).
    #[new]
    #[pyo3(signature = (stores, rows, groups, depth = 2, threads = None))]
    fn new(
        py: Python<'_>,
        stores: Vec<Bound<'_, ArrayStoreCore>>,
        rows: &Bound<'_, PyAny>,
        groups: Vec<(usize, usize)>,
        depth: usize,
        threads: Option<i64>,
    ) -> PyResult<Self> {
        let threads = crate::exec::threads(threads)?;
        let rows = u64s(py, rows)?;
        let readers = stores
            .iter()
            .map(|s| store(s, |st| st.reader())?.py_err())
            .collect::<PyResult<Vec<_>>>()?;
        let groups = groups.into_iter().map(|(lo, hi)| lo..hi).collect();
        let inner = store::GatherAhead::start(readers, rows, groups, depth, threads).py_err()?;
        Ok(GatherAhead { inner: std::sync::Mutex::new(inner) })
    }

    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__<'py>(&self, py: Python<'py>) -> PyResult<Option<Bound<'py, pyo3::types::PyTuple>>> {
        let got = py.detach(|| self.inner.lock().unwrap_or_else(|e| e.into_inner()).next());
        match got {
            None => Ok(None),
            Some(Err(e)) => Err(e).py_err(),
            Some(Ok(parts)) => {
                let arrays = parts.into_iter().map(|w| w.into_pyarray(py));
                Ok(Some(pyo3::types::PyTuple::new(py, arrays)?))
            }
        }
    }
}

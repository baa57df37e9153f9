//! Array stores and shared-memory segments: the native halves of
//! `mmapkit.ArrayStore` and `mmapkit.SharedArray` (dtype handling and the
//! numpy-facing API are in `python/mmapkit/arrays.py`).
//!
//! Both expose their data through the buffer protocol, so numpy views are
//! zero-copy and keep the object (and its mapping) alive. `close()` while
//! views exist finishes what it can (trim, flush) and defers unmapping
//! until the last view is gone.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard};

use mmapkit::store::{self, ArrayStore, Segment, StoreOptions};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

use crate::errors::IntoPy;

fn closed_err(what: &str) -> PyErr {
    PyValueError::new_err(format!("{what} is closed"))
}

/// Runs `f` over the bytes of a C-contiguous byte buffer (Python passes
/// `array.view(np.uint8)`) with the GIL released.
fn with_buffer<R: Send>(py: Python<'_>, data: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R + Send) -> PyResult<R> {
    let buf = PyBuffer::<u8>::get(data)?;
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err("the data must be C-contiguous"));
    }
    let (ptr, len) = (buf.buf_ptr() as usize, buf.len_bytes());
    let r = py.detach(move || {
        // SAFETY: the buffer is exported (held by `buf`, which outlives
        // this call), C-contiguous and `len` bytes long. Passed as usize
        // so the closure is Send.
        let s = unsafe { std::slice::from_raw_parts(ptr as *const u8, len) };
        f(s)
    });
    drop(buf);
    Ok(r)
}

/// Fills a `Py_buffer` for `len` bytes at `ptr`, owned by `obj`.
///
/// # Safety
/// `view` must be the caller's `Py_buffer`; `[ptr, ptr+len)` must stay
/// mapped (and writable unless `readonly`) until the buffer is released.
unsafe fn fill(view: *mut ffi::Py_buffer, obj: &Bound<'_, PyAny>, ptr: *const u8, len: usize, readonly: bool, flags: std::os::raw::c_int) -> PyResult<()> {
    // SAFETY: guaranteed by the caller; FillInfo takes a new reference to
    // `obj` for view->obj.
    let r = unsafe {
        ffi::PyBuffer_FillInfo(view, obj.as_ptr(), ptr as *mut std::ffi::c_void, len as ffi::Py_ssize_t, readonly as std::os::raw::c_int, flags)
    };
    if r != 0 {
        return Err(PyErr::fetch(obj.py()));
    }
    Ok(())
}

/// The native half of `mmapkit.ArrayStore`: a growable `.npy` file.
#[pyclass(module = "mmapkit._native", frozen)]
pub struct ArrayStoreCore {
    store: Mutex<Option<ArrayStore>>,
    exports: AtomicUsize,
    closed: AtomicBool,
    path: PathBuf,
}

impl ArrayStoreCore {
    fn wrap(store: ArrayStore, path: PathBuf) -> Self {
        ArrayStoreCore { store: Mutex::new(Some(store)), exports: AtomicUsize::new(0), closed: AtomicBool::new(false), path }
    }

    fn lock(&self) -> PyResult<MutexGuard<'_, Option<ArrayStore>>> {
        let g = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if g.is_none() || self.closed.load(Ordering::Acquire) {
            return Err(closed_err("the ArrayStore"));
        }
        Ok(g)
    }

    fn with<R>(&self, f: impl FnOnce(&mut ArrayStore) -> R) -> PyResult<R> {
        let mut g = self.lock()?;
        Ok(f(g.as_mut().expect("checked by lock")))
    }
}

fn options(chunk_bytes: u64, reserve: Option<usize>, capacity: u64) -> StoreOptions {
    let d = StoreOptions::default();
    StoreOptions { capacity_rows: capacity, chunk_bytes, reserve: reserve.unwrap_or(d.reserve) }
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
    ) -> PyResult<Self> {
        let opts = options(chunk_bytes, reserve, capacity);
        let s = py.detach(|| ArrayStore::create(&path, descr, itemsize, &row_shape, &opts)).py_err()?;
        Ok(Self::wrap(s, std::path::absolute(&path).unwrap_or(path)))
    }

    /// Opens an existing `.npy` file, read-only or as the one writer.
    #[staticmethod]
    #[pyo3(signature = (path, writable, itemsize = None, chunk_bytes = 1048576, reserve = None))]
    fn open(py: Python<'_>, path: PathBuf, writable: bool, itemsize: Option<usize>, chunk_bytes: u64, reserve: Option<usize>) -> PyResult<Self> {
        let opts = options(chunk_bytes, reserve, 0);
        let s = py.detach(|| ArrayStore::open_with(&path, writable, itemsize, &opts)).py_err()?;
        Ok(Self::wrap(s, std::path::absolute(&path).unwrap_or(path)))
    }

    /// Appends whole rows given as a C-contiguous byte buffer; returns the
    /// new row count. The rows are published (header rewritten) after they
    /// are written.
    fn append(&self, py: Python<'_>, data: &Bound<'_, PyAny>) -> PyResult<u64> {
        let mut g = self.lock()?;
        let s = g.as_mut().expect("checked by lock");
        with_buffer(py, data, |b| s.append(b))?.py_err()
    }

    /// Makes room for `rows` more rows (allocated on disk).
    fn reserve(&self, py: Python<'_>, rows: u64) -> PyResult<()> {
        let mut g = self.lock()?;
        let s = g.as_mut().expect("checked by lock");
        py.detach(|| s.reserve_rows(rows)).py_err()
    }

    /// Readers: sees rows appended since; returns the row count.
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        let mut g = self.lock()?;
        let s = g.as_mut().expect("checked by lock");
        py.detach(|| s.refresh()).py_err()
    }

    /// Syncs data, then header, to disk.
    fn flush(&self, py: Python<'_>) -> PyResult<()> {
        let g = self.lock()?;
        let s = g.as_ref().expect("checked by lock");
        py.detach(|| s.flush()).py_err()
    }

    /// Gives unused capacity back to the file system.
    fn trim(&self) -> PyResult<()> {
        self.with(|s| s.trim())?.py_err()
    }

    /// Trims, flushes and unmaps (unmapping waits for live views).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let mut g = self.store.lock().unwrap_or_else(|e| e.into_inner());
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let Some(s) = g.as_mut() else { return Ok(()) };
        py.detach(|| s.release()).py_err()?;
        if self.exports.load(Ordering::Acquire) == 0 {
            g.take();
        }
        Ok(())
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    #[getter]
    fn descr(&self) -> PyResult<String> {
        self.with(|s| s.descr().to_owned())
    }
    #[getter]
    fn row_shape(&self) -> PyResult<Vec<u64>> {
        self.with(|s| s.row_shape().to_vec())
    }
    #[getter]
    fn itemsize(&self) -> PyResult<usize> {
        self.with(|s| s.item_size())
    }
    #[getter]
    fn row_bytes(&self) -> PyResult<usize> {
        self.with(|s| s.row_bytes())
    }
    #[getter]
    fn data_offset(&self) -> PyResult<usize> {
        self.with(|s| s.data_offset())
    }
    #[getter]
    fn capacity(&self) -> PyResult<u64> {
        self.with(|s| s.capacity())
    }
    #[getter]
    fn writable(&self) -> PyResult<bool> {
        self.with(|s| s.is_writable())
    }

    fn __len__(&self) -> PyResult<usize> {
        self.with(|s| s.len() as usize)
    }

    /// Exposes the published rows' bytes (writable for the writer). The
    /// address never changes as the store grows, so views stay valid.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
        let this = slf.get();
        let (ptr, len, ro) = this.with(|s| (s.data_ptr(), s.data().len(), !s.is_writable()))?;
        // SAFETY: the rows stay mapped while the store lives (growth never
        // moves them, trimming keeps them, unmapping waits for exports).
        unsafe { fill(view, slf.as_any(), ptr, len, ro, flags) }?;
        this.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The native half of `mmapkit.SharedArray`: a shared-memory segment
/// holding a `.npy` array.
#[pyclass(module = "mmapkit._native", frozen)]
pub struct SharedSegment {
    seg: Mutex<Option<Segment>>,
    exports: AtomicUsize,
    closed: AtomicBool,
    path: PathBuf,
}

impl SharedSegment {
    fn wrap(seg: Segment) -> Self {
        let path = seg.path().to_owned();
        SharedSegment { seg: Mutex::new(Some(seg)), exports: AtomicUsize::new(0), closed: AtomicBool::new(false), path }
    }

    fn with<R>(&self, f: impl FnOnce(&Segment) -> R) -> PyResult<R> {
        let g = self.seg.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some(s) if !self.closed.load(Ordering::Acquire) => Ok(f(s)),
            _ => Err(closed_err("the SharedArray")),
        }
    }
}

#[pymethods]
impl SharedSegment {
    /// Creates a named segment at `path` (EEXIST if it exists), zeroed and
    /// allocated (DiskFullError when the file system is too small).
    #[staticmethod]
    #[pyo3(signature = (path, descr, itemsize, shape, unlink_on_close = true))]
    fn create(py: Python<'_>, path: PathBuf, descr: &str, itemsize: usize, shape: Vec<u64>, unlink_on_close: bool) -> PyResult<Self> {
        py.detach(|| Segment::create(&path, descr, itemsize, &shape, unlink_on_close)).py_err().map(Self::wrap)
    }

    /// Attaches to the segment (or `.npy` file) at `path`.
    #[staticmethod]
    #[pyo3(signature = (path, writable = true, unlink_on_close = true))]
    fn attach(py: Python<'_>, path: PathBuf, writable: bool, unlink_on_close: bool) -> PyResult<Self> {
        py.detach(|| Segment::attach(&path, writable, unlink_on_close)).py_err().map(Self::wrap)
    }

    /// An anonymous (memfd) segment, shared with children forked later.
    #[staticmethod]
    fn anonymous(py: Python<'_>, descr: &str, itemsize: usize, shape: Vec<u64>) -> PyResult<Self> {
        py.detach(|| Segment::anonymous(descr, itemsize, &shape)).py_err().map(Self::wrap)
    }

    /// Removes the name now (existing mappings stay valid).
    fn unlink(&self) -> PyResult<()> {
        let g = self.seg.lock().unwrap_or_else(|e| e.into_inner());
        match g.as_ref() {
            Some(s) => s.unlink().py_err(),
            None => Err(closed_err("the SharedArray")),
        }
    }

    /// Releases this handle (the memory when no views remain); the last
    /// handle with unlink_on_close removes the name.
    fn close(&self) {
        let mut g = self.seg.lock().unwrap_or_else(|e| e.into_inner());
        self.closed.store(true, Ordering::Release);
        if self.exports.load(Ordering::Acquire) == 0 {
            g.take();
        }
    }

    #[getter]
    fn closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
    #[getter]
    fn path(&self) -> PathBuf {
        self.path.clone()
    }
    #[getter]
    fn descr(&self) -> PyResult<String> {
        self.with(|s| s.header().descr.clone())
    }
    #[getter]
    fn shape(&self) -> PyResult<Vec<u64>> {
        self.with(|s| s.header().shape.clone())
    }
    #[getter]
    fn nbytes(&self) -> PyResult<usize> {
        self.with(|s| s.nbytes())
    }
    #[getter]
    fn data_offset(&self) -> PyResult<usize> {
        self.with(|s| s.data_offset())
    }
    #[getter]
    fn writable(&self) -> PyResult<bool> {
        self.with(|s| s.is_writable())
    }
    #[getter]
    fn is_anonymous(&self) -> PyResult<bool> {
        self.with(|s| s.is_anonymous())
    }

    /// Exposes the array's bytes (read-only for read-only attachments).
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
        let this = slf.get();
        let (ptr, len, ro) = this.with(|s| (s.data_ptr(), s.nbytes(), !s.is_writable()))?;
        // SAFETY: the segment stays mapped while exports are counted
        // (close defers unmapping until they are released).
        unsafe { fill(view, slf.as_any(), ptr, len, ro, flags) }?;
        this.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        if self.exports.fetch_sub(1, Ordering::AcqRel) == 1 && self.closed.load(Ordering::Acquire) {
            self.seg.lock().unwrap_or_else(|e| e.into_inner()).take();
        }
    }
}

/// Makes `path` a sparse file of `size` bytes, instantly (creates it if
/// missing; never shrinks an existing file).
#[pyfunction]
pub fn sparse(py: Python<'_>, path: PathBuf, size: i64) -> PyResult<()> {
    // Sizes as os.truncate takes them: beyond off_t is OverflowError (the
    // i64 conversion), negative is EINVAL.
    let size = u64::try_from(size).map_err(|_| {
        pyo3::exceptions::PyOSError::new_err((libc::EINVAL, "Invalid argument", path.display().to_string()))
    })?;
    py.detach(|| store::sparse(&path, size)).py_err()
}

/// Reads a `.npy` header: (descr literal, fortran_order, shape, data offset).
#[pyfunction]
pub fn npy_header(py: Python<'_>, path: PathBuf) -> PyResult<(String, bool, Vec<u64>, usize)> {
    let (h, off) = py.detach(|| store::array::read_header_of(&path)).py_err()?;
    Ok((h.descr, h.fortran_order, h.shape, off))
}

/// The file path of shared-memory segment `name` (in `dir`, default /dev/shm).
#[pyfunction]
#[pyo3(signature = (name, dir = None))]
pub fn segment_path(name: &str, dir: Option<PathBuf>) -> PyResult<PathBuf> {
    store::shared::segment_path(name, dir.as_deref()).py_err()
}

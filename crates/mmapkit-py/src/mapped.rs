//! `MappedFile` (mmapkit's own API) and `mmap` (the drop-in for the
//! stdlib class, a subclass with the stdlib constructor).
//!
//! The open map lives in `Mutex<Option<Arc<SharedMap>>>` (a map that hands
//! out no slices, since Python code writes while views exist): every call clones the
//! `Arc` under a short lock and then works without it, so long operations
//! can release the GIL and a concurrent `close()` only drops our handle
//! (the memory goes away when the last in-flight call finishes). Growth is
//! `Map::grow(&self)`, which never moves memory, so it is allowed while
//! buffers are exported; shrinking and moving need the `Arc` to ourselves
//! and no exports.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use mmapkit::map::{self, Advice, Map, MapOptions, Mode, SharedMap};
use numpy::{IntoPyArray, PyArray1};
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyBufferError, PyIndexError, PyOSError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::slice::PySliceIndices;
use pyo3::types::{PyBytes, PyDict, PySlice, PySliceMethods, PyTuple};

use crate::errors::{IntoPy, ReservationExhaustedError};

pub const ACCESS_DEFAULT: i32 = 0;
pub const ACCESS_READ: i32 = 1;
pub const ACCESS_WRITE: i32 = 2;
pub const ACCESS_COPY: i32 = 3;

/// Above this many bytes a copy or search releases the GIL.
const DETACH_BYTES: usize = 64 * 1024;

fn closed_err() -> PyErr {
    PyValueError::new_err("mmap closed or invalid")
}

fn readonly_err() -> PyErr {
    PyTypeError::new_err("mmap can't modify a readonly memory map.")
}

/// Runs `f` over the bytes of any C-contiguous buffer (bytes, bytearray,
/// memoryview, numpy array, another map), without copying.
fn with_bytes<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(&[u8]) -> R) -> PyResult<R> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        return Ok(f(b.as_bytes()));
    }
    let buf = PyBuffer::<u8>::get(obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "a bytes-like object is required, not '{}'",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    if buf.is_c_contiguous() {
        // SAFETY: the buffer is C-contiguous, holds `len_bytes` bytes and
        // stays alive (exported) while `buf` is in scope.
        let s = unsafe { std::slice::from_raw_parts(buf.buf_ptr() as *const u8, buf.len_bytes()) };
        Ok(f(s))
    } else {
        Ok(f(&buf.to_vec(obj.py())?))
    }
}

/// Clamps Python-style `start`/`end` (negative from the end) to `0..=len`.
fn clamp(i: isize, len: usize) -> usize {
    if i < 0 {
        (len as isize + i).max(0) as usize
    } else {
        (i as usize).min(len)
    }
}

/// A memory-mapped file: the stdlib `mmap` API plus empty files, growth
/// that never invalidates views, numpy views, advice, populate, ranged
/// flush, fast search and pickling by path.
#[pyclass(module = "mmapkit", subclass, weakref, frozen)]
pub struct MappedFile {
    map: Mutex<Option<Arc<SharedMap>>>,
    pos: AtomicUsize,
    exports: AtomicUsize,
    access: i32,
    /// Mode string for pickling (`None` for anonymous maps).
    reopen: Option<(PathBuf, &'static str)>,
    to_end: AtomicBool,
    trackfd: bool,
}

impl MappedFile {
    fn new_inner(map: Map, access: i32, reopen: Option<(PathBuf, &'static str)>, to_end: bool, trackfd: bool) -> Self {
        MappedFile {
            map: Mutex::new(Some(Arc::new(map.into_shared()))),
            pos: AtomicUsize::new(0),
            exports: AtomicUsize::new(0),
            access,
            reopen,
            to_end: AtomicBool::new(to_end),
            trackfd,
        }
    }

    fn slot(&self) -> std::sync::MutexGuard<'_, Option<Arc<SharedMap>>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The open map, or ValueError("mmap closed or invalid").
    pub(crate) fn get(&self) -> PyResult<Arc<SharedMap>> {
        self.slot().clone().ok_or_else(closed_err)
    }

    fn writable(&self) -> PyResult<Arc<SharedMap>> {
        let m = self.get()?;
        if m.is_writable() {
            Ok(m)
        } else {
            Err(readonly_err())
        }
    }

    /// `bytes(m[start:end])`, copied once (PyBytes::new_with would zero
    /// the buffer first: a whole extra pass over large reads), with the GIL
    /// released for large copies and truncation reported.
    fn copy_out(py: Python<'_>, m: &SharedMap, start: usize, end: usize) -> PyResult<Py<PyBytes>> {
        let n = end - start;
        // SAFETY: a NULL source asks CPython for an uninitialised bytes
        // object of `n` bytes, which we own until it is returned.
        let obj = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), n as ffi::Py_ssize_t) };
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `obj` is a new reference to a bytes object.
        let bytes: Bound<'_, PyBytes> = unsafe { Bound::from_owned_ptr(py, obj).cast_into_unchecked() };
        // SAFETY: PyBytes_AsString of a bytes object never fails; the
        // buffer holds `n` bytes. Passed as usize so the closure is Send.
        let dst = unsafe { ffi::PyBytes_AsString(obj) } as usize;
        let copy = move || {
            // SAFETY: `dst` has room for `n` (uninitialised) bytes that
            // nothing else sees until we return the object.
            let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut std::mem::MaybeUninit<u8>, n) };
            m.read_into(start, out)
        };
        if n > DETACH_BYTES { py.detach(copy) } else { copy() }.py_err()?;
        Ok(bytes.unbind())
    }

    fn resize_impl(&self, py: Python<'_>, new_len: usize) -> PyResult<()> {
        let m = self.get()?;
        if new_len >= m.len() {
            match py.detach(|| m.grow(new_len)) {
                Err(mmapkit::Error::ReservationExhausted { .. }) if self.exports.load(Ordering::Acquire) == 0 => {}
                other => return other.py_err(),
            }
        } else if self.exports.load(Ordering::Acquire) > 0 {
            return Err(PyBufferError::new_err(
                "mmap can't shrink with extant buffers exported (growing is fine).",
            ));
        }
        drop(m);
        let mut slot = self.slot();
        let arc = slot.as_mut().ok_or_else(closed_err)?;
        match Arc::get_mut(arc) {
            Some(m) => m.resize(new_len).py_err(),
            None => Err(ReservationExhaustedError::new_err(
                "mmap is in use by another thread; cannot shrink or move it now",
            )),
        }
    }

    /// The map and the in-bounds offset for an integer key (negative counts
    /// from the end). As the stdlib: a closed map is refused first, and
    /// again after converting the key (its __index__ may close the map).
    fn item_offset(&self, key: &Bound<'_, PyAny>) -> PyResult<(Arc<SharedMap>, usize)> {
        self.get()?;
        let i: isize = key.extract().map_err(|e: PyErr| {
            if e.is_instance_of::<PyOverflowError>(key.py()) {
                PyIndexError::new_err("cannot fit 'int' into an index-sized integer")
            } else {
                PyTypeError::new_err("mmap indices must be integers")
            }
        })?;
        let m = self.get()?;
        let len = m.len() as isize;
        let i = if i < 0 { i + len } else { i };
        if i < 0 || i >= len {
            return Err(PyIndexError::new_err("mmap index out of range"));
        }
        Ok((m, i as usize))
    }

    /// The map and resolved indices of a slice key (same ordering rule).
    fn slice_indices(&self, slice: &Bound<'_, PySlice>) -> PyResult<(Arc<SharedMap>, PySliceIndices)> {
        let len = self.get()?.len();
        let ix = slice.indices(len as isize)?;
        Ok((self.get()?, ix))
    }

    fn search(&self, py: Python<'_>, sub: &Bound<'_, PyAny>, start: Option<isize>, end: Option<isize>, reverse: bool) -> PyResult<isize> {
        self.get()?;
        let (needle, len) = {
            let n = with_bytes(sub, |b| b.to_vec())?;
            (n, self.get()?.len())
        };
        let start = start.map_or(self.pos.load(Ordering::Relaxed).min(len), |s| clamp(s, len));
        let end = end.map_or(len, |e| clamp(e, len));
        let m = self.get()?;
        if end < start {
            return Ok(-1);
        }
        let run = || if reverse { m.rfind(&needle, start, end) } else { m.find(&needle, start, end) };
        let r = if end - start > DETACH_BYTES { py.detach(run) } else { run() };
        Ok(r.py_err()?.map_or(-1, |i| i as isize))
    }
}

#[pymethods]
impl MappedFile {
    /// Maps `path`. Modes: "r" read-only, "r+" read-write, "w+" create or
    /// truncate then read-write, "c" copy-on-write. `size` makes a writable
    /// file at least that big (allocated: a full disk fails here, not on a
    /// later write); `length=None` maps to the end of the file. `reserve`
    /// is the address space kept free for growth in place.
    #[new]
    #[pyo3(signature = (path, mode = "r", size = None, offset = 0, length = None, reserve = None))]
    fn py_new(
        py: Python<'_>,
        path: PathBuf,
        mode: &str,
        size: Option<u64>,
        offset: u64,
        length: Option<usize>,
        reserve: Option<usize>,
    ) -> PyResult<Self> {
        let (core_mode, access, reopen, create) = match mode {
            "r" => (Mode::Read, ACCESS_READ, "r", false),
            "r+" => (Mode::ReadWrite, ACCESS_WRITE, "r+", false),
            "w+" => (Mode::ReadWrite, ACCESS_WRITE, "r+", true),
            "c" => (Mode::CopyOnWrite, ACCESS_COPY, "c", false),
            other => {
                return Err(PyValueError::new_err(format!(
                    "invalid mode {other:?}: expected 'r', 'r+', 'w+' or 'c'"
                )))
            }
        };
        let mut opts = MapOptions::new();
        opts.mode(core_mode).offset(offset).create(create).truncate(create);
        if let Some(s) = size {
            if core_mode != Mode::ReadWrite {
                return Err(PyValueError::new_err("size= needs mode 'r+' or 'w+'"));
            }
            opts.size(s);
        }
        if let Some(l) = length {
            opts.len(l);
        }
        if let Some(r) = reserve {
            opts.reserve(r);
        }
        let map = py.detach(|| opts.open(&path)).py_err()?;
        let abs = std::path::absolute(&path).unwrap_or(path);
        Ok(Self::new_inner(map, access, Some((abs, reopen)), length.is_none(), true))
    }

    // ----- lifetime -----------------------------------------------------

    /// Unmaps. Raises BufferError while buffers (memoryviews, numpy views)
    /// are exported. Closing twice is fine.
    fn close(&self) -> PyResult<()> {
        if self.exports.load(Ordering::Acquire) > 0 {
            return Err(PyBufferError::new_err("cannot close exported pointers exist"));
        }
        self.slot().take();
        Ok(())
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.slot().is_none()
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().get()?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close()
    }

    fn __repr__(&self) -> String {
        match (self.slot().as_ref(), &self.reopen) {
            (None, _) => "<mmapkit.MappedFile closed=True>".to_owned(),
            (Some(m), Some((p, _))) => format!(
                "<mmapkit.MappedFile path={:?} mode={:?} length={} offset={}>",
                p.display().to_string(),
                self.mode(),
                m.len(),
                m.offset()
            ),
            (Some(m), None) => format!("<mmapkit.MappedFile anonymous length={}>", m.len()),
        }
    }

    /// Pickles by path: the receiving process maps the file again instead
    /// of receiving a copy of the data.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.get();
        let m = this.get()?;
        let Some((path, mode)) = &this.reopen else {
            return Err(PyTypeError::new_err(
                "cannot pickle an anonymous map: share it with fork, or map a file",
            ));
        };
        let length = if this.to_end.load(Ordering::Relaxed) { None } else { Some(m.len()) };
        let args = (path.clone(), *mode, None::<u64>, m.offset(), length);
        PyTuple::new(py, [py.get_type::<MappedFile>().into_any(), args.into_pyobject(py)?.into_any()])
    }

    // ----- sizes --------------------------------------------------------

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.get()?.len())
    }

    /// Size of the underlying file. Anonymous maps have no file: OSError
    /// (EBADF), as the stdlib's fstat(-1) gives.
    fn size(&self) -> PyResult<u64> {
        let m = self.get()?;
        if !self.trackfd || m.is_anonymous() {
            return Err(PyOSError::new_err((libc::EBADF, "Bad file descriptor")));
        }
        m.file_len().py_err()
    }

    /// Resizes map and file (like mmap.resize). Growing keeps every view
    /// valid and is allowed while buffers are exported; shrinking is not.
    fn resize(&self, py: Python<'_>, newsize: isize) -> PyResult<()> {
        let m = self.get()?;
        // The stdlib checks exports before anything else; only growing is
        // allowed with them here.
        if newsize < m.len() as isize && self.exports.load(Ordering::Acquire) > 0 {
            return Err(PyBufferError::new_err("mmap can't resize with extant buffers exported."));
        }
        if !(m.is_writable() && (self.access == ACCESS_WRITE || self.access == ACCESS_DEFAULT)) {
            return Err(PyTypeError::new_err("mmap can't resize a readonly or copy-on-write memory map."));
        }
        if !self.trackfd {
            return Err(PyOSError::new_err((libc::EBADF, "resize() needs trackfd=True")));
        }
        if newsize < 0 || (newsize as u64).checked_add(m.offset()).is_none_or(|e| e > isize::MAX as u64) {
            return Err(PyValueError::new_err("new size out of range"));
        }
        drop(m);
        self.resize_impl(py, newsize as usize)
    }

    /// Grows by `nbytes` (extending the file); returns the new length.
    /// Never invalidates views; never raises BufferError.
    fn grow(&self, py: Python<'_>, nbytes: usize) -> PyResult<usize> {
        let m = self.writable()?;
        let new_len = m.len().checked_add(nbytes).ok_or_else(|| PyOverflowError::new_err("length overflows"))?;
        drop(m);
        self.resize_impl(py, new_len)?;
        Ok(new_len)
    }

    /// Re-syncs with the file after another process appended to or
    /// truncated it; clears a FileTruncatedError state. Returns the length.
    fn refresh(&self, py: Python<'_>) -> PyResult<usize> {
        let to_end = self.to_end.load(Ordering::Relaxed);
        let m = self.get()?;
        // Remaps in place: exported buffers and numpy views stay valid.
        py.detach(|| m.resync(to_end)).py_err()
    }

    // ----- file-like interface ------------------------------------------

    /// Reads up to `n` bytes (all remaining bytes when None or negative).
    #[pyo3(signature = (n = None))]
    fn read(&self, py: Python<'_>, n: Option<isize>) -> PyResult<Py<PyBytes>> {
        let m = self.get()?;
        let pos = self.pos.load(Ordering::Relaxed);
        let remaining = m.len().saturating_sub(pos);
        let k = match n {
            Some(n) if n >= 0 => (n as usize).min(remaining),
            _ => remaining,
        };
        let out = Self::copy_out(py, &m, pos.min(m.len()), pos.min(m.len()) + k)?;
        self.pos.store(pos + k, Ordering::Relaxed);
        Ok(out)
    }

    fn read_byte(&self) -> PyResult<u8> {
        let m = self.get()?;
        let pos = self.pos.load(Ordering::Relaxed);
        if pos >= m.len() {
            return Err(PyValueError::new_err("read byte out of range"));
        }
        let b = m.byte_at(pos).py_err()?;
        self.pos.store(pos + 1, Ordering::Relaxed);
        Ok(b)
    }

    /// Reads through the next b"\n" (or to the end).
    fn readline(&self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        let m = self.get()?;
        let pos = self.pos.load(Ordering::Relaxed);
        if pos >= m.len() {
            // Past the end (after a shrink): the position stays, as in the stdlib.
            return Ok(PyBytes::new(py, b"").unbind());
        }
        let end = m.find(b"\n", pos, m.len()).py_err()?.map_or(m.len(), |i| i + 1);
        let out = Self::copy_out(py, &m, pos, end)?;
        self.pos.store(end, Ordering::Relaxed);
        Ok(out)
    }

    /// Writes `data` at the current position; returns the byte count.
    fn write(&self, data: &Bound<'_, PyAny>) -> PyResult<usize> {
        let m = self.get()?;
        with_bytes(data, |b| {
            if !m.is_writable() {
                return Err(readonly_err());
            }
            let pos = self.pos.load(Ordering::Relaxed);
            if pos > m.len() || m.len() - pos < b.len() {
                return Err(PyValueError::new_err("data out of range"));
            }
            m.write_at(pos, b).py_err()?;
            self.pos.store(pos + b.len(), Ordering::Relaxed);
            Ok(b.len())
        })?
    }

    fn write_byte(&self, byte: &Bound<'_, PyAny>) -> PyResult<()> {
        // As the stdlib: closed, the argument, closed again (its __index__
        // may close the map), then read-only.
        self.get()?;
        let byte: u8 = byte.extract()?;
        let m = self.writable()?;
        let pos = self.pos.load(Ordering::Relaxed);
        if pos >= m.len() {
            return Err(PyValueError::new_err("write byte out of range"));
        }
        m.write_at(pos, &[byte]).py_err()?;
        self.pos.store(pos + 1, Ordering::Relaxed);
        Ok(())
    }

    /// Moves the position; `whence` 0 = start, 1 = current, 2 = end.
    /// Returns the new position.
    #[pyo3(signature = (pos, whence = 0))]
    fn seek(&self, pos: isize, whence: i32) -> PyResult<usize> {
        let m = self.get()?;
        let base = match whence {
            0 => 0,
            1 => self.pos.load(Ordering::Relaxed) as isize,
            2 => m.len() as isize,
            _ => return Err(PyValueError::new_err("unknown seek type")),
        };
        match base.checked_add(pos) {
            Some(w) if w >= 0 && w as usize <= m.len() => {
                self.pos.store(w as usize, Ordering::Relaxed);
                Ok(w as usize)
            }
            _ => Err(PyValueError::new_err("seek out of range")),
        }
    }

    fn tell(&self) -> PyResult<usize> {
        self.get()?;
        Ok(self.pos.load(Ordering::Relaxed))
    }

    /// Copies `count` bytes from `src` to `dest` (ranges may overlap).
    #[pyo3(name = "move")]
    fn move_(&self, dest: isize, src: isize, count: isize) -> PyResult<()> {
        let m = self.writable()?;
        let size = m.len() as isize;
        if dest < 0 || src < 0 || count < 0 || size - dest < count || size - src < count {
            return Err(PyValueError::new_err("source, destination, or count out of range"));
        }
        m.copy_within(src as usize, dest as usize, count as usize).py_err()
    }

    // ----- searching ------------------------------------------------------

    /// Lowest offset of `sub` in `[start, end)` (start defaults to the
    /// current position, as in mmap), or -1.
    #[pyo3(signature = (sub, start = None, end = None))]
    fn find(&self, py: Python<'_>, sub: &Bound<'_, PyAny>, start: Option<isize>, end: Option<isize>) -> PyResult<isize> {
        self.search(py, sub, start, end, false)
    }

    /// Highest offset of `sub` in `[start, end)`, or -1.
    #[pyo3(signature = (sub, start = None, end = None))]
    fn rfind(&self, py: Python<'_>, sub: &Bound<'_, PyAny>, start: Option<isize>, end: Option<isize>) -> PyResult<isize> {
        self.search(py, sub, start, end, true)
    }

    /// Number of non-overlapping occurrences of `sub` in the whole map.
    fn count(&self, py: Python<'_>, sub: &Bound<'_, PyAny>) -> PyResult<u64> {
        let needle = with_bytes(sub, |b| b.to_vec())?;
        let m = self.get()?;
        py.detach(|| m.count(&needle)).py_err()
    }

    /// Offsets of the non-overlapping occurrences of `sub` (at most
    /// `limit`), as a numpy int64 array.
    #[pyo3(signature = (sub, limit = None))]
    fn find_all<'py>(&self, py: Python<'py>, sub: &Bound<'py, PyAny>, limit: Option<usize>) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let needle = with_bytes(sub, |b| b.to_vec())?;
        let m = self.get()?;
        let offs = py.detach(|| m.find_all(&needle, limit)).py_err()?;
        let offs: Vec<i64> = offs.into_iter().map(|o| o as i64).collect();
        Ok(offs.into_pyarray(py))
    }

    // ----- memory management ------------------------------------------

    /// Writes dirty pages back: the whole map, or `size` bytes from
    /// `offset` (any alignment). `sync=False` starts the write-back and
    /// returns at once. A no-op for read-only and copy-on-write maps.
    #[pyo3(signature = (offset = 0, size = None, *, sync = true))]
    fn flush(&self, py: Python<'_>, offset: isize, size: Option<isize>, sync: bool) -> PyResult<()> {
        let m = self.get()?;
        let len = m.len() as isize;
        let size = size.unwrap_or(len - offset);
        if size < 0 || offset < 0 || len - offset < size {
            return Err(PyValueError::new_err("flush values out of range"));
        }
        if self.access == ACCESS_READ || self.access == ACCESS_COPY {
            return Ok(());
        }
        py.detach(|| m.flush_range(offset as usize, size as usize, sync)).py_err()
    }

    /// Gives the kernel advice ("sequential", "random", "willneed",
    /// "dontneed", "hugepage", "nohugepage", "normal" or an MADV_* int)
    /// about `length` bytes from `offset` (any alignment).
    #[pyo3(signature = (advice, offset = 0, length = None))]
    fn advise(&self, py: Python<'_>, advice: &Bound<'_, PyAny>, offset: usize, length: Option<usize>) -> PyResult<()> {
        let advice = match advice.extract::<i32>() {
            Ok(raw) => Advice::Raw(raw),
            Err(_) => advice.extract::<String>()?.parse::<Advice>().py_err()?,
        };
        let m = self.get()?;
        py.detach(|| m.advise(advice, offset, length)).py_err()
    }

    /// The stdlib-compatible spelling of `advise` (same checks and errors
    /// as mmap.madvise).
    #[pyo3(signature = (option, start = 0, length = None))]
    fn madvise(&self, option: i32, start: isize, length: Option<isize>) -> PyResult<()> {
        let m = self.get()?;
        let size = m.len() as isize;
        if start < 0 || start >= size {
            return Err(PyValueError::new_err("madvise start out of bounds"));
        }
        let mut length = length.unwrap_or(size - start);
        if length < 0 {
            return Err(PyValueError::new_err("madvise length invalid"));
        }
        if isize::MAX - start < length {
            return Err(PyOverflowError::new_err("madvise length too large"));
        }
        if start + length > size {
            length = size - start;
        }
        // madvise(2) wants a page-aligned start: EINVAL, as the stdlib gets
        // (its maps start on a page; ours may not, so count from our start).
        if !(start as usize).is_multiple_of(map::page_size()) {
            return Err(PyOSError::new_err((libc::EINVAL, "Invalid argument")));
        }
        m.advise(Advice::Raw(option), start as usize, Some(length as usize)).py_err()
    }

    /// Faults every page in now (reports a truncated file as
    /// FileTruncatedError here rather than zeros later).
    #[pyo3(signature = (write = false))]
    fn populate(&self, py: Python<'_>, write: bool) -> PyResult<()> {
        let m = self.get()?;
        py.detach(|| m.populate(write)).py_err()
    }

    /// (resident_bytes, mapped_bytes): how much is in the page cache.
    fn residency(&self) -> PyResult<(u64, u64)> {
        let r = self.get()?.residency().py_err()?;
        Ok((r.resident_bytes, r.mapped_bytes))
    }

    /// A zero-copy numpy array over the map (read-only for read maps).
    /// `shape=None` means as many items as fit after `offset`. The array
    /// keeps the map open and stays valid when the map grows.
    #[pyo3(signature = (dtype = None, shape = None, offset = 0))]
    fn numpy<'py>(
        slf: &Bound<'py, Self>,
        dtype: Option<&Bound<'py, PyAny>>,
        shape: Option<&Bound<'py, PyAny>>,
        offset: usize,
    ) -> PyResult<Bound<'py, PyAny>> {
        let py = slf.py();
        let np = py.import("numpy")?;
        let dtype = np.call_method1("dtype", (dtype.map_or_else(|| "u1".into_pyobject(py).map(|s| s.into_any()), |d| Ok(d.clone()))?,))?;
        let itemsize: usize = dtype.getattr("itemsize")?.extract()?;
        let len = slf.get().get()?.len();
        if offset > len {
            return Err(PyValueError::new_err(format!("offset {offset} is past the end of the map ({len} bytes)")));
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

    // ----- properties -----------------------------------------------------

    /// The mapped file's absolute path (None for anonymous memory).
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.reopen.as_ref().map(|(p, _)| p.clone())
    }

    /// "r", "r+", "c" (or "anonymous").
    #[getter]
    fn mode(&self) -> &'static str {
        match self.access {
            ACCESS_READ => "r",
            ACCESS_COPY => "c",
            _ if self.reopen.is_none() => "anonymous",
            _ => "r+",
        }
    }

    /// File offset of byte 0.
    #[getter]
    fn offset(&self) -> PyResult<u64> {
        Ok(self.get()?.offset())
    }

    /// Whether writes are refused.
    #[getter]
    fn readonly(&self) -> PyResult<bool> {
        Ok(!self.get()?.is_writable())
    }

    /// Bytes of address space reserved for growth in place.
    #[getter]
    fn reserved(&self) -> PyResult<usize> {
        Ok(self.get()?.reserved())
    }

    // ----- sequence / buffer protocol --------------------------------

    fn __getitem__(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
        if let Ok(slice) = key.cast::<PySlice>() {
            let (m, ix) = self.slice_indices(slice)?;
            if ix.slicelength == 0 {
                return Ok(PyBytes::new(py, b"").into_any().unbind());
            }
            if ix.step == 1 {
                let s = ix.start as usize;
                return Ok(Self::copy_out(py, &m, s, s + ix.slicelength)?.into_any());
            }
            // Copy the span once, then pick every step-th byte.
            let last = ix.start + (ix.slicelength as isize - 1) * ix.step;
            let lo = ix.start.min(last) as usize;
            let mut span = vec![0u8; ix.start.max(last) as usize + 1 - lo];
            m.read_at(lo, &mut span).py_err()?;
            let out: Vec<u8> = (0..ix.slicelength)
                .map(|k| span[(ix.start + k as isize * ix.step) as usize - lo])
                .collect();
            return Ok(PyBytes::new(py, &out).into_any().unbind());
        }
        let (m, i) = self.item_offset(key)?;
        Ok(m.byte_at(i).py_err()?.into_pyobject(py)?.into_any().unbind())
    }

    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.writable()?;
        if let Ok(slice) = key.cast::<PySlice>() {
            let (m, ix) = self.slice_indices(slice)?;
            return with_bytes(value, |b| {
                if b.len() != ix.slicelength {
                    return Err(PyIndexError::new_err("mmap slice assignment is wrong size"));
                }
                if ix.slicelength == 0 {
                    return Ok(());
                }
                if ix.step == 1 {
                    return m.write_at(ix.start as usize, b).py_err();
                }
                for (k, &byte) in b.iter().enumerate() {
                    m.write_at((ix.start + k as isize * ix.step) as usize, &[byte]).py_err()?;
                }
                Ok(())
            })?;
        }
        let (m, i) = self.item_offset(key)?;
        let v: i64 = value
            .extract()
            .map_err(|_| PyTypeError::new_err("mmap item value must be an int"))?;
        let byte = u8::try_from(v).map_err(|_| PyValueError::new_err("mmap item value must be in range(0, 256)"))?;
        m.write_at(i, &[byte]).py_err()
    }

    /// Iterates like the stdlib: one-byte `bytes` objects (indexing gives
    /// ints), re-checking the length and closed state at every step.
    fn __iter__(slf: Bound<'_, Self>) -> ByteIter {
        ByteIter { map: slf.unbind(), next: AtomicUsize::new(0) }
    }

    /// `x in m` as the stdlib evaluates it (mmap has no `__contains__`, so
    /// Python compares `x` with each one-byte item): true only for a
    /// one-byte bytes-like value present in the map; never for ints.
    fn __contains__(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        let m = self.get()?;
        if let Ok(b) = value.cast_exact::<PyBytes>() {
            let needle = b.as_bytes();
            if needle.len() != 1 {
                return Ok(false);
            }
            let run = || m.find(needle, 0, m.len());
            let r = if m.len() > DETACH_BYTES { py.detach(run) } else { run() };
            return Ok(r.py_err()?.is_some());
        }
        // Anything else: Python's own `==` against each item, as the stdlib.
        for i in 0..m.len() {
            let byte = m.byte_at(i).py_err()?;
            if PyBytes::new(py, &[byte]).as_any().eq(value)? {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Deletion is refused, after the same checks (closed, read-only,
    /// index range) and with the same errors as the stdlib.
    fn __delitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.writable()?;
        if let Ok(slice) = key.cast::<PySlice>() {
            self.slice_indices(slice)?;
            return Err(PyTypeError::new_err("mmap object doesn't support slice deletion"));
        }
        self.item_offset(key)?;
        Err(PyTypeError::new_err("mmap doesn't support item deletion"))
    }

    /// Exposes the mapped bytes (writable unless read-only). The pointer
    /// stays valid across growth; closing and shrinking are refused while
    /// any buffer is exported.
    unsafe fn __getbuffer__(slf: Bound<'_, Self>, view: *mut ffi::Py_buffer, flags: std::os::raw::c_int) -> PyResult<()> {
        let m = slf.get().get()?;
        let readonly = !m.is_writable();
        // SAFETY: `view` is the caller's Py_buffer; the pointer and length
        // describe our live mapping, which stays mapped while the export
        // count is non-zero (close/shrink check it). FillInfo takes a new
        // reference to `slf` for view->obj.
        let r = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                slf.as_ptr(),
                m.as_ptr() as *mut std::ffi::c_void,
                m.len() as ffi::Py_ssize_t,
                readonly as std::os::raw::c_int,
                flags,
            )
        };
        if r != 0 {
            return Err(PyErr::fetch(slf.py()));
        }
        slf.get().exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.exports.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Iterator over a map's bytes (see `MappedFile::__iter__`).
#[pyclass(module = "mmapkit", frozen)]
pub struct ByteIter {
    map: Py<MappedFile>,
    next: AtomicUsize,
}

#[pymethods]
impl ByteIter {
    fn __iter__(slf: Bound<'_, Self>) -> Bound<'_, Self> {
        slf
    }

    fn __next__(&self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        let m = self.map.get().get()?;
        let i = self.next.load(Ordering::Relaxed);
        if i >= m.len() {
            // Exhausted for good, like a sequence iterator.
            self.next.store(usize::MAX, Ordering::Relaxed);
            return Ok(None);
        }
        let byte = m.byte_at(i).py_err()?;
        self.next.store(i + 1, Ordering::Relaxed);
        Ok(Some(PyBytes::new(py, &[byte]).unbind()))
    }
}

// ---------------------------------------------------------------------------

/// Drop-in replacement for `mmap.mmap`: same constructor, methods,
/// constants, errors and semantics (checked against CPython's own
/// test_mmap and a differential test against the stdlib), plus everything
/// MappedFile adds. Deliberate differences: zero-length maps are allowed
/// (`mmap(-1, 0)`, `resize(0)`), resize() may grow while buffers are
/// exported, a file-backed map pickles by path (the receiver maps the
/// file again; the stdlib refuses to pickle), and bytes cut off an
/// anonymous map by a shrink come back as zeros when it grows again (the
/// stdlib shows the old bytes).
#[pyclass(module = "mmapkit", name = "mmap", extends = MappedFile, subclass, frozen)]
pub struct Mmap {}

impl Mmap {
    pub(crate) fn build(
        fileno: i32,
        length: isize,
        flags: i32,
        prot: i32,
        access: i32,
        offset: i64,
        trackfd: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        if length < 0 {
            return Err(PyOverflowError::new_err("memory mapped length must be positive"));
        }
        if offset < 0 {
            return Err(PyOverflowError::new_err("memory mapped offset must be positive"));
        }
        if access != ACCESS_DEFAULT && (flags != libc::MAP_SHARED || prot != (libc::PROT_READ | libc::PROT_WRITE)) {
            return Err(PyValueError::new_err("mmap can't specify both access and flags, prot."));
        }
        let (flags, prot, access) = match access {
            ACCESS_READ => (libc::MAP_SHARED, libc::PROT_READ, access),
            ACCESS_WRITE => (libc::MAP_SHARED, libc::PROT_READ | libc::PROT_WRITE, access),
            ACCESS_COPY => (libc::MAP_PRIVATE, libc::PROT_READ | libc::PROT_WRITE, access),
            ACCESS_DEFAULT => {
                let a = if prot & libc::PROT_READ != 0 && prot & libc::PROT_WRITE != 0 {
                    ACCESS_DEFAULT
                } else if prot & libc::PROT_WRITE != 0 {
                    ACCESS_WRITE
                } else {
                    ACCESS_READ
                };
                (flags, prot, a)
            }
            _ => return Err(PyValueError::new_err("mmap invalid access parameter.")),
        };
        let shared = flags & libc::MAP_SHARED != 0;
        let mode = if prot & libc::PROT_WRITE == 0 {
            Mode::Read
        } else if shared {
            Mode::ReadWrite
        } else {
            Mode::CopyOnWrite
        };
        let mut opts = MapOptions::new();
        opts.mode(mode).protection(prot).shared(shared);
        let base = if fileno == -1 {
            let map = opts.anonymous(length as usize).py_err()?;
            MappedFile::new_inner(map, access, None, false, trackfd)
        } else {
            let file = map::dup_fd(fileno).py_err()?;
            let meta = file.metadata().map_err(PyErr::from)?;
            let mut len = length as u64;
            let offset = offset as u64;
            if meta.is_file() {
                let size = meta.len();
                if len == 0 {
                    if size == 0 {
                        return Err(PyValueError::new_err("cannot mmap an empty file"));
                    }
                    if offset >= size {
                        return Err(PyValueError::new_err("mmap offset is greater than file size"));
                    }
                    len = size - offset;
                } else if offset > size || size - offset < len {
                    return Err(PyValueError::new_err("mmap length is greater than file size"));
                }
            }
            let len = usize::try_from(len).map_err(|_| PyOverflowError::new_err("mmap length is too large"))?;
            opts.offset(offset).len(len);
            let path = map::fd_path(fileno);
            let label = path.clone().unwrap_or_else(|| PathBuf::from(format!("<fd {fileno}>")));
            let map = opts.map(file, label).py_err()?;
            let reopen_mode = match (access, mode) {
                (_, Mode::Read) => "r",
                (_, Mode::CopyOnWrite) => "c",
                _ => "r+",
            };
            MappedFile::new_inner(map, access, path.map(|p| (p, reopen_mode)), false, trackfd)
        };
        Ok(PyClassInitializer::from(base).add_subclass(Mmap {}))
    }
}

#[pymethods]
impl Mmap {
    #[new]
    #[pyo3(signature = (fileno, length, flags = libc::MAP_SHARED, prot = libc::PROT_READ | libc::PROT_WRITE, access = ACCESS_DEFAULT, offset = 0, *, trackfd = true))]
    fn py_new(
        fileno: i32,
        length: isize,
        flags: i32,
        prot: i32,
        access: i32,
        offset: i64,
        trackfd: bool,
    ) -> PyResult<PyClassInitializer<Self>> {
        Self::build(fileno, length, flags, prot, access, offset, trackfd)
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let base = slf.as_super().get();
        match base.slot().as_ref() {
            None => "<mmap.mmap closed=True>".to_owned(),
            Some(m) => {
                let access = match base.access {
                    ACCESS_READ => "ACCESS_READ",
                    ACCESS_WRITE => "ACCESS_WRITE",
                    ACCESS_COPY => "ACCESS_COPY",
                    _ => "ACCESS_DEFAULT",
                };
                format!(
                    "<mmap.mmap closed=False, access={access}, length={}, pos={}, offset={}>",
                    m.len(),
                    base.pos.load(Ordering::Relaxed),
                    m.offset()
                )
            }
        }
    }

    /// As mmap.flush: `size` defaults to the whole length (so a non-zero
    /// `offset` alone is out of range, as in the stdlib), the range is
    /// checked first, read-only and copy-on-write maps do nothing, and
    /// `offset` must be page aligned (EINVAL otherwise).
    #[pyo3(signature = (offset = 0, size = None))]
    fn flush(slf: &Bound<'_, Self>, offset: isize, size: Option<isize>) -> PyResult<()> {
        let base = slf.as_super().get();
        let m = base.get()?;
        let len = m.len() as isize;
        let size = size.unwrap_or(len);
        if size < 0 || offset < 0 || len - offset < size {
            return Err(PyValueError::new_err("flush values out of range"));
        }
        if base.access == ACCESS_READ || base.access == ACCESS_COPY {
            return Ok(());
        }
        let addr = m.as_ptr() as usize;
        if !(addr.wrapping_add(offset as usize)).is_multiple_of(map::page_size()) {
            return Err(PyOSError::new_err((libc::EINVAL, "Invalid argument")));
        }
        base.flush(slf.py(), offset, Some(size), true)
    }

    /// As mmap.seek: returns None before Python 3.13, the new position
    /// from 3.13 on.
    #[pyo3(signature = (pos, whence = 0))]
    fn seek(slf: &Bound<'_, Self>, pos: isize, whence: i32) -> PyResult<Option<usize>> {
        let new = slf.as_super().get().seek(pos, whence)?;
        Ok((slf.py().version_info() >= (3, 13)).then_some(new))
    }

    /// Pickles by path (file-backed maps only): the receiver maps the file
    /// again instead of receiving a copy.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let base = slf.as_super().get();
        // Like the stdlib's refusal (TypeError) for what cannot be reopened.
        let m = base.get().map_err(|_| PyTypeError::new_err("cannot pickle a closed mmap"))?;
        let Some((path, _)) = &base.reopen else {
            return Err(PyTypeError::new_err("cannot pickle an anonymous mmap: share it with fork, or map a file"));
        };
        let reopen = py.import("mmapkit")?.getattr("_reopen_mmap")?;
        let args = (path.clone(), base.access, m.offset(), m.len());
        PyTuple::new(py, [reopen, args.into_pyobject(py)?.into_any()])
    }
}

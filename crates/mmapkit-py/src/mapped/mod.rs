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
//!
//! One file a responsibility: `file` (open, resize), `bytes` (buffers in,
//! copies out, search), `seq` (indexing, slicing, iteration), `views`
//! (numpy views), `stdlib` (the `mmap` drop-in); the buffer protocol is the
//! crate's shared `buffer::Exported`. pyo3 wants all of a class's Python
//! methods in one `#[pymethods]` block: it is here, and the longer bodies
//! live in those files.

mod bytes;
mod file;
mod seq;
mod stdlib;
mod views;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use mmapkit::map::{self, Advice, Map, SharedMap};
use numpy::{IntoPyArray, PyArray1};
use pyo3::exceptions::{PyBufferError, PyOSError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyTuple};

use crate::buffer::Exported;
use crate::errors::{IntoPy, ReservationExhaustedError};
use bytes::{bytes_of, with_view};
use seq::ByteIter;
pub use stdlib::Mmap;

pub const ACCESS_DEFAULT: i32 = 0;
pub const ACCESS_READ: i32 = 1;
pub const ACCESS_WRITE: i32 = 2;
pub const ACCESS_COPY: i32 = 3;

fn readonly_err() -> PyErr {
    PyTypeError::new_err("mmap can't modify a readonly memory map.")
}

/// Where a map's file is, for pickling, `path` and `repr`.
pub(crate) enum FilePath {
    Known(PathBuf),
    /// `mmapkit.mmap` over a caller's descriptor: the path behind it is
    /// looked up on first use (a readlink of /proc/self/fd costs more than
    /// mapping a small file), through the core map's lazy label.
    Lazy(OnceLock<Option<PathBuf>>),
}

/// A memory-mapped file: the stdlib `mmap` API plus empty files, growth
/// that never invalidates views, numpy views, advice, populate, ranged
/// flush, fast search and pickling by path.
#[pyclass(module = "mmapkit", subclass, weakref, frozen)]
pub struct MappedFile {
    /// The open map; its closed error is the stdlib's.
    map: Exported<Arc<SharedMap>>,
    pos: AtomicUsize,
    access: i32,
    /// File and mode string for pickling (`None` for anonymous maps).
    reopen: Option<(FilePath, &'static str)>,
    to_end: AtomicBool,
    trackfd: bool,
}

impl MappedFile {
    fn new_inner(
        map: Map,
        access: i32,
        reopen: Option<(FilePath, &'static str)>,
        to_end: bool,
        trackfd: bool,
    ) -> Self {
        MappedFile {
            map: Exported::new(Arc::new(map.into_shared()), "mmap closed or invalid"),
            pos: AtomicUsize::new(0),
            access,
            reopen,
            to_end: AtomicBool::new(to_end),
            trackfd,
        }
    }

    /// The mapped file's absolute path and the mode to map it again with
    /// (None for anonymous memory, and for a descriptor with no path: a
    /// pipe, a deleted file; or a closed map whose path was never asked).
    fn reopen_path(&self) -> Option<(PathBuf, &'static str)> {
        let (p, mode) = self.reopen.as_ref()?;
        let path = match p {
            FilePath::Known(p) => Some(p.clone()),
            FilePath::Lazy(cell) => match cell.get() {
                Some(p) => p.clone(),
                None => {
                    let m = self.get().ok()?;
                    cell.get_or_init(|| Some(m.path().to_owned()).filter(|p| p.is_absolute()))
                        .clone()
                }
            },
        };
        Some((path?, *mode))
    }

    /// Pickling (and `copy.copy`) re-maps the file by path, which would
    /// silently drop a copy-on-write map's private changes: TypeError.
    fn refuse_copy_on_write(&self) -> PyResult<()> {
        if self.access != ACCESS_COPY {
            return Ok(());
        }
        Err(PyTypeError::new_err(
            "cannot pickle a copy-on-write (ACCESS_COPY / mode \"c\") map: its private \
             changes are in no file; pickle bytes(m), or map the file read-only",
        ))
    }

    /// The open map, or ValueError("mmap closed or invalid").
    pub(crate) fn get(&self) -> PyResult<Arc<SharedMap>> {
        self.map.with(|m| m.clone())
    }

    fn writable(&self) -> PyResult<Arc<SharedMap>> {
        let m = self.get()?;
        if m.is_writable() {
            Ok(m)
        } else {
            Err(readonly_err())
        }
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
        Self::open(py, path, mode, size, offset, length, reserve)
    }

    // ----- lifetime -----------------------------------------------------

    /// Unmaps. Raises BufferError while buffers (memoryviews, numpy views)
    /// are exported. Closing twice is fine.
    fn close(&self) -> PyResult<()> {
        if self.map.exports() > 0 {
            return Err(PyBufferError::new_err("cannot close exported pointers exist"));
        }
        self.map.close(|_| Ok(()))
    }

    /// True once closed.
    #[getter]
    fn closed(&self) -> bool {
        self.map.is_closed()
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
        match (self.get().ok(), self.reopen_path()) {
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
    /// of receiving a copy of the data. A copy-on-write map is refused (as
    /// the stdlib refuses every mmap): its private changes are in no file,
    /// and mapping the file again would silently drop them.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let this = slf.get();
        let m = this.get()?;
        this.refuse_copy_on_write()?;
        let Some((path, mode)) = this.reopen_path() else {
            return Err(PyTypeError::new_err(
                "cannot pickle an anonymous map: share it with fork, or map a file",
            ));
        };
        let length = if this.to_end.load(Ordering::Relaxed) { None } else { Some(m.len()) };
        let args = (path, mode, None::<u64>, m.offset(), length);
        PyTuple::new(
            py,
            [py.get_type::<MappedFile>().into_any(), args.into_pyobject(py)?.into_any()],
        )
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
        self.resize_checked(py, newsize)
    }

    /// Grows by `nbytes` (extending the file); returns the new length.
    /// Never invalidates views; never raises BufferError.
    fn grow(&self, py: Python<'_>, nbytes: usize) -> PyResult<usize> {
        let m = self.writable()?;
        let new_len = m
            .len()
            .checked_add(nbytes)
            .ok_or_else(|| PyOverflowError::new_err("length overflows"))?;
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
        let requested = match py.detach(|| m.resync(to_end)) {
            Err(mmapkit::Error::ReservationExhausted { requested, .. })
                if self.map.exports() == 0 =>
            {
                requested
            }
            other => return other.py_err(),
        };
        // The file grew past the reservation and no view pins the map:
        // move it to a larger one, then follow the file.
        drop(m);
        self.map.with(|arc| match Arc::get_mut(arc) {
            Some(m) => m.make_room(requested).py_err(),
            None => Err(ReservationExhaustedError::new_err(
                "mmap is in use by another thread; cannot move it to follow the file now",
            )),
        })??;
        let m = self.get()?;
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

    /// Every mapped byte, copied (what `bytes(m)` calls before it would
    /// copy through the buffer protocol, which could not report a
    /// truncation: this raises FileTruncatedError).
    fn __bytes__(&self, py: Python<'_>) -> PyResult<Py<PyBytes>> {
        let m = self.get()?;
        Self::copy_out(py, &m, 0, m.len())
    }

    /// Reads the byte at the current position and advances past it
    /// (`ValueError` at the end).
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
        with_view(data, |b| {
            if !m.is_writable() {
                return Err(readonly_err());
            }
            let pos = self.pos.load(Ordering::Relaxed);
            if pos > m.len() || m.len() - pos < b.len() {
                return Err(PyValueError::new_err("data out of range"));
            }
            b.write_into(&m, pos).py_err()?;
            self.pos.store(pos + b.len(), Ordering::Relaxed);
            Ok(b.len())
        })?
    }

    /// Writes one byte (an int 0-255) at the current position and advances
    /// past it (`ValueError` at the end, `TypeError` on a read-only map).
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

    /// The current position (where `read`, `write` and friends start).
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
    fn find(
        &self,
        py: Python<'_>,
        sub: &Bound<'_, PyAny>,
        start: Option<isize>,
        end: Option<isize>,
    ) -> PyResult<isize> {
        self.search(py, sub, start, end, false)
    }

    /// Highest offset of `sub` in `[start, end)`, or -1.
    #[pyo3(signature = (sub, start = None, end = None))]
    fn rfind(
        &self,
        py: Python<'_>,
        sub: &Bound<'_, PyAny>,
        start: Option<isize>,
        end: Option<isize>,
    ) -> PyResult<isize> {
        self.search(py, sub, start, end, true)
    }

    /// Number of non-overlapping occurrences of `sub` in the whole map.
    fn count(&self, py: Python<'_>, sub: &Bound<'_, PyAny>) -> PyResult<u64> {
        let needle = bytes_of(sub)?;
        let m = self.get()?;
        py.detach(|| m.count(&needle)).py_err()
    }

    /// Offsets of the non-overlapping occurrences of `sub` (at most
    /// `limit`), as a numpy int64 array.
    #[pyo3(signature = (sub, limit = None))]
    fn find_all<'py>(
        &self,
        py: Python<'py>,
        sub: &Bound<'py, PyAny>,
        limit: Option<usize>,
    ) -> PyResult<Bound<'py, PyArray1<i64>>> {
        let needle = bytes_of(sub)?;
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
    fn flush(
        &self,
        py: Python<'_>,
        offset: isize,
        size: Option<isize>,
        sync: bool,
    ) -> PyResult<()> {
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
    fn advise(
        &self,
        py: Python<'_>,
        advice: &Bound<'_, PyAny>,
        offset: usize,
        length: Option<usize>,
    ) -> PyResult<()> {
        let m = self.get()?;
        match advice.extract::<i32>() {
            Ok(raw) => py.detach(|| m.madvise(raw, offset, length)).py_err(),
            Err(_) => {
                let advice = advice.extract::<String>()?.parse::<Advice>().py_err()?;
                py.detach(|| m.advise(advice, offset, length)).py_err()
            }
        }
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
        m.madvise(option, start as usize, Some(length as usize)).py_err()
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
        views::numpy(slf, dtype, shape, offset)
    }

    // ----- properties -----------------------------------------------------

    /// The mapped file's absolute path (None for anonymous memory).
    #[getter]
    fn path(&self) -> Option<PathBuf> {
        self.reopen_path().map(|(p, _)| p)
    }

    /// "r", "r+", "c" (or "anonymous").
    #[getter]
    fn mode(&self) -> &'static str {
        match self.access {
            ACCESS_READ => "r",
            ACCESS_COPY => "c",
            _ if self.reopen_path().is_none() => "anonymous",
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
        self.get_item(py, key)
    }

    fn __setitem__(&self, key: &Bound<'_, PyAny>, value: &Bound<'_, PyAny>) -> PyResult<()> {
        self.set_item(key, value)
    }

    /// Iterates like the stdlib: one-byte `bytes` objects (indexing gives
    /// ints), re-checking the length and closed state at every step.
    fn __iter__(slf: Bound<'_, Self>) -> ByteIter {
        ByteIter::new(slf)
    }

    /// One-byte `bytes` objects from the last byte to the first, as
    /// `reversed()` gives over the stdlib's mmap.
    fn __reversed__(slf: Bound<'_, Self>) -> PyResult<ByteIter> {
        ByteIter::reversed(slf)
    }

    /// `x in m` as the stdlib evaluates it (see `seq`).
    fn __contains__(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
        self.contains(py, value)
    }

    /// Deletion is refused, after the stdlib's checks (see `seq`).
    fn __delitem__(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.del_item(key)
    }

    /// Exposes the mapped bytes (writable unless read-only). The pointer
    /// stays valid across growth; closing and shrinking are refused while
    /// any buffer is exported.
    #[allow(unsafe_code)] // PyO3 requires the slot to be an `unsafe fn`.
    unsafe fn __getbuffer__(
        slf: Bound<'_, Self>,
        view: *mut ffi::Py_buffer,
        flags: std::os::raw::c_int,
    ) -> PyResult<()> {
        // SAFETY: the pointer and length describe our live mapping, which
        // stays mapped while an export is counted (close and shrinking
        // check; growth never moves it).
        unsafe {
            slf.get()
                .map
                .get_buffer(slf.as_any(), view, flags, |m| (m.as_ptr(), m.len(), !m.is_writable()))
        }
    }

    #[allow(unsafe_code)] // PyO3 requires the slot to be an `unsafe fn`.
    unsafe fn __releasebuffer__(&self, _view: *mut ffi::Py_buffer) {
        self.map.release_buffer();
    }
}

//! Bytes in and out of a map: borrowing any Python buffer without a copy,
//! copying a range out into one `bytes` object, and searching.

use std::sync::atomic::Ordering;

use mmapkit::map::SharedMap;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

use super::MappedFile;
use crate::errors::IntoPy;

/// Above this many bytes a copy or search releases the GIL.
pub(super) const DETACH_BYTES: usize = 64 * 1024;

/// The bytes of a bytes-like object as a raw view: a pointer and a
/// length, never a `&[u8]` (a buffer may be a view of a map that another
/// thread writes with the GIL released; a reference over those bytes
/// would be a data race on the Rust side).
#[derive(Clone, Copy)]
pub(super) struct View {
    ptr: *const u8,
    len: usize,
}

impl View {
    pub(super) fn len(&self) -> usize {
        self.len
    }
    /// A copy of the bytes (atomic loads: may race with writers).
    pub(super) fn to_vec(self) -> Vec<u8> {
        // SAFETY: `with_view` only hands out views of buffers kept
        // exported (readable) for the closure's duration; concurrent
        // writers in Rust write such maps atomically.
        unsafe { mmapkit::map::copy_from_view(self.ptr, self.len) }
    }
    /// Writes the bytes into `m` at `offset` (overlap with `m` allowed).
    pub(super) fn write_into(self, m: &SharedMap, offset: usize) -> mmapkit::Result<()> {
        // SAFETY: as in `to_vec`; no `&mut [u8]` over a Python buffer is
        // ever made by this binding.
        unsafe { m.write_from_view(offset, self.ptr, self.len) }
    }
}

/// Runs `f` over the bytes of any bytes-like object (bytes, bytearray,
/// memoryview, numpy array, another map) as a [`View`], without copying a
/// C-contiguous buffer.
pub(super) fn with_view<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(View) -> R) -> PyResult<R> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        let b = b.as_bytes();
        return Ok(f(View { ptr: b.as_ptr(), len: b.len() }));
    }
    let buf = PyBuffer::<u8>::get(obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "a bytes-like object is required, not '{}'",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    if buf.is_c_contiguous() {
        // The buffer is C-contiguous, holds `len_bytes` bytes and stays
        // exported while `buf` is in scope.
        Ok(f(View { ptr: buf.buf_ptr() as *const u8, len: buf.len_bytes() }))
    } else {
        let v = buf.to_vec(obj.py())?;
        Ok(f(View { ptr: v.as_ptr(), len: v.len() }))
    }
}

/// A copy of the bytes of any bytes-like object (search needles).
pub(super) fn bytes_of(obj: &Bound<'_, PyAny>) -> PyResult<Vec<u8>> {
    with_view(obj, View::to_vec)
}

/// Clamps Python-style `start`/`end` (negative from the end) to `0..=len`.
fn clamp(i: isize, len: usize) -> usize {
    if i < 0 {
        (len as isize + i).max(0) as usize
    } else {
        (i as usize).min(len)
    }
}

impl MappedFile {
    /// `bytes(m[start:end])`, copied once (PyBytes::new_with would zero
    /// the buffer first: a whole extra pass over large reads), with the GIL
    /// released for large copies and truncation reported.
    pub(super) fn copy_out(
        py: Python<'_>,
        m: &SharedMap,
        start: usize,
        end: usize,
    ) -> PyResult<Py<PyBytes>> {
        let n = end - start;
        // SAFETY: a NULL source asks CPython for an uninitialised bytes
        // object of `n` bytes, which we own until it is returned.
        let obj = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), n as ffi::Py_ssize_t) };
        if obj.is_null() {
            return Err(PyErr::fetch(py));
        }
        // SAFETY: `obj` is a new reference to a bytes object.
        let bytes: Bound<'_, PyBytes> =
            unsafe { Bound::from_owned_ptr(py, obj).cast_into_unchecked() };
        // SAFETY: PyBytes_AsString of a bytes object never fails; the
        // buffer holds `n` bytes. Passed as usize so the closure is Send.
        let dst = unsafe { ffi::PyBytes_AsString(obj) } as usize;
        let copy = move || {
            // SAFETY: `dst` has room for `n` (uninitialised) bytes that
            // nothing else sees until we return the object.
            let out =
                unsafe { std::slice::from_raw_parts_mut(dst as *mut std::mem::MaybeUninit<u8>, n) };
            m.read_into(start, out)
        };
        if n > DETACH_BYTES { py.detach(copy) } else { copy() }.py_err()?;
        Ok(bytes.unbind())
    }

    pub(super) fn search(
        &self,
        py: Python<'_>,
        sub: &Bound<'_, PyAny>,
        start: Option<isize>,
        end: Option<isize>,
        reverse: bool,
    ) -> PyResult<isize> {
        self.get()?;
        let (needle, len) = {
            let n = bytes_of(sub)?;
            (n, self.get()?.len())
        };
        let start = start.map_or(self.pos.load(Ordering::Relaxed).min(len), |s| clamp(s, len));
        let end = end.map_or(len, |e| clamp(e, len));
        let m = self.get()?;
        if end < start {
            return Ok(-1);
        }
        let run =
            || if reverse { m.rfind(&needle, start, end) } else { m.find(&needle, start, end) };
        let r = if end - start > DETACH_BYTES { py.detach(run) } else { run() };
        Ok(r.py_err()?.map_or(-1, |i| i as isize))
    }
}

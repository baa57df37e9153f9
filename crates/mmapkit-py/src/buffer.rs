//! Objects that lend their mapped bytes to Python through the buffer
//! protocol (memoryview, numpy views): `MappedFile`, `ArrayStoreCore` and
//! `SharedSegment` all hold their core value in one [`Exported`].
//!
//! It keeps the lock, the count of exported buffers and the closed flag
//! together, so that every owner agrees on the rules: a buffer can only be
//! taken of an open value, unmapping waits until no buffer is exported,
//! and the release of the last buffer after `close()` finishes the close.

use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use pyo3::buffer::PyBuffer;
use pyo3::exceptions::PyValueError;
use pyo3::ffi;
use pyo3::prelude::*;

/// A core value (a map, a store, a segment) whose bytes Python may borrow.
pub(crate) struct Exported<T> {
    slot: Mutex<Option<T>>,
    exports: AtomicUsize,
    closed: AtomicBool,
    /// The ValueError's message for a closed value.
    closed_msg: &'static str,
}

impl<T: Send> Exported<T> {
    pub fn new(value: T, closed_msg: &'static str) -> Self {
        Exported {
            slot: Mutex::new(Some(value)),
            exports: AtomicUsize::new(0),
            closed: AtomicBool::new(false),
            closed_msg,
        }
    }

    pub fn closed_err(&self) -> PyErr {
        PyValueError::new_err(self.closed_msg)
    }

    /// The slot, locked. Owners may hold it while the GIL is released for a
    /// long call, so a contended lock is waited for without the GIL (else
    /// that call could never take the GIL back: a deadlock).
    pub fn lock(&self) -> MutexGuard<'_, Option<T>> {
        loop {
            match self.slot.try_lock() {
                Ok(g) => return g,
                Err(TryLockError::Poisoned(e)) => return e.into_inner(),
                Err(TryLockError::WouldBlock) => {
                    Python::attach(|py| py.detach(|| drop(self.slot.lock())));
                }
            }
        }
    }

    /// Runs `f` on the open value, or fails with the closed error.
    pub fn with<R>(&self, f: impl FnOnce(&mut T) -> R) -> PyResult<R> {
        let mut g = self.lock();
        match g.as_mut() {
            Some(v) if !self.is_closed() => Ok(f(v)),
            _ => Err(self.closed_err()),
        }
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// Number of buffers exported now.
    pub fn exports(&self) -> usize {
        self.exports.load(Ordering::Acquire)
    }

    /// Closes: runs `finish` on the value (the first time only), then drops
    /// it, or leaves that to the release of the last exported buffer.
    pub fn close(&self, finish: impl FnOnce(&mut T) -> PyResult<()>) -> PyResult<()> {
        let mut g = self.lock();
        if self.closed.swap(true, Ordering::AcqRel) {
            return Ok(());
        }
        let Some(v) = g.as_mut() else { return Ok(()) };
        finish(v)?;
        if self.exports() == 0 {
            g.take();
        }
        Ok(())
    }

    /// `__getbuffer__`: fills `view` with the bytes `describe` gives as
    /// (pointer, length, read-only) and counts the export.
    ///
    /// # Safety
    /// `view` must be the caller's `Py_buffer`, and the bytes `describe`
    /// returns must stay mapped (and writable unless read-only) while the
    /// value is in the slot: it is dropped only when no export is counted.
    pub unsafe fn get_buffer(
        &self,
        owner: &Bound<'_, PyAny>,
        view: *mut ffi::Py_buffer,
        flags: c_int,
        describe: impl FnOnce(&T) -> (*const u8, usize, bool),
    ) -> PyResult<()> {
        let g = self.lock();
        let v = match g.as_ref() {
            Some(v) if !self.is_closed() => v,
            _ => return Err(self.closed_err()),
        };
        let (ptr, len, readonly) = describe(v);
        // SAFETY: as the caller guarantees; FillInfo takes a new reference
        // to `owner` for view->obj, which keeps us alive until the release.
        let r = unsafe {
            ffi::PyBuffer_FillInfo(
                view,
                owner.as_ptr(),
                ptr as *mut std::ffi::c_void,
                len as ffi::Py_ssize_t,
                readonly as c_int,
                flags,
            )
        };
        if r != 0 {
            return Err(PyErr::fetch(owner.py()));
        }
        self.exports.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// `__releasebuffer__`: the last release after `close()` drops the value.
    pub fn release_buffer(&self) {
        // Under the lock, so a concurrent close() sees either the export or
        // the drop, never neither.
        let mut g = self.lock();
        if self.exports.fetch_sub(1, Ordering::AcqRel) == 1 && self.is_closed() {
            g.take();
        }
    }
}

/// Runs `f` over the bytes of a C-contiguous byte buffer (Python passes
/// `array.view(np.uint8)`) with the GIL released.
pub fn with_contiguous<R: Send>(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u8]) -> R + Send,
) -> PyResult<R> {
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

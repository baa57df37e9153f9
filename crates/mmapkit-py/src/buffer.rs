//! The binding's only `unsafe` code (the crate denies `unsafe_code`; this
//! module alone allows it, every block with a `// SAFETY:` comment). The
//! other `unsafe` tokens of the crate are the buffer-protocol slots
//! (`__getbuffer__`/`__releasebuffer__`), which PyO3 requires to be
//! declared `unsafe fn`: each only forwards to [`Exported`].
//!
//! Both directions of the buffer protocol:
//!
//! * **Lending** our mapped bytes to Python (memoryview, numpy views):
//!   `MappedFile`, `ArrayStoreCore` and `SharedSegment` all hold their core
//!   value in one [`Exported`]. It keeps the lock, the count of exported
//!   buffers and the closed flag together, so that every owner agrees on
//!   the rules: a buffer can only be taken of an open value, unmapping
//!   waits until no buffer is exported, and the release of the last buffer
//!   after `close()` finishes the close.
//! * **Borrowing** the bytes of a Python object ([`View`], [`ViewMut`]):
//!   never as a `&[u8]`/`&mut [u8]`. Another Python thread may write a
//!   bytearray or a numpy array while we read it (with the GIL released,
//!   or even with it held: numpy releases the GIL in its loops), and a
//!   Rust reference over bytes that change is undefined behaviour. Every
//!   access copies, with the core's atomic copies (`mmapkit::map`'s
//!   `*_view` functions, the same as `SharedMap`'s): into memory we own,
//!   1 MiB at a time ([`View::for_chunks`]) or straight into the
//!   destination ([`View::copy_to`]), so a large input costs one pass and
//!   no extra memory (8-byte atomic loads are plain moves on x86-64 and
//!   aarch64); writes into a Python buffer are atomic stores. A racing
//!   writer can make the result a mix of old and new bytes, never UB in
//!   Rust.

use std::marker::PhantomData;
use std::mem::MaybeUninit;
use std::os::raw::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use mmapkit::map::SharedMap;
use pyo3::buffer::PyBuffer;
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::ffi;
use pyo3::prelude::*;
use pyo3::types::PyBytes;

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

/// Bytes per piece when a [`View`] is copied piece by piece.
const PIECE: usize = 1 << 20;

/// The bytes of a Python object, as a pointer and a length valid for `'a`
/// (the `with_*` call that made it keeps the buffer exported); never a
/// `&[u8]` (see the [module docs](self)).
#[derive(Clone, Copy)]
pub(crate) struct View<'a> {
    ptr: *const u8,
    len: usize,
    _buf: PhantomData<&'a [u8]>,
}

// SAFETY: a View is a pointer to bytes that stay exported for 'a, read only
// through atomic copies: any thread may do that.
unsafe impl Send for View<'_> {}
// SAFETY: as for Send; a View has no interior state.
unsafe impl Sync for View<'_> {}

impl View<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    /// A copy of the bytes.
    pub fn to_vec(self) -> Vec<u8> {
        // SAFETY: readable for 'a (the View's contract); read atomically.
        unsafe { mmapkit::map::copy_from_view(self.ptr, self.len) }
    }

    /// Copies the bytes into `dst`, which must be as long.
    pub fn copy_to(self, dst: &mut [u8]) {
        assert_eq!(dst.len(), self.len, "copy_to: lengths differ");
        self.copy_range_to(0, dst);
    }

    /// Copies the `dst.len()` bytes from offset `at` into `dst` (a block
    /// of `mmapkit::stats::Input::copied`).
    pub fn copy_range_to(self, at: usize, dst: &mut [u8]) {
        assert!(
            at.checked_add(dst.len()).is_some_and(|end| end <= self.len),
            "copy_range_to: past the end"
        );
        // SAFETY: `[at, at + dst.len())` is within the View (asserted),
        // readable for 'a, read atomically; `dst` is a `&mut` we were
        // given, so not a Python buffer this View reads (those are never
        // made into references here).
        unsafe { mmapkit::map::load_from_view(self.ptr.add(at), dst) }
    }

    /// Feeds the bytes to `f` in copies of up to 1 MiB, in order.
    pub fn for_chunks<E>(self, mut f: impl FnMut(&[u8]) -> Result<(), E>) -> Result<(), E> {
        let mut piece = vec![0u8; PIECE.min(self.len)];
        let mut at = 0;
        while at < self.len {
            let n = PIECE.min(self.len - at);
            self.copy_range_to(at, &mut piece[..n]);
            f(&piece[..n])?;
            at += n;
        }
        Ok(())
    }

    /// Writes the bytes into `m` at `offset` (overlap with `m` allowed).
    pub fn write_into(self, m: &SharedMap, offset: usize) -> mmapkit::Result<()> {
        // SAFETY: readable for 'a; no `&mut [u8]` over a Python buffer is
        // ever made by this binding; writers of a map write it atomically.
        unsafe { m.write_from_view(offset, self.ptr, self.len) }
    }
}

/// Runs `f` over the bytes of any bytes-like object (bytes, bytearray,
/// memoryview, numpy array, another map) as a [`View`], without copying a
/// C-contiguous buffer (a non-contiguous one is copied first). The GIL
/// stays held.
pub(crate) fn with_view<R>(obj: &Bound<'_, PyAny>, f: impl FnOnce(View<'_>) -> R) -> PyResult<R> {
    if let Ok(b) = obj.cast::<PyBytes>() {
        // bytes are immutable: the slice is a plain borrow of `b`.
        let b = b.as_bytes();
        return Ok(f(View { ptr: b.as_ptr(), len: b.len(), _buf: PhantomData }));
    }
    let buf = PyBuffer::<u8>::get(obj).map_err(|_| {
        PyTypeError::new_err(format!(
            "a bytes-like object is required, not '{}'",
            obj.get_type().name().map(|n| n.to_string()).unwrap_or_default()
        ))
    })?;
    if buf.is_c_contiguous() {
        // C-contiguous, `len_bytes` long, exported while `buf` lives (past
        // `f`, which cannot keep the View: it is only valid inside).
        Ok(f(View { ptr: buf.buf_ptr() as *const u8, len: buf.len_bytes(), _buf: PhantomData }))
    } else {
        let v = buf.to_vec(obj.py())?;
        Ok(f(View { ptr: v.as_ptr(), len: v.len(), _buf: PhantomData }))
    }
}

/// Runs `f` over the bytes of a C-contiguous byte buffer (Python passes
/// `array.view(np.uint8)`) with the GIL released.
pub(crate) fn with_contiguous<R: Send>(
    py: Python<'_>,
    data: &Bound<'_, PyAny>,
    f: impl FnOnce(View<'_>) -> R + Send,
) -> PyResult<R> {
    let buf = contiguous(data)?;
    let view = View { ptr: buf.buf_ptr() as *const u8, len: buf.len_bytes(), _buf: PhantomData };
    // `buf` (the export) outlives the call.
    let r = py.detach(move || f(view));
    drop(buf);
    Ok(r)
}

/// [`with_contiguous`] over two buffers at once (a feature store's rows
/// and labels, committed together).
pub(crate) fn with_contiguous_pair<R: Send>(
    py: Python<'_>,
    a: &Bound<'_, PyAny>,
    b: &Bound<'_, PyAny>,
    f: impl FnOnce(View<'_>, View<'_>) -> R + Send,
) -> PyResult<R> {
    let (ba, bb) = (contiguous(a)?, contiguous(b)?);
    let va = View { ptr: ba.buf_ptr() as *const u8, len: ba.len_bytes(), _buf: PhantomData };
    let vb = View { ptr: bb.buf_ptr() as *const u8, len: bb.len_bytes(), _buf: PhantomData };
    // Both exports outlive the call.
    let r = py.detach(move || f(va, vb));
    drop((ba, bb));
    Ok(r)
}

/// The export of a C-contiguous byte buffer.
fn contiguous(data: &Bound<'_, PyAny>) -> PyResult<PyBuffer<u8>> {
    let buf = PyBuffer::<u8>::get(data)?;
    if !buf.is_c_contiguous() {
        return Err(PyValueError::new_err("the data must be C-contiguous"));
    }
    Ok(buf)
}

/// A writable Python buffer, written only with atomic stores.
pub(crate) struct ViewMut<'a> {
    ptr: *mut u8,
    len: usize,
    _buf: PhantomData<&'a mut [u8]>,
}

// SAFETY: as for View: the bytes stay exported for 'a and are only
// written atomically.
unsafe impl Send for ViewMut<'_> {}
// SAFETY: every write through a shared ViewMut is an atomic store, so
// threads writing it at once (a parallel gather's parts) race only in
// which value a byte ends with, which is defined.
unsafe impl Sync for ViewMut<'_> {}

impl ViewMut<'_> {
    pub fn len(&self) -> usize {
        self.len
    }

    /// Writes `src` at `offset` (from any thread: see `Sync` above).
    pub fn write_at(&self, offset: usize, src: &[u8]) {
        assert!(offset <= self.len && src.len() <= self.len - offset, "write_at out of range");
        // SAFETY: in bounds of a writable buffer exported for 'a; `src` is
        // memory we own (never a reference over a Python buffer).
        unsafe { mmapkit::map::store_to_view(self.ptr.add(offset), src) }
    }
}

/// Runs `f` with the GIL released over a writable C-contiguous buffer
/// `out` and a copy of `idx`, a C-contiguous buffer of `u64` (checked
/// through its format).
pub(crate) fn with_u64s_and_out<R: Send>(
    py: Python<'_>,
    idx: &Bound<'_, PyAny>,
    out: &Bound<'_, PyAny>,
    f: impl FnOnce(&[u64], ViewMut<'_>) -> R + Send,
) -> PyResult<R> {
    let rows = u64s(py, idx)?;
    let dst = PyBuffer::<u8>::get(out)?;
    if !dst.is_c_contiguous() {
        return Err(PyValueError::new_err("out must be C-contiguous"));
    }
    if dst.readonly() {
        return Err(PyValueError::new_err("out must be writable"));
    }
    let view = ViewMut { ptr: dst.buf_ptr() as *mut u8, len: dst.len_bytes(), _buf: PhantomData };
    // `dst` (the export) outlives the call.
    let r = py.detach(move || f(&rows, view));
    drop(dst);
    Ok(r)
}

/// A copy of `idx`, a C-contiguous buffer of `u64` (checked through its
/// format): made under the GIL, by CPython, so the caller may release it;
/// 8 bytes a row, small beside the rows themselves.
pub(crate) fn u64s(py: Python<'_>, idx: &Bound<'_, PyAny>) -> PyResult<Vec<u64>> {
    let idx = PyBuffer::<u64>::get(idx)?;
    if !idx.is_c_contiguous() {
        return Err(PyValueError::new_err("rows must be C-contiguous"));
    }
    idx.to_vec(py)
}

/// A new `bytes` of `n` bytes, filled once by `fill` (with the GIL
/// released when `detach`): `PyBytes::new_with` would zero it first, a
/// whole extra pass over large reads.
pub(crate) fn new_bytes<E: Send>(
    py: Python<'_>,
    n: usize,
    detach: bool,
    fill: impl FnOnce(&mut [MaybeUninit<u8>]) -> Result<(), E> + Send,
) -> PyResult<Result<Py<PyBytes>, E>> {
    // SAFETY: a NULL source asks CPython for an uninitialised bytes object
    // of `n` bytes, which we own until it is returned.
    let obj = unsafe { ffi::PyBytes_FromStringAndSize(std::ptr::null(), n as ffi::Py_ssize_t) };
    if obj.is_null() {
        return Err(PyErr::fetch(py));
    }
    // SAFETY: `obj` is a new reference to a bytes object.
    let bytes: Bound<'_, PyBytes> = unsafe { Bound::from_owned_ptr(py, obj).cast_into_unchecked() };
    // SAFETY: PyBytes_AsString of a bytes object never fails; the buffer
    // holds `n` bytes. Passed as usize so the closure is Send.
    let dst = unsafe { ffi::PyBytes_AsString(obj) } as usize;
    let run = move || {
        // SAFETY: `dst` has room for `n` (uninitialised) bytes that nothing
        // else sees until we return the object; `fill` initialises them all
        // or fails (and the object is dropped unseen).
        let out = unsafe { std::slice::from_raw_parts_mut(dst as *mut MaybeUninit<u8>, n) };
        fill(out)
    };
    let r = if detach { py.detach(run) } else { run() };
    Ok(r.map(|()| bytes.unbind()))
}

//! `mmapkit.mmap`: the drop-in for the stdlib class, a `MappedFile`
//! subclass with the stdlib's constructor, flags and access modes.

use std::sync::atomic::Ordering;
use std::sync::OnceLock;

use mmapkit::map::{self, MapOptions, Mode};
use pyo3::exceptions::{PyOSError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyTuple;

use super::{FilePath, MappedFile, ACCESS_COPY, ACCESS_DEFAULT, ACCESS_READ, ACCESS_WRITE};
use crate::errors::IntoPy;

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
        if length < 0 {
            return Err(PyOverflowError::new_err("memory mapped length must be positive"));
        }
        if offset < 0 {
            return Err(PyOverflowError::new_err("memory mapped offset must be positive"));
        }
        if access != ACCESS_DEFAULT
            && (flags != libc::MAP_SHARED || prot != (libc::PROT_READ | libc::PROT_WRITE))
        {
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
        // Write or exec access implies read on the platforms we support
        // (and mmapkit reads only PROT_READ maps); a PROT_NONE map (a
        // guard) is made, but reading it is an OSError(EACCES) here where
        // the stdlib segfaults.
        let prot = if prot & (libc::PROT_WRITE | libc::PROT_EXEC) != 0 {
            prot | libc::PROT_READ
        } else {
            prot
        };
        opts.mode(mode).checked_protection(prot).py_err()?.shared(shared);
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
            let len = usize::try_from(len)
                .map_err(|_| PyOverflowError::new_err("mmap length is too large"))?;
            opts.offset(offset).len(len);
            if mode == Mode::Read {
                // Nothing can grow a read-only mmap (no resize, refresh
                // keeps the length): no reserve, so one plain mmap.
                opts.reserve(0);
            }
            let map = opts.map_fd(file, fileno, meta).py_err()?;
            let reopen_mode = match (access, mode) {
                (_, Mode::Read) => "r",
                (_, Mode::CopyOnWrite) => "c",
                _ => "r+",
            };
            MappedFile::new_inner(
                map,
                access,
                Some((FilePath::Lazy(OnceLock::new()), reopen_mode)),
                false,
                trackfd,
            )
        };
        Ok(PyClassInitializer::from(base).add_subclass(Mmap {}))
    }

    fn __repr__(slf: &Bound<'_, Self>) -> String {
        let base = slf.as_super().get();
        match base.get().ok() {
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
        base.refuse_copy_on_write()?;
        let Some((path, _)) = base.reopen_path() else {
            return Err(PyTypeError::new_err(
                "cannot pickle an anonymous mmap: share it with fork, or map a file",
            ));
        };
        let reopen = py.import("mmapkit")?.getattr("_reopen_mmap")?;
        let args = (path, base.access, m.offset(), m.len());
        PyTuple::new(py, [reopen, args.into_pyobject(py)?.into_any()])
    }
}

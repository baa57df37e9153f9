//! The file side of a map: opening a path, resizing map and file.

use std::path::PathBuf;
use std::sync::Arc;

use mmapkit::map::{MapOptions, Mode};
use pyo3::exceptions::{PyBufferError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::{MappedFile, ACCESS_COPY, ACCESS_DEFAULT, ACCESS_READ, ACCESS_WRITE};
use crate::errors::{IntoPy, ReservationExhaustedError};

impl MappedFile {
    /// Maps `path`. Modes: "r" read-only, "r+" read-write, "w+" create or
    /// truncate then read-write, "c" copy-on-write. `size` makes a writable
    /// file at least that big (allocated: a full disk fails here, not on a
    /// later write); `length=None` maps to the end of the file. `reserve`
    /// is the address space kept free for growth in place.
    pub(super) fn open(
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
        Ok(Self::new_inner(
            map,
            access,
            Some((super::FilePath::Known(abs), reopen)),
            length.is_none(),
            true,
        ))
    }

    /// `resize` after the stdlib's checks, in the stdlib's order.
    pub(super) fn resize_checked(&self, py: Python<'_>, newsize: isize) -> PyResult<()> {
        let m = self.get()?;
        // The stdlib checks exports before anything else; only growing is
        // allowed with them here.
        if newsize < m.len() as isize && self.map.exports() > 0 {
            return Err(PyBufferError::new_err("mmap can't resize with extant buffers exported."));
        }
        if !(m.is_writable() && (self.access == ACCESS_WRITE || self.access == ACCESS_DEFAULT)) {
            return Err(PyTypeError::new_err(
                "mmap can't resize a readonly or copy-on-write memory map.",
            ));
        }
        if !self.trackfd {
            return Err(PyOSError::new_err((libc::EBADF, "resize() needs trackfd=True")));
        }
        if newsize < 0
            || (newsize as u64).checked_add(m.offset()).is_none_or(|e| e > isize::MAX as u64)
        {
            return Err(PyValueError::new_err("new size out of range"));
        }
        drop(m);
        self.resize_impl(py, newsize as usize)
    }

    pub(super) fn resize_impl(&self, py: Python<'_>, new_len: usize) -> PyResult<()> {
        let m = self.get()?;
        if new_len >= m.len() {
            match py.detach(|| m.grow(new_len)) {
                Err(mmapkit::Error::ReservationExhausted { .. }) if self.map.exports() == 0 => {}
                other => return other.py_err(),
            }
        } else if self.map.exports() > 0 {
            return Err(PyBufferError::new_err(
                "mmap can't shrink with extant buffers exported (growing is fine).",
            ));
        }
        drop(m);
        self.map.with(|arc| match Arc::get_mut(arc) {
            Some(m) => m.resize(new_len).py_err(),
            None => Err(ReservationExhaustedError::new_err(
                "mmap is in use by another thread; cannot shrink or move it now",
            )),
        })?
    }
}

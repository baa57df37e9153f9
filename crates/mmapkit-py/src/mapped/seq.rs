//! The sequence protocol: indexing and slicing (read, assign, delete),
//! membership and iteration, with the stdlib's checks and errors.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use mmapkit::map::SharedMap;
use pyo3::exceptions::{PyIndexError, PyOverflowError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::slice::PySliceIndices;
use pyo3::types::{PyBytes, PySlice, PySliceMethods};

use super::bytes::{with_view, DETACH_BYTES};
use super::MappedFile;
use crate::errors::IntoPy;

impl MappedFile {
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
    /// One lock of the map, not two: re.finditer slices the map once per
    /// match, so this is its hot path. Holding the `Arc` keeps the memory
    /// while the indices' `__index__` runs; a close there is seen by the
    /// flag check after it.
    fn slice_indices(
        &self,
        slice: &Bound<'_, PySlice>,
    ) -> PyResult<(Arc<SharedMap>, PySliceIndices)> {
        let m = self.get()?;
        let ix = slice.indices(m.len() as isize)?;
        if self.map.is_closed() {
            return Err(self.map.closed_err());
        }
        Ok((m, ix))
    }

    pub(super) fn get_item(&self, py: Python<'_>, key: &Bound<'_, PyAny>) -> PyResult<Py<PyAny>> {
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

    pub(super) fn set_item(
        &self,
        key: &Bound<'_, PyAny>,
        value: &Bound<'_, PyAny>,
    ) -> PyResult<()> {
        self.writable()?;
        if let Ok(slice) = key.cast::<PySlice>() {
            let (m, ix) = self.slice_indices(slice)?;
            return with_view(value, |v| {
                if v.len() != ix.slicelength {
                    return Err(PyIndexError::new_err("mmap slice assignment is wrong size"));
                }
                if ix.slicelength == 0 {
                    return Ok(());
                }
                if ix.step == 1 {
                    return v.write_into(&m, ix.start as usize).py_err();
                }
                for (k, &byte) in v.to_vec().iter().enumerate() {
                    m.write_at((ix.start + k as isize * ix.step) as usize, &[byte]).py_err()?;
                }
                Ok(())
            })?;
        }
        let (m, i) = self.item_offset(key)?;
        let v: i64 =
            value.extract().map_err(|_| PyTypeError::new_err("mmap item value must be an int"))?;
        let byte = u8::try_from(v)
            .map_err(|_| PyValueError::new_err("mmap item value must be in range(0, 256)"))?;
        m.write_at(i, &[byte]).py_err()
    }

    /// `x in m` as the stdlib evaluates it (mmap has no `__contains__`, so
    /// Python compares `x` with each one-byte item): true only for a
    /// one-byte bytes-like value present in the map; never for ints.
    pub(super) fn contains(&self, py: Python<'_>, value: &Bound<'_, PyAny>) -> PyResult<bool> {
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
    pub(super) fn del_item(&self, key: &Bound<'_, PyAny>) -> PyResult<()> {
        self.writable()?;
        if let Ok(slice) = key.cast::<PySlice>() {
            self.slice_indices(slice)?;
            return Err(PyTypeError::new_err("mmap object doesn't support slice deletion"));
        }
        self.item_offset(key)?;
        Err(PyTypeError::new_err("mmap doesn't support item deletion"))
    }
}

/// Iterator over a map's bytes (see `MappedFile::__iter__` and
/// `__reversed__`).
#[pyclass(module = "mmapkit", frozen)]
pub struct ByteIter {
    map: Py<MappedFile>,
    /// The next index (`usize::MAX`: exhausted).
    next: AtomicUsize,
    back: bool,
}

impl ByteIter {
    pub(super) fn new(map: Bound<'_, MappedFile>) -> Self {
        ByteIter { map: map.unbind(), next: AtomicUsize::new(0), back: false }
    }

    /// From the last byte to the first (as `reversed()` over the stdlib's
    /// sequence protocol: it stops once the map is shorter than the index).
    pub(super) fn reversed(map: Bound<'_, MappedFile>) -> PyResult<Self> {
        let len = map.get().get()?.len();
        let next = len.checked_sub(1).unwrap_or(usize::MAX);
        Ok(ByteIter { map: map.unbind(), next: AtomicUsize::new(next), back: true })
    }
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
        let next = if self.back { i.checked_sub(1).unwrap_or(usize::MAX) } else { i + 1 };
        self.next.store(next, Ordering::Relaxed);
        Ok(Some(PyBytes::new(py, &[byte]).unbind()))
    }
}

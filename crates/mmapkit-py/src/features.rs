//! The native half of `mmapkit.FeatureStore`: the core's
//! `store::features` transaction (open, create, add, refresh) over two
//! `ArrayStoreCore` objects, which lend the arrays' bytes to numpy as any
//! array store does (views, `gather`, close with live views). dtype
//! handling and the numpy-facing API are in `python/mmapkit/features.py`.

use std::path::PathBuf;
use std::sync::Mutex;

use mmapkit::store::features::{Commit, FeatureStore, Schema};
use mmapkit::store::ArrayStore;
use pyo3::prelude::*;

use crate::buffer::{with_contiguous_pair, Exported, View};
use crate::errors::IntoPy;
use crate::store::{store, ArrayStoreCore};

/// A feature store: its commit state and its two arrays (lock order:
/// the commit state, then features, then labels).
#[pyclass(module = "mmapkit._native", frozen)]
pub struct FeatureStoreCore {
    /// Held while the GIL is released (add, refresh): waited for without
    /// the GIL (`Exported::lock`), never closed.
    commit: Exported<Commit>,
    features: Mutex<Py<ArrayStoreCore>>,
    labels: Mutex<Py<ArrayStoreCore>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl FeatureStoreCore {
    fn wrap(py: Python<'_>, s: FeatureStore) -> PyResult<Self> {
        let (commit, f, l) = s.into_parts();
        let features =
            ArrayStoreCore::wrap(py, f, commit.path().join(mmapkit::store::features::FEATURES))?;
        let labels =
            ArrayStoreCore::wrap(py, l, commit.path().join(mmapkit::store::features::LABELS))?;
        Ok(FeatureStoreCore {
            commit: Exported::new(commit, "the FeatureStore is closed"),
            features: Mutex::new(features),
            labels: Mutex::new(labels),
        })
    }

    /// `f` on the commit state and both arrays (it releases the GIL).
    fn with_all<R>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Commit, &mut ArrayStore, &mut ArrayStore) -> R,
    ) -> PyResult<R> {
        let fs = lock(&self.features).clone_ref(py);
        let ls = lock(&self.labels).clone_ref(py);
        let (fb, lb) = (fs.bind(py), ls.bind(py));
        self.commit.with(|c| store(fb, |fa| store(lb, |la| f(c, fa, la))))??
    }

    /// `f` on the commit state (read-only accessors).
    fn commit<R>(&self, f: impl FnOnce(&Commit) -> R) -> R {
        self.commit.with(|c| f(c)).expect("never closed")
    }
}

/// A fill for `Commit::add_with` that copies the Python buffer `v`.
fn copy_of(v: View<'_>) -> impl FnOnce(&mut [u8]) -> Result<(), std::convert::Infallible> + '_ {
    move |dst| {
        v.copy_to(dst);
        Ok(())
    }
}

#[pymethods]
impl FeatureStoreCore {
    /// Creates (replacing any store there) and opens as the writer.
    #[staticmethod]
    fn create(
        py: Python<'_>,
        path: PathBuf,
        dim: u64,
        dtype: &str,
        label_dtype: &str,
    ) -> PyResult<Self> {
        let schema = Schema::new(dim, dtype, label_dtype).py_err()?;
        let s = py.detach(|| FeatureStore::create(&path, &schema)).py_err()?;
        Self::wrap(py, s)
    }

    /// Opens an existing store, read-only or as the one writer.
    #[staticmethod]
    fn open(py: Python<'_>, path: PathBuf, writable: bool) -> PyResult<Self> {
        let s = py.detach(|| FeatureStore::open(&path, writable)).py_err()?;
        Self::wrap(py, s)
    }

    /// Appends rows and labels (C-contiguous buffers of whole rows in the
    /// store's dtypes) and commits them, the GIL released; returns the
    /// committed count.
    fn add(
        &self,
        py: Python<'_>,
        features: &Bound<'_, PyAny>,
        labels: &Bound<'_, PyAny>,
    ) -> PyResult<u64> {
        self.with_all(py, |c, fa, la| {
            // Reading `features` and `labels` only through the Views (atomic
            // copies): another thread may be writing them.
            with_contiguous_pair(py, features, labels, |x, y| {
                let n = FeatureStore::rows_in(c, x.len(), y.len())?;
                c.add_with(fa, la, n, copy_of(x), copy_of(y))
                    .map(|r| r.unwrap_or_else(|e| match e {}))
            })
        })??
        .py_err()
    }

    /// Readers: sees rows committed since; returns the committed count.
    /// Arrays whose file was replaced are opened again: `features` and
    /// `labels` are then new objects (views of the old ones stay valid).
    fn refresh(&self, py: Python<'_>) -> PyResult<u64> {
        let (rows, re) =
            self.with_all(py, |c, fa, la| py.detach(|| c.refresh(fa, la)))?.py_err()?;
        let dir = self.commit(|c| c.path().to_owned());
        for (new, slot, name) in [
            (re.features, &self.features, mmapkit::store::features::FEATURES),
            (re.labels, &self.labels, mmapkit::store::features::LABELS),
        ] {
            if let Some(a) = new {
                *lock(slot) = ArrayStoreCore::wrap(py, a, dir.join(name))?;
            }
        }
        Ok(rows)
    }

    /// Closes both arrays (labels first: the features' lock is the
    /// store's); the writer lock goes at once, views stay readable.
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let l = lock(&self.labels).clone_ref(py);
        let f = lock(&self.features).clone_ref(py);
        let rl = l.bind(py).as_super().get().close(py);
        let rf = f.bind(py).as_super().get().close(py);
        rl.and(rf)
    }

    /// The features array (`ArrayStoreCore`).
    #[getter]
    fn features(&self, py: Python<'_>) -> Py<ArrayStoreCore> {
        lock(&self.features).clone_ref(py)
    }
    /// The labels array (`ArrayStoreCore`).
    #[getter]
    fn labels(&self, py: Python<'_>) -> Py<ArrayStoreCore> {
        lock(&self.labels).clone_ref(py)
    }
    /// The store's directory.
    #[getter]
    fn path(&self) -> PathBuf {
        self.commit(|c| c.path().to_owned())
    }
    /// Features per row.
    #[getter]
    fn dim(&self) -> u64 {
        self.commit(|c| c.schema().dim())
    }
    /// The features' numpy type string (`<f4`).
    #[getter]
    fn dtype(&self) -> String {
        self.commit(|c| c.schema().dtype().to_owned())
    }
    /// The labels' numpy type string.
    #[getter]
    fn label_dtype(&self) -> String {
        self.commit(|c| c.schema().label_dtype().to_owned())
    }
    /// Whether this is the store's writer.
    #[getter]
    fn writable(&self) -> bool {
        self.commit(|c| c.is_writable())
    }
    /// The committed row count.
    fn __len__(&self) -> usize {
        self.commit(|c| c.len() as usize)
    }
}

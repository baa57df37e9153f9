//! `LogServer` and `log_follow`: the binding of `mmapkit_replicate`
//! (`mmapkit.replicate` wraps them).

use std::path::PathBuf;
use std::sync::Mutex;
use std::time::Duration;

use mmapkit::log::SyncMode;
use mmapkit_replicate::{FollowOptions, Follower, ReplicateError, ServeOptions, Server};
use pyo3::create_exception;
use pyo3::exceptions::{PyOSError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::PyDict;

create_exception!(
    mmapkit,
    ReplicationError,
    PyOSError,
    "Following or serving a log over HTTP failed (the message names the URL and directory)."
);
create_exception!(
    mmapkit,
    SnapshotRequiredError,
    ReplicationError,
    "The leader purged entries the follower needs: rebuild it from a snapshot or a copy."
);

create_exception!(
    mmapkit,
    DivergedError,
    ReplicationError,
    "The leader serves another log, or one that differs from the follower's in a way its history does not explain; nothing was truncated (follow with reset=True to discard the follower's entries)."
);

fn to_py(e: ReplicateError) -> PyErr {
    match e {
        ReplicateError::Log(e) => crate::errors::to_py(e),
        ReplicateError::InvalidArgument(m) => PyValueError::new_err(m),
        ReplicateError::Panicked(m) => pyo3::exceptions::PyRuntimeError::new_err(m),
        e @ ReplicateError::SnapshotRequired { .. } => {
            SnapshotRequiredError::new_err(e.to_string())
        }
        e @ ReplicateError::Diverged { .. } => DivergedError::new_err(e.to_string()),
        e => ReplicationError::new_err(e.to_string()),
    }
}

/// A running log server (`mmapkit.replicate.serve`).
#[pyclass(module = "mmapkit._native")]
pub struct LogServer {
    inner: Mutex<Option<Server>>,
    url: String,
}

#[pymethods]
impl LogServer {
    #[new]
    #[pyo3(signature = (path, bind = "127.0.0.1:0", token = None, serve_unsynced = false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        bind: &str,
        token: Option<String>,
        serve_unsynced: bool,
    ) -> PyResult<Self> {
        let opts = ServeOptions::default()
            .bind(bind.to_string())
            .token(token)
            .serve_unsynced(serve_unsynced);
        let srv = py.detach(|| mmapkit_replicate::serve_dir(&path, opts)).map_err(to_py)?;
        Ok(LogServer { url: srv.url().to_string(), inner: Mutex::new(Some(srv)) })
    }
    /// `http://HOST:PORT`.
    #[getter]
    fn url(&self) -> String {
        self.url.clone()
    }
    /// Whether `close()` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).is_none()
    }
    /// Stops the server (idempotent).
    fn close(&self, py: Python<'_>) {
        let srv = self.inner.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(s) = srv {
            py.detach(move || s.shutdown());
        }
    }
}

/// Follows `url` into the log at `path`; returns a report dict. With
/// `once=False` it runs until interrupted (KeyboardInterrupt stops it
/// cleanly and is re-raised). The GIL is released meanwhile.
#[pyfunction]
#[pyo3(signature = (url, path, once = true, sync = None, token = None, reset = false))]
pub fn log_follow<'py>(
    py: Python<'py>,
    url: String,
    path: PathBuf,
    once: bool,
    sync: Option<&Bound<'py, PyAny>>,
    token: Option<String>,
    reset: bool,
) -> PyResult<Bound<'py, PyDict>> {
    let sync = match sync {
        None => SyncMode::Batch,
        Some(s) => crate::log::parse_sync(s)?,
    };
    let opts = FollowOptions::default().sync(sync).token(token).once(once).reset(reset);
    let f = py.detach(|| Follower::spawn(&url, &path, opts)).map_err(to_py)?;
    let stop = f.stop_handle();
    let mut interrupted = None;
    while !f.is_finished() {
        py.detach(|| {
            let t = std::time::Instant::now();
            while !f.is_finished() && t.elapsed() < Duration::from_millis(100) {
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        if let Err(e) = py.check_signals() {
            stop.stop();
            interrupted = Some(e);
            break;
        }
    }
    let r = py.detach(|| f.join());
    if let Some(e) = interrupted {
        return Err(e);
    }
    let r = r.map_err(to_py)?;
    let d = PyDict::new(py);
    d.set_item("appended", r.appended)?;
    d.set_item("bytes", r.bytes)?;
    d.set_item("truncated", r.truncated)?;
    d.set_item("retries", r.retries)?;
    d.set_item("first_index", r.first_index)?;
    d.set_item("last_index", r.last_index)?;
    Ok(d)
}

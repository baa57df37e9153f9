//! `mmapkit.CommitLog`: the write-ahead log of `mmapkit::log`, converted
//! for Python. Entries come back as `bytes` (one copy out of the mapping:
//! a view could be overwritten by appends after a `truncate_after`).

use std::path::PathBuf;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use mmapkit::log::{CommitLog as Core, Entry, LogOptions, SyncMode};
use pyo3::exceptions::{PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyList, PyTuple};

use crate::errors::IntoPy;

/// [`IntoPy`] for calls that write: writing to a read-only log raises
/// ``io.UnsupportedOperation`` (an ``OSError`` and a ``ValueError``), as
/// writing to a file opened read-only does.
trait WriteErr<T> {
    fn write_err(self) -> PyResult<T>;
}

impl<T> WriteErr<T> for mmapkit::Result<T> {
    fn write_err(self) -> PyResult<T> {
        self.map_err(|e| match e {
            mmapkit::Error::ReadOnly { path } => Python::attach(|py| {
                let msg = format!("{}: the log was opened with read_only=True", path.display());
                match py
                    .import("io")
                    .and_then(|m| m.getattr("UnsupportedOperation"))
                    .and_then(|t| Ok(t.cast_into::<pyo3::types::PyType>()?))
                {
                    Ok(t) => PyErr::from_type(t, msg),
                    Err(err) => err,
                }
            }),
            e => crate::errors::to_py(e),
        })
    }
}

/// A dict of `"key" => value` pairs (`?` on each insertion).
macro_rules! dict {
    ($py:expr, $($k:literal => $v:expr),* $(,)?) => {{
        let d = PyDict::new($py);
        $(d.set_item($k, $v)?;)*
        d
    }};
}

/// Batches smaller than this in `never` mode are appended without
/// releasing the GIL (releasing costs more than the append).
const DETACH_MIN: usize = 64 << 10;

/// A segmented, checksummed, crash-safe write-ahead log in directory `path`
/// (created if missing).
///
/// ``sync``: ``"batch"`` (durable before ``append`` returns; concurrent
/// appenders share syncs), ``"never"`` (the OS decides), or an interval:
/// a number of milliseconds or ``"interval:10ms"``. ``first_index`` is the
/// index of the first entry of a new log, ``segment_size`` the segment
/// size of a new log (rounded up to 4 KiB; an existing log keeps the size
/// it was created with). ``None`` takes the core's default (``batch``,
/// index 1, 64 MiB). ``read_only=True`` opens a log that another
/// process writes (writing to it raises ``io.UnsupportedOperation``).
/// A power loss can tear only batches that were not yet synced (with
/// ``sync="batch"`` and one appender, the last one); from the first such
/// damaged batch on the tail is dropped on open (moved to the quarantine
/// directory). Damage to a batch that a later batch records as durable
/// raises ``CorruptError`` naming the entry and segment; ``repair=True`` then keeps the valid prefix of a damaged tail
/// segment and moves the bytes it cuts to
/// ``path/quarantine/<segment>.<byte>.bad`` (see ``recovery``).
///
/// ``append`` takes a list of ``bytes`` (all with ``term``) or of
/// ``(term, bytes)`` tuples and returns the first new index; ``read(lo,
/// hi)`` returns the entries ``lo..hi-1`` as a list of ``bytes`` (copies:
/// the log's mapping may be reused after ``truncate_after``). Iterating
/// yields every entry's bytes. Pickles by path.
#[pyclass(module = "mmapkit._native", frozen)]
pub struct CommitLog {
    inner: RwLock<Option<Arc<Core>>>,
    path: PathBuf,
    /// The options the core opened it with (kept for pickling and repr
    /// after close).
    opts: LogOptions,
}

pub(crate) fn parse_sync(obj: &Bound<'_, PyAny>) -> PyResult<SyncMode> {
    if let Ok(s) = obj.extract::<String>() {
        return s.parse().py_err();
    }
    if obj.is_instance_of::<pyo3::types::PyBool>() {
        return Err(PyTypeError::new_err(
            "sync must be 'batch', 'never', or an interval in milliseconds",
        ));
    }
    match obj.extract::<f64>() {
        Ok(ms) if ms.is_finite() && ms >= 0.0 => {
            Ok(SyncMode::Interval(Duration::from_secs_f64(ms / 1e3)))
        }
        Ok(ms) => Err(PyValueError::new_err(format!("sync interval must be >= 0 ms, not {ms}"))),
        Err(_) => Err(PyTypeError::new_err(
            "sync must be 'batch', 'never', or an interval in milliseconds",
        )),
    }
}

fn push_entry<'py>(
    item: Bound<'py, PyAny>,
    term: u64,
    keep: &mut Vec<(u64, Bound<'py, PyBytes>)>,
    total: &mut usize,
) -> PyResult<()> {
    let bad = || PyTypeError::new_err("entries must be bytes or (term, bytes) tuples");
    let (t, b) = match item.cast_into::<PyBytes>() {
        Ok(b) => (term, b),
        Err(e) => {
            let item = e.into_inner();
            let tup = item.cast::<PyTuple>().map_err(|_| bad())?;
            let (t, b): (u64, Bound<'py, PyAny>) = tup.extract()?;
            (t, b.cast_into::<PyBytes>().map_err(|_| bad())?)
        }
    };
    *total += b.as_bytes().len();
    keep.push((t, b));
    Ok(())
}

impl CommitLog {
    fn log(&self) -> PyResult<Arc<Core>> {
        self.inner
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or_else(|| PyValueError::new_err("I/O operation on a closed CommitLog"))
    }

    /// `f` on the open log with the GIL released.
    fn detached<R: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&Core) -> mmapkit::Result<R> + Send,
    ) -> PyResult<mmapkit::Result<R>> {
        let log = self.log()?;
        Ok(py.detach(|| f(&log)))
    }

    /// Entries `lo..hi-1` (see `read`), each converted by `item`; the GIL
    /// is released for large ranges.
    fn read_list<'py, T: IntoPyObject<'py>>(
        &self,
        py: Python<'py>,
        (lo, hi, max_bytes): (u64, u64, Option<usize>),
        item: impl Fn(Entry<'_>) -> T,
    ) -> PyResult<Bound<'py, PyList>> {
        let log = self.log()?;
        let es = if hi.saturating_sub(lo) > 4096 {
            py.detach(|| log.read(lo, hi, max_bytes)).py_err()?
        } else {
            log.read(lo, hi, max_bytes).py_err()?
        };
        let list = PyList::new(py, es.iter().map(item))?;
        es.check().py_err()?; // payloads copied: none from a truncated page
        Ok(list)
    }
}

#[pymethods]
impl CommitLog {
    #[new]
    #[pyo3(signature = (path, segment_size = None, sync = None, first_index = None, read_only = false, repair = false))]
    fn new(
        py: Python<'_>,
        path: PathBuf,
        segment_size: Option<u64>,
        sync: Option<&Bound<'_, PyAny>>,
        first_index: Option<u64>,
        read_only: bool,
        repair: bool,
    ) -> PyResult<Self> {
        let mut opts = LogOptions::default().read_only(read_only).repair(repair);
        if let Some(s) = segment_size {
            opts = opts.segment_size(s);
        }
        if let Some(i) = first_index {
            opts = opts.first_index(i);
        }
        if let Some(s) = sync {
            opts = opts.sync(parse_sync(s)?);
        }
        let log = py.detach(|| Core::open(&path, opts)).py_err()?;
        let opts = log.options().clone();
        Ok(CommitLog { inner: RwLock::new(Some(Arc::new(log))), path, opts })
    }

    /// Appends one batch: a list of ``bytes`` (each with ``term``) or of
    /// ``(term, bytes)`` tuples. Returns the index of the first entry.
    #[pyo3(signature = (entries, term = 0))]
    fn append(&self, py: Python<'_>, entries: &Bound<'_, PyAny>, term: u64) -> PyResult<u64> {
        let log = self.log()?;
        // Own a reference to every bytes object, so their buffers stay
        // alive while the GIL is released even if the list is changed.
        let mut keep: Vec<(u64, Bound<'_, PyBytes>)> = Vec::new();
        let mut total = 0usize;
        if let Ok(list) = entries.cast::<PyList>() {
            keep.reserve(list.len());
            for item in list.iter() {
                push_entry(item, term, &mut keep, &mut total)?;
            }
        } else {
            for item in entries.try_iter()? {
                push_entry(item?, term, &mut keep, &mut total)?;
            }
        }
        let batch: Vec<(u64, &[u8])> = keep.iter().map(|(t, b)| (*t, b.as_bytes())).collect();
        if self.opts.sync == SyncMode::Never && total < DETACH_MIN {
            log.append(&batch).write_err()
        } else {
            py.detach(|| log.append(&batch)).write_err()
        }
    }

    /// Entries ``lo..hi-1`` as a list of ``bytes`` (copies). With
    /// ``max_bytes``: as many whole entries from ``lo`` as fit, at least one.
    #[pyo3(signature = (lo, hi, max_bytes = None))]
    fn read<'py>(
        &self,
        py: Python<'py>,
        lo: u64,
        hi: u64,
        max_bytes: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.read_list(py, (lo, hi, max_bytes), |e| PyBytes::new(py, e.data()))
    }

    /// Entries ``lo..hi-1`` as a list of ``(index, term, bytes)`` tuples.
    #[pyo3(signature = (lo, hi, max_bytes = None))]
    fn read_entries<'py>(
        &self,
        py: Python<'py>,
        lo: u64,
        hi: u64,
        max_bytes: Option<usize>,
    ) -> PyResult<Bound<'py, PyList>> {
        self.read_list(py, (lo, hi, max_bytes), |e| {
            (e.index(), e.term(), PyBytes::new(py, e.data()))
        })
    }

    /// The bytes of entry ``index``.
    fn get<'py>(&self, py: Python<'py>, index: u64) -> PyResult<Bound<'py, PyBytes>> {
        let e = self.log()?.get(index).py_err()?;
        Ok(PyBytes::new(py, e.data()))
    }

    /// The term of entry ``index``.
    fn term(&self, index: u64) -> PyResult<u64> {
        self.log()?.term(index).py_err()
    }

    /// Index of the first entry (of the next one, when empty).
    fn first_index(&self) -> PyResult<u64> {
        Ok(self.log()?.first_index())
    }

    /// Index of the last entry (``first_index() - 1`` when empty).
    fn last_index(&self) -> PyResult<u64> {
        Ok(self.log()?.last_index())
    }

    fn __len__(&self) -> PyResult<usize> {
        Ok(self.log()?.len() as usize)
    }

    /// Drops every entry after ``index``; the next append gets ``index + 1``.
    fn truncate_after(&self, py: Python<'_>, index: u64) -> PyResult<()> {
        self.detached(py, |l| l.truncate_after(index))?.write_err()
    }

    /// Drops whole segments whose entries are all below ``index``.
    fn purge_before(&self, py: Python<'_>, index: u64) -> PyResult<()> {
        self.detached(py, |l| l.purge_before(index))?.write_err()
    }

    /// Makes everything appended so far durable.
    fn sync(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, Core::sync)?.py_err()
    }

    /// For a ``read_only=True`` log: picks up what the writing process has
    /// appended, truncated or purged since. Does nothing on a writable log.
    fn refresh(&self, py: Python<'_>) -> PyResult<()> {
        self.detached(py, Core::refresh)?.py_err()
    }

    /// Number of syncs (fdatasync of a range) this handle has made.
    fn sync_count(&self) -> PyResult<u64> {
        Ok(self.log()?.sync_count())
    }

    /// Checks every entry's checksum and batch commit (segments in
    /// parallel on ``threads``: None or 0 one per core, 1 sequential);
    /// returns counts (``segments``, ``entries``, ``bytes``) and
    /// ``unreadable_tail``: ``None`` when the log ends cleanly, else a dict
    /// (``first_index``, ``entries``, ``bytes``) of the bytes after the last
    /// whole batch that do not read back: a torn write of a batch never
    /// synced, or damage to the synced last batch (the two cannot be told
    /// apart; a read-only open leaves them in place, a writable one moves
    /// them to the quarantine directory). Raises ``CorruptError`` naming
    /// the entry and segment for damage before the last batch.
    #[pyo3(signature = (*, threads = None))]
    fn verify<'py>(&self, py: Python<'py>, threads: Option<i64>) -> PyResult<Bound<'py, PyDict>> {
        let log = self.log()?;
        let threads = crate::exec::threads(threads)?;
        let r = py.detach(|| log.verify_with(threads, &Default::default())).py_err()?;
        let d = PyDict::new(py);
        d.set_item("segments", r.segments)?;
        d.set_item("entries", r.entries)?;
        d.set_item("bytes", r.bytes)?;
        let tail = match r.unreadable_tail {
            Some(t) => Some(dict!(py,
                "first_index" => t.first_index, "entries" => t.entries, "bytes" => t.bytes)),
            None => None,
        };
        d.set_item("unreadable_tail", tail)?;
        Ok(d)
    }

    /// First/last index, entry count and the segments.
    fn stat<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let s = self.log()?.stat().py_err()?;
        let segs = PyList::empty(py);
        for g in s.segments {
            segs.append(dict!(py,
                "path" => g.path.display().to_string(), "first_index" => g.first_index,
                "entries" => g.entries, "generation" => g.generation, "size" => g.size))?;
        }
        Ok(dict!(py,
            "path" => s.dir.display().to_string(), "first_index" => s.first_index, "last_index" => s.last_index,
            "entries" => s.entries, "sync_count" => s.sync_count, "segments" => segs))
    }

    /// What recovery found on open: ``dropped_entries`` (of a torn tail of
    /// unsynced batches, or cut by ``repair``), ``dropped_bytes``, ``tail_segment``,
    /// ``quarantine`` (the file holding the bytes cut, or ``None``).
    #[getter]
    fn recovery<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let log = self.log()?;
        let r = log.recovery();
        Ok(dict!(py,
            "dropped_entries" => r.dropped_entries, "dropped_bytes" => r.dropped_bytes,
            "tail_segment" => r.tail_segment.display().to_string(),
            "quarantine" => r.quarantine.as_ref().map(|q| q.display().to_string())))
    }

    /// The log's directory.
    #[getter]
    fn path(&self) -> String {
        self.path.display().to_string()
    }

    /// Whether :meth:`close` was called.
    #[getter]
    fn closed(&self) -> bool {
        self.inner.read().unwrap_or_else(|e| e.into_inner()).is_none()
    }

    /// Syncs (unless ``sync="never"``) and closes; reads already returned
    /// stay valid (they are copies).
    fn close(&self, py: Python<'_>) -> PyResult<()> {
        let taken = self.inner.write().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(log) = taken {
            // Dropping the last reference syncs (batch/interval) and unlocks.
            py.detach(move || drop(log));
        }
        Ok(())
    }

    fn __enter__(slf: Bound<'_, Self>) -> PyResult<Bound<'_, Self>> {
        slf.get().log()?;
        Ok(slf)
    }

    #[pyo3(signature = (*_args))]
    fn __exit__(&self, py: Python<'_>, _args: &Bound<'_, PyTuple>) -> PyResult<()> {
        self.close(py)
    }

    fn __iter__(slf: Bound<'_, Self>) -> PyResult<CommitLogIter> {
        let log = slf.get().log()?;
        let (next, end) = (log.first_index(), log.last_index() + 1);
        Ok(CommitLogIter { log, next, end, buf: Vec::new() })
    }

    fn __repr__(&self) -> String {
        match self.log() {
            Ok(l) => format!(
                "<mmapkit.CommitLog path={:?} first_index={} last_index={} sync={:?}>",
                self.path.display().to_string(),
                l.first_index(),
                l.last_index(),
                self.opts.sync.to_string()
            ),
            Err(_) => format!(
                "<mmapkit.CommitLog path={:?} closed=True>",
                self.path.display().to_string()
            ),
        }
    }

    /// Pickles by path: the receiver opens the log again (close it here
    /// first, or pickle a ``read_only=True`` log: one writer at a time).
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<Bound<'py, PyTuple>> {
        let py = slf.py();
        let (path, o) = (&slf.get().path, &slf.get().opts);
        let args = (path.clone(), o.segment_size, o.sync.to_string(), o.first_index, o.read_only);
        PyTuple::new(
            py,
            [py.get_type::<CommitLog>().into_any(), args.into_pyobject(py)?.into_any()],
        )
    }
}

/// Iterator over a :class:`CommitLog`'s entries (bytes), reading ahead in
/// chunks; sees the entries that existed when it was created.
#[pyclass(module = "mmapkit._native")]
pub struct CommitLogIter {
    log: Arc<Core>,
    next: u64,
    end: u64,
    buf: Vec<Py<PyBytes>>,
}

#[pymethods]
impl CommitLogIter {
    fn __iter__(slf: PyRef<'_, Self>) -> PyRef<'_, Self> {
        slf
    }

    fn __next__(&mut self, py: Python<'_>) -> PyResult<Option<Py<PyBytes>>> {
        if self.buf.is_empty() {
            if self.next >= self.end {
                return Ok(None);
            }
            let hi = self.end.min(self.next + 1024);
            let es = self.log.read(self.next, hi, None).py_err()?;
            self.buf = es.iter().rev().map(|e| PyBytes::new(py, e.data()).unbind()).collect();
            es.check().py_err()?;
            self.next = hi;
        }
        Ok(self.buf.pop())
    }
}

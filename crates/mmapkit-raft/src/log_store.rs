//! [`LogStore`]: openraft's `RaftLogStorage` on [`mmapkit::log::CommitLog`].
//!
//! # On disk
//!
//! ```text
//! DIR/meta         vote, last purged log id, current log generation (synced, atomic)
//! DIR/committed    the committed log id (a hint: one sector overwritten in
//!                  place, not synced, checksummed: torn reads as none)
//! DIR/log.GEN/     the commit log; raft index i is entry i + 1 (mmapkit
//!                  logs start at 1, openraft's at 0), its term the
//!                  leader's term, its bytes the serialized openraft entry
//! ```
//!
//! # Promises
//!
//! * **Durability before acknowledgement**: `append` writes the entries
//!   into the log's page cache and makes them durable (`msync(MS_SYNC)` of
//!   the range written, i.e. fdatasync of it) *before* it fires openraft's
//!   [`LogFlushed`] callback; a failed write or sync reports the error to
//!   the callback, never success. The write and sync run on tokio's
//!   blocking pool, awaited (openraft 0.9's core waits for the callback of
//!   each append anyway, `RaftCore::append_to_log`), so a slow disk never
//!   holds an async worker: a dedicated flusher thread would only add
//!   thread hops (measured: the 1-client cluster bench was ~25 % slower
//!   with one).
//! * **No blocking I/O on async workers**: `save_vote`, `truncate`,
//!   `purge` (fsync, rename, `remove_dir_all`) run on the blocking pool
//!   too. The log zeroes (and syncs) 1 MiB ahead of
//!   its end ([`ZERO_AHEAD`]): the per-append sync then writes data only,
//!   not also the extent conversion and inode of fallocated blocks.
//! * **Contiguity** is checked on every read: each entry's stored log id
//!   must carry the index it was read at, and a range inside the log must
//!   come back whole; a gap or a mismatch is a `StorageError`, never a short
//!   answer. Appends must continue the log exactly (openraft's rule).
//! * **Purge and truncate against readers**: readers (replication streams
//!   through [`RaftLogStorage::get_log_reader`]) hold a read lock for the
//!   duration of one read; purge and truncate take the write lock, so a
//!   reader sees the log before or after, never in between. Entries
//!   still on disk below the purge point (the log drops whole segments)
//!   are never returned.
//! * **Crash safety**: the vote and the purge point are replaced
//!   atomically and durably (temp file, fsync, rename, directory fsync,
//!   through `mmapkit::fs`); the purge point is recorded before any
//!   segment is deleted. A purge past the last entry (a snapshot
//!   installed on a follower far behind) starts a new log generation: the
//!   new, empty log directory is created durably, then `meta` names it,
//!   then the old one is deleted; a crash in between leaves an orphan that
//!   the next open deletes.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{AnyError, LogId, RaftLogId, RaftTypeConfig, StorageError, StorageIOError, Vote};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::meta;
use crate::{Error, Result};

/// At most this many bytes of entries per `limited_get_log_entries`
/// answer (replication pages); at least one entry always.
pub const READ_PAGE_BYTES: usize = 4 << 20;

/// Bytes of the log zeroed ahead of its end ([`CommitLog::set_zero_ahead`]).
pub const ZERO_AHEAD: usize = 1 << 20;

mmapkit::options! {
    /// Options of [`LogStore::open`].
    #[derive(Clone, Debug)]
    pub struct StoreOptions {
        /// Segment size of new log generations (default 64 MiB).
        pub segment_size: u64,
        /// Whether appends are made durable before openraft is told they
        /// are (default `true`). `false` acknowledges once the entries are in
        /// the page cache: only for measuring, never for a real cluster.
        pub durable: bool,
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { segment_size: 64 << 20, durable: true }
    }
}

#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(bound = "")]
struct Meta<C: RaftTypeConfig> {
    version: u32,
    vote: Option<Vote<C::NodeId>>,
    purged: Option<LogId<C::NodeId>>,
    /// Generation of the log directory in use (`log.GEN`).
    log: u64,
}

struct Current<C: RaftTypeConfig> {
    log: Arc<CommitLog>,
    meta: Meta<C>,
    /// Id of the last entry (cached; `None` when nothing was ever kept).
    last: Option<LogId<C::NodeId>>,
}

struct Inner<C: RaftTypeConfig> {
    dir: PathBuf,
    opts: StoreOptions,
    cur: RwLock<Current<C>>,
    /// The committed id's slot.
    committed: meta::Slot,
    /// The removal of purged segments running in the background (see
    /// [`LogStore::do_purge`]).
    purging: Mutex<Option<std::thread::JoinHandle<Result<()>>>>,
}

impl<C: RaftTypeConfig> Drop for Inner<C> {
    fn drop(&mut self) {
        // The log is closed when the store is: a reopen never finds it
        // still held by a removal.
        if let Some(h) = self.purging.get_mut().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = h.join();
        }
    }
}

/// openraft log storage on a mmapkit commit log; see the [module docs](self).
/// Cloning is cheap: clones share the log (a clone is the log reader).
pub struct LogStore<C: RaftTypeConfig> {
    inner: Arc<Inner<C>>,
    _c: PhantomData<C>,
}

impl<C: RaftTypeConfig> Clone for LogStore<C> {
    fn clone(&self) -> Self {
        LogStore { inner: self.inner.clone(), _c: PhantomData }
    }
}

impl<C: RaftTypeConfig> Debug for LogStore<C> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogStore").field("dir", &self.inner.dir).finish()
    }
}

fn log_dir(dir: &Path, gen: u64) -> PathBuf {
    dir.join(format!("log.{gen}"))
}

/// The raft index stored at mmapkit index `i + 1`.
fn to_log(raft_index: u64) -> u64 {
    raft_index + 1
}

impl<C> LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    /// Opens (creating if missing) the store in `dir`.
    pub fn open(dir: impl AsRef<Path>, opts: StoreOptions) -> Result<LogStore<C>> {
        let dir = dir.as_ref().to_owned();
        mmapkit::fs::create_dir_durably(&dir)?;
        let meta_path = dir.join("meta");
        let meta: Meta<C> = match meta::read(&meta_path)? {
            meta::Read::Valid(m) => m,
            meta::Read::Missing => {
                let m = Meta { version: 1, vote: None, purged: None, log: 0 };
                meta::write(&meta_path, &m, true)?;
                m
            }
            // Written with sync: damage is not a torn write.
            meta::Read::Damaged(why) => return Err(Error::Corrupt(meta_path, why)),
        };
        if meta.version != 1 {
            return Err(Error::Corrupt(
                meta_path,
                format!("unknown format version {}", meta.version),
            ));
        }
        // Raft indexes stay far below this; nearer, the log index of the
        // entry after the purge point (index + 2) would overflow.
        if let Some(p) = meta.purged.as_ref().filter(|p| p.index >= u64::MAX - 2) {
            return Err(Error::Corrupt(meta_path, format!("purge point {p} is out of range")));
        }
        remove_other_generations(&dir, meta.log)?;
        let first = to_log(meta.purged.as_ref().map_or(0, |p| p.index + 1));
        let log = open_log(&dir, meta.log, first, &opts)?;
        let last = last_log_id::<C>(&log, &meta)?;
        let committed = meta::Slot::open(&dir.join("committed"))?;
        let inner = Arc::new(Inner {
            committed,
            purging: Mutex::new(None),
            dir,
            opts,
            cur: RwLock::new(Current { log: Arc::new(log), meta, last }),
        });
        Ok(LogStore { inner, _c: PhantomData })
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// The commit log in use (e.g. to serve it with `mmapkit-replicate`).
    pub fn log(&self) -> Arc<CommitLog> {
        self.read().log.clone()
    }

    fn read(&self) -> RwLockReadGuard<'_, Current<C>> {
        self.inner.cur.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Current<C>> {
        self.inner.cur.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Entries with raft indexes in `[lo, hi)`, all of them that exist
    /// above the purge point, read under the read lock; `max_bytes` bounds
    /// the answer (at least one entry).
    fn entries(&self, lo: u64, hi: u64, max_bytes: Option<usize>) -> Result<Vec<C::Entry>> {
        let cur = self.read();
        let visible = cur
            .meta
            .purged
            .as_ref()
            .map_or(0, |p| p.index.saturating_add(1))
            .max(cur.log.first_index().saturating_sub(1));
        let end = cur.last.as_ref().map_or(0, |l| l.index + 1);
        let lo = lo.max(visible);
        let hi = hi.min(end);
        if lo >= hi {
            return Ok(Vec::new());
        }
        let got = cur.log.read(to_log(lo), to_log(hi), max_bytes)?;
        if got.is_empty() || (max_bytes.is_none() && got.len() as u64 != hi - lo) {
            return Err(Error::Gap(format!(
                "asked for raft entries [{lo}, {hi}), the log returned {}",
                got.len()
            )));
        }
        let mut out = Vec::with_capacity(got.len());
        for (k, e) in got.iter().enumerate() {
            debug_assert_eq!(e.index(), to_log(lo + k as u64));
            out.push(decode_at::<C>(&cur.log, e.index(), e.term(), e.data())?);
        }
        Ok(out)
    }

    fn save_meta(&self, cur: &mut Current<C>, next: Meta<C>) -> Result<()> {
        meta::write(&self.inner.dir.join("meta"), &next, true)?;
        cur.meta = next;
        Ok(())
    }

    fn do_append(&self, mut entries: Vec<C::Entry>) -> Result<()> {
        let mut batch = Vec::with_capacity(entries.len());
        // The write lock: a purge or truncation never interleaves with an
        // append's checks and its write.
        let mut cur = self.write();
        // Entries at or below the purge point are already covered by the
        // state machine: acknowledged and dropped, as a store keyed by
        // index would shadow them (openraft never sends them; its
        // conformance suite does).
        if let Some(p) = &cur.meta.purged {
            entries.retain(|e| e.get_log_id().index > p.index);
        }
        if entries.is_empty() {
            return Ok(());
        }
        let start = entries[0].get_log_id().index;
        let mut restarted = None;
        if cur.last.is_none() && cur.log.first_index() != to_log(start) {
            // An empty log that never held anything may start anywhere
            // (openraft's contract): a new generation starting there.
            let next = cur.meta.clone();
            restarted = Some(self.restart(&mut cur, start, next)?);
        }
        let mut prev = cur.last.clone();
        for e in &entries {
            let id = e.get_log_id().clone();
            let want = prev.as_ref().map_or(start, |p| p.index + 1);
            if id.index != want {
                return Err(Error::Gap(format!(
                    "append of raft log id {id} does not continue the log (next index {want})"
                )));
            }
            let bytes = serde_json::to_vec(e).map_err(|e| Error::Encode(e.to_string()))?;
            batch.push((id.leader_id.term, bytes));
            prev = Some(id);
        }
        let first = cur.log.append(&batch)?;
        debug_assert_eq!(first, to_log(entries[0].get_log_id().index));
        cur.last = prev;
        drop(cur);
        if let Some(gen) = restarted {
            remove_other_generations(&self.inner.dir, gen)?;
        }
        Ok(())
    }

    fn do_truncate(&self, since: &LogId<C::NodeId>) -> Result<()> {
        let mut cur = self.write();
        let keep_last = to_log(since.index) - 1; // mmapkit index of the last kept entry
        let first = cur.log.first_index();
        cur.log.truncate_after(keep_last.max(first - 1))?;
        cur.last = last_log_id::<C>(&cur.log, &cur.meta)?;
        Ok(())
    }

    /// Waits for the removal of purged segments started last, if any; its
    /// failure is this call's (fail-stop).
    fn finish_purge(&self) -> Result<()> {
        let running = self.inner.purging.lock().unwrap_or_else(|e| e.into_inner()).take();
        match running.map(|h| h.join()) {
            None | Some(Ok(Ok(()))) => Ok(()),
            Some(Ok(Err(e))) => Err(e),
            Some(Err(_)) => Err(Error::Io(
                self.inner.dir.clone(),
                "remove purged segments",
                std::io::Error::other("the removal thread panicked"),
            )),
        }
    }

    fn do_purge(&self, upto: &LogId<C::NodeId>) -> Result<()> {
        self.finish_purge()?;
        let mut cur = self.write();
        if cur.meta.purged.as_ref().is_some_and(|p| p.index >= upto.index) {
            return Ok(());
        }
        let past_end = cur.last.as_ref().is_none_or(|l| l.index <= upto.index);
        let mut next = cur.meta.clone();
        next.purged = Some(upto.clone());
        if !past_end {
            // The purge point is durable before any segment goes; the
            // segments go without this lock, which appends wait for (the
            // log lets them go on meanwhile).
            // openraft awaits a purge before anything else it does: the
            // segments (gigabytes; an unlink and a directory sync each)
            // are removed on a thread of their own, entries from the purge
            // point on never waiting for it (a purge of 3 GB held every
            // write for 2 s). The next purge or new generation waits for it.
            self.save_meta(&mut cur, next)?;
            let log = cur.log.clone();
            drop(cur);
            let from = to_log(upto.index + 1);
            let h = std::thread::Builder::new()
                .name("kv-purge".into())
                .spawn(move || log.purge_before(from).map_err(Error::from))
                .map_err(|e| Error::Io(self.inner.dir.clone(), "spawn a thread", e))?;
            *self.inner.purging.lock().unwrap_or_else(|e| e.into_inner()) = Some(h);
            return Ok(());
        }
        // Nothing stays: a new, empty generation starting after `upto`.
        let gen = self.restart(&mut cur, upto.index + 1, next)?;
        cur.last = Some(upto.clone());
        drop(cur);
        remove_other_generations(&self.inner.dir, gen)
    }

    /// Replaces the log by a new, empty generation whose next raft index is
    /// `next_index`, with `next` as the metadata (its `log` is set here):
    /// the new directory is created durably, then `meta` names it; the
    /// caller deletes the old one (a crash before that leaves an orphan
    /// that `open` deletes). Returns the new generation.
    fn restart(&self, cur: &mut Current<C>, next_index: u64, mut next: Meta<C>) -> Result<u64> {
        // The old generation's directory goes: no removal may run in it.
        self.finish_purge()?;
        next.log = cur.meta.log + 1;
        let log = open_log(&self.inner.dir, next.log, to_log(next_index), &self.inner.opts)?;
        let gen = next.log;
        self.save_meta(cur, next)?;
        cur.log = Arc::new(log);
        Ok(gen)
    }
}

/// Decodes raft entry `index` from the bytes of its log entry in `log`.
/// The log's CRC accepted those bytes, so bytes that do not decode are
/// corruption (written wrong, or by something else), not a gap.
fn decode<E: DeserializeOwned>(log: &CommitLog, bytes: &[u8], index: u64) -> Result<E> {
    serde_json::from_slice(bytes).map_err(|e| {
        Error::Log(mmapkit::Error::Corrupt {
            path: log.dir().to_owned(),
            detail: format!(
                "raft entry {index} (log entry {}) passes its CRC but does not decode: {e}",
                to_log(index)
            ),
        })
    })
}

/// Decodes the raft entry kept at log entry `index` (with `term`) and
/// checks that it is the one that belongs there: raft index `index - 1`,
/// the log entry's term. Bytes that pass the log's CRC but hold another
/// id were written wrong: corruption. (Found by the raft_decode fuzz
/// target: the last entry's id was taken unchecked, so a misplaced one
/// made the store report a last log id the log does not end with.)
fn decode_at<C>(log: &CommitLog, index: u64, term: u64, bytes: &[u8]) -> Result<C::Entry>
where
    C: RaftTypeConfig,
    C::Entry: DeserializeOwned,
{
    let want = index.saturating_sub(1);
    let ent: C::Entry = decode(log, bytes, want)?;
    let id = ent.get_log_id();
    if id.index != want || id.leader_id.term != term {
        return Err(Error::Log(mmapkit::Error::Corrupt {
            path: log.dir().to_owned(),
            detail: format!(
                "log entry {index} (term {term}) holds raft log id {id}, expected raft index {want}"
            ),
        }));
    }
    Ok(ent)
}

fn open_log(dir: &Path, gen: u64, first: u64, opts: &StoreOptions) -> Result<CommitLog> {
    let lo = LogOptions::default()
        .segment_size(opts.segment_size)
        .first_index(first)
        // Batch: the range is synced before `append` returns.
        .sync(if opts.durable { SyncMode::Batch } else { SyncMode::Never });
    let path = log_dir(dir, gen);
    let log = CommitLog::open(&path, lo)?;
    if opts.durable {
        // Every append is synced, most of them one entry (openraft 0.9's
        // leader appends each client write on its own): syncs into
        // fallocated blocks also convert extents and write the inode.
        log.set_zero_ahead(ZERO_AHEAD);
    }
    if log.first_index() > first {
        return Err(Error::Gap(format!(
            "{}: the log starts at entry {} but the purge point keeps entries from {first}",
            path.display(),
            log.first_index()
        )));
    }
    Ok(log)
}

/// Deletes log generations other than `keep` (left by a crash mid-purge).
fn remove_other_generations(dir: &Path, keep: u64) -> Result<()> {
    let rd = std::fs::read_dir(dir).map_err(|e| Error::Io(dir.to_owned(), "read_dir", e))?;
    let mut removed = false;
    for ent in rd.flatten() {
        let name = ent.file_name();
        let Some(gen) =
            name.to_str().and_then(|n| n.strip_prefix("log.")).and_then(|g| g.parse::<u64>().ok())
        else {
            continue;
        };
        if gen != keep {
            let p = ent.path();
            mmapkit::fs::remove_dir_all(&p)?;
            removed = true;
        }
    }
    if removed {
        mmapkit::fs::sync_dir(dir)?;
    }
    Ok(())
}

fn last_log_id<C>(log: &CommitLog, meta: &Meta<C>) -> Result<Option<LogId<C::NodeId>>>
where
    C: RaftTypeConfig,
    C::Entry: DeserializeOwned,
{
    let purged = meta.purged.as_ref().map_or(0, |p| p.index + 1);
    if log.is_empty() || log.last_index() < to_log(purged) {
        return Ok(meta.purged.clone());
    }
    let e = log.get(log.last_index())?;
    let ent = decode_at::<C>(log, e.index(), e.term(), e.data())?;
    Ok(Some(ent.get_log_id().clone()))
}

fn storage_err<C: RaftTypeConfig>(
    e: Error,
    f: fn(AnyError) -> StorageIOError<C::NodeId>,
) -> StorageError<C::NodeId> {
    StorageError::IO { source: f(AnyError::new(&e)) }
}

fn range_bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let lo = match range.start_bound() {
        Bound::Included(&x) => x,
        Bound::Excluded(&x) => x.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let hi = match range.end_bound() {
        Bound::Included(&x) => x.saturating_add(1),
        Bound::Excluded(&x) => x,
        Bound::Unbounded => u64::MAX,
    };
    (lo, hi)
}

impl<C> RaftLogReader<C> for LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> std::result::Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let (lo, hi) = range_bounds(&range);
        self.entries(lo, hi, None).map_err(|e| storage_err::<C>(e, StorageIOError::read_logs))
    }

    async fn limited_get_log_entries(
        &mut self,
        start: u64,
        end: u64,
    ) -> std::result::Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        self.entries(start, end, Some(READ_PAGE_BYTES))
            .map_err(|e| storage_err::<C>(e, StorageIOError::read_logs))
    }
}

impl<C> RaftLogStorage<C> for LogStore<C>
where
    C: RaftTypeConfig,
    C::Entry: Serialize + DeserializeOwned,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> std::result::Result<LogState<C>, StorageError<C::NodeId>> {
        let cur = self.read();
        Ok(LogState { last_purged_log_id: cur.meta.purged.clone(), last_log_id: cur.last.clone() })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(
        &mut self,
        vote: &Vote<C::NodeId>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        let (s, vote) = (self.clone(), vote.clone());
        crate::off_worker(move || {
            let mut cur = s.write();
            let mut next = cur.meta.clone();
            next.vote = Some(vote);
            s.save_meta(&mut cur, next)
        })
        .await
        .map_err(|e| storage_err::<C>(e, StorageIOError::write_vote))
    }

    async fn read_vote(
        &mut self,
    ) -> std::result::Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.read().meta.vote.clone())
    }

    async fn save_committed(
        &mut self,
        committed: Option<LogId<C::NodeId>>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        // A hint (openraft re-derives it): overwritten in place, not
        // synced; a torn one after a power loss reads as None.
        self.inner
            .committed
            .write(&committed)
            .map_err(|e| storage_err::<C>(e, StorageIOError::write))
    }

    async fn read_committed(
        &mut self,
    ) -> std::result::Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        match self.inner.committed.read::<Option<LogId<C::NodeId>>>() {
            Ok(meta::Read::Valid(c)) => {
                // Never past the log's end (its tail may have been torn).
                let last = self.read().last.clone();
                Ok(c.filter(|c| last.as_ref().is_some_and(|l| l.index >= c.index)))
            }
            Ok(_) => Ok(None),
            Err(e) => Err(storage_err::<C>(e, StorageIOError::read)),
        }
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> std::result::Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + Send,
        I::IntoIter: Send,
    {
        let entries: Vec<C::Entry> = entries.into_iter().collect();
        // Written and (when durable) synced before the callback hears of it.
        let s = self.clone();
        match crate::off_worker_inline(move || s.do_append(entries)).await {
            Ok(()) => {
                callback.log_io_completed(Ok(()));
                Ok(())
            }
            Err(e) => {
                callback.log_io_completed(Err(std::io::Error::other(e.to_string())));
                Err(storage_err::<C>(e, StorageIOError::write_logs))
            }
        }
    }

    async fn truncate(
        &mut self,
        log_id: LogId<C::NodeId>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        let s = self.clone();
        crate::off_worker(move || s.do_truncate(&log_id))
            .await
            .map_err(|e| storage_err::<C>(e, StorageIOError::write_logs))
    }

    async fn purge(
        &mut self,
        log_id: LogId<C::NodeId>,
    ) -> std::result::Result<(), StorageError<C::NodeId>> {
        let s = self.clone();
        crate::off_worker(move || s.do_purge(&log_id))
            .await
            .map_err(|e| storage_err::<C>(e, StorageIOError::write_logs))
    }
}

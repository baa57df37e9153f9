//! A segmented, checksummed, crash-safe memory-mapped write-ahead log.
//!
//! [`CommitLog`] stores opaque entries, each with a caller-supplied `u64`
//! term, at consecutive indexes (from 1 by default, Raft's convention). It
//! lives in a directory of **segments**: preallocated (`fallocate`) files,
//! memory-mapped, rolled over when full; an entry larger than a segment
//! gets an oversized segment of its own. A batch is one copy into the
//! segment's page cache (stores through the mapping for small batches, one
//! `pwrite` for large ones, which avoids a write fault per fresh page;
//! without [`SyncMode::Batch`] a helper thread faults the tail's pages in
//! ahead of the stores, so those do not fault either) and is read back as
//! zero-copy slices of the mapping, which shows the same pages.
//!
//! ```no_run
//! use mmapkit::log::{CommitLog, LogOptions, SyncMode};
//! let opts = LogOptions::default().segment_size(64 << 20).sync(SyncMode::Batch);
//! let log = CommitLog::open("wal", opts)?;
//! let first = log.append(&[(1, b"set x=1".as_slice()), (1, b"set y=2")])?;
//! for e in log.read(first, first + 2, None)?.iter() {
//!     println!("{} {} {:?}", e.index(), e.term(), e.data());
//! }
//! log.truncate_after(first)?; // a new leader disagrees with entry first+1
//! # Ok::<(), mmapkit::Error>(())
//! ```
//!
//! # Guarantees
//!
//! * **Framing**: every entry has a length and a CRC32C (over its index,
//!   term and bytes); every appended batch ends with a commit record whose
//!   CRC binds the whole batch. See the `format` module for the layout.
//! * **Recovery** on open scans only the tail segment. A power loss can
//!   tear only batches not yet synced, and several of them out of order
//!   (group commit, [`SyncMode::Never`], [`SyncMode::Interval`]); each
//!   commit record carries the **durable watermark**, the highest index a
//!   returned sync covered when the batch was written. Damage in a batch
//!   that no later commit record's watermark covers is a torn tail: it is
//!   dropped from that batch on, the bytes moved to `DIR/quarantine/`
//!   (reported by [`CommitLog::recovery`]). Damage to a batch a later
//!   watermark covers (it was durable: see `format::classify_tail`; older
//!   logs without watermarks: anything showing a later batch was written),
//!   or a segment file shorter than its header records, is corruption,
//!   reported as [`Error::Corrupt`] with the index and segment, never
//!   skipped (open with [`LogOptions::repair`] to keep the valid prefix). Sealed segments are indexed (and verified) on
//!   first read; [`CommitLog::verify`] checks everything.
//! * **Crash safety** of [`truncate_after`](CommitLog::truncate_after) and
//!   [`purge_before`](CommitLog::purge_before): segments are deleted from
//!   the far end inwards, a truncation inside a segment first renames it to
//!   a new generation (so stale batches can never validate again) and then
//!   rewrites one 16-byte record; at every moment a crash leaves either the
//!   old log or a contiguous prefix/suffix of it, never a gap or a
//!   resurrected entry.
//! * **Durability**: [`SyncMode::Batch`] syncs (msync, i.e. fdatasync of
//!   the range) before `append` returns, with **group commit**: appenders
//!   that arrive while a sync runs share the next one.
//!   [`SyncMode::Interval`] syncs at most that often (on append, and on
//!   drop); [`SyncMode::Never`] leaves it to the OS.
//! * **Concurrency**: one writer process (a lock file enforces it), any
//!   number of threads appending and reading through `&self`; readers only
//!   ever see whole batches. Reads are zero-copy slices of the mapping that
//!   stay valid (mapped) even if the log is truncated or purged meanwhile;
//!   bytes of an entry that a truncation dropped may later be overwritten
//!   by new appends, so copy what you keep across a `truncate_after`.
//! * **Disk full**: rolling over to a new segment allocates it up front,
//!   so a full disk is an [`Error::DiskFull`] from `append`, the batch is
//!   not written, and the log stays usable.

mod append;
mod durable;
mod format;
mod helper;
mod identity;
mod open;
mod options;
mod read;
mod records;
mod segment;
#[cfg(test)]
mod tests;
mod truncate;
mod verify;

pub use append::Framed;
pub use durable::DurableMark;
pub use format::entry_crc;
pub use identity::{LogIdentity, LogStatus};
pub use open::{is_log_dir, quarantine_dir};
pub use options::{
    LogOptions, LogStat, Recovery, SegmentInfo, SyncMode, UnreadableTail, VerifyReport,
};
pub use read::{Entries, Entry, LogEntry};
pub use records::{RecordFormat, RecordReader};

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use format::{u32_at, u64_at, HEADER_LEN, REC};
use helper::WriteBehind;
use segment::{sync_dir, SegFile};

use crate::{Error, Result};

/// Batches of at least this many framed bytes are written with `pwrite`
/// instead of stores through the mapping (see `append`).
pub(super) const PWRITE_MIN: usize = 16 << 10;

/// Without [`SyncMode::Batch`], writeback of the tail is started (not
/// waited for) every this many appended bytes (see `append`).
pub(super) const WRITE_BEHIND: usize = 8 << 20;

/// Without [`SyncMode::Batch`], the tail's pages are faulted in for
/// writing up to this far past its end, in steps of half of it (see
/// `append::populate_ahead`).
pub(super) const POPULATE_AHEAD: usize = 4 << 20;

/// Zero-ahead of a log opened with [`SyncMode::Batch`] until
/// [`CommitLog::set_zero_ahead`] says otherwise: every append of such a
/// log waits for a sync, and a sync into written extents is the cheaper
/// one (bench `log`, sync per batch, interleaved runs: 100 K x 4 KiB
/// 0.99x -> 0.77x raft-engine's time, 100 K x 50 B 1.18x -> 1.04x).
pub const DEFAULT_ZERO_AHEAD: usize = 1 << 20;

pub(super) struct Seg {
    file: Arc<SegFile>,
    /// Header position of each entry; `None` for a sealed segment not read yet.
    offsets: Option<Vec<u64>>,
}

pub(super) struct State {
    segs: Vec<Seg>,
    /// Last committed index (`first - 1` when empty).
    last: u64,
    /// Byte position after the last committed record of the tail segment.
    tail_end: usize,
    /// The log's id (see `identity`).
    id: Option<Arc<str>>,
    /// The truncation history (see `identity`).
    cuts: Arc<identity::Cuts>,
    /// (device, inode) of the directory when it was loaded: a read-only
    /// view tells a replaced directory apart by it (and by the id).
    dir_key: (u64, u64),
}

impl State {
    fn first(&self) -> u64 {
        self.segs[0].file.first
    }
    /// Position in `segs` of the segment holding `index`.
    fn seg_of(&self, index: u64) -> usize {
        self.segs.partition_point(|s| s.file.first <= index).saturating_sub(1)
    }
    /// Entries in segment `k` (sealed: up to the next one's first index).
    fn count(&self, k: usize) -> u64 {
        match self.segs.get(k + 1) {
            Some(n) => n.file.first - self.segs[k].file.first,
            None => self.last + 1 - self.segs[k].file.first,
        }
    }
}

pub(super) struct Writer {
    next_gen: u32,
    /// The truncation history file (writable logs).
    cuts: Option<identity::CutsFile>,
    /// The batch being written, framed (reused).
    batch: append::Framed,
    /// Write-behind: (tail segment's first index, offset) up to which its
    /// writeback was started (see `append`).
    wb: (u64, usize),
}

pub(super) struct SyncState {
    /// Index up to which entries are known durable: raised only after a
    /// sync returned, lowered by truncations. Every commit record carries
    /// it (the watermark recovery trusts), so it must never run ahead.
    durable: u64,
    running: bool,
    last: Instant,
    /// (tail segment, byte position) synced so far: the next sync starts there.
    synced: (u64, usize),
    /// Bumped by every truncation: a sync that started before one must
    /// not mark the re-appended indexes durable.
    cuts: u64,
}

/// The log; see the [module docs](self).
pub struct CommitLog {
    dir: PathBuf,
    opts: LogOptions,
    state: RwLock<State>,
    writer: Mutex<Writer>,
    sync: Mutex<SyncState>,
    /// `SyncState::durable`, readable without the sync mutex (appends
    /// frame it into every commit record). Written only under that mutex,
    /// right after `durable` changes: a stale read is never above what
    /// was durable (raises happen after the sync returned; the only
    /// lowering, a truncation, holds the writer lock appends need too).
    durable: AtomicU64,
    synced: Condvar,
    syncs: AtomicU64,
    recovery: Recovery,
    /// Set when a sync or a truncation failed: no more writes, syncs, or
    /// reads past the durable watermark until reopened (fail-stop; the
    /// reason is in `failure`).
    poisoned: AtomicBool,
    failure: Mutex<String>,
    /// Writable: publishes the durable watermark for other processes.
    publisher: Option<durable::Publisher>,
    /// Read-only: the writer's mark as last read (see `durable`).
    seen: Mutex<Option<DurableMark>>,
    /// Nominal segment size (recorded in the segment headers).
    seg_size: u64,
    /// Wakes [`CommitLog::wait_past`] callers on append.
    appended: Appended,
    /// Bytes zeroed ahead of the tail ([`CommitLog::set_zero_ahead`]; 0: off).
    zero_ahead: AtomicUsize,
    /// Write-behind off the append path (see `append::write_behind`).
    behind: WriteBehind,
    _lock: Option<File>,
    _registered: Option<WriterReg>,
}

/// Where [`CommitLog::wait_past`] sleeps. Appenders lock and notify only
/// while someone waits (`waiters`), so appends without waiters make no
/// extra syscall.
#[derive(Default)]
pub(super) struct Appended {
    waiters: AtomicUsize,
    m: Mutex<()>,
    cv: Condvar,
}

/// (device, inode) of the log directories this process has open for
/// writing.
static WRITERS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// A log directory's entry in [`WRITERS`], removed on drop.
pub(super) struct WriterReg((u64, u64));

impl WriterReg {
    fn register(dir: &Path) -> Result<WriterReg> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir).map_err(|e| Error::io(dir, "stat", e))?;
        let key = (m.dev(), m.ino());
        let mut w = lock(&WRITERS);
        if w.contains(&key) {
            return Err(Error::invalid(
                dir,
                "the log is already open for writing in this process \
                 (close that handle first, or open this one read-only)",
            ));
        }
        w.push(key);
        Ok(WriterReg(key))
    }
}

impl Drop for WriterReg {
    fn drop(&mut self) {
        lock(&WRITERS).retain(|k| *k != self.0);
    }
}

impl std::fmt::Debug for CommitLog {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CommitLog")
            .field("dir", &self.dir)
            .field("first_index", &self.first_index())
            .field("last_index", &self.last_index())
            .finish()
    }
}

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl CommitLog {
    fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    /// The options it was opened with.
    pub fn options(&self) -> &LogOptions {
        &self.opts
    }
    /// The nominal segment size in effect (recorded when the log was
    /// created; [`LogOptions::segment_size`] applies only to a new log).
    pub fn segment_size(&self) -> u64 {
        self.seg_size
    }
    /// Zero-ahead: before a batch is written past the part of the tail
    /// segment already zeroed, the next `bytes` (rounded to pages) past it
    /// are overwritten with zeros and synced (0: off; the default is
    /// [`DEFAULT_ZERO_AHEAD`] for [`SyncMode::Batch`], off otherwise). The
    /// bytes are the same (a fresh segment reads as zeros), but the
    /// segment's blocks are then *written* extents instead of fallocated
    /// (unwritten) ones: a later sync of appended entries is a data-only
    /// flush, not one that also converts an extent and writes the inode
    /// (ext4, the leader of a 3-node openraft cluster: per-append msync
    /// mean 1.05 -> 0.35 ms in one loaded session, within noise in a
    /// calmer one; writes/s +3 to +8 %). Costs one write and
    /// sync of `bytes` every `bytes` of log, inside the append that crosses.
    pub fn set_zero_ahead(&self, bytes: usize) {
        self.zero_ahead.store(bytes, Ordering::Relaxed);
    }

    /// What recovery found on open.
    pub fn recovery(&self) -> &Recovery {
        &self.recovery
    }
    /// Index of the first entry (also of an empty log: the next append's
    /// index is then `first_index()`).
    pub fn first_index(&self) -> u64 {
        self.read_state().first()
    }
    /// Index of the last entry (`first_index() - 1` when empty).
    pub fn last_index(&self) -> u64 {
        self.read_state().last
    }
    /// Number of entries.
    pub fn len(&self) -> u64 {
        let s = self.read_state();
        s.last + 1 - s.first()
    }
    /// Whether the log has no entries.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Number of syncs (msync of a range = fdatasync) this handle made.
    pub fn sync_count(&self) -> u64 {
        self.syncs.load(Ordering::Relaxed)
    }

    /// The log's id and truncation epoch (of this handle's view: a
    /// read-only handle sees the writer's later truncations after
    /// [`refresh`](Self::refresh)). See the `identity` module.
    pub fn identity(&self) -> LogIdentity {
        let s = self.read_state();
        LogIdentity { id: s.id.clone(), epoch: s.cuts.epoch(), completed: s.cuts.completed }
    }
    /// Identity, epoch and index range from one view of the log (what a
    /// server answers from), and `cut_since(since)` when `since` is given.
    pub fn status(&self, since: Option<u64>) -> Result<LogStatus> {
        let s = self.read_state();
        Ok(LogStatus {
            identity: LogIdentity {
                id: s.id.clone(),
                epoch: s.cuts.epoch(),
                completed: s.cuts.completed,
            },
            first_index: s.first(),
            last_index: s.last,
            cut_since: match since {
                Some(e) => s.cuts.cut_since(&self.dir, e)?,
                None => None,
            },
        })
    }
    /// The lowest index that truncations numbered `epoch` or later cut
    /// after (`None`: none since); what a copy read under tag `epoch`
    /// (see [`Entries::epoch`]) must drop after. An error for an epoch
    /// past this log's.
    pub fn cut_since(&self, epoch: u64) -> Result<Option<u64>> {
        self.read_state().cuts.cut_since(&self.dir, epoch)
    }

    /// Sets the durable watermark (the caller holds the sync mutex `st`).
    pub(super) fn set_durable(&self, st: &mut SyncState, v: u64) {
        let raised = v > st.durable;
        st.durable = v;
        self.durable.store(v, Ordering::Release);
        if let Some(p) = &self.publisher {
            // Advisory (see `durable::Publisher::publish`): the next
            // publication writes it again.
            let _ = p.publish(v);
        }
        if raised {
            self.wake_waiters();
        }
    }

    /// What a power loss cannot take back, as the writer published it: its
    /// incarnation (random per writable open) and the index up to which
    /// entries were durable. A writable handle answers its own; a
    /// read-only one what it read at open or at the last
    /// [`refresh`](Self::refresh). `None`: the log was last opened for
    /// writing by a version that did not publish it. Log servers serve
    /// only up to it by default.
    pub fn durable_mark(&self) -> Option<DurableMark> {
        match &self.publisher {
            Some(p) => Some(DurableMark {
                incarnation: p.incarnation(),
                durable: self.durable.load(Ordering::Acquire),
            }),
            None => *lock(&self.seen),
        }
    }

    fn check_writable(&self) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly { path: self.dir.clone() });
        }
        self.check_failed()
    }

    /// The fail-stop error once something failed (see [`crate::ErrorKind::Failed`]).
    pub(super) fn check_failed(&self) -> Result<()> {
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::Failed {
                path: self.dir.clone(),
                detail: format!(
                    "{}; the log refuses writes, syncs and reads past entry {} until it is reopened \
                     (reopening reads what is really on disk)",
                    lock(&self.failure),
                    self.durable.load(Ordering::Acquire)
                ),
            });
        }
        Ok(())
    }

    /// Fail-stop: after a failed sync the kernel may have dropped the
    /// dirty pages and reports the error once (the "fsyncgate" behaviour
    /// PostgreSQL, etcd and raft-engine treat as fatal), so no later sync
    /// may mark anything durable. Returns the error to report.
    pub(super) fn fail(&self, what: &str, e: Error) -> Error {
        {
            let mut f = lock(&self.failure);
            if !self.poisoned.load(Ordering::Acquire) {
                *f = format!("{what} failed ({e})");
                self.poisoned.store(true, Ordering::Release);
            }
        }
        self.synced.notify_all();
        self.wake_waiters();
        e
    }
}

impl Drop for CommitLog {
    fn drop(&mut self) {
        if !self.opts.read_only && matches!(self.opts.sync, SyncMode::Interval(_) | SyncMode::Batch)
        {
            let _ = self.sync();
        }
        self.behind.stop();
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<CommitLog>();
    is::<Entries>();
}

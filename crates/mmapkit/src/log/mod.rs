//! A segmented, checksummed, crash-safe memory-mapped write-ahead log.
//!
//! [`CommitLog`] stores opaque entries, each with a caller-supplied `u64`
//! term, at consecutive indexes (from 1 by default, Raft's convention). It
//! lives in a directory of **segments**: preallocated (`fallocate`) files,
//! memory-mapped, rolled over when full; an entry larger than a segment
//! gets an oversized segment of its own. A batch is one copy into the
//! segment's page cache (stores through the mapping for small batches, one
//! `pwrite` for large ones, which avoids a write fault per fresh page) and
//! is read back as zero-copy slices of the mapping, which shows the same
//! pages.
//!
//! ```no_run
//! use mmapkit::log::{CommitLog, LogOptions, SyncMode};
//! let opts = LogOptions { segment_size: 64 << 20, sync: SyncMode::Batch, ..Default::default() };
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

mod format;
mod segment;
#[cfg(test)]
mod tests;

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use format::{frame_size, u32_at, u64_at, HEADER_LEN, REC};
use segment::{sync_dir, SegFile};

use crate::{Error, Result};

/// Batches of at least this many framed bytes are written with `pwrite`
/// instead of stores through the mapping (see `append`).
const PWRITE_MIN: usize = 16 << 10;

/// When appended data is made durable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum SyncMode {
    /// Never sync explicitly (the OS writes back when it likes; segment
    /// roll-over still syncs the sealed segment, so a crash loses only a
    /// tail, never a middle).
    Never,
    /// Sync before `append` returns (group commit across threads).
    #[default]
    Batch,
    /// Sync when at least this long has passed since the last sync
    /// (checked on every append and on drop).
    Interval(Duration),
}

impl std::str::FromStr for SyncMode {
    type Err = Error;
    /// `never`, `batch`, `interval:10ms` (also `10ms`, `0.5s`, `interval:200us`).
    fn from_str(s: &str) -> Result<Self> {
        let t = s.trim();
        match t {
            "never" | "none" => return Ok(SyncMode::Never),
            "batch" | "always" => return Ok(SyncMode::Batch),
            _ => {}
        }
        let d = t.strip_prefix("interval:").unwrap_or(t);
        let (num, scale) = if let Some(n) = d.strip_suffix("ms") {
            (n, 1e-3)
        } else if let Some(n) = d.strip_suffix("us") {
            (n, 1e-6)
        } else if let Some(n) = d.strip_suffix('s') {
            (n, 1.0)
        } else {
            (d, 1e-3)
        };
        match num.trim().parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => {
                Ok(SyncMode::Interval(Duration::from_secs_f64(v * scale)))
            }
            _ => Err(Error::InvalidArgument(format!(
                "unknown sync mode {s:?} (expected never, batch or interval:<N>ms)"
            ))),
        }
    }
}

impl std::fmt::Display for SyncMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SyncMode::Never => f.write_str("never"),
            SyncMode::Batch => f.write_str("batch"),
            SyncMode::Interval(d) => write!(f, "interval:{}ms", d.as_secs_f64() * 1e3),
        }
    }
}

/// Options of [`CommitLog::open`].
#[derive(Clone, Debug)]
pub struct LogOptions {
    /// Bytes per segment file of a **new** log (default 64 MiB, at least
    /// 4 KiB, rounded up to a multiple of 4 KiB). It is recorded in the
    /// segment headers: an existing log keeps the size it was created with
    /// and ignores this ([`CommitLog::segment_size`] says which applies;
    /// logs made before the size was recorded use their smallest segment's
    /// size). Batches never span segments; a batch larger than this gets a
    /// segment of its own.
    pub segment_size: u64,
    /// Index of the first entry of a **new** log (default 1); an existing
    /// log keeps its own.
    pub first_index: u64,
    /// Durability of appends.
    pub sync: SyncMode,
    /// Check each entry's CRC on every read too (default: entries are
    /// verified once per open log: the tail on open, a sealed segment when
    /// first read; [`CommitLog::verify`] rechecks everything any time).
    pub verify_reads: bool,
    /// Open without writing anything (another process may be appending;
    /// see [`CommitLog::refresh`]). No lock is taken and no recovery
    /// repair is written.
    pub read_only: bool,
    /// Recover from a damaged (or truncated) tail segment by keeping the
    /// valid prefix and cutting off everything from the damaged batch on;
    /// the bytes cut are first copied to
    /// `DIR/quarantine/<segment file>.<byte offset>.bad` (never deleted),
    /// and [`Recovery`] reports what was dropped and where it went.
    /// Default: refuse to open with [`Error::Corrupt`]. Damage in a sealed
    /// (non-tail) segment is always [`Error::Corrupt`] (on read and
    /// verify): repair does not drop whole segments.
    pub repair: bool,
}

impl Default for LogOptions {
    fn default() -> Self {
        LogOptions {
            segment_size: 64 << 20,
            first_index: 1,
            sync: SyncMode::Batch,
            verify_reads: false,
            repair: false,
            read_only: false,
        }
    }
}

/// What recovery found when the log was opened.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Entries of the torn tail (unsynced batches, from the first damaged
    /// one on) that were dropped.
    pub dropped_entries: u64,
    /// Bytes after the last complete batch that were not a clean end
    /// (a torn batch or garbage).
    pub dropped_bytes: u64,
    /// The tail segment that was scanned.
    pub tail_segment: PathBuf,
    /// Where the bytes cut off were moved (`DIR/quarantine/<segment>.<byte>.bad`);
    /// `None` when nothing was cut (or the log was opened read-only).
    pub quarantine: Option<PathBuf>,
}

/// One segment in [`LogStat`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SegmentInfo {
    /// The file.
    pub path: PathBuf,
    /// Its first entry's index.
    pub first_index: u64,
    /// Entries in it.
    pub entries: u64,
    /// Generation (from its name; bumped by truncations inside it).
    pub generation: u32,
    /// File size in bytes.
    pub size: u64,
}

/// Summary of a log ([`CommitLog::stat`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogStat {
    /// The directory.
    pub dir: PathBuf,
    /// First index.
    pub first_index: u64,
    /// Last index (`first_index - 1` when empty).
    pub last_index: u64,
    /// Number of entries.
    pub entries: u64,
    /// Bytes of committed records in the tail segment.
    pub tail_used: u64,
    /// Segments, oldest first.
    pub segments: Vec<SegmentInfo>,
    /// Syncs made by this handle.
    pub sync_count: u64,
}

/// Result of [`CommitLog::verify`] when everything checked out.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VerifyReport {
    /// Segments checked.
    pub segments: usize,
    /// Entries whose CRC and batch commit were checked.
    pub entries: u64,
    /// Payload bytes checked.
    pub bytes: u64,
}

struct Seg {
    file: Arc<SegFile>,
    /// Header position of each entry; `None` for a sealed segment not read yet.
    offsets: Option<Vec<u64>>,
}

struct State {
    segs: Vec<Seg>,
    /// Last committed index (`first - 1` when empty).
    last: u64,
    /// Byte position after the last committed record of the tail segment.
    tail_end: usize,
}

impl State {
    fn first(&self) -> u64 {
        self.segs[0].file.first
    }
    /// Position in `segs` of the segment holding `index`.
    fn seg_of(&self, index: u64) -> usize {
        self.segs
            .partition_point(|s| s.file.first <= index)
            .saturating_sub(1)
    }
    /// Entries in segment `k` (sealed: up to the next one's first index).
    fn count(&self, k: usize) -> u64 {
        match self.segs.get(k + 1) {
            Some(n) => n.file.first - self.segs[k].file.first,
            None => self.last + 1 - self.segs[k].file.first,
        }
    }
}

struct Writer {
    next_gen: u32,
    /// Entry offsets of the batch being written (reused).
    scratch: Vec<u64>,
    /// The batch's frames (reused).
    buf: Vec<u8>,
    /// The batch's entry CRCs (reused).
    crcs: Vec<u32>,
}

struct SyncState {
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
    synced: Condvar,
    syncs: AtomicU64,
    recovery: Recovery,
    /// Set when a truncation failed part-way: no more writes until reopened.
    poisoned: AtomicBool,
    /// Nominal segment size (recorded in the segment headers).
    seg_size: u64,
    _lock: Option<File>,
    _registered: Option<WriterReg>,
}

/// (device, inode) of the log directories this process has open for
/// writing.
static WRITERS: Mutex<Vec<(u64, u64)>> = Mutex::new(Vec::new());

/// A log directory's entry in [`WRITERS`], removed on drop.
struct WriterReg((u64, u64));

impl WriterReg {
    fn register(dir: &Path) -> Result<WriterReg> {
        use std::os::unix::fs::MetadataExt;
        let m = std::fs::metadata(dir).map_err(|e| Error::io(dir, "stat", e))?;
        let key = (m.dev(), m.ino());
        let mut w = lock(&WRITERS);
        if w.contains(&key) {
            return Err(Error::InvalidArgument(format!(
                "{}: the log is already open for writing in this process \
                 (close that handle first, or open this one read-only)",
                dir.display()
            )));
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

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

struct Loaded {
    segs: Vec<Seg>,
    last: u64,
    tail_end: usize,
    next_gen: u32,
    recovery: Recovery,
    tail: Arc<SegFile>,
    /// Nominal segment size of the log.
    seg_size: u64,
    /// Bytes of the tail to cut off on a writable open (start, end).
    cut: Option<(usize, usize)>,
}

/// Nominal segment size a new log gets from `opts`.
fn new_seg_size(opts: &LogOptions) -> u64 {
    opts.segment_size.next_multiple_of(format::SIZE_UNIT)
}

/// Whether `dir` holds a log (at least one segment file).
pub fn is_log_dir(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|rd| {
        rd.flatten()
            .any(|e| segment::parse_name(&e.file_name().to_string_lossy()).is_some())
    })
}

/// Quarantine directory of the log in `dir`: what recovery cuts off goes
/// there, never away.
pub fn quarantine_dir(dir: &Path) -> PathBuf {
    dir.join("quarantine")
}

/// Copies `bytes` (cut from segment `seg` at byte `at`) durably to
/// `DIR/quarantine/<segment file>.<at>.bad` (`.<at>.<n>.bad` if taken):
/// written and synced under a temp name, then linked in (never replacing).
fn quarantine(dir: &Path, seg: &Path, at: usize, bytes: &[u8]) -> Result<PathBuf> {
    let q = quarantine_dir(dir);
    crate::fs::create_dir_durably(&q)?;
    let name = seg.file_name().unwrap_or_default().to_string_lossy();
    let p = (0u32..)
        .map(|n| match n {
            0 => q.join(format!("{name}.{at}.bad")),
            n => q.join(format!("{name}.{at}.{n}.bad")),
        })
        .find(|p| !p.exists())
        .expect("u32 names exhausted");
    let tmp = crate::fs::TempFile::beside(&p)?;
    tmp.file()
        .write_all_at(bytes, 0)
        .and_then(|()| tmp.file().sync_all())
        .map_err(|e| Error::io(tmp.path(), "write", e))?;
    tmp.link_to(&p)?;
    sync_dir(&q)?;
    sync_dir(dir)?;
    Ok(p)
}

/// Moves a whole file into the quarantine directory.
fn quarantine_file(dir: &Path, p: &Path) -> Result<()> {
    let q = quarantine_dir(dir);
    crate::fs::create_dir_durably(&q)?;
    let to = q.join(p.file_name().unwrap_or_default());
    std::fs::rename(p, &to).map_err(|e| Error::io(p, "rename", e))?;
    sync_dir(&q)?;
    sync_dir(dir)
}

/// Lists, maps and checks the segments of `dir` and recovers the tail.
/// Sealed segments of `reuse` (a previous load) that are still there are
/// kept as they are, mapped and indexed.
fn load(dir: &Path, opts: &LogOptions, reuse: &[Seg]) -> Result<Loaded> {
    let writable = !opts.read_only;
    let mut found: Vec<(u64, u32, PathBuf)> = Vec::new();
    if writable {
        // Segment temp files of processes that died mid-creation.
        crate::fs::remove_stale_temp_files(dir, |t| segment::parse_name(&t.to_string_lossy()).is_some());
    }
    let rd = std::fs::read_dir(dir).map_err(|e| Error::io(dir, "read_dir", e))?;
    for ent in rd {
        let ent = ent.map_err(|e| Error::io(dir, "read_dir", e))?;
        let name = ent.file_name();
        let name = name.to_string_lossy();
        if let Some((first, gen)) = segment::parse_name(&name) {
            found.push((first, gen, ent.path()));
        } else if writable && name.ends_with(".seg.tmp") {
            // A segment whose creation a crash interrupted.
            let _ = std::fs::remove_file(ent.path());
        }
    }
    found.sort();
    // Two segments with one first index: the older ones must hold no
    // entry (an empty tail that an old version duplicated instead of
    // replacing); they are set aside. Anything else is corruption.
    let mut k = 0;
    while k + 1 < found.len() {
        if found[k].0 != found[k + 1].0 {
            k += 1;
            continue;
        }
        let (first, gen, path) = found[k].clone();
        let empty = SegFile::open(path.clone(), first, gen, false).is_ok_and(|f| {
            format::scan(f.data(), first, gen, None, false).batches == 0
        });
        if !empty {
            return Err(Error::Corrupt {
                path: dir.to_owned(),
                detail: format!(
                    "two segments start at index {first}: {} and {}",
                    path.display(),
                    found[k + 1].2.display()
                ),
            });
        }
        if writable {
            quarantine_file(dir, &path)?;
        }
        found.remove(k);
    }
    let mut next_gen = found.iter().map(|f| f.1).max().unwrap_or(0) + 1;
    let mut segs = Vec::with_capacity(found.len().max(1));
    if found.is_empty() {
        if !writable {
            return Err(Error::Format {
                path: dir.to_owned(),
                detail: "no log segments here".into(),
            });
        }
        let size = new_seg_size(opts);
        let f = SegFile::create(dir, opts.first_index, next_gen, size, size)?;
        next_gen += 1;
        segs.push(Seg {
            file: Arc::new(f),
            offsets: Some(Vec::new()),
        });
    } else {
        let nexts: Vec<Option<u64>> = found
            .iter()
            .skip(1)
            .map(|f| Some(f.0))
            .chain([None])
            .collect();
        for ((first, gen, path), next) in found.into_iter().zip(nexts) {
            let old = reuse
                .iter()
                .find(|s| s.file.first == first && s.file.gen() == gen);
            segs.push(match (old, next) {
                (Some(s), Some(next)) => {
                    // An index built while it was still the tail may be short.
                    let whole = s
                        .offsets
                        .as_ref()
                        .is_some_and(|o| o.len() as u64 == next - first);
                    Seg {
                        file: s.file.clone(),
                        offsets: if whole { s.offsets.clone() } else { None },
                    }
                }
                _ => {
                    let f = SegFile::open(path, first, gen, writable)?;
                    if let (Some(want), Some(_)) = (f.short(), next) {
                        return Err(f.corrupt(format!(
                            "the file is {} bytes, its header says {want}: it was truncated",
                            f.map.len()
                        )));
                    }
                    Seg {
                        file: Arc::new(f),
                        offsets: None,
                    }
                }
            });
        }
    }

    let mut tail = segs.last().expect("one segment").file.clone();
    // The nominal segment size: recorded in the headers; logs made before
    // it was recorded use their smallest segment (oversized ones are larger).
    let seg_size = tail.header.seg_size.unwrap_or_else(|| {
        let min = segs.iter().map(|s| s.file.map.len() as u64).min();
        min.unwrap_or(0).max(4096)
    });

    // A truncated tail: with repair, give the file its length back (the
    // cut bytes are gone) and recover what is left below.
    let mut extended = 0u64;
    if let Some(want) = tail.short() {
        let have = tail.map.len() as u64;
        if !(opts.repair && writable) || have < HEADER_LEN as u64 {
            return Err(tail.corrupt(format!(
                "the file is {have} bytes, its header says {want}: it was truncated \
                 (open with repair to keep the entries before the cut)"
            )));
        }
        let p = tail.path();
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .and_then(|f| {
                f.set_len(want)?;
                f.sync_all()
            })
            .map_err(|e| Error::io(&p, "extend", e))?;
        tail = Arc::new(SegFile::open(p, tail.first, tail.gen(), true)?);
        segs.last_mut().expect("one segment").file = tail.clone();
        extended = want - have;
    }

    // Recover the tail.
    let d = tail.data();
    let mut tries = 0;
    let mut seen: Option<(usize, usize, u32)> = None;
    let (sc, verdict) = loop {
        let sc = format::scan(d, tail.first, tail.gen(), None, false);
        let v = format::classify_tail(d, &sc, tail.first, tail.gen());
        if let (format::Tail::Corrupt { to, .. }, false) = (&v, writable) {
            // A read-only scan may race the writing process (it saw a batch
            // half written, then later batches): corruption only when two
            // scans a moment apart agree on where and on the bytes.
            let now = (sc.end, *to, crc32c::crc32c(&d[sc.end..*to]));
            if tries < 50 && seen != Some(now) {
                seen = Some(now);
                tries += 1;
                std::thread::sleep(Duration::from_millis(2));
                continue;
            }
        }
        break (sc, v);
    };
    let cut = match verdict {
        format::Tail::Clean => None,
        format::Tail::Torn { to } => Some((sc.end, to)),
        format::Tail::Corrupt { detail, to } => {
            if !(opts.repair && writable) {
                let how = if writable {
                    " (open with repair to keep the entries before it; what is cut goes to the quarantine directory)"
                } else {
                    ""
                };
                return Err(tail.corrupt(format!("{detail}{how}")));
            }
            Some((sc.end, to))
        }
    };
    let dropped = cut.map_or(0, |(a, b)| {
        // Entries a repair drops: the counts of the commit records cut.
        let counted: u64 = (a..b)
            .step_by(REC)
            .filter(|&q| q + REC <= d.len() && format::commit_len(d, q).is_some())
            .map(|q| u32_at(d, q + 8) as u64)
            .filter(|&c| c as usize <= (b - a) / REC)
            .sum();
        counted.max(sc.pending)
    });
    let recovery = Recovery {
        dropped_entries: dropped,
        dropped_bytes: cut.map_or(0, |(a, b)| (b - a) as u64) + extended,
        tail_segment: tail.path(),
        quarantine: None,
    };
    let last = tail.first + sc.offsets.len() as u64 - 1;
    let tail_end = sc.end;
    segs.last_mut().expect("one segment").offsets = Some(sc.offsets);
    // The tail was mapped sealed whole for the scan: from here on only
    // its committed prefix may be handed out, and appends go after it.
    drop(tail);
    let t = &mut segs.last_mut().expect("one segment").file;
    Arc::get_mut(t)
        .expect("the tail is mapped fresh by every load")
        .map
        .set_sealed(tail_end)?;
    let tail = t.clone();
    Ok(Loaded {
        segs,
        last,
        tail_end,
        next_gen,
        recovery,
        tail,
        seg_size,
        cut,
    })
}

impl CommitLog {
    /// Opens the log in `dir`, creating the directory and an empty log if
    /// missing (unless read-only), and recovers its tail.
    pub fn open(dir: impl AsRef<Path>, opts: LogOptions) -> Result<CommitLog> {
        let dir = dir.as_ref().to_owned();
        if opts.first_index == 0 {
            return Err(Error::InvalidArgument(format!(
                "{}: first_index must be at least 1",
                dir.display()
            )));
        }
        if opts.segment_size < 4096 {
            return Err(Error::InvalidArgument(format!(
                "{}: segment_size must be at least 4096 bytes, not {}",
                dir.display(),
                opts.segment_size
            )));
        }
        let writable = !opts.read_only;
        if writable {
            crate::fs::create_dir_durably(&dir)?;
        }
        // The flock below does not conflict within one process (another
        // handle of ours may hold it): a registry tells that case apart.
        let registered = if writable {
            Some(WriterReg::register(&dir)?)
        } else {
            None
        };
        let lock_file = if writable {
            let p = dir.join("LOCK");
            let f = std::fs::OpenOptions::new()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&p)
                .map_err(|e| Error::io(&p, "open", e))?;
            // std's flock (stable since 1.89). A lock
            // released a moment ago can still be held by a child process
            // forked (by any thread) before it was closed, until that child
            // execs: retry briefly before calling it another writer.
            let mut tries = 0;
            loop {
                let locked = f.try_lock();
                match locked {
                    Ok(()) => break Some(f),
                    Err(std::fs::TryLockError::WouldBlock) if tries < 50 => {
                        tries += 1;
                        std::thread::sleep(std::time::Duration::from_millis(10));
                    }
                    Err(std::fs::TryLockError::WouldBlock) => {
                        return Err(Error::InvalidArgument(format!(
                            "{}: the log is open for writing by another process (open it read-only)",
                            dir.display()
                        )))
                    }
                    Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(&p, "flock", e)),
                }
            }
        } else {
            None
        };

        let ld = load(&dir, &opts, &[])?;
        let Loaded {
            segs,
            last,
            tail_end,
            next_gen,
            mut recovery,
            tail,
            seg_size,
            cut,
        } = ld;
        let log = CommitLog {
            dir,
            state: RwLock::new(State {
                segs,
                last,
                tail_end,
            }),
            writer: Mutex::new(Writer {
                next_gen,
                scratch: Vec::new(),
                buf: Vec::new(),
                crcs: Vec::new(),
            }),
            sync: Mutex::new(SyncState {
                durable: last,
                running: false,
                last: Instant::now(),
                synced: (0, 0),
                cuts: 0,
            }),
            synced: Condvar::new(),
            syncs: AtomicU64::new(0),
            recovery: Recovery::default(),
            poisoned: AtomicBool::new(false),
            seg_size,
            opts,
            _lock: lock_file,
            _registered: registered,
        };
        if let (true, Some((from, to))) = (writable, cut) {
            // Cut the torn (or, with repair, damaged) bytes off for good:
            // moved to the quarantine directory first, then a new
            // generation, then zeroed from the far end down to the cut, so
            // they can never complete later and a crash meanwhile leaves
            // at most a shorter torn area.
            let to = to.min(tail.map.len());
            let mut bytes = vec![0u8; to.saturating_sub(from)];
            tail.map.read_at(from, &mut bytes)?;
            recovery.quarantine = Some(quarantine(&log.dir, &tail.path(), from, &bytes)?);
            let mut w = lock(&log.writer);
            log.bump(&mut w, &tail)?;
            drop(tail); // the rewrite below needs the tail to itself
            log.zero_range(from, to.max(from + REC))?;
            debug_assert_eq!(tail_end, from);
        }
        if writable {
            // What an earlier process appended may still be only in the
            // page cache: it counts as durable (the watermark later batches
            // carry) once synced. Without syncs only sealed segments are.
            let t = log.tail();
            let mut st = lock(&log.sync);
            if log.opts.sync == SyncMode::Never {
                st.durable = st.durable.min(t.first - 1);
            } else {
                t.map.flush_range(0, tail_end, true)?;
                st.synced = (t.first, tail_end);
            }
        }
        let mut log = log;
        log.recovery = recovery;
        Ok(log)
    }

    fn read_state(&self) -> RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write_state(&self) -> RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }

    /// For a read-only log: picks up what the writing process has done
    /// since (new entries and segments, truncations, purges) by loading the
    /// log again. Entries already returned stay valid. A writable log is
    /// always current, so this does nothing there.
    pub fn refresh(&self) -> Result<()> {
        if !self.opts.read_only {
            return Ok(());
        }
        let ld = {
            let s = self.read_state();
            load(&self.dir, &self.opts, &s.segs)?
        };
        *self.write_state() = State {
            segs: ld.segs,
            last: ld.last,
            tail_end: ld.tail_end,
        };
        Ok(())
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

    fn check_writable(&self) -> Result<()> {
        if self.opts.read_only {
            return Err(Error::ReadOnly {
                path: self.dir.clone(),
            });
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Err(Error::InvalidArgument(format!(
                "{}: a truncation failed half-way (I/O error); reopen the log to recover it",
                self.dir.display()
            )));
        }
        Ok(())
    }

    // ----- appending ----------------------------------------------------

    /// Appends `entries` (term, bytes) as one batch and returns the index
    /// of the first; they are readable (and, with [`SyncMode::Batch`],
    /// durable) when this returns. An empty batch writes nothing and
    /// returns the next index.
    pub fn append<B: AsRef<[u8]>>(&self, entries: &[(u64, B)]) -> Result<u64> {
        self.check_writable()?;
        let mut need = format::COMMIT_WM;
        for (_, b) in entries {
            let n = b.as_ref().len();
            if n > format::MAX_ENTRY {
                return Err(Error::InvalidArgument(format!(
                    "{}: entry of {n} bytes is larger than the maximum of {} bytes",
                    self.dir.display(),
                    format::MAX_ENTRY
                )));
            }
            need += frame_size(n);
        }
        let mut w = lock(&self.writer);
        let (mut tail, first, mut pos) = {
            let s = self.read_state();
            (
                s.segs.last().expect("one segment").file.clone(),
                s.last + 1,
                s.tail_end,
            )
        };
        if entries.is_empty() {
            return Ok(first);
        }
        if pos + need > tail.map.len() {
            tail = self.roll_over(&mut w, &tail, pos, first, need)?;
            pos = HEADER_LEN;
        }
        let epoch = tail.gen();
        // The batch is framed in a reused buffer and copied into the map
        // in one write: no per-entry allocation or bounds checks.
        let wr: &mut Writer = &mut w;
        wr.buf.clear();
        wr.crcs.clear();
        wr.scratch.clear();
        for (k, (term, b)) in entries.iter().enumerate() {
            wr.scratch.push((pos + wr.buf.len()) as u64);
            wr.crcs.push(format::encode_entry(
                &mut wr.buf,
                first + k as u64,
                *term,
                b.as_ref(),
            ));
        }
        // Only what a returned sync covered: a power loss may tear anything
        // later, in any order, and recovery must know (format::classify_tail).
        let watermark = lock(&self.sync).durable.min(first - 1);
        format::encode_commit(&mut wr.buf, first, epoch, watermark, &wr.crcs);
        // A zero record after every batch: the clean end is explicit, so
        // anything else found there on recovery is a torn batch.
        let zero_fits = pos + wr.buf.len() + REC <= tail.map.len();
        if zero_fits {
            wr.buf.extend_from_slice(&[0u8; REC]);
        }
        // Small batches are stored through the mapping (a memcpy; a
        // pwrite per batch measured 1.5x slower at 100 K and 1 M x 50 B,
        // 10 per batch);
        // large ones with one pwrite into the same page cache (readers see
        // it through the map once published below): stores would take a
        // write fault per fresh page (bench `log`, 10 x 4 KiB batches).
        if wr.buf.len() >= PWRITE_MIN {
            tail.map
                .file()
                .write_all_at(&wr.buf, pos as u64)
                .map_err(|e| Error::io(tail.map.path(), "pwrite", e))?;
        } else {
            tail.map.append_at(pos, &wr.buf)?;
        }
        pos += wr.buf.len() - if zero_fits { REC } else { 0 };
        tail.map.seal(pos)?;
        let last = first + entries.len() as u64 - 1;
        {
            let mut s = self.write_state();
            s.segs
                .last_mut()
                .expect("one segment")
                .offsets
                .get_or_insert_with(Vec::new)
                .extend_from_slice(&wr.scratch);
            s.last = last;
            s.tail_end = pos;
        }
        drop(w);
        match self.opts.sync {
            SyncMode::Never => {}
            SyncMode::Batch => self.sync_upto(last)?,
            SyncMode::Interval(d) => {
                if lock(&self.sync).last.elapsed() >= d {
                    self.sync_upto(last)?;
                }
            }
        }
        Ok(first)
    }

    /// Seals the tail (synced whole, so a crash can never leave a gap
    /// before the new segment) and starts a new segment at `first`.
    fn roll_over(
        &self,
        w: &mut Writer,
        old: &Arc<SegFile>,
        end: usize,
        first: u64,
        need: usize,
    ) -> Result<Arc<SegFile>> {
        let page = crate::map::page_size() as u64;
        let size = self
            .seg_size
            .max(((HEADER_LEN + need) as u64).div_ceil(page) * page);
        if first == old.first {
            // The tail holds no entry: a second segment starting at the
            // same index would make the log unopenable. Replace it by a
            // larger one under the same name (one atomic rename: a crash
            // leaves one or the other, both empty).
            let seg = Arc::new(SegFile::create(&self.dir, first, old.gen(), size, self.seg_size)?);
            let mut s = self.write_state();
            let t = s.segs.last_mut().expect("one segment");
            t.file = seg.clone();
            t.offsets = Some(Vec::new());
            s.tail_end = HEADER_LEN;
            let mut st = lock(&self.sync);
            st.synced = (first, HEADER_LEN);
            return Ok(seg);
        }
        // The sealed segment is durable before the next one exists: a power
        // loss in between must never leave a segment short of entries the
        // next one's first index says were there (found by crashfs).
        old.map.flush_range(0, end, true)?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        let seg = Arc::new(SegFile::create(&self.dir, first, w.next_gen, size, self.seg_size)?);
        w.next_gen += 1;
        let mut s = self.write_state();
        s.segs.push(Seg {
            file: seg.clone(),
            offsets: Some(Vec::new()),
        });
        s.tail_end = HEADER_LEN;
        let mut st = lock(&self.sync);
        st.durable = st.durable.max(first - 1);
        st.synced = (first, HEADER_LEN);
        Ok(seg)
    }

    /// Makes every entry up to `target` durable, sharing syncs between
    /// threads (group commit).
    fn sync_upto(&self, target: u64) -> Result<()> {
        let mut st = lock(&self.sync);
        loop {
            if st.durable >= target {
                return Ok(());
            }
            if !st.running {
                st.running = true;
                drop(st);
                let (tail, end, upto) = {
                    let s = self.read_state();
                    (
                        s.segs.last().expect("one segment").file.clone(),
                        s.tail_end,
                        s.last,
                    )
                };
                let (from, cuts) = {
                    let st = lock(&self.sync);
                    let from = if st.synced.0 == tail.first {
                        st.synced.1.min(end)
                    } else {
                        0
                    };
                    (from, st.cuts)
                };
                // Earlier segments were synced when they were sealed.
                let r = tail.map.flush_range(from, end - from, true);
                self.syncs.fetch_add(1, Ordering::Relaxed);
                st = lock(&self.sync);
                st.running = false;
                st.last = Instant::now();
                if r.is_ok() && st.cuts == cuts {
                    st.durable = st.durable.max(upto);
                    st.synced = (tail.first, end);
                }
                self.synced.notify_all();
                r?;
            } else {
                st = self.synced.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Makes everything appended so far durable.
    pub fn sync(&self) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        let last = self.last_index();
        self.sync_upto(last)
    }

    // ----- reading ------------------------------------------------------

    /// Builds the entry index of sealed segment `k` (verifying its
    /// records) if it has not been read yet.
    fn ensure_index(&self, k: usize) -> Result<()> {
        let (file, want) = {
            let s = self.read_state();
            if k >= s.segs.len() || s.segs[k].offsets.is_some() {
                return Ok(());
            }
            (s.segs[k].file.clone(), s.count(k))
        };
        // Scanned without the lock, so appends and reads go on meanwhile.
        let offsets = index_sealed(&file, want)?;
        let mut s = self.write_state();
        if let Some(seg) = s.segs.get_mut(k) {
            if seg.offsets.is_none() && Arc::ptr_eq(&seg.file, &file) {
                seg.offsets = Some(offsets);
            }
        }
        Ok(())
    }
}

/// Entry offsets of a sealed segment holding `want` entries, every
/// record verified on the way.
fn index_sealed(f: &SegFile, want: u64) -> Result<Vec<u64>> {
    {
        let sc = format::scan(f.data(), f.first, f.gen(), Some(want), false);
        if (sc.offsets.len() as u64) < want {
            let at = f.first + sc.offsets.len() as u64;
            let why = match sc.stop {
                format::Stop::BadEntry(i, pos) => {
                    format!("entry {i} (byte {pos}) fails its checksum")
                }
                format::Stop::BadRecord(pos) => {
                    format!("batch from entry {at}: broken record at byte {pos}")
                }
                _ => format!("entry {at} is missing: the segment ends early"),
            };
            return Err(f.corrupt(format!(
                "segment should hold entries {}..={}: {why}",
                f.first,
                f.first + want - 1
            )));
        }
        Ok(sc.offsets)
    }
}

impl CommitLog {
    fn range_check(&self, s: &State, lo: u64, hi: u64) -> Result<()> {
        if lo > hi || lo < s.first() || hi > s.last + 1 {
            return Err(Error::InvalidArgument(format!(
                "{}: entries {lo}..{hi} are not in the log (it holds {}..{})",
                self.dir.display(),
                s.first(),
                s.last + 1
            )));
        }
        Ok(())
    }

    /// Entries `lo..hi` (half-open, like a Python range). With `max_bytes`,
    /// as many whole entries from `lo` as fit in that many payload bytes,
    /// but at least one. The data are zero-copy slices of the mapping;
    /// entries were checksum-verified when their segment was first
    /// indexed (and on every read with [`LogOptions::verify_reads`]).
    pub fn read(&self, lo: u64, hi: u64, max_bytes: Option<usize>) -> Result<Entries> {
        let mut out = Entries {
            segs: Vec::new(),
            items: Vec::with_capacity((hi.saturating_sub(lo)).min(1 << 16) as usize),
        };
        let mut budget = max_bytes.unwrap_or(usize::MAX);
        let mut i = lo;
        loop {
            let s = self.read_state();
            self.range_check(&s, lo, hi)?;
            if i >= hi {
                break;
            }
            let k = s.seg_of(i);
            if s.segs[k].offsets.is_none() {
                drop(s);
                self.ensure_index(k)?;
                continue;
            }
            let seg = &s.segs[k];
            let offs = seg.offsets.as_deref().expect("indexed");
            let d = seg.file.data();
            let stop = hi.min(seg.file.first + offs.len() as u64);
            if stop <= i {
                return Err(seg
                    .file
                    .corrupt(format!("entry {i} is missing from its segment")));
            }
            let segno = out.segs.len() as u32;
            let mut used = false;
            while i < stop {
                let pos = offs[(i - seg.file.first) as usize] as usize;
                let len = format::len_at(d, pos);
                if len > budget && !out.items.is_empty() {
                    i = hi;
                    break;
                }
                budget = budget.saturating_sub(len);
                let term = u64_at(d, pos + 8);
                if self.opts.verify_reads && !format::frame_ok(d, pos, i) {
                    return Err(seg
                        .file
                        .corrupt(format!("entry {i} (byte {pos}) fails its checksum")));
                }
                out.items.push(Item {
                    index: i,
                    term,
                    seg: segno,
                    pos: pos + REC,
                    len,
                });
                used = true;
                i += 1;
            }
            if used {
                out.segs.push(seg.file.clone());
            }
        }
        Ok(out)
    }

    /// Entry `index`.
    pub fn get(&self, index: u64) -> Result<LogEntry> {
        let mut e = self.read(index, index + 1, None)?;
        let item = e.items.pop().expect("one entry");
        Ok(LogEntry {
            seg: e.segs.pop().expect("one segment"),
            item,
        })
    }

    /// Term of entry `index` (no payload check beyond the entry's CRC).
    pub fn term(&self, index: u64) -> Result<u64> {
        Ok(self.get(index)?.term())
    }

    // ----- truncation ---------------------------------------------------

    /// Drops every entry after `index` (a Raft conflict); the next append
    /// gets `index + 1`. `index` may be `first_index() - 1` (drop all) and
    /// anything ≥ `last_index()` is a no-op. Crash-safe; durable on return.
    pub fn truncate_after(&self, index: u64) -> Result<()> {
        self.check_writable()?;
        let mut w = lock(&self.writer);
        {
            let s = self.read_state();
            if index >= s.last {
                return Ok(());
            }
            if index + 1 < s.first() {
                return Err(Error::InvalidArgument(format!(
                    "{}: cannot truncate after {index}: entries before {} were purged",
                    self.dir.display(),
                    s.first()
                )));
            }
        }
        // The segment that becomes the tail is indexed (verified) first,
        // so a corrupt one fails the call before anything is deleted.
        let k = self.read_state().seg_of(index);
        self.ensure_index(k)?;
        let r = self.truncate_locked(&mut w, index, k);
        if r.is_err() {
            // Part of the cut may be on disk: refuse to write on a guess.
            self.poisoned.store(true, Ordering::Release);
        }
        r
    }

    fn truncate_locked(&self, w: &mut Writer, index: u64, k: usize) -> Result<()> {
        // Whole segments after `index`, from the far end inwards: a crash
        // in between leaves a prefix of the old log.
        loop {
            let victim = {
                let mut s = self.write_state();
                let tail = s.segs.last().expect("one segment");
                if s.segs.len() == 1 || tail.file.first <= index {
                    break;
                }
                let v = s.segs.pop().expect("tail").file;
                s.last = v.first - 1;
                v
            };
            let p = victim.path();
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, "unlink", e))?;
            sync_dir(&self.dir)?;
        }
        // Inside the (possibly new) tail.
        debug_assert_eq!(k, self.read_state().segs.len() - 1);
        let (tail_first, keep, count, end) = {
            let s = self.read_state();
            let t = &s.segs[k];
            let offs = t.offsets.as_deref().expect("indexed");
            let end = if offs.is_empty() {
                HEADER_LEN
            } else {
                let d = t.file.data();
                let e = format::entry_end(d, offs, offs.len() - 1);
                e + format::commit_len(d, e).unwrap_or(REC)
            };
            (
                t.file.first,
                (index + 1 - t.file.first) as usize,
                offs.len(),
                end,
            )
        };
        let end = if keep < count {
            self.cut_entries(w, keep)?
        } else {
            // A segment mapped sealed whole (a non-tail one when the log
            // was opened) is the tail now: appends go right after `end`.
            if self.tail().map.sealed() > end {
                self.with_tail_to_itself(|seg| seg.unseal_from(end))?;
            }
            end
        };
        let mut s = self.write_state();
        s.segs[k].offsets.as_mut().expect("indexed").truncate(keep);
        s.last = index;
        s.tail_end = end;
        let mut st = lock(&self.sync);
        st.durable = st.durable.min(index);
        st.cuts += 1;
        if st.synced.0 == tail_first {
            st.synced.1 = st.synced.1.min(end);
        } else {
            st.synced = (tail_first, 0);
        }
        Ok(())
    }

    /// Cuts the tail segment after its first `keep` entries; returns the
    /// new end position.
    fn cut_entries(&self, w: &mut Writer, keep: usize) -> Result<usize> {
        let seg = self.tail();
        let d = seg.data();
        let (end, commit, old_end) = {
            let s = self.read_state();
            let offs = s
                .segs
                .last()
                .expect("tail")
                .offsets
                .as_deref()
                .expect("indexed");
            // After the last batch's commit record (the tail may be a
            // sealed segment that whole segments were cut from).
            let e = format::entry_end(d, offs, offs.len() - 1);
            let old_end = e + format::commit_len(d, e).unwrap_or(REC);
            if keep == 0 {
                (HEADER_LEN, None, old_end)
            } else {
                let e = format::entry_end(d, offs, keep - 1);
                if let Some(clen) = format::commit_len(d, e) {
                    (e + clen, None, old_end)
                } else {
                    // Mid-batch: the kept part of the batch gets a commit record
                // of its own, a 16-byte one (no watermark) so that its
                // rewrite stays one sector-atomic record.
                    let b = format::batch_start(d, offs, keep - 1);
                    (e, Some((seg.first + b as u64, offs[b..keep].to_vec())), old_end)
                }
            }
        };
        self.bump(w, &seg)?;
        // The dropped batches are zeroed (far end first): recovery relies on
        // nothing but zeros after the last batch, so a later torn batch is
        // never mistaken for corruption. A kill meanwhile leaves a longer
        // prefix of the old log (the truncation was not acknowledged).
        let rec = commit.map(|(bfirst, offs)| format::commit_for(d, bfirst, &offs, seg.gen()));
        drop(seg); // the rewrites below need the tail to themselves
        match rec {
            None => {
                self.zero_range(end + REC, old_end + REC)?;
                self.zero_at(end)?;
                Ok(end)
            }
            Some(rec) => {
                // The kept part's commit record first: zeroing the rest of
                // its batch before would tear the kept entries.
                self.rewrite_tail(end, &rec)?;
                self.zero_range(end + REC, old_end + REC)?;
                // The new commit record is committed data: sealed, so reads
                // (and indexing once the segment is sealed) see it.
                self.tail().map.seal(end + REC)?;
                Ok(end + REC)
            }
        }
    }

    fn tail(&self) -> Arc<SegFile> {
        self.read_state().segs.last().expect("one segment").file.clone()
    }

    fn bump(&self, w: &mut Writer, seg: &SegFile) -> Result<()> {
        seg.bump_gen(&self.dir, w.next_gen)?;
        w.next_gen += 1;
        Ok(())
    }

    /// Zeros bytes `from..to` of the tail (clamped to the file) from the
    /// far end down, then syncs them: a kill part-way leaves the low part,
    /// so recovery sees at most a shorter torn area, never data after a hole.
    fn zero_range(&self, from: usize, to: usize) -> Result<()> {
        const CHUNK: usize = 1 << 16;
        self.with_tail_to_itself(|seg| {
            let to = to.min(seg.map.len());
            if from >= to {
                return Ok(());
            }
            seg.unseal_from(from)?;
            let zeros = vec![0u8; CHUNK.min(to - from)];
            let mut hi = to;
            while hi > from {
                let lo = hi.saturating_sub(CHUNK).max(from);
                seg.map.get_mut().write_at(lo, &zeros[..hi - lo])?;
                hi = lo;
            }
            seg.map.flush_range(from, to - from, true)?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    fn zero_at(&self, pos: usize) -> Result<()> {
        if pos + REC <= self.tail().map.len() {
            self.rewrite_tail(pos, &[0u8; REC])?;
        }
        Ok(())
    }

    /// Writes `bytes` at `pos` of the tail segment, below its seal, and
    /// syncs them.
    fn rewrite_tail(&self, pos: usize, bytes: &[u8]) -> Result<()> {
        self.with_tail_to_itself(|seg| {
            seg.rewrite(pos, bytes)?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    /// Runs `f` with the tail segment to itself, for writes below its
    /// seal. Entries handed out earlier must never change, so when readers
    /// still hold the tail's mapping, the tail is first replaced by a copy
    /// of its file renamed over it (they keep the old file's pages).
    fn with_tail_to_itself<R>(&self, f: impl FnOnce(&mut SegFile) -> Result<R>) -> Result<R> {
        let mut s = self.write_state();
        let seg = &mut s.segs.last_mut().expect("one segment").file;
        if Arc::get_mut(seg).is_none() {
            *seg = Arc::new(seg.copy_for_rewrite()?);
        }
        f(Arc::get_mut(seg).expect("exclusive"))
    }

    /// Drops whole segments whose entries are all below `index`
    /// (compaction); entries from `index` on stay, and so may some
    /// before it (segment granularity). The tail segment is never dropped.
    pub fn purge_before(&self, index: u64) -> Result<()> {
        self.check_writable()?;
        let _w = lock(&self.writer);
        loop {
            let victim = {
                let mut s = self.write_state();
                if s.segs.len() < 2 || s.segs[1].file.first > index {
                    break;
                }
                s.segs.remove(0).file
            };
            let p = victim.path();
            std::fs::remove_file(&p).map_err(|e| Error::io(&p, "unlink", e))?;
            sync_dir(&self.dir)?;
        }
        Ok(())
    }

    // ----- inspection ---------------------------------------------------

    /// Checks every entry's CRC and every batch commit of every segment.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_progress(&AtomicU64::new(0))
    }

    /// [`CommitLog::verify`], adding each segment's size to `done` once it
    /// is checked (for progress bars). Appends and reads go on meanwhile;
    /// the segments checked are those of the moment it started.
    pub fn verify_progress(&self, done: &AtomicU64) -> Result<VerifyReport> {
        let segs: Vec<(Arc<SegFile>, u64)> = {
            let s = self.read_state();
            (0..s.segs.len())
                .map(|k| (s.segs[k].file.clone(), s.count(k)))
                .collect()
        };
        let mut rep = VerifyReport {
            segments: segs.len(),
            entries: 0,
            bytes: 0,
        };
        for (f, want) in &segs {
            let offs = index_sealed(f, *want)?;
            rep.entries += offs.len() as u64;
            rep.bytes += offs
                .iter()
                .map(|&o| format::len_at(f.data(), o as usize) as u64)
                .sum::<u64>();
            done.fetch_add(f.map.len() as u64, Ordering::Relaxed);
        }
        Ok(rep)
    }

    /// Segments and counts.
    pub fn stat(&self) -> Result<LogStat> {
        let s = self.read_state();
        let segments = (0..s.segs.len())
            .map(|k| {
                let f = &s.segs[k].file;
                Ok(SegmentInfo {
                    path: f.path(),
                    first_index: f.first,
                    entries: s.count(k),
                    generation: f.gen(),
                    size: f.map.len() as u64,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LogStat {
            dir: self.dir.clone(),
            first_index: s.first(),
            last_index: s.last,
            entries: s.last + 1 - s.first(),
            tail_used: s.tail_end as u64,
            segments,
            sync_count: self.sync_count(),
        })
    }
}

impl Drop for CommitLog {
    fn drop(&mut self) {
        if !self.opts.read_only && matches!(self.opts.sync, SyncMode::Interval(_) | SyncMode::Batch)
        {
            let _ = self.sync();
        }
    }
}

#[derive(Clone, Copy, Debug)]
struct Item {
    index: u64,
    term: u64,
    seg: u32,
    pos: usize,
    len: usize,
}

/// Entries returned by [`CommitLog::read`]: they keep their segments
/// mapped, so the slices stay valid whatever happens to the log.
#[derive(Default)]
pub struct Entries {
    segs: Vec<Arc<SegFile>>,
    items: Vec<Item>,
}

/// One entry of [`Entries`].
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    index: u64,
    term: u64,
    data: &'a [u8],
}

impl<'a> Entry<'a> {
    /// Its index.
    pub fn index(&self) -> u64 {
        self.index
    }
    /// Its term.
    pub fn term(&self) -> u64 {
        self.term
    }
    /// Its bytes (a slice of the mapping).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
}

impl Entries {
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// The `k`-th entry returned.
    pub fn get(&self, k: usize) -> Option<Entry<'_>> {
        self.items.get(k).map(|it| self.entry(it))
    }
    fn entry(&self, it: &Item) -> Entry<'_> {
        let d = self.segs[it.seg as usize].data();
        Entry {
            index: it.index,
            term: it.term,
            data: &d[it.pos..it.pos + it.len],
        }
    }
    /// The entries in index order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Entry<'_>> + ExactSizeIterator + '_ {
        self.items.iter().map(|it| self.entry(it))
    }
    /// Total payload bytes.
    pub fn total_bytes(&self) -> usize {
        self.items.iter().map(|it| it.len).sum()
    }
}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = Entry<'a>;
    type IntoIter = Box<dyn ExactSizeIterator<Item = Entry<'a>> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// One entry from [`CommitLog::get`], owning a reference to its segment.
pub struct LogEntry {
    seg: Arc<SegFile>,
    item: Item,
}

impl LogEntry {
    /// Its index.
    pub fn index(&self) -> u64 {
        self.item.index
    }
    /// Its term.
    pub fn term(&self) -> u64 {
        self.item.term
    }
    /// Its bytes (a slice of the mapping).
    pub fn data(&self) -> &[u8] {
        &self.seg.data()[self.item.pos..self.item.pos + self.item.len]
    }
}

impl std::fmt::Debug for LogEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogEntry")
            .field("index", &self.index())
            .field("term", &self.term())
            .field("data", &self.data())
            .finish()
    }
}

#[allow(dead_code)]
fn _assert_send_sync() {
    fn is<T: Send + Sync>() {}
    is::<CommitLog>();
    is::<Entries>();
}

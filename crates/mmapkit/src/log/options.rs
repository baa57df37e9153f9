//! Options and reports of the log: sync modes, open options, recovery, stat and verify reports.

use super::*;

/// When appended data is made durable. Spelled (`FromStr`/`Display`, the
/// CLI's `--sync` and Python's `sync=`) `never`, `batch` or
/// `interval:<N>ms` (also `us` and `s` units, and the same without
/// `interval:`; a bare number is milliseconds).
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

crate::named_enum!(SyncMode, "sync mode", else SyncMode::parse_interval, "interval:<N>ms", {
    Never => "never",
    Batch => "batch",
}; SyncMode::Interval(d) => format_args!("interval:{}ms", d.as_secs_f64() * 1e3));

impl SyncMode {
    /// The `Interval` spellings: `interval:10ms`, `interval:200us`,
    /// `interval:0.5s`, the same without `interval:`, or a bare number of
    /// milliseconds.
    fn parse_interval(s: &str) -> Option<SyncMode> {
        let d = s.strip_prefix("interval:").unwrap_or(s);
        let (num, scale) = if let Some(n) = d.strip_suffix("ms") {
            (n, 1e-3)
        } else if let Some(n) = d.strip_suffix("us") {
            (n, 1e-6)
        } else if let Some(n) = d.strip_suffix('s') {
            (n, 1.0)
        } else {
            (d, 1e-3)
        };
        match num.parse::<f64>() {
            Ok(v) if v.is_finite() && v >= 0.0 => {
                Some(SyncMode::Interval(Duration::from_secs_f64(v * scale)))
            }
            _ => None,
        }
    }
}

crate::options! {
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
    /// Bytes after the last whole batch of the tail that do not read back
    /// as a batch nor as a clean end, with the entries they held when that
    /// is known (a read-only open leaves them in place; a writable one
    /// moves them to the quarantine directory). A torn write of a batch
    /// never synced and damage to a synced last batch look the same here:
    /// no later batch records that it was synced. `None`: a clean end.
    pub unreadable_tail: Option<UnreadableTail>,
}

/// See [`VerifyReport::unreadable_tail`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnreadableTail {
    /// The index the first of them would have had.
    pub first_index: u64,
    /// Entries counted by the commit records found there (at least those).
    pub entries: u64,
    /// Bytes.
    pub bytes: u64,
}

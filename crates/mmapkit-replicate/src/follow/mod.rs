//! The follower: copies a leader's log into a local one and keeps
//! following it.
//!
//! # Knowing which log, and what changed
//!
//! Every log has a random **id** and a numbered **truncation history**
//! (`mmapkit::log`'s `identity` module). The follower records, in
//! `DIR/follows` (written atomically), the id of the log it copies and an
//! epoch `R` such that only truncations numbered `R` or later can have cut
//! what it holds. It never follows another log (a replaced or re-created
//! leader directory, an empty leader, a wrong URL) unless told to
//! [`reset`](FollowOptions::reset), which discards its entries and says
//! how many. It truncates its own log only on positive evidence from a
//! healthy answer: the leader's history saying that a truncation after
//! index `c` happened since `R`. Every other answer (5xx, a 416 or 409
//! from a leader whose view is changing, timeouts) is retried, never
//! acted on; a difference the history does not explain (the leader lost
//! entries it had served, e.g. in a power loss) is reported as
//! [`ReplicateError::Diverged`], and the follower's log is kept, once a
//! second look at the state confirms that no truncation started meanwhile
//! (else the round is retried and reconciles with it).
//!
//! # Algorithm
//!
//! Each **round** (the first, and every one after a failure):
//!
//! 1. `GET /v1/state?since=R`: id, epoch, range, and `cut_since` (the
//!    lowest index truncations numbered `R` or later cut after).
//! 2. **Reconcile**: check the id; truncate after `cut_since` if it is
//!    below the follower's last entry; record `R` = the leader's epoch;
//!    then check that the follower's last entry has the leader's term
//!    *and* CRC (`GET /v1/term/{i}`). If the leader's log starts after the
//!    entry the follower needs next: [`ReplicateError::SnapshotRequired`].
//! 3. **Pipelined copy**: a fetch loop requests pages from the follower's
//!    next index, every page chained to the entry before it: the first
//!    page of a round carries it (`prev_term`, `prev_crc`: the server
//!    checks it), and once a page's head says how many entries it holds
//!    the next page is asked for at once, on a second connection, so two
//!    pages are in flight; the server names the entry before that page as
//!    it read it (`x-mmapkit-prev-term`/`-crc`), and the page is taken
//!    only if that is the entry received last (a server that does not
//!    name it gets one page at a time). Frames are decoded as they stream
//!    in; each frame's index must be the next one, and it is copied into
//!    a batch already framed as the log stores it ([`mmapkit::log::Framed`],
//!    reused buffers), its CRC32C checked over that copy; batches
//!    ([`FollowOptions::batch_bytes`]) go to an appender thread, which
//!    writes them as they are. Every page
//!    carries the tag of the read that produced it (truncations completed
//!    then); before entries of a page tagged below `R` are appended, `R`
//!    is lowered to the tag, durably, so that a truncation racing the read
//!    is found in the next round; a page tagged above `R` (read after a
//!    truncation the follower has not accounted for) ends the round, so a
//!    continuous follower reconciles within one long poll of a truncation.
//!    Batches received but not yet appended
//!    hold permits of a semaphore of [`FollowOptions::max_in_flight`]
//!    bytes; a frame longer than that is refused before anything is
//!    allocated for it.
//! 4. Caught up: with [`FollowOptions::once`] it asks the state once more
//!    and returns only if no truncation started since `R` (else another
//!    round); without it, it long-polls (`wait_ms`) until stopped.
//!
//! A damaged frame is never appended. Connection errors, 5xx, truncated
//! bodies and conflicts are retried with exponential backoff; after
//! [`FollowOptions::give_up_after`] without progress, or 3 damaged
//! receptions of the same entry, the error is returned. Because the
//! follower resumes from its own last index and records `R` before it
//! appends anything `R` does not cover, a follower killed at any moment
//! and restarted loses and duplicates nothing and keeps no entry the
//! leader dropped.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use tokio::sync::Notify;

use crate::{ReplicateError, Result};

mod fetch;
mod reconcile;
mod request;

mmapkit::options! {
    /// Options of [`follow`] and [`Follower::spawn`].
    #[derive(Clone, Debug)]
    pub struct FollowOptions {
        /// Durability of the follower's appends (default: each batch synced).
        pub sync: SyncMode,
        /// Bearer token for the leader.
        pub token: Option<String>,
        /// Catch up and return (default); else follow until stopped.
        pub once: bool,
        /// Payload bytes asked per page (default 16 MiB, the default server's
        /// largest: fewer request round trips; the server may clamp).
        pub page_bytes: usize,
        /// Entries asked per page (default 16384; the server may clamp).
        pub page_count: u64,
        /// Bytes received but not yet appended, at most (default 64 MiB).
        pub max_in_flight: usize,
        /// Bytes per appended batch (default 1 MiB).
        pub batch_bytes: usize,
        /// Long-poll wait per request while caught up (default 10 s).
        pub long_poll: Duration,
        /// Longest pause between retries (default 2 s; it starts at 50 ms and doubles).
        pub max_backoff: Duration,
        /// Return the last error after this long without progress (default:
        /// 30 s with `once`, never without).
        pub give_up_after: Option<Duration>,
        /// Segment size of a follower log that does not exist yet.
        pub segment_size: u64,
        /// Follow the served log even if this follower holds entries of
        /// another log (or of no recorded log): they are discarded, and the
        /// report's `truncated` says how many.
        pub reset: bool,
    }
}

impl Default for FollowOptions {
    fn default() -> Self {
        FollowOptions {
            sync: SyncMode::Batch,
            token: None,
            once: true,
            page_bytes: 16 << 20,
            page_count: 16384,
            max_in_flight: 64 << 20,
            batch_bytes: 1 << 20,
            long_poll: Duration::from_secs(10),
            max_backoff: Duration::from_secs(2),
            give_up_after: None,
            segment_size: LogOptions::default().segment_size,
            reset: false,
        }
    }
}

/// What a follow did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FollowReport {
    /// Entries appended.
    pub appended: u64,
    /// Payload bytes appended.
    pub bytes: u64,
    /// Entries dropped by log-matching truncations.
    pub truncated: u64,
    /// Retries after transient failures.
    pub retries: u64,
    /// The follower's first and last index at the end.
    pub first_index: u64,
    /// See `first_index`.
    pub last_index: u64,
}

/// Stops a running [`Follower`] (cheap to clone; usable from signal
/// handler threads).
#[derive(Clone, Default)]
pub struct StopHandle(Arc<(AtomicBool, Notify)>);

impl StopHandle {
    /// Asks the follower to stop: it finishes appending what it received
    /// and returns its report.
    pub fn stop(&self) {
        self.0 .0.store(true, Ordering::Release);
        self.0 .1.notify_waiters();
    }
    /// Whether stop was asked.
    pub fn is_stopped(&self) -> bool {
        self.0 .0.load(Ordering::Acquire)
    }
    async fn stopped(&self) {
        loop {
            let n = self.0 .1.notified();
            if self.is_stopped() {
                return;
            }
            n.await;
        }
    }
}

/// A follower running on a thread of its own.
pub struct Follower {
    stop: StopHandle,
    thread: std::thread::JoinHandle<Result<FollowReport>>,
}

impl Follower {
    /// Opens (or creates) the log in `dir` and starts following `url`.
    pub fn spawn(url: &str, dir: impl AsRef<Path>, opts: FollowOptions) -> Result<Follower> {
        let stop = StopHandle::default();
        let ctx = Ctx::new(url, dir.as_ref(), opts, stop.clone())?;
        let thread = std::thread::Builder::new()
            .name("mmapkit-follow".into())
            .spawn(move || ctx.run())
            .map_err(|e| ReplicateError::InvalidArgument(format!("cannot start a thread: {e}")))?;
        Ok(Follower { stop, thread })
    }
    /// A handle that stops it.
    pub fn stop_handle(&self) -> StopHandle {
        self.stop.clone()
    }
    /// Whether it has returned (caught up with `once`, stopped, or failed).
    pub fn is_finished(&self) -> bool {
        self.thread.is_finished()
    }
    /// Waits for it to return.
    pub fn join(self) -> Result<FollowReport> {
        self.thread.join().unwrap_or_else(|p| {
            Err(ReplicateError::Panicked(mmapkit::panic_detail("the follower", &*p)))
        })
    }
}

/// Follows `url` into the log in `dir` (created if missing) on this
/// thread: with `opts.once`, until caught up; else until an error.
pub fn follow(url: &str, dir: impl AsRef<Path>, opts: FollowOptions) -> Result<FollowReport> {
    Ctx::new(url, dir.as_ref(), opts, StopHandle::default())?.run()
}

struct Ctx {
    base: String,
    dir: PathBuf,
    opts: FollowOptions,
    log: Arc<CommitLog>,
    http: reqwest::Client,
    stop: StopHandle,
    report: FollowReport,
    /// The log followed (`None` until the first contact).
    followed: Option<Followed>,
    /// Whether the next page is asked for while one streams in (off once
    /// a server answers without the entry before its page; see `fetch`).
    pipeline: bool,
}

/// Leader state (`/v1/state`).
#[derive(serde::Deserialize, Debug)]
struct LeaderState {
    log_id: Option<String>,
    epoch: u64,
    cut_since: Option<u64>,
    first_index: u64,
    last_index: u64,
    /// The writer's incarnation (random per open of the log for writing;
    /// a decimal string). Absent from older servers.
    #[serde(default)]
    incarnation: Option<String>,
    /// The last entry appended (`last_index` is the last one served: by
    /// default the last durable one). Absent from older servers.
    #[serde(default)]
    appended_index: Option<u64>,
}

impl LeaderState {
    fn incarnation(&self) -> Option<u64> {
        self.incarnation.as_deref().and_then(|s| s.parse().ok())
    }
}

/// `/v1/term/{index}`: the leader's term and CRC of an entry.
#[derive(serde::Deserialize)]
struct TermAnswer {
    term: u64,
    crc: u32,
}

/// What the follower records about the log it copies (`DIR/follows`).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, PartialEq, Eq)]
struct Followed {
    log_id: String,
    /// Only truncations numbered from this on can have cut what it holds.
    epoch: u64,
    /// Entries copied past the leader's durable mark (from a server that
    /// serves unsynced entries), recorded before they are appended.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    tentative: Option<Tentative>,
}

/// Entries from `from` on were copied while the leader's writer, in
/// `incarnation`, had not synced them: a power loss of the leader may
/// take them back, and the writer then reopens the log (another
/// incarnation). A leader in another incarnation is positive evidence
/// that they may be gone: they are dropped and copied again (Kafka's
/// followers likewise truncate to their high watermark).
#[derive(serde::Serialize, serde::Deserialize, Debug, Clone, Copy, PartialEq, Eq)]
struct Tentative {
    incarnation: u64,
    from: u64,
}

const FOLLOWS: &str = "follows";

fn load_followed(dir: &Path) -> Result<Option<Followed>> {
    let p = dir.join(FOLLOWS);
    // A small JSON record: a longer file is refused before it is read.
    match mmapkit::fs::read_small(&p, 1 << 20)? {
        Some(b) => serde_json::from_slice(&b).map(Some).map_err(|e| {
            ReplicateError::Log(mmapkit::Error::Corrupt {
                path: p,
                detail: format!("not a follower record: {e}"),
            })
        }),
        None => Ok(None),
    }
}

fn save_followed(dir: &Path, f: &Followed) -> Result<()> {
    use std::io::Write;
    let p = dir.join(FOLLOWS);
    let mut tmp = mmapkit::fs::TempFile::beside(&p)?;
    let body = serde_json::to_vec(f).expect("serializable");
    tmp.file_mut().write_all(&body).map_err(|e| mmapkit::Error::io(tmp.path(), "write", e))?;
    tmp.rename_to(&p, true)?;
    Ok(())
}

enum Fail {
    Err(ReplicateError),
    /// Entry `index` arrived damaged.
    Corrupt(u64),
}

impl From<ReplicateError> for Fail {
    fn from(e: ReplicateError) -> Fail {
        Fail::Err(e)
    }
}

impl Ctx {
    fn new(url: &str, dir: &Path, opts: FollowOptions, stop: StopHandle) -> Result<Ctx> {
        let base = url.trim_end_matches('/').to_string();
        let parsed = reqwest::Url::parse(&base).map_err(|e| {
            ReplicateError::InvalidArgument(format!(
                "{url:?} is not a URL ({e}); expected http://HOST:PORT"
            ))
        })?;
        if parsed.scheme() != "http" {
            return Err(ReplicateError::InvalidArgument(format!(
                "{url}: only http:// is supported (put TLS in front of the server with a proxy)"
            )));
        }
        if opts.page_bytes == 0
            || opts.page_count == 0
            || opts.max_in_flight == 0
            || opts.batch_bytes == 0
        {
            return Err(ReplicateError::InvalidArgument(
                "page_bytes, page_count, max_in_flight and batch_bytes must be at least 1".into(),
            ));
        }
        let log = CommitLog::open(
            dir,
            LogOptions::default().sync(opts.sync).segment_size(opts.segment_size),
        )?;
        let followed = load_followed(dir)?;
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // A stalled connection (no byte for this long) is dropped and retried.
            .read_timeout(opts.long_poll + Duration::from_secs(30))
            .pool_idle_timeout(Duration::from_secs(30))
            .build()
            .map_err(|e| ReplicateError::InvalidArgument(format!("HTTP client: {e}")))?;
        Ok(Ctx {
            base,
            dir: dir.to_owned(),
            opts,
            log: Arc::new(log),
            http,
            stop,
            report: FollowReport::default(),
            followed,
            pipeline: true,
        })
    }

    fn run(mut self) -> Result<FollowReport> {
        let rt =
            tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(|e| {
                ReplicateError::InvalidArgument(format!("cannot start the runtime: {e}"))
            })?;
        let r = rt.block_on(self.run_async());
        self.report.first_index = self.log.first_index();
        self.report.last_index = self.log.last_index();
        r.map(|()| self.report.clone())
    }

    async fn run_async(&mut self) -> Result<()> {
        let give_up = self.opts.give_up_after.or(self.opts.once.then_some(Duration::from_secs(30)));
        let mut backoff = Duration::from_millis(50);
        let mut since = Instant::now();
        let mut damaged: (u64, u32) = (0, 0);
        loop {
            if self.stop.is_stopped() {
                return Ok(());
            }
            let before = self.report.appended + self.report.truncated;
            let r = self.round().await;
            if self.report.appended + self.report.truncated != before {
                backoff = Duration::from_millis(50);
                since = Instant::now();
            }
            let e = match r {
                Ok(()) => return Ok(()),
                Err(Fail::Corrupt(index)) => {
                    damaged = if damaged.0 == index { (index, damaged.1 + 1) } else { (index, 1) };
                    let e = ReplicateError::Corrupt {
                        url: self.base.clone(),
                        dir: self.dir.clone(),
                        index,
                        kept: self.log.last_index(),
                    };
                    if damaged.1 >= 3 {
                        return Err(e);
                    }
                    e
                }
                Err(Fail::Err(e)) if e.is_transient() => e,
                Err(Fail::Err(e)) => return Err(e),
            };
            if give_up.is_some_and(|g| since.elapsed() >= g) {
                return Err(e);
            }
            self.report.retries += 1;
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = self.stop.stopped() => return Ok(()),
            }
            backoff = (backoff * 2).min(self.opts.max_backoff);
        }
    }
}

#[cfg(test)]
mod panic_tests {
    use super::*;

    /// A follower thread that panicked is reported as a panic (with its
    /// message), not as a bad argument.
    #[test]
    fn a_panicked_follower_is_panicked_not_invalid_argument() {
        let thread = std::thread::spawn(|| -> Result<FollowReport> { panic!("boom") });
        let f = Follower { stop: StopHandle::default(), thread };
        match f.join() {
            Err(ReplicateError::Panicked(m)) => assert_eq!(m, "the follower panicked: boom"),
            other => panic!("{other:?}"),
        }
    }
}

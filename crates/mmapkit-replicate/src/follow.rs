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
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use mmapkit::log::{CommitLog, Framed, LogOptions, SyncMode};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::wire::Decoder;
use crate::{ReplicateError, Result};

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

/// Received entries on their way to the appender: framed in the log's
/// record format as they arrived, each CRC checked over the framed copy.
struct Batch {
    framed: Framed,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Batch buffers handed back by the appender for reuse: warm memory, so
/// neither side takes page faults on fresh buffers, and the received
/// chunks are released as soon as their entries are copied (the HTTP
/// client reuses its read buffer).
#[derive(Clone, Default)]
struct Pool(Arc<Mutex<Vec<Framed>>>);

impl Pool {
    /// An empty batch from `first`, with room for `bytes` of records.
    fn take(&self, first: u64, bytes: usize) -> Framed {
        let mut f = lock(&self.0).pop().unwrap_or_default();
        f.reset(first);
        f.reserve(bytes + (64 << 10));
        f
    }
    /// Keeps `f` for reuse unless a large entry made it much larger than a batch.
    fn give(&self, f: Framed, bytes: usize) {
        if f.capacity() <= 4 * bytes + (64 << 10) {
            lock(&self.0).push(f);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A page request sent before the page it follows has arrived (see the
/// fetch loop); dropping it aborts the request.
struct Ahead {
    from: u64,
    task: tokio::task::JoinHandle<Result<reqwest::Response>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.task.abort();
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

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// `GET path`: a future that borrows nothing, so a request can run
    /// as a task of its own (a page asked for ahead).
    fn get(
        &self,
        path: &str,
    ) -> impl std::future::Future<Output = Result<reqwest::Response>> + Send + 'static {
        let url = self.url(path);
        let mut req = self.http.get(&url);
        if let Some(t) = &self.opts.token {
            req = req.bearer_auth(t);
        }
        async move {
            let resp = req.send().await.map_err(|e| ReplicateError::Http {
                url: url.clone(),
                status: None,
                detail: format!("request failed: {}", chain(&e)),
                transient: true,
            })?;
            let status = resp.status();
            if status.is_success()
                || status.as_u16() == 410
                || status.as_u16() == 416
                || status.as_u16() == 409
            {
                return Ok(resp);
            }
            let text = resp.text().await.unwrap_or_default();
            let detail = format!("{status}: {}", text.trim());
            Err(if status.as_u16() == 401 {
                ReplicateError::Unauthorized { url, detail: text.trim().to_string() }
            } else {
                ReplicateError::Http {
                    url,
                    status: Some(status.as_u16()),
                    detail,
                    transient: status.is_server_error() || status.as_u16() == 429,
                }
            })
        }
    }

    async fn get_json<T: serde::de::DeserializeOwned>(
        &self,
        path: &str,
    ) -> Result<(u16, Option<T>)> {
        let resp = self.get(path).await?;
        let status = resp.status().as_u16();
        if status != 200 {
            return Ok((status, None));
        }
        let url = self.url(path);
        let body = resp.bytes().await.map_err(|e| ReplicateError::Http {
            url: url.clone(),
            status: Some(status),
            detail: format!("reading the answer: {}", chain(&e)),
            transient: true,
        })?;
        let v = serde_json::from_slice(&body).map_err(|e| ReplicateError::Http {
            url,
            status: Some(status),
            detail: format!("malformed answer: {e}"),
            transient: false,
        })?;
        Ok((status, Some(v)))
    }

    fn snapshot_required(&self, need: u64, leader_first: u64) -> ReplicateError {
        ReplicateError::SnapshotRequired {
            url: self.base.clone(),
            dir: self.dir.clone(),
            need,
            leader_first,
        }
    }

    fn diverged(&self, detail: String) -> ReplicateError {
        ReplicateError::Diverged { url: self.base.clone(), dir: self.dir.clone(), detail }
    }

    /// A difference from the leader that the state `st` does not explain:
    /// [`ReplicateError::Diverged`], unless a truncation started on the
    /// leader since `st` was read (or the view it came from had read the
    /// history just before a truncation began): the difference may be
    /// that truncation's, so the round is retried (transient) and the next
    /// one reconciles with the history that records it.
    async fn unexplained(&self, st: &LeaderState, detail: String) -> ReplicateError {
        let path = format!("/v1/state?since={}", self.followed.as_ref().map_or(0, |f| f.epoch));
        let why = match self.get_json::<LeaderState>(&path).await {
            Ok((200, Some(now))) if now.log_id == st.log_id && now.epoch == st.epoch => {
                let at = self.agreement(now.last_index).await;
                return self.diverged(format!("{detail}{at}"));
            }
            Ok((200, Some(now))) => format!(
                "the leader's log changed while this follower reconciled (epoch {} -> {})",
                st.epoch, now.epoch
            ),
            Ok((s, _)) => format!("{s} while checking the leader's state again"),
            Err(e) => format!("checking the leader's state again: {e}"),
        };
        // Not confirmed: the next round looks again.
        ReplicateError::Http {
            url: self.url(&path),
            status: Some(200),
            detail: format!("{why}; reconciling again"),
            transient: true,
        }
    }

    /// Truncates the follower's log after `index` (clamped to its range)
    /// on a blocking thread; counts what it dropped.
    async fn truncate_to(&mut self, index: u64) -> Result<()> {
        let log = self.log.clone();
        let (ff, fl) = (log.first_index(), log.last_index());
        let to = index.max(ff - 1);
        if to >= fl {
            return Ok(());
        }
        tokio::task::spawn_blocking(move || log.truncate_after(to))
            .await
            .map_err(|e| ReplicateError::Panicked(format!("the truncation failed: {e}")))??;
        self.report.truncated += fl - to;
        Ok(())
    }

    async fn record(&mut self, f: Followed) -> Result<()> {
        if self.followed.as_ref() != Some(&f) {
            let dir = self.dir.clone();
            let g = f.clone();
            tokio::task::spawn_blocking(move || save_followed(&dir, &g)).await.map_err(|e| {
                ReplicateError::Panicked(format!("saving the record failed: {e}"))
            })??;
            self.followed = Some(f);
        }
        Ok(())
    }

    /// Brings the follower's log in line with the leader's (step 2).
    async fn reconcile(&mut self, st: &LeaderState) -> Result<()> {
        let Some(id) = st.log_id.clone() else {
            return Err(self.diverged(
                "the leader's log has no id (an older version made it): open it for writing once \
                 on the leader, then follow it"
                    .into(),
            ));
        };
        let held = self.log.len();
        let same = self.followed.as_ref().is_some_and(|f| f.log_id == id);
        if !same {
            if held > 0 && !self.opts.reset {
                return Err(self.diverged(match &self.followed {
                    Some(f) => format!(
                        "the leader serves log {id}, but this follower copies log {} (was the \
                         leader's directory replaced?); follow with reset to discard its {held} \
                         entries and copy the new log",
                        f.log_id
                    ),
                    None => format!(
                        "this directory holds {held} entries but records no leader (a copy of \
                         another log?); follow with reset to discard them and copy log {id}"
                    ),
                }));
            }
            if held > 0 {
                let first = self.log.first_index();
                self.truncate_to(first - 1).await?;
            }
            // A new copy: only truncations from now on can cut it.
            self.record(Followed { log_id: id, epoch: st.epoch, tentative: None }).await?;
            self.opts.reset = false;
        } else {
            let r = self.followed.as_ref().expect("same").epoch;
            if st.epoch < r {
                return Err(self.diverged(format!(
                    "the leader's log {id} is at truncation epoch {}, behind the {r} this \
                     follower saw (was it restored from a backup?)",
                    st.epoch
                )));
            }
            if st.epoch > r {
                // The positive evidence: the leader's own record of what
                // its truncations since `r` cut.
                if let Some(cut) = st.cut_since {
                    self.truncate_to(cut).await?;
                }
                let tentative = self.followed.as_ref().and_then(|f| f.tentative);
                self.record(Followed { log_id: id, epoch: st.epoch, tentative }).await?;
            }
            self.settle_tentative(st.incarnation()).await?;
        }

        let log = self.log.clone();
        let (ff, fl) = (log.first_index(), log.last_index());
        if fl + 1 < st.first_index {
            return Err(self.snapshot_required(fl + 1, st.first_index));
        }
        if fl < ff || fl < st.first_index {
            return Ok(()); // empty, or its last entry was purged (committed) there
        }
        if fl > st.last_index && st.appended_index.is_some_and(|a| fl <= a) {
            // Entries the leader holds but has not synced (copied from it
            // while it served unsynced entries): not served until they
            // are durable there, when the checks below can be made.
            return Err(ReplicateError::Http {
                url: self.url("/v1/state"),
                status: Some(200),
                detail: format!(
                    "this follower holds entries up to {fl}, past the leader's last durable \
                     entry {}: waiting for the leader to sync them",
                    st.last_index
                ),
                transient: true,
            });
        }
        if fl > st.last_index {
            return Err(self
                .unexplained(
                    st,
                    format!(
                "the leader's log ends at entry {} but this follower holds entries up to {fl}, \
                 and the leader recorded no truncation of them: it lost entries it had served \
                 (a power loss before they were synced?); the follower's log was kept",
                st.last_index
            ),
                )
                .await);
        }
        let e = log.get(fl).map_err(ReplicateError::from)?;
        let (term, crc) = (e.term(), e.crc());
        let path = format!("/v1/term/{fl}");
        match self.get_json::<TermAnswer>(&path).await? {
            (200, Some(t)) if t.term == term && t.crc == crc => Ok(()),
            (200, Some(t)) => Err(self
                .unexplained(
                    st,
                    format!(
                "entry {fl} has term {} and CRC {:#010x} on the leader but term {term} and CRC \
                 {crc:#010x} here, and the leader recorded no truncation of it; the follower's \
                 log was kept",
                t.term, t.crc
            ),
                )
                .await),
            // Purged there meanwhile: it was committed.
            (410, _) => Ok(()),
            (s, _) => Err(ReplicateError::Http {
                url: self.url(&path),
                status: Some(s),
                detail: format!("{s} while checking entry {fl}; retrying"),
                transient: true,
            }),
        }
    }

    /// Entries copied past the leader's durable mark (see [`Tentative`]):
    /// dropped if the leader's writer has reopened the log since (they
    /// may be gone there), else kept; the record is cleared once nothing
    /// tentative is left.
    async fn settle_tentative(&mut self, leader_incarnation: Option<u64>) -> Result<()> {
        let Some(f) = self.followed.clone() else { return Ok(()) };
        let Some(t) = f.tentative else { return Ok(()) };
        if leader_incarnation == Some(t.incarnation) && t.from <= self.log.last_index() {
            return Ok(());
        }
        if leader_incarnation != Some(t.incarnation) {
            self.truncate_to(t.from - 1).await?;
        }
        self.record(Followed { tentative: None, ..f }).await
    }

    /// Discards every entry this follower holds (`reset` of a diverged
    /// copy): the next reconcile copies the log afresh.
    async fn discard(&mut self) -> Result<()> {
        let first = self.log.first_index();
        self.truncate_to(first - 1).await?;
        self.followed = None;
        Ok(())
    }

    /// Where this copy and the leader still agree, for a divergence's
    /// message: entries `upto`, `upto - 2`, `upto - 6`, `upto - 14`, ...
    /// are compared (term and CRC) until one matches, then the gap to the
    /// mismatch above it is halved: the answer is an entry that matches
    /// with the next one not matching.
    async fn agreement(&self, upto: u64) -> String {
        let first = self.log.first_index().max(1);
        let (mut hi, mut step) = (upto.min(self.log.last_index()) + 1, 1u64);
        let mut lo = None;
        while hi > first {
            let i = hi.saturating_sub(step).max(first);
            match self.same_entry(i).await {
                Some(true) => {
                    lo = Some(i);
                    break;
                }
                Some(false) => hi = i,
                None => break,
            }
            step *= 2;
        }
        let Some(mut lo) = lo else {
            return "; no entry checked is the same on both: follow with reset to copy the log \
                    again"
                .into();
        };
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match self.same_entry(mid).await {
                Some(true) => lo = mid,
                Some(false) => hi = mid,
                None => break,
            }
        }
        format!(
            "; entry {lo} is the same on both (term and CRC), entry {} is not: keep the copy up \
             to it with `mmapkit log truncate {} {lo}`, or follow with reset to copy the log \
             again",
            lo + 1,
            self.dir.display()
        )
    }

    /// Whether entry `i` has the same term and CRC here and on the leader
    /// (`None`: not known, e.g. the leader did not answer).
    async fn same_entry(&self, i: u64) -> Option<bool> {
        let e = self.log.get(i).ok()?;
        match self.get_json::<TermAnswer>(&format!("/v1/term/{i}")).await {
            Ok((200, Some(t))) => Some(t.term == e.term() && t.crc == e.crc()),
            Ok((410 | 416, _)) => Some(false),
            _ => None,
        }
    }

    /// `/v1/state`, with `since` = the recorded epoch.
    async fn leader_state(&self) -> Result<LeaderState> {
        let path = match &self.followed {
            Some(f) => format!("/v1/state?since={}", f.epoch),
            None => "/v1/state".into(),
        };
        let (status, st) = self.get_json::<LeaderState>(&path).await?;
        match (status, st) {
            (200, Some(st)) => Ok(st),
            (409, _) => {
                // Past the epoch of *this* log; but another log in the
                // leader's place (a replaced directory) has a history of
                // its own, shorter or not: that is told by the id, and
                // reconcile refuses it (or, with reset, copies it).
                if let (200, Some(st)) = self.get_json::<LeaderState>("/v1/state").await? {
                    if st.log_id.as_deref() != self.followed.as_ref().map(|f| f.log_id.as_str()) {
                        return Ok(st);
                    }
                }
                Err(self.diverged(format!(
                    "the leader's truncation history is behind the epoch {} this follower saw \
                     (was its log restored from a backup?)",
                    self.followed.as_ref().map_or(0, |f| f.epoch)
                )))
            }
            (s, _) => Err(ReplicateError::Http {
                url: self.url(&path),
                status: Some(s),
                detail: format!("unexpected status {s}"),
                transient: true,
            }),
        }
    }

    async fn round(&mut self) -> std::result::Result<(), Fail> {
        let st = match self.leader_state().await {
            Err(ReplicateError::Diverged { .. }) if self.opts.reset => {
                self.discard().await?;
                self.leader_state().await?
            }
            r => r?,
        };
        match self.reconcile(&st).await {
            // With reset, a copy that differs from its own log is copied
            // again, as one of another log is.
            Err(ReplicateError::Diverged { .. }) if self.opts.reset => {
                self.discard().await?;
                self.reconcile(&st).await?;
            }
            r => r?,
        }

        // The appender: appends batches in order on a blocking thread and
        // hands their buffers back for reuse.
        let (tx, mut rx) = mpsc::unbounded_channel::<Batch>();
        let log = self.log.clone();
        let pool = Pool::default();
        let (back, batch_bytes) = (pool.clone(), self.opts.batch_bytes);
        let appender = tokio::task::spawn_blocking(move || {
            let (mut n, mut bytes) = (0u64, 0u64);
            while let Some(mut b) = rx.blocking_recv() {
                // The batch's first index must be the log's next (else
                // nothing is written: another writer changed the log).
                if let Err(e) = log.append_framed(&mut b.framed) {
                    return (n, bytes, Err(e.into()));
                }
                n += b.framed.len() as u64;
                bytes += b.framed.payload_bytes() as u64;
                back.give(b.framed, batch_bytes);
            }
            (n, bytes, Ok(()))
        });
        let fetched = self.fetch(tx, &pool).await;
        let (n, bytes, appended) = appender.await.unwrap_or((
            0,
            0,
            Err(ReplicateError::Panicked("the appender panicked".into())),
        ));
        self.report.appended += n;
        self.report.bytes += bytes;
        appended?;
        fetched
    }

    /// `/v1/entries` from `from`: a long poll when following and `wait`.
    fn page_path(&self, from: u64, wait: bool, prev: Option<(u64, u32)>) -> String {
        let wait = if wait && !self.opts.once { self.opts.long_poll.as_millis() as u64 } else { 0 };
        let mut path = format!(
            "/v1/entries?from={from}&max_count={}&max_bytes={}&wait_ms={wait}",
            self.opts.page_count, self.opts.page_bytes
        );
        if let Some((t, c)) = prev {
            path.push_str(&format!("&prev_term={t}&prev_crc={c}"));
        }
        path
    }

    /// The fetch loop of a round (step 3); batches go to `tx`.
    ///
    /// Two pages are in flight: once a page's head says how many entries
    /// it holds and the leader has more, the next page is asked for on a
    /// second connection, so the leader reads it and starts sending while
    /// this one streams in and is appended. That request cannot carry the
    /// entry before it (not received yet): the server names it instead
    /// (`x-mmapkit-prev-term`/`-crc`, read in the same version of the log
    /// as the page), and the page is taken only if that is the entry this
    /// follower received last, the check the server makes for a request
    /// that carries it.
    async fn fetch(
        &mut self,
        tx: mpsc::UnboundedSender<Batch>,
        pool: &Pool,
    ) -> std::result::Result<(), Fail> {
        let budget = Arc::new(Semaphore::new(self.opts.max_in_flight.min(Semaphore::MAX_PERMITS)));
        let mut next = self.log.last_index() + 1;
        let mut prev = if next > self.log.first_index() {
            let e = self.log.get(next - 1).map_err(ReplicateError::from)?;
            Some((e.term(), e.crc()))
        } else {
            None
        };
        // A frame's length comes from the network: nothing larger than the
        // in-flight budget is accepted (or allocated for).
        let max_frame = self.opts.max_in_flight.min(u32::MAX as usize);
        let followed_id = self.followed.as_ref().map(|f| f.log_id.clone());
        let mut batch = pool.take(next, self.opts.batch_bytes);
        let mut ahead: Option<Ahead> = None;
        loop {
            // A stopped appender (its append failed: a full disk) ends the
            // round at once, which reports its error; a continuous
            // follower must not go on fetching what it cannot keep.
            if self.stop.is_stopped() || tx.is_closed() {
                return Ok(());
            }
            let (resp, url, pipelined) = match ahead.take() {
                Some(mut a) if a.from == next => {
                    let url = self.url(&self.page_path(next, false, None));
                    let r = tokio::select! {
                        r = &mut a.task => r.map_err(|e| {
                            ReplicateError::Panicked(format!("a page request failed: {e}"))
                        })??,
                        _ = self.stop.stopped() => return Ok(()),
                        _ = tx.closed() => return Ok(()),
                    };
                    (r, url, true)
                }
                _ => {
                    let path = self.page_path(next, true, prev);
                    let r = tokio::select! {
                        r = self.get(&path) => r?,
                        _ = self.stop.stopped() => return Ok(()),
                        _ = tx.closed() => return Ok(()),
                    };
                    (r, self.url(&path), false)
                }
            };
            match resp.status().as_u16() {
                200 => {}
                410 => {
                    let first = header_u64(&resp, "x-mmapkit-first-index").unwrap_or(next + 1);
                    return Err(self.snapshot_required(next, first).into());
                }
                s => {
                    // 409 (log mismatch) or 416 (the leader's log is
                    // shorter): the leader changed; reconcile in a new round.
                    let text = resp.text().await.unwrap_or_default();
                    return Err(ReplicateError::Http {
                        url,
                        status: Some(s),
                        detail: format!("{s}: {}", text.trim()),
                        transient: true,
                    }
                    .into());
                }
            }
            if pipelined {
                let named = (
                    header_u64(&resp, "x-mmapkit-prev-term"),
                    header_u64(&resp, "x-mmapkit-prev-crc"),
                );
                let first = header_u64(&resp, "x-mmapkit-first-index");
                match (named, prev) {
                    ((Some(t), Some(c)), Some((pt, pc))) if t == pt && c == u64::from(pc) => {}
                    ((Some(t), Some(c)), _) => {
                        // What a server that checks prev_term/prev_crc answers 409 to.
                        return Err(ReplicateError::Http {
                            url,
                            status: Some(409),
                            detail: format!(
                                "log mismatch: entry {} has term {t} and CRC {c:#010x} on the \
                                 leader, not the {prev:?} received; reconciling",
                                next - 1
                            ),
                            transient: true,
                        }
                        .into());
                    }
                    // The entry before the page was purged there (committed).
                    ((None, None), _) if first.is_some_and(|f| f >= next) => {}
                    _ => {
                        // A server that does not name it: ask again, one
                        // page at a time, with the entry before each page.
                        self.pipeline = false;
                        continue;
                    }
                }
            }
            let leader_last = header_u64(&resp, "x-mmapkit-last-index").unwrap_or(0);
            // The page must come from the log followed; its read's tag
            // lowers the recorded epoch (durably, before any of its
            // entries is appended) so a truncation racing the read is
            // caught by the next state check.
            let page_id = resp
                .headers()
                .get("x-mmapkit-log-id")
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned);
            if page_id != followed_id {
                return Err(ReplicateError::Http {
                    url,
                    status: Some(200),
                    detail: "the page came from another log; checking the leader again".into(),
                    transient: true,
                }
                .into());
            }
            let Some(tag) = header_u64(&resp, "x-mmapkit-epoch") else {
                return Err(ReplicateError::Http {
                    url,
                    status: Some(200),
                    detail: "the page has no x-mmapkit-epoch (an older server?)".into(),
                    transient: false,
                }
                .into());
            };
            if let Some(f) = self.followed.clone() {
                if tag > f.epoch {
                    // Read after a truncation this follower has not
                    // accounted for completed: what it holds may be cut
                    // (a continuous follower asks no state while its pages
                    // chain on), so reconcile before appending anything.
                    self.send(&tx, &budget, &mut batch, pool, next).await?;
                    return Err(ReplicateError::Http {
                        url,
                        status: Some(200),
                        detail: "the leader truncated its log; reconciling".into(),
                        transient: true,
                    }
                    .into());
                }
                if tag < f.epoch {
                    self.record(Followed { epoch: tag, ..f }).await?;
                }
            }
            let count = header_u64(&resp, "x-mmapkit-count").unwrap_or(0);
            let mark = (
                header_u64(&resp, "x-mmapkit-durable"),
                header_u64(&resp, "x-mmapkit-incarnation"),
            );
            if let (Some(f), (Some(durable), Some(inc))) = (self.followed.clone(), mark) {
                let page_last = (next + count).saturating_sub(1);
                match f.tentative {
                    // Past the leader's durable mark: recorded (durably)
                    // before any of it is appended.
                    None if count > 0 && page_last > durable => {
                        let from = next.max(durable + 1);
                        let tentative = Some(Tentative { incarnation: inc, from });
                        self.record(Followed { tentative, ..f }).await?;
                    }
                    Some(t) if t.incarnation != inc => {
                        self.send(&tx, &budget, &mut batch, pool, next).await?;
                        return Err(ReplicateError::Http {
                            url,
                            status: Some(200),
                            detail: "the leader's writer reopened its log; checking the entries \
                                     copied before it synced them"
                                .into(),
                            transient: true,
                        }
                        .into());
                    }
                    // Everything held and this page are durable there now.
                    Some(_) if page_last <= durable => {
                        self.record(Followed { tentative: None, ..f }).await?;
                    }
                    _ => {}
                }
            }
            // The leader has entries past this page: ask for the next one now.
            let after = next.saturating_add(count);
            if self.pipeline && count > 0 && after <= leader_last {
                let path = self.page_path(after, false, None);
                ahead = Some(Ahead { from: after, task: tokio::spawn(self.get(&path)) });
            }
            let mut resp = resp;
            let mut dec = Decoder::default();
            let mut got = 0u64;
            loop {
                let chunk = match resp.chunk().await {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(e) => {
                        self.send(&tx, &budget, &mut batch, pool, next).await?;
                        return Err(ReplicateError::Http {
                            url,
                            status: Some(200),
                            detail: format!(
                                "connection lost after entry {}: {}",
                                next - 1,
                                chain(&e)
                            ),
                            transient: true,
                        }
                        .into());
                    }
                };
                dec.push(chunk);
                loop {
                    let f = match dec.next_frame(max_frame) {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(_) => {
                            self.send(&tx, &budget, &mut batch, pool, next).await?;
                            return Err(Fail::Corrupt(next));
                        }
                    };
                    // Copied into the batch as it is framed in the log; the
                    // CRC is checked over that copy.
                    if f.index != next || !batch.push_checked(f.term, &f.payload, f.crc) {
                        self.send(&tx, &budget, &mut batch, pool, next).await?;
                        return Err(Fail::Corrupt(next));
                    }
                    prev = Some((f.term, f.crc));
                    next += 1;
                    got += 1;
                    if batch.framed_bytes() >= self.opts.batch_bytes {
                        self.send(&tx, &budget, &mut batch, pool, next).await?;
                    }
                }
            }
            self.send(&tx, &budget, &mut batch, pool, next).await?;
            if got != count || dec.pending() != 0 {
                return Err(ReplicateError::Http {
                    url,
                    status: Some(200),
                    detail: format!("the page ended early: {got} of {count} entries arrived"),
                    transient: true,
                }
                .into());
            }
            if self.opts.once && next > leader_last {
                // Done only if no truncation started since what was
                // copied was read; else the next round reconciles.
                drop(tx);
                let st = self.leader_state().await?;
                let f = self.followed.as_ref().expect("recorded in reconcile");
                if st.log_id.as_deref() == Some(f.log_id.as_str()) && st.epoch == f.epoch {
                    return Ok(());
                }
                return Err(ReplicateError::Http {
                    url: self.url("/v1/state"),
                    status: Some(200),
                    detail: "the leader's log was truncated while it was copied; reconciling"
                        .into(),
                    transient: true,
                }
                .into());
            }
        }
    }

    /// Hands the batch (if any) to the appender once the in-flight budget
    /// allows; the next batch starts at `next`.
    async fn send(
        &self,
        tx: &mpsc::UnboundedSender<Batch>,
        budget: &Arc<Semaphore>,
        batch: &mut Framed,
        pool: &Pool,
        next: u64,
    ) -> Result<()> {
        if batch.is_empty() {
            batch.reset(next);
            return Ok(());
        }
        let want =
            batch.framed_bytes().clamp(1, self.opts.max_in_flight.min(Semaphore::MAX_PERMITS));
        let permit = budget.clone().acquire_many_owned(want as u32).await.ok();
        let framed = std::mem::replace(batch, pool.take(next, self.opts.batch_bytes));
        // A closed channel: the appender stopped, and the round reports its error.
        let _ = tx.send(Batch { framed, _permit: permit });
        Ok(())
    }
}

fn header_u64(r: &reqwest::Response, name: &str) -> Option<u64> {
    r.headers().get(name)?.to_str().ok()?.parse().ok()
}

fn chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(c) = src {
        s.push_str(": ");
        s.push_str(&c.to_string());
        src = c.source();
    }
    s
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

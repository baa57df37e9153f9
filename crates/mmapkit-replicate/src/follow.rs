//! The follower: copies a leader's log into a local one and keeps
//! following it.
//!
//! # Algorithm
//!
//! Each **round** (the first, and every one after a failure):
//!
//! 1. `GET /v1/state`.
//! 2. **Log matching** on the follower's last entry `(i, t)`: if the
//!    leader's entry `i` has term `t`, the logs agree up to `i` (Raft's
//!    log-matching property). Otherwise it binary-searches (`GET
//!    /v1/term/{k}`) for the last agreeing index `k` and
//!    `truncate_after(k)`. Entries the leader purged are taken to agree
//!    (they were committed). If the leader's log starts after the entry the
//!    follower needs next: [`ReplicateError::SnapshotRequired`].
//! 3. **Pipelined copy**: a fetch loop requests pages from the follower's
//!    next index (with `prev_term`, so every page re-checks log matching
//!    at its start), decodes frames as they stream in, checks every
//!    frame's index (consecutive) and CRC32C, and hands batches
//!    ([`FollowOptions::batch_bytes`]) to an appender thread, which appends
//!    them with the log's [`SyncMode`]. Fetching and appending overlap;
//!    batches received but not yet appended hold permits of a semaphore of
//!    [`FollowOptions::max_in_flight`] bytes, so a slow disk stalls the
//!    fetch instead of growing memory.
//! 4. Caught up: with [`FollowOptions::once`] it returns; else it long-polls
//!    (`wait_ms`) for more until stopped.
//!
//! A damaged frame is never appended: the batch holding it stops there
//! (the entries before it, verified, are appended). Connection errors,
//! 5xx, truncated bodies and log-matching conflicts (the leader restarted
//! with another log) are retried with exponential backoff; after
//! [`FollowOptions::give_up_after`] without progress, or 3 damaged
//! receptions of the same entry, the error is returned. Because the
//! follower resumes from its own last index and every append is checked
//! against the index it expects, a follower killed at any moment and
//! restarted loses and duplicates nothing (what it had appended is in its
//! log, with the durability of its [`SyncMode`]).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit, Semaphore};

use crate::wire::Decoder;
use crate::{ReplicateError, Result};

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
        self.thread.join().unwrap_or_else(|_| {
            Err(ReplicateError::InvalidArgument(
                "the follower panicked".into(),
            ))
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
}

/// Leader state.
#[derive(serde::Deserialize, Debug)]
struct LeaderState {
    first_index: u64,
    last_index: u64,
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

struct Batch {
    first: u64,
    entries: Vec<(u64, Bytes)>,
    /// Their CRCs, checked on arrival (the log stores them as they are).
    crcs: Vec<u32>,
    bytes: usize,
    _permit: Option<OwnedSemaphorePermit>,
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
            LogOptions {
                sync: opts.sync,
                segment_size: opts.segment_size,
                ..Default::default()
            },
        )?;
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
        })
    }

    fn run(mut self) -> Result<FollowReport> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| {
                ReplicateError::InvalidArgument(format!("cannot start the runtime: {e}"))
            })?;
        let r = rt.block_on(self.run_async());
        self.report.first_index = self.log.first_index();
        self.report.last_index = self.log.last_index();
        r.map(|()| self.report.clone())
    }

    async fn run_async(&mut self) -> Result<()> {
        let give_up = self
            .opts
            .give_up_after
            .or(self.opts.once.then_some(Duration::from_secs(30)));
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
                    damaged = if damaged.0 == index {
                        (index, damaged.1 + 1)
                    } else {
                        (index, 1)
                    };
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

    async fn get(&self, path: &str) -> Result<reqwest::Response> {
        let url = self.url(path);
        let mut req = self.http.get(&url);
        if let Some(t) = &self.opts.token {
            req = req.bearer_auth(t);
        }
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
            ReplicateError::Unauthorized {
                url,
                detail: text.trim().to_string(),
            }
        } else {
            ReplicateError::Http {
                url,
                status: Some(status.as_u16()),
                detail,
                transient: status.is_server_error() || status.as_u16() == 429,
            }
        })
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

    /// Whether the leader's entry `k` has term `t` (purged entries agree).
    async fn agrees(&self, k: u64, t: u64) -> Result<bool> {
        #[derive(serde::Deserialize)]
        struct T {
            term: u64,
        }
        let (status, v) = self.get_json::<T>(&format!("/v1/term/{k}")).await?;
        Ok(match status {
            200 => v.is_some_and(|v| v.term == t),
            410 => true,
            _ => false,
        })
    }

    /// Brings the follower's log in line with the leader's (step 2).
    async fn reconcile(&mut self, st: &LeaderState) -> Result<()> {
        let log = self.log.clone();
        let ff = log.first_index();
        let fl = log.last_index();
        if fl + 1 < st.first_index {
            return Err(self.snapshot_required(fl + 1, st.first_index));
        }
        if fl < ff {
            return Ok(());
        }
        let term_at = |k: u64| log.term(k).map_err(ReplicateError::from);
        if fl <= st.last_index && self.agrees(fl, term_at(fl)?).await? {
            return Ok(());
        }
        // Binary search for the last agreeing index in [lo, hi): lo agrees
        // (or is before the log), hi does not.
        let mut lo = (ff - 1).max(st.first_index.saturating_sub(1).min(fl));
        let mut hi = fl;
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if mid <= st.last_index && self.agrees(mid, term_at(mid)?).await? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        let l2 = log.clone();
        tokio::task::spawn_blocking(move || l2.truncate_after(lo))
            .await
            .map_err(|e| ReplicateError::InvalidArgument(e.to_string()))??;
        self.report.truncated += fl - lo;
        Ok(())
    }

    async fn round(&mut self) -> std::result::Result<(), Fail> {
        let (status, st) = self.get_json::<LeaderState>("/v1/state").await?;
        let st = st.ok_or_else(|| ReplicateError::Http {
            url: self.url("/v1/state"),
            status: Some(status),
            detail: format!("unexpected status {status}"),
            transient: true,
        })?;
        self.reconcile(&st).await?;

        // The appender: appends batches in order on a blocking thread.
        let (tx, mut rx) = mpsc::unbounded_channel::<Batch>();
        let log = self.log.clone();
        let appender = tokio::task::spawn_blocking(move || {
            let (mut n, mut bytes) = (0u64, 0u64);
            while let Some(b) = rx.blocking_recv() {
                let next = log.last_index() + 1;
                if b.first != next {
                    return (n, bytes, Err(ReplicateError::InvalidArgument(format!(
                        "{}: expected to append entry {next} but got {} (was the log changed by another writer?)",
                        log.dir().display(),
                        b.first
                    ))));
                }
                if let Err(e) = log.append_with_crcs(b.first, &b.entries, &b.crcs) {
                    return (n, bytes, Err(e.into()));
                }
                n += b.entries.len() as u64;
                bytes += b.bytes as u64;
            }
            (n, bytes, Ok(()))
        });
        let fetched = self.fetch(tx).await;
        let (n, bytes, appended) = appender.await.unwrap_or((
            0,
            0,
            Err(ReplicateError::InvalidArgument(
                "the appender panicked".into(),
            )),
        ));
        self.report.appended += n;
        self.report.bytes += bytes;
        appended?;
        fetched
    }

    /// The fetch loop of a round (step 3); batches go to `tx`.
    async fn fetch(&mut self, tx: mpsc::UnboundedSender<Batch>) -> std::result::Result<(), Fail> {
        let budget = Arc::new(Semaphore::new(
            self.opts.max_in_flight.min(Semaphore::MAX_PERMITS),
        ));
        let mut next = self.log.last_index() + 1;
        let mut prev_term = if next > self.log.first_index() {
            Some(self.log.term(next - 1).map_err(ReplicateError::from)?)
        } else {
            None
        };
        let max_frame = (self.opts.page_bytes.max(mmapkit_max_entry())).min(u32::MAX as usize);
        let mut batch = Batch {
            first: next,
            entries: Vec::new(),
            crcs: Vec::new(),
            bytes: 0,
            _permit: None,
        };
        loop {
            if self.stop.is_stopped() {
                return Ok(());
            }
            let wait = if self.opts.once {
                0
            } else {
                self.opts.long_poll.as_millis() as u64
            };
            let mut path = format!(
                "/v1/entries?from={next}&max_count={}&max_bytes={}&wait_ms={wait}",
                self.opts.page_count, self.opts.page_bytes
            );
            if let Some(t) = prev_term {
                path.push_str(&format!("&prev_term={t}"));
            }
            let url = self.url(&path);
            let resp = tokio::select! {
                r = self.get(&path) => r?,
                _ = self.stop.stopped() => return Ok(()),
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
            let leader_last = header_u64(&resp, "x-mmapkit-last-index").unwrap_or(0);
            let count = header_u64(&resp, "x-mmapkit-count").unwrap_or(0);
            let mut resp = resp;
            let mut dec = Decoder::default();
            let mut got = 0u64;
            loop {
                let chunk = match resp.chunk().await {
                    Ok(Some(c)) => c,
                    Ok(None) => break,
                    Err(e) => {
                        self.send(&tx, &budget, &mut batch, next).await?;
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
                            self.send(&tx, &budget, &mut batch, next).await?;
                            return Err(Fail::Corrupt(next));
                        }
                    };
                    if f.index != next || !f.crc_ok() {
                        self.send(&tx, &budget, &mut batch, next).await?;
                        return Err(Fail::Corrupt(next));
                    }
                    prev_term = Some(f.term);
                    next += 1;
                    got += 1;
                    batch.bytes += f.payload.len();
                    batch.entries.push((f.term, f.payload));
                    batch.crcs.push(f.crc);
                    if batch.bytes >= self.opts.batch_bytes {
                        self.send(&tx, &budget, &mut batch, next).await?;
                    }
                }
            }
            self.send(&tx, &budget, &mut batch, next).await?;
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
                return Ok(());
            }
        }
    }

    /// Hands the batch (if any) to the appender once the in-flight budget
    /// allows; the next batch starts at `next`.
    async fn send(
        &self,
        tx: &mpsc::UnboundedSender<Batch>,
        budget: &Arc<Semaphore>,
        batch: &mut Batch,
        next: u64,
    ) -> Result<()> {
        if !batch.entries.is_empty() {
            let want = batch
                .bytes
                .clamp(1, self.opts.max_in_flight.min(Semaphore::MAX_PERMITS))
                as u32;
            let permit = budget.clone().acquire_many_owned(want).await.ok();
            let mut b = std::mem::replace(
                batch,
                Batch {
                    first: next,
                    entries: Vec::new(),
                    crcs: Vec::new(),
                    bytes: 0,
                    _permit: None,
                },
            );
            b._permit = permit;
            if tx.send(b).is_err() {
                // The appender stopped: its error is reported by the round.
                return Ok(());
            }
        } else {
            batch.first = next;
        }
        Ok(())
    }
}

fn mmapkit_max_entry() -> usize {
    // Larger than any entry the log accepts (its own limit is checked on append).
    1 << 31
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

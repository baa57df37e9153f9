//! Range reads and watches, the etcd way.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /kv/range?prefix=P` or `?start=A&end=B` | linearizable read of the keys with prefix `P`, or in `[A, B)` (`end` absent: no end), in key order, at most `limit` (default 1000, at most 10 000): a [`RangeAnswer`]; pass its `next` as `start` (same `end`) for the next page; `stale=true` reads this node's state unchecked |
//! | `GET /kv/watch?prefix=P&from=R` (or `start`/`end`) | the changes of revision `R` or later to those keys, long-polled up to `timeout_ms` (default 30 000, at most 60 000) while there are none: a [`WatchAnswer`]; ask again from its `next` to miss and repeat nothing, across disconnects and nodes; `410` with a [`CompactedAnswer`] when `R` is older than the node holds (after a restart or a snapshot install, or past the last 100 000 changes or 32 MiB of keys and values): read the range again and watch from its `revision + 1` |
//! | `GET /kv/backup` | every key, value and `mod_revision`, from one consistent, linearizable cut (one read transaction): the [`backup`] format (NDJSON: a header with the revision, a line per key, an end line with the count; a cut-short answer lacks the end line), streamed in chunks of [`backup::CHUNK`] from a bounded channel, so memory stays the same whatever the state's size; a follower relays the leader's stream chunk by chunk |
//!
//! A revision is the raft log index of the entry that made a write (every
//! node applies the same entries at the same indexes, so revisions agree
//! across nodes); `POST /kv/write` answers with it (`log_id.index`), and
//! reads give each key's `mod_revision`. Delete a range with
//! `{"DeleteRange":{"start":A,"end":B}}` (`end` `null`: no end). Unknown
//! parameters are a `400`.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use super::{
    read_barrier, read_barrier_relaying, storage_failed, text, App, ClientError, KvClient, Relay,
};
use crate::backup;
use crate::kv::{BackupCut, KeyValue};
use crate::watch::{Compacted, Event};

/// Keys per range page by default, and at most.
pub const RANGE_DEFAULT: usize = 1_000;
/// See [`RANGE_DEFAULT`].
pub const RANGE_MAX: usize = 10_000;
/// Changes per watch answer (about: whole revisions).
pub const WATCH_MAX: usize = 1_000;
/// A watch waits this long for a change by default, and at most 60 s.
pub const WATCH_DEFAULT: Duration = Duration::from_secs(30);

/// What `GET /kv/range` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RangeAnswer {
    /// The keys, in order.
    pub kvs: Vec<KeyValue>,
    /// Where the next page starts (`None`: this is the last).
    pub next: Option<String>,
    /// The revision the read is at (the last applied index).
    pub revision: u64,
}

/// What `GET /kv/watch` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WatchAnswer {
    /// The changes, in revision order (empty: none before the timeout).
    pub events: Vec<Event>,
    /// The `from` of the next watch.
    pub next: u64,
}

/// The `410` body of a watch from a revision no longer held.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CompactedAnswer {
    /// Always `"compacted"`.
    pub error: String,
    /// The oldest revision the node holds.
    pub oldest: u64,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RangeQuery {
    prefix: Option<String>,
    start: Option<String>,
    end: Option<String>,
    limit: Option<usize>,
    #[serde(default)]
    stale: bool,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WatchQuery {
    prefix: Option<String>,
    start: Option<String>,
    end: Option<String>,
    from: u64,
    timeout_ms: Option<u64>,
}

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/kv/range", get(range))
        .route("/kv/watch", get(watch))
        .route("/kv/backup", get(backup))
}

/// The first string after every string with prefix `p` (`None`: none).
pub fn prefix_end(p: &str) -> Option<String> {
    let mut chars: Vec<char> = p.chars().collect();
    while let Some(c) = chars.pop() {
        let next = (c as u32 + 1..=char::MAX as u32).find_map(char::from_u32);
        if let Some(n) = next {
            chars.push(n);
            return Some(chars.into_iter().collect());
        }
    }
    None
}

/// `[start, end)` from `prefix` or `start`/`end`.
fn bounds(
    prefix: Option<String>,
    start: Option<String>,
    end: Option<String>,
) -> Result<(String, Option<String>), &'static str> {
    match (prefix, start, end) {
        (Some(p), None, None) => {
            let e = prefix_end(&p);
            Ok((p, e))
        }
        (None, Some(s), e) => Ok((s, e)),
        (Some(_), _, _) => Err("give prefix, or start (and end), not both"),
        (None, None, _) => Err("give prefix=P, or start=A (and end=B)"),
    }
}

fn in_range(start: &str, end: Option<&str>, k: &str) -> bool {
    k >= start && end.is_none_or(|e| k < e)
}

async fn range(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<RangeQuery>,
) -> HttpResponse {
    let limit = q.limit.unwrap_or(RANGE_DEFAULT);
    if limit == 0 || limit > RANGE_MAX {
        return text(StatusCode::BAD_REQUEST, format!("limit must be from 1 to {RANGE_MAX}"));
    }
    let mut query: Vec<(&str, String)> = vec![("limit", limit.to_string())];
    for (name, v) in [("prefix", &q.prefix), ("start", &q.start), ("end", &q.end)] {
        if let Some(v) = v {
            query.push((name, v.clone()));
        }
    }
    let (start, end) = match bounds(q.prefix, q.start, q.end) {
        Ok(b) => b,
        Err(why) => return text(StatusCode::BAD_REQUEST, why.into()),
    };
    if !q.stale {
        if let Some(r) = read_barrier(&app, &headers, "/kv/range", &query).await {
            return r;
        }
    }
    match app.sm.range(&start, end.as_deref(), limit) {
        Ok((kvs, next, revision)) => Json(RangeAnswer { kvs, next, revision }).into_response(),
        Err(e) => storage_failed(e),
    }
}

/// `GET /kv/backup` takes no parameters (any is a 400).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct BackupQuery {}

async fn backup(
    State(app): State<App>,
    headers: HeaderMap,
    Query(BackupQuery {}): Query<BackupQuery>,
) -> HttpResponse {
    if let Some(r) = read_barrier_relaying(&app, &headers, "/kv/backup", &[], Relay::Stream).await {
        return r;
    }
    // One read transaction, opened after the barrier: every key as of one
    // revision at least as new as any write completed before the read.
    let cut = match app.sm.backup_cut() {
        Ok(c) => c,
        Err(e) => return storage_failed(e),
    };
    backup_body(cut, app.backups.clone(), backup::STALL)
}

/// One chunk of a backup's body, or the error that breaks it.
type Chunk = Result<Bytes, std::io::Error>;

/// Streams `cut` as the backup format: a blocking thread writes chunks of
/// [`backup::CHUNK`] bytes into a channel of [`backup::CHUNKS`], which the
/// connection drains; the thread waits while the channel is full, and
/// stops (dropping the read transaction) once the connection is gone, or
/// has taken nothing for `stall` ([`backup::STALL`]; a watchdog task then drops the
/// channel's receiving end: no timer runs on the blocking thread, which a
/// runtime shutting down could not serve); `stats` counts its chunks and
/// whether it runs. A body that ends before the end line ends in an error,
/// never cleanly.
fn backup_body(cut: BackupCut, stats: Arc<backup::BackupStats>, stall: Duration) -> HttpResponse {
    use std::sync::atomic::AtomicBool;
    let (tx, rx) = tokio::sync::mpsc::channel::<Chunk>(backup::CHUNKS);
    // The end line was handed over; the producer is gone; chunks taken.
    let finished = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let taken = Arc::new(AtomicU64::new(0));
    stats.running.fetch_add(1, Ordering::SeqCst);
    let (fin, gone) = (finished.clone(), done.clone());
    tokio::task::spawn_blocking(move || {
        struct Running(Arc<backup::BackupStats>, Arc<AtomicBool>);
        impl Drop for Running {
            fn drop(&mut self) {
                self.1.store(true, Ordering::SeqCst);
                self.0.running.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let running = Running(stats, gone);
        let wrote = cut.write(backup::CHUNK, |b| {
            running.0.chunks.fetch_add(1, Ordering::SeqCst);
            tx.blocking_send(Ok(Bytes::from(b))).is_ok()
        });
        match wrote {
            Ok(Some(_)) => fin.store(true, Ordering::SeqCst),
            Ok(None) => {}
            Err(e) => {
                let why = format!("state machine read failed: {e}");
                let _ = tx.blocking_send(Err(std::io::Error::other(why)));
            }
        }
        // The read transaction (consumed by `write`) is gone before the
        // backup counts as ended.
        drop(running);
    });
    let slot = Arc::new(tokio::sync::Mutex::new(Some(rx)));
    // Weak: a body dropped (the connection gone) drops the receiver at once.
    tokio::spawn(watchdog(Arc::downgrade(&slot), taken.clone(), done, stall));
    let chunks = futures_util::stream::unfold(Some(slot), move |slot| {
        let (finished, taken) = (finished.clone(), taken.clone());
        async move {
            let slot = slot?;
            let mut rx = slot.lock().await;
            let got = match rx.as_mut() {
                Some(rx) => rx.recv().await,
                None => {
                    let why = format!("the reader took nothing for {stall:?}");
                    Some(Err(std::io::Error::other(why)))
                }
            };
            drop(rx);
            match got {
                Some(Ok(b)) => {
                    taken.fetch_add(1, Ordering::SeqCst);
                    Some((Ok(b), Some(slot)))
                }
                Some(Err(e)) => Some((Err(e), None)),
                None if finished.load(Ordering::SeqCst) => None,
                None => Some((Err(std::io::Error::other("the backup ended early")), None)),
            }
        }
    });
    let mut r = Body::from_stream(chunks).into_response();
    r.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/x-ndjson"));
    r
}

/// Drops a backup's channel (which stops its producer) once its reader
/// took no chunk for a whole `stall` while not waiting on the producer;
/// ends with the producer.
async fn watchdog(
    slot: std::sync::Weak<tokio::sync::Mutex<Option<tokio::sync::mpsc::Receiver<Chunk>>>>,
    taken: Arc<AtomicU64>,
    done: Arc<std::sync::atomic::AtomicBool>,
    stall: Duration,
) {
    let mut seen = taken.load(Ordering::SeqCst);
    loop {
        tokio::time::sleep(stall).await;
        let Some(slot) = slot.upgrade().filter(|_| !done.load(Ordering::SeqCst)) else {
            return;
        };
        let now = taken.load(Ordering::SeqCst);
        // Locked: the reader waits on the producer (slow, not stalled).
        if now == seen {
            if let Ok(mut rx) = slot.try_lock() {
                rx.take();
                return;
            }
        }
        seen = now;
    }
}

async fn watch(State(app): State<App>, Query(q): Query<WatchQuery>) -> HttpResponse {
    let wait = q.timeout_ms.map_or(WATCH_DEFAULT, Duration::from_millis);
    if wait > Duration::from_secs(60) {
        return text(StatusCode::BAD_REQUEST, "timeout_ms must be at most 60000".into());
    }
    let (start, end) = match bounds(q.prefix, q.start, q.end) {
        Ok(b) => b,
        Err(why) => return text(StatusCode::BAD_REQUEST, why.into()),
    };
    let deadline = tokio::time::Instant::now() + wait;
    let mut applied = app.sm.applied_index();
    let mut from = q.from;
    loop {
        match app.sm.changes(from, |k| in_range(&start, end.as_deref(), k), WATCH_MAX) {
            Err(Compacted { oldest }) => {
                let body = CompactedAnswer { error: "compacted".into(), oldest };
                return (StatusCode::GONE, Json(body)).into_response();
            }
            Ok((events, next)) => {
                if !events.is_empty() || tokio::time::Instant::now() >= deadline {
                    return Json(WatchAnswer { events, next }).into_response();
                }
                from = next;
            }
        }
        match tokio::time::timeout_at(deadline, applied.changed()).await {
            Ok(Ok(())) | Err(_) => {}
            // The node is stopping.
            Ok(Err(_)) => {
                return Json(WatchAnswer { events: Vec::new(), next: from }).into_response()
            }
        }
    }
}

impl KvClient {
    /// A linearizable read of the keys in `[start, end)` (`end` `None`: no
    /// end), at most `limit`, through any node; retried for `patience`.
    pub async fn range(
        &self,
        start: &str,
        end: Option<&str>,
        limit: usize,
        patience: Duration,
    ) -> Result<RangeAnswer, ClientError> {
        let mut q = vec![("start", start.to_owned()), ("limit", limit.to_string())];
        if let Some(e) = end {
            q.push(("end", e.to_owned()));
        }
        let body = self.admin(reqwest::Method::GET, "/kv/range", &q, None, patience).await?;
        serde_json::from_str(&body).map_err(|e| ClientError::Http(format!("range: {e}")))
    }

    /// Every key, from one consistent, linearizable cut (`GET /kv/backup`),
    /// gathered in memory (a state larger than memory: [`Self::backup_to`]).
    pub async fn backup(&self, patience: Duration) -> Result<RangeAnswer, ClientError> {
        let mut kvs = Vec::new();
        let s = self.backup_each(patience, |_| Ok(()), |kv| kvs.push(kv)).await?;
        Ok(RangeAnswer { kvs, next: None, revision: s.revision })
    }

    /// Writes the backup (the [`backup`] format, as the server sends it) to
    /// `out` as it arrives, holding one chunk and one line at a time; the
    /// node is retried for `patience` until it starts answering. An answer
    /// cut short (no end line matching its keys) is an error: then what
    /// `out` received is no backup.
    pub async fn backup_to(
        &self,
        out: &mut impl std::io::Write,
        patience: Duration,
    ) -> Result<backup::Summary, ClientError> {
        self.backup_each(patience, |chunk| out.write_all(chunk), |_| {}).await
    }

    async fn backup_each(
        &self,
        patience: Duration,
        mut chunk: impl FnMut(&[u8]) -> std::io::Result<()>,
        mut key: impl FnMut(KeyValue),
    ) -> Result<backup::Summary, ClientError> {
        let bad = |e: String| ClientError::Http(format!("backup: {e}"));
        let mut resp =
            self.admin_response(reqwest::Method::GET, "/kv/backup", &[], patience).await?;
        let (mut reader, mut lines) = (backup::BackupReader::new(), backup::Lines::new());
        loop {
            let next = tokio::time::timeout(backup::STALL, resp.chunk()).await;
            let b = match next {
                Err(_) => return Err(bad(format!("nothing arrived for {:?}", backup::STALL))),
                Ok(Err(e)) => return Err(bad(format!("the answer broke: {e}"))),
                Ok(Ok(None)) => break,
                Ok(Ok(Some(b))) => b,
            };
            lines
                .feed(&b, |l| {
                    key_of(reader.line(l)?, &mut key);
                    Ok(())
                })
                .map_err(bad)?;
            chunk(&b).map_err(|e| bad(format!("writing it: {e}")))?;
        }
        if lines.pending() {
            return Err(bad("cut short inside a line".into()));
        }
        reader.finish().map_err(bad)
    }

    /// One long poll of the node at `addr` for changes to keys with
    /// `prefix` from revision `from`: `Ok(Err(_))` when `from` was
    /// compacted away there.
    pub async fn watch(
        &self,
        addr: &str,
        prefix: &str,
        from: u64,
        timeout: Duration,
    ) -> Result<Result<WatchAnswer, CompactedAnswer>, ClientError> {
        let q = [
            ("prefix", prefix.to_owned()),
            ("from", from.to_string()),
            ("timeout_ms", timeout.as_millis().to_string()),
        ];
        let r = self
            .request(reqwest::Method::GET, format!("http://{addr}/kv/watch"))
            .query(&q)
            .timeout(timeout + Duration::from_secs(10))
            .send()
            .await
            .map_err(|e| ClientError::Http(e.to_string()))?;
        let status = r.status();
        let body = r.text().await.map_err(|e| ClientError::Http(e.to_string()))?;
        let bad = |e: serde_json::Error| ClientError::Http(format!("watch: {e}: {body}"));
        match status {
            StatusCode::OK => Ok(Ok(serde_json::from_str(&body).map_err(bad)?)),
            StatusCode::GONE => Ok(Err(serde_json::from_str(&body).map_err(bad)?)),
            s => Err(ClientError::Rejected(s.as_u16(), body.trim().to_owned())),
        }
    }
}

fn key_of(kv: Option<KeyValue>, key: &mut impl FnMut(KeyValue)) {
    if let Some(kv) = kv {
        key(kv);
    }
}

#[cfg(test)]
mod tests;

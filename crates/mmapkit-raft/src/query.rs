//! Range reads and watches, the etcd way.
//!
//! | route | what |
//! | --- | --- |
//! | `GET /kv/range?prefix=P` or `?start=A&end=B` | linearizable read of the keys with prefix `P`, or in `[A, B)` (`end` absent: no end), in key order, at most `limit` (default 1000, at most 10 000): a [`RangeAnswer`]; pass its `next` as `start` (same `end`) for the next page; `stale=true` reads this node's state unchecked |
//! | `GET /kv/watch?prefix=P&from=R` (or `start`/`end`) | the changes of revision `R` or later to those keys, long-polled up to `timeout_ms` (default 30 000, at most 60 000) while there are none: a [`WatchAnswer`]; ask again from its `next` to miss and repeat nothing, across disconnects and nodes; `410` with a [`CompactedAnswer`] when `R` is older than the node holds (after a restart or a snapshot install, or past the last 100 000 changes or 32 MiB of keys and values): read the range again and watch from its `revision + 1` |
//!
//! | `GET /kv/backup` | every key, value and `mod_revision`, from one consistent, linearizable cut: a [`RangeAnswer`] (`next` is `null`); held in memory whole (use `/kv/range` pages for a state larger than memory) |
//!
//! A revision is the raft log index of the entry that made a write (every
//! node applies the same entries at the same indexes, so revisions agree
//! across nodes); `POST /kv/write` answers with it (`log_id.index`), and
//! reads give each key's `mod_revision`. Delete a range with
//! `{"DeleteRange":{"start":A,"end":B}}` (`end` `null`: no end). Unknown
//! parameters are a `400`.

use std::time::Duration;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::get;
use axum::{Json, Router};
use serde::{Deserialize, Serialize};

use crate::kv::KeyValue;
use crate::node::{read_barrier, storage_failed, text, App, ClientError, KvClient};
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

async fn backup(State(app): State<App>, headers: HeaderMap) -> HttpResponse {
    if let Some(r) = read_barrier(&app, &headers, "/kv/backup", &[]).await {
        return r;
    }
    // One read transaction: every key as of one revision.
    match app.sm.range("", None, usize::MAX) {
        Ok((kvs, next, revision)) => Json(RangeAnswer { kvs, next, revision }).into_response(),
        Err(e) => storage_failed(e),
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

    /// Every key, from one consistent, linearizable cut (`GET /kv/backup`).
    pub async fn backup(&self, patience: Duration) -> Result<RangeAnswer, ClientError> {
        let body = self.admin(reqwest::Method::GET, "/kv/backup", &[], None, patience).await?;
        serde_json::from_str(&body).map_err(|e| ClientError::Http(format!("backup: {e}")))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_end_is_the_first_string_past_the_prefix() {
        assert_eq!(prefix_end("a/").as_deref(), Some("a0"));
        assert_eq!(prefix_end("ab").as_deref(), Some("ac"));
        assert_eq!(prefix_end(""), None);
        assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
        assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"), "surrogates skipped");
        for k in ["a/", "a/x", "a/\u{10FFFF}\u{10FFFF}"] {
            assert!(in_range("a/", prefix_end("a/").as_deref(), k), "{k:?}");
        }
        assert!(!in_range("a/", prefix_end("a/").as_deref(), "a0"));
    }
}

//! `/v1/entries`: a page of entries as frames, checked against the entry
//! before it in the same read, streamed in chunks that borrow the mapping.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use mmapkit::log::Entries;
use tokio::sync::OwnedSemaphorePermit;

use super::routes::{out_of_range, parse_since, read_failed};
use super::Shared;
use crate::http::{self, text};
use crate::wire;

#[derive(Default)]
struct PageQuery {
    from: Option<u64>,
    max_count: Option<u64>,
    max_bytes: Option<u64>,
    prev_term: Option<u64>,
    prev_crc: Option<u64>,
    wait_ms: Option<u64>,
}

fn parse_query(q: Option<&str>) -> std::result::Result<PageQuery, String> {
    let mut p = PageQuery::default();
    for kv in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        let (k, v) = kv.split_once('=').unwrap_or((kv, ""));
        let slot = match k {
            "from" => &mut p.from,
            "max_count" => &mut p.max_count,
            "max_bytes" => &mut p.max_bytes,
            "prev_term" => &mut p.prev_term,
            "prev_crc" => &mut p.prev_crc,
            "wait_ms" => &mut p.wait_ms,
            _ => {
                return Err(format!(
                "unknown parameter {k:?} (expected from, max_count, max_bytes, prev_term, prev_crc, wait_ms)"
            ))
            }
        };
        let n: u64 = v.parse().map_err(|_| format!("{k}={v:?} is not a whole number"))?;
        if n == 0 && matches!(k, "from" | "max_count" | "max_bytes") {
            return Err(format!("{k} must be at least 1"));
        }
        if slot.is_some() {
            return Err(format!("{k} is given twice"));
        }
        *slot = Some(n);
    }
    if p.from.is_none() {
        return Err("missing from=INDEX".into());
    }
    Ok(p)
}

/// For the fuzz harness (`crates/mmapkit-fuzz`) only: what the handlers
/// make of a raw query string: `/v1/entries`'s parameters (from,
/// max_count, max_bytes, prev_term, prev_crc, wait_ms) and `/v1/state`'s
/// `since`.
#[doc(hidden)]
#[allow(clippy::type_complexity)]
pub fn fuzz_parse_queries(
    q: Option<&str>,
) -> (std::result::Result<[Option<u64>; 6], String>, std::result::Result<Option<u64>, String>) {
    let page = parse_query(q)
        .map(|p| [p.from, p.max_count, p.max_bytes, p.prev_term, p.prev_crc, p.wait_ms]);
    (page, parse_since(q))
}

/// A payload borrowed from the mapping, kept mapped by the read's entries.
struct Payload(Arc<Entries>, usize);

impl AsRef<[u8]> for Payload {
    fn as_ref(&self) -> &[u8] {
        self.0.get(self.1).map(|e| e.data()).unwrap_or(&[])
    }
}

/// Payloads at least this long are their own (borrowed) body chunk.
const BORROW_MIN: usize = 16 << 10;
/// Target size of a chunk of coalesced small entries: 256 KiB, a quarter
/// of the task hand-offs and socket writes of 64 KiB (their wake-ups were
/// the sending side's largest cost after the copies in a 4 KiB-entry
/// catch-up); one chunk is queued per page being sent.
const CHUNK: usize = 256 << 10;

struct Page {
    entries: Arc<Entries>,
    k: usize,
    pending: Option<Bytes>,
    _permit: OwnedSemaphorePermit,
}

fn next_chunk(p: &mut Page) -> Option<Bytes> {
    if let Some(b) = p.pending.take() {
        return Some(b);
    }
    if p.k >= p.entries.len() {
        return None;
    }
    let mut buf = BytesMut::with_capacity(CHUNK);
    while p.k < p.entries.len() && buf.len() < CHUNK {
        let e = p.entries.get(p.k).expect("in range");
        buf.extend_from_slice(&wire::header(e.index(), e.term(), e.data().len() as u32, e.crc()));
        if e.data().len() >= BORROW_MIN {
            p.pending = Some(Bytes::from_owner(Payload(p.entries.clone(), p.k)));
            p.k += 1;
            break;
        }
        buf.extend_from_slice(e.data());
        p.k += 1;
    }
    Some(buf.freeze())
}

pub(super) async fn entries(State(sh): State<Arc<Shared>>, RawQuery(q): RawQuery) -> Response {
    let q = match parse_query(q.as_deref()) {
        Ok(q) => q,
        Err(m) => return text(StatusCode::BAD_REQUEST, m),
    };
    let from = q.from.expect("checked");
    let max_count = q.max_count.unwrap_or(sh.opts.max_page_count).min(sh.opts.max_page_count);
    let max_bytes =
        q.max_bytes.unwrap_or(sh.opts.max_page_bytes as u64).min(sh.opts.max_page_bytes as u64)
            as usize;
    // Within what this server already knows a view refreshed a moment
    // ago will do (`view_max_age`); a page past it gets a current answer.
    let mut last = sh.log.last_index();
    let age = if from > last || from < sh.log.first_index() {
        Duration::ZERO
    } else {
        sh.opts.view_max_age
    };
    last = match sh.fresh_last(age).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let first = sh.log.first_index();
    if from < first || from > last + 1 {
        return out_of_range(from, first, last);
    }
    // A quick answer to a follower that no longer matches; the check that
    // counts is made again with the read (below).
    if (q.prev_term.is_some() || q.prev_crc.is_some()) && from > first {
        let log = sh.log.clone();
        let (pt, pc) = (q.prev_term, q.prev_crc);
        match tokio::task::spawn_blocking(move || log.get(from - 1).map(|e| (e.term(), e.crc())))
            .await
        {
            Ok(Ok((t, c))) if pt.is_none_or(|pt| pt == t) && pc.is_none_or(|pc| pc == c as u64) => {
            }
            Ok(Ok((t, c))) => {
                return text(
                    StatusCode::CONFLICT,
                    format!("log mismatch: entry {} has term {t} and CRC {c:#010x} here", from - 1),
                )
            }
            Ok(Err(e)) => return read_failed(&sh, from - 1, e),
            Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
        }
    }
    if from == last + 1 {
        let wait = Duration::from_millis(q.wait_ms.unwrap_or(0)).min(sh.opts.max_wait);
        if !wait.is_zero() {
            last = match sh.wait_for(from, wait).await {
                Ok(l) => l,
                Err(r) => return r,
            };
        }
    }
    let permit =
        match tokio::time::timeout(sh.opts.busy_timeout, sh.pages.clone().acquire_owned()).await {
            Ok(Ok(p)) => p,
            _ => {
                let mut r = text(
                    StatusCode::SERVICE_UNAVAILABLE,
                    format!("busy: {} pages are being sent; retry", sh.opts.max_concurrent_pages),
                );
                r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
                return r;
            }
        };
    let hi = if last >= from { last.min(from.saturating_add(max_count - 1)) + 1 } else { from };
    let log = sh.log.clone();
    let (pt, pc) = (q.prev_term, q.prev_crc);
    let read = tokio::task::spawn_blocking(move || {
        // The entries must follow the entry checked against prev_term and
        // prev_crc in one version of the log: a truncation after the check
        // above (a long poll waits in between) or during the read (which
        // may span refreshed views) would splice two versions into what
        // the follower appends, a log the leader never held, and its next
        // pages would chain on without a complaint. So the check is made
        // again here, and the answer is refused (503, retried after a
        // fresh look at the leader's state) if a truncation started, or
        // another log took the directory's place, between it and the read.
        // The entry before the page, in the same version: checked here when
        // the request names it, else named in the answer (a follower asks
        // for a page before the one ahead of it has arrived, and checks it).
        let mark = log.durable_mark();
        let before = log.identity();
        let prev = if from > log.first_index() {
            let e = log.get(from - 1)?;
            Some((e.term(), e.crc()))
        } else {
            None
        };
        if let Some((t, c)) = prev {
            if !(pt.is_none_or(|pt| pt == t) && pc.is_none_or(|pc| pc == c as u64)) {
                return Ok(Err((from - 1, t, c)));
            }
        }
        let got = if hi == from {
            // Nothing to read: tagged with what the view has completed.
            let tag = log.identity().completed;
            (Entries::default(), tag)
        } else {
            let e = log.read(from, hi, Some(max_bytes))?;
            let tag = e.epoch();
            (e, tag)
        };
        let after = log.identity();
        if after.id != before.id || after.epoch != before.epoch {
            return Err(mmapkit::Error::InvalidArgument(format!(
                "{}: the log was truncated or replaced while the page was read",
                log.dir().display()
            )));
        }
        Ok(Ok((got.0, got.1, after.id, prev, mark)))
    })
    .await;
    let (ents, tag, id, prev, mark) = match read {
        Ok(Ok(Ok(e))) => e,
        Ok(Ok(Err((i, t, c)))) => {
            return text(
                StatusCode::CONFLICT,
                format!("log mismatch: entry {i} has term {t} and CRC {c:#010x} here"),
            )
        }
        // Truncated or purged since the check above: 410/416; else 503.
        Ok(Err(e)) => return read_failed(&sh, from, e),
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    let count = ents.len();
    let len: usize = ents.iter().map(|e| wire::HEADER + e.data().len()).sum();
    let page = Page { entries: Arc::new(ents), k: 0, pending: None, _permit: permit };
    // A task produces the chunks into a one-chunk channel; a client that
    // takes nothing for stall_timeout makes it give up (dropping the
    // permit), and the body then ends short of its Content-Length, which
    // aborts the connection.
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(1);
    let stall = sh.opts.stall_timeout;
    tokio::spawn(async move {
        let mut page = page;
        while let Some(b) = next_chunk(&mut page) {
            if tx.send_timeout(b, stall).await.is_err() {
                return;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, std::convert::Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(stream));
    let h = r.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/octet-stream"));
    h.insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    h.insert(http::X_COUNT, HeaderValue::from(count));
    h.insert(http::X_LAST_INDEX, HeaderValue::from(sh.servable().max(last)));
    // What was durable when the page was read (entries up to it cannot be
    // lost by a power loss of this incarnation of the writer's), so a
    // follower of a server that serves unsynced entries knows which to
    // check after the writer reopens the log.
    if let Some(m) = mark {
        h.insert(http::X_DURABLE, HeaderValue::from(m.durable));
        h.insert(http::X_INCARNATION, HeaderValue::from(m.incarnation));
    }
    h.insert(http::X_FIRST_INDEX, HeaderValue::from(sh.log.first_index()));
    // The read's tag: a follower checks later that no truncation numbered
    // from it on cut what it got (see `mmapkit::log::Entries::epoch`).
    h.insert(http::X_EPOCH, HeaderValue::from(tag));
    if let Some((t, c)) = prev {
        h.insert(http::X_PREV_TERM, HeaderValue::from(t));
        h.insert(http::X_PREV_CRC, HeaderValue::from(c));
    }
    // The log the entries were read from (not whatever took its place since).
    if let Some(v) = id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        r.headers_mut().insert(http::X_LOG_ID, v);
    }
    r
}

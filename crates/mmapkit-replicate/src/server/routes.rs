//! `/v1/state` and `/v1/term/{index}`, and the error answers every
//! handler gives for a log that is changing or out of range.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path as UrlPath, RawQuery, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};

use super::Shared;
use crate::http::{self, text};
use crate::served::served_last;

/// A refresh that failed: the directory is gone or unreadable, or the
/// log is changing too fast to load; followers retry.
pub(super) fn log_err(e: mmapkit::Error) -> Response {
    let mut r =
        text(StatusCode::SERVICE_UNAVAILABLE, format!("the leader's log is not available: {e}"));
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Parses `since=EPOCH` (the only parameter of `/v1/state`).
pub(super) fn parse_since(q: Option<&str>) -> std::result::Result<Option<u64>, String> {
    let mut since = None;
    for kv in q.unwrap_or("").split('&').filter(|s| !s.is_empty()) {
        match kv.split_once('=') {
            Some(("since", _)) if since.is_some() => return Err("since is given twice".into()),
            Some(("since", v)) => {
                since = Some(
                    v.parse::<u64>().map_err(|_| format!("since={v:?} is not a whole number"))?,
                )
            }
            _ => return Err(format!("unknown parameter {kv:?} (expected since=EPOCH)")),
        }
    }
    Ok(since)
}

/// A log error while answering: out of range by a fresh view (truncated
/// or purged meanwhile) is 410/416; anything else 503, which followers
/// retry and never act on.
pub(super) fn read_failed(sh: &Shared, index: u64, e: mmapkit::Error) -> Response {
    if let Ok(st) = sh.log.status(None) {
        if index < st.first_index || index > st.last_index {
            return out_of_range(index, st.first_index, st.last_index);
        }
    }
    let mut r = text(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("reading entry {index} failed (the log may be changing; retry): {e}"),
    );
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

pub(super) async fn state(State(sh): State<Arc<Shared>>, RawQuery(q): RawQuery) -> Response {
    let since = match parse_since(q.as_deref()) {
        Ok(s) => s,
        Err(m) => return text(StatusCode::BAD_REQUEST, m),
    };
    if let Err(r) = sh.fresh_last(Duration::ZERO).await {
        return r;
    }
    let log = sh.log.clone();
    let unsynced = sh.opts.serve_unsynced;
    let got = tokio::task::spawn_blocking(move || {
        let mark = log.durable_mark();
        let mut st = log.status(since)?;
        let appended = st.last_index;
        st.last_index = served_last(st.first_index, appended, mark, unsynced);
        let last = if st.last_index >= st.first_index {
            let e = log.get(st.last_index)?;
            Some((e.term(), e.crc()))
        } else {
            None
        };
        Ok::<_, mmapkit::Error>((st, last, mark, appended))
    })
    .await;
    let (st, last, mark, appended) = match got {
        Ok(Ok(x)) => x,
        Ok(Err(e)) if e.kind() == mmapkit::ErrorKind::InvalidArgument && since.is_some() => {
            // An epoch past ours: the follower saw a later history.
            return text(StatusCode::CONFLICT, e.to_string());
        }
        Ok(Err(e)) => {
            let mut r =
                text(StatusCode::SERVICE_UNAVAILABLE, format!("the log changed; retry ({e})"));
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        Err(e) => return text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    };
    axum::Json(serde_json::json!({
        "log_id": st.identity.id.as_deref(),
        "epoch": st.identity.epoch,
        "completed": st.identity.completed,
        "cut_since": st.cut_since,
        "first_index": st.first_index,
        "last_index": st.last_index,
        "last_term": last.map(|l| l.0),
        "last_crc": last.map(|l| l.1),
        // last_index is the last entry served; this, the last appended.
        "appended_index": appended,
        "durable_index": mark.map(|m| m.durable),
        "incarnation": mark.map(|m| m.incarnation.to_string()),
        "serves_unsynced": unsynced,
    }))
    .into_response()
}

/// 410 / 416 for an index outside `first..=last`.
pub(super) fn out_of_range(index: u64, first: u64, last: u64) -> Response {
    let mut r = if index < first {
        text(
            StatusCode::GONE,
            format!("snapshot required: entry {index} was purged (the log starts at {first})"),
        )
    } else {
        text(
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("entry {index} is past the end of the log (last index {last})"),
        )
    };
    r.headers_mut().insert(http::X_FIRST_INDEX, HeaderValue::from(first));
    r.headers_mut().insert(http::X_LAST_INDEX, HeaderValue::from(last));
    r
}

pub(super) async fn term(State(sh): State<Arc<Shared>>, UrlPath(raw): UrlPath<String>) -> Response {
    let index: u64 = match raw.parse() {
        Ok(i) if i > 0 => i,
        _ => {
            return text(
                StatusCode::BAD_REQUEST,
                format!("bad index {raw:?}: expected a whole number from 1"),
            )
        }
    };
    let last = match sh.fresh_last(Duration::ZERO).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let first = sh.log.first_index();
    if index < first || index > last {
        return out_of_range(index, first, last);
    }
    let log = sh.log.clone();
    match tokio::task::spawn_blocking(move || log.get(index).map(|e| (e.term(), e.crc()))).await {
        Ok(Ok((t, crc))) => {
            let mut r = axum::Json(serde_json::json!({"index": index, "term": t, "crc": crc}))
                .into_response();
            sh.identify(&mut r);
            r
        }
        Ok(Err(e)) => read_failed(&sh, index, e),
        Err(e) => text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

//! The node's HTTP handlers: authentication, openraft's RPCs, writes
//! (forwarded to the leader), linearizable reads and what a node serves
//! of its own state.

use super::*;

pub(super) async fn auth(
    State(app): State<App>,
    req: axum::extract::Request,
    next: Next,
) -> HttpResponse {
    // The accept loop's check (scheme in any case, constant time).
    match http::refusal(req.headers(), app.token.as_deref()) {
        Some(refused) => refused,
        None => next.run(req).await,
    }
}

// Defined beside the proposer that produces it (the `batch` module sits
// below `node`).
pub use crate::batch::WriteResult;

/// Whether this node's membership knows `from` (or it has none yet: a
/// new member learns it from the leader), or `extra` (memberships the
/// RPC itself carries) does.
pub(super) fn knows<'a>(
    app: &App,
    from: NodeId,
    mut extra: impl Iterator<Item = &'a openraft::Membership<NodeId, Member>>,
) -> bool {
    let m = app.raft.metrics().borrow().membership_config.clone();
    let mut nodes = m.nodes().peekable();
    nodes.peek().is_none()
        || m.nodes().any(|(id, _)| *id == from)
        || extra.any(|m| m.get_node(&from).is_some())
}

pub(super) fn refused(why: String) -> HttpResponse {
    text(StatusCode::CONFLICT, format!("refused: {why}"))
}

pub(super) async fn append(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<AppendEntriesRequest<KvConfig>>,
) -> HttpResponse {
    use openraft::entry::RaftPayload;
    let carried = req.entries.iter().filter_map(|e| e.get_membership());
    if let Err(why) = app.identity.admit(&headers, |f| knows(&app, f, carried)) {
        return refused(why);
    }
    Json(app.raft.append_entries(req).await).into_response()
}

pub(super) async fn vote(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<VoteRequest<NodeId>>,
) -> HttpResponse {
    if let Err(why) = app.identity.admit(&headers, |f| knows(&app, f, std::iter::empty())) {
        return refused(why);
    }
    Json(app.raft.vote(req).await).into_response()
}

pub(super) async fn snapshot(
    State(app): State<App>,
    headers: HeaderMap,
    body: Bytes,
) -> HttpResponse {
    let binary = headers.get(header::CONTENT_TYPE).is_some_and(|v| v == crate::chunk::CONTENT_TYPE);
    let req: InstallSnapshotRequest<KvConfig> = if binary {
        match crate::chunk::decode(&body) {
            Ok(r) => r,
            Err(why) => return text(StatusCode::BAD_REQUEST, why),
        }
    } else {
        // A node from before the binary chunks sends JSON.
        match serde_json::from_slice(&body) {
            Ok(r) => r,
            Err(e) => return text(StatusCode::BAD_REQUEST, format!("a snapshot chunk: {e}")),
        }
    };
    let carried = std::iter::once(req.meta.last_membership.membership());
    if let Err(why) = app.identity.admit(&headers, |f| knows(&app, f, carried)) {
        return refused(why);
    }
    Json(app.raft.install_snapshot(req).await).into_response()
}

/// Why a leader cannot serve now, if it has not heard from a quorum
/// recently (openraft 0.9 keeps an isolated leader leading: its writes
/// would wait forever).
pub(super) fn quorum_problem(m: &RaftMetrics<NodeId, Member>) -> Option<String> {
    if m.membership_config.membership().voter_ids().count() <= 1 {
        return None;
    }
    match m.millis_since_quorum_ack {
        Some(ms) if ms <= QUORUM_STALE_MS => None,
        Some(ms) => {
            Some(format!("no quorum: leader {} last heard from a quorum {ms} ms ago", m.id))
        }
        None => Some(format!("no quorum: leader {} has not heard from a quorum yet", m.id)),
    }
}

/// The current leader's id and membership record as this node knows them.
pub(crate) fn leader_of(m: &RaftMetrics<NodeId, Member>) -> Option<(NodeId, Member)> {
    let l = m.current_leader?;
    let node = m.membership_config.membership().get_node(&l)?;
    Some((l, node.clone()))
}

pub(super) async fn write(State(app): State<App>, headers: HeaderMap, body: Body) -> HttpResponse {
    let limit = app.max_value_bytes.saturating_add(COMMAND_OVERHEAD);
    let too_large = |size: String| {
        text(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "value too large: the command is {size} bytes, the limit is {limit} bytes \
                 (--max-value-bytes {} plus {COMMAND_OVERHEAD} for key and JSON)",
                app.max_value_bytes
            ),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(n) = declared.filter(|&n| n > limit as u64) {
        return too_large(n.to_string());
    }
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(e) if mmapkit_replicate::conn::is_stalled(&e) => {
            return text(StatusCode::REQUEST_TIMEOUT, format!("not applied: {e}"))
        }
        // Over the limit without a Content-Length (or the body broke off).
        Err(_) => return too_large(format!("more than {limit}")),
    };
    let req: Request = match serde_json::from_slice(&bytes) {
        Ok(r) => r,
        Err(e) => return text(StatusCode::BAD_REQUEST, format!("bad request body: {e}")),
    };
    let forwarded = headers.contains_key(FORWARDED);
    let m = app.raft.metrics().borrow().clone();
    if m.current_leader != Some(app.id) && !forwarded {
        if let Some((l, node)) = leader_of(&m) {
            return forward_write(&app, l, &node, bytes).await;
        }
    }
    if m.current_leader == Some(app.id) {
        if let Some(why) = quorum_problem(&m) {
            return text(StatusCode::SERVICE_UNAVAILABLE, why);
        }
    }
    if matches!(req, Request::Batch(_)) {
        return text(
            StatusCode::BAD_REQUEST,
            "bad request body: one command per request (nodes batch concurrent writes themselves)"
                .into(),
        );
    }
    // Queued for the next proposal; answered with this command's own result.
    let r = match tokio::time::timeout(REQUEST_TIMEOUT, app.proposer.write(req, bytes.len())).await {
        Err(_) => {
            return text(
                StatusCode::GATEWAY_TIMEOUT,
                format!(
                    "outcome unknown: no quorum: the write was proposed by node {} but not committed within {:?}",
                    app.id, REQUEST_TIMEOUT
                ),
            )
        }
        Ok(Err(Lost)) => {
            return text(
                StatusCode::GATEWAY_TIMEOUT,
                format!("outcome unknown: node {} is stopping: {Lost}", app.id),
            )
        }
        Ok(Ok(r)) => r,
    };
    match r {
        // The entry may have been proposed before the node stopped.
        Err(RaftError::Fatal(f)) => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("outcome unknown: node {} is stopping: {f}", app.id),
        ),
        Err(e) if !forwarded => {
            // Leadership moved between the check and the write.
            match e.forward_to_leader().and_then(|f| Some((f.leader_id?, f.leader_node.clone()?))) {
                Some((l, node)) if l != app.id => forward_write(&app, l, &node, bytes).await,
                _ => write_refused(&app, e),
            }
        }
        Err(e) => write_refused(&app, e),
        Ok(r) => {
            Json(Ok::<_, RaftError<NodeId, ClientWriteError<NodeId, Member>>>(r)).into_response()
        }
    }
}

/// A write openraft refused: not applied when it was told to go to the
/// leader (no leader known here, or it moved: 503, retry); any other error
/// may come after the entry was appended (504, outcome unknown). Never a
/// 200, so a client cannot mistake it for an answer.
pub(super) fn write_refused(
    app: &App,
    e: RaftError<NodeId, ClientWriteError<NodeId, Member>>,
) -> HttpResponse {
    if e.forward_to_leader().is_some() {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no quorum: not applied: node {} is not the leader and knows no leader to forward to; retry", app.id),
        )
    } else {
        text(StatusCode::GATEWAY_TIMEOUT, format!("outcome unknown: node {}: {e}", app.id))
    }
}

/// Relays `resp` (status, content type, body); `broken` answers when its
/// body is lost.
pub(crate) async fn relay(
    resp: reqwest::Response,
    broken: impl FnOnce(String) -> HttpResponse,
) -> HttpResponse {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let ctype = resp.headers().get(header::CONTENT_TYPE).cloned();
    match resp.bytes().await {
        Ok(b) => {
            let mut r = (status, b).into_response();
            if let Some(c) = ctype {
                r.headers_mut().insert(header::CONTENT_TYPE, c);
            }
            r
        }
        Err(e) => broken(e.to_string()),
    }
}

pub(super) async fn forward_write(
    app: &App,
    leader: NodeId,
    node: &Member,
    body: axum::body::Bytes,
) -> HttpResponse {
    let addr = node.peer();
    let sent = app
        .http
        .post(format!("http://{addr}/kv/write"))
        .header(FORWARDED, app.id.to_string())
        .header(header::CONTENT_TYPE, "application/json")
        .body(body)
        .timeout(REQUEST_TIMEOUT + Duration::from_secs(2))
        .send()
        .await;
    let unknown = |e: String| {
        text(
            StatusCode::GATEWAY_TIMEOUT,
            format!(
                "outcome unknown: node {} forwarded the write to leader {leader} at {addr}: {e}",
                app.id
            ),
        )
    };
    match sent {
        Ok(resp) => {
            // Names the leader, so a client can send its next writes there
            // itself instead of paying this hop on every one (measured:
            // 16 clients, 3 nodes, ~24 % fewer writes/s through a follower).
            let mut r = relay(resp, unknown).await;
            if let Ok(v) = header::HeaderValue::from_str(&node.addr) {
                r.headers_mut().insert(LEADER_HINT, v);
            }
            r
        }
        // Nothing was sent: not applied.
        Err(e) if e.is_connect() => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "leader unreachable: node {} could not connect to leader {leader} at {addr}: {e}",
                app.id
            ),
        ),
        Err(e) => unknown(e.to_string()),
    }
}

/// `GET /kv/get` parameters (an unknown one, e.g. a `prefix` this
/// version does not have, is a 400, never silently ignored).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct GetQuery {
    key: String,
    #[serde(default)]
    stale: bool,
}

/// What `GET /kv/get` answers.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct GetAnswer {
    /// The key asked for.
    pub key: String,
    /// Its value (`None`: absent).
    pub value: Option<String>,
    /// The revision of its last write (`None`: absent).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mod_revision: Option<u64>,
}

pub(super) async fn kv_get(
    State(app): State<App>,
    headers: HeaderMap,
    Query(q): Query<GetQuery>,
) -> HttpResponse {
    if !q.stale {
        let query = [("key", q.key.clone())];
        if let Some(r) = read_barrier(&app, &headers, "/kv/get", &query).await {
            return r;
        }
    }
    let (value, mod_revision) = match app.sm.get_with_revision(&q.key) {
        Ok(Some((v, r))) => (Some(v), Some(r)),
        Ok(None) => (None, None),
        Err(e) => return storage_failed(e),
    };
    Json(GetAnswer { key: q.key, value, mod_revision }).into_response()
}

/// Makes a read linearizable: `None` once this node leads, confirmed its
/// leadership with a quorum and applied up to the read index (the read
/// then sees every write completed before it began); else the answer,
/// the leader's to the same read (`route` with `query`, forwarded once)
/// or a `503`.
pub(crate) async fn read_barrier(
    app: &App,
    headers: &HeaderMap,
    route: &str,
    query: &[(&str, String)],
) -> Option<HttpResponse> {
    read_barrier_relaying(app, headers, route, query, Relay::Whole).await
}

/// How a follower relays the leader's answer to a read.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub(crate) enum Relay {
    /// Read whole within [`REQUEST_TIMEOUT`] (a lost body: `503`).
    Whole,
    /// Streamed chunk by chunk as it arrives, however long it takes, while
    /// no more than [`crate::backup::STALL`] passes between chunks (then,
    /// or when the leader's body breaks, the relayed body breaks too).
    Stream,
}

/// [`read_barrier`], relaying a forwarded answer as `relay` says.
pub(crate) async fn read_barrier_relaying(
    app: &App,
    headers: &HeaderMap,
    route: &str,
    query: &[(&str, String)],
    relay: Relay,
) -> Option<HttpResponse> {
    let forwarded = headers.contains_key(FORWARDED);
    let unavailable = |why: String| Some(text(StatusCode::SERVICE_UNAVAILABLE, why));
    let m = app.raft.metrics().borrow().clone();
    if m.current_leader != Some(app.id) {
        return match leader_of(&m) {
            Some((l, node)) if !forwarded => {
                Some(forward_read(app, l, node.peer(), route, query, relay).await)
            }
            Some((l, _)) => {
                unavailable(format!("no quorum: node {} is not the leader (node {l} is)", app.id))
            }
            None => unavailable(format!("no quorum: node {} knows no leader", app.id)),
        };
    }
    if let Some(why) = quorum_problem(&m) {
        return unavailable(why);
    }
    match tokio::time::timeout(REQUEST_TIMEOUT, app.raft.ensure_linearizable()).await {
        Err(_) => unavailable(format!(
            "no quorum: leader {} could not confirm its leadership within {:?}",
            app.id, REQUEST_TIMEOUT
        )),
        Ok(Err(e)) => {
            match e.forward_to_leader().and_then(|f| Some((f.leader_id?, f.leader_node.clone()?))) {
                Some((l, node)) if l != app.id && !forwarded => {
                    Some(forward_read(app, l, node.peer(), route, query, relay).await)
                }
                _ => unavailable(format!("no quorum: {e}")),
            }
        }
        Ok(Ok(_)) => None,
    }
}

pub(super) async fn forward_read(
    app: &App,
    leader: NodeId,
    addr: &str,
    route: &str,
    query: &[(&str, String)],
    relay_as: Relay,
) -> HttpResponse {
    let unavailable = |e: String| {
        text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "no quorum: node {} could not read through leader {leader} at {addr}: {e}",
                app.id
            ),
        )
    };
    let req = app.http.get(format!("http://{addr}{route}")).query(query);
    let req = req.header(FORWARDED, app.id.to_string());
    let head = REQUEST_TIMEOUT + Duration::from_secs(2);
    if relay_as == Relay::Whole {
        return match req.timeout(head).send().await {
            Ok(resp) => relay(resp, unavailable).await,
            Err(e) => unavailable(e.to_string()),
        };
    }
    // The answer's head within the read's deadline; its body for as long as
    // it keeps coming (reqwest's `timeout` would end a long one).
    match tokio::time::timeout(head, req.send()).await {
        Err(_) => unavailable(format!("no answer within {head:?}")),
        Ok(Err(e)) => unavailable(e.to_string()),
        Ok(Ok(resp)) if !resp.status().is_success() => relay(resp, unavailable).await,
        Ok(Ok(resp)) => relay_stream(resp, crate::backup::STALL),
    }
}

/// Relays `resp` (status, content type) with its body streamed: each chunk
/// passed on as it arrives, so only the chunks in flight are held; a body
/// that breaks, or stalls for `stall`, breaks the relayed one (never a
/// clean end the reader could take for a complete answer).
pub(crate) fn relay_stream(resp: reqwest::Response, stall: Duration) -> HttpResponse {
    let status = StatusCode::from_u16(resp.status().as_u16()).unwrap_or(StatusCode::BAD_GATEWAY);
    let ctype = resp.headers().get(header::CONTENT_TYPE).cloned();
    let chunks = futures_util::stream::unfold(Some(resp), move |resp| async move {
        let mut resp = resp?;
        let next = match tokio::time::timeout(stall, resp.chunk()).await {
            Ok(Ok(Some(b))) => Ok(b),
            Ok(Ok(None)) => return None,
            Ok(Err(e)) => Err(std::io::Error::other(format!("the leader's answer broke: {e}"))),
            Err(_) => Err(std::io::Error::other(format!("the leader sent nothing for {stall:?}"))),
        };
        let keep = next.is_ok().then_some(resp);
        Some((next, keep))
    });
    let mut r = (status, Body::from_stream(chunks)).into_response();
    if let Some(c) = ctype {
        r.headers_mut().insert(header::CONTENT_TYPE, c);
    }
    r
}

/// A node's applied state (`GET /kv/state`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct KvState {
    /// The node's id.
    pub id: NodeId,
    /// The last log entry applied to `data` (`None`: none yet).
    pub last_applied: Option<LogId<NodeId>>,
    /// The page's keys and values.
    pub data: BTreeMap<String, String>,
    /// The `start` of the next page (`None`: this page is the last).
    #[serde(default)]
    pub next: Option<String>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct StateQuery {
    start: Option<String>,
    limit: Option<usize>,
}

pub(super) async fn kv_state(State(app): State<App>, Query(q): Query<StateQuery>) -> HttpResponse {
    use super::query::{RANGE_DEFAULT, RANGE_MAX};
    let limit = q.limit.unwrap_or(RANGE_DEFAULT);
    if limit == 0 || limit > RANGE_MAX {
        return text(StatusCode::BAD_REQUEST, format!("limit must be from 1 to {RANGE_MAX}"));
    }
    // Paged: an answer never holds more than one page of the state.
    let last_applied = app.sm.last_applied();
    match app.sm.range(q.start.as_deref().unwrap_or(""), None, limit) {
        Ok((kvs, next, _)) => {
            let data = kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
            Json(KvState { id: app.id, last_applied, data, next }).into_response()
        }
        Err(e) => storage_failed(e),
    }
}

/// The `500` of a read the state machine failed.
pub(crate) fn storage_failed(e: crate::Error) -> HttpResponse {
    text(StatusCode::INTERNAL_SERVER_ERROR, format!("state machine read failed: {e}"))
}

/// One page of a node's log (`GET /log/ids`): the purge point, the log
/// ids of entries from the page's start, and where the next page starts
/// (`None`: this page reaches the end of the log).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LogIds {
    /// The last purged entry's log id (`None`: nothing purged).
    pub purged: Option<LogId<NodeId>>,
    /// The page's entries' log ids, in index order.
    pub entries: Vec<LogId<NodeId>>,
    /// The index the next page starts at (`None`: this page is the last).
    #[serde(default)]
    pub next: Option<u64>,
}

/// Entries per `/log/ids` page by default.
pub const LOG_IDS_DEFAULT: usize = 1_000;
/// Entries per `/log/ids` page at most.
pub const LOG_IDS_MAX: usize = 10_000;

#[derive(Deserialize)]
pub(super) struct LogIdsQuery {
    #[serde(default)]
    from: u64,
    max: Option<usize>,
}

pub(super) async fn log_ids(
    State(app): State<App>,
    Query(q): Query<LogIdsQuery>,
) -> Result<Json<LogIds>, HttpResponse> {
    use openraft::storage::RaftLogReader;
    use openraft::RaftLogId;
    let Some(mut log) = app.log else {
        return Err(text(StatusCode::NOT_FOUND, "only the mmapkit store lists its log".into()));
    };
    let err =
        |e: openraft::StorageError<NodeId>| text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let max = q.max.unwrap_or(LOG_IDS_DEFAULT).clamp(1, LOG_IDS_MAX) as u64;
    let st = log.get_log_state().await.map_err(err)?;
    let end = st.last_log_id.map_or(0, |l| l.index + 1);
    let lo = q.from.max(st.last_purged_log_id.map_or(0, |p| p.index + 1));
    let hi = lo.saturating_add(max).min(end);
    // Bounded in bytes too (4 MiB of entries, at least one).
    let entries =
        if lo < hi { log.limited_get_log_entries(lo, hi).await.map_err(err)? } else { Vec::new() };
    let entries: Vec<_> = entries.iter().map(|e| *e.get_log_id()).collect();
    let next = entries.last().map(|l| l.index + 1).filter(|&n| n < end);
    Ok(Json(LogIds { purged: st.last_purged_log_id, entries, next }))
}

pub(super) async fn metrics(State(app): State<App>) -> Json<RaftMetrics<NodeId, Member>> {
    Json(app.raft.metrics().borrow().clone())
}

pub(super) async fn trigger_snapshot(State(app): State<App>) -> Json<bool> {
    Json(app.raft.trigger().snapshot().await.is_ok())
}

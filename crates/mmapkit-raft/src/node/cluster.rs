//! Cluster set-up and membership changes over HTTP, the etcd way, on
//! openraft's membership API: a new member joins as a learner, is promoted
//! to voter once it has caught up, and a lost disk is a `remove` of the old
//! member and an `add` of the new directory (see the `member` module for
//! why a wiped node cannot simply rejoin).
//!
//! | route | what |
//! | --- | --- |
//! | `GET /cluster/identity` | this directory's [`IdentityAnswer`]: id, incarnation, cluster, why it last refused a peer |
//! | `POST /cluster/init` | `{id: {"addr": "host:port"}}`: initialize the cluster (once, on one node); learns each node's incarnation from it; 409 on a node already in a cluster or a node of another cluster, 400 for a membership without this node or a node that is not who the map says |
//! | `GET /cluster/members` | the [`MemberList`] (from the leader when one is known) |
//! | `POST /cluster/members` | `{"id": N, "addr": "host:port"}`: add node N, running on an empty or never-joined directory, as a learner; 409 if N is already a member |
//! | `POST /cluster/members/{id}/promote` | make learner `id` a voter, once it has caught up (waits up to [`CHANGE_TIMEOUT`], then 409) |
//! | `DELETE /cluster/members/{id}` | remove voter or learner `id`; 409 for the last voter |
//!
//! Changes go through the leader (a follower forwards, like writes); each
//! answers once openraft committed it (`504` after [`CHANGE_TIMEOUT`]:
//! outcome unknown, `member list` tells).

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::error::{ClientWriteError, InitializeError, RaftError};
use openraft::ChangeMembers;
use serde::{Deserialize, Serialize};

use super::{leader_of, relay, text, App, ClientError, KvClient, FORWARDED, REQUEST_TIMEOUT};
use crate::kv::NodeId;
use crate::member::{new_cluster_id, IdentityAnswer, Member};

/// How long a membership change may take to commit before `504`.
pub const CHANGE_TIMEOUT: Duration = Duration::from_secs(30);

/// A learner this many entries or fewer behind the leader's last entry
/// may be promoted (etcd refuses a learner that is not in sync).
pub const PROMOTE_LAG: u64 = 1_000;

/// One member in `GET /cluster/members`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberInfo {
    /// Its node id.
    pub id: NodeId,
    /// Its address.
    pub addr: String,
    /// Its peer listener's address (`None`: peers use `addr`).
    #[serde(default)]
    pub peer_addr: Option<String>,
    /// Its data directory's incarnation.
    pub incarnation: u64,
    /// Voter (`true`) or learner.
    pub voter: bool,
    /// The last log index the leader knows it holds (`None`: nothing yet,
    /// or this answer is not the leader's).
    pub matched: Option<u64>,
}

/// What `GET /cluster/members` answers.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MemberList {
    /// The cluster id (`None`: this node has joined none).
    pub cluster: Option<String>,
    /// The node that answered.
    pub answered_by: NodeId,
    /// The leader (`None`: unknown).
    pub leader: Option<NodeId>,
    /// The answering node's last log index.
    pub last_log_index: Option<u64>,
    /// Voters first, then learners, each by id.
    pub members: Vec<MemberInfo>,
}

/// `POST /cluster/members` body.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddMember {
    /// The new member's `--id`.
    pub id: NodeId,
    /// The address peers and clients reach it at.
    pub addr: String,
}

/// `POST /cluster/init` body values (`{"addr": ...}`, as openraft's `BasicNode`).
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct InitNode {
    addr: String,
}

pub(crate) fn routes() -> Router<App> {
    Router::new()
        .route("/cluster/identity", get(identity))
        .route("/cluster/init", post(init))
        .route("/cluster/members", get(list).post(add))
        .route("/cluster/members/{id}", axum::routing::delete(remove))
        .route("/cluster/members/{id}/promote", post(promote))
}

async fn identity(State(app): State<App>) -> Json<IdentityAnswer> {
    Json(IdentityAnswer { peer_addr: app.peer_addr.clone(), ..app.identity.answer() })
}

/// Why a node cannot be made a member: the status and text to answer.
type Refusal = (StatusCode, String);

/// The identity of the node at `addr`, checked to be node `id`.
async fn identity_of(app: &App, id: NodeId, addr: &str) -> Result<IdentityAnswer, Refusal> {
    let unreachable = |e: String| {
        (StatusCode::SERVICE_UNAVAILABLE, format!("cannot ask node {id} at {addr} who it is: {e}"))
    };
    let r = app
        .http
        .get(format!("http://{addr}/cluster/identity"))
        .timeout(REQUEST_TIMEOUT)
        .send()
        .await
        .map_err(|e| unreachable(e.to_string()))?;
    if !r.status().is_success() {
        let s = r.status();
        return Err(unreachable(format!(
            "HTTP {s}: {}",
            r.text().await.unwrap_or_default().trim()
        )));
    }
    let a: IdentityAnswer = r.json().await.map_err(|e| unreachable(e.to_string()))?;
    if a.id != id {
        return Err((
            StatusCode::BAD_REQUEST,
            format!("the node at {addr} is node {}, not node {id}", a.id),
        ));
    }
    Ok(a)
}

/// 409 unless `a` belongs to no cluster or to `cluster`.
fn joinable(a: &IdentityAnswer, cluster: Option<&str>, addr: &str) -> Result<(), Refusal> {
    match (&a.cluster, cluster) {
        (Some(theirs), Some(ours)) if theirs != ours => Err((
            StatusCode::CONFLICT,
            format!(
                "node {} at {addr} belongs to cluster {theirs}, not to this cluster ({ours})",
                a.id
            ),
        )),
        (Some(theirs), None) => Err((
            StatusCode::CONFLICT,
            format!("node {} at {addr} already belongs to cluster {theirs}", a.id),
        )),
        _ => Ok(()),
    }
}

/// `POST /cluster/init`: 200 once initialized; the body is openraft's
/// result as JSON (409 `NotAllowed` on a node already in a cluster).
async fn init(
    State(app): State<App>,
    Json(nodes): Json<BTreeMap<NodeId, InitNode>>,
) -> HttpResponse {
    let mut members = BTreeMap::new();
    if !matches!(app.raft.is_initialized().await, Ok(true)) {
        if !nodes.contains_key(&app.id) {
            return text(
                StatusCode::BAD_REQUEST,
                format!("the membership must include this node ({})", app.id),
            );
        }
        let cluster = app.identity.cluster();
        for (&id, n) in &nodes {
            let (incarnation, peer_addr) = if id == app.id {
                (app.identity.incarnation(), app.peer_addr.clone())
            } else {
                let checked = match identity_of(&app, id, &n.addr).await {
                    Ok(a) => joinable(&a, cluster.as_deref(), &n.addr).map(|()| a),
                    Err(r) => Err(r),
                };
                let a = match checked {
                    Ok(a) => a,
                    Err((status, why)) => return text(status, why),
                };
                (a.incarnation, a.peer_addr)
            };
            members.insert(id, Member { addr: n.addr.clone(), incarnation, peer_addr });
        }
        let joined = match cluster {
            Some(c) => Ok(c),
            None => new_cluster_id().and_then(|c| app.identity.join(&c).map(|()| c)),
        };
        if let Err(e) = joined {
            return text(StatusCode::INTERNAL_SERVER_ERROR, e);
        }
    } else {
        members = nodes
            .into_iter()
            .map(|(id, n)| (id, Member { addr: n.addr, ..Member::default() }))
            .collect();
    }
    let r = app.raft.initialize(members).await;
    let status = match &r {
        Ok(()) => StatusCode::OK,
        Err(RaftError::APIError(InitializeError::NotAllowed(_))) => StatusCode::CONFLICT,
        Err(RaftError::APIError(InitializeError::NotInMembers(_))) => StatusCode::BAD_REQUEST,
        Err(RaftError::Fatal(_)) => StatusCode::SERVICE_UNAVAILABLE,
    };
    (status, Json(r)).into_response()
}

/// `None` on the leader (go on here); else the leader's answer to the
/// same request, forwarded once, or a 503.
async fn via_leader(
    app: &App,
    headers: &HeaderMap,
    method: Method,
    route: &str,
    body: Option<Vec<u8>>,
) -> Option<HttpResponse> {
    let m = app.raft.metrics().borrow().clone();
    if m.current_leader == Some(app.id) {
        return None;
    }
    let unavailable = |why: String| Some(text(StatusCode::SERVICE_UNAVAILABLE, why));
    let Some((l, node)) = leader_of(&m) else {
        return unavailable(format!("no quorum: node {} knows no leader; retry", app.id));
    };
    if headers.contains_key(FORWARDED) {
        return unavailable(format!("no quorum: node {} is not the leader (node {l} is)", app.id));
    }
    let addr = node.peer();
    let mut req = app
        .http
        .request(method, format!("http://{addr}{route}"))
        .header(FORWARDED, app.id.to_string())
        .timeout(CHANGE_TIMEOUT + Duration::from_secs(2));
    if let Some(b) = body {
        req = req.header("content-type", "application/json").body(b);
    }
    Some(match req.send().await {
        Ok(resp) => {
            relay(resp, |e| {
                text(
                    StatusCode::GATEWAY_TIMEOUT,
                    format!("outcome unknown: leader {l} at {addr}: {e}"),
                )
            })
            .await
        }
        Err(e) if e.is_connect() => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "leader unreachable: node {} could not connect to leader {l} at {addr}: {e}",
                app.id
            ),
        ),
        Err(e) => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("outcome unknown: node {} forwarded to leader {l} at {addr}: {e}", app.id),
        ),
    })
}

fn member_list(app: &App) -> MemberList {
    let m = app.raft.metrics().borrow().clone();
    let membership = m.membership_config.membership();
    let voters: BTreeSet<NodeId> = membership.voter_ids().collect();
    let matched = |id: &NodeId| {
        m.replication.as_ref().and_then(|r| r.get(id).copied().flatten()).map(|l| l.index)
    };
    let mut members: Vec<MemberInfo> = membership
        .nodes()
        .map(|(id, n)| MemberInfo {
            id: *id,
            addr: n.addr.clone(),
            peer_addr: n.peer_addr.clone(),
            incarnation: n.incarnation,
            voter: voters.contains(id),
            matched: matched(id),
        })
        .collect();
    members.sort_by_key(|i| (!i.voter, i.id));
    MemberList {
        cluster: app.identity.cluster(),
        answered_by: app.id,
        leader: m.current_leader,
        last_log_index: m.last_log_index,
        members,
    }
}

async fn list(State(app): State<App>, headers: HeaderMap) -> HttpResponse {
    let known = app.raft.metrics().borrow().current_leader.is_some();
    if known {
        if let Some(r) = via_leader(&app, &headers, Method::GET, "/cluster/members", None).await {
            // Unreachable leader: this node's own view is better than nothing.
            if r.status() != StatusCode::SERVICE_UNAVAILABLE {
                return r;
            }
        }
    }
    Json(member_list(&app)).into_response()
}

type ChangeResult = Result<
    openraft::raft::ClientWriteResponse<crate::kv::KvConfig>,
    RaftError<NodeId, ClientWriteError<NodeId, Member>>,
>;

/// Answers a membership change: 200 with openraft's response when
/// committed; 503 when this node stopped leading before it was proposed;
/// 504 when its outcome is unknown.
fn changed(app: &App, r: Result<ChangeResult, tokio::time::error::Elapsed>) -> HttpResponse {
    match r {
        Ok(Ok(resp)) => Json(Ok::<_, ()>(resp)).into_response(),
        Ok(Err(e)) if e.forward_to_leader().is_some() => text(
            StatusCode::SERVICE_UNAVAILABLE,
            format!("no quorum: node {} stopped leading; not applied; retry", app.id),
        ),
        Ok(Err(RaftError::APIError(e @ ClientWriteError::ChangeMembershipError(_)))) => {
            text(StatusCode::CONFLICT, format!("refused: {e}"))
        }
        Ok(Err(e)) => text(StatusCode::GATEWAY_TIMEOUT, format!("outcome unknown: {e}")),
        Err(_) => text(
            StatusCode::GATEWAY_TIMEOUT,
            format!("outcome unknown: the change did not commit within {CHANGE_TIMEOUT:?}"),
        ),
    }
}

async fn add(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<AddMember>,
) -> HttpResponse {
    let body = serde_json::to_vec(&req).unwrap_or_default();
    if let Some(r) = via_leader(&app, &headers, Method::POST, "/cluster/members", Some(body)).await
    {
        return r;
    }
    let list = member_list(&app);
    if let Some(m) = list.members.iter().find(|m| m.id == req.id) {
        let role = if m.voter { "voter" } else { "learner" };
        return text(
            StatusCode::CONFLICT,
            format!(
                "node {} is already a member ({role} at {}); to replace its disk, remove it first \
                 (a new directory is a new member)",
                req.id, m.addr
            ),
        );
    }
    let checked = match identity_of(&app, req.id, &req.addr).await {
        Ok(a) => joinable(&a, list.cluster.as_deref(), &req.addr).map(|()| a),
        Err(r) => Err(r),
    };
    let a = match checked {
        Ok(a) => a,
        Err((status, why)) => return text(status, why),
    };
    let member = Member { addr: req.addr, incarnation: a.incarnation, peer_addr: a.peer_addr };
    let r = tokio::time::timeout(CHANGE_TIMEOUT, app.raft.add_learner(req.id, member, false)).await;
    changed(&app, r)
}

async fn promote(
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<NodeId>,
) -> HttpResponse {
    let route = format!("/cluster/members/{id}/promote");
    if let Some(r) = via_leader(&app, &headers, Method::POST, &route, None).await {
        return r;
    }
    let list = member_list(&app);
    let Some(m) = list.members.iter().find(|m| m.id == id) else {
        return text(StatusCode::NOT_FOUND, format!("node {id} is not a member; add it first"));
    };
    if !m.voter {
        // Waits for it to catch up (a snapshot install may take a while).
        let deadline = tokio::time::Instant::now() + CHANGE_TIMEOUT;
        let mut m = m.clone();
        let mut last = list.last_log_index.unwrap_or(0);
        while behind(&m, last) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let list = member_list(&app);
            let Some(now) = list.members.into_iter().find(|m| m.id == id) else {
                return text(StatusCode::NOT_FOUND, format!("node {id} was removed meanwhile"));
            };
            (m, last) = (now, list.last_log_index.unwrap_or(0));
        }
        if behind(&m, last) {
            return text(
                StatusCode::CONFLICT,
                format!(
                    "learner {id} holds entries up to {} of the leader's {last} after {CHANGE_TIMEOUT:?}: \
                     not caught up (promotion needs it within {PROMOTE_LAG}); see `member list`, retry",
                    m.matched.map_or("none".into(), |i| i.to_string())
                ),
            );
        }
    }
    let change = ChangeMembers::AddVoterIds(BTreeSet::from([id]));
    let r = tokio::time::timeout(CHANGE_TIMEOUT, app.raft.change_membership(change, false)).await;
    changed(&app, r)
}

/// Whether learner `m` is too far behind the leader's `last` entry.
fn behind(m: &MemberInfo, last: u64) -> bool {
    match m.matched {
        None => last > 0,
        Some(i) => last.saturating_sub(i) > PROMOTE_LAG,
    }
}

async fn remove(
    State(app): State<App>,
    headers: HeaderMap,
    Path(id): Path<NodeId>,
) -> HttpResponse {
    let route = format!("/cluster/members/{id}");
    if let Some(r) = via_leader(&app, &headers, Method::DELETE, &route, None).await {
        return r;
    }
    let list = member_list(&app);
    let Some(m) = list.members.iter().find(|m| m.id == id) else {
        return text(StatusCode::NOT_FOUND, format!("node {id} is not a member"));
    };
    let change = if m.voter {
        if list.members.iter().filter(|m| m.voter).count() == 1 {
            return text(StatusCode::CONFLICT, format!("node {id} is the last voter"));
        }
        ChangeMembers::RemoveVoters(BTreeSet::from([id]))
    } else {
        ChangeMembers::RemoveNodes(BTreeSet::from([id]))
    };
    let r = tokio::time::timeout(CHANGE_TIMEOUT, app.raft.change_membership(change, false)).await;
    changed(&app, r)
}

impl KvClient {
    /// Sends a request through any node (each forwards to the leader),
    /// trying the next node while one is down or knows no leader, for up
    /// to `patience`; the answer's body.
    pub(crate) async fn admin(
        &self,
        method: reqwest::Method,
        route: &str,
        query: &[(&str, String)],
        body: Option<serde_json::Value>,
        patience: Duration,
    ) -> Result<String, ClientError> {
        let timeout = CHANGE_TIMEOUT + Duration::from_secs(5);
        let resp = self.admin_send(method, route, query, body, timeout, patience).await?;
        Ok(resp.text().await.unwrap_or_default().trim().to_owned())
    }

    /// [`Self::admin`]'s answer with its body unread (a streamed one):
    /// the head is awaited for the usual time, the body for as long as the
    /// caller reads it.
    pub(crate) async fn admin_response(
        &self,
        method: reqwest::Method,
        route: &str,
        query: &[(&str, String)],
        patience: Duration,
    ) -> Result<reqwest::Response, ClientError> {
        // reqwest's timeout covers the body too: a long one is bounded by
        // the caller's wait between chunks instead.
        let timeout = Duration::from_secs(365 * 24 * 3600);
        self.admin_send(method, route, query, None, timeout, patience).await
    }

    async fn admin_send(
        &self,
        method: reqwest::Method,
        route: &str,
        query: &[(&str, String)],
        body: Option<serde_json::Value>,
        timeout: Duration,
        patience: Duration,
    ) -> Result<reqwest::Response, ClientError> {
        let deadline = std::time::Instant::now() + patience;
        let mut last_err = String::new();
        let head = CHANGE_TIMEOUT + Duration::from_secs(5);
        while std::time::Instant::now() < deadline {
            let k = self.current();
            let mut req = self
                .request(method.clone(), format!("http://{}{route}", self.nodes[k]))
                .query(query)
                .timeout(timeout);
            if let Some(b) = &body {
                req = req.json(b);
            }
            let resp = match tokio::time::timeout(head, req.send()).await {
                Err(_) => return Err(ClientError::Unknown(format!("no answer within {head:?}"))),
                Ok(Ok(r)) => r,
                Ok(Err(e)) if e.is_connect() => {
                    last_err = e.to_string();
                    self.rotate(k);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
                Ok(Err(e)) => return Err(ClientError::Unknown(e.to_string())),
            };
            let status = resp.status();
            if status.is_success() {
                return Ok(resp);
            }
            let text = resp.text().await.unwrap_or_default().trim().to_owned();
            match status {
                StatusCode::SERVICE_UNAVAILABLE => {
                    last_err = text;
                    self.rotate(k);
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                StatusCode::UNAUTHORIZED => return Err(ClientError::Unauthorized(text)),
                s if s.is_client_error() => return Err(ClientError::Rejected(s.as_u16(), text)),
                s => return Err(ClientError::Unknown(format!("HTTP {s}: {text}"))),
            }
        }
        Err(ClientError::Timeout(patience, last_err))
    }

    /// The cluster's members (the leader's view when a leader is known).
    pub async fn members(&self, patience: Duration) -> Result<MemberList, ClientError> {
        let body =
            self.admin(reqwest::Method::GET, "/cluster/members", &[], None, patience).await?;
        serde_json::from_str(&body).map_err(|e| ClientError::Http(format!("member list: {e}")))
    }

    /// Adds node `id`, serving at `addr` on a new directory, as a learner.
    pub async fn member_add(
        &self,
        id: NodeId,
        addr: &str,
        patience: Duration,
    ) -> Result<(), ClientError> {
        let body = serde_json::json!({ "id": id, "addr": addr });
        self.admin(reqwest::Method::POST, "/cluster/members", &[], Some(body), patience)
            .await
            .map(drop)
    }

    /// Makes learner `id` a voter once it has caught up.
    pub async fn member_promote(&self, id: NodeId, patience: Duration) -> Result<(), ClientError> {
        let route = format!("/cluster/members/{id}/promote");
        self.admin(reqwest::Method::POST, &route, &[], None, patience).await.map(drop)
    }

    /// Removes member `id` (voter or learner).
    pub async fn member_remove(&self, id: NodeId, patience: Duration) -> Result<(), ClientError> {
        let route = format!("/cluster/members/{id}");
        self.admin(reqwest::Method::DELETE, &route, &[], None, patience).await.map(drop)
    }

    /// Who the node at `addr` is (`GET /cluster/identity`).
    pub async fn identity(&self, addr: &str) -> Result<IdentityAnswer, String> {
        self.get_json(addr, "cluster/identity").await
    }
}

//! Who a node is, the etcd way: a data directory records the cluster it
//! belongs to and an incarnation drawn when the directory was created, and
//! every raft RPC names both, so a node whose disk was wiped or replaced is
//! never taken for the member it was.
//!
//! Raft's safety rests on a voter never forgetting its vote and its log.
//! A node restarted on an empty directory under the same `--id` has
//! forgotten both; if it voted, a candidate missing acknowledged writes
//! could win (seen: 50 of 110 acknowledged writes lost). So:
//!
//! * `DIR/member` (written durably before the node serves) holds the
//!   incarnation and, once known, the cluster id. A new directory gets a
//!   random incarnation; a directory from before this file existed (it has
//!   a log but no `member`) is incarnation 0, as the cluster recorded it.
//! * The membership records each node's incarnation ([`Member`]), learned
//!   from the node itself (`GET /cluster/identity`) when it is added or
//!   the cluster is initialized.
//! * Every raft RPC carries the sender's cluster id and id and the
//!   incarnation the sender believes the target has ([`CLUSTER_HEADER`],
//!   [`FROM_HEADER`], [`TO_HEADER`]). A node refuses (`409`, and says why
//!   on stderr and in `/cluster/identity`) an RPC meant for another incarnation, another
//!   node or another cluster, and a vote or append from a node its
//!   membership does not know. A wiped node therefore takes no part until
//!   an operator removes the old member and adds the new directory.
//! * A directory of a cluster member whose `member` file survived but
//!   whose raft state did not is refused at start: its votes are gone.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use axum::http::HeaderMap;
use serde::{Deserialize, Serialize};

use crate::meta;

/// A node id.
pub type NodeId = u64;

/// A member of the cluster as its membership records it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    /// The address peers and clients use (`host:port`).
    pub addr: String,
    /// The incarnation of the member's data directory (see the module
    /// docs); 0 for members recorded before incarnations existed.
    #[serde(default)]
    pub incarnation: u64,
    /// Where peers send raft RPCs and forwarded requests, when the member
    /// has a peer listener of its own (`--peer-bind`); else `addr`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub peer_addr: Option<String>,
}

impl Member {
    /// The address other nodes use.
    pub fn peer(&self) -> &str {
        self.peer_addr.as_deref().unwrap_or(&self.addr)
    }
}

/// Sender's cluster id (32 hex digits; absent while the sender has none).
pub const CLUSTER_HEADER: &str = "x-mmapkit-cluster";
/// Sender's node id.
pub const FROM_HEADER: &str = "x-mmapkit-from";
/// `ID/INCARNATION` of the member the RPC is meant for.
pub const TO_HEADER: &str = "x-mmapkit-to";

/// What `GET /cluster/identity` answers: who this data directory is.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdentityAnswer {
    /// The node's `--id`.
    pub id: NodeId,
    /// Its directory's incarnation.
    pub incarnation: u64,
    /// The cluster it belongs to (`None`: none yet).
    pub cluster: Option<String>,
    /// Why it last refused a peer's RPC (`None`: never), e.g. because its
    /// directory is not the incarnation the cluster knows.
    pub refused: Option<String>,
    /// Its peer listener's address (`None`: peers use its client address).
    #[serde(default)]
    pub peer_addr: Option<String>,
}

#[derive(Serialize, Deserialize)]
struct Record {
    incarnation: u64,
    cluster: Option<String>,
}

/// A node's identity (see the module docs).
#[derive(Debug)]
pub(crate) struct Identity {
    id: NodeId,
    /// `DIR/member` (`None`: not persisted, a node without durable state).
    path: Option<PathBuf>,
    incarnation: u64,
    cluster: Mutex<Option<String>>,
    refused: Mutex<Option<String>>,
}

/// Random non-zero 64-bit incarnation.
fn draw_incarnation() -> Result<u64, String> {
    loop {
        let mut b = [0u8; 8];
        getrandom::fill(&mut b).map_err(|e| format!("drawing an incarnation: {e}"))?;
        let v = u64::from_le_bytes(b);
        if v != 0 {
            return Ok(v);
        }
    }
}

/// A new random cluster id (32 hex digits).
pub(crate) fn new_cluster_id() -> Result<String, String> {
    let mut b = [0u8; 16];
    getrandom::fill(&mut b).map_err(|e| format!("drawing a cluster id: {e}"))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

impl Identity {
    /// The identity of node `id` in `dir`, whose raft state lives in
    /// `state` (`None`: a store without durable state, which is a new
    /// incarnation on every start). Creates `DIR/member` for a new
    /// directory; refuses one whose state is gone.
    pub(crate) fn open(id: NodeId, dir: &Path, state: Option<&Path>) -> Result<Identity, String> {
        let Some(state) = state else {
            return Ok(Identity::new(id, None, draw_incarnation()?, None));
        };
        let path = dir.join("member");
        let shown = path.display();
        let had_state = state.exists();
        let record = match meta::read::<Record>(&path).map_err(|e| e.to_string())? {
            // A directory never part of a cluster has cast no vote: nothing lost.
            meta::Read::Valid(r) if had_state || r.cluster.is_none() => {
                return Ok(Identity::new(id, Some(path), r.incarnation, r.cluster))
            }
            meta::Read::Valid(r) => {
                return Err(format!(
                    "{shown} says this directory is incarnation {:016x} of node {id}{}, but its raft \
                     state ({}) is gone, and with it the node's votes: it must not rejoin as that \
                     member. Remove the member (mmapkit-kv member remove {id}), then start this node \
                     on an empty directory and add it anew (mmapkit-kv member add)",
                    r.incarnation,
                    r.cluster.map(|c| format!(" of cluster {c}")).unwrap_or_default(),
                    state.display()
                ))
            }
            meta::Read::Damaged(why) => {
                return Err(format!("{shown}: damaged ({why}): cannot tell which member this is"))
            }
            // From before `member` files: the cluster recorded it as 0.
            meta::Read::Missing if had_state => Record { incarnation: 0, cluster: None },
            meta::Read::Missing => Record { incarnation: draw_incarnation()?, cluster: None },
        };
        meta::write(&path, &record, true).map_err(|e| e.to_string())?;
        Ok(Identity::new(id, Some(path), record.incarnation, record.cluster))
    }

    fn new(id: NodeId, path: Option<PathBuf>, incarnation: u64, cluster: Option<String>) -> Self {
        Identity { id, path, incarnation, cluster: Mutex::new(cluster), refused: Mutex::new(None) }
    }

    pub(crate) fn incarnation(&self) -> u64 {
        self.incarnation
    }

    pub(crate) fn cluster(&self) -> Option<String> {
        self.cluster.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records (durably) that this node belongs to `cluster`; an error if
    /// it belongs to another.
    pub(crate) fn join(&self, cluster: &str) -> Result<(), String> {
        let mut c = self.cluster.lock().unwrap_or_else(|e| e.into_inner());
        match c.as_deref() {
            Some(have) if have == cluster => return Ok(()),
            Some(have) => {
                return Err(format!(
                    "node {} belongs to cluster {have}, not to cluster {cluster}",
                    self.id
                ))
            }
            None => {}
        }
        if let Some(p) = &self.path {
            let r = Record { incarnation: self.incarnation, cluster: Some(cluster.to_owned()) };
            meta::write(p, &r, true).map_err(|e| format!("{}: {e}", p.display()))?;
        }
        *c = Some(cluster.to_owned());
        Ok(())
    }

    pub(crate) fn answer(&self) -> IdentityAnswer {
        IdentityAnswer {
            id: self.id,
            incarnation: self.incarnation,
            cluster: self.cluster(),
            refused: self.refused.lock().unwrap_or_else(|e| e.into_inner()).clone(),
            peer_addr: None,
        }
    }

    /// The headers of an RPC from this node to `target` (`member` as this
    /// node's membership records it).
    pub(crate) fn rpc_headers(&self, target: NodeId, member: &Member) -> RpcHeaders {
        RpcHeaders {
            cluster: self.cluster(),
            from: self.id,
            to: format!("{target}/{:016x}", member.incarnation),
        }
    }

    /// Checks an incoming RPC's headers against this node's identity and
    /// joins the sender's cluster if this node has none yet. `known`:
    /// whether this node's membership (or the RPC's own entries) knows
    /// the sender. The error says why it is refused (also kept for
    /// `/cluster/identity` and printed once per distinct reason).
    pub(crate) fn admit(
        &self,
        headers: &HeaderMap,
        known: impl FnOnce(NodeId) -> bool,
    ) -> Result<(), String> {
        let r = self.check(headers, known);
        if let Err(why) = &r {
            let mut last = self.refused.lock().unwrap_or_else(|e| e.into_inner());
            if last.as_deref() != Some(why.as_str()) {
                eprintln!("mmapkit-kv: node {}: refused a raft RPC: {why}", self.id);
                *last = Some(why.clone());
            }
        }
        r
    }

    fn check(&self, headers: &HeaderMap, known: impl FnOnce(NodeId) -> bool) -> Result<(), String> {
        let get = |name: &str| headers.get(name).and_then(|v| v.to_str().ok());
        let to = get(TO_HEADER)
            .ok_or_else(|| format!("no {TO_HEADER} header (a peer of another version?)"))?;
        let bad_to = || format!("malformed {TO_HEADER} header {to:?} (expected ID/INCARNATION)");
        let (id, inc) = to.split_once('/').ok_or_else(bad_to)?;
        let id: NodeId = id.parse().map_err(|_| bad_to())?;
        let inc = u64::from_str_radix(inc, 16).map_err(|_| bad_to())?;
        let from: NodeId = get(FROM_HEADER)
            .and_then(|f| f.parse().ok())
            .ok_or_else(|| format!("no or a malformed {FROM_HEADER} header"))?;
        if id != self.id {
            return Err(format!("node {from} sent an RPC meant for node {id} to node {}", self.id));
        }
        if inc != self.incarnation {
            return Err(format!(
                "node {from}'s cluster knows node {id} as incarnation {inc:016x}, but this data \
                 directory is incarnation {:016x}: it was wiped or replaced and has lost that \
                 member's votes and log. Remove the member (mmapkit-kv member remove {id}) and add \
                 this node anew (mmapkit-kv member add {id} ADDR)",
                self.incarnation
            ));
        }
        let theirs = get(CLUSTER_HEADER);
        let ours = self.cluster();
        if let (Some(t), Some(o)) = (theirs, ours.as_deref()) {
            if t != o {
                return Err(format!("node {from} is of cluster {t}; this node is of cluster {o}"));
            }
        } else if theirs.is_none() && ours.is_some() {
            return Err(format!("node {from} sent no cluster id; this node is of a cluster"));
        }
        if !known(from) {
            return Err(format!(
                "node {from} is not a member this node knows (removed, or never added): its votes \
                 and appends are refused"
            ));
        }
        if let (Some(t), None) = (theirs, ours) {
            self.join(t)?;
        }
        Ok(())
    }
}

/// The identity headers of one raft RPC (see [`Identity::rpc_headers`]).
pub(crate) struct RpcHeaders {
    cluster: Option<String>,
    from: NodeId,
    to: String,
}

impl RpcHeaders {
    pub(crate) fn apply(self, r: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        let r = r.header(FROM_HEADER, self.from.to_string()).header(TO_HEADER, self.to);
        match self.cluster {
            Some(c) => r.header(CLUSTER_HEADER, c),
            None => r,
        }
    }
}

#[cfg(test)]
mod tests;

//! openraft's network over HTTP: the client side of the raft RPCs.

use super::*;

/// openraft's network over HTTP: one shared reqwest client (connection
/// pool; the token and the local address set).
#[derive(Clone)]
pub struct HttpNetwork {
    pub(super) http: reqwest::Client,
    pub(super) identity: Arc<Identity>,
}

/// A connection to one peer.
pub struct HttpPeer {
    http: reqwest::Client,
    identity: Arc<Identity>,
    target: NodeId,
    /// The target as this node's membership records it.
    member: Member,
    /// Serialized entry bytes per append now (see [`APPEND_BUDGET`]).
    budget: usize,
    /// An append call is running: still set when the next one starts if
    /// openraft dropped it at its timeout.
    in_flight: bool,
}

impl RaftNetworkFactory<KvConfig> for HttpNetwork {
    type Network = HttpPeer;
    async fn new_client(&mut self, target: NodeId, node: &Member) -> HttpPeer {
        HttpPeer {
            http: self.http.clone(),
            identity: self.identity.clone(),
            target,
            member: node.clone(),
            budget: APPEND_BUDGET,
            in_flight: false,
        }
    }
}

/// A peer answered with an HTTP error instead of openraft's JSON.
#[derive(Debug, thiserror::Error)]
#[error("{addr}/{route}: HTTP {status}: {body}")]
pub(super) struct PeerStatus {
    addr: String,
    route: String,
    status: u16,
    body: String,
}

pub(super) type RpcResult<T, E> = Result<T, RPCError<NodeId, Member, RaftError<NodeId, E>>>;

impl HttpPeer {
    async fn call<Resp, E>(
        &self,
        route: &str,
        content_type: &'static str,
        body: Vec<u8>,
        option: &RPCOption,
    ) -> RpcResult<Resp, E>
    where
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let url = format!("http://{}/{route}", self.member.peer());
        let post = self.http.post(url);
        let resp = self
            .identity
            .rpc_headers(self.target, &self.member)
            .apply(post)
            .header(header::CONTENT_TYPE, content_type)
            .body(body)
            .timeout(option.hard_ttl())
            .send()
            .await
            .map_err(|e| {
                if e.is_connect() {
                    RPCError::Unreachable(Unreachable::new(&e))
                } else {
                    RPCError::Network(NetworkError::new(&e))
                }
            })?;
        if !resp.status().is_success() {
            // E.g. 401 (token) or 413: say so rather than "error decoding".
            let status = resp.status().as_u16();
            let body = resp.text().await.unwrap_or_default();
            let e = PeerStatus {
                addr: self.member.peer().to_owned(),
                route: route.into(),
                status,
                body: body.trim().into(),
            };
            return Err(RPCError::Network(NetworkError::new(&e)));
        }
        let res: Result<Resp, RaftError<NodeId, E>> =
            resp.json().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

/// The content type of the JSON RPCs.
pub(super) const JSON: &str = "application/json";

pub(super) fn encode<T: Serialize>(req: &T) -> Result<Vec<u8>, NetworkError> {
    serde_json::to_vec(req).map_err(|e| NetworkError::new(&e))
}

impl RaftNetwork<KvConfig> for HttpPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KvConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        if self.in_flight {
            self.budget = (self.budget / 4).max(MIN_APPEND_BUDGET);
        }
        let n = rpc.entries.len();
        if n > 1 {
            // Entries that fit the budget, measured one by one (not the
            // whole batch: openraft may offer hundreds of large ones).
            let mut bytes = 0;
            for (k, e) in rpc.entries.iter().enumerate() {
                bytes += encode(e).map_err(RPCError::Network)?.len();
                if bytes > self.budget {
                    // openraft resends fewer entries at once.
                    let fit = k.max(1) as u64;
                    return Err(RPCError::PayloadTooLarge(PayloadTooLarge::new_entries_hint(fit)));
                }
            }
        }
        let body = encode(&rpc).map_err(RPCError::Network)?;
        self.in_flight = true;
        let r = self.call("raft/append", JSON, body, &option).await;
        self.in_flight = false;
        if r.is_ok() {
            self.budget = (self.budget * 2).min(APPEND_BUDGET);
        }
        r
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<KvConfig>,
        option: RPCOption,
    ) -> Result<
        InstallSnapshotResponse<NodeId>,
        RPCError<NodeId, Member, RaftError<NodeId, InstallSnapshotError>>,
    > {
        let ttl = if rpc.done {
            let bytes = rpc.offset + rpc.data.len() as u64;
            SNAPSHOT_CHUNK_TTL + Duration::from_secs(bytes / SNAPSHOT_INSTALL_BYTES_PER_S)
        } else {
            SNAPSHOT_CHUNK_TTL
        };
        let body =
            crate::chunk::encode(rpc).map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        let option = RPCOption::new(ttl.min(option.hard_ttl()));
        self.call("raft/snapshot", crate::chunk::CONTENT_TYPE, body, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, Member, RaftError<NodeId>>> {
        let body = encode(&rpc).map_err(RPCError::Network)?;
        self.call("raft/vote", JSON, body, &option).await
    }
}

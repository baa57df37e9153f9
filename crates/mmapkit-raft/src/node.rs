//! One node of the replicated key-value service: openraft with the KV
//! state machine, its network over HTTP (axum server, reqwest client, JSON
//! bodies), and a client that finds the leader.
//!
//! Endpoints (all JSON):
//!
//! | route | what |
//! | --- | --- |
//! | `POST /raft/append`, `/raft/vote`, `/raft/snapshot` | openraft's RPCs |
//! | `POST /cluster/init` | `{id: {"addr": "host:port"}}`: initialize the cluster (once, on one node) |
//! | `POST /kv/write` | a [`Request`]; answered by the leader once committed and applied |
//! | `GET /kv/state` | this node's applied map and last applied log id |
//! | `GET /log/ids` | this node's log: purge point and every entry's log id (mmapkit store only) |
//! | `GET /metrics` | openraft's metrics |
//! | `POST /admin/snapshot` | build a snapshot now |

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::State;
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::error::{
    ClientWriteError, InitializeError, InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError,
    Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteResponse, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
};
use openraft::storage::RaftLogStorage;
use openraft::{BasicNode, Config, LogId, Raft, RaftMetrics, SnapshotPolicy};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::kv::{KvConfig, KvStateMachine, NodeId, Request, Response};
use crate::{LogStore, StoreOptions};

/// Which log store a node runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StoreKind {
    /// mmapkit's commit log (durable: fdatasync before acknowledging).
    Mmapkit,
    /// In memory, no durability (the upper bound).
    Memory,
    /// RocksDB with synced writes (the benchmark peer; feature `rocksdb`).
    Rocksdb,
}

impl std::str::FromStr for StoreKind {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "mmapkit" => Ok(StoreKind::Mmapkit),
            "memory" => Ok(StoreKind::Memory),
            "rocksdb" => Ok(StoreKind::Rocksdb),
            _ => Err(format!("unknown store {s:?} (expected mmapkit, memory or rocksdb)")),
        }
    }
}

/// How to start a node.
#[derive(Clone, Debug)]
pub struct NodeOptions {
    pub id: NodeId,
    pub dir: PathBuf,
    pub bind: SocketAddr,
    pub store: StoreKind,
    /// Build a snapshot every this many applied entries.
    pub snapshot_every: u64,
    /// Entries kept in the log behind a snapshot (older ones are purged).
    pub keep_behind_snapshot: u64,
}

#[derive(Clone)]
struct App {
    raft: Raft<KvConfig>,
    sm: KvStateMachine,
    log: Option<LogStore<KvConfig>>,
    id: NodeId,
}

/// A running node.
pub struct Node {
    pub raft: Raft<KvConfig>,
    pub addr: SocketAddr,
    server: tokio::task::JoinHandle<()>,
    stop: tokio::sync::oneshot::Sender<()>,
}

impl Node {
    /// Starts a node: opens its storage, starts openraft and serves HTTP.
    pub async fn start(opts: NodeOptions) -> Result<Node, Box<dyn std::error::Error + Send + Sync>> {
        let config = Config {
            cluster_name: "mmapkit-kv".into(),
            heartbeat_interval: 100,
            election_timeout_min: 400,
            election_timeout_max: 800,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(opts.snapshot_every),
            max_in_snapshot_log_to_keep: opts.keep_behind_snapshot,
            ..Default::default()
        };
        let config = Arc::new(config.validate()?);
        let sm = KvStateMachine::open(opts.dir.join("sm"))?;
        let net = HttpNetwork { http: reqwest::Client::new() };
        let (raft, log) = match opts.store {
            StoreKind::Mmapkit => {
                let log = LogStore::<KvConfig>::open(opts.dir.join("log"), StoreOptions::default())?;
                (new_raft(opts.id, config, net, log.clone(), sm.clone()).await?, Some(log))
            }
            StoreKind::Memory => {
                let log = crate::mem::MemLogStore::<KvConfig>::default();
                (new_raft(opts.id, config, net, log, sm.clone()).await?, None)
            }
            #[cfg(feature = "rocksdb")]
            StoreKind::Rocksdb => {
                let log = crate::rocks::RocksLogStore::<KvConfig>::open(opts.dir.join("rocksdb"))?;
                (new_raft(opts.id, config, net, log, sm.clone()).await?, None)
            }
            #[cfg(not(feature = "rocksdb"))]
            StoreKind::Rocksdb => return Err("this build has no RocksDB store (build with --features rocksdb)".into()),
        };
        let app = App { raft: raft.clone(), sm, log, id: opts.id };
        let router = Router::new()
            .route("/raft/append", post(append))
            .route("/raft/vote", post(vote))
            .route("/raft/snapshot", post(snapshot))
            .route("/cluster/init", post(init))
            .route("/kv/write", post(write))
            .route("/kv/state", get(kv_state))
            .route("/log/ids", get(log_ids))
            .route("/metrics", get(metrics))
            .route("/admin/snapshot", post(trigger_snapshot))
            .with_state(app);
        let listener = tokio::net::TcpListener::bind(opts.bind).await?;
        let addr = listener.local_addr()?;
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = tokio::spawn(async move {
            let _ = axum::serve(listener, router)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Ok(Node { raft, addr, server, stop })
    }

    /// Stops serving and shuts openraft down.
    pub async fn stop(self) {
        let _ = self.stop.send(());
        let _ = self.raft.shutdown().await;
        let _ = self.server.await;
    }
}

async fn new_raft<LS: RaftLogStorage<KvConfig>>(
    id: NodeId,
    config: Arc<Config>,
    net: HttpNetwork,
    log: LS,
    sm: KvStateMachine,
) -> Result<Raft<KvConfig>, openraft::error::Fatal<NodeId>> {
    Raft::new(id, config, net, log, sm).await
}

type Reply<T, E> = Json<Result<T, E>>;

/// What `POST /kv/write` answers.
type WriteResult = Result<ClientWriteResponse<KvConfig>, RaftError<NodeId, ClientWriteError<NodeId, BasicNode>>>;

async fn append(
    State(app): State<App>,
    Json(req): Json<AppendEntriesRequest<KvConfig>>,
) -> Reply<AppendEntriesResponse<NodeId>, RaftError<NodeId>> {
    Json(app.raft.append_entries(req).await)
}

async fn vote(State(app): State<App>, Json(req): Json<VoteRequest<NodeId>>) -> Reply<VoteResponse<NodeId>, RaftError<NodeId>> {
    Json(app.raft.vote(req).await)
}

async fn snapshot(
    State(app): State<App>,
    Json(req): Json<InstallSnapshotRequest<KvConfig>>,
) -> Reply<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>> {
    Json(app.raft.install_snapshot(req).await)
}

async fn init(
    State(app): State<App>,
    Json(nodes): Json<BTreeMap<NodeId, BasicNode>>,
) -> Reply<(), RaftError<NodeId, InitializeError<NodeId, BasicNode>>> {
    Json(app.raft.initialize(nodes).await)
}

async fn write(
    State(app): State<App>,
    Json(req): Json<Request>,
) -> Json<WriteResult> {
    Json(app.raft.client_write(req).await)
}

/// A node's applied state (`GET /kv/state`).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct KvState {
    pub id: NodeId,
    pub last_applied: Option<LogId<NodeId>>,
    pub data: BTreeMap<String, String>,
}

async fn kv_state(State(app): State<App>) -> Json<KvState> {
    Json(KvState { id: app.id, last_applied: app.sm.last_applied(), data: app.sm.dump() })
}

/// A node's log (`GET /log/ids`): the purge point and the log id of every
/// entry after it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq)]
pub struct LogIds {
    pub purged: Option<LogId<NodeId>>,
    pub entries: Vec<LogId<NodeId>>,
}

async fn log_ids(State(app): State<App>) -> Result<Json<LogIds>, (axum::http::StatusCode, String)> {
    use openraft::storage::RaftLogReader;
    use openraft::RaftLogId;
    let Some(mut log) = app.log else {
        return Err((axum::http::StatusCode::NOT_FOUND, "only the mmapkit store lists its log".into()));
    };
    let err = |e: openraft::StorageError<NodeId>| (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string());
    let st = log.get_log_state().await.map_err(err)?;
    let entries = log.try_get_log_entries(..).await.map_err(err)?;
    Ok(Json(LogIds { purged: st.last_purged_log_id, entries: entries.iter().map(|e| *e.get_log_id()).collect() }))
}

async fn metrics(State(app): State<App>) -> Json<RaftMetrics<NodeId, BasicNode>> {
    Json(app.raft.metrics().borrow().clone())
}

async fn trigger_snapshot(State(app): State<App>) -> Json<bool> {
    Json(app.raft.trigger().snapshot().await.is_ok())
}

// ----- network ---------------------------------------------------------

/// openraft's network over HTTP: one shared reqwest client (connection pool).
#[derive(Clone)]
pub struct HttpNetwork {
    http: reqwest::Client,
}

/// A connection to one peer.
pub struct HttpPeer {
    http: reqwest::Client,
    target: NodeId,
    addr: String,
}

impl RaftNetworkFactory<KvConfig> for HttpNetwork {
    type Network = HttpPeer;
    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> HttpPeer {
        HttpPeer { http: self.http.clone(), target, addr: node.addr.clone() }
    }
}

impl HttpPeer {
    async fn call<Req, Resp, E>(
        &self,
        route: &str,
        req: &Req,
        option: &RPCOption,
    ) -> Result<Resp, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>
    where
        Req: Serialize,
        Resp: DeserializeOwned,
        E: std::error::Error + DeserializeOwned,
    {
        let url = format!("http://{}/{route}", self.addr);
        let resp = self
            .http
            .post(url)
            .json(req)
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
        let res: Result<Resp, RaftError<NodeId, E>> =
            resp.json().await.map_err(|e| RPCError::Network(NetworkError::new(&e)))?;
        res.map_err(|e| RPCError::RemoteError(RemoteError::new(self.target, e)))
    }
}

impl RaftNetwork<KvConfig> for HttpPeer {
    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<KvConfig>,
        option: RPCOption,
    ) -> Result<AppendEntriesResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("raft/append", &rpc, &option).await
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<KvConfig>,
        option: RPCOption,
    ) -> Result<InstallSnapshotResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId, InstallSnapshotError>>>
    {
        self.call("raft/snapshot", &rpc, &option).await
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> Result<VoteResponse<NodeId>, RPCError<NodeId, BasicNode, RaftError<NodeId>>> {
        self.call("raft/vote", &rpc, &option).await
    }
}

// ----- client ----------------------------------------------------------

/// A client of the KV service: sends writes to the leader (following
/// `ForwardToLeader` answers, trying the other nodes when one is down).
#[derive(Clone)]
pub struct KvClient {
    http: reqwest::Client,
    nodes: Vec<String>,
    leader: Arc<Mutex<usize>>,
}

/// Why a client call failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("no leader accepted the write within {0:?} (last error: {1})")]
    Timeout(Duration, String),
}

impl KvClient {
    /// A client of the nodes at `addrs` (`host:port`).
    pub fn new(addrs: impl IntoIterator<Item = String>) -> KvClient {
        KvClient { http: reqwest::Client::new(), nodes: addrs.into_iter().collect(), leader: Arc::new(Mutex::new(0)) }
    }

    /// Writes through the leader; returns once the entry is committed and
    /// applied, with its log id and the previous value. Retries for up to
    /// `patience` while there is no leader (an election).
    pub async fn write(&self, req: &Request, patience: Duration) -> Result<(LogId<NodeId>, Response), ClientError> {
        let deadline = Instant::now() + patience;
        let mut last_err = String::new();
        while Instant::now() < deadline {
            let k = *self.leader.lock().unwrap_or_else(|e| e.into_inner());
            let url = format!("http://{}/kv/write", self.nodes[k]);
            let sent = self.http.post(url).json(req).timeout(Duration::from_secs(5)).send().await;
            let answer: Result<WriteResult, String> = match sent {
                Ok(r) => r.json().await.map_err(|e| e.to_string()),
                Err(e) => Err(e.to_string()),
            };
            match answer {
                Ok(Ok(r)) => return Ok((r.log_id, r.data)),
                Ok(Err(e)) => {
                    last_err = e.to_string();
                    let next = e
                        .forward_to_leader()
                        .and_then(|f| f.leader_node.as_ref())
                        .and_then(|n| self.nodes.iter().position(|a| *a == n.addr));
                    match next {
                        Some(i) => *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = i,
                        None => {
                            self.rotate(k);
                            tokio::time::sleep(Duration::from_millis(50)).await;
                        }
                    }
                }
                Err(e) => {
                    last_err = e;
                    self.rotate(k);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
        Err(ClientError::Timeout(patience, last_err))
    }

    fn rotate(&self, from: usize) {
        let mut l = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        if *l == from {
            *l = (from + 1) % self.nodes.len();
        }
    }

    async fn get_json<T: DeserializeOwned>(&self, addr: &str, route: &str) -> Result<T, String> {
        let r = self
            .http
            .get(format!("http://{addr}/{route}"))
            .timeout(Duration::from_secs(5))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            return Err(format!("{addr}/{route}: HTTP {}", r.status()));
        }
        r.json().await.map_err(|e| e.to_string())
    }

    /// A node's applied state.
    pub async fn state(&self, addr: &str) -> Result<KvState, String> {
        self.get_json(addr, "kv/state").await
    }

    /// A node's log ids.
    pub async fn log_ids(&self, addr: &str) -> Result<LogIds, String> {
        self.get_json(addr, "log/ids").await
    }

    /// A node's openraft metrics.
    pub async fn metrics(&self, addr: &str) -> Result<RaftMetrics<NodeId, BasicNode>, String> {
        self.get_json(addr, "metrics").await
    }

    /// Initializes the cluster through the node at `addr`.
    pub async fn init(&self, addr: &str, nodes: &BTreeMap<NodeId, String>) -> Result<(), String> {
        let members: BTreeMap<NodeId, BasicNode> =
            nodes.iter().map(|(id, a)| (*id, BasicNode { addr: a.clone() })).collect();
        let r = self
            .http
            .post(format!("http://{addr}/cluster/init"))
            .json(&members)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let res: Result<(), RaftError<NodeId, InitializeError<NodeId, BasicNode>>> =
            r.json().await.map_err(|e| e.to_string())?;
        res.map_err(|e| e.to_string())
    }
}

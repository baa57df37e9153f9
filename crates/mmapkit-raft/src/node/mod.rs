//! One node of the replicated key-value service: openraft with the KV
//! state machine, its network over HTTP (axum server, reqwest client, JSON
//! bodies), and a client that finds the leader.
//!
//! # Endpoints
//!
//! With a token ([`NodeOptions::token`]) every endpoint requires
//! `Authorization: Bearer TOKEN` (scheme case-insensitive) and answers
//! `401` without it; peers and [`KvClient`] send it. A node refuses to bind
//! a non-loopback address without a token. Errors that are not openraft's
//! are `text/plain`. A raft core that stops on its own (a storage
//! failure, a panic) is reported by [`Node::fatal`]; `mmapkit-kv serve`
//! then exits with status 70 (fail-stop), as it does on any panic.
//!
//! | route | what |
//! | --- | --- |
//! | `POST /raft/append`, `/raft/vote`, `/raft/snapshot` | openraft's RPCs (bodies up to the largest entry plus 2 MiB, snapshots in raw chunks of [`SNAPSHOT_CHUNK`] behind a JSON header); each carries the sender's identity headers and gets `409` when meant for another incarnation, node or cluster, or sent by a node this one's membership does not know (see [`crate::member`]) |
//! | `/cluster/...` | identity, init and membership changes: see [`crate::cluster`] |
//! | `POST /kv/write` | a [`Request`] as JSON; see below |
//! | `GET /kv/get?key=K` | linearizable read: `{"key": K, "value": V or null}`; see below |
//! | `GET /kv/get?key=K&stale=true` | this node's applied value, no check at all (may be stale); any other parameter is a 400 |
//! | `GET /kv/state?start=K&limit=N` | one page of this node's applied map, from key `K` (default: the first), at most `N` keys (default 1000, at most 10 000), its last applied log id, and `next`, the `start` of the next page (`null`: the last); stale, like `stale=true`; any other parameter is a 400 |
//! | `GET /log/ids?from=I&max=N` | this node's log: purge point and the log ids of entries from raft index `I` (default 0), at most `N` (default 1000, capped at 10000) and 4 MiB of entries; `next` is the `from` of the next page, `null` at the end (mmapkit store only) |
//! | `GET /metrics` | openraft's metrics |
//! | `POST /admin/snapshot` | build a snapshot now |
//!
//! ## `POST /kv/write`
//!
//! Body: `{"Set":{"key":"k","value":"v"}}`, `{"Delete":{"key":"k"}}` or
//! `{"Cas":{"key":"k","expected":"a","value":"b"}}` (`expected`/`value`
//! may be `null`: absent / delete). Answers:
//!
//! * `200` `{"Ok":{"log_id":{"leader_id":{"term":T,"node_id":N},"index":I},"data":{"previous":P,"ok":B},"membership":null}}`:
//!   committed and applied (`ok`: whether a `Cas` matched; `previous`:
//!   the value before).
//! * `503` text `no quorum: not applied: ...`: this node is not the
//!   leader and could not forward (it knows no leader, or the request was
//!   already forwarded once); retry. A non-leader that knows the leader
//!   forwards the write there (with the token) and relays the leader's
//!   answer, status included.
//! * `400` (bad JSON), `401` (token), `413` (the command is larger than
//!   `--max-value-bytes` plus 64 KiB for key and JSON; the text names
//!   both sizes): not applied.
//! * `503` text `no quorum: ...` (the leader has not heard from a quorum
//!   recently), or `leader unreachable: ...` (forwarding failed before the
//!   request was sent): **not applied**.
//! * `504` text `outcome unknown: ...`: the write was proposed but not
//!   committed within [`REQUEST_TIMEOUT`] (quorum lost), the node stopped
//!   meanwhile, or the forwarded request was sent and its answer lost; it
//!   may or may not take effect.
//!
//! Writes that arrive while proposals are in flight are batched into the
//! next one (one raft entry, see the private `batch` module); each is answered
//! with its own command's result, under the batch entry's log id.
//! `{"Batch":[...]}` from a client gets `400`.
//!
//! A client timeout or a connection lost after sending is likewise of
//! unknown outcome. Nodes mark forwarded requests with the header
//! `x-mmapkit-forwarded` and never forward those again (clients should
//! not send it).
//!
//! ## `GET /kv/get?key=K`
//!
//! The leader confirms its leadership with a quorum (openraft's
//! `ensure_linearizable`, a read index) and answers once its state machine
//! applied up to that index; a follower forwards to the leader and relays.
//! `200` `{"key":"K","value":"V"}` (`null` when absent); `503` text
//! `no quorum: ...` when no leader can confirm within [`REQUEST_TIMEOUT`].
//! Reads have no effect, so every failure can be retried.
//!
//! # Listeners
//!
//! Clients connect to [`NodeOptions::bind`]; other nodes to the peer
//! listener ([`NodeOptions::peer_bind`]) when there is one, else to the
//! same address. Both serve every route, each through
//! `mmapkit_replicate::conn` with its own cap of
//! [`NodeOptions::max_connections`] (one more gets `503 busy`; with a
//! token, the oldest connection that has not sent it is closed first),
//! and header, idle and body timeouts (a write whose body stalls gets
//! `408`, not applied).
//!
//! Outgoing connections (raft RPCs, forwarding) bind the IP of
//! [`NodeOptions::bind`] as their local address (unless unspecified), so a
//! proxy in front of each node can tell which node a connection comes
//! from; the cluster may be initialized with the proxies' addresses.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, Query, State};
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response as HttpResponse};
use axum::routing::{get, post};
use axum::{Json, Router};
use openraft::error::{
    ClientWriteError, InitializeError, InstallSnapshotError, NetworkError, PayloadTooLarge,
    RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::storage::RaftLogStorage;
use openraft::{Config, LogId, Raft, RaftMetrics, SnapshotPolicy};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

// Plain-text answers (the message and a newline), as `log serve` gives.
use mmapkit_replicate::http;
pub(crate) use mmapkit_replicate::http::text;

use crate::batch::{Lost, Proposer};
use crate::kv::{KvConfig, KvStateMachine, NodeId, Request, Response};
use crate::member::{Identity, Member};
use crate::{LogStore, StoreOptions};

/// Default of [`NodeOptions::max_value_bytes`] (4 MiB).
pub const DEFAULT_MAX_VALUE_BYTES: usize = 4 << 20;

/// Bytes a command may carry beyond `max_value_bytes`: its key and JSON.
pub const COMMAND_OVERHEAD: usize = 64 << 10;

/// Snapshot bytes per `/raft/snapshot` call (openraft's
/// `snapshot_max_chunk_size`), sent raw (see the private `chunk` module).
pub const SNAPSHOT_CHUNK: usize = 2 << 20;

/// How long a snapshot chunk may take to be received.
const SNAPSHOT_CHUNK_TTL: Duration = Duration::from_secs(2);

/// The last chunk is answered once the receiver has installed the whole
/// snapshot (every key written into its tables): its deadline grows with
/// the snapshot, at this many bytes a second at least. openraft's own
/// deadline ([`SNAPSHOT_TTL_MAX`]) is only a backstop: one missed there
/// restarts the transfer from the first byte (a 4 GB snapshot with a fixed
/// 2 s deadline was sent and installed again and again for minutes).
const SNAPSHOT_INSTALL_BYTES_PER_S: u64 = 8 << 20;

/// openraft's `install_snapshot_timeout` (ms): above every deadline that
/// [`SNAPSHOT_CHUNK_TTL`] and [`SNAPSHOT_INSTALL_BYTES_PER_S`] give.
const SNAPSHOT_TTL_MAX: u64 = 24 * 3600 * 1000;

/// Serialized bytes of entries per `/raft/append` call at most: a larger
/// batch is split (openraft's `PayloadTooLarge`), a single larger entry
/// goes alone. openraft 0.9 gives each append call one heartbeat
/// interval; a call it cuts off divides the peer's budget by 4 (down to
/// [`MIN_APPEND_BUDGET`]), each success doubles it back, so a loaded
/// follower still catches up.
pub const APPEND_BUDGET: usize = 1 << 20;

/// The smallest append budget (batches of one entry go whatever it is).
pub const MIN_APPEND_BUDGET: usize = 16 << 10;

/// How long a node waits for a write to commit or a read's leadership
/// check before answering `504`/`503`.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(4);

/// A leader that has not heard from a quorum for longer refuses requests
/// up front (`503 no quorum`, never applied).
const QUORUM_STALE_MS: u64 = 4 * HEARTBEAT_MS;

/// openraft 0.9 gives each append call one heartbeat interval: room for
/// one entry of the largest value on a loaded machine. Elections wait 4-6
/// heartbeats.
const HEARTBEAT_MS: u64 = 500;

/// Connect timeout of peers, forwarding and [`KvClient`].
const CONNECT_TIMEOUT: Duration = Duration::from_secs(1);

/// On an answer a follower relayed from the leader: the leader's address
/// (as the cluster knows it), for clients to talk to it directly.
pub const LEADER_HINT: &str = "x-mmapkit-leader";

/// Set on a request a node forwards to the leader: the leader does not
/// forward it again (no loops while leadership moves).
pub(crate) const FORWARDED: &str = "x-mmapkit-forwarded";

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

mmapkit::named_enum!(StoreKind, "store", {
    Mmapkit => "mmapkit",
    Memory => "memory",
    Rocksdb => "rocksdb",
});

mmapkit::options! {
    /// How to start a node: [`NodeOptions::new`], then the setters.
    #[derive(Clone, Debug)]
    pub struct NodeOptions {
        /// This node's raft id.
        pub id: NodeId,
        /// Directory of its log, vote and snapshots.
        pub dir: PathBuf,
        /// Address to serve on (default `127.0.0.1:0`: loopback, a free port).
        pub bind: SocketAddr,
        /// A second listener for other nodes (raft RPCs, forwarded
        /// requests and admin calls), like etcd's peer port: a flood of
        /// client connections cannot cut the nodes off from each other.
        /// Its address is recorded in the membership when the node is
        /// added (default: none, peers use `bind`).
        pub peer_bind: Option<SocketAddr>,
        /// The log store (default mmapkit's commit log).
        pub store: StoreKind,
        /// Build a snapshot every this many applied entries.
        pub snapshot_every: u64,
        /// Entries kept in the log behind a snapshot (older ones are purged).
        pub keep_behind_snapshot: u64,
        /// Bearer token every request must carry (and peers send); required
        /// to bind a non-loopback address. See [`check_token`].
        pub token: Option<String>,
        /// Largest value a client may write; a command (key, values, JSON)
        /// may be this plus [`COMMAND_OVERHEAD`] bytes.
        pub max_value_bytes: usize,
        /// Connections open at once (one more gets `503 busy` and is
        /// closed; with a token, the oldest connection that has not sent
        /// it is closed first to make room). Keep it below the fd limit.
        pub max_connections: usize,
        /// Time a request head may take from its first byte.
        pub header_timeout: Duration,
        /// Time a connection may stay open with nothing in flight.
        pub idle_timeout: Duration,
        /// Time a request body may go without a byte (then `408`).
        pub body_timeout: Duration,
    }
}

impl NodeOptions {
    /// Node `id` keeping its state in `dir`; the rest defaults: loopback,
    /// the mmapkit store, a snapshot every 10 000 entries keeping 1 000
    /// behind it, no token, [`DEFAULT_MAX_VALUE_BYTES`].
    pub fn new(id: NodeId, dir: impl Into<PathBuf>) -> Self {
        NodeOptions {
            id,
            dir: dir.into(),
            bind: SocketAddr::from(([127, 0, 0, 1], 0)),
            peer_bind: None,
            store: StoreKind::Mmapkit,
            snapshot_every: 10_000,
            keep_behind_snapshot: 1_000,
            token: None,
            max_value_bytes: DEFAULT_MAX_VALUE_BYTES,
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            body_timeout: Duration::from_secs(10),
        }
    }
}

/// Checks that `token` can be sent in an `Authorization` header as is:
/// non-empty, visible ASCII only (no spaces, no control characters); the
/// check of [`mmapkit_replicate::http::check_sendable`], which `log serve`
/// makes too.
pub fn check_token(token: &str) -> Result<(), String> {
    http::check_sendable(token)
}

fn bearer_value(token: &str) -> Result<HeaderValue, String> {
    check_token(token)?;
    let mut v = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|e| e.to_string())?;
    v.set_sensitive(true);
    Ok(v)
}

#[derive(Clone)]
pub(crate) struct App {
    pub(crate) raft: Raft<KvConfig>,
    pub(crate) sm: KvStateMachine,
    log: Option<LogStore<KvConfig>>,
    pub(crate) id: NodeId,
    token: Option<Arc<str>>,
    /// To the leader when forwarding (the token and local address set).
    pub(crate) http: reqwest::Client,
    max_value_bytes: usize,
    /// Batches the writes into proposals (the `batch` module).
    proposer: Proposer,
    /// This data directory's identity (the `member` module).
    pub(crate) identity: Arc<Identity>,
    /// The peer listener's address, when it has one.
    pub(crate) peer_addr: Option<String>,
    /// The backups this node streams (the `backup` module).
    pub(crate) backups: Arc<crate::backup::BackupStats>,
}

/// A running node.
pub struct Node {
    /// The openraft instance (metrics, membership changes, shutdown).
    pub raft: Raft<KvConfig>,
    /// The address its HTTP server listens on (the bound port when 0 was asked).
    pub addr: SocketAddr,
    /// Its peer listener's address, if it has one.
    pub peer_addr: Option<SocketAddr>,
    /// Its client listener's connection counters.
    pub connections: Arc<mmapkit_replicate::conn::Stats>,
    server: tokio::task::JoinHandle<()>,
    stop: tokio::sync::watch::Sender<bool>,
}

impl Node {
    /// Starts a node: opens its storage, starts openraft and serves HTTP.
    pub async fn start(
        opts: NodeOptions,
    ) -> Result<Node, Box<dyn std::error::Error + Send + Sync>> {
        match &opts.token {
            Some(t) => check_token(t)?,
            None if !opts.bind.ip().is_loopback()
                || opts.peer_bind.is_some_and(|p| !p.ip().is_loopback()) =>
            {
                let off = if opts.bind.ip().is_loopback() {
                    opts.peer_bind.unwrap_or(opts.bind)
                } else {
                    opts.bind
                };
                return Err(format!(
                    "refusing to serve on {off} without a token: anyone who can reach it could write, \
                     read and join the cluster (give --token or MMAPKIT_KV_TOKEN, or bind 127.0.0.1)"
                )
                .into());
            }
            None => {}
        }
        if opts.max_value_bytes == 0 {
            return Err("the largest value must be at least 1 byte".into());
        }
        if opts.max_connections == 0 {
            return Err("the connection cap must be at least 1".into());
        }
        if [opts.header_timeout, opts.idle_timeout, opts.body_timeout].iter().any(|t| t.is_zero()) {
            return Err("the header, idle and body timeouts must be more than zero".into());
        }
        let max_command = opts.max_value_bytes.saturating_add(COMMAND_OVERHEAD);
        let config = Config {
            cluster_name: "mmapkit-kv".into(),
            heartbeat_interval: HEARTBEAT_MS,
            election_timeout_min: 4 * HEARTBEAT_MS,
            election_timeout_max: 6 * HEARTBEAT_MS,
            install_snapshot_timeout: SNAPSHOT_TTL_MAX,
            snapshot_max_chunk_size: SNAPSHOT_CHUNK as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(opts.snapshot_every.max(1)),
            max_in_snapshot_log_to_keep: opts.keep_behind_snapshot,
            ..Default::default()
        };
        let config = Arc::new(config.validate()?);
        let mut headers = reqwest::header::HeaderMap::new();
        if let Some(t) = &opts.token {
            headers.insert(header::AUTHORIZATION, bearer_value(t)?);
        }
        // A connect that hangs (a blackholed peer) fails as a connect
        // error: a forwarded write that never left is "not applied".
        // Pooled connections are dropped before the peer's idle timeout
        // closes them under a request.
        let mut http = reqwest::Client::builder()
            .default_headers(headers)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(opts.idle_timeout / 2);
        if !opts.bind.ip().is_unspecified() {
            http = http.local_address(opts.bind.ip());
        }
        let http = http.build()?;
        // Before the store is opened: whether its state existed decides
        // whether this is still the member it was.
        let state = match opts.store {
            StoreKind::Mmapkit => Some(opts.dir.join("log")),
            StoreKind::Memory => None,
            StoreKind::Rocksdb => Some(opts.dir.join("rocksdb")),
        };
        mmapkit::fs::create_dir_durably(&opts.dir)?;
        let identity = Arc::new(Identity::open(opts.id, &opts.dir, state.as_deref())?);
        let sm = KvStateMachine::open(opts.dir.join("sm"))?;
        let net = HttpNetwork { http: http.clone(), identity: identity.clone() };
        let (raft, log) = match opts.store {
            StoreKind::Mmapkit => {
                let log =
                    LogStore::<KvConfig>::open(opts.dir.join("log"), StoreOptions::default())?;
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
            StoreKind::Rocksdb => {
                return Err("this build has no RocksDB store (build with --features rocksdb)".into())
            }
        };
        let proposer = {
            let raft = raft.clone();
            Proposer::spawn(
                move |req| {
                    let raft = raft.clone();
                    async move { raft.client_write(req).await }
                },
                crate::batch::LIMITS,
            )
        };
        let listener = tokio::net::TcpListener::bind(opts.bind).await?;
        let peer_listener = match opts.peer_bind {
            Some(p) => Some(tokio::net::TcpListener::bind(p).await?),
            None => None,
        };
        let peer_addr = peer_listener.as_ref().map(|l| l.local_addr()).transpose()?;
        let app = App {
            peer_addr: peer_addr.map(|a| a.to_string()),
            proposer,
            raft: raft.clone(),
            sm,
            log,
            id: opts.id,
            token: opts.token.as_deref().map(Arc::from),
            http,
            max_value_bytes: opts.max_value_bytes,
            identity,
            backups: Arc::default(),
        };
        // A page of entries may end with one entry of any allowed size;
        // a snapshot chunk is its bytes and a header (JSON, from a node
        // before the binary chunks: up to 4 characters a byte of a chunk
        // of 512 KiB, their size then).
        let raft_limit = (max_command + (2 << 20)).max(SNAPSHOT_CHUNK + (2 << 20));
        let raft_routes = Router::new()
            .route("/raft/append", post(append))
            .route("/raft/vote", post(vote))
            .route("/raft/snapshot", post(snapshot))
            .layer(DefaultBodyLimit::max(raft_limit));
        let router = Router::new()
            .merge(raft_routes)
            .merge(cluster::routes())
            .route("/kv/write", post(write))
            .route("/kv/get", get(kv_get))
            .merge(query::routes())
            .route("/kv/state", get(kv_state))
            .route("/log/ids", get(log_ids))
            .route("/metrics", get(metrics))
            .route("/admin/snapshot", post(trigger_snapshot))
            .layer(middleware::from_fn_with_state(app.clone(), auth))
            .with_state(app);
        let addr = listener.local_addr()?;
        let limits = mmapkit_replicate::conn::Limits {
            max_connections: opts.max_connections,
            header_timeout: opts.header_timeout,
            idle_timeout: opts.idle_timeout,
            body_timeout: opts.body_timeout,
            token: opts.token.as_deref().map(Arc::from),
        };
        let connections = mmapkit_replicate::conn::Stats::new(opts.max_connections);
        let (stop, stopped) = tokio::sync::watch::channel(false);
        // The peer listener serves the same routes (a forwarded request
        // arrives there), under its own cap.
        let peers = peer_listener.map(|l| {
            let stats = mmapkit_replicate::conn::Stats::new(opts.max_connections);
            mmapkit_replicate::conn::run(l, router.clone(), limits.clone(), stats, stopped.clone())
        });
        let clients =
            mmapkit_replicate::conn::run(listener, router, limits, connections.clone(), stopped);
        let server = tokio::spawn(async move {
            match peers {
                Some(p) => drop(tokio::join!(clients, p)),
                None => clients.await,
            }
        });
        Ok(Node { raft, addr, peer_addr, connections, server, stop })
    }

    /// Resolves when the raft core stopped on its own: a fatal error (a
    /// storage failure) or a panic inside openraft. The process should
    /// then end (fail-stop, as `mmapkit-kv serve` does), never go on as a
    /// zombie whose HTTP server still answers.
    pub async fn fatal(&self) -> String {
        let mut rx = self.raft.metrics();
        loop {
            if let Err(f) = &rx.borrow().running_state {
                return format!("the raft core stopped: {f}");
            }
            if rx.changed().await.is_err() {
                return "the raft core stopped (its task ended: a panic?)".into();
            }
        }
    }

    /// Stops serving and shuts openraft down.
    pub async fn stop(self) {
        let _ = self.stop.send(true);
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

mod client;
pub mod cluster;
mod handlers;
mod network;
pub mod query;

pub use client::*;
pub use handlers::*;
pub use network::*;

#[cfg(test)]
mod tests;

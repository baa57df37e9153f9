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
    AppendEntriesRequest, AppendEntriesResponse, ClientWriteResponse, InstallSnapshotRequest,
    InstallSnapshotResponse, VoteRequest, VoteResponse,
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
            .merge(crate::cluster::routes())
            .route("/kv/write", post(write))
            .route("/kv/get", get(kv_get))
            .merge(crate::query::routes())
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

async fn auth(State(app): State<App>, req: axum::extract::Request, next: Next) -> HttpResponse {
    // The accept loop's check (scheme in any case, constant time).
    match http::refusal(req.headers(), app.token.as_deref()) {
        Some(refused) => refused,
        None => next.run(req).await,
    }
}

/// What `POST /kv/write` answers with `200`.
pub type WriteResult =
    Result<ClientWriteResponse<KvConfig>, RaftError<NodeId, ClientWriteError<NodeId, Member>>>;

/// Whether this node's membership knows `from` (or it has none yet: a
/// new member learns it from the leader), or `extra` (memberships the
/// RPC itself carries) does.
fn knows<'a>(
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

fn refused(why: String) -> HttpResponse {
    text(StatusCode::CONFLICT, format!("refused: {why}"))
}

async fn append(
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

async fn vote(
    State(app): State<App>,
    headers: HeaderMap,
    Json(req): Json<VoteRequest<NodeId>>,
) -> HttpResponse {
    if let Err(why) = app.identity.admit(&headers, |f| knows(&app, f, std::iter::empty())) {
        return refused(why);
    }
    Json(app.raft.vote(req).await).into_response()
}

async fn snapshot(State(app): State<App>, headers: HeaderMap, body: Bytes) -> HttpResponse {
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
fn quorum_problem(m: &RaftMetrics<NodeId, Member>) -> Option<String> {
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

async fn write(State(app): State<App>, headers: HeaderMap, body: Body) -> HttpResponse {
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
fn write_refused(
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

async fn forward_write(
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
struct GetQuery {
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

async fn kv_get(
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

async fn forward_read(
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
struct StateQuery {
    start: Option<String>,
    limit: Option<usize>,
}

async fn kv_state(State(app): State<App>, Query(q): Query<StateQuery>) -> HttpResponse {
    use crate::query::{RANGE_DEFAULT, RANGE_MAX};
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
struct LogIdsQuery {
    #[serde(default)]
    from: u64,
    max: Option<usize>,
}

async fn log_ids(
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

async fn metrics(State(app): State<App>) -> Json<RaftMetrics<NodeId, Member>> {
    Json(app.raft.metrics().borrow().clone())
}

async fn trigger_snapshot(State(app): State<App>) -> Json<bool> {
    Json(app.raft.trigger().snapshot().await.is_ok())
}

// ----- network ---------------------------------------------------------

/// openraft's network over HTTP: one shared reqwest client (connection
/// pool; the token and the local address set).
#[derive(Clone)]
pub struct HttpNetwork {
    http: reqwest::Client,
    identity: Arc<Identity>,
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
struct PeerStatus {
    addr: String,
    route: String,
    status: u16,
    body: String,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, Member, RaftError<NodeId, E>>>;

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
const JSON: &str = "application/json";

fn encode<T: Serialize>(req: &T) -> Result<Vec<u8>, NetworkError> {
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

// ----- client ----------------------------------------------------------

/// A client of the KV service: sends requests to the node it believes
/// leads (following `ForwardToLeader` answers, trying the other nodes
/// when one is down or has no quorum; nodes also forward to the leader
/// themselves).
#[derive(Clone)]
pub struct KvClient {
    http: reqwest::Client,
    pub(crate) nodes: Arc<Vec<String>>,
    leader: Arc<Mutex<usize>>,
    token: Option<HeaderValue>,
}

/// Why a client call failed. `TooLarge`, `Unauthorized` and `Rejected`
/// mean the write was not applied; `Unknown` that it may or may not have
/// been. `Timeout` means not applied for a `Cas`; a `Set` or `Delete`
/// retried after an attempt of unknown outcome may have been (see
/// [`KvClient::write`]).
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    /// No node address was given.
    #[error("no nodes given (pass at least one HOST:PORT)")]
    NoNodes,
    /// The token cannot be sent as a bearer token.
    #[error("bad token: {0}")]
    BadToken(String),
    /// The HTTP client could not be built, or a direct request to one node failed.
    #[error("http client: {0}")]
    Http(String),
    /// No leader answered within the time (the last error seen).
    #[error("no leader answered within {0:?} (last error: {1})")]
    Timeout(Duration, String),
    /// `413`: the command exceeds the server's limit (not applied).
    #[error("too large: {0}")]
    TooLarge(String),
    /// `401`: no or a wrong token (not applied).
    #[error("unauthorized: {0}")]
    Unauthorized(String),
    /// Another `4xx` (not applied).
    #[error("refused with HTTP {0}: {1}")]
    Rejected(u16, String),
    /// The request was sent and its answer lost (timeout, connection
    /// lost, `504`): the write may or may not take effect.
    #[error("outcome unknown: {0}")]
    Unknown(String),
}

/// One attempt's failure inside the retry loops.
enum Attempt {
    /// Not applied; try again (maybe elsewhere).
    Retry(String),
    /// Sent, answer lost.
    Unknown(String),
    Fatal(ClientError),
}

impl KvClient {
    /// A client of the nodes at `addrs` (`host:port`); fails on none.
    pub fn new(addrs: impl IntoIterator<Item = String>) -> Result<KvClient, ClientError> {
        let nodes: Vec<String> = addrs.into_iter().filter(|a| !a.trim().is_empty()).collect();
        if nodes.is_empty() {
            return Err(ClientError::NoNodes);
        }
        let http = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // Below a node's idle timeout (60 s by default).
            .pool_idle_timeout(Duration::from_secs(20))
            .build()
            .map_err(|e| ClientError::Http(e.to_string()))?;
        Ok(KvClient { http, nodes: Arc::new(nodes), leader: Arc::new(Mutex::new(0)), token: None })
    }

    /// Sends `Authorization: Bearer TOKEN` with every request.
    pub fn with_token(mut self, token: Option<&str>) -> Result<KvClient, ClientError> {
        self.token = token.map(bearer_value).transpose().map_err(ClientError::BadToken)?;
        Ok(self)
    }

    pub(crate) fn request(&self, method: reqwest::Method, url: String) -> reqwest::RequestBuilder {
        let r = self.http.request(method, url).timeout(REQUEST_TIMEOUT + Duration::from_secs(4));
        match &self.token {
            Some(t) => r.header(header::AUTHORIZATION, t.clone()),
            None => r,
        }
    }

    pub(crate) fn current(&self) -> usize {
        *self.leader.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Writes through the leader; returns once the entry is committed and
    /// applied, with its log id and the command's [`Response`]. Retries
    /// for up to `patience` while the write was certainly not applied
    /// (no leader, no quorum, a node down). After an attempt of unknown
    /// outcome it retries `Set` and `Delete` (idempotent on the state) but
    /// returns [`ClientError::Unknown`] for `Cas`.
    pub async fn write(
        &self,
        req: &Request,
        patience: Duration,
    ) -> Result<(LogId<NodeId>, Response), ClientError> {
        let deadline = Instant::now() + patience;
        let retry_unknown = !matches!(req, Request::Cas { .. });
        let mut last_err = String::new();
        while Instant::now() < deadline {
            let k = self.current();
            let url = format!("http://{}/kv/write", self.nodes[k]);
            match self.write_once(k, url, req).await {
                Ok(r) => return Ok(r),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Unknown(e)) if !retry_unknown => return Err(ClientError::Unknown(e)),
                Err(Attempt::Retry(e) | Attempt::Unknown(e)) => {
                    last_err = e;
                    if self.current() == k {
                        self.rotate(k);
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                }
            }
        }
        Err(ClientError::Timeout(patience, last_err))
    }

    async fn write_once(
        &self,
        k: usize,
        url: String,
        req: &Request,
    ) -> Result<(LogId<NodeId>, Response), Attempt> {
        let resp = match self.request(reqwest::Method::POST, url).json(req).send().await {
            Ok(r) => r,
            Err(e) if e.is_connect() => return Err(Attempt::Retry(e.to_string())),
            Err(e) => return Err(Attempt::Unknown(e.to_string())),
        };
        let status = resp.status();
        // A follower relayed this from the leader: talk to the leader next.
        let hint = resp.headers().get(LEADER_HINT).and_then(|v| v.to_str().ok());
        if let Some(i) = hint.and_then(|h| self.nodes.iter().position(|a| a == h)) {
            *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = i;
        }
        if status.is_success() {
            let answer: WriteResult =
                resp.json().await.map_err(|e| Attempt::Unknown(e.to_string()))?;
            return match answer {
                Ok(r) => Ok((r.log_id, r.data)),
                Err(e) if e.forward_to_leader().is_none() => Err(Attempt::Unknown(e.to_string())),
                Err(e) => {
                    // Not applied: follow the hint when it names a known node.
                    let next = e
                        .forward_to_leader()
                        .and_then(|f| f.leader_node.as_ref())
                        .and_then(|n| self.nodes.iter().position(|a| *a == n.addr));
                    if let Some(i) = next.filter(|&i| i != k) {
                        *self.leader.lock().unwrap_or_else(|e| e.into_inner()) = i;
                    }
                    Err(Attempt::Retry(e.to_string()))
                }
            };
        }
        let body = resp.text().await.unwrap_or_default().trim().to_owned();
        Err(match status {
            StatusCode::PAYLOAD_TOO_LARGE => Attempt::Fatal(ClientError::TooLarge(body)),
            StatusCode::UNAUTHORIZED => Attempt::Fatal(ClientError::Unauthorized(body)),
            StatusCode::SERVICE_UNAVAILABLE => Attempt::Retry(body),
            s if s.is_client_error() => Attempt::Fatal(ClientError::Rejected(s.as_u16(), body)),
            _ => Attempt::Unknown(format!("HTTP {status}: {body}")),
        })
    }

    /// A linearizable read of `key` (through any node; nodes forward to
    /// the leader). Retries for up to `patience`.
    pub async fn get(&self, key: &str, patience: Duration) -> Result<Option<String>, ClientError> {
        let deadline = Instant::now() + patience;
        let mut last_err = String::new();
        while Instant::now() < deadline {
            let k = self.current();
            let url = format!("http://{}/kv/get", self.nodes[k]);
            match self.get_at(url, key, false).await {
                Ok(v) => return Ok(v),
                Err(Attempt::Fatal(e)) => return Err(e),
                Err(Attempt::Retry(e) | Attempt::Unknown(e)) => {
                    last_err = e;
                    self.rotate(k);
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        Err(ClientError::Timeout(patience, last_err))
    }

    /// The value of `key` in the state machine of the node at `addr`,
    /// unchecked (may be stale).
    pub async fn get_stale(&self, addr: &str, key: &str) -> Result<Option<String>, ClientError> {
        self.get_at(format!("http://{addr}/kv/get"), key, true).await.map_err(|e| match e {
            Attempt::Fatal(e) => e,
            Attempt::Retry(e) | Attempt::Unknown(e) => ClientError::Http(e),
        })
    }

    async fn get_at(&self, url: String, key: &str, stale: bool) -> Result<Option<String>, Attempt> {
        let mut q = vec![("key", key)];
        if stale {
            q.push(("stale", "true"));
        }
        let resp = self
            .request(reqwest::Method::GET, url)
            .query(&q)
            .send()
            .await
            .map_err(|e| Attempt::Retry(e.to_string()))?;
        let status = resp.status();
        if status.is_success() {
            let a: GetAnswer = resp.json().await.map_err(|e| Attempt::Retry(e.to_string()))?;
            return Ok(a.value);
        }
        let body = resp.text().await.unwrap_or_default().trim().to_owned();
        Err(match status {
            StatusCode::UNAUTHORIZED => Attempt::Fatal(ClientError::Unauthorized(body)),
            s if s.is_client_error() => Attempt::Fatal(ClientError::Rejected(s.as_u16(), body)),
            _ => Attempt::Retry(format!("HTTP {status}: {body}")),
        })
    }

    pub(crate) fn rotate(&self, from: usize) {
        let mut l = self.leader.lock().unwrap_or_else(|e| e.into_inner());
        if *l == from {
            *l = (from + 1) % self.nodes.len();
        }
    }

    pub(crate) async fn get_json<T: DeserializeOwned>(
        &self,
        addr: &str,
        route: &str,
    ) -> Result<T, String> {
        self.get_json_query(addr, route, &[]).await
    }

    /// [`KvClient::get_json`] with `query`'s parameters (URL-encoded).
    async fn get_json_query<T: DeserializeOwned>(
        &self,
        addr: &str,
        route: &str,
        query: &[(&str, &str)],
    ) -> Result<T, String> {
        let mut req = self.request(reqwest::Method::GET, format!("http://{addr}/{route}"));
        if !query.is_empty() {
            req = req.query(query);
        }
        let r = req.timeout(Duration::from_secs(5)).send().await.map_err(|e| e.to_string())?;
        if !r.status().is_success() {
            let status = r.status();
            let body = r.text().await.unwrap_or_default();
            return Err(format!("{addr}/{route}: HTTP {status}: {}", body.trim()));
        }
        r.json().await.map_err(|e| e.to_string())
    }

    /// One page of a node's applied state, from key `start`, at most `limit` keys.
    pub async fn state_page(
        &self,
        addr: &str,
        start: &str,
        limit: usize,
    ) -> Result<KvState, String> {
        let limit = limit.to_string();
        self.get_json_query(addr, "kv/state", &[("start", start), ("limit", &limit)]).await
    }

    /// A node's whole applied state (every page, gathered here: for tests
    /// and checks), or an error when it changed between pages.
    pub async fn state(&self, addr: &str) -> Result<KvState, String> {
        use crate::query::RANGE_MAX;
        let mut all = self.state_page(addr, "", RANGE_MAX).await?;
        while let Some(start) = all.next.take() {
            let page = self.state_page(addr, &start, RANGE_MAX).await?;
            if page.last_applied != all.last_applied {
                return Err(format!("{addr}: the state changed while it was read"));
            }
            all.data.extend(page.data);
            all.next = page.next;
        }
        Ok(all)
    }

    /// One page of a node's log ids: from raft index `from`, at most `max`.
    pub async fn log_ids_page(&self, addr: &str, from: u64, max: usize) -> Result<LogIds, String> {
        self.get_json(addr, &format!("log/ids?from={from}&max={max}")).await
    }

    /// A node's whole log (every page).
    pub async fn log_ids(&self, addr: &str) -> Result<LogIds, String> {
        let mut all = self.log_ids_page(addr, 0, LOG_IDS_MAX).await?;
        while let Some(from) = all.next {
            let page = self.log_ids_page(addr, from, LOG_IDS_MAX).await?;
            all.entries.extend(page.entries);
            all.next = page.next;
        }
        Ok(all)
    }

    /// A node's openraft metrics.
    pub async fn metrics(&self, addr: &str) -> Result<RaftMetrics<NodeId, Member>, String> {
        self.get_json(addr, "metrics").await
    }

    /// Initializes the cluster through the node at `addr`, waiting up to
    /// 30 s for nodes still starting (the node asks every other one who it
    /// is: a connection refused or a `503` is retried).
    pub async fn init(&self, addr: &str, nodes: &BTreeMap<NodeId, String>) -> Result<(), String> {
        // Each node's incarnation the node itself tells the initializer.
        let members: BTreeMap<NodeId, serde_json::Value> =
            nodes.iter().map(|(id, a)| (*id, serde_json::json!({ "addr": a }))).collect();
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let sent = self
                .request(reqwest::Method::POST, format!("http://{addr}/cluster/init"))
                .json(&members)
                .send()
                .await;
            let retry = match sent {
                Err(e) if e.is_connect() => e.to_string(),
                Err(e) => return Err(e.to_string()),
                Ok(r) if r.status() == StatusCode::SERVICE_UNAVAILABLE => {
                    r.text().await.unwrap_or_default().trim().to_owned()
                }
                Ok(r) if !r.status().is_success() => {
                    let status = r.status();
                    let body = r.text().await.unwrap_or_default();
                    return Err(format!("{addr}/cluster/init: HTTP {status}: {}", body.trim()));
                }
                Ok(r) => {
                    let res: Result<(), RaftError<NodeId, InitializeError<NodeId, Member>>> =
                        r.json().await.map_err(|e| e.to_string())?;
                    return res.map_err(|e| e.to_string());
                }
            };
            if Instant::now() >= deadline {
                return Err(format!("{addr}/cluster/init: {retry}"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The store names go through the core's `named_enum!`: one spelling
    /// each, and the core's error (kind and text) for an unknown one.
    #[test]
    fn store_kinds_parse_through_named_enum() {
        assert_eq!(StoreKind::NAMES, ["mmapkit", "memory", "rocksdb"]);
        for n in StoreKind::NAMES {
            assert_eq!(n.parse::<StoreKind>().unwrap().to_string(), *n);
        }
        let e = "rocks".parse::<StoreKind>().unwrap_err();
        assert_eq!(e.kind(), mmapkit::ErrorKind::InvalidArgument);
        assert_eq!(e.to_string(), "unknown store \"rocks\" (expected mmapkit, memory or rocksdb)");
    }
}

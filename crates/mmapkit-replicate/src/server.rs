//! The log server: `/v1` endpoints over a [`CommitLog`] (see the crate docs).

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path as UrlPath, RawQuery, Request, State};
use axum::http::{header, HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;
use bytes::{Bytes, BytesMut};
use mmapkit::log::{CommitLog, DurableMark, Entries, LogOptions};
use tokio::sync::{watch, OwnedSemaphorePermit, Semaphore};

use crate::{conn, wake, wire, ReplicateError, Result};

mmapkit::options! {
    /// Options of [`serve`].
    #[derive(Clone, Debug)]
    pub struct ServeOptions {
        /// Address to listen on (default `127.0.0.1:0`: loopback, a free port).
        pub bind: String,
        /// Bearer token every request must carry; required to bind a
        /// non-loopback address.
        pub token: Option<String>,
        /// Upper bound of a page's payload bytes (larger `max_bytes` requests
        /// are clamped; default 16 MiB). A single entry larger than this is
        /// still sent, alone.
        pub max_page_bytes: usize,
        /// Upper bound of a page's entry count (clamped; default 16384).
        pub max_page_count: u64,
        /// Page bodies produced at once (default 32); more requests wait up to
        /// `busy_timeout` for a turn, then get 503.
        pub max_concurrent_pages: usize,
        /// How long a request waits for a turn (default 10 s).
        pub busy_timeout: Duration,
        /// Longest long poll (longer `wait_ms` are clamped; default 30 s).
        pub max_wait: Duration,
        /// A client that takes no body bytes for this long is cut off and its
        /// page's turn freed (default 30 s): slow or stalled clients cannot
        /// hold the page slots.
        pub stall_timeout: Duration,
        /// Connections open at once (default 512, well under the usual fd
        /// limit of 1024). Past it, with a token, the oldest connection that
        /// has not sent a request carrying it is closed to make room; else
        /// (or if every one has) a new connection is answered `503` with
        /// `Connection: close` and closed at once, never queued.
        pub max_connections: usize,
        /// A request head (request line and headers) must arrive whole within
        /// this of its first byte, and a new connection's first head within
        /// this of the accept (default 10 s); else the connection is closed.
        /// The token is checked only once the head is in, so this is what
        /// bounds clients that send nothing, or a byte now and then.
        pub header_timeout: Duration,
        /// A kept-alive connection with no request in flight and nothing
        /// received for this long is closed (default 30 s). Long polls and
        /// bodies being sent are requests in flight.
        pub idle_timeout: Duration,
        /// Serve entries the writer has not synced yet (default: off, only
        /// entries up to the log's [durable mark](CommitLog::durable_mark),
        /// which a power loss of the leader cannot take back). On, a
        /// follower gets entries as soon as they are appended, and checks,
        /// after the writer reopens the log, that those it got past the
        /// mark are still there (see the crate docs).
        pub serve_unsynced: bool,
        /// A read-only log ([`serve_dir`]): a page request within what the
        /// server's view already holds reuses a view refreshed at most this
        /// long ago (default 50 ms), so a burst of requests shares one
        /// refresh; a replaced or deleted directory is noticed within it.
        /// `/v1/state`, `/v1/term` and pages past the view always refresh;
        /// zero refreshes for every request.
        pub view_max_age: Duration,
    }
}

impl Default for ServeOptions {
    fn default() -> Self {
        ServeOptions {
            bind: "127.0.0.1:0".into(),
            token: None,
            max_page_bytes: 16 << 20,
            max_page_count: 16384,
            max_concurrent_pages: 32,
            busy_timeout: Duration::from_secs(10),
            max_wait: Duration::from_secs(30),
            stall_timeout: Duration::from_secs(30),
            max_connections: 512,
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            serve_unsynced: false,
            view_max_age: Duration::from_millis(50),
        }
    }
}

struct Shared {
    log: Arc<CommitLog>,
    opts: ServeOptions,
    pages: Arc<Semaphore>,
    /// Last index, published by the watcher thread (writable logs).
    last_rx: watch::Receiver<u64>,
    /// When a read-only log was last refreshed.
    refreshed: Mutex<Instant>,
    shutdown: tokio::sync::watch::Receiver<bool>,
    /// Refreshes a read-only log for the long polls (one thread, see `wake`).
    poller: Option<Arc<wake::Poller>>,
    /// Long polls waiting now (their checks done), for either kind of log.
    waiting: Arc<AtomicUsize>,
}

/// A running server; dropping it shuts it down.
pub struct Server {
    url: String,
    addr: SocketAddr,
    stop_tx: Option<watch::Sender<bool>>,
    thread: Option<std::thread::JoinHandle<()>>,
    watcher_stop: Arc<AtomicBool>,
    watcher: Option<std::thread::JoinHandle<()>>,
    conns: Arc<conn::Stats>,
    poller: Option<Arc<wake::Poller>>,
    waiting: Arc<AtomicUsize>,
}

impl Server {
    /// `http://ADDR` (with the port chosen when binding port 0), an
    /// address to connect to: bound to all interfaces (`0.0.0.0`, `[::]`),
    /// it names the loopback address (`127.0.0.1`, `[::1]`).
    pub fn url(&self) -> &str {
        &self.url
    }
    /// Connections open now.
    #[doc(hidden)]
    pub fn open_connections(&self) -> usize {
        self.conns.open()
    }
    /// Connections refused (answered 503) because `max_connections` were open.
    #[doc(hidden)]
    pub fn rejected_connections(&self) -> u64 {
        self.conns.rejected()
    }
    /// Connections without the token closed to make room for new ones
    /// at the cap.
    #[doc(hidden)]
    pub fn evicted_connections(&self) -> u64 {
        self.conns.evicted()
    }
    /// Connections closed by the header or idle timeout.
    #[doc(hidden)]
    pub fn timed_out_connections(&self) -> u64 {
        self.conns.timed_out()
    }
    /// How often a read-only log was refreshed, or a request checked
    /// whether to refresh it (0 for a writable log): with long polls
    /// waiting it grows with time, not with their number.
    #[doc(hidden)]
    pub fn refresh_count(&self) -> u64 {
        self.poller.as_ref().map_or(0, |p| p.refreshes())
    }
    /// Long polls waiting now: each has made its checks (`prev_term`,
    /// `prev_crc`) and waits for entries (tests wait on it, not on time).
    #[doc(hidden)]
    pub fn long_polls_waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
    /// The address it listens on.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
    /// Stops accepting, ends long polls, waits for bodies in flight and
    /// returns when the server is down.
    pub fn shutdown(mut self) {
        self.stop();
    }
    /// A handle that stops the server from another thread (a signal
    /// handler's, Python's) while this one is in [`wait`](Self::wait).
    pub fn stopper(&self) -> ServerStop {
        ServerStop(self.stop_tx.clone())
    }
    /// Blocks until the server has stopped (by a [`ServerStop::stop`]).
    pub fn wait(mut self) {
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.stop();
    }
    fn stop(&mut self) {
        if let Some(tx) = self.stop_tx.take() {
            let _ = tx.send(true);
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        self.watcher_stop.store(true, Ordering::Release);
        if let Some(t) = self.watcher.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop();
    }
}

/// Stops a [`Server`] from anywhere (a signal handler's thread, Python).
#[derive(Clone)]
pub struct ServerStop(Option<watch::Sender<bool>>);

impl ServerStop {
    /// Asks the server to stop.
    pub fn stop(&self) {
        if let Some(tx) = &self.0 {
            let _ = tx.send(true);
        }
    }
}

/// Opens the log in `dir` read-only (another process may be appending to
/// it: while long polls wait, one thread refreshes it, every 5 to 100 ms)
/// and serves it.
pub fn serve_dir(dir: impl AsRef<Path>, opts: ServeOptions) -> Result<Server> {
    let log = CommitLog::open(dir.as_ref(), LogOptions::default().read_only(true))?;
    serve(Arc::new(log), opts)
}

/// The last index a server hands out: the log's last entry, or by
/// default the last durable one (see [`ServeOptions::serve_unsynced`]).
/// A log last written by a version that published no durable mark is
/// served whole, as before.
pub(crate) fn servable(log: &CommitLog, unsynced: bool) -> u64 {
    served_last(log.first_index(), log.last_index(), log.durable_mark(), unsynced)
}

/// [`servable`] of one view: its first and last index and the mark.
fn served_last(first: u64, last: u64, mark: Option<DurableMark>, unsynced: bool) -> u64 {
    match mark {
        Some(m) if !unsynced => last.min(m.durable.max(first - 1)),
        _ => last,
    }
}

/// A log made before logs had an id cannot be followed safely: it gets
/// one the next time it is opened for writing.
fn check_identity(log: &CommitLog) -> Result<()> {
    if log.identity().id.is_none() {
        return Err(ReplicateError::InvalidArgument(format!(
            "{}: the log has no id yet (it was made by an older version): open it for writing \
             once (e.g. `mmapkit log init {}`), then serve it",
            log.dir().display(),
            log.dir().display()
        )));
    }
    Ok(())
}

fn check_bind(opts: &ServeOptions) -> Result<SocketAddr> {
    let addr: SocketAddr = opts.bind.parse().map_err(|_| {
        ReplicateError::InvalidArgument(format!(
            "bind address {:?} is not IP:PORT (e.g. 127.0.0.1:8080, [::1]:0)",
            opts.bind
        ))
    })?;
    if !addr.ip().is_loopback() && opts.token.is_none() {
        return Err(ReplicateError::InvalidArgument(format!(
            "refusing to serve on {addr} without a token: anyone who can reach it could \
             read the log (give a bearer token, or bind 127.0.0.1)"
        )));
    }
    if opts.token.as_deref() == Some("") {
        return Err(ReplicateError::InvalidArgument("the token must not be empty".into()));
    }
    // Anything else could not be sent in an Authorization header (or
    // would be trimmed from it), so no client could ever authenticate.
    if let Some(t) = &opts.token {
        if let Some(c) = t.chars().find(|c| !matches!(c, '\x21'..='\x7e')) {
            return Err(ReplicateError::InvalidArgument(format!(
                "the token holds {c:?}: use visible ASCII only (letters, digits, \
                 punctuation; no spaces or control characters)"
            )));
        }
    }
    if opts.max_connections == 0 || opts.max_connections > 1 << 20 {
        return Err(ReplicateError::InvalidArgument(format!(
            "max_connections must be from 1 to {}",
            1 << 20
        )));
    }
    if opts.header_timeout.is_zero() || opts.idle_timeout.is_zero() {
        return Err(ReplicateError::InvalidArgument(
            "header_timeout and idle_timeout must be more than zero".into(),
        ));
    }
    if opts.max_page_bytes == 0 || opts.max_page_count == 0 || opts.max_concurrent_pages == 0 {
        return Err(ReplicateError::InvalidArgument(
            "page limits and max_concurrent_pages must be at least 1".into(),
        ));
    }
    Ok(addr)
}

/// Serves `log` (writable or read-only) on `opts.bind` from a thread of
/// its own; returns once it listens.
pub fn serve(log: Arc<CommitLog>, opts: ServeOptions) -> Result<Server> {
    let addr = check_bind(&opts)?;
    check_identity(&log)?;
    let std_listener = std::net::TcpListener::bind(addr).map_err(|e| ReplicateError::Server {
        addr: addr.to_string(),
        detail: format!("cannot listen: {e}"),
    })?;
    std_listener
        .set_nonblocking(true)
        .map_err(|e| ReplicateError::Server { addr: addr.to_string(), detail: e.to_string() })?;
    let local = std_listener
        .local_addr()
        .map_err(|e| ReplicateError::Server { addr: addr.to_string(), detail: e.to_string() })?;
    // The watcher publishes the last index: woken by appends through a
    // writable handle (no polling); a read-only one is refreshed by one
    // poller thread while long polls wait.
    let unsynced = opts.serve_unsynced;
    let (last_tx, last_rx) = watch::channel(servable(&log, unsynced));
    let watcher_stop = Arc::new(AtomicBool::new(false));
    let poller = log.options().read_only.then(|| Arc::new(wake::Poller::default()));
    let watcher = if let Some(p) = &poller {
        Some(wake::spawn(log.clone(), p.clone(), last_tx, watcher_stop.clone(), unsynced))
    } else {
        let (log, stop) = (log.clone(), watcher_stop.clone());
        Some(std::thread::spawn(move || {
            let mut last = servable(&log, unsynced);
            while !stop.load(Ordering::Acquire) {
                // Woken by appends, or (serving durable entries) by syncs.
                let woke = if unsynced {
                    log.wait_past(last, Duration::from_millis(200))
                } else {
                    log.wait_durable_past(last, Duration::from_millis(200))
                };
                match woke {
                    Ok(_) => {
                        // Also catches truncations (published at the timeout).
                        last = servable(&log, unsynced);
                        last_tx.send_if_modified(|v| std::mem::replace(v, last) != last);
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(200)),
                }
            }
        }))
    };
    let (stop_tx, stop_rx) = watch::channel(false);
    let shared = Arc::new(Shared {
        log,
        pages: Arc::new(Semaphore::new(opts.max_concurrent_pages)),
        opts,
        last_rx,
        refreshed: Mutex::new(Instant::now()),
        shutdown: stop_rx.clone(),
        poller: poller.clone(),
        waiting: Arc::new(AtomicUsize::new(0)),
    });
    let limits = conn::Limits {
        max_connections: shared.opts.max_connections,
        header_timeout: shared.opts.header_timeout,
        idle_timeout: shared.opts.idle_timeout,
        // `log serve` takes no request bodies worth waiting for.
        body_timeout: shared.opts.header_timeout,
        token: shared.opts.token.as_deref().map(Arc::from),
    };
    let conns = conn::Stats::new(limits.max_connections);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("mmapkit-serve")
        .build()
        .map_err(|e| ReplicateError::Server {
            addr: local.to_string(),
            detail: format!("cannot start the runtime: {e}"),
        })?;
    let waiting = shared.waiting.clone();
    let app = router(shared);
    let stats = conns.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let thread = std::thread::spawn(move || {
        rt.block_on(async move {
            let listener = match tokio::net::TcpListener::from_std(std_listener) {
                Ok(l) => l,
                Err(e) => {
                    let _ = ready_tx.send(Err(e.to_string()));
                    return;
                }
            };
            let _ = ready_tx.send(Ok(()));
            conn::run(listener, app, limits, stats, stop_rx).await;
        });
        // Bodies still streaming to slow clients are dropped with the runtime.
        rt.shutdown_timeout(Duration::from_secs(1));
    });
    match ready_rx.recv() {
        Ok(Ok(())) => {}
        Ok(Err(e)) => return Err(ReplicateError::Server { addr: local.to_string(), detail: e }),
        Err(_) => {
            return Err(ReplicateError::Server {
                addr: local.to_string(),
                detail: "the server thread died".into(),
            })
        }
    }
    // The unspecified address accepts connections but cannot be connected to.
    let mut reachable = local;
    if reachable.ip().is_unspecified() {
        reachable.set_ip(match local {
            SocketAddr::V4(_) => Ipv4Addr::LOCALHOST.into(),
            SocketAddr::V6(_) => Ipv6Addr::LOCALHOST.into(),
        });
    }
    Ok(Server {
        url: format!("http://{reachable}"),
        addr: local,
        stop_tx: Some(stop_tx),
        thread: Some(thread),
        watcher_stop,
        watcher,
        conns,
        poller,
        waiting,
    })
}

fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/v1/state", get(state))
        .route("/v1/term/{index}", get(term))
        .route("/v1/entries", get(entries))
        .fallback(|| async {
            err(
                StatusCode::NOT_FOUND,
                "no such endpoint (try /v1/state, /v1/term/{index}, /v1/entries?from=I)".into(),
            )
        })
        .layer(middleware::from_fn_with_state(shared.clone(), auth))
        .with_state(shared)
}

fn err(status: StatusCode, msg: String) -> Response {
    let mut r = (status, format!("{msg}\n")).into_response();
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
    r
}

async fn auth(State(sh): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    if let Some(tok) = &sh.opts.token {
        if let Err(why) = conn::check_token(req.headers(), tok) {
            let mut r = err(StatusCode::UNAUTHORIZED, why.into());
            r.headers_mut().insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
            return r;
        }
    }
    next.run(req).await
}

impl Shared {
    /// The log's last index. A read-only log is refreshed first unless a
    /// refresh started at most `max_age` before this call (concurrent
    /// requests share one refresh; with a zero `max_age` the answer is
    /// current as of the call).
    async fn fresh_last(self: &Arc<Self>, max_age: Duration) -> std::result::Result<u64, Response> {
        if self.log.options().read_only {
            if let Some(p) = &self.poller {
                p.count_refresh();
            }
            let sh = self.clone();
            let asked = Instant::now();
            tokio::task::spawn_blocking(move || {
                let mut at = sh.refreshed.lock().unwrap_or_else(|e| e.into_inner());
                if *at + max_age < asked {
                    let started = Instant::now();
                    sh.log.refresh()?;
                    *at = started;
                }
                Ok::<_, mmapkit::Error>(())
            })
            .await
            .map_err(|e| err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
            .map_err(log_err)?;
        }
        Ok(self.servable())
    }

    /// See [`servable`].
    fn servable(&self) -> u64 {
        servable(&self.log, self.opts.serve_unsynced)
    }

    /// Waits until the log's last index is at least `index` or `wait`
    /// passed (or the server shuts down); returns the last index.
    async fn wait_for(
        self: &Arc<Self>,
        index: u64,
        wait: Duration,
    ) -> std::result::Result<u64, Response> {
        let deadline = tokio::time::Instant::now() + wait;
        let mut shutdown = self.shutdown.clone();
        // A read-only log's news come from the poller, which polls only
        // while someone waits.
        let _waiting = self.poller.as_ref().map(|p| p.waiter());
        let _counted = Counted::new(&self.waiting);
        let mut rx = self.last_rx.clone();
        tokio::select! {
            _ = tokio::time::timeout_at(deadline, rx.wait_for(|l| *l >= index)) => {}
            _ = shutdown.wait_for(|s| *s) => {}
        }
        Ok(self.servable())
    }
}

/// Counts itself in a counter while it lives (a waiting long poll).
struct Counted<'a>(&'a AtomicUsize);

impl<'a> Counted<'a> {
    fn new(n: &'a AtomicUsize) -> Self {
        n.fetch_add(1, Ordering::AcqRel);
        Counted(n)
    }
}

impl Drop for Counted<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A refresh that failed: the directory is gone or unreadable, or the
/// log is changing too fast to load; followers retry.
fn log_err(e: mmapkit::Error) -> Response {
    let mut r =
        err(StatusCode::SERVICE_UNAVAILABLE, format!("the leader's log is not available: {e}"));
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

/// Parses `since=EPOCH` (the only parameter of `/v1/state`).
fn parse_since(q: Option<&str>) -> std::result::Result<Option<u64>, String> {
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
fn read_failed(sh: &Shared, index: u64, e: mmapkit::Error) -> Response {
    if let Ok(st) = sh.log.status(None) {
        if index < st.first_index || index > st.last_index {
            return out_of_range(index, st.first_index, st.last_index);
        }
    }
    let mut r = err(
        StatusCode::SERVICE_UNAVAILABLE,
        format!("reading entry {index} failed (the log may be changing; retry): {e}"),
    );
    r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
    r
}

async fn state(State(sh): State<Arc<Shared>>, RawQuery(q): RawQuery) -> Response {
    let since = match parse_since(q.as_deref()) {
        Ok(s) => s,
        Err(m) => return err(StatusCode::BAD_REQUEST, m),
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
            return err(StatusCode::CONFLICT, e.to_string());
        }
        Ok(Err(e)) => {
            let mut r =
                err(StatusCode::SERVICE_UNAVAILABLE, format!("the log changed; retry ({e})"));
            r.headers_mut().insert(header::RETRY_AFTER, HeaderValue::from_static("1"));
            return r;
        }
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
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
fn out_of_range(index: u64, first: u64, last: u64) -> Response {
    let mut r = if index < first {
        err(
            StatusCode::GONE,
            format!("snapshot required: entry {index} was purged (the log starts at {first})"),
        )
    } else {
        err(
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("entry {index} is past the end of the log (last index {last})"),
        )
    };
    r.headers_mut().insert("x-mmapkit-first-index", HeaderValue::from(first));
    r.headers_mut().insert("x-mmapkit-last-index", HeaderValue::from(last));
    r
}

async fn term(State(sh): State<Arc<Shared>>, UrlPath(raw): UrlPath<String>) -> Response {
    let index: u64 = match raw.parse() {
        Ok(i) if i > 0 => i,
        _ => {
            return err(
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
        Err(e) => err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
    }
}

impl Shared {
    /// Names the log an answer comes from (`x-mmapkit-log-id`).
    fn identify(&self, r: &mut Response) {
        if let Some(id) = self.log.identity().id {
            if let Ok(v) = HeaderValue::from_str(&id) {
                r.headers_mut().insert("x-mmapkit-log-id", v);
            }
        }
    }
}

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

async fn entries(State(sh): State<Arc<Shared>>, RawQuery(q): RawQuery) -> Response {
    let q = match parse_query(q.as_deref()) {
        Ok(q) => q,
        Err(m) => return err(StatusCode::BAD_REQUEST, m),
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
                return err(
                    StatusCode::CONFLICT,
                    format!("log mismatch: entry {} has term {t} and CRC {c:#010x} here", from - 1),
                )
            }
            Ok(Err(e)) => return read_failed(&sh, from - 1, e),
            Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
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
                let mut r = err(
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
            return err(
                StatusCode::CONFLICT,
                format!("log mismatch: entry {i} has term {t} and CRC {c:#010x} here"),
            )
        }
        // Truncated or purged since the check above: 410/416; else 503.
        Ok(Err(e)) => return read_failed(&sh, from, e),
        Err(e) => return err(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()),
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
    h.insert("x-mmapkit-count", HeaderValue::from(count));
    h.insert("x-mmapkit-last-index", HeaderValue::from(sh.servable().max(last)));
    // What was durable when the page was read (entries up to it cannot be
    // lost by a power loss of this incarnation of the writer's), so a
    // follower of a server that serves unsynced entries knows which to
    // check after the writer reopens the log.
    if let Some(m) = mark {
        h.insert("x-mmapkit-durable", HeaderValue::from(m.durable));
        h.insert("x-mmapkit-incarnation", HeaderValue::from(m.incarnation));
    }
    h.insert("x-mmapkit-first-index", HeaderValue::from(sh.log.first_index()));
    // The read's tag: a follower checks later that no truncation numbered
    // from it on cut what it got (see `mmapkit::log::Entries::epoch`).
    h.insert("x-mmapkit-epoch", HeaderValue::from(tag));
    if let Some((t, c)) = prev {
        h.insert("x-mmapkit-prev-term", HeaderValue::from(t));
        h.insert("x-mmapkit-prev-crc", HeaderValue::from(c));
    }
    // The log the entries were read from (not whatever took its place since).
    if let Some(v) = id.and_then(|id| HeaderValue::from_str(&id).ok()) {
        r.headers_mut().insert("x-mmapkit-log-id", v);
    }
    r
}

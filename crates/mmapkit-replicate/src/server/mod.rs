//! The log server: `/v1` endpoints over a [`CommitLog`] (see the crate docs).
//!
//! This module starts and stops the server and holds what its handlers
//! share (the log, the refreshed view, long-poll waits); `routes.rs`
//! answers `/v1/state` and `/v1/term`, `page.rs` `/v1/entries`.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode};
use axum::middleware::{self, Next};
use axum::response::Response;
use axum::routing::get;
use axum::Router;
use mmapkit::log::{CommitLog, LogOptions};
use tokio::sync::{watch, Semaphore};

use crate::http::{self, text};
use crate::served::servable;
use crate::{conn, wake, ReplicateError, Result};

mod page;
mod routes;

use page::entries;
#[doc(hidden)]
pub use page::fuzz_parse_queries;
use routes::{log_err, state, term};

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
    if let Some(t) = &opts.token {
        http::check_sendable(t).map_err(ReplicateError::InvalidArgument)?;
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
            text(
                StatusCode::NOT_FOUND,
                "no such endpoint (try /v1/state, /v1/term/{index}, /v1/entries?from=I)".into(),
            )
        })
        .layer(middleware::from_fn_with_state(shared.clone(), auth))
        .with_state(shared)
}

async fn auth(State(sh): State<Arc<Shared>>, req: Request, next: Next) -> Response {
    match http::refusal(req.headers(), sh.opts.token.as_deref()) {
        Some(refused) => refused,
        None => next.run(req).await,
    }
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
            .map_err(|e| text(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?
            .map_err(log_err)?;
        }
        Ok(self.servable())
    }

    /// See [`crate::served::servable`].
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

impl Shared {
    /// Names the log an answer comes from (`x-mmapkit-log-id`).
    fn identify(&self, r: &mut Response) {
        if let Some(id) = self.log.identity().id {
            if let Ok(v) = HeaderValue::from_str(&id) {
                r.headers_mut().insert(http::X_LOG_ID, v);
            }
        }
    }
}

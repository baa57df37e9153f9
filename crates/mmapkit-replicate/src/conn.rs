//! The accept loop shared by `log serve` and `mmapkit-kv`: serves an axum
//! router over hyper's HTTP/1.1 with a cap on open connections, header,
//! idle and body timeouts per connection, and (with a token) room kept
//! for clients that hold it.
//!
//! Without them a peer could keep a connection (and its fd and buffers)
//! forever by sending nothing, a request head one byte at a time, or a
//! body shorter than it declared; the bearer token cannot help, since it
//! is read only once the head is in.
//!
//! The timeouts are kept here, around the socket, rather than with
//! hyper's `header_read_timeout`: hyper starts that timer as soon as it
//! waits for the next head, so between keep-alive requests it would also
//! be the idle timeout, and the two could not differ.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use axum::Router;
use bytes::Bytes;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper_util::rt::TokioIo;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// The answer to a connection past the cap, written without reading its
/// request (it may not have sent one yet).
const BUSY: &[u8] = b"HTTP/1.1 503 Service Unavailable\r\nConnection: close\r\n\
Content-Type: text/plain; charset=utf-8\r\nRetry-After: 1\r\nContent-Length: 39\r\n\r\n\
busy: too many connections; retry later\n";

/// The connection limits.
#[derive(Clone, Debug)]
pub struct Limits {
    /// Connections open at once; one more is answered 503 and closed.
    pub max_connections: usize,
    /// Time from a request head's first byte to its end.
    pub header_timeout: Duration,
    /// Time a connection may stay open with nothing in flight.
    pub idle_timeout: Duration,
    /// Time a request body may go without a byte while the handler reads
    /// it (a stall, not a total: a large body on a slow link is fine);
    /// the read then fails with [`BodyStalled`].
    pub body_timeout: Duration,
    /// The bearer token, if one is required: at the cap, a connection
    /// that has not yet sent a request carrying it is closed to make
    /// room (the oldest first), so clients without the token cannot keep
    /// those with it out.
    pub token: Option<Arc<str>>,
}

/// The bearer check (it lives in [`crate::http`], shared by every server).
pub use crate::http::check_token;

/// Connections that have not authenticated yet, oldest first (entries of
/// closed or authenticated ones are skipped and pruned).
#[derive(Default)]
struct Unauthed(std::collections::VecDeque<std::sync::Weak<Activity>>);

impl Unauthed {
    fn push(&mut self, act: &Arc<Activity>, max: usize) {
        if self.0.len() >= 2 * max {
            self.0.retain(|w| w.upgrade().is_some_and(|a| !a.authed.load(Ordering::Acquire)));
        }
        self.0.push_back(Arc::downgrade(act));
    }
    /// Closes the oldest open connection that has not authenticated;
    /// false if there is none.
    fn evict_oldest(&mut self) -> bool {
        while let Some(w) = self.0.pop_front() {
            if let Some(a) = w.upgrade() {
                if !a.authed.load(Ordering::Acquire) {
                    a.evict.notify_one();
                    return true;
                }
            }
        }
        false
    }
}

/// Open connections and what happened to the others (for tests and
/// diagnostics).
pub struct Stats {
    slots: Arc<Semaphore>,
    max: usize,
    rejected: AtomicU64,
    timed_out: AtomicU64,
    evicted: AtomicU64,
}

impl Stats {
    /// Counters for a listener of at most `max` connections.
    pub fn new(max: usize) -> Arc<Stats> {
        Arc::new(Stats {
            slots: Arc::new(Semaphore::new(max)),
            max,
            rejected: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
            evicted: AtomicU64::new(0),
        })
    }
    /// Connections open now.
    pub fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }
    /// Connections answered 503 at the cap.
    pub fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
    /// Connections closed by the header or idle timeout.
    pub fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }
    /// Unauthenticated connections closed to make room at the cap.
    pub fn evicted(&self) -> u64 {
        self.evicted.load(Ordering::Relaxed)
    }
}

/// Accepts until `stop`, then lets each connection finish what it has in
/// flight (hyper's graceful shutdown: idle ones close at once) and returns
/// when all are closed.
pub async fn run(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
) {
    let mut unauthed = Unauthed::default();
    let mut http = hyper::server::conn::http1::Builder::new();
    // The timeouts are the watchdog's (see the module docs).
    // Request heads are tiny: a larger one is refused (431: by hyper past
    // its buffer, by `Service` past HEAD_MAX), and each connection's read
    // buffer stays small.
    http.keep_alive(true).header_read_timeout(None).max_buf_size(HEAD_MAX);
    let http = Arc::new(http);
    loop {
        let accepted = tokio::select! {
            biased;
            _ = stop.wait_for(|s| *s) => break,
            r = listener.accept() => r,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            // Out of fds (EMFILE) or a connection reset before accept:
            // pause rather than spin while nothing can be accepted.
            Err(_) => {
                tokio::select! {
                    _ = tokio::time::sleep(Duration::from_millis(50)) => continue,
                    _ = stop.wait_for(|s| *s) => break,
                }
            }
        };
        let mut slot = stats.slots.clone().try_acquire_owned().ok();
        if slot.is_none() && limits.token.is_some() && unauthed.evict_oldest() {
            // Its slot frees as soon as its task sees the eviction.
            let got = stats.slots.clone().acquire_owned();
            slot =
                tokio::time::timeout(Duration::from_secs(1), got).await.ok().and_then(|r| r.ok());
            stats.evicted.fetch_add(1, Ordering::Relaxed);
        }
        let Some(slot) = slot else {
            // Past the cap: answer at once and close, never queue (a
            // queued socket still holds an fd). Best effort: a full send
            // buffer just means no answer.
            stats.rejected.fetch_add(1, Ordering::Relaxed);
            let _ = tcp.try_write(BUSY);
            continue;
        };
        // Small answers (states, terms, short pages) go out at once:
        // Nagle's algorithm against the client's delayed ACK would add
        // ~40 ms to every request whose head and body are two writes.
        let _ = tcp.set_nodelay(true);
        let act = Arc::new(Activity::new(limits.token.is_none()));
        if limits.token.is_some() {
            unauthed.push(&act, limits.max_connections);
        }
        tokio::spawn(connection(
            tcp,
            act,
            app.clone(),
            http.clone(),
            limits.clone(),
            stats.clone(),
            stop.clone(),
            slot,
        ));
    }
    drop(listener);
    // Every connection holds a slot until it is closed.
    let _ = stats.slots.acquire_many(stats.max as u32).await;
}

#[allow(clippy::too_many_arguments)]
async fn connection(
    tcp: TcpStream,
    act: Arc<Activity>,
    app: Router,
    http: Arc<hyper::server::conn::http1::Builder>,
    limits: Limits,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let io = TokioIo::new(Watched { tcp, act: act.clone() });
    let token = limits.token.clone();
    let body_timeout = limits.body_timeout;
    let conn = http.serve_connection(io, Service { app, act: act.clone(), token, body_timeout });
    tokio::pin!(conn);
    let dog = watchdog(&act, limits);
    tokio::pin!(dog);
    tokio::select! {
        _ = conn.as_mut() => return,
        _ = act.evict.notified() => return,
        _ = &mut dog => {
            stats.timed_out.fetch_add(1, Ordering::Relaxed);
            return;
        }
        _ = stop.wait_for(|s| *s) => {}
    }
    conn.as_mut().graceful_shutdown();
    tokio::select! {
        _ = conn.as_mut() => {}
        _ = &mut dog => {
            stats.timed_out.fetch_add(1, Ordering::Relaxed);
        }
    }
}

const NONE: u64 = u64::MAX;

/// What a connection is doing, for its watchdog. All of it is touched
/// from the connection's own task (socket reads, the service, the body),
/// so the orderings need not be strong.
struct Activity {
    start: Instant,
    /// Requests whose answer is not yet fully handed to hyper.
    in_flight: AtomicUsize,
    /// Milliseconds since `start`: when the last answer was done.
    idle_since: AtomicU64,
    /// Milliseconds since `start`: the first byte read while idle (the
    /// next request's head began), or `NONE`.
    head_since: AtomicU64,
    /// Wakes the watchdog to recompute its deadline.
    changed: Notify,
    /// Whether a request carried the token (or none is required).
    authed: std::sync::atomic::AtomicBool,
    /// Closes the connection to make room (see [`Limits::token`]).
    evict: Notify,
}

impl Activity {
    fn new(authed: bool) -> Activity {
        Activity {
            authed: authed.into(),
            evict: Notify::new(),
            start: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            // A new connection is expected to send its first request at
            // once: the header timeout runs from the accept.
            head_since: AtomicU64::new(0),
            changed: Notify::new(),
        }
    }
    fn now_ms(&self) -> u64 {
        self.start.elapsed().as_millis() as u64
    }
}

/// Returns when the connection should be closed: no request in flight
/// and either a head begun `header_timeout` ago and still incomplete, or
/// nothing received for `idle_timeout`.
async fn watchdog(act: &Activity, limits: Limits) {
    loop {
        let changed = act.changed.notified();
        let deadline = if act.in_flight.load(Ordering::Acquire) > 0 {
            None
        } else {
            match act.head_since.load(Ordering::Acquire) {
                NONE => Some((act.idle_since.load(Ordering::Acquire), limits.idle_timeout)),
                at => Some((at, limits.header_timeout)),
            }
        };
        match deadline {
            None => changed.await,
            Some((since, limit)) => {
                let at = act.start + Duration::from_millis(since) + limit;
                if Instant::now() >= at {
                    return;
                }
                tokio::select! {
                    _ = tokio::time::sleep_until(at) => {}
                    _ = changed => {}
                }
            }
        }
    }
}

/// Marks a request in flight until the answer's body is done or dropped.
struct Busy(Arc<Activity>);

impl Busy {
    fn new(act: Arc<Activity>) -> Busy {
        act.in_flight.fetch_add(1, Ordering::AcqRel);
        Busy(act)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let a = &self.0;
        a.idle_since.store(a.now_ms(), Ordering::Release);
        a.head_since.store(NONE, Ordering::Release);
        if a.in_flight.fetch_sub(1, Ordering::AcqRel) == 1 {
            a.changed.notify_one();
        }
    }
}

/// The socket, noting when a request head begins.
struct Watched {
    tcp: TcpStream,
    act: Arc<Activity>,
}

impl AsyncRead for Watched {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        ready!(Pin::new(&mut self.tcp).poll_read(cx, buf))?;
        let a = &self.act;
        if buf.filled().len() > before
            && a.in_flight.load(Ordering::Acquire) == 0
            && a.head_since.load(Ordering::Acquire) == NONE
        {
            a.head_since.store(a.now_ms(), Ordering::Release);
            a.changed.notify_one();
        }
        Poll::Ready(Ok(()))
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write(cx, buf)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

/// The largest request head (request line and headers) answered: larger
/// ones get 431 and the connection is closed.
pub const HEAD_MAX: usize = 64 << 10;

/// A request head's length as sent (`METHOD URI HTTP/1.1\r\n`, each
/// `name: value\r\n`, the blank line).
fn head_len<B>(req: &hyper::Request<B>) -> usize {
    let line = req.method().as_str().len() + req.uri().to_string().len() + 11;
    let headers: usize = req.headers().iter().map(|(k, v)| k.as_str().len() + v.len() + 4).sum();
    line + headers + 2
}

/// The router as a hyper service, marking each request in flight.
struct Service {
    app: Router,
    act: Arc<Activity>,
    token: Option<Arc<str>>,
    body_timeout: Duration,
}

type ServiceFuture =
    Pin<Box<dyn Future<Output = Result<hyper::Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = hyper::Response<Tracked>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, req: hyper::Request<Incoming>) -> ServiceFuture {
        let busy = Busy::new(self.act.clone());
        if let Some(t) = &self.token {
            if !self.act.authed.load(Ordering::Acquire) && check_token(req.headers(), t).is_ok() {
                self.act.authed.store(true, Ordering::Release);
            }
        }
        if head_len(&req) > HEAD_MAX {
            // hyper's read buffer limit is not a bound on the head (it
            // parsed heads of ~100 KiB): the documented one is kept here.
            return Box::pin(async move {
                let body = axum::body::Body::from(format!(
                    "request head larger than {} KiB\n",
                    HEAD_MAX >> 10
                ));
                let r = hyper::Response::builder()
                    .status(431)
                    .header("connection", "close")
                    .header("content-type", crate::http::TEXT_PLAIN)
                    .body(Tracked { body, _busy: busy })
                    .expect("a valid answer");
                Ok(r)
            });
        }
        let timeout = self.body_timeout;
        let req = req.map(|body| Stalling {
            body,
            timeout,
            sleep: Box::pin(tokio::time::sleep(timeout)),
        });
        let answer = tower_service::Service::call(&mut self.app.clone(), req);
        Box::pin(async move {
            let r = answer.await?;
            Ok(r.map(|body| Tracked { body, _busy: busy }))
        })
    }
}

/// An answer's body that keeps its request in flight until it is done.
struct Tracked {
    body: axum::body::Body,
    _busy: Busy,
}

impl http_body::Body for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// A request body read that went [`Limits::body_timeout`] without a byte.
#[derive(Debug, thiserror::Error)]
#[error("the request body stalled: no byte for {0:?}")]
pub struct BodyStalled(pub Duration);

/// Whether `e` (an error from reading a request body, e.g. axum's) comes
/// from [`BodyStalled`].
pub fn is_stalled(e: &(dyn std::error::Error + 'static)) -> bool {
    let mut cur = Some(e);
    while let Some(e) = cur {
        if e.is::<BodyStalled>() {
            return true;
        }
        cur = e.source();
    }
    false
}

/// A request body that fails with [`BodyStalled`] when no frame comes
/// for `timeout` while it is read.
struct Stalling {
    body: Incoming,
    timeout: Duration,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl http_body::Body for Stalling {
    type Data = Bytes;
    type Error = Box<dyn std::error::Error + Send + Sync>;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        if let Poll::Ready(f) = Pin::new(&mut self.body).poll_frame(cx) {
            let next = Instant::now() + self.timeout;
            self.sleep.as_mut().reset(next);
            return Poll::Ready(f.map(|r| r.map_err(Into::into)));
        }
        ready!(self.sleep.as_mut().poll(cx));
        Poll::Ready(Some(Err(Box::new(BodyStalled(self.timeout)))))
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

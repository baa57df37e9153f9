//! The accept loop: serves the axum router over hyper's HTTP/1.1 with a
//! cap on open connections and per-connection header and idle timeouts.
//!
//! Without them a peer could keep a connection (and its fd and buffers)
//! forever by sending nothing, or a request head one byte at a time; the
//! bearer token cannot help, since it is read only once the head is in.
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

/// The connection limits (from [`ServeOptions`](crate::ServeOptions)).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Limits {
    pub max_connections: usize,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
}

/// Open connections and what happened to the others (for tests and
/// diagnostics).
pub(crate) struct Stats {
    slots: Arc<Semaphore>,
    max: usize,
    rejected: AtomicU64,
    timed_out: AtomicU64,
}

impl Stats {
    pub(crate) fn new(max: usize) -> Arc<Stats> {
        Arc::new(Stats {
            slots: Arc::new(Semaphore::new(max)),
            max,
            rejected: AtomicU64::new(0),
            timed_out: AtomicU64::new(0),
        })
    }
    pub(crate) fn open(&self) -> usize {
        self.max - self.slots.available_permits()
    }
    pub(crate) fn rejected(&self) -> u64 {
        self.rejected.load(Ordering::Relaxed)
    }
    pub(crate) fn timed_out(&self) -> u64 {
        self.timed_out.load(Ordering::Relaxed)
    }
}

/// Accepts until `stop`, then lets each connection finish what it has in
/// flight (hyper's graceful shutdown: idle ones close at once) and returns
/// when all are closed.
pub(crate) async fn run(
    listener: TcpListener,
    app: Router,
    limits: Limits,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
) {
    let mut http = hyper::server::conn::http1::Builder::new();
    // The timeouts are the watchdog's (see the module docs).
    // Request heads are tiny: a larger one is refused (431), and each
    // connection's read buffer stays small.
    http.keep_alive(true).header_read_timeout(None).max_buf_size(64 << 10);
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
        let Ok(slot) = stats.slots.clone().try_acquire_owned() else {
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
        tokio::spawn(connection(
            tcp,
            app.clone(),
            http.clone(),
            limits,
            stats.clone(),
            stop.clone(),
            slot,
        ));
    }
    drop(listener);
    // Every connection holds a slot until it is closed.
    let _ = stats.slots.acquire_many(stats.max as u32).await;
}

async fn connection(
    tcp: TcpStream,
    app: Router,
    http: Arc<hyper::server::conn::http1::Builder>,
    limits: Limits,
    stats: Arc<Stats>,
    mut stop: watch::Receiver<bool>,
    _slot: OwnedSemaphorePermit,
) {
    let act = Arc::new(Activity::new());
    let io = TokioIo::new(Watched { tcp, act: act.clone() });
    let conn = http.serve_connection(io, Service { app, act: act.clone() });
    tokio::pin!(conn);
    let dog = watchdog(&act, limits);
    tokio::pin!(dog);
    tokio::select! {
        _ = conn.as_mut() => return,
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
}

impl Activity {
    fn new() -> Activity {
        Activity {
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

/// The router as a hyper service, marking each request in flight.
struct Service {
    app: Router,
    act: Arc<Activity>,
}

type ServiceFuture =
    Pin<Box<dyn Future<Output = Result<hyper::Response<Tracked>, Infallible>> + Send>>;

impl hyper::service::Service<hyper::Request<Incoming>> for Service {
    type Response = hyper::Response<Tracked>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, req: hyper::Request<Incoming>) -> ServiceFuture {
        let busy = Busy::new(self.act.clone());
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

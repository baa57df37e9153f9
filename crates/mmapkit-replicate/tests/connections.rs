//! The server's connection handling: header and idle timeouts, the cap on
//! open connections, shutdown with connections open, long polls on a
//! read-only log (one poller), token and URL checks. All tests together
//! hold about 400 sockets at most (both ends), within `ulimit -n` 1024.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mmapkit_replicate::{follow, serve, serve_dir, FollowOptions, ReplicateError, ServeOptions};

/// Polls `cond` every 20 ms until it holds, failing after `limit`.
fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let t = Instant::now();
    while !cond() {
        assert!(t.elapsed() < limit, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn connect(addr: SocketAddr) -> TcpStream {
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    s
}

/// Whether the server closed `s`: a read sees EOF or a reset (not the
/// read timeout). Whatever the server sent before is returned.
fn closed_by_server(s: &mut TcpStream) -> (bool, Vec<u8>) {
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match s.read(&mut buf) {
            Ok(0) => return (true, got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                return (false, got)
            }
            Err(_) => return (true, got),
        }
    }
}

/// Reads one response with a Content-Length from a kept-alive connection:
/// (status, head, body).
fn read_response(s: &mut TcpStream) -> (u16, String, Vec<u8>) {
    let mut raw = Vec::new();
    let mut buf = [0u8; 4096];
    let end = loop {
        if let Some(p) = raw.windows(4).position(|w| w == b"\r\n\r\n") {
            break p + 4;
        }
        let n = s.read(&mut buf).expect("response head");
        assert!(n > 0, "closed before a response head");
        raw.extend_from_slice(&buf[..n]);
    };
    let head = String::from_utf8_lossy(&raw[..end]).to_lowercase();
    let len: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    let mut body = raw[end..].to_vec();
    while body.len() < len {
        let n = s.read(&mut buf).expect("response body");
        assert!(n > 0, "closed within a body");
        body.extend_from_slice(&buf[..n]);
    }
    (head[9..12].parse().unwrap(), head, body)
}

fn get(s: &mut TcpStream, path: &str, extra: &str) {
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\n{extra}\r\n").unwrap();
}

fn leader(n: u64) -> (tempfile::TempDir, Arc<mmapkit::log::CommitLog>) {
    let a = tempfile::tempdir().unwrap();
    let log = Arc::new(open(a.path()));
    fill(&log, 1, n + 1, 1, 0);
    (a, log)
}

#[test]
fn idle_and_half_sent_connections_are_closed() {
    let (_a, log) = leader(10);
    let srv = serve(
        log.clone(),
        ServeOptions::default()
            .header_timeout(Duration::from_secs(1))
            .idle_timeout(Duration::from_secs(2)),
    )
    .unwrap();
    let at = srv.local_addr();
    // Silent connections, and slowloris ones that send a head a byte at a
    // time and never finish it.
    let mut silent: Vec<TcpStream> = (0..20).map(|_| connect(at)).collect();
    let mut slow: Vec<TcpStream> = (0..20).map(|_| connect(at)).collect();
    for s in &mut slow {
        s.write_all(b"GET /v1/state HTTP/1.1\r\nHost: x\r\n").unwrap();
    }
    let writers: Vec<TcpStream> = slow.iter().map(|s| s.try_clone().unwrap()).collect();
    let dribble = std::thread::spawn(move || {
        let mut writers = writers;
        // Until the server has closed them all (or 60 s).
        for _ in 0..600 {
            writers.retain_mut(|w| w.write_all(b"x").is_ok());
            if writers.is_empty() {
                return;
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    });
    // A kept-alive connection after one answer, and one with a long poll
    // in flight for longer than both timeouts: that one is not cut.
    let mut kept = connect(at);
    get(&mut kept, "/v1/state", "");
    assert_eq!(read_response(&mut kept).0, 200);
    let mut polling = connect(at);
    get(&mut polling, "/v1/entries?from=11&wait_ms=4000", "");
    wait_until("the idle and slow connections are closed", Duration::from_secs(60), || {
        srv.open_connections() <= 1
    });
    assert!(srv.timed_out_connections() >= 41, "{}", srv.timed_out_connections());
    for s in silent.iter_mut().chain(slow.iter_mut()).chain([&mut kept]) {
        assert!(closed_by_server(s).0, "a connection was left open");
    }
    let (st, head, body) = read_response(&mut polling);
    assert_eq!((st, body.len()), (200, 0), "{head}");
    dribble.join().unwrap();
    assert_eq!(http_get(at, "/v1/state", None).0, 200);
}

#[test]
fn a_pause_between_requests_is_idle_time_not_header_time() {
    let (_a, log) = leader(10);
    let srv = serve(
        log,
        ServeOptions::default()
            .header_timeout(Duration::from_secs(1))
            .idle_timeout(Duration::from_secs(30)),
    )
    .unwrap();
    let mut s = connect(srv.local_addr());
    get(&mut s, "/v1/state", "");
    assert_eq!(read_response(&mut s).0, 200);
    // Longer than the header timeout, far shorter than the idle one.
    std::thread::sleep(Duration::from_millis(2500));
    get(&mut s, "/v1/term/3", "");
    let (st, _, body) = read_response(&mut s);
    assert_eq!(st, 200, "{}", String::from_utf8_lossy(&body));
    assert_eq!(srv.timed_out_connections(), 0);
}

#[test]
fn connections_past_the_cap_get_503_at_once_and_followers_get_through() {
    let (a, log) = leader(500);
    let srv = serve(
        log.clone(),
        ServeOptions::default().max_connections(8).header_timeout(Duration::from_secs(120)),
    )
    .unwrap();
    let at = srv.local_addr();
    let mut held: Vec<TcpStream> = (0..8).map(|_| connect(at)).collect();
    wait_until("8 connections are open", Duration::from_secs(30), || srv.open_connections() == 8);
    for _ in 0..20 {
        let mut s = connect(at);
        let (closed, got) = closed_by_server(&mut s);
        let text = String::from_utf8_lossy(&got);
        assert!(closed, "a connection past the cap was kept open");
        assert!(
            text.starts_with("HTTP/1.1 503") && text.to_lowercase().contains("connection: close"),
            "{text:?}"
        );
    }
    assert_eq!(srv.rejected_connections(), 20);
    assert_eq!(srv.open_connections(), 8);
    held.pop();
    wait_until("a slot is free", Duration::from_secs(30), || srv.open_connections() == 7);
    assert_eq!(http_get(at, "/v1/state", None).0, 200);
    drop(held);

    // A flood of silent connections far past the cap: the server holds
    // at most the cap, times them out, and a follower (which retries the
    // 503s) gets through.
    let srv = serve(
        log,
        ServeOptions::default().max_connections(32).header_timeout(Duration::from_secs(2)),
    )
    .unwrap();
    let flood: Vec<TcpStream> = (0..100).map(|_| connect(srv.local_addr())).collect();
    wait_until("the flood is accepted", Duration::from_secs(30), || {
        srv.rejected_connections() + srv.timed_out_connections() + srv.open_connections() as u64
            >= 100
    });
    assert!(srv.open_connections() <= 32);
    let b = tempfile::tempdir().unwrap();
    let r = follow(
        srv.url(),
        b.path(),
        FollowOptions::default()
            .once(true)
            .sync(mmapkit::log::SyncMode::Never)
            .give_up_after(Some(Duration::from_secs(60))),
    )
    .unwrap();
    assert_eq!(r.last_index, 500);
    assert_same(a.path(), b.path());
    drop(flood);
}

/// Issue 37, defect 5 (`log serve`): with a token, clients without it
/// holding every slot cannot keep a follower with it out: the oldest
/// connection that has not sent the token makes room; one that has is
/// never closed for it.
#[test]
fn silent_clients_without_the_token_cannot_keep_a_follower_out() {
    let (a, log) = leader(500);
    let srv = serve(
        log,
        ServeOptions::default()
            .token(Some("t0k".into()))
            .max_connections(8)
            .header_timeout(Duration::from_secs(120)),
    )
    .unwrap();
    let at = srv.local_addr();
    // One authenticated keep-alive connection, then silent ones filling the cap.
    let mut authed = connect(at);
    get(&mut authed, "/v1/state", "Authorization: Bearer t0k\r\n");
    assert_eq!(read_response(&mut authed).0, 200);
    let silent: Vec<TcpStream> = (0..7).map(|_| connect(at)).collect();
    wait_until("8 connections are open", Duration::from_secs(30), || srv.open_connections() == 8);
    let b = tempfile::tempdir().unwrap();
    let t = std::time::Instant::now();
    let r = follow(
        srv.url(),
        b.path(),
        FollowOptions::default()
            .once(true)
            .token(Some("t0k".into()))
            .sync(mmapkit::log::SyncMode::Never)
            .give_up_after(Some(Duration::from_secs(20))),
    )
    .unwrap();
    assert_eq!(r.last_index, 500);
    assert_same(a.path(), b.path());
    assert!(t.elapsed() < Duration::from_secs(10), "the follow took {:?}", t.elapsed());
    assert!(srv.evicted_connections() > 0);
    // The authenticated connection is still served.
    get(&mut authed, "/v1/state", "Authorization: Bearer t0k\r\n");
    assert_eq!(read_response(&mut authed).0, 200);
    drop(silent);
}

#[test]
fn shutdown_is_prompt_with_idle_connections_and_a_long_poll() {
    let (a, log) = leader(10);
    drop(log);
    let srv = serve_dir(a.path(), ServeOptions::default()).unwrap();
    let at = srv.local_addr();
    let mut idle: Vec<TcpStream> = (0..10).map(|_| connect(at)).collect();
    let mut kept = connect(at);
    get(&mut kept, "/v1/state", "");
    assert_eq!(read_response(&mut kept).0, 200);
    let mut polling = connect(at);
    get(&mut polling, "/v1/entries?from=11&wait_ms=30000", "");
    wait_until("the long poll waits", Duration::from_secs(30), || srv.long_polls_waiting() == 1);
    let t = Instant::now();
    srv.shutdown();
    // Well within the long poll's 30 s and the timeouts (10 s, 30 s).
    assert!(t.elapsed() < Duration::from_secs(8), "shutdown took {:?}", t.elapsed());
    let (st, _, body) = read_response(&mut polling);
    assert_eq!((st, body.len()), (200, 0));
    for s in idle.iter_mut().chain([&mut kept]) {
        assert!(closed_by_server(s).0);
    }
}

#[test]
fn long_polls_on_a_read_only_log_share_one_poller() {
    const CLIENTS: usize = 64;
    let (a, log) = leader(10);
    drop(log);
    let srv = serve_dir(a.path(), ServeOptions::default()).unwrap();
    let mut polls: Vec<TcpStream> = (0..CLIENTS)
        .map(|_| {
            let mut s = connect(srv.local_addr());
            get(&mut s, "/v1/entries?from=11&wait_ms=30000", "");
            s
        })
        .collect();
    wait_until("all long polls wait", Duration::from_secs(30), || {
        srv.long_polls_waiting() == CLIENTS
    });
    // One poller backing off to 100 ms makes ~20 refreshes in 2 s; one
    // refresh per waiting request every 20 ms would be ~6,400.
    // Per second of the time that really passed (a loaded machine may
    // sleep longer than asked: issue 27).
    let (r0, t0) = (srv.refresh_count(), Instant::now());
    std::thread::sleep(Duration::from_secs(2));
    let (during, took) = (srv.refresh_count() - r0, t0.elapsed());
    assert!(
        (during as f64) < 50.0 * took.as_secs_f64(),
        "{during} refreshes for {CLIENTS} long polls in {took:?}"
    );
    assert_eq!(srv.long_polls_waiting(), CLIENTS);
    // Another handle (as another process would) appends: every long poll
    // answers with the entry, well before its 30 s wait ends.
    let writer = open(a.path());
    writer.append(&[(1, b"news".as_slice())]).unwrap();
    for s in &mut polls {
        s.set_read_timeout(Some(Duration::from_secs(25))).unwrap();
        let (st, head, body) = read_response(s);
        assert_eq!(st, 200, "{head}");
        assert!(head.contains("x-mmapkit-count: 1"), "{head}");
        assert!(body.ends_with(b"news"));
    }
    // Nobody waits: the poller stops refreshing.
    wait_until("no long poll waits", Duration::from_secs(30), || srv.long_polls_waiting() == 0);
    let r1 = srv.refresh_count();
    std::thread::sleep(Duration::from_secs(1));
    assert!(srv.refresh_count() - r1 <= 1, "refreshing with nobody waiting");
}

#[test]
fn tokens_must_be_sendable_and_the_scheme_is_case_insensitive() {
    let (_a, log) = leader(10);
    for bad in ["a\nb", "a b", "tök", "tab\there", "\u{7f}"] {
        let e = serve(log.clone(), ServeOptions::default().token(Some(bad.into())))
            .err()
            .unwrap_or_else(|| panic!("token {bad:?} accepted"));
        assert!(matches!(e, ReplicateError::InvalidArgument(_)), "{e}");
        assert!(e.to_string().contains("visible ASCII"), "{e}");
    }
    let srv = serve(log, ServeOptions::default().token(Some("s3cret~!".into()))).unwrap();
    for (auth, want) in [
        ("Bearer s3cret~!", 200),
        ("bearer s3cret~!", 200),
        ("BEARER s3cret~!", 200),
        ("bEaReR  s3cret~!", 200),
        ("Basic s3cret~!", 401),
        ("Bearers3cret~!", 401),
        ("bearer s3cret", 401),
    ] {
        let mut s = connect(srv.local_addr());
        get(&mut s, "/v1/state", &format!("Authorization: {auth}\r\n"));
        assert_eq!(read_response(&mut s).0, want, "{auth}");
    }
}

#[test]
fn a_server_on_all_interfaces_gives_a_connectable_url() {
    let (a, log) = leader(10);
    let srv = serve(
        log.clone(),
        ServeOptions::default().bind("0.0.0.0:0".into()).token(Some("t".into())),
    )
    .unwrap();
    assert!(srv.local_addr().ip().is_unspecified());
    let port = srv.local_addr().port();
    assert_eq!(srv.url(), format!("http://127.0.0.1:{port}"));
    let b = tempfile::tempdir().unwrap();
    let once = FollowOptions::default()
        .once(true)
        .token(Some("t".into()))
        .give_up_after(Some(Duration::from_secs(20)));
    assert_eq!(follow(srv.url(), b.path(), once.clone()).unwrap().last_index, 10);
    assert_same(a.path(), b.path());
    // IPv6, where the machine has it.
    if let Ok(srv6) =
        serve(log, ServeOptions::default().bind("[::]:0".into()).token(Some("t".into())))
    {
        let port = srv6.local_addr().port();
        assert_eq!(srv6.url(), format!("http://[::1]:{port}"));
    }
}

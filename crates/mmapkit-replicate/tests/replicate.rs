//! Serve/follow end to end: catch-up, resume, log matching, faults,
//! HTTP errors, tokens.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::*;
use mmapkit::log::CommitLog;
use mmapkit::log::SyncMode;
use mmapkit_replicate::{
    follow, serve, FollowOptions, Follower, ReplicateError, ServeOptions, Server,
};

fn once() -> FollowOptions {
    FollowOptions::default()
        .once(true)
        .sync(SyncMode::Never)
        .page_bytes(256 << 10)
        .give_up_after(Some(Duration::from_secs(20)))
}

/// A leader log (in `a`) holding entries `1..end` of term 1, served with
/// the default options, and an empty directory `b` for a follower.
fn served_leader(end: u64) -> (tempfile::TempDir, tempfile::TempDir, Arc<CommitLog>, Server) {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = Arc::new(open(a.path()));
    fill(&leader, 1, end, 1, 0);
    let srv = serve(leader.clone(), ServeOptions::default()).unwrap();
    (a, b, leader, srv)
}

/// A follower that keeps following (long polls) until stopped.
fn following(url: &str, dir: &std::path::Path) -> Follower {
    Follower::spawn(url, dir, once().once(false)).unwrap()
}

/// Waits until the log in `dir` reaches index `n`, failing after `limit`.
fn wait_for_index(dir: &std::path::Path, n: u64, limit: Duration) {
    let t = Instant::now();
    while open_ro(dir).last_index() < n {
        assert!(t.elapsed() < limit, "follower stuck before {n}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn catch_up_from_empty_then_resume() {
    let (a, b, leader, srv) = served_leader(3001);
    let r = follow(srv.url(), b.path(), once()).unwrap();
    assert_eq!((r.appended, r.truncated, r.last_index), (3000, 0, 3000));
    assert_same(a.path(), b.path());
    // More on the leader: a second run copies only the new entries.
    fill(&leader, 3001, 3501, 2, 0);
    let r = follow(srv.url(), b.path(), once()).unwrap();
    assert_eq!((r.appended, r.last_index), (500, 3500));
    assert_same(a.path(), b.path());
    // Caught up: nothing to do.
    assert_eq!(follow(srv.url(), b.path(), once()).unwrap().appended, 0);
}

#[test]
fn follows_new_entries_with_long_polls_until_stopped() {
    let (a, b, leader, srv) = served_leader(101);
    let f = following(srv.url(), b.path());
    for round in 0..5u64 {
        let from = leader.last_index() + 1;
        fill(&leader, from, from + 50, 1 + round, 0);
        let want = leader.last_index();
        wait_for_index(b.path(), want, Duration::from_secs(20));
    }
    let stop = f.stop_handle();
    let t = Instant::now();
    stop.stop();
    let r = f.join().unwrap();
    assert!(t.elapsed() < Duration::from_secs(5), "stop took {:?}", t.elapsed());
    assert_eq!(r.last_index, 350);
    assert_same(a.path(), b.path());
}

#[test]
fn leader_restart_mid_follow_and_a_leader_that_changed_its_log() {
    let (a, b, leader, srv) = served_leader(1001);
    let addr = srv.local_addr();
    let f = following(srv.url(), b.path());
    let wait_for = |n: u64| wait_for_index(b.path(), n, Duration::from_secs(30));
    wait_for(1000);
    srv.shutdown();
    // While the leader is down its log changes: the last 100 entries are
    // replaced by a new term's (the follower must notice on reconnect).
    leader.truncate_after(900).unwrap();
    fill(&leader, 901, 1201, 2, 5);
    std::thread::sleep(Duration::from_millis(300));
    let srv = serve(leader.clone(), ServeOptions::default().bind(addr.to_string())).unwrap();
    wait_for(1200);
    f.stop_handle().stop();
    let r = f.join().unwrap();
    assert_eq!(r.truncated, 100);
    assert!(r.retries > 0);
    assert_same(a.path(), b.path());
    drop(srv);
}

#[test]
fn dropped_connections_are_retried_and_nothing_is_lost_or_duplicated() {
    let (a, b, _leader, srv) = served_leader(2001);
    let px = proxy(srv.local_addr(), Fault::Cut(400_000));
    let r = follow(&format!("http://{}", px.addr), b.path(), once().page_bytes(64 << 10)).unwrap();
    assert_eq!(r.appended, 2000);
    assert!(r.retries > 0, "the proxy cut nothing?");
    assert!(px.connections.load(std::sync::atomic::Ordering::Relaxed) > 3);
    assert_same(a.path(), b.path());
}

#[test]
fn damage_in_transit_is_refused_never_appended() {
    let (a, b, _leader, srv) = served_leader(2001);
    let px = proxy(srv.local_addr(), Fault::Flip);
    let e =
        follow(&format!("http://{}", px.addr), b.path(), once().page_bytes(64 << 10)).unwrap_err();
    assert!(matches!(e, ReplicateError::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("arrived damaged"), "{e}");
    // What was appended is a verified prefix of the leader's log.
    let kept = assert_prefix(a.path(), b.path());
    assert!(kept < 2000);
    // Without the proxy the same follower completes.
    follow(srv.url(), b.path(), once()).unwrap();
    assert_same(a.path(), b.path());
}

#[test]
fn purged_leader_says_snapshot_required() {
    let (a, b, c) =
        (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = Arc::new(open(a.path()));
    fill(&leader, 1, 301, 1, 0);
    let srv = serve(leader.clone(), ServeOptions::default()).unwrap();
    follow(srv.url(), b.path(), once()).unwrap();
    fill(&leader, 301, 3001, 1, 0);
    leader.purge_before(2000).unwrap();
    let first = leader.first_index();
    assert!(first > 301);
    for dir in [b.path(), c.path()] {
        let e = follow(srv.url(), dir, once()).unwrap_err();
        assert!(matches!(e, ReplicateError::SnapshotRequired { .. }), "{e}");
        let m = e.to_string();
        assert!(m.contains("snapshot required") && m.contains(srv.url()), "{m}");
    }
    assert_eq!(open_ro(b.path()).last_index(), 300);
}

#[test]
fn bad_requests_get_clear_http_errors() {
    let a = tempfile::tempdir().unwrap();
    let leader = Arc::new(open(a.path()));
    fill(&leader, 1, 1001, 1, 0);
    leader.purge_before(700).unwrap();
    let first = leader.first_index();
    assert!(first > 2 && first <= 700, "{first}");
    let srv = serve(leader.clone(), ServeOptions::default().max_page_count(100)).unwrap();
    let at = srv.local_addr();
    let (s, body) = http_get(at, "/v1/state", None);
    assert_eq!(s, 200);
    assert!(body.contains("\"last_index\":1000"), "{body}");
    for (path, want, says) in [
        ("/v1/entries", 400, "missing from"),
        ("/v1/entries?from=abc", 400, "not a whole number"),
        ("/v1/entries?from=0", 400, "at least 1"),
        ("/v1/entries?from=900&max_count=0", 400, "at least 1"),
        ("/v1/entries?from=900&max_bytes=-1", 400, "not a whole number"),
        ("/v1/entries?from=900&color=red", 400, "unknown parameter"),
        ("/v1/entries?from=900&from=1", 400, "from is given twice"),
        ("/v1/entries?from=900&wait_ms=1&wait_ms=2", 400, "wait_ms is given twice"),
        ("/v1/state?since=0&since=1", 400, "since is given twice"),
        ("/v1/entries?from=1002", 416, "past the end"),
        ("/v1/entries?from=1", 410, "snapshot required"),
        ("/v1/entries?from=901&prev_term=7", 409, "log mismatch"),
        ("/v1/term/abc", 400, "bad index"),
        ("/v1/term/5000", 416, "past the end"),
        ("/v1/term/1", 410, "snapshot required"),
        ("/v2/state", 404, "no such endpoint"),
    ] {
        let (s, body) = http_get(at, path, None);
        assert_eq!(s, want, "{path}: {body}");
        assert!(body.contains(says), "{path}: {body}");
    }
    assert_eq!(http_get(at, &format!("/v1/term/{first}"), None).0, 200);
    // Huge pages are clamped to the server's limit (100 entries here).
    let mut s = std::net::TcpStream::connect(at).unwrap();
    use std::io::{Read, Write};
    write!(s, "GET /v1/entries?from=900&max_count=99999999999&max_bytes=99999999999999 HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).unwrap();
    let head =
        String::from_utf8_lossy(&out[..out.windows(4).position(|w| w == b"\r\n\r\n").unwrap()])
            .to_lowercase();
    assert!(head.starts_with("http/1.1 200"), "{head}");
    assert!(head.contains("x-mmapkit-count: 100"), "{head}");
    // Request heads: up to 64 KiB answered, larger ones 431 (~100 KiB
    // heads used to be answered).
    // A server that answers 431 and closes before reading the rest of a
    // head resets the connection: the write may fail (EPIPE) and the
    // reset may reach the client before the answer does. So a head over
    // the limit is sent until its 431 is read; an answer of 200, or no
    // 431 in 50 tries, fails.
    for (pad, want) in [(60_000, "200"), (66_000, "431"), (100_000, "431")] {
        let pad = "a".repeat(pad);
        let mut got = String::new();
        for _ in 0..50 {
            let mut s = std::net::TcpStream::connect(at).unwrap();
            let sent = write!(
                s,
                "GET /v1/state HTTP/1.1\r\nHost: x\r\nX-Pad: {pad}\r\nConnection: close\r\n\r\n"
            );
            if want == "200" {
                sent.unwrap();
            }
            let mut out = Vec::new();
            let _ = s.read_to_end(&mut out);
            got = String::from_utf8_lossy(&out).into_owned();
            if !got.is_empty() {
                break;
            }
        }
        assert!(got.starts_with(&format!("HTTP/1.1 {want}")), "{} bytes: {got}", pad.len());
    }
    // At the end with a long poll: waits, then answers with no entries.
    let t = Instant::now();
    let (s, body) = http_get(at, "/v1/entries?from=1001&wait_ms=300", None);
    assert_eq!((s, body.len()), (200, 0));
    assert!(t.elapsed() >= Duration::from_millis(250));
    // A long poll answers as soon as an entry arrives.
    let l2 = leader.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(100));
        l2.append(&[(1, b"new".as_slice())]).unwrap();
    });
    let t = Instant::now();
    let (s, body) = http_get(at, "/v1/entries?from=1001&wait_ms=20000", None);
    assert_eq!(s, 200);
    assert!(body.ends_with("new"), "{body:?}");
    assert!(t.elapsed() < Duration::from_secs(10));
    h.join().unwrap();
}

#[test]
fn tokens_are_required_and_checked() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let leader = Arc::new(open(a.path()));
    fill(&leader, 1, 11, 1, 0);
    // Not loopback without a token: refused.
    let e = serve(leader.clone(), ServeOptions::default().bind("0.0.0.0:0".into())).err().unwrap();
    assert!(e.to_string().contains("without a token"), "{e}");
    assert!(serve(leader.clone(), ServeOptions::default().bind("localhost:80".into())).is_err());
    let srv = serve(
        leader.clone(),
        ServeOptions::default().bind("0.0.0.0:0".into()).token(Some("s3cret".into())),
    )
    .unwrap();
    let at: std::net::SocketAddr =
        format!("127.0.0.1:{}", srv.local_addr().port()).parse().unwrap();
    assert_eq!(http_get(at, "/v1/state", None).0, 401);
    assert_eq!(http_get(at, "/v1/state", Some("nope")).0, 401);
    assert_eq!(http_get(at, "/v1/entries?from=1", Some("s3cret!")).0, 401);
    assert_eq!(http_get(at, "/v1/state", Some("s3cret")).0, 200);
    let url = format!("http://{at}");
    let e = follow(&url, b.path(), once().token(Some("wrong".into()))).unwrap_err();
    assert!(matches!(e, ReplicateError::Unauthorized { .. }), "{e}");
    let e = follow(&url, b.path(), once()).unwrap_err();
    assert!(e.to_string().contains("401"), "{e}");
    let r = follow(&url, b.path(), once().token(Some("s3cret".into()))).unwrap();
    assert_eq!(r.appended, 10);
    // Malformed URLs are refused before anything is sent.
    for bad in ["not a url", "ftp://127.0.0.1:1", "https://127.0.0.1:1"] {
        assert!(matches!(
            follow(bad, b.path(), once()).unwrap_err(),
            ReplicateError::InvalidArgument(_)
        ));
    }
}

#[test]
fn a_stalled_client_cannot_hold_the_page_slots() {
    use std::io::Write;
    let a = tempfile::tempdir().unwrap();
    let leader = Arc::new(open(a.path()));
    let big = vec![7u8; 64 << 10];
    for _ in 0..8 {
        let batch: Vec<(u64, &[u8])> = (0..50).map(|_| (1, big.as_slice())).collect();
        leader.append(&batch).unwrap();
    }
    let srv = serve(
        leader.clone(),
        ServeOptions::default()
            .max_concurrent_pages(1)
            .max_page_bytes(32 << 20)
            .busy_timeout(Duration::from_secs(20))
            .stall_timeout(Duration::from_millis(500)),
    )
    .unwrap();
    // Asks for 25 MiB and never reads a byte.
    let mut s = std::net::TcpStream::connect(srv.local_addr()).unwrap();
    write!(s, "GET /v1/entries?from=1 HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let t = Instant::now();
    let (st, _) = http_get(srv.local_addr(), "/v1/entries?from=1&max_count=1", None);
    assert_eq!(st, 200);
    assert!(t.elapsed() < Duration::from_secs(15), "waited {:?}", t.elapsed());
    drop(s);
}

#[test]
fn a_served_directory_answers_with_what_was_appended_before_the_request() {
    let (a, b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let writer = open(a.path());
    fill(&writer, 1, 11, 1, 0);
    // Read-only server: another handle (or process) appends.
    let srv = mmapkit_replicate::serve_dir(a.path(), ServeOptions::default()).unwrap();
    for k in 0..20u64 {
        let from = writer.last_index() + 1;
        fill(&writer, from, from + 3, 1, 0);
        let r = follow(srv.url(), b.path(), once()).unwrap();
        assert_eq!(r.last_index, writer.last_index(), "round {k}");
    }
    assert_same(a.path(), b.path());
}

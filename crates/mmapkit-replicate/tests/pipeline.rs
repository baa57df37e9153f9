//! The follower's two pages in flight: the page asked for ahead (before
//! the entry it follows has arrived) is taken only if the server names
//! that entry as the one this follower received last, and every way it
//! can go wrong is retried, never appended.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use mmapkit::log::{CommitLog, SyncMode};
use mmapkit_replicate::{follow, serve, FollowOptions, FollowReport, ServeOptions, Server};

const END: u64 = 2001;

fn once() -> FollowOptions {
    FollowOptions::default()
        .once(true)
        .sync(SyncMode::Never)
        .page_bytes(64 << 10)
        .max_backoff(Duration::from_millis(100))
        .give_up_after(Some(Duration::from_secs(20)))
}

/// A page request sent ahead: it names no entry before it (and is not the
/// first page of an empty follower).
fn ahead(path: &str) -> bool {
    path.starts_with("/v1/entries") && !path.contains("prev_term") && !path.contains("from=1&")
}

fn leader(dir: &std::path::Path) -> (Arc<CommitLog>, Server) {
    let log = Arc::new(open(dir));
    fill(&log, 1, END, 1, 0);
    let srv = serve(log.clone(), ServeOptions::default()).unwrap();
    (log, srv)
}

/// Follows the leader in `a` through a router that sends the pages asked
/// for ahead to `ahead_to` (the leader if `None`), altered by `alter`.
fn follow_routed(
    a: &std::path::Path,
    srv: &Server,
    ahead_to: Option<SocketAddr>,
    alter: Alter,
) -> (FollowReport, u64) {
    let up = srv.local_addr();
    let other = ahead_to.unwrap_or(up);
    let (px, altered) = router(move |p| if ahead(p) { (other, alter) } else { (up, Alter::Keep) });
    let b = tempfile::tempdir().unwrap();
    let r = follow(&format!("http://{}", px.addr), b.path(), once()).unwrap();
    assert_eq!(r.last_index, END - 1);
    assert_same(a, b.path());
    (r, altered.load(Ordering::Relaxed))
}

#[test]
fn pages_are_asked_for_ahead_and_the_copy_is_whole() {
    let a = tempfile::tempdir().unwrap();
    let (_log, srv) = leader(a.path());
    let seen = Arc::new(AtomicU64::new(0));
    let up = srv.local_addr();
    let s = seen.clone();
    let (px, _) = router(move |p| {
        if ahead(p) {
            s.fetch_add(1, Ordering::Relaxed);
        }
        (up, Alter::Keep)
    });
    let b = tempfile::tempdir().unwrap();
    let r = follow(&format!("http://{}", px.addr), b.path(), once()).unwrap();
    assert_eq!((r.appended, r.retries), (END - 1, 0));
    assert!(seen.load(Ordering::Relaxed) > 10, "no page was asked for ahead");
    assert_same(a.path(), b.path());
}

#[test]
fn a_page_ahead_from_another_version_of_the_log_is_refused() {
    // B is the same log (same id, no truncation recorded) with other
    // entries at the same indexes, each with a valid CRC: only the entry
    // the server names before each page tells them apart.
    let (a, c) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    drop(open(a.path()));
    for f in std::fs::read_dir(a.path()).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, c.path().join(f.file_name().unwrap())).unwrap();
    }
    let (_log, srv) = leader(a.path());
    let other = Arc::new(open(c.path()));
    fill(&other, 1, END, 2, 9);
    let srv_b = serve(other, ServeOptions::default()).unwrap();
    let (r, _) = follow_routed(a.path(), &srv, Some(srv_b.local_addr()), Alter::Keep);
    assert!(r.retries > 0, "no page ahead was refused");
}

#[test]
fn a_page_ahead_cut_mid_stream_is_retried() {
    let a = tempfile::tempdir().unwrap();
    let (_log, srv) = leader(a.path());
    let (r, altered) = follow_routed(a.path(), &srv, None, Alter::CutBody);
    assert!(altered > 0 && r.retries > 0, "{altered} {}", r.retries);
}

#[test]
fn a_page_ahead_that_claims_more_entries_than_it_holds_is_retried() {
    let a = tempfile::tempdir().unwrap();
    let (_log, srv) = leader(a.path());
    let (r, altered) = follow_routed(a.path(), &srv, None, Alter::Set("x-mmapkit-count", "999999"));
    assert!(altered > 0 && r.retries > 0, "{altered} {}", r.retries);
}

#[test]
fn a_page_ahead_answered_out_of_order_is_refused() {
    // The server answers with the page from entry 2 (valid frames, the
    // wrong place): refused, then copied again in order.
    let a = tempfile::tempdir().unwrap();
    let (_log, srv) = leader(a.path());
    let (r, altered) = follow_routed(a.path(), &srv, None, Alter::From(2));
    assert!(altered > 0 && r.retries > 0, "{altered} {}", r.retries);
}

#[test]
fn a_server_that_names_no_entry_before_the_page_gets_one_page_at_a_time() {
    // An older server: the page asked for ahead is dropped (nothing is
    // taken from it) and the follower asks for each page with the entry
    // before it, as before; no retry.
    let a = tempfile::tempdir().unwrap();
    let (_log, srv) = leader(a.path());
    let strip = Alter::Strip(&["x-mmapkit-prev-term", "x-mmapkit-prev-crc"]);
    let (r, altered) = follow_routed(a.path(), &srv, None, strip);
    assert_eq!((altered, r.retries), (1, 0));
}

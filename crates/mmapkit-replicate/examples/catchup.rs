//! Benchmark `replication`, catch-up part: the driver `python -m bench
//! replication` runs (built by `make bench-peers`; see
//! bench/suites/replication.py). A follower far behind catches up over HTTP
//! on loopback; its peers are the article's design (one entry per request)
//! and the loopback limit (the same framed bytes fetched as one static HTTP
//! body over the same stack, and dropped).
//!
//! ```text
//! catchup build DIR ENTRIES BYTES        # the leader's log (seeded payloads)
//! catchup run follower|one-entry|loopback LEADER_DIR WORK_DIR
//! ```
//!
//! `run` opens LEADER_DIR read-only and reads it whole (untimed: its
//! segments are indexed and verified once, as in a leader that has been
//! serving for a while), serves it in this process, times one catch-up of a fresh
//! follower in a temporary directory under WORK_DIR (appending with
//! `sync=never`, the page cache, like the loopback fetch that writes
//! nothing: the comparison is the transfer, not the disk) and prints one
//! JSON line: `{"entries", "bytes" (payload), "seconds"}`. `one-entry` is
//! the follower asking one entry per request; `loopback` fetches
//! `entries * (24 + bytes)` bytes as one body.
#![allow(clippy::disallowed_methods, reason = "examples write their demo files directly")]

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit_replicate::{serve, FollowOptions, Follower, ServeOptions};

fn build(dir: &Path, n: u64, size: usize) {
    let log = CommitLog::open(dir, LogOptions::default().sync(SyncMode::Never)).unwrap();
    assert!(log.last_index() < log.first_index(), "{}: not empty", dir.display());
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut i = 0;
    let mut payload = vec![0u8; size];
    while i < n {
        let k = (n - i).min(1000);
        let batch: Vec<(u64, Vec<u8>)> = (0..k)
            .map(|_| {
                for b in payload.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                (1, payload.clone())
            })
            .collect();
        log.append(&batch).unwrap();
        i += k;
    }
    log.sync().unwrap();
}

/// The leader's log, opened read-only, and its (entries, payload bytes).
/// Reading it whole indexes (and verifies) its segments once, untimed, as
/// in a leader that has been serving for a while.
fn open_leader(dir: &Path) -> (Arc<CommitLog>, u64, u64) {
    let log = CommitLog::open(dir, LogOptions::default().read_only(true)).unwrap();
    let (first, last) = (log.first_index(), log.last_index());
    let mut bytes = 0u64;
    let mut i = first;
    while i <= last {
        let hi = (i + 65536).min(last + 1);
        let e = log.read(i, hi, None).unwrap();
        bytes += e.iter().map(|e| e.data().len() as u64).sum::<u64>();
        i += e.len() as u64;
    }
    (Arc::new(log), last + 1 - first, bytes)
}

/// One catch-up of a fresh follower asking `page_count` entries per page.
fn time_follow(leader: Arc<CommitLog>, work: &Path, page_count: Option<u64>, want: u64) -> f64 {
    let srv = serve(leader, ServeOptions::default()).unwrap();
    let d = tempfile::tempdir_in(work).unwrap();
    let mut opts = FollowOptions::default().once(true).sync(SyncMode::Never);
    if let Some(c) = page_count {
        opts.page_count = c;
    }
    // On a thread of its own (as `log follow` runs it), so a profile tells
    // its CPU time from the untimed set-up's on the main thread.
    let t = Instant::now();
    let r = Follower::spawn(srv.url(), d.path(), opts).unwrap().join().unwrap();
    let s = t.elapsed().as_secs_f64();
    assert_eq!(r.appended, want, "the follower did not copy the whole log");
    s
}

/// The loopback limit: `len` bytes as one static body, fetched and dropped.
fn time_static(len: usize) -> f64 {
    let body = bytes::Bytes::from(vec![0x5au8; len]);
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    rt.block_on(async move {
        let app = axum::Router::new().route(
            "/blob",
            axum::routing::get(move || {
                let b = body.clone();
                async move { b }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        let client = reqwest::Client::new();
        let t = Instant::now();
        let mut r = client.get(format!("http://{addr}/blob")).send().await.unwrap();
        let mut got = 0;
        while let Some(c) = r.chunk().await.unwrap() {
            got += c.len();
        }
        let s = t.elapsed().as_secs_f64();
        assert_eq!(got, len);
        s
    })
}

fn usage() -> ! {
    eprintln!(
        "usage: catchup build DIR ENTRIES BYTES\n       catchup run follower|one-entry|loopback LEADER_DIR WORK_DIR"
    );
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let a: Vec<&str> = args.iter().map(String::as_str).collect();
    match a.as_slice() {
        ["build", dir, n, size] => {
            build(
                Path::new(dir),
                n.parse().unwrap_or_else(|_| usage()),
                size.parse().unwrap_or_else(|_| usage()),
            );
        }
        ["run", who, leader, work] => {
            let (leader, n, bytes) = open_leader(Path::new(leader));
            let secs = match *who {
                "follower" => time_follow(leader, Path::new(work), None, n),
                "one-entry" => time_follow(leader, Path::new(work), Some(1), n),
                "loopback" => {
                    time_static((n * mmapkit_replicate::wire::HEADER as u64 + bytes) as usize)
                }
                _ => usage(),
            };
            println!("{{\"entries\": {n}, \"bytes\": {bytes}, \"seconds\": {secs:.6}}}");
        }
        _ => usage(),
    }
}

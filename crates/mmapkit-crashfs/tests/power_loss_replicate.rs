//! Serve/follow across a leader's power loss: a
//! follower never holds, after a successful follow, entries its leader
//! does not have.
//!
//! Each seeded case: a writer appends random batches to a log on crashfs
//! (`sync` never or an interval, explicit syncs now and then), served
//! read-only from the mount (as `mmapkit log serve` does: through
//! `DIR/durable`), by default or with `serve_unsynced`; a follower on an
//! ordinary disk catches up at random moments. Then the leader loses power
//! (a seeded random survivor of what was not synced: torn and reordered
//! sectors, lost sizes and names), its log is reopened and gets different
//! entries of a random count (none, fewer, as many or more than the
//! follower holds past the survivor), the last of them sometimes equal to
//! the follower's entry at that index (the case a last-entry check cannot
//! see). The follower follows once more: it must succeed and hold exactly
//! the leader's log. Counts are printed (`-- --nocapture`).
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use common::fuse_tests;
use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit_crashfs::{CrashFs, Mode};
use mmapkit_replicate::{follow, serve_dir, FollowOptions, ServeOptions};

struct Rng(u64);

impl Rng {
    fn below(&mut self, n: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % n.max(1)
    }
}

fn once() -> FollowOptions {
    FollowOptions::default()
        .once(true)
        .sync(SyncMode::Never)
        .give_up_after(Some(Duration::from_secs(30)))
}

fn entries(dir: &Path) -> Vec<(u64, u64, Vec<u8>)> {
    let log = CommitLog::open(dir, LogOptions::default().read_only(true)).unwrap();
    if log.is_empty() {
        return Vec::new();
    }
    let got = log.read(log.first_index(), log.last_index() + 1, None).unwrap();
    got.iter().map(|e| (e.index(), e.term(), e.data().to_vec())).collect()
}

fn payload(rng: &mut Rng, salt: u64) -> Vec<u8> {
    let n = rng.below(3000) as usize;
    (0..n).map(|j| (j as u64 ^ salt) as u8).collect()
}

#[derive(Default, Debug)]
struct Counts {
    cases: u64,
    unsynced_served: u64,
    leader_lost_entries: u64,
    follower_held_lost_entries: u64,
    dropped_by_follower: u64,
    equal_last_entry: u64,
    silent_differences: u64,
}

fn case(seed: u64, c: &mut Counts) {
    let mut rng = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let unsynced = seed % 2 == 1;
    let sync = if seed.is_multiple_of(3) {
        SyncMode::Interval(Duration::from_millis(3))
    } else {
        SyncMode::Never
    };
    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let wal = m.path().join("wal");
    let fdir = tempfile::tempdir().unwrap();
    let w = CommitLog::open(&wal, LogOptions::default().sync(sync).segment_size(64 << 10)).unwrap();
    let srv = serve_dir(&wal, ServeOptions::default().serve_unsynced(unsynced)).unwrap();
    let batches = 5 + rng.below(20);
    for b in 0..batches {
        let n = 1 + rng.below(12);
        let batch: Vec<(u64, Vec<u8>)> = (0..n).map(|_| (1, payload(&mut rng, b))).collect();
        w.append(&batch).unwrap();
        if rng.below(4) == 0 {
            w.sync().unwrap();
        }
        if rng.below(3) == 0 || b + 1 == batches {
            follow(srv.url(), fdir.path(), once()).unwrap();
        }
    }
    let before = w.last_index();
    // The power loss: what the disk keeps of what was not synced.
    let survivor = tempfile::tempdir().unwrap();
    m.snapshot(Mode::KeepRandom { seed }, survivor.path()).unwrap();
    drop(srv);
    drop(w);
    drop(m);
    let dir = survivor.path().join("wal");
    let held = entries(fdir.path());
    let w = Arc::new(CommitLog::open(&dir, LogOptions::default().sync(SyncMode::Batch)).unwrap());
    let kept = w.last_index();
    c.leader_lost_entries += u64::from(kept < before);
    let held_last = held.last().map_or(0, |e| e.0);
    let lost_held = held.iter().filter(|e| e.0 > kept).count() as u64;
    c.follower_held_lost_entries += u64::from(lost_held > 0);
    c.unsynced_served += u64::from(unsynced && lost_held > 0);
    // Different entries: none, fewer, as many or more than were lost.
    let add = rng.below(held_last.saturating_sub(kept) + 3);
    let mut batch: Vec<(u64, Vec<u8>)> = (0..add).map(|_| (2, payload(&mut rng, 77))).collect();
    let last = kept + add;
    if add > 0 && rng.below(2) == 0 {
        if let Some(e) = held.iter().find(|e| e.0 == last) {
            // Equal to the follower's entry at that index.
            *batch.last_mut().unwrap() = (e.1, e.2.clone());
            c.equal_last_entry += 1;
        }
    }
    if !batch.is_empty() {
        w.append(&batch).unwrap();
    }
    let srv = serve_dir(&dir, ServeOptions::default().serve_unsynced(unsynced)).unwrap();
    let r = follow(srv.url(), fdir.path(), once())
        .unwrap_or_else(|e| panic!("seed {seed}: the follow after the power loss failed: {e}"));
    c.dropped_by_follower += r.truncated;
    if entries(fdir.path()) != entries(&dir) {
        c.silent_differences += 1;
        panic!("seed {seed}: the follower differs from its leader after a successful follow");
    }
    // Durable-only serving never hands out what the survivor can lack.
    if !unsynced {
        assert_eq!(lost_held, 0, "seed {seed}: served entries the power loss took back");
    }
    c.cases += 1;
}

fn matrix() {
    let n = if common::long() { 400 } else { 40 };
    let mut c = Counts::default();
    for seed in 1..=n {
        case(seed, &mut c);
    }
    eprintln!("serve/follow power-loss matrix: {c:?}");
    assert_eq!(c.silent_differences, 0);
    // Not vacuous: served unsynced, followers did hold entries the power
    // loss took from the leader, and dropped them.
    assert!(c.unsynced_served > 0 && c.dropped_by_follower > 0, "{c:?}");
    assert!(c.leader_lost_entries > 0, "{c:?}");
}

fn a_failed_append() {
    let a = tempfile::tempdir().unwrap();
    let leader = Arc::new(CommitLog::open(a.path(), LogOptions::default()).unwrap());
    let first: Vec<(u64, Vec<u8>)> = (0..100).map(|i| (1, vec![i as u8; 100])).collect();
    leader.append(&first).unwrap();
    let srv = mmapkit_replicate::serve(leader.clone(), ServeOptions::default()).unwrap();
    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let fdir = m.path().join("copy");
    let f = mmapkit_replicate::Follower::spawn(
        srv.url(),
        &fdir,
        FollowOptions::default().once(false).sync(SyncMode::Batch),
    )
    .unwrap();
    let t = std::time::Instant::now();
    while CommitLog::open(&fdir, LogOptions::default().read_only(true))
        .map_or(0, |l| l.last_index())
        < 100
    {
        assert!(t.elapsed() < Duration::from_secs(30), "the follower did not catch up");
        std::thread::sleep(Duration::from_millis(10));
    }
    m.fail_fsyncs(1);
    leader.append(&[(1, b"one more".as_slice())]).unwrap();
    let t = std::time::Instant::now();
    while !f.is_finished() {
        assert!(
            t.elapsed() < Duration::from_secs(30),
            "the follower stays alive and silent after its append failed"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let e = f.join().unwrap_err();
    assert!(e.to_string().contains("Input/output error") || e.to_string().contains("EIO"), "{e}");
    assert_eq!(m.failed_fsyncs(), 1);
}

fuse_tests! {
    a_follower_never_differs_from_its_leader_after_the_leaders_power_loss => matrix();
    /// A continuous follower whose append fails (here
    /// a failed sync: the log stops, fail-stop) ends with that error at
    /// once instead of staying connected and silent.
    a_continuous_follower_whose_append_fails_ends_with_the_error => a_failed_append();
}

/// A fatal error inside the raft core (here the log store's
/// failed sync: fail-stop) is reported by `Node::fatal`, which
/// `mmapkit-kv serve` exits on, instead of the node going on as a zombie.
fn a_failed_raft_sync() {
    use mmapkit_raft::kv::Request;
    use mmapkit_raft::node::{KvClient, Node, NodeOptions};
    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build().unwrap();
    rt.block_on(async {
        let opts = NodeOptions::new(1, m.path().join("n1")).bind("127.0.0.1:0".parse().unwrap());
        let node = Node::start(opts).await.unwrap();
        let addr = node.addr.to_string();
        let client = KvClient::new([addr.clone()]).unwrap();
        client.init(&addr, &[(1, addr.clone())].into()).await.unwrap();
        let set = |k: &str| Request::Set { key: k.into(), value: "v".into() };
        client.write(&set("a"), Duration::from_secs(30)).await.unwrap();
        m.fail_fsyncs(1);
        let _ = client.write(&set("b"), Duration::from_secs(2)).await;
        let why = tokio::time::timeout(Duration::from_secs(30), node.fatal())
            .await
            .expect("the raft core kept running after its store failed");
        assert!(why.contains("raft core stopped"), "{why}");
        assert_eq!(m.failed_fsyncs(), 1);
    });
}

fuse_tests! {
    a_fatal_raft_error_is_reported_for_the_process_to_end => a_failed_raft_sync();
}

//! Power-loss matrix of mmapkit-raft's openraft log store: a vote, an
//! entry or a purge point that `save_vote`, openraft's `LogFlushed`
//! callback or `purge` acknowledged survives any crash; a truncation
//! that returned never comes back; the committed id (a hint, not synced)
//! is one the workload saved or none; nothing never appended appears.
//! `durable: false` (the negative control) must lose acknowledged entries.
//!
//! The workload is this test binary run again (`workload` below, under
//! `MMAPKIT_RAFT_WORKLOAD`), so the crash file system's crate needs
//! mmapkit-raft only as a dev-dependency.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::process::Command;

use common::*;
use mmapkit_crashfs::CrashAt;
use mmapkit_raft::kv::KvConfig;
use mmapkit_raft::{LogStore, StoreOptions};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, RaftLogId, Vote};

type Store = LogStore<KvConfig>;

const ROUNDS: u64 = 12;
const SEGMENT: u64 = 4096;

fn id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn blank(term: u64, index: u64) -> Entry<KvConfig> {
    Entry { log_id: id(term, index), payload: EntryPayload::Blank }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

fn opts(durable: bool) -> StoreOptions {
    StoreOptions::default().segment_size(SEGMENT).durable(durable)
}

fn say(line: String) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

/// The workload: rounds of vote, append (3 entries of the round's term),
/// committed hint; every 4th round truncates the last 2 entries, every
/// 5th purges up to 5 entries back. Prints `TRY…` before and the
/// acknowledgement after each call.
#[test]
#[ignore = "the workload of the raft power-loss matrix, which runs it"]
fn workload() {
    let Some(dir) = std::env::var_os("MMAPKIT_RAFT_WORKLOAD") else {
        panic!("run by the matrix, with MMAPKIT_RAFT_WORKLOAD set")
    };
    let durable = std::env::var_os("MMAPKIT_RAFT_NOSYNC").is_none();
    // libtest has printed "test workload ... " without a newline.
    say(String::new());
    rt().block_on(async {
        let mut s = Store::open(&dir, opts(durable)).expect("open");
        let mut next = 0u64;
        for r in 1..=ROUNDS {
            say(format!("TRYVOTE {r}"));
            s.save_vote(&Vote::new_committed(r, 1)).await.expect("vote");
            say(format!("VOTE {r}"));
            say(format!("TRY {r} {next} 3"));
            s.blocking_append((next..next + 3).map(|i| blank(r, i))).await.expect("append");
            say(format!("ACK {r} {next} 3"));
            next += 3;
            if r % 4 == 0 {
                let x = next - 2;
                say(format!("TRYTRUNC {x}"));
                s.truncate(id(r, x)).await.expect("truncate");
                say(format!("TRUNC {x}"));
                next = x;
            }
            if r % 5 == 0 && next >= 6 {
                let p = next - 5;
                say(format!("TRYPURGE {p}"));
                // The purged id's term is the entry's own (read it back).
                let e = s.try_get_log_entries(p..=p).await.expect("read purge point");
                s.purge(*e[0].get_log_id()).await.expect("purge");
                say(format!("PURGE {p}"));
            }
            say(format!("COMMITTED {r} {}", next - 1));
            s.save_committed(Some(id(r, next - 1))).await.expect("committed");
        }
        say("END".into());
    });
}

/// What the workload said before the crash.
#[derive(Default, Debug)]
struct Told {
    /// The last acknowledged vote term, and one tried after it.
    vote: Option<u64>,
    vote_pending: Option<u64>,
    /// Every (index, term) an append tried.
    tried: BTreeSet<(u64, u64)>,
    /// Index -> term of every live acknowledged entry.
    acked: BTreeMap<u64, u64>,
    /// Entries an acknowledged truncation removed.
    dead: BTreeSet<(u64, u64)>,
    trunc_pending: Option<u64>,
    /// Acknowledged purge point, and the highest tried.
    floor: Option<u64>,
    floor_pending: Option<u64>,
    /// Committed ids (term, index) the workload began to save.
    committed: BTreeSet<(u64, u64)>,
}

fn parse(lines: &[String]) -> Told {
    let mut t = Told::default();
    for l in lines {
        let w: Vec<&str> = l.split(' ').collect();
        let n = |i: usize| w[i].parse::<u64>().unwrap();
        match w[0] {
            "TRYVOTE" => t.vote_pending = Some(n(1)),
            "VOTE" => t.vote = Some(n(1)),
            "TRY" => t.tried.extend((n(2)..n(2) + n(3)).map(|i| (i, n(1)))),
            "ACK" => t.acked.extend((n(2)..n(2) + n(3)).map(|i| (i, n(1)))),
            "TRYTRUNC" => t.trunc_pending = Some(n(1)),
            "TRUNC" => {
                t.trunc_pending = None;
                let gone: Vec<u64> = t.acked.range(n(1)..).map(|(&i, _)| i).collect();
                for i in gone {
                    let term = t.acked.remove(&i).unwrap();
                    t.dead.insert((i, term));
                }
            }
            "TRYPURGE" => t.floor_pending = Some(n(1)),
            "PURGE" => t.floor = Some(n(1)),
            "COMMITTED" => {
                t.committed.insert((n(1), n(2)));
            }
            _ => {}
        }
    }
    t
}

/// Reopens the store in `dir` and checks it against `told`; Err names the
/// first violation. `lossy`: acknowledged entries may be missing (the
/// negative control counts them).
fn check(dir: &Path, told: &Told, lossy: bool) -> Result<(), String> {
    rt().block_on(async {
        let mut s = Store::open(dir, opts(true)).map_err(|e| format!("open fails: {e}"))?;
        let vote =
            s.read_vote().await.map_err(|e| format!("read_vote: {e}"))?.map(|v| v.leader_id.term);
        let vote_ok = vote == told.vote || (vote.is_some() && vote == told.vote_pending);
        if !vote_ok {
            return Err(format!(
                "vote {vote:?}, acknowledged {:?} (pending {:?})",
                told.vote, told.vote_pending
            ));
        }
        let st = s.get_log_state().await.map_err(|e| format!("get_log_state: {e}"))?;
        let purged = st.last_purged_log_id.map(|p| p.index);
        if purged < told.floor || (purged > told.floor && purged != told.floor_pending) {
            return Err(format!(
                "purged up to {purged:?}, acknowledged {:?} (pending {:?})",
                told.floor, told.floor_pending
            ));
        }
        let start = purged.map_or(0, |p| p + 1);
        let got =
            s.try_get_log_entries(start..).await.map_err(|e| format!("read {start}..: {e}"))?;
        let got: BTreeMap<u64, u64> =
            got.iter().map(|e| (e.get_log_id().index, e.get_log_id().leader_id.term)).collect();
        if let (Some(&l), Some(last)) = (got.keys().next_back(), st.last_log_id) {
            if l != last.index {
                return Err(format!("last entry {l} but the log state says {}", last.index));
            }
        }
        for (&i, &t) in &got {
            if !told.tried.contains(&(i, t)) {
                return Err(format!("entry {i} of term {t} was never appended"));
            }
            if told.dead.contains(&(i, t)) {
                return Err(format!(
                    "entry {i} of term {t} was truncated away (acknowledged) and came back"
                ));
            }
        }
        for (&i, &t) in &told.acked {
            let below_purge = purged.is_some_and(|p| i <= p);
            let cut = told.trunc_pending.is_some_and(|x| i >= x);
            match got.get(&i) {
                _ if below_purge => {}
                None if lossy || cut => {}
                None => return Err(format!("acknowledged entry {i} of term {t} is missing")),
                Some(&g) if g != t && !cut => {
                    return Err(format!("acknowledged entry {i} has term {g}, not {t}"))
                }
                _ => {}
            }
        }
        let committed = s.read_committed().await.map_err(|e| format!("read_committed: {e}"))?;
        if let Some(c) = committed {
            if !told.committed.contains(&(c.leader_id.term, c.index)) {
                return Err(format!("committed id {c} was never saved"));
            }
            if st.last_log_id.is_none_or(|l| c.index > l.index) {
                return Err(format!("committed id {c} is past the log's end {:?}", st.last_log_id));
            }
        }
        // The recovered store takes appends and keeps them.
        let next = st.last_log_id.map_or(0, |l| l.index + 1);
        s.save_vote(&Vote::new_committed(ROUNDS + 1, 1))
            .await
            .map_err(|e| format!("vote after recovery: {e}"))?;
        s.blocking_append([blank(ROUNDS + 1, next)])
            .await
            .map_err(|e| format!("append after recovery: {e}"))?;
        drop(s);
        let mut s =
            Store::open(dir, opts(true)).map_err(|e| format!("reopen after recovery: {e}"))?;
        let e = s
            .try_get_log_entries(next..=next)
            .await
            .map_err(|e| format!("read after recovery: {e}"))?;
        if e.len() != 1 || e[0].get_log_id().leader_id.term != ROUNDS + 1 {
            return Err("the append after recovery did not stick".into());
        }
        Ok(())
    })
}

fn make(durable: bool) -> impl Fn(&Path) -> Command {
    move |mnt: &Path| {
        let mut c = Command::new(std::env::current_exe().unwrap());
        c.args(["workload", "--exact", "--ignored", "--nocapture", "--test-threads=1"])
            .env("MMAPKIT_RAFT_WORKLOAD", mnt.join("raft"));
        if !durable {
            c.env("MMAPKIT_RAFT_NOSYNC", "1");
        }
        c
    }
}

/// Runs the matrix; returns (survivors checked, violations).
fn matrix(durable: bool, lossy: bool) -> (u64, Vec<String>) {
    let (points, seeds) = size();
    let setup = |_: &Path| {};
    let make = make(durable);
    let total = calibrate(&setup, &make);
    let (mut survivors, mut bad) = (0, Vec::new());
    for p in crash_points(total, points, total) {
        let back = tempfile::tempdir().unwrap();
        let (run, crashed) = crash_run(back.path(), &make, CrashAt::Ops(p));
        assert!(run.crashed || run.status.success(), "point {p}: {}", run.stderr);
        let told = parse(&run.stdout);
        for mode in modes(p, seeds) {
            crashed.materialize(mode, back.path()).unwrap();
            survivors += 1;
            // Before the store's directory exists nothing was acknowledged.
            if !back.path().join("raft").exists() {
                if told.vote.is_some() {
                    bad.push(format!("crash after op {p} of {total}, {mode:?}: the store is gone after an acknowledged vote"));
                }
                continue;
            }
            if let Err(e) = check(&back.path().join("raft"), &told, lossy) {
                bad.push(format!("crash after op {p} of {total}, {mode:?}: {e}"));
            }
        }
    }
    println!(
        "raft store (durable: {durable}): {} ops, {survivors} survivors checked, {} violations",
        total,
        bad.len()
    );
    (survivors, bad)
}

fuse_tests! {
    raft_store_keeps_every_acknowledged_vote_entry_and_purge => {
        let (n, bad) = matrix(true, false);
        assert!(n > 100, "only {n} survivors");
        assert!(bad.is_empty(), "{} violation(s):\n{}", bad.len(), bad.join("\n"));
    };

    /// The negative control: acknowledging from the page cache must lose
    /// acknowledged entries under simulated power loss, or the matrix
    /// cannot see a missing sync.
    negative_control_raft_store_without_sync_loses_acknowledged_entries => {
        let (_, bad) = matrix(false, false);
        let lost = bad.iter().filter(|b| b.contains("is missing")).count();
        assert!(lost > 0, "durable: false lost no acknowledged entry: the simulator keeps unsynced data");
        println!("negative control: {lost} survivors lost acknowledged entries, e.g. {}", bad[0]);
    };
}

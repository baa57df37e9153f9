//! Crash matrix for the commit log: a child process (this test binary,
//! re-executed) appends batches with `SyncMode::Batch`, truncates and
//! purges, reporting every acknowledged operation through a pipe; the
//! parent SIGKILLs it at random moments, reopens the log and checks that
//! every acknowledged entry is present and intact, that nothing appears
//! that was never appended, and that indexes are contiguous.
//!
//! `MMAPKIT_CRASH_ROUNDS` overrides the number of kills (default 120).
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use mmapkit::log::{CommitLog, LogOptions, SyncMode};

mod common;
use common::Rng;

const CHILD_ENV: &str = "MMAPKIT_LOG_CRASH_CHILD";
const SEGMENT: u64 = 16 << 10;

/// The only payload ever written for (index, term): anything else found
/// in the log was never appended.
fn payload(index: u64, term: u64) -> Vec<u8> {
    let len = ((index * 7 + term * 13) % 180) as usize + 16;
    let mut v = vec![(index as u8) ^ (term as u8).rotate_left(3); len];
    v[..8].copy_from_slice(&index.to_le_bytes());
    v[8..16].copy_from_slice(&term.to_le_bytes());
    v
}

fn opts() -> LogOptions {
    LogOptions::default().segment_size(SEGMENT).sync(SyncMode::Batch)
}

/// Child: work on the log forever, printing what was acknowledged:
/// `A lo hi term` (append done), `t i` / `T i` (truncate_after started /
/// done), `p i` / `P i` (purge_before started / done).
fn child(dir: &Path, seed: u64) {
    let log = CommitLog::open(dir, opts()).expect("child open");
    let mut out = std::io::stdout().lock();
    let mut rng = Rng(seed | 1);
    let mut term = if log.is_empty() { 1 } else { log.term(log.last_index()).expect("term") };
    writeln!(out, "@R {} {}", log.first_index(), log.last_index()).unwrap();
    out.flush().unwrap();
    // Every other round is heavy on truncation and purging, so that kills
    // land inside them too.
    let (t_pct, p_pct) = if seed.is_multiple_of(2) { (8, 11) } else { (35, 50) };
    loop {
        let r = rng.below(100);
        if r < t_pct && log.len() > 2 {
            let back = rng.below(150).min(log.len() - 1);
            let i = log.last_index() - back;
            writeln!(out, "@t {i}").unwrap();
            out.flush().unwrap();
            log.truncate_after(i).expect("truncate");
            term += 1;
            writeln!(out, "@T {i}").unwrap();
        } else if r < p_pct {
            let i = log.first_index() + rng.below(log.len() + 1);
            writeln!(out, "@p {i}").unwrap();
            out.flush().unwrap();
            log.purge_before(i).expect("purge");
            writeln!(out, "@P {i}").unwrap();
        } else {
            let lo = log.last_index() + 1;
            let n = 1 + rng.below(6);
            let batch: Vec<(u64, Vec<u8>)> =
                (lo..lo + n).map(|i| (term, payload(i, term))).collect();
            let got = log.append(&batch).expect("append");
            assert_eq!(got, lo);
            writeln!(out, "@A {lo} {} {term}", lo + n - 1).unwrap();
        }
        out.flush().unwrap();
    }
}

#[test]
fn crash_child_entry() {
    // Runs only as the re-executed child.
    if let Ok(dir) = std::env::var(CHILD_ENV) {
        let seed =
            std::env::var("MMAPKIT_LOG_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
        child(Path::new(&dir), seed);
    }
}

/// The acknowledged state: entries `first..` with their terms.
#[derive(Default, Debug)]
struct Model {
    first: u64,
    terms: Vec<u64>,
}

impl Model {
    fn last(&self) -> u64 {
        self.first + self.terms.len() as u64 - 1
    }
}

#[test]
fn sigkill_matrix() {
    if std::env::var(CHILD_ENV).is_ok() {
        return;
    }
    let rounds: u64 =
        std::env::var("MMAPKIT_CRASH_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(120);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    let exe = std::env::current_exe().unwrap();
    let mut model = Model { first: 1, terms: Vec::new() };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let (mut acked_total, mut truncs, mut purges, mut trunc_kills) = (0u64, 0u64, 0u64, 0u64);
    for round in 0..rounds {
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child_entry", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, &dir)
            .env("MMAPKIT_LOG_CRASH_SEED", (round * 7919 + 17 + round % 2).to_string())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // Our lines start with '@' (libtest prints its own too).
                let Some(at) = line.find('@') else { continue };
                if tx.send(line[at + 1..].to_owned()).is_err() {
                    break;
                }
            }
        });
        // Wait until the child has recovered the log and reported its first
        // operation, then kill it after a random while (timed from its start,
        // a loaded machine may leave it no time to do anything).
        let ready = rx.recv_timeout(Duration::from_secs(30)).expect("child started");
        assert!(ready.starts_with("R "), "{ready}");
        let first_op = rx.recv_timeout(Duration::from_secs(30)).expect("child at work");
        std::thread::sleep(Duration::from_micros(500 + rng.below(30_000)));
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        reader.join().unwrap();
        // Replay what was acknowledged (and what was in flight).
        let mut in_flight_trunc: Option<u64> = None;
        let mut in_flight_purge: Option<u64> = None;
        for line in std::iter::once(first_op).chain(rx.try_iter()) {
            let f: Vec<u64> = line.split(' ').skip(1).map(|x| x.parse().unwrap()).collect();
            match line.as_bytes()[0] {
                b'A' => {
                    assert_eq!(f[0], model.last() + 1, "append not contiguous: {line}");
                    for _ in f[0]..=f[1] {
                        model.terms.push(f[2]);
                    }
                    acked_total += f[1] - f[0] + 1;
                }
                b't' => in_flight_trunc = Some(f[0]),
                b'T' => {
                    in_flight_trunc = None;
                    model.terms.truncate((f[0] + 1 - model.first) as usize);
                    truncs += 1;
                }
                b'p' => in_flight_purge = Some(f[0]),
                b'P' => in_flight_purge = None,
                _ => panic!("unexpected line {line}"),
            }
        }
        // Reopen (as the next writer would) and check.
        let log = CommitLog::open(&dir, opts())
            .unwrap_or_else(|e| panic!("round {round}: reopen failed: {e}"));
        let (first, last) = (log.first_index(), log.last_index());
        let must_last = in_flight_trunc.unwrap_or(model.last()).min(model.last());
        assert!(
            last >= must_last,
            "round {round}: acknowledged entries lost: last {last} < {must_last}"
        );
        let purge_bound = in_flight_purge.unwrap_or(0).max(model.first);
        assert!(first <= purge_bound, "round {round}: first {first} > {purge_bound}");
        assert!(first >= model.first, "round {round}: purged entries came back");
        let all = log.read(first, last + 1, None).unwrap_or_else(|e| panic!("round {round}: {e}"));
        assert_eq!(all.len() as u64, last + 1 - first, "round {round}: not contiguous");
        for e in all.iter() {
            // Never-appended data would not match its (index, term).
            assert_eq!(
                e.data(),
                payload(e.index(), e.term()),
                "round {round}: entry {} garbage",
                e.index()
            );
            if e.index() <= must_last {
                let want = model.terms[(e.index() - model.first) as usize];
                assert_eq!(
                    e.term(),
                    want,
                    "round {round}: acknowledged entry {} changed",
                    e.index()
                );
            }
        }
        log.verify().unwrap();
        if in_flight_purge.is_some() {
            purges += 1;
        }
        if in_flight_trunc.is_some() {
            trunc_kills += 1;
        }
        // The log as found is the new acknowledged state.
        model = Model { first, terms: all.iter().map(|e| e.term()).collect() };
        drop(all);
        drop(log);
    }
    eprintln!("{rounds} kills, {acked_total} acknowledged entries, {truncs} truncations acknowledged, kills during truncate_after: {trunc_kills}, during purge_before: {purges}");
    assert!(acked_total > 0, "the child did too little work to test anything");
}

//! The log store's own promises beyond openraft's suite: what survives a
//! reopen, crash leftovers, contiguity errors, the flush callback after a
//! sync, and readers racing purges and truncations.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use mmapkit::log::{CommitLog, LogOptions};
use mmapkit_raft::kv::KvConfig;
use mmapkit_raft::{LogStore, StoreOptions};
use openraft::storage::{RaftLogReader, RaftLogStorage, RaftLogStorageExt};
use openraft::{CommittedLeaderId, Entry, LogId, RaftLogId, Vote};

type Store = LogStore<KvConfig>;

fn id(term: u64, index: u64) -> LogId<u64> {
    LogId::new(CommittedLeaderId::new(term, 1), index)
}

fn blank(term: u64, index: u64) -> Entry<KvConfig> {
    Entry { log_id: id(term, index), payload: openraft::EntryPayload::Blank }
}

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Runtime::new().unwrap()
}

fn small() -> StoreOptions {
    StoreOptions::default().segment_size(4096)
}

#[test]
fn vote_entries_purge_point_and_committed_survive_a_reopen() {
    let d = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        s.blocking_append((0..200).map(|i| blank(1 + i / 100, i))).await.unwrap();
        s.save_vote(&Vote::new_committed(2, 1)).await.unwrap();
        s.purge(id(1, 49)).await.unwrap();
        s.truncate(id(2, 150)).await.unwrap();
        s.save_committed(Some(id(2, 120))).await.unwrap();
    });
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        assert_eq!(s.read_vote().await.unwrap(), Some(Vote::new_committed(2, 1)));
        let st = s.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, Some(id(1, 49)));
        assert_eq!(st.last_log_id, Some(id(2, 149)));
        assert_eq!(s.read_committed().await.unwrap(), Some(id(2, 120)));
        let got = s.try_get_log_entries(0..1000).await.unwrap();
        let ids: Vec<_> = got.iter().map(|e| *e.get_log_id()).collect();
        let want: Vec<_> = (50..150).map(|i| id(1 + i / 100, i)).collect();
        assert_eq!(ids, want);
    });
}

#[test]
fn a_purge_past_the_end_starts_a_new_generation_and_crash_leftovers_go() {
    let d = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        s.blocking_append((0..10).map(|i| blank(1, i))).await.unwrap();
        s.purge(id(3, 500)).await.unwrap();
        assert!(!d.path().join("log.0").exists());
        assert!(d.path().join("log.1").exists());
        s.blocking_append([blank(3, 501), blank(3, 502)]).await.unwrap();
    });
    // A crash between creating a generation and recording it leaves an orphan.
    std::fs::create_dir(d.path().join("log.7")).unwrap();
    std::fs::write(d.path().join("log.7/junk"), b"x").unwrap();
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        assert!(!d.path().join("log.7").exists(), "an orphan generation is deleted on open");
        let st = s.get_log_state().await.unwrap();
        assert_eq!(st.last_purged_log_id, Some(id(3, 500)));
        assert_eq!(st.last_log_id, Some(id(3, 502)));
        let got = s.try_get_log_entries(..).await.unwrap();
        assert_eq!(got.iter().map(|e| e.get_log_id().index).collect::<Vec<_>>(), [501, 502]);
        // Appends must continue the log.
        assert!(s.blocking_append([blank(3, 504)]).await.is_err());
    });
}

/// An entry at the wrong place is corruption: in the middle, reads of it
/// fail (never a short answer); as the last entry, the store does not open
/// (found by the raft_decode fuzz target: its id was taken unchecked, and
/// the store reported raft index 9 as the end of a log ending at 5).
#[test]
fn an_entry_stored_at_the_wrong_index_is_an_error_never_a_short_answer() {
    let d = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        s.blocking_append((0..5).map(|i| blank(1, i))).await.unwrap();
    });
    // Append, behind the store's back, entry 5 claiming to be raft index 9.
    let log_dir = d.path().join("log.0");
    let log = CommitLog::open(&log_dir, LogOptions::default()).unwrap();
    log.append(&[(1u64, serde_json::to_vec(&blank(1, 9)).unwrap())]).unwrap();
    drop(log);
    match Store::open(d.path(), small()) {
        Err(mmapkit_raft::Error::Log(e)) => {
            assert_eq!(e.kind(), mmapkit::ErrorKind::Corrupt, "{e}");
            assert!(e.to_string().contains("expected raft index 5"), "{e}");
        }
        Err(e) => panic!("not corruption: {e}"),
        Ok(_) => panic!("opened a store whose last entry is misplaced"),
    }
    // With a good entry after it, the store opens; reads of it fail.
    let log = CommitLog::open(&log_dir, LogOptions::default()).unwrap();
    log.append(&[(1u64, serde_json::to_vec(&blank(1, 6)).unwrap())]).unwrap();
    drop(log);
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        let e = s.try_get_log_entries(0..7).await.unwrap_err().to_string();
        assert!(e.contains("expected raft index 5"), "{e}");
        // The entries before it are still readable.
        assert_eq!(s.try_get_log_entries(0..5).await.unwrap().len(), 5);
    });
}

/// Bytes the log's CRC accepts but that are no raft entry were written
/// wrong or by something else: corruption, not a contiguity gap.
#[test]
fn an_entry_that_passes_its_crc_but_does_not_decode_is_corruption() {
    let d = tempfile::tempdir().unwrap();
    let rt = rt();
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        s.blocking_append((0..5).map(|i| blank(1, i))).await.unwrap();
    });
    let log_dir = d.path().join("log.0");
    {
        let log = CommitLog::open(&log_dir, LogOptions::default()).unwrap();
        log.append(&[(1u64, b"{not json".to_vec())]).unwrap();
        log.append(&[(1u64, serde_json::to_vec(&blank(1, 6)).unwrap())]).unwrap();
    }
    rt.block_on(async {
        let mut s = Store::open(d.path(), small()).unwrap();
        let e = s.try_get_log_entries(0..7).await.unwrap_err().to_string();
        assert!(e.contains("corrupt: raft entry 5") && !e.contains("contiguity"), "{e}");
    });
    // The last entry: opening reads it, and says the same.
    {
        let log = CommitLog::open(&log_dir, LogOptions::default()).unwrap();
        log.append(&[(1u64, b"[]".to_vec())]).unwrap();
    }
    match Store::open(d.path(), small()) {
        Err(mmapkit_raft::Error::Log(e)) => {
            assert_eq!(
                (e.kind(), e.path()),
                (mmapkit::ErrorKind::Corrupt, Some(log_dir.as_path())),
                "{e}"
            )
        }
        Err(e) => panic!("not corruption: {e}"),
        Ok(_) => panic!("opened over an entry that does not decode"),
    }
}

#[test]
fn the_flush_callback_fires_after_a_sync() {
    let d = tempfile::tempdir().unwrap();
    rt().block_on(async {
        let mut s = Store::open(d.path(), StoreOptions::default()).unwrap();
        for round in 0..5u64 {
            let before = s.log().sync_count();
            s.blocking_append([blank(1, round)]).await.unwrap();
            assert!(s.log().sync_count() > before, "acknowledged without a sync");
        }
    });
}

#[test]
fn readers_racing_purges_truncations_and_appends_see_whole_contiguous_ranges() {
    let d = tempfile::tempdir().unwrap();
    let rt = rt();
    let store = Store::open(d.path(), small()).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let mut r = store.clone();
            let stop = stop.clone();
            std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
                let mut reads = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let st = rt.block_on(r.get_log_state()).unwrap();
                    let got = rt.block_on(r.try_get_log_entries(0..u64::MAX)).unwrap();
                    let floor = st.last_purged_log_id.map_or(0, |p| p.index + 1);
                    for w in got.windows(2) {
                        assert_eq!(w[1].get_log_id().index, w[0].get_log_id().index + 1, "gap");
                    }
                    if let Some(f) = got.first() {
                        // Never below a purge point seen before the read.
                        assert!(
                            f.get_log_id().index >= floor,
                            "purged entry {} returned",
                            f.get_log_id().index
                        );
                    }
                    reads += 1;
                }
                reads
            })
        })
        .collect();
    rt.block_on(async {
        let mut s = store.clone();
        let mut next = 0u64;
        for round in 0..60u64 {
            s.blocking_append((next..next + 50).map(|i| blank(1 + round, i))).await.unwrap();
            next += 50;
            if round % 3 == 1 {
                s.truncate(id(1 + round, next - 20)).await.unwrap();
                next -= 20;
            }
            if round % 4 == 3 {
                let upto = next - 10;
                let st = s.get_log_state().await.unwrap();
                let e = s.try_get_log_entries(upto..upto + 1).await.unwrap();
                s.purge(*e[0].get_log_id()).await.unwrap();
                assert_eq!(s.get_log_state().await.unwrap().last_log_id, st.last_log_id);
            }
        }
    });
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}

/// Every call that fsyncs, renames or removes directories runs
/// off the async worker. On a current-thread runtime whose blocking pool
/// is one thread, kept busy by a gate that only an async task opens: work
/// moved to the pool waits behind the gate, so the call must yield and
/// let that task run; work done inline finishes before the task runs.
#[test]
fn storage_io_runs_off_the_async_workers() {
    use mmapkit_raft::kv::KvStateMachine;
    use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine};
    use std::collections::BTreeMap;

    /// Runs `f` behind the gate; whether the gate's opener ran meanwhile.
    async fn gated<T>(f: impl std::future::Future<Output = T>) -> (T, bool) {
        let (open, opened) = std::sync::mpsc::channel::<()>();
        let gate = tokio::task::spawn_blocking(move || {
            let _ = opened.recv();
        });
        let opener = tokio::spawn(async move {
            let _ = open.send(());
        });
        let out = f.await;
        let ran = opener.is_finished();
        opener.await.unwrap();
        gate.await.unwrap();
        (out, ran)
    }

    let d = tempfile::tempdir().unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .max_blocking_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let yielded: BTreeMap<&str, bool> = rt.block_on(async {
        let mut s = Store::open(d.path().join("log"), small()).unwrap();
        let mut sm = KvStateMachine::open(d.path().join("sm")).unwrap();
        let mut yielded = BTreeMap::new();
        let mut note = |op: &'static str, ran: bool| {
            *yielded.entry(op).or_insert(true) &= ran;
        };
        let mut next = 0u64;
        for round in 0..3u64 {
            let (r, ran) = gated(s.save_vote(&Vote::new_committed(round + 1, 1))).await;
            r.unwrap();
            note("save_vote", ran);
            let (r, ran) = gated(s.blocking_append((next..next + 20).map(|i| blank(1, i)))).await;
            r.unwrap();
            note("append", ran);
            let (r, ran) = gated(s.truncate(id(1, next + 15))).await;
            r.unwrap();
            note("truncate", ran);
            let (r, ran) = gated(s.purge(id(1, next + 5))).await;
            r.unwrap();
            note("purge", ran);
            next += 15;
            let mut builder = sm.get_snapshot_builder().await;
            let (snap, ran) = gated(builder.build_snapshot()).await;
            let snap = snap.unwrap();
            note("build_snapshot", ran);
            let (r, ran) = gated(sm.install_snapshot(&snap.meta, snap.snapshot)).await;
            r.unwrap();
            note("install_snapshot", ran);
            let (r, ran) = gated(sm.get_current_snapshot()).await;
            // Nothing was applied (the snapshots are empty): none.
            assert!(r.unwrap().is_none());
            note("get_current_snapshot", ran);
        }
        // Past the end: a new log generation, the old one removed.
        let (r, ran) = gated(s.purge(id(1, next + 100))).await;
        r.unwrap();
        note("purge", ran);
        yielded
    });
    assert_eq!(yielded.len(), 7);
    for (op, ran) in &yielded {
        assert!(*ran, "{op} ran its disk I/O on the async worker ({yielded:?})");
    }
}

/// Entries written before `Cas` existed carry no `ok`: they took effect.
#[test]
fn a_response_without_ok_reads_as_ok() {
    let r: mmapkit_raft::kv::Response = serde_json::from_str(r#"{"previous":"x"}"#).unwrap();
    assert_eq!(r, mmapkit_raft::kv::Response { previous: Some("x".into()), ..Default::default() });
}

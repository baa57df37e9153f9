//! A commit log reopens as it was acknowledged: a batch larger than the
//! empty tail, its segment size, an empty duplicate segment set aside, and
//! corruption of an early batch told from a torn tail.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit::Error;

mod common;
use common::*;

#[test]
fn a_batch_too_big_for_the_empty_tail_stays_readable_after_reopen() {
    // One entry larger than the (empty) first segment.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    log.append(&[(1, vec![b'x'; 5000])]).unwrap();
    drop(log);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!(payloads(&log), vec![vec![b'x'; 5000]]);
    log.verify().unwrap();
    drop(log);

    // `seq 1 2000 | log append` with 4 KiB segments: batches of 1000 lines.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    let lines: Vec<Vec<u8>> = (1..=2000).map(|i| i.to_string().into_bytes()).collect();
    for chunk in lines.chunks(1000) {
        let b: Vec<(u64, &[u8])> = chunk.iter().map(|l| (0, l.as_slice())).collect();
        log.append(&b).unwrap();
    }
    drop(log);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!(payloads(&log), lines);

    // After dropping everything, a big batch again.
    log.truncate_after(0).unwrap();
    log.append(&[(2, vec![b'y'; 9000]), (2, vec![b'z'; 10])]).unwrap();
    drop(log);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!(payloads(&log), vec![vec![b'y'; 9000], vec![b'z'; 10]]);
    log.verify().unwrap();
}

#[test]
fn the_log_remembers_its_segment_size() {
    let dir = tempfile::tempdir().unwrap();
    drop(CommitLog::open(dir.path(), opts(4096)).unwrap());
    // Reopened with the default options (64 MiB): roll-overs still make
    // 4 KiB segments.
    let log = CommitLog::open(dir.path(), LogOptions::default().sync(SyncMode::Never)).unwrap();
    for i in 0..100u32 {
        log.append(&[(1, vec![i as u8; 100])]).unwrap();
    }
    let st = log.stat().unwrap();
    assert!(st.segments.len() > 2, "{st:?}");
    for s in &st.segments {
        assert_eq!(s.size, 4096, "{st:?}");
    }
    assert_eq!(log.segment_size(), 4096);
}

#[test]
fn an_empty_duplicate_segment_left_by_the_old_bug_is_set_aside() {
    // What the old roll-over left: an empty segment and a full one, both
    // starting at index 1.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    drop(log);
    let empty = std::fs::read(&segments(dir.path())[0]).unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    log.append(&[(1, b"kept".as_slice())]).unwrap();
    drop(log);
    let seg = segments(dir.path())[0].clone();
    let name = seg.file_name().unwrap().to_str().unwrap().to_owned();
    let older = dir.path().join(name.replace("-00000001.seg", "-00000000.seg"));
    assert_ne!(older, seg);
    std::fs::write(&older, &empty).unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!(payloads(&log), vec![b"kept".to_vec()]);
    // Moved aside, not deleted.
    assert!(!older.exists());
    assert!(dir.path().join("quarantine").join(older.file_name().unwrap()).exists());
}

/// `seq 1 3000 | log append --batch 10` into one default segment (the CLI
/// syncs every batch: `--sync batch` by default).
fn three_hundred_batches(sync: SyncMode) -> (tempfile::TempDir, Vec<Vec<u8>>) {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 20).sync(sync)).unwrap();
    let lines: Vec<Vec<u8>> = (1..=3000).map(|i| i.to_string().into_bytes()).collect();
    for chunk in lines.chunks(10) {
        let b: Vec<(u64, &[u8])> = chunk.iter().map(|l| (0, l.as_slice())).collect();
        log.append(&b).unwrap();
    }
    (dir, lines)
}

/// `three_hundred_batches` with byte `at` of the first segment flipped: the
/// directory, the lines, the segment and its bytes after.
fn damaged_early_batch(
    sync: SyncMode,
    at: usize,
) -> (tempfile::TempDir, Vec<Vec<u8>>, std::path::PathBuf, Vec<u8>) {
    let (dir, lines) = three_hundred_batches(sync);
    let seg = segments(dir.path())[0].clone();
    let b = flip(&seg, at, 0xFF);
    (dir, lines, seg, b)
}

#[test]
fn a_damaged_early_batch_is_corruption_not_a_torn_tail() {
    for at in [64usize, 500, 30000, 60000] {
        let (dir, lines, seg, b) = damaged_early_batch(SyncMode::Batch, at);
        for read_only in [false, true] {
            match CommitLog::open(dir.path(), opts(1 << 20).read_only(read_only)) {
                Err(Error::Corrupt { path, detail }) => {
                    assert_eq!(path, seg, "flip at {at}");
                    assert!(detail.contains("entry "), "flip at {at}: {detail}");
                }
                other => panic!("flip at {at}: expected corruption, got {other:?}"),
            }
        }
        // The next writer did not overwrite anything either.
        assert_eq!(std::fs::read(&seg).unwrap(), b, "flip at {at}");

        // Repair keeps the valid prefix and moves the rest aside.
        let log = CommitLog::open(dir.path(), repairing(opts(1 << 20))).unwrap();
        let kept = payloads(&log);
        assert!(kept.len() < 3000 && kept.len().is_multiple_of(10), "flip at {at}");
        assert_eq!(kept[..], lines[..kept.len()], "flip at {at}");
        let r = log.recovery().clone();
        assert!(r.dropped_entries >= (3000 - kept.len()) as u64 - 10, "{r:?}");
        let q = r.quarantine.expect("quarantined");
        let cut = std::fs::read(&q).unwrap();
        let from = log.stat().unwrap().tail_used as usize;
        assert_eq!(cut[..], b[from..from + cut.len()], "flip at {at}");
        // Everything after the cut that was not zero is in the quarantine file.
        assert!(b[from + cut.len()..].iter().all(|&x| x == 0));
        log.verify().unwrap();
        drop(log);
        let log = CommitLog::open(dir.path(), opts(1 << 20)).unwrap();
        assert_eq!(payloads(&log), kept);
    }
}

/// The same damage in batches that were never synced (`sync=never`): every
/// later commit record says nothing was durable, so a power loss writing
/// pages back out of order could have caused it: a torn tail, cut from the
/// damaged batch on and quarantined.
#[test]
fn a_damaged_early_batch_never_synced_is_a_torn_tail() {
    for at in [64usize, 500, 30000, 60000] {
        let (dir, lines, _, b) = damaged_early_batch(SyncMode::Never, at);
        let log = CommitLog::open(dir.path(), opts(1 << 20)).unwrap();
        let kept = payloads(&log);
        assert!(kept.len() < 3000 && kept.len().is_multiple_of(10), "flip at {at}");
        assert_eq!(kept[..], lines[..kept.len()], "flip at {at}");
        let r = log.recovery().clone();
        assert_eq!(r.dropped_entries, (3000 - kept.len()) as u64, "flip at {at}: {r:?}");
        let cut = std::fs::read(r.quarantine.expect("quarantined")).unwrap();
        let from = log.stat().unwrap().tail_used as usize;
        assert!(from <= at && at < from + cut.len(), "flip at {at}");
        assert_eq!(cut[..], b[from..from + cut.len()], "flip at {at}");
        assert!(b[from + cut.len()..].iter().all(|&x| x == 0));
    }
}

#[test]
fn a_torn_batch_after_a_truncation_is_still_a_torn_tail() {
    // Truncation zeroes what it drops: the stale batches after the cut
    // would otherwise look like later batches after a torn one.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    log.append(&[(1, b"one".as_slice())]).unwrap();
    let cut = log.stat().unwrap().tail_used as usize;
    for i in 0..5u8 {
        log.append(&[(1, vec![i; 40]), (1, vec![i; 7])]).unwrap();
    }
    let end = log.stat().unwrap().tail_used as usize;
    log.truncate_after(1).unwrap();
    let seg = segments(dir.path())[0].clone();
    let b = std::fs::read(&seg).unwrap();
    assert!(b[cut..end + 16].iter().all(|&x| x == 0), "dropped bytes left");
    log.append(&[(2, b"torn".as_slice()), (2, b"batch")]).unwrap();
    let torn_end = log.stat().unwrap().tail_used as usize;
    drop(log);
    // Tear it: its commit record never reached the disk.
    let seg = segments(dir.path())[0].clone();
    let mut b = std::fs::read(&seg).unwrap();
    b[torn_end - 16..torn_end].fill(0);
    std::fs::write(&seg, &b).unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(payloads(&log), vec![b"one".to_vec()]);
    assert_eq!(log.recovery().dropped_entries, 2);
}

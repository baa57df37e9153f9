//! Entries handed out by the log never change afterwards, even when the
//! log truncates them away and reuses the space (they are slices of the
//! segment's mapping: a rewrite below the seal goes to a copy of the
//! segment while they are alive).
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use mmapkit::log::{CommitLog, LogOptions};

#[test]
fn entries_read_before_a_truncation_never_change() {
    let d = tempfile::tempdir().unwrap();
    let log = CommitLog::open(d.path(), LogOptions::default()).unwrap();
    let batch: Vec<(u64, Vec<u8>)> = (0..10u8).map(|i| (1, vec![b'a' + i; 100])).collect();
    log.append(&batch).unwrap();
    let held = log.read(1, 11, None).unwrap();
    let before: Vec<Vec<u8>> = held.iter().map(|e| e.data().to_vec()).collect();

    // Cut in the middle of the batch (commit record rewritten below the
    // seal), then reuse the space with different bytes.
    log.truncate_after(3).unwrap();
    let again: Vec<(u64, Vec<u8>)> = (0..7u8).map(|_| (2, vec![b'Z'; 100])).collect();
    log.append(&again).unwrap();
    log.truncate_after(0).unwrap();
    log.append(&again).unwrap();

    let after: Vec<Vec<u8>> = held.iter().map(|e| e.data().to_vec()).collect();
    assert_eq!(before, after, "entries held across a truncation changed");
    // The log itself has the new entries, and survives a reopen.
    assert_eq!(log.get(1).unwrap().data(), &[b'Z'; 100][..]);
    drop(held);
    drop(log);
    let log = CommitLog::open(d.path(), LogOptions::default()).unwrap();
    assert_eq!((log.first_index(), log.last_index()), (1, 7));
    assert!(log.read(1, 8, None).unwrap().iter().all(|e| e.data() == [b'Z'; 100] && e.term() == 2));
    // Without readers the rewrite happens in place (no copy left behind).
    log.truncate_after(2).unwrap();
    let names: Vec<String> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".seg") || n.contains("tmp"))
        .collect();
    assert_eq!(names.len(), 1, "{names:?}");
}

#[test]
fn truncating_back_to_the_end_of_a_sealed_segment_then_appending() {
    let d = tempfile::tempdir().unwrap();
    let opts = LogOptions::default().segment_size(4096);
    let log = CommitLog::open(d.path(), opts.clone()).unwrap();
    for i in 0..40u8 {
        log.append(&[(1, vec![i; 300])]).unwrap();
    }
    drop(log);
    // Reopened: the sealed segments are mapped sealed whole.
    let log = CommitLog::open(d.path(), opts.clone()).unwrap();
    let st = log.stat().unwrap();
    assert!(st.segments.len() >= 3, "{st:?}");
    let end_of_first = st.segments[1].first_index - 1;
    log.truncate_after(end_of_first).unwrap();
    log.append(&[(2, b"after".to_vec())]).unwrap();
    assert_eq!(log.get(end_of_first + 1).unwrap().data(), b"after");
    drop(log);
    let log = CommitLog::open(d.path(), opts).unwrap();
    assert_eq!(log.last_index(), end_of_first + 1);
    assert_eq!(log.get(end_of_first + 1).unwrap().data(), b"after");
    assert_eq!(log.get(1).unwrap().data(), &[0u8; 300][..]);
}

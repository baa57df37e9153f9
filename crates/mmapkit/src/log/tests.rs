//! Unit and model-based property tests of the log.

use super::format::{self, HEADER_LEN, REC};
use super::*;
use crate::test_util::{collect, flip, open_filled, opts, repairing, segments, synced};
use proptest::prelude::*;

#[test]
fn format_roundtrip_and_alignment() {
    assert_eq!(format::padded(0), 0);
    assert_eq!(format::padded(1), 16);
    assert_eq!(format::padded(16), 16);
    assert_eq!(format::frame_size(50), 80);
    let h = format::encode_header(42, 1 << 20, 8192);
    assert_eq!(
        format::decode_header(&h),
        Ok(format::Header { first: 42, file_len: Some(1 << 20), seg_size: Some(8192) })
    );
    // Headers written before the lengths were recorded still decode.
    let mut old = [0u8; format::HEADER_LEN];
    old[..16].copy_from_slice(&h[..16]);
    let crc = crc32c::crc32c(&old[..28]);
    old[28..].copy_from_slice(&crc.to_le_bytes());
    assert_eq!(
        format::decode_header(&old),
        Ok(format::Header { first: 42, file_len: None, seg_size: None })
    );
    let mut bad = h;
    bad[9] ^= 1;
    assert!(format::decode_header(&bad).is_err());
    // The all-zero record is never a valid entry (its CRC is not zero).
    assert_ne!(format::entry_crc(1, 0, b""), 0);
    assert_eq!(segment::parse_name(&segment::seg_name(7, 3)), Some((7, 3)));
    assert_eq!(segment::parse_name("00000000000000000007-00000003.seg.tmp"), None);
    assert_eq!(segment::parse_name("7-3.seg"), None);
}

#[test]
fn append_read_get_term() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 20)).unwrap();
    assert_eq!((log.first_index(), log.last_index(), log.len()), (1, 0, 0));
    assert_eq!(log.append(&[(1, b"a".as_slice()), (1, b"bb")]).unwrap(), 1);
    assert_eq!(log.append(&[(2, b"".as_slice())]).unwrap(), 3);
    assert_eq!(log.append::<&[u8]>(&[]).unwrap(), 4);
    assert_eq!((log.first_index(), log.last_index(), log.len()), (1, 3, 3));
    assert_eq!(
        collect(&log, 1, 4),
        vec![(1, 1, b"a".to_vec()), (2, 1, b"bb".to_vec()), (3, 2, vec![])]
    );
    assert_eq!(log.get(2).unwrap().data(), b"bb");
    assert_eq!(log.term(3).unwrap(), 2);
    assert!(log.read(0, 2, None).is_err());
    assert!(log.read(1, 5, None).is_err());
    assert!(log.read(3, 2, None).is_err());
    assert!(log.read(2, 2, None).unwrap().is_empty());
    // max_bytes: whole entries that fit, at least one.
    assert_eq!(log.read(1, 4, Some(0)).unwrap().len(), 1);
    assert_eq!(log.read(1, 4, Some(2)).unwrap().len(), 1);
    assert_eq!(log.read(1, 4, Some(3)).unwrap().len(), 3);
    assert_eq!(log.read(2, 4, Some(2)).unwrap().len(), 2);
}

#[test]
fn first_index_is_configurable_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let o = LogOptions { first_index: 100, ..opts(4096) };
    let log = CommitLog::open(dir.path(), o.clone()).unwrap();
    assert_eq!(log.append(&[(0, b"x")]).unwrap(), 100);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!((log.first_index(), log.last_index()), (100, 100));
    assert!(CommitLog::open(
        tempfile::tempdir().unwrap().path(),
        LogOptions { first_index: 0, ..opts(4096) }
    )
    .is_err());
    assert!(CommitLog::open(tempfile::tempdir().unwrap().path(), opts(100)).is_err());
}

#[test]
fn second_writer_is_refused_readers_are_not() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    log.append(&[(1, b"x")]).unwrap();
    // Same process: the flock does not conflict, the registry tells.
    let e = CommitLog::open(dir.path(), opts(4096)).unwrap_err();
    assert!(e.to_string().contains("already open for writing in this process"), "{e}");
    let ro = CommitLog::open(dir.path(), LogOptions { read_only: true, ..opts(4096) }).unwrap();
    assert_eq!(collect(&ro, 1, 2), vec![(1, 1, b"x".to_vec())]);
    assert!(matches!(ro.append(&[(1, b"y")]), Err(Error::ReadOnly { .. })));
    // Once the writer is closed, another may open.
    drop(log);
    CommitLog::open(dir.path(), opts(4096)).unwrap();
}

#[test]
fn rollover_and_oversized_entries() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    let big = vec![7u8; 10_000];
    for i in 0..100u64 {
        log.append(&[(i, vec![i as u8; 100])]).unwrap();
    }
    assert_eq!(log.append(&[(9, big.as_slice())]).unwrap(), 101);
    log.append(&[(10, b"after")]).unwrap();
    assert!(segments(dir.path()).len() > 3);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!(log.last_index(), 102);
    assert_eq!(log.get(101).unwrap().data(), &big[..]);
    assert_eq!(log.get(50).unwrap().data(), &[49u8; 100][..]);
    assert_eq!(log.read(1, 103, None).unwrap().len(), 102);
    assert_eq!(log.verify().unwrap().entries, 102);
}

#[test]
fn zero_ahead_is_on_by_default_for_batch_sync_only() {
    // sync=batch: the tail is zeroed ahead on append (DEFAULT_ZERO_AHEAD);
    // the entries read back the same as from a log without it.
    let seg = 4 << 20;
    let data: Vec<Vec<u8>> =
        (0..300u64).map(|i| vec![i as u8; 1 + (i as usize * 37) % 3000]).collect();
    let mut got = Vec::new();
    for (o, want_zeroed) in [(synced(seg), true), (opts(seg), false)] {
        let dir = tempfile::tempdir().unwrap();
        let log = CommitLog::open(dir.path(), o.clone()).unwrap();
        for c in data.chunks(7) {
            let b: Vec<(u64, &[u8])> = c.iter().map(|d| (3, d.as_slice())).collect();
            log.append(&b).unwrap();
        }
        let zeroed = log.tail().zeroed.load(Ordering::Relaxed);
        if want_zeroed {
            let s = log.read_state();
            assert!(zeroed >= s.tail_end + REC && zeroed >= DEFAULT_ZERO_AHEAD, "{zeroed}");
        } else {
            assert_eq!(zeroed, 0);
        }
        drop(log);
        let log = CommitLog::open(dir.path(), o).unwrap();
        assert_eq!(log.recovery().dropped_entries, 0);
        assert_eq!(log.verify().unwrap().entries, data.len() as u64);
        got.push(collect(&log, 1, data.len() as u64 + 1));
    }
    assert_eq!(got[0], got[1]);
    assert_eq!(got[0].iter().map(|e| e.2.clone()).collect::<Vec<_>>(), data);
    // set_zero_ahead(0) turns the default off.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), synced(seg)).unwrap();
    log.set_zero_ahead(0);
    log.append(&[(1, b"x")]).unwrap();
    assert_eq!(log.tail().zeroed.load(Ordering::Relaxed), 0);
}

#[test]
fn write_behind_thread_across_roll_overs_and_truncation() {
    // sync=never past WRITE_BEHIND bytes per segment (the write-behind
    // thread runs), across roll-overs and a truncation: everything reads
    // back, on this handle and after reopening (drop joins the thread).
    let dir = tempfile::tempdir().unwrap();
    let seg = (WRITE_BEHIND as u64) * 2;
    let log = CommitLog::open(dir.path(), opts(seg)).unwrap();
    let entry = |i: u64| vec![(i % 251) as u8; 60_000];
    let mut i = 1u64;
    while i <= 900 {
        let b: Vec<(u64, Vec<u8>)> = (i..i + 10).map(|k| (1, entry(k))).collect();
        log.append(&b).unwrap();
        i += 10;
    }
    assert!(segments(dir.path()).len() >= 3);
    assert!(log.behind.started(), "the write-behind thread was started");
    log.truncate_after(455).unwrap();
    let b: Vec<(u64, Vec<u8>)> = (456..466).map(|k| (2, entry(k + 1))).collect();
    log.append(&b).unwrap();
    let check = |log: &CommitLog| {
        assert_eq!(log.last_index(), 465);
        for k in [1u64, 200, 455] {
            assert_eq!(log.get(k).unwrap().data(), &entry(k)[..]);
        }
        assert_eq!(log.get(460).unwrap().data(), &entry(461)[..]);
        assert_eq!(log.verify().unwrap().entries, 465);
    };
    check(&log);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(seg)).unwrap();
    assert_eq!(log.recovery().dropped_entries, 0);
    check(&log);
}

#[test]
fn zero_ahead_writes_only_zeros_past_the_tail() {
    let dir = tempfile::tempdir().unwrap();
    let seg = 1 << 16;
    let log = CommitLog::open(dir.path(), opts(seg)).unwrap();
    log.set_zero_ahead(8192);
    // One-entry batches across pages and segments, a truncation, a big batch.
    for i in 0..600u64 {
        log.append(&[(i, vec![i as u8; 150])]).unwrap();
        let s = log.read_state();
        let tail = &s.segs.last().unwrap().file;
        let zeroed = tail.zeroed.load(Ordering::Relaxed);
        assert!(zeroed >= (s.tail_end + REC).min(tail.map.len()), "{zeroed} {}", s.tail_end);
        assert!(zeroed <= tail.map.len());
    }
    log.truncate_after(550).unwrap();
    log.append(&[(9, vec![1u8; 20_000])]).unwrap();
    assert!(segments(dir.path()).len() > 1);
    let (path, end) = {
        let s = log.read_state();
        (s.segs.last().unwrap().file.path(), s.tail_end)
    };
    drop(log);
    // Past the clean end: the zero record, then zeros (as fallocate left them).
    let bytes = std::fs::read(&path).unwrap();
    assert!(bytes[end..].iter().all(|&b| b == 0));
    let log = CommitLog::open(dir.path(), opts(seg)).unwrap();
    assert_eq!(log.recovery().dropped_entries, 0);
    assert_eq!(log.last_index(), 551);
    assert_eq!(log.get(300).unwrap().data(), &[43u8; 150][..]);
    assert_eq!(log.get(551).unwrap().data(), &[1u8; 20_000][..]);
    assert_eq!(log.verify().unwrap().entries, 551);
}

#[test]
fn truncate_mid_batch_and_at_boundary_survive_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    let batch: Vec<(u64, Vec<u8>)> = (0..10).map(|i| (1, vec![i as u8; 20])).collect();
    log.append(&batch).unwrap(); // 1..=10
    log.append(&batch).unwrap(); // 11..=20
    log.truncate_after(15).unwrap(); // mid-batch
    assert_eq!(log.last_index(), 15);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 15);
    assert_eq!(log.recovery().dropped_entries, 0);
    log.truncate_after(10).unwrap(); // at a batch boundary
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 10);
    // Re-append entries of identical sizes: the stale ones must not come back.
    log.append(&[(2, vec![0u8; 20])]).unwrap();
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 11);
    assert_eq!(log.term(11).unwrap(), 2);
    log.truncate_after(0).unwrap();
    assert!(log.is_empty());
    assert_eq!(log.append(&[(3, b"z")]).unwrap(), 1);
    assert!(log.truncate_after(5).is_ok()); // no-op past the end
}

#[test]
fn stale_single_entry_batches_are_not_resurrected() {
    // Raft-like: one entry per batch, same sizes; truncate and re-append.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    for _ in 0..20 {
        log.append(&[(1, [5u8; 30])]).unwrap();
    }
    log.truncate_after(5).unwrap();
    log.append(&[(2, [5u8; 30])]).unwrap();
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 6);
    assert_eq!(log.term(6).unwrap(), 2);
}

#[test]
fn truncate_across_segments_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    let data = |i: u64| [i.to_le_bytes(); 8].concat();
    for i in 1..=200u64 {
        log.append(&[(i, data(i))]).unwrap();
    }
    let n = segments(dir.path()).len();
    assert!(n >= 5, "{n}");
    log.truncate_after(100).unwrap();
    assert_eq!(log.last_index(), 100);
    assert!(segments(dir.path()).len() < n);
    log.append(&[(999, b"new")]).unwrap();
    log.purge_before(60).unwrap();
    let first = log.first_index();
    assert!(first <= 60 && first > 1, "{first}");
    assert!(log.get(first - 1).is_err());
    drop(log);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!((log.first_index(), log.last_index()), (first, 101));
    assert_eq!(log.get(101).unwrap().data(), b"new");
    assert_eq!(log.get(75).unwrap().data(), data(75));
    assert!(log.truncate_after(first - 2).is_err());
    log.purge_before(u64::MAX).unwrap(); // never drops the tail
    assert_eq!(log.last_index(), 101);
}

#[test]
fn torn_tail_is_dropped_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    log.append(&[(1, b"keep")]).unwrap();
    log.append(&[(1, b"torn1"), (1, b"torn2")]).unwrap();
    let end = log.stat().unwrap().tail_used as usize;
    drop(log);
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    bytes[end - REC..end].fill(0); // the commit record never made it
    std::fs::write(&seg, &bytes).unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 1);
    assert_eq!(log.recovery().dropped_entries, 2);
    assert!(log.recovery().dropped_bytes > 0);
    assert_eq!(log.append(&[(2, b"next")]).unwrap(), 2);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(collect(&log, 1, 3), vec![(1, 1, b"keep".to_vec()), (2, 2, b"next".to_vec())]);
    assert_eq!(log.recovery().dropped_bytes, 0);
}

#[test]
fn flipped_byte_in_tail_middle_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    // Synced batches: the later ones record that entry 1 was durable.
    let synced = synced(1 << 16);
    let log = CommitLog::open(dir.path(), synced.clone()).unwrap();
    for _ in 0..3 {
        log.append(&[(1, b"payload!")]).unwrap();
    }
    drop(log);
    let seg = segments(dir.path()).pop().unwrap();
    flip(&seg, HEADER_LEN + REC + 2, 0x40); // payload of entry 1
    let e = CommitLog::open(dir.path(), synced).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("entry 1"), "{e}");
    // With repair, everything from the damaged batch on is dropped and reported.
    let log = CommitLog::open(dir.path(), repairing(opts(1 << 16))).unwrap();
    assert!(log.is_empty());
    assert_eq!(log.recovery().dropped_entries, 3);
    assert_eq!(log.recovery().dropped_bytes, 3 * (32 + 32));
    assert_eq!(log.append(&[(2, b"fresh")]).unwrap(), 1);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(collect(&log, 1, 2), vec![(1, 2, b"fresh".to_vec())]);
}

/// Writes three unsynced one-entry batches (64 B each) to a new log in
/// `dir` and flips a payload byte of entry 2; the segment's bytes after.
fn three_unsynced_batches_with_entry_2_flipped(dir: &Path) -> Vec<u8> {
    drop(open_filled(dir, opts(1 << 16), 3, |_| (1, b"payload!".to_vec())));
    let seg = segments(dir).pop().unwrap();
    flip(&seg, HEADER_LEN + 64 + REC + 2, 0x40)
}

/// Without syncs nothing in the tail was ever known durable: damage there,
/// even followed by valid batches, may be a power loss that wrote pages
/// back out of order, so it is a torn tail (dropped, quarantined), not
/// corruption.
#[test]
fn flipped_byte_in_unsynced_tail_middle_is_a_torn_tail() {
    let dir = tempfile::tempdir().unwrap();
    let bytes = three_unsynced_batches_with_entry_2_flipped(dir.path());
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 1);
    let r = log.recovery();
    assert_eq!((r.dropped_entries, r.dropped_bytes), (2, 2 * 64));
    let q = std::fs::read(r.quarantine.as_ref().expect("quarantined")).unwrap();
    assert_eq!(q, bytes[HEADER_LEN + 64..HEADER_LEN + 3 * 64]);
}

/// Found by the raft_decode fuzz target: appending to a log that starts
/// near the largest index overflowed the last index (debug: a panic).
#[test]
fn an_append_past_the_largest_index_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), LogOptions { first_index: u64::MAX - 1, ..opts(4096) })
        .unwrap();
    let e = log.append(&[(1, b"a"), (1, b"b")]).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    assert_eq!(log.append(&[(1, b"a")]).unwrap(), u64::MAX - 1);
    assert!(log.append(&[(1, b"b")]).is_err());
    assert_eq!(log.last_index(), u64::MAX - 1);
}

/// Found by the log_recovery fuzz target: a tail segment longer than its
/// header records made a repairing open underflow (debug: a panic) while
/// restoring the recorded length; a longer segment anywhere is corruption.
#[test]
fn a_segment_longer_than_its_header_says_is_corrupt() {
    for (n, repair) in [(1, true), (1, false), (100, true)] {
        let dir = tempfile::tempdir().unwrap();
        drop(open_filled(dir.path(), opts(4096), n, |i| (1, vec![i as u8; 40])));
        let seg = segments(dir.path()).remove(0);
        let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
        f.set_len(f.metadata().unwrap().len() + 4096).unwrap();
        let o = LogOptions { repair, ..opts(4096) };
        let Err(e) = CommitLog::open(dir.path(), o) else { panic!("a longer segment opened") };
        assert_eq!((e.kind(), e.path()), (crate::ErrorKind::Corrupt, Some(seg.as_path())));
        let ro = LogOptions { read_only: true, ..opts(4096) };
        assert_eq!(
            CommitLog::open(dir.path(), ro).err().unwrap().kind(),
            crate::ErrorKind::Corrupt
        );
    }
}

#[test]
fn flipped_byte_in_sealed_segment_is_reported_by_read_and_verify() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_filled(dir.path(), opts(4096), 100, |i| (1, vec![i as u8; 40]));
    drop(log);
    let seg = segments(dir.path()).remove(0);
    flip(&seg, HEADER_LEN + 2 * 96 + REC + 5, 1); // entry 3's payload (96 B per batch)
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap(); // only the tail is scanned
    let e = log.verify().unwrap_err();
    assert_eq!(
        (e.kind(), e.path(), e.errno()),
        (crate::ErrorKind::Corrupt, Some(seg.as_path()), Some(libc::EIO))
    );
    assert!(e.to_string().contains("entry 3"), "{e}");
    assert!(e.to_string().contains(&*seg.file_name().unwrap().to_string_lossy()), "{e}");
    assert!(matches!(log.read(1, 10, None), Err(Error::Corrupt { .. })));
    assert!(log.get(90).is_ok());
}

#[test]
fn sync_modes_count_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let o = synced(1 << 16);
    let log = CommitLog::open(dir.path(), o).unwrap();
    for _ in 0..5 {
        log.append(&[(1, b"x")]).unwrap();
    }
    assert_eq!(log.sync_count(), 5);
    log.sync().unwrap();
    assert_eq!(log.sync_count(), 5); // nothing new to sync
    let dir2 = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir2.path(), opts(1 << 16)).unwrap();
    for _ in 0..5 {
        log.append(&[(1, b"x")]).unwrap();
    }
    assert_eq!(log.sync_count(), 0);
    assert_eq!("never".parse::<SyncMode>().unwrap(), SyncMode::Never);
    assert_eq!(
        "interval:10ms".parse::<SyncMode>().unwrap(),
        SyncMode::Interval(Duration::from_millis(10))
    );
    assert_eq!("2s".parse::<SyncMode>().unwrap(), SyncMode::Interval(Duration::from_secs(2)));
    assert!("sometimes".parse::<SyncMode>().is_err());
}

#[test]
fn group_commit_shares_syncs() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), synced(1 << 20)).unwrap();
    let per = 50;
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let log = &log;
            sc.spawn(move || {
                for _ in 0..per {
                    log.append(&[(t, [t as u8; 32])]).unwrap();
                }
            });
        }
    });
    assert_eq!(log.len(), 4 * per);
    assert!(log.sync_count() <= 4 * per, "{}", log.sync_count());
    for e in log.read(1, log.last_index() + 1, None).unwrap().iter() {
        assert_eq!(e.data(), [e.term() as u8; 32]);
    }
}

#[test]
fn appenders_waiting_for_a_running_sync_share_the_next_one() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), synced(1 << 20)).unwrap();
    // Pretend a sync is running: every appender writes, then waits for it.
    lock(&log.sync).running = true;
    std::thread::scope(|sc| {
        for t in 0..4u64 {
            let log = &log;
            sc.spawn(move || log.append(&[(t, [t as u8; 16])]).unwrap());
        }
        while log.last_index() < 4 {
            std::thread::yield_now();
        }
        assert_eq!(log.sync_count(), 0);
        let mut st = lock(&log.sync);
        st.running = false;
        log.synced.notify_all();
    });
    // The first appender to wake syncs everything; the others find it durable.
    assert_eq!(log.sync_count(), 1);
}

#[test]
fn concurrent_readers_see_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 14)).unwrap();
    let stop = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let (log, stop) = (&log, &stop);
        for _ in 0..2 {
            sc.spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let last = log.last_index();
                    // Batches are 7 entries with term = batch number.
                    assert_eq!(last % 7, 0, "a partial batch is visible");
                    if last > 0 {
                        let es = log.read(log.first_index(), last + 1, None).unwrap();
                        for e in es.iter() {
                            assert_eq!(e.term(), (e.index() - 1) / 7);
                            assert_eq!(e.data(), e.index().to_le_bytes());
                        }
                    }
                }
            });
        }
        for b in 0..300u64 {
            let batch: Vec<(u64, [u8; 8])> =
                (0..7).map(|k| (b, (b * 7 + k + 1).to_le_bytes())).collect();
            log.append(&batch).unwrap();
        }
        stop.store(true, Ordering::Relaxed);
    });
}

#[test]
fn reads_stay_valid_after_truncate_and_purge() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_filled(dir.path(), opts(4096), 100, |i| (1, vec![i as u8; 60]));
    let es = log.read(1, 101, None).unwrap();
    log.truncate_after(2).unwrap();
    log.purge_before(2).unwrap();
    // The segments are unlinked but still mapped by `es`.
    assert_eq!(es.get(99).unwrap().data(), [99u8; 60]);
}

// ----- model-based property test ------------------------------------------

#[derive(Clone, Debug)]
enum Op {
    Append(Vec<(u64, Vec<u8>)>),
    Truncate(u64),
    Purge(u64),
    Reopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => proptest::collection::vec((0u64..5, proptest::collection::vec(any::<u8>(), 0..300)), 0..6).prop_map(Op::Append),
        2 => (0u64..120).prop_map(Op::Truncate),
        1 => (0u64..120).prop_map(Op::Purge),
        1 => Just(Op::Reopen),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]
    #[test]
    fn matches_model(ops in proptest::collection::vec(op(), 1..40), zero in prop_oneof![Just(0usize), Just(1), Just(5000)]) {
        let dir = tempfile::tempdir().unwrap();
        let o = opts(4096);
        let mut log = Some(CommitLog::open(dir.path(), o.clone()).unwrap());
        log.as_ref().unwrap().set_zero_ahead(zero);
        // Model: first index and the entries from it.
        let mut first = 1u64;
        let mut model: Vec<(u64, Vec<u8>)> = Vec::new();
        for op in ops {
            let l = log.as_ref().unwrap();
            match op {
                Op::Append(b) => {
                    let got = l.append(&b).unwrap();
                    prop_assert_eq!(got, first + model.len() as u64);
                    model.extend(b);
                }
                Op::Truncate(i) => {
                    let r = l.truncate_after(i);
                    if i + 1 < first {
                        prop_assert!(r.is_err());
                    } else {
                        r.unwrap();
                        model.truncate((i + 1 - first).min(model.len() as u64) as usize);
                    }
                }
                Op::Purge(i) => {
                    l.purge_before(i).unwrap();
                    let nf = l.first_index();
                    prop_assert!(nf >= first && nf <= i.max(first));
                    prop_assert!(nf <= first + model.len() as u64);
                    model.drain(..(nf - first) as usize);
                    first = nf;
                }
                Op::Reopen => {
                    drop(log.take());
                    log = Some(CommitLog::open(dir.path(), o.clone()).unwrap());
                    log.as_ref().unwrap().set_zero_ahead(zero);
                    prop_assert_eq!(log.as_ref().unwrap().recovery().dropped_entries, 0);
                }
            }
            let l = log.as_ref().unwrap();
            prop_assert_eq!(l.first_index(), first);
            prop_assert_eq!(l.last_index(), first + model.len() as u64 - 1);
            let got: Vec<(u64, Vec<u8>)> = l.read(first, first + model.len() as u64, None).unwrap().iter().map(|e| (e.term(), e.data().to_vec())).collect();
            prop_assert_eq!(&got, &model);
        }
        let l = log.as_ref().unwrap();
        prop_assert_eq!(l.verify().unwrap().entries, model.len() as u64);
    }
}

/// Regression: truncating to the last entry of a segment that was opened
/// as a sealed (non-tail) one left it sealed whole, so the next append that
/// fits in it failed ("write inside the sealed prefix"). Found by
/// `matches_model` once commit records grew to 32 bytes.
#[test]
fn append_after_truncating_to_the_end_of_a_reopened_sealed_segment() {
    let dir = tempfile::tempdir().unwrap();
    let o = opts(4096);
    let log = CommitLog::open(dir.path(), o.clone()).unwrap();
    let sizes: [&[usize]; 9] = [
        &[0, 55, 36, 117, 277],
        &[165, 16, 266],
        &[278, 38],
        &[273, 263, 123],
        &[244],
        &[287, 83],
        &[205, 118],
        &[141],
        &[2, 202, 53, 174, 20],
    ];
    for b in sizes {
        let batch: Vec<(u64, Vec<u8>)> = b.iter().map(|&n| (1, vec![7u8; n])).collect();
        log.append(&batch).unwrap();
    }
    drop(log);
    assert_eq!(segments(dir.path()).len(), 2);
    let log = CommitLog::open(dir.path(), o.clone()).unwrap();
    log.truncate_after(19).unwrap(); // the last entry of the first segment
    assert_eq!(segments(dir.path()).len(), 1);
    assert_eq!(log.append(&[(2, b"next")]).unwrap(), 20);
    assert_eq!(segments(dir.path()).len(), 1, "the append fits in the first segment");
    drop(log);
    let log = CommitLog::open(dir.path(), o).unwrap();
    assert_eq!(collect(&log, 19, 21)[1], (20, 2, b"next".to_vec()));
}

/// A power loss while `truncate_after` zeroes what it cuts (one sync for
/// the whole range: any subset of its sectors may be on disk) leaves the
/// first cut batch torn and stale later batches whose watermarks say it
/// was durable. The segment's generation was bumped first and no batch
/// carries the new one: an interrupted cut, so a torn tail (found by
/// crashfs `log_batch_sync_with_truncate_after`). The same bytes in a
/// segment whose batches carry its current generation stay corruption.
#[test]
fn an_interrupted_truncation_is_a_torn_tail_not_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let synced = synced(1 << 16);
    let log = CommitLog::open(dir.path(), synced.clone()).unwrap();
    let mut cut = 0;
    for i in 0..6u64 {
        if i == 2 {
            cut = log.stat().unwrap().tail_used as usize;
        }
        log.append(&[(1, vec![i as u8; 200]), (1, vec![i as u8; 100])]).unwrap();
    }
    drop(log);
    let seg = segments(dir.path()).pop().unwrap();
    let mut bytes = std::fs::read(&seg).unwrap();
    // Part of the cut zeroed (from the record after the cut point, which
    // the truncation rewrites last), the later batches not yet.
    bytes[cut + REC..cut + REC + 300].fill(0);
    std::fs::write(&seg, &bytes).unwrap();
    let name = seg.file_name().unwrap().to_str().unwrap().to_owned();
    assert!(name.ends_with("-00000001.seg"), "{name}");

    // Not bumped: damage to durable data.
    let e = CommitLog::open(dir.path(), synced.clone()).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
    assert!(e.to_string().contains("entry 5"), "{e}");

    // Bumped first (as truncate_after does): an interrupted cut.
    std::fs::rename(&seg, dir.path().join(name.replace("-00000001.seg", "-00000002.seg"))).unwrap();
    let log = CommitLog::open(dir.path(), synced).unwrap();
    assert_eq!(log.last_index(), 4);
    let r = log.recovery().clone();
    assert_eq!(r.dropped_entries, 8);
    let q = std::fs::read(r.quarantine.expect("quarantined")).unwrap();
    assert_eq!(q[..], bytes[cut..cut + q.len()]);
    assert_eq!(log.append(&[(2, b"next")]).unwrap(), 5);
}

/// A segment as versions before the watermark wrote it: 16-byte commit
/// records (`first` is entry 1; each batch (term, payloads)).
fn legacy_segment(batches: &[&[&[u8]]]) -> Vec<u8> {
    let mut d = format::encode_header(1, 1 << 16, 1 << 16).to_vec();
    let mut index = 1u64;
    for b in batches {
        let first = index;
        let mut offs = Vec::new();
        for p in b.iter() {
            offs.push(d.len() as u64);
            format::encode_entry(&mut d, index, 7, p);
            index += 1;
        }
        let rec = format::commit_for(&d, first, &offs, 1);
        d.extend_from_slice(&rec);
    }
    d.resize(1 << 16, 0);
    d
}

#[test]
fn logs_with_old_16_byte_commit_records_still_open_read_and_append() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join(super::segment::seg_name(1, 1));
    std::fs::write(&seg, legacy_segment(&[&[b"a", b"bb"], &[b"ccc"]])).unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.recovery().dropped_bytes, 0);
    assert_eq!(
        collect(&log, 1, 4),
        vec![(1, 7, b"a".to_vec()), (2, 7, b"bb".to_vec()), (3, 7, b"ccc".to_vec())]
    );
    assert_eq!(log.append(&[(8, b"new")]).unwrap(), 4); // a 32-byte commit after old ones
    log.truncate_after(2).unwrap();
    assert_eq!(log.append(&[(9, b"x")]).unwrap(), 3);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.verify().unwrap().entries, 3);
    assert_eq!(collect(&log, 3, 4), vec![(3, 9, b"x".to_vec())]);
}

#[test]
fn old_logs_keep_the_old_rule_damage_before_a_later_batch_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let seg = dir.path().join(super::segment::seg_name(1, 1));
    let mut d = legacy_segment(&[&[b"first"], &[b"second"], &[b"third"]]);
    d[HEADER_LEN + REC + 1] ^= 1; // payload of entry 1
    std::fs::write(&seg, &d).unwrap();
    let e = CommitLog::open(dir.path(), opts(1 << 16)).unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }), "{e}");
}

#[test]
fn verify_is_the_same_for_every_thread_count_and_reports_the_first_bad_segment() {
    use crate::exec::{Progress, Threads};
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    // One batch per append: several sealed segments.
    (0..400u64).for_each(|i| assert_eq!(log.append(&[(1, [i as u8; 40])]).unwrap(), i + 1));
    let want = log.verify_with(Threads::ONE, &Progress::none()).unwrap();
    assert!(want.segments > 4, "{want:?}");
    let size: u64 = log.stat().unwrap().segments.iter().map(|s| s.size).sum();
    for t in [0, 2, 3, 8] {
        let p = Progress::watched();
        let r = log.verify_with(Threads::from(t), &p).unwrap();
        assert_eq!(
            (r.segments, r.entries, r.bytes),
            (want.segments, want.entries, want.bytes),
            "threads {t}"
        );
        assert_eq!((p.done(), p.total()), (size, size), "threads {t}");
    }
    drop(log);
    // Damage two sealed segments: the first one is named whatever the timing.
    let segs = segments(dir.path());
    for seg in [&segs[1], &segs[3]] {
        let mut bytes = std::fs::read(seg).unwrap();
        bytes[HEADER_LEN + REC + 5] ^= 1;
        std::fs::write(seg, &bytes).unwrap();
    }
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    let name = segs[1].file_name().unwrap().to_string_lossy().into_owned();
    for t in [1, 2, 3, 8] {
        let e = log.verify_with(Threads::from(t), &Progress::none()).unwrap_err();
        assert!(
            matches!(e, Error::Corrupt { .. }) && e.to_string().contains(&name),
            "threads {t}: {e}"
        );
    }
}

#[test]
fn stored_crc_matches_entry_crc_and_encode() {
    let d = tempfile::tempdir().unwrap();
    let log = CommitLog::open(d.path(), opts(4096)).unwrap();
    let payloads: Vec<Vec<u8>> = (0..40).map(|n| vec![n as u8; n * 7]).collect();
    let batch: Vec<(u64, &[u8])> = payloads.iter().map(|p| (3, p.as_slice())).collect();
    log.append(&batch).unwrap();
    for e in log.read(1, 41, None).unwrap().iter() {
        assert_eq!(e.crc(), entry_crc(e.index(), e.term(), e.data()));
        assert_eq!(e.crc(), format::encode_entry(&mut Vec::new(), e.index(), 3, e.data()));
        assert_ne!(e.crc(), entry_crc(e.index() + 1, e.term(), e.data()));
        assert_ne!(e.crc(), entry_crc(e.index(), e.term() + 1, e.data()));
    }
}

#[test]
fn wait_past_wakes_on_append_and_times_out() {
    let d = tempfile::tempdir().unwrap();
    let log = Arc::new(CommitLog::open(d.path(), opts(1 << 16)).unwrap());
    log.append(&[(1, b"a")]).unwrap();
    // Already past: returns at once.
    assert_eq!(log.wait_past(0, Duration::from_secs(5)).unwrap(), 1);
    // Nothing comes: times out with the last index.
    let t = Instant::now();
    assert_eq!(log.wait_past(1, Duration::from_millis(50)).unwrap(), 1);
    assert!(t.elapsed() >= Duration::from_millis(50));
    // An append from another thread wakes it long before the timeout.
    let l2 = log.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        l2.append(&[(1, b"b"), (1, b"c")]).unwrap();
    });
    let t = Instant::now();
    assert_eq!(log.wait_past(1, Duration::from_secs(30)).unwrap(), 3);
    assert!(t.elapsed() < Duration::from_secs(10));
    h.join().unwrap();
    // A read-only handle sees another handle's appends by refreshing.
    let ro = CommitLog::open(d.path(), LogOptions { read_only: true, ..opts(1 << 16) }).unwrap();
    let l2 = log.clone();
    let h = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        l2.append(&[(1, b"d")]).unwrap();
    });
    assert_eq!(ro.wait_past(3, Duration::from_secs(30)).unwrap(), 4);
    h.join().unwrap();
}

#[test]
fn append_with_crcs_stores_the_given_crcs_at_the_expected_index() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 20)).unwrap();
    log.append(&[(1, b"a".as_slice())]).unwrap();
    let ents = [(1u64, b"bb".as_slice()), (2, b"ccc")];
    let crcs: Vec<u32> =
        ents.iter().enumerate().map(|(k, (t, b))| entry_crc(2 + k as u64, *t, b)).collect();
    // Not the next index, or a CRC count that does not match: nothing written.
    assert!(log.append_with_crcs(3, &ents, &crcs).is_err());
    assert!(log.append_with_crcs(2, &ents, &crcs[..1]).is_err());
    assert_eq!(log.last_index(), 1);
    assert_eq!(log.append_with_crcs(2, &ents, &crcs).unwrap(), 2);
    assert_eq!(log.read(3, 4, None).unwrap().get(0).unwrap().crc(), crcs[1]);
    assert_eq!(collect(&log, 2, 4)[1], (3, 2, b"ccc".to_vec()));
    drop(log);
    let log = CommitLog::open(dir.path(), opts(1 << 20)).unwrap();
    assert_eq!(log.last_index(), 3);
    log.verify().unwrap();
}

#[test]
fn framed_batches_check_each_crc_and_append_as_append_does() {
    // The same entries through append and through a Framed batch (checked
    // CRCs, across roll-overs of small segments) give identical segments.
    let (d1, d2) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (plain, framed) = (
        CommitLog::open(d1.path(), opts(1 << 16)).unwrap(),
        CommitLog::open(d2.path(), opts(1 << 16)).unwrap(),
    );
    let payload = |i: u64| vec![i as u8; (i as usize * 37) % 5000];
    let mut b = Framed::new(1);
    let mut i = 1u64;
    while i <= 300 {
        let hi = (i + 1 + i % 13).min(301);
        let ents: Vec<(u64, Vec<u8>)> = (i..hi).map(|k| (k / 50, payload(k))).collect();
        plain.append(&ents).unwrap();
        b.reset(i);
        for (k, (t, p)) in ents.iter().enumerate() {
            let index = i + k as u64;
            assert_eq!(b.next_index(), index);
            // A wrong CRC (or one for another index) adds nothing.
            assert!(!b.push_checked(*t, p, entry_crc(index + 1, *t, p)));
            assert!(!b.push_checked(*t, p, entry_crc(index, *t, p) ^ 1));
            assert!(b.push_checked(*t, p, entry_crc(index, *t, p)));
        }
        assert_eq!(b.len(), ents.len());
        assert_eq!(b.payload_bytes(), ents.iter().map(|e| e.1.len()).sum::<usize>());
        assert_eq!(framed.append_framed(&mut b).unwrap(), i);
        i = hi;
    }
    assert_eq!(collect(&plain, 1, 301), collect(&framed, 1, 301));
    // A batch that does not start at the next index writes nothing; an
    // empty one writes nothing either.
    b.reset(5);
    assert!(b.push_checked(1, b"x", entry_crc(5, 1, b"x")));
    assert!(framed.append_framed(&mut b).is_err());
    b.reset(301);
    assert_eq!(framed.append_framed(&mut b).unwrap(), 301);
    assert_eq!(framed.last_index(), 300);
    drop((plain, framed));
    let (s1, s2) = (segments(d1.path()), segments(d2.path()));
    assert!(s1.len() > 3);
    assert_eq!(s1.len(), s2.len());
    for (x, y) in s1.iter().zip(&s2) {
        assert_eq!(std::fs::read(x).unwrap(), std::fs::read(y).unwrap(), "{}", x.display());
    }
    let log = CommitLog::open(d2.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 300);
    log.verify().unwrap();
}

#[test]
fn write_behind_keeps_every_entry_across_segments() {
    // Without Batch syncs, writeback of the tail is started every
    // WRITE_BEHIND bytes; appends go on past it, across roll-overs and a
    // truncation that moves the end back below what was submitted.
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(24 << 20)).unwrap();
    let payload = vec![7u8; 100_000];
    let batch: Vec<(u64, &[u8])> = (0..10).map(|_| (1, payload.as_slice())).collect();
    for _ in 0..60 {
        log.append(&batch).unwrap();
    }
    assert!(log.stat().unwrap().segments.len() >= 2);
    log.truncate_after(550).unwrap();
    for _ in 0..20 {
        log.append(&batch).unwrap();
    }
    assert_eq!(log.last_index(), 750);
    drop(log);
    let log = CommitLog::open(dir.path(), opts(24 << 20)).unwrap();
    assert_eq!(log.last_index(), 750);
    log.verify().unwrap();
    assert_eq!(log.get(700).unwrap().data(), &payload[..]);
}

fn ro(dir: &Path) -> CommitLog {
    CommitLog::open(dir, LogOptions { read_only: true, ..opts(4096) }).unwrap()
}

/// Issue 22, defect 1: a read-only view refreshed while the writer fills
/// its tail, then again after the writer rolled over, read the old tail
/// through the mapping sealed at the old tail's end ("segment should hold
/// entries 1..=N: entry 1 is missing: the segment ends early").
#[test]
fn refreshed_view_reads_a_former_tail_whole() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(64 << 10)).unwrap();
    let view = ro(dir.path());
    let mut n = 0u64;
    for round in 0..6 {
        for _ in 0..50 {
            n += 1;
            log.append(&[(round, vec![n as u8; 1000])]).unwrap();
        }
        view.refresh().unwrap();
        assert_eq!(view.last_index(), n);
        // Every entry, across the segments that were tails at a refresh.
        let got = view.read(1, n + 1, None).unwrap();
        assert_eq!(got.len() as u64, n);
        for (k, e) in got.iter().enumerate() {
            assert_eq!(e.data(), &vec![(k as u64 + 1) as u8; 1000][..], "entry {}", k + 1);
        }
    }
    assert!(segments(dir.path()).len() > 3);
}

/// A refresh that finds nothing changed keeps the view (no new mapping
/// of the tail, no scan); every change is still seen: appends in the tail
/// (an empty entry of term 0 too), a truncation inside it, a roll-over.
#[test]
fn refresh_keeps_an_unchanged_view_and_sees_every_change() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(64 << 10)).unwrap();
    log.append(&[(1, vec![1u8; 100])]).unwrap();
    let view = ro(dir.path());
    let tail = |v: &CommitLog| v.read_state().segs.last().unwrap().file.clone();
    let before = tail(&view);
    view.refresh().unwrap();
    assert!(Arc::ptr_eq(&before, &tail(&view)), "an unchanged tail was mapped again");
    log.append(&[(0, Vec::new())]).unwrap();
    view.refresh().unwrap();
    assert_eq!(collect(&view, 2, 3), vec![(2, 0, Vec::new())]);
    log.append(&[(2, vec![3u8; 10]), (2, vec![4u8; 10])]).unwrap();
    view.refresh().unwrap();
    assert_eq!(view.last_index(), 4);
    log.truncate_after(2).unwrap();
    view.refresh().unwrap();
    assert_eq!(view.last_index(), 2);
    log.append(&[(3, vec![5u8; 10])]).unwrap();
    view.refresh().unwrap();
    assert_eq!(collect(&view, 3, 4), vec![(3, 3, vec![5u8; 10])]);
    while segments(dir.path()).len() < 2 {
        log.append(&[(3, vec![6u8; 1000])]).unwrap();
    }
    view.refresh().unwrap();
    assert_eq!(view.last_index(), log.last_index());
    let t = tail(&view);
    view.refresh().unwrap();
    assert!(Arc::ptr_eq(&t, &tail(&view)));
}

/// A segment rewritten below its seal (a copy renamed over it) is not
/// read through the old file's mapping.
#[test]
fn refreshed_view_maps_a_rewritten_segment_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(64 << 10)).unwrap();
    for i in 0..200u64 {
        log.append(&[(1, vec![i as u8; 1000])]).unwrap();
    }
    let view = ro(dir.path());
    assert_eq!(view.read(1, 201, None).unwrap().len(), 200);
    // Back to a segment boundary inside the log, then new entries.
    let cut = segments(dir.path()).len();
    log.truncate_after(100).unwrap();
    for i in 0..150u64 {
        log.append(&[(2, vec![(i + 50) as u8; 700])]).unwrap();
    }
    view.refresh().unwrap();
    assert_eq!(view.last_index(), 250);
    let got = view.read(1, 251, None).unwrap();
    for e in got.iter() {
        let want = if e.index() <= 100 {
            (1, vec![(e.index() - 1) as u8; 1000])
        } else {
            (2, vec![(e.index() - 101 + 50) as u8; 700])
        };
        assert_eq!((e.term(), e.data().to_vec()), want, "entry {}", e.index());
    }
    assert!(cut > 1);
}

/// Issue 22 (log identity): every log gets a random id when created,
/// kept across reopens, seen by read-only views; a replaced directory is
/// seen as another log by a refresh.
#[test]
fn logs_have_an_identity_and_a_replaced_directory_is_told_apart() {
    let base = tempfile::tempdir().unwrap();
    let a = base.path().join("a");
    let log = CommitLog::open(&a, opts(4096)).unwrap();
    let id = log.identity().id.unwrap();
    assert_eq!(id.len(), 32);
    log.append(&[(1, b"old")]).unwrap();
    drop(log);
    let log = CommitLog::open(&a, opts(4096)).unwrap();
    assert_eq!(log.identity().id.as_deref(), Some(&*id));
    drop(log);
    let view = ro(&a);
    assert_eq!(view.identity().id.as_deref(), Some(&*id));
    // Replaced: moved away, a new log made in its place.
    std::fs::rename(&a, base.path().join("a.old")).unwrap();
    let new = CommitLog::open(&a, opts(4096)).unwrap();
    new.append(&[(2, b"new1"), (2, b"new2")]).unwrap();
    view.refresh().unwrap();
    let id2 = view.identity().id.unwrap();
    assert_ne!(id2, id);
    assert_eq!(collect(&view, 1, 3), vec![(1, 2, b"new1".to_vec()), (2, 2, b"new2".to_vec())]);
    // Deleted: a refresh fails instead of serving the old mapping.
    drop(new);
    std::fs::remove_dir_all(&a).unwrap();
    assert!(view.refresh().is_err());
}

/// Issue 22, defect 14: creating a log is atomic: the directory appears
/// with its first segment and id, or not at all; an empty directory made
/// beforehand is used.
#[test]
fn a_new_log_appears_whole() {
    let base = tempfile::tempdir().unwrap();
    let d = base.path().join("new");
    CommitLog::open(&d, opts(4096)).unwrap();
    assert_eq!(segments(&d).len(), 1);
    assert!(d.join("log-id").exists());
    ro(&d);
    // Nothing left beside it.
    let names: Vec<_> =
        std::fs::read_dir(base.path()).unwrap().flatten().map(|e| e.file_name()).collect();
    assert_eq!(names, vec![std::ffi::OsString::from("new")]);
    let e = base.path().join("empty");
    std::fs::create_dir(&e).unwrap();
    CommitLog::open(&e, opts(4096)).unwrap().append(&[(1, b"x")]).unwrap();
    assert_eq!(collect(&ro(&e), 1, 2), vec![(1, 1, b"x".to_vec())]);
}

/// Issue 22 (exact log matching): truncations are numbered and recorded
/// before they change anything; reads are tagged with the number
/// completed; `cut_since` tells a copy what to drop.
#[test]
fn truncations_are_recorded_and_reads_tagged() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    log.append(&[(0, b"x=1".as_slice()), (0, b"y=2"), (0, b"z=3")]).unwrap();
    let before = log.read(1, 4, None).unwrap();
    assert_eq!((log.identity().epoch, before.epoch()), (0, 0));
    assert_eq!(log.cut_since(0).unwrap(), None);
    // A same-term rewrite (same terms, different bytes) is visible as a truncation.
    log.truncate_after(1).unwrap();
    log.append(&[(0, b"y=999".as_slice()), (0, b"z=999")]).unwrap();
    assert_eq!((log.identity().epoch, log.identity().completed), (1, 1));
    assert_eq!(log.cut_since(0).unwrap(), Some(1));
    assert_eq!(log.cut_since(1).unwrap(), None);
    assert!(log.cut_since(2).is_err());
    assert_eq!(log.read(1, 4, None).unwrap().epoch(), 1);
    // No-op truncations are not recorded.
    log.truncate_after(10).unwrap();
    log.truncate_after(2).unwrap();
    log.truncate_after(0).unwrap();
    assert_eq!(log.identity().epoch, 3);
    assert_eq!(log.cut_since(1).unwrap(), Some(0));
    drop(log);
    // Durable, and seen by read-only views.
    let view = ro(dir.path());
    assert_eq!((view.identity().epoch, view.identity().completed), (3, 3));
    assert_eq!(view.cut_since(2).unwrap(), Some(0));
}

/// A crash between a truncation's intent and its end: the next writable
/// open closes it (it was not acknowledged: what is left stays, and
/// readers were told to drop everything after its index), and views
/// meanwhile count it as started only.
#[test]
fn an_interrupted_truncation_is_finished_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    for i in 0..20u64 {
        log.append(&[(1, vec![i as u8; 300])]).unwrap();
    }
    {
        let mut w = lock(&log.writer);
        log.cut_started(&mut w, 5).unwrap();
    }
    drop(log); // "crash": intent recorded, nothing cut
    let view = ro(dir.path());
    assert_eq!((view.identity().epoch, view.identity().completed), (1, 0));
    assert_eq!(view.read(1, 3, None).unwrap().epoch(), 0);
    drop(view);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    assert_eq!(log.last_index(), 20);
    assert_eq!((log.identity().epoch, log.identity().completed), (1, 1));
    assert_eq!(log.cut_since(0).unwrap(), Some(5));
    assert_eq!(log.append(&[(2, b"next")]).unwrap(), 21);
}

/// A torn tail cut by recovery is recorded as a truncation: a server may
/// have shipped the batches it drops.
#[test]
fn recovery_cuts_are_recorded() {
    let dir = tempfile::tempdir().unwrap();
    three_unsynced_batches_with_entry_2_flipped(dir.path());
    let log = CommitLog::open(dir.path(), opts(1 << 16)).unwrap();
    assert_eq!(log.last_index(), 1);
    assert_eq!(log.recovery().dropped_entries, 2);
    assert_eq!((log.identity().epoch, log.identity().completed), (1, 1));
    assert_eq!(log.cut_since(0).unwrap(), Some(1));
}

/// A read-only view whose index is stale (the writer rewrote the bytes
/// under it) reports an error instead of panicking on a length read from
/// the rewritten bytes (it used to panic with "range end index 4302514175
/// out of range").
#[test]
fn a_stale_view_never_panics_on_rewritten_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let log =
        CommitLog::open(dir.path(), LogOptions { sync: SyncMode::Never, ..opts(1 << 20) }).unwrap();
    for i in 0..50u64 {
        log.append(&[(1, vec![i as u8; 40])]).unwrap();
    }
    let view = ro(dir.path());
    // Another process overwrites the tail's bytes in place (what new
    // appends after a truncation do to a stale index).
    let seg = segments(dir.path()).pop().unwrap();
    let f = std::fs::OpenOptions::new().write(true).open(&seg).unwrap();
    use std::os::unix::fs::FileExt;
    f.write_all_at(&[0xff; 4096], HEADER_LEN as u64).unwrap();
    drop(f);
    for i in 1..=50 {
        let _ = view.read(i, 51, None).map(|e| e.iter().map(|x| x.data().len()).sum::<usize>());
    }
    drop(log);
}

/// The durable mark other processes read (`DIR/durable`): raised by
/// syncs, never past what a sync covered, lowered by truncations, a new
/// incarnation per writable open; without syncs only sealed segments
/// count.
#[test]
fn the_durable_mark_follows_syncs_and_truncations_for_readers() {
    let dir = tempfile::tempdir().unwrap();
    let log = CommitLog::open(dir.path(), opts(1 << 20).sync(SyncMode::Batch)).unwrap();
    let ro = CommitLog::open(dir.path(), LogOptions::default().read_only(true)).unwrap();
    let first = log.durable_mark().unwrap();
    assert_eq!(first.durable, 0);
    log.append(&[(1, b"a".as_slice()), (1, b"b".as_slice())]).unwrap();
    assert_eq!(log.durable_mark().unwrap().durable, 2);
    ro.refresh().unwrap();
    assert_eq!(ro.durable_mark(), log.durable_mark());
    log.truncate_after(1).unwrap();
    ro.refresh().unwrap();
    assert_eq!(ro.durable_mark().unwrap().durable, 1);
    drop(log);

    // Never: appends are not durable, the reopened tail is not either.
    let log = CommitLog::open(dir.path(), opts(1 << 20).sync(SyncMode::Never)).unwrap();
    let m = log.durable_mark().unwrap();
    assert_ne!(m.incarnation, first.incarnation);
    assert_eq!(m.durable, 0, "the unsynced tail counts as durable");
    log.append(&[(1, b"c".as_slice())]).unwrap();
    ro.refresh().unwrap();
    assert_eq!(ro.durable_mark().unwrap(), DurableMark { incarnation: m.incarnation, durable: 0 });
    log.sync().unwrap();
    ro.refresh().unwrap();
    assert_eq!(ro.durable_mark().unwrap().durable, 2);
    drop(log);
    // A log no writer of this version opened: no mark.
    std::fs::remove_file(dir.path().join(durable::FILE)).unwrap();
    ro.refresh().unwrap();
    assert_eq!(ro.durable_mark(), None);
}

#[test]
fn populate_ahead_changes_no_byte() {
    // sync=never, small batches past several populate-ahead windows and a
    // roll-over: the helper faults the tail in ahead of the stores; every
    // entry reads back, here and after reopening.
    let dir = tempfile::tempdir().unwrap();
    let seg = (POPULATE_AHEAD as u64) * 3;
    let log = CommitLog::open(dir.path(), opts(seg)).unwrap();
    let entry = |i: u64| vec![(i % 251) as u8; 100 + (i % 50) as usize];
    let n = 200_000u64;
    let mut i = 1u64;
    while i <= n {
        let b: Vec<(u64, Vec<u8>)> = (i..i + 10).map(|k| (1, entry(k))).collect();
        log.append(&b).unwrap();
        i += 10;
    }
    assert!(segments(dir.path()).len() >= 2, "rolled over");
    let tail = log.tail();
    assert!(tail.populated.load(Ordering::Relaxed) > tail.map.sealed(), "populated ahead");
    assert!(log.behind.started());
    let check = |log: &CommitLog| {
        let mut lo = 1u64;
        while lo <= n {
            let hi = (lo + 10).min(n + 1);
            for e in log.read(lo, hi, None).unwrap().iter() {
                assert_eq!(e.data(), &entry(e.index())[..], "entry {}", e.index());
            }
            lo = hi;
        }
    };
    check(&log);
    drop(log);
    check(&CommitLog::open(dir.path(), opts(seg)).unwrap());
}

//! Recovery of the commit log from damaged files: the tail cut (zeroed or
//! truncated) at every offset of the last batch, every byte of the last
//! batch flipped, a flipped byte in sealed data, and a full file system.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::path::{Path, PathBuf};

use mmapkit::log::CommitLog;
use mmapkit::Error;

mod common;
use common::*;

/// The segment size of most logs here.
const SEG: u64 = 1 << 16;

/// The newest segment file of the log in `dir`.
fn tail_segment(dir: &Path) -> PathBuf {
    segments(dir).pop().unwrap()
}

/// A log of three batches; returns the directory, the byte range of the
/// last batch in the tail segment, and the entries before it.
type Fixture = (tempfile::TempDir, std::ops::Range<usize>, Vec<(u64, u64, Vec<u8>)>);

fn three_batches() -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    // Synced: the later commit records say the earlier batches were durable.
    let synced = synced(SEG);
    let log = CommitLog::open(dir.path(), synced).unwrap();
    log.append(&[(1, b"first batch".as_slice()), (1, b"x")]).unwrap();
    log.append(&[(2, b"second".as_slice())]).unwrap();
    let before = entries(&log);
    let start = log.stat().unwrap().tail_used as usize;
    log.append(&[(3, b"the last batch, entry one".as_slice()), (3, b""), (3, b"three")]).unwrap();
    let end = log.stat().unwrap().tail_used as usize;
    drop(log);
    (dir, start..end, before)
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir().unwrap();
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.path().join(p.file_name().unwrap())).unwrap();
    }
    to
}

#[test]
fn cut_at_every_offset_of_the_last_batch_drops_exactly_that_batch() {
    let (dir, last, before) = three_batches();
    let seg = tail_segment(dir.path());
    let orig = std::fs::read(&seg).unwrap();
    for cut in last.clone() {
        for truncate_file in [false, true] {
            let d = copy_dir(dir.path());
            let s = d.path().join(seg.file_name().unwrap());
            if truncate_file {
                std::fs::write(&s, &orig[..cut]).unwrap();
            } else {
                let mut b = orig.clone();
                b[cut..].fill(0);
                std::fs::write(&s, &b).unwrap();
            }
            // A segment is preallocated whole: a shorter file was truncated
            // by something else (corruption, not a crash), and only repair
            // opens it.
            let o = if truncate_file {
                match CommitLog::open(d.path(), opts(SEG)) {
                    Err(Error::Corrupt { detail, .. }) => assert!(detail.contains("truncated")),
                    other => panic!("truncated at {cut}: expected corruption, got {other:?}"),
                }
                repairing(opts(SEG))
            } else {
                opts(SEG)
            };
            let log = CommitLog::open(d.path(), o).unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            // Zeroing bytes that were zero already (the epoch's high bytes) damages nothing.
            // (Also when repair gives a truncated file its zeros back.)
            if orig[cut..last.end].iter().all(|&b| b == 0) {
                assert_eq!(log.last_index(), 6, "cut at {cut}");
                continue;
            }
            assert_eq!(entries(&log), before, "cut at {cut} (truncated file: {truncate_file})");
            assert_eq!(log.last_index(), 3);
            let r = log.recovery();
            assert!(cut == last.start || r.dropped_bytes > 0, "cut at {cut}: nothing reported");
            // The log stays usable: the next append gets index 4 and survives reopening.
            if !truncate_file {
                assert_eq!(log.append(&[(9, b"after")]).unwrap(), 4);
                drop(log);
                let log = CommitLog::open(d.path(), opts(SEG)).unwrap();
                assert_eq!(log.last_index(), 4);
                assert_eq!(log.get(4).unwrap().data(), b"after");
            }
        }
    }
    // Uncut: all three batches.
    let log = CommitLog::open(dir.path(), opts(SEG)).unwrap();
    assert_eq!(log.last_index(), 6);
    assert_eq!(log.recovery().dropped_bytes, 0);
}

#[test]
fn flipping_any_byte_of_the_last_batch_drops_exactly_that_batch() {
    let (dir, last, before) = three_batches();
    let seg = tail_segment(dir.path());
    let orig = std::fs::read(&seg).unwrap();
    for at in last {
        for bit in [0x01u8, 0x80] {
            let d = copy_dir(dir.path());
            let mut b = orig.clone();
            b[at] ^= bit;
            std::fs::write(d.path().join(seg.file_name().unwrap()), &b).unwrap();
            let log = CommitLog::open(d.path(), opts(SEG))
                .unwrap_or_else(|e| panic!("flip at {at}: {e}"));
            assert_eq!(entries(&log), before, "flip at {at}");
            assert!(log.recovery().dropped_bytes > 0, "flip at {at} not reported");
            log.verify().unwrap();
        }
    }
}

#[test]
fn a_flipped_byte_before_the_last_batch_is_corruption_not_a_torn_tail() {
    let (dir, last, _) = three_batches();
    let seg = tail_segment(dir.path());
    flip(&seg, last.start - 46, 0x10); // payload of entry 3 ("second", then a 32-byte commit record)
    match CommitLog::open(dir.path(), opts(SEG)) {
        Err(e @ Error::Corrupt { .. }) => assert!(e.to_string().contains("entry 3"), "{e}"),
        other => panic!("expected corruption, got {other:?}"),
    }
}

#[test]
fn flipped_byte_in_sealed_data_is_reported_by_verify_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let log = open_filled(dir.path(), opts(4096), 300, |i| (i, i.to_le_bytes().to_vec()));
    drop(log);
    let segs = segments(dir.path());
    assert!(segs.len() >= 3);
    // Flip one payload byte of the 10th entry of the second segment:
    // 32-byte header, then 64 bytes per single-entry batch (entry 32,
    // commit record with its watermark 32).
    let victim = &segs[1];
    flip(victim, 32 + 9 * 64 + 16, 0xff);
    let log = CommitLog::open(dir.path(), opts(4096)).unwrap();
    let first_of_victim = first_index_of(victim);
    let bad = first_of_victim + 9;
    let e = log.verify().unwrap_err();
    assert!(matches!(e, Error::Corrupt { .. }));
    assert!(e.to_string().contains(&format!("entry {bad}")), "{e}");
    assert!(e.to_string().contains(victim.file_name().unwrap().to_str().unwrap()), "{e}");
    assert!(log.read(bad, bad + 1, None).is_err());
    // Other segments still read.
    assert_eq!(log.get(1).unwrap().data(), 0u64.to_le_bytes());
    assert_eq!(log.get(300).unwrap().data(), 299u64.to_le_bytes());
}

/// A small tmpfs: appends fail with DiskFull (never SIGBUS), the log
/// stays usable and reopens intact. Needs root for `mount`.
#[test]
fn full_filesystem_fails_cleanly() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: mounting a small tmpfs needs root");
        return;
    }
    let mnt = tempfile::tempdir().unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs"])
        .arg(mnt.path())
        .status()
        .is_ok_and(|s| s.success());
    if !ok {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    struct Umount(PathBuf);
    impl Drop for Umount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount").arg(&self.0).status();
        }
    }
    let _u = Umount(mnt.path().to_owned());
    let dir = mnt.path().join("wal");
    let o = opts(SEG).segment_size(128 << 10);
    let log = CommitLog::open(&dir, o.clone()).unwrap();
    let mut acked = 0u64;
    let err = loop {
        match log.append(&[(1, [acked as u8; 1000]), (1, [acked as u8; 1000])]) {
            Ok(_) => acked += 2,
            Err(e) => break e,
        }
        assert!(acked < 10_000, "never ran out of space");
    };
    assert!(matches!(err, Error::DiskFull { .. }), "{err}");
    assert_eq!((err.kind(), err.errno()), (mmapkit::ErrorKind::DiskFull, Some(libc::ENOSPC)));
    assert!(
        err.path().is_some_and(|p| p.parent() == Some(dir.as_path())),
        "names the segment: {err}"
    );
    assert!(err.to_string().contains("no space"), "{err}");
    assert!(acked > 100);
    // Still usable: reads work, a failed append again fails cleanly, no temp file is left.
    assert_eq!(log.len(), acked);
    assert!(log.append(&[(1, [0u8; 1000])]).is_err());
    assert_eq!(log.read(1, acked + 1, None).unwrap().len() as u64, acked);
    assert!(!std::fs::read_dir(&dir).unwrap().any(|e| e
        .unwrap()
        .path()
        .to_string_lossy()
        .ends_with(".tmp")));
    // Freeing space (compaction) lets appends continue.
    log.purge_before(acked / 2).unwrap();
    assert_eq!(log.append(&[(2, b"more")]).unwrap(), acked + 1);
    drop(log);
    let log = CommitLog::open(&dir, o).unwrap();
    assert_eq!(log.last_index(), acked + 1);
    for e in log.read(log.first_index(), acked + 1, None).unwrap().iter() {
        assert_eq!(e.data(), [((e.index() - 1) & !1) as u8; 1000]);
    }
    log.verify().unwrap();
}

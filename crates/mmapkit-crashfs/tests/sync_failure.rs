//! Fail-stop after a failed sync: crashfs makes an
//! fsync fail with EIO and drops the writes it should have made durable,
//! as a disk's writeback error does; a later fsync then succeeds without
//! bringing them back ("fsyncgate").
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs::{self, File};
use std::io::Write;

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit::ErrorKind;
use mmapkit_crashfs::{require_fuse, CrashFs, Mode};

/// The negative control: a program that retries the failed fsync is told
/// that its data is durable, and the power loss shows it is not. This is
/// what the fault mode models; trusting the retry is the bug.
#[test]
fn a_retried_fsync_succeeds_but_the_data_is_gone() {
    require_fuse!();
    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let p = m.path().join("f");
    let mut f = File::create(&p).unwrap();
    f.write_all(b"kept").unwrap();
    f.sync_all().unwrap();
    File::open(m.path()).unwrap().sync_all().unwrap();
    f.write_all(b" and lost").unwrap();
    m.fail_fsyncs(1);
    assert_eq!(f.sync_all().unwrap_err().raw_os_error(), Some(libc::EIO));
    // The retry "succeeds"...
    f.sync_all().unwrap();
    assert_eq!(m.failed_fsyncs(), 1);
    drop(f);
    // ... but they were never written.
    m.crash(Mode::DropAll).unwrap();
    assert_eq!(fs::read(back.path().join("f")).unwrap(), b"kept");
}

fn opts() -> LogOptions {
    LogOptions::default().sync(SyncMode::Batch).segment_size(1 << 20)
}

/// The log stops at the first failed sync: the append that hit it fails,
/// every later append, sync, truncation and read past the durable entries
/// fails too, saying why; after the power loss the reopened log holds
/// exactly the entries it acknowledged.
#[test]
fn the_log_stops_at_a_failed_sync_and_acknowledges_nothing_after_it() {
    require_fuse!();
    for zero_ahead in [true, false] {
        let back = tempfile::tempdir().unwrap();
        let m = CrashFs::mount(back.path()).unwrap();
        let dir = m.path().join("wal");
        let log = CommitLog::open(&dir, opts()).unwrap();
        if !zero_ahead {
            log.set_zero_ahead(0);
        }
        log.append(&[(1, b"one".as_slice())]).unwrap();
        log.append(&[(1, b"two".as_slice())]).unwrap();
        m.fail_fsyncs(1);
        let e = log.append(&[(1, b"three".as_slice())]).unwrap_err();
        assert_eq!(m.failed_fsyncs(), 1, "no fsync failed?");
        assert_eq!(e.errno(), Some(libc::EIO), "{e}");
        // Fail-stop: nothing later is accepted, and the error says why.
        let later: Vec<mmapkit::Result<()>> = vec![
            log.append(&[(1, b"four".as_slice())]).map(drop),
            log.sync(),
            log.truncate_after(1),
            log.purge_before(2),
            log.read(3, 4, None).map(drop),
        ];
        for r in later {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Failed, "{e}");
            assert!(e.to_string().contains("failed") && e.to_string().contains("reopen"), "{e}");
        }
        // What was durable stays readable.
        assert_eq!(log.read(1, 3, None).unwrap().len(), 2);
        drop(log);
        m.crash(Mode::DropAll).unwrap();
        let log = CommitLog::open(back.path().join("wal"), opts()).unwrap();
        let got: Vec<Vec<u8>> = log
            .read(1, log.last_index() + 1, None)
            .unwrap()
            .iter()
            .map(|e| e.data().to_vec())
            .collect();
        assert_eq!(got, vec![b"one".to_vec(), b"two".to_vec()], "zero_ahead={zero_ahead}");
        log.append(&[(2, b"after".as_slice())]).unwrap();
    }
}

/// Rows `from..to` of the test stores: row i holds `i` in every item.
fn rows(from: u64, to: u64, items: usize) -> Vec<u8> {
    (from..to)
        .flat_map(|i| std::iter::repeat_n(i as f64, items))
        .flat_map(f64::to_le_bytes)
        .collect()
}

/// An `ArrayStore` stops at a failed flush: the flush fails with EIO,
/// every later append, flush, resize and read past the rows flushed is
/// `Failed`, closing writes nothing; after the power loss the store holds
/// exactly the rows flushed. Rows of a page each make the failed sync
/// the data's; rows of one item keep everything in the header's page.
#[test]
fn an_array_store_stops_at_a_failed_flush_and_keeps_only_what_was_flushed() {
    use mmapkit::store::{ArrayStore, StoreOptions};
    require_fuse!();
    for items in [512usize, 1] {
        let back = tempfile::tempdir().unwrap();
        let m = CrashFs::mount(back.path()).unwrap();
        let p = m.path().join("a.npy");
        let row_shape: &[u64] = if items == 1 { &[] } else { &[items as u64] };
        let mut a =
            ArrayStore::create(&p, "'<f8'", 8, row_shape, &StoreOptions::default()).unwrap();
        a.append(&rows(0, 3, items)).unwrap();
        a.flush().unwrap();
        a.append(&rows(3, 8, items)).unwrap();
        m.fail_fsyncs(1);
        let e = a.flush().unwrap_err();
        assert_eq!(m.failed_fsyncs(), 1, "no fsync failed?");
        assert_eq!(e.errno(), Some(libc::EIO), "{e}");
        let mut out = vec![0u8; 8 * items];
        let later: Vec<mmapkit::Result<()>> = vec![
            a.append(&rows(8, 9, items)).map(drop),
            a.append_with(1, |_| Ok::<(), ()>(())).map(drop),
            a.flush(),
            a.reserve_rows(1 << 20),
            a.trim(),
            a.truncate_rows(3),
            a.gather_rows(&[5], &mut out),
        ];
        for r in later {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Failed, "{e}");
            assert_eq!(e.path(), Some(p.as_path()));
            assert!(
                e.to_string().contains("flush (msync of the") && e.to_string().contains("reopen"),
                "{e}"
            );
        }
        // The rows flushed stay readable.
        a.gather_rows(&[2], &mut out).unwrap();
        assert_eq!(out, rows(2, 3, items));
        assert_eq!(a.close().unwrap_err().kind(), ErrorKind::Failed);
        m.crash(Mode::DropAll).unwrap();
        let p = back.path().join("a.npy");
        let a = ArrayStore::open(&p, false, None).unwrap();
        assert_eq!((a.len(), a.data()), (3, rows(0, 3, items).as_slice()), "items={items}");
        drop(a);
        let mut a = ArrayStore::open(&p, true, None).unwrap();
        a.append(&rows(3, 4, items)).unwrap();
        a.close().unwrap();
    }
}

/// Makes `name` in the mount hold `content`, durably.
fn durable_file(m: &mmapkit_crashfs::Mount, name: &str, content: &[u8]) -> std::path::PathBuf {
    let p = m.path().join(name);
    let mut f = File::create(&p).unwrap();
    f.write_all(content).unwrap();
    f.sync_all().unwrap();
    File::open(m.path()).unwrap().sync_all().unwrap();
    p
}

/// The names in the mount's root (no temporary file left behind).
fn names(m: &mmapkit_crashfs::Mount) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(m.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    v.sort();
    v
}

/// A writer whose `finish(sync)` fails to sync fails the finish and never
/// renames its output into place: the destination keeps its old content,
/// before and after the power loss. (The writer is consumed by `finish`,
/// so nothing can be done with it afterwards.)
#[test]
fn a_writer_whose_sync_fails_leaves_the_destination_as_it_was() {
    use mmapkit::writer::{RecordWriter, StreamWriter, WriterOptions};
    require_fuse!();
    let opts = WriterOptions::default().sync(true);
    for stream in [false, true] {
        let back = tempfile::tempdir().unwrap();
        let m = CrashFs::mount(back.path()).unwrap();
        let p = durable_file(&m, "out", b"the old output");
        let records: Vec<[u8; 4096]> = (0..4u8).map(|i| [i; 4096]).collect();
        let finished = if stream {
            let mut w = StreamWriter::create(&p, 4096, &opts).unwrap();
            for r in &records {
                w.push(r).unwrap();
            }
            m.fail_fsyncs(1);
            w.finish()
        } else {
            let w = RecordWriter::create(&p, 4096, Some(4), &opts).unwrap();
            for (i, r) in records.iter().enumerate() {
                w.write(i as u64, r).unwrap();
            }
            m.fail_fsyncs(1);
            w.finish()
        };
        let e = finished.unwrap_err();
        assert_eq!(m.failed_fsyncs(), 1, "no fsync failed?");
        assert_eq!(e.errno(), Some(libc::EIO), "{e}");
        assert_eq!(fs::read(&p).unwrap(), b"the old output", "stream={stream}");
        assert_eq!(names(&m), ["out"]);
        m.crash(Mode::DropAll).unwrap();
        assert_eq!(
            fs::read(back.path().join("out")).unwrap(),
            b"the old output",
            "stream={stream}"
        );
    }
}

/// `replace` with a failed fsync: a rewrite leaves the original untouched
/// (never renamed over, no temporary file left) and reports EIO; in place
/// (`sync`), the EIO error says the file on disk may mix old and new.
/// After the power loss the survivor is the original, never half
/// replaced.
#[test]
fn replace_reports_a_failed_sync_and_a_rewrite_leaves_the_original() {
    use mmapkit::scan::{replace, ReplaceOptions, ScanOptions, Strategy};
    require_fuse!();
    let orig = b"a,b\nc,d\n".repeat(1000);
    // (pattern, replacement, strategy): a rewrite, then in place both ways.
    let cases: [(&[u8], &[u8], Strategy); 3] =
        [(b",", b", ", Strategy::Auto), (b",", b";", Strategy::Read), (b",", b";", Strategy::Mmap)];
    for (pat, rep, strategy) in cases {
        let back = tempfile::tempdir().unwrap();
        let m = CrashFs::mount(back.path()).unwrap();
        let p = durable_file(&m, "f.csv", &orig);
        m.fail_fsyncs(1);
        let ro = ReplaceOptions::default().fixed(true).sync(true);
        let e = replace(&p, pat, rep, &ro, &ScanOptions::new(strategy, 2)).unwrap_err();
        assert_eq!(m.failed_fsyncs(), 1, "no fsync failed?");
        assert_eq!(e.errno(), Some(libc::EIO), "{e}");
        assert_eq!(e.path(), Some(p.as_path()), "{e}");
        assert_eq!(names(&m), ["f.csv"]);
        if rep.len() != pat.len() {
            assert_eq!(fs::read(&p).unwrap(), orig, "the original was replaced");
        } else {
            assert!(e.to_string().contains("old and new"), "{e}");
        }
        m.crash(Mode::DropAll).unwrap();
        assert!(
            fs::read(back.path().join("f.csv")).unwrap() == orig,
            "{strategy:?}: not the original"
        );
    }
}

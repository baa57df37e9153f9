//! Log recovery and verify: a log built by the input's appends,
//! truncations and purges, then damaged by the input (bytes flipped or
//! overwritten, files cut short or removed), opened read-only, verified,
//! read, and opened writable (recovery, with or without repair). Never a
//! panic, and the views agree: a log that verifies reads back every entry
//! it counted; a writable open of it keeps exactly those entries; what a
//! writable open recovered verifies, takes an append and reopens with it.

use std::os::unix::fs::FileExt;
use std::path::Path;

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit::ErrorKind;

use crate::Input;

type Entries = Vec<(u64, u64, Vec<u8>)>;

fn all(log: &CommitLog) -> mmapkit::Result<Entries> {
    let got = log.read(log.first_index(), log.last_index() + 1, None)?;
    Ok(got.iter().map(|e| (e.index(), e.term(), e.data().to_vec())).collect())
}

fn build(dir: &Path, b: &mut Input<'_>, sync: SyncMode) {
    let opts =
        LogOptions::default().segment_size(4096).first_index(1 + (b.u8() % 4) as u64).sync(sync);
    let log = CommitLog::open(dir, opts).expect("create");
    for _ in 0..b.u8() % 12 {
        let op = b.u8();
        let at = |b: &mut Input<'_>| log.first_index() + b.u8() as u64 % (log.len() + 1);
        match op % 8 {
            0..=4 => {
                let batch: Vec<(u64, Vec<u8>)> = (0..1 + op / 8 % 3)
                    .map(|_| {
                        let len = b.u8() as usize * if op & 0x40 != 0 { 24 } else { 1 };
                        (b.u8() as u64, vec![b.u8(); len])
                    })
                    .collect();
                log.append(&batch).expect("append");
            }
            5 => log.truncate_after(at(b).max(log.first_index()) - 1).expect("truncate"),
            6 => log.purge_before(at(b)).expect("purge"),
            _ => log.sync().expect("sync"),
        }
    }
}

/// Damage: up to 8 operations on the files of the directory.
fn damage(dir: &Path, b: &mut Input<'_>) {
    for _ in 0..8 {
        if b.is_empty() {
            return;
        }
        let mut files: Vec<_> = std::fs::read_dir(dir)
            .expect("read_dir")
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
            .map(|e| e.path())
            .collect();
        if files.is_empty() {
            return;
        }
        files.sort();
        let op = b.u8();
        let p = &files[b.u8() as usize % files.len()];
        let f = std::fs::OpenOptions::new().read(true).write(true).open(p).expect("open");
        let len = f.metadata().expect("stat").len();
        let at = b.u16() as u64 % len.max(1);
        match op % 4 {
            0 => {
                let mut x = [0u8];
                let _ = f.read_at(&mut x, at);
                f.write_all_at(&[x[0] ^ b.u8().max(1)], at).expect("flip");
            }
            1 => {
                let n = (b.u8() % 33) as usize;
                f.write_all_at(b.take(n), at).expect("overwrite");
            }
            2 => f.set_len(at).expect("cut short"),
            _ => std::fs::remove_file(p).expect("remove"),
        }
    }
}

pub fn log_recovery(data: &[u8]) {
    let mut b = Input::new(data);
    let flags = b.u8();
    let sync = if flags & 1 != 0 { SyncMode::Batch } else { SyncMode::Never };
    let repair = flags & 2 != 0;
    let tmp = crate::scratch();
    let dir = tmp.path().join("log");
    build(&dir, &mut b, sync);
    damage(&dir, &mut b);

    // Read-only: open, verify, read everything.
    let ro_opts = LogOptions::default().read_only(true);
    let ro = CommitLog::open(&dir, ro_opts.clone());
    let mut clean: Option<Entries> = None;
    let mut torn: Option<u64> = None;
    if let Ok(log) = &ro {
        let read = all(log);
        match log.verify() {
            Ok(rep) => {
                let got = read.unwrap_or_else(|e| panic!("verify ok, read failed: {e}"));
                assert_eq!(got.len() as u64, rep.entries, "verify counted {rep:?}");
                assert_eq!(rep.entries, log.len());
                let first = log.first_index();
                assert!(got.iter().enumerate().all(|(k, e)| e.0 == first + k as u64));
                torn = rep.unreadable_tail.as_ref().map(|t| {
                    assert_eq!(t.first_index, log.last_index() + 1, "{rep:?}");
                    t.bytes
                });
                clean = Some(got);
            }
            Err(e) => assert!(read.is_err(), "verify failed ({e}), read all succeeded"),
        }
    }
    let ro = ro.map(drop);

    // Writable: recovery.
    let rw_opts = LogOptions::default().repair(repair).sync(SyncMode::Never);
    let rw = CommitLog::open(&dir, rw_opts);
    match (&ro, &rw) {
        (Ok(_), Err(e)) => panic!("opens read-only but not writable: {e}"),
        (Err(e), Ok(_)) if e.kind() == ErrorKind::Corrupt && !repair => {
            panic!("read-only open says corrupt ({e}), a writable one opened")
        }
        _ => {}
    }
    let Ok(rw) = rw else { return };
    let rep = rw.verify();
    if let Some(want) = &clean {
        let rep =
            rep.as_ref().unwrap_or_else(|e| panic!("verified read-only, not after recovery: {e}"));
        assert_eq!(rep.unreadable_tail, None);
        assert_eq!(&all(&rw).expect("read after recovery"), want, "entries after recovery");
        assert_eq!(rw.recovery().dropped_bytes, torn.unwrap_or(0), "{:?}", rw.recovery());
        assert_eq!(rw.recovery().quarantine.is_some(), torn.is_some(), "{:?}", rw.recovery());
    }
    if rep.is_err() {
        return;
    }
    // What recovery left takes an append and reopens with it.
    let mut want = all(&rw).expect("read after recovery");
    let next = rw.append(&[(7, b"after recovery")]).expect("append after recovery");
    assert_eq!(next, rw.last_index());
    want.push((next, 7, b"after recovery".to_vec()));
    drop(rw);
    let again = CommitLog::open(&dir, ro_opts).expect("reopen after recovery");
    let rep = again.verify().expect("verify after recovery and append");
    assert_eq!(rep.unreadable_tail, None);
    assert_eq!(all(&again).expect("read after reopen"), want);
}

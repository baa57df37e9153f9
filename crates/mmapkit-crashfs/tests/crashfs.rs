//! The crash file system itself: what survives a simulated power loss.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mmapkit_crashfs::{require_fuse, CrashAt, CrashFs, Mode, Options};

fn sync_dir(p: &Path) {
    File::open(p).unwrap().sync_all().unwrap();
}

#[test]
fn unsynced_write_is_lost_and_synced_write_survives() {
    require_fuse!();
    let back = tempfile::tempdir().unwrap();
    fs::write(back.path().join("old"), b"old content").unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let p = m.path();
    assert_eq!(fs::read(p.join("old")).unwrap(), b"old content");
    let mut a = File::create(p.join("a")).unwrap();
    a.write_all(b"synced").unwrap();
    a.sync_data().unwrap();
    sync_dir(p);
    a.write_all(b" and not").unwrap();
    // Reads see the pending state.
    assert_eq!(fs::read(p.join("a")).unwrap(), b"synced and not");
    fs::write(p.join("old"), b"overwritten, never synced").unwrap();
    fs::write(p.join("b"), b"never synced").unwrap();
    drop(a);
    assert!(m.op_count() > 5);
    m.crash(Mode::DropAll).unwrap();
    assert_eq!(fs::read(back.path().join("a")).unwrap(), b"synced");
    assert_eq!(fs::read(back.path().join("old")).unwrap(), b"old content");
    assert!(!back.path().join("b").exists());
}

#[test]
fn names_need_the_directory_sync_strict_and_ext4() {
    require_fuse!();
    for ext4 in [false, true] {
        let back = tempfile::tempdir().unwrap();
        fs::write(back.path().join("victim"), b"v").unwrap();
        let m = CrashFs::mount_with(back.path(), &Options { own_entry_on_fsync: ext4 }).unwrap();
        let p = m.path().to_owned();
        let f = File::create(p.join("new")).unwrap();
        f.sync_all().unwrap();
        fs::create_dir(p.join("d")).unwrap();
        fs::remove_file(p.join("victim")).unwrap();
        m.crash(Mode::DropAll).unwrap();
        assert_eq!(back.path().join("new").exists(), ext4, "ext4={ext4}");
        assert!(!back.path().join("d").exists());
        assert!(back.path().join("victim").exists(), "an unsynced unlink is undone");

        let m = CrashFs::mount(back.path()).unwrap();
        let p = m.path().to_owned();
        fs::write(p.join("t"), b"new").unwrap();
        File::open(p.join("t")).unwrap().sync_all().unwrap();
        fs::rename(p.join("t"), p.join("victim")).unwrap();
        sync_dir(&p);
        fs::hard_link(p.join("victim"), p.join("linked")).unwrap();
        let c = m.crash_state().unwrap();
        c.materialize(Mode::DropAll, back.path()).unwrap();
        assert_eq!(fs::read(back.path().join("victim")).unwrap(), b"new");
        assert!(!back.path().join("t").exists());
        assert!(!back.path().join("linked").exists(), "an unsynced link is undone");
        c.materialize(Mode::KeepAll, back.path()).unwrap();
        assert_eq!(fs::read(back.path().join("linked")).unwrap(), b"new");
    }
}

#[test]
fn truncate_and_fallocate_are_pending_until_fsync() {
    require_fuse!();
    let back = tempfile::tempdir().unwrap();
    fs::write(back.path().join("f"), vec![7u8; 10000]).unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let f = OpenOptions::new().write(true).open(m.path().join("f")).unwrap();
    f.set_len(100).unwrap();
    let g = File::create(m.path().join("g")).unwrap();
    sync_dir(m.path());
    g.set_len(5000).unwrap();
    let c = m.crash_state().unwrap();
    c.materialize(Mode::DropAll, back.path()).unwrap();
    assert_eq!(fs::read(back.path().join("f")).unwrap(), vec![7u8; 10000]);
    assert_eq!(fs::metadata(back.path().join("g")).unwrap().len(), 0);
    c.materialize(Mode::KeepAll, back.path()).unwrap();
    assert_eq!(fs::read(back.path().join("f")).unwrap(), vec![7u8; 100]);
    assert_eq!(fs::metadata(back.path().join("g")).unwrap().len(), 5000);
}

#[test]
fn mmap_stores_survive_msync_sync_only() {
    require_fuse!();
    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    for (name, sync) in [("async", false), ("sync", true)] {
        let path = m.path().join(name);
        let mut map = mmapkit::map::Map::create(&path, 8192).unwrap();
        map.flush_range(0, 8192, true).unwrap();
        map.as_mut_slice().unwrap()[4096..4100].copy_from_slice(b"DATA");
        map.flush_range(4096, 4, sync).unwrap();
    }
    sync_dir(m.path());
    m.crash(Mode::DropAll).unwrap();
    let a = fs::read(back.path().join("async")).unwrap();
    let s = fs::read(back.path().join("sync")).unwrap();
    assert_eq!(&s[4096..4100], b"DATA", "msync(MS_SYNC) must persist");
    assert_eq!(&a[4096..4100], &[0; 4], "msync(MS_ASYNC) must not count as a sync");
}

#[test]
fn keep_random_tears_and_reorders_whole_sectors() {
    require_fuse!();
    let back = tempfile::tempdir().unwrap();
    fs::write(back.path().join("f"), vec![b'o'; 64 << 10]).unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let f = OpenOptions::new().write(true).open(m.path().join("f")).unwrap();
    // Sixteen 4 KiB writes in order: a survivor with a later one but not an
    // earlier one is a reordering.
    for k in 0..16u64 {
        f.write_all_at(&vec![b'n'; 4096], k * 4096).unwrap();
    }
    let c = m.crash_state().unwrap();
    assert_eq!(c.pending(), (1, 0));
    let (mut torn, mut reordered) = (0, 0);
    for seed in 0..32 {
        c.materialize(Mode::KeepRandom { seed }, back.path()).unwrap();
        let got = fs::read(back.path().join("f")).unwrap();
        assert_eq!(got.len(), 64 << 10);
        for s in got.chunks(512) {
            assert!(s.iter().all(|&b| b == s[0]), "seed {seed}: a sector is partly written");
        }
        let pages: Vec<bool> = got.chunks(4096).map(|p| p.iter().all(|&b| b == b'n')).collect();
        torn += got.chunks(4096).filter(|p| p.contains(&b'n') && p.contains(&b'o')).count();
        reordered += usize::from(pages.windows(2).any(|w| !w[0] && w[1]));
    }
    assert!(torn > 0 && reordered > 0, "torn {torn}, reordered {reordered}");
}

#[test]
fn run_crashes_a_workload_after_n_ops_on_a_marker_and_on_time() {
    require_fuse!();
    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let script = |dir: &Path| {
        let mut c = Command::new("sh");
        c.arg("-c").arg(format!(
            "cd {} && for i in 1 2 3 4 5 6; do echo $i > f$i && sync f$i && sync . && echo done $i || exit 3; done",
            dir.display()
        ));
        c
    };
    let before = m.op_count();
    let r = m
        .run(script(m.path()), CrashAt::Marker("done 2".into(), 1), Duration::from_secs(20))
        .unwrap();
    assert!(r.crashed && r.ops > before);
    let c = m.crash_state().unwrap();
    c.materialize(Mode::DropAll, back.path()).unwrap();
    assert!(back.path().join("f2").exists(), "acknowledged before the marker");

    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let mut sleepy = Command::new("sh");
    sleepy
        .arg("-c")
        .arg(format!("echo x > {}/early && sync {0}/early {0} && sleep 60", m.path().display()));
    // The crash comes 8 s in: the write and sync before it take milliseconds,
    // with room for a loaded machine (2 s was a bet on the load).
    let r = m.run(sleepy, CrashAt::After(Duration::from_secs(8)), Duration::from_secs(50)).unwrap();
    assert!(r.crashed && !r.status.success());
    m.crash(Mode::DropAll).unwrap();
    assert_eq!(fs::read(back.path().join("early")).unwrap(), b"x\n");

    let back = tempfile::tempdir().unwrap();
    let m = CrashFs::mount(back.path()).unwrap();
    let r = m.run(script(m.path()), CrashAt::Never, Duration::from_secs(20)).unwrap();
    assert!(r.status.success() && !r.crashed, "{r:?}");
    let total = r.ops;
    drop(m);
    for n in 0..total {
        let back = tempfile::tempdir().unwrap();
        let m = CrashFs::mount(back.path()).unwrap();
        let r = m.run(script(m.path()), CrashAt::Ops(n), Duration::from_secs(20)).unwrap();
        assert!(r.crashed, "crash point {n} of {total}");
        m.crash(Mode::DropAll).unwrap();
        let acked = r.stdout.iter().filter(|l| l.starts_with("done")).count();
        for i in 1..=6 {
            let there = fs::read(back.path().join(format!("f{i}"))).ok();
            if i <= acked {
                assert_eq!(
                    there,
                    Some(format!("{i}\n").into_bytes()),
                    "crash point {n}: f{i} was acknowledged"
                );
            }
        }
    }
}

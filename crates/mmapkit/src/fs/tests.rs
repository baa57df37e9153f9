use super::*;
use std::io::Write;
use std::os::unix::fs::{symlink, FileTypeExt};

fn temps_in(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| parse_temp_name(&e.file_name()).is_some())
        .map(|e| e.path())
        .collect()
}

fn write_via(path: &Path, data: &[u8]) -> Result<()> {
    let mut a = AtomicFile::create(path, &[])?;
    a.file_mut().write_all(data).unwrap();
    a.commit(true)
}

#[test]
fn temp_names_round_trip() {
    let t = temp_path(Path::new("/x/data.csv"));
    let name = t.file_name().unwrap();
    assert_eq!(parse_temp_name(name), Some((OsStr::new("data.csv"), std::process::id())));
    assert_eq!(t.parent(), Some(Path::new("/x")));
    // Names with the marker inside still parse to the whole target name.
    let t = temp_path(Path::new("a.mmapkit-1-2.tmp"));
    assert_eq!(parse_temp_name(t.file_name().unwrap()).unwrap().0, OsStr::new("a.mmapkit-1-2.tmp"));
    assert_eq!(parse_temp_name(OsStr::new(".x.tmp")), None);
    assert_eq!(parse_temp_name(OsStr::new("x.mmapkit-1-2.tmp")), None);
}

#[test]
fn symlink_chain_is_written_through_and_stays_a_link() {
    let d = tempfile::tempdir().unwrap();
    let real = d.path().join("real.txt");
    fs::write(&real, b"old").unwrap();
    fs::set_permissions(&real, fs::Permissions::from_mode(0o640)).unwrap();
    symlink("real.txt", d.path().join("l1")).unwrap();
    symlink(d.path().join("l1"), d.path().join("l2")).unwrap();
    write_via(&d.path().join("l2"), b"new").unwrap();
    assert!(fs::symlink_metadata(d.path().join("l2")).unwrap().file_type().is_symlink());
    assert!(fs::symlink_metadata(d.path().join("l1")).unwrap().file_type().is_symlink());
    assert_eq!(fs::read(&real).unwrap(), b"new");
    assert_eq!(fs::metadata(&real).unwrap().mode() & 0o7777, 0o640);
    assert!(temps_in(d.path()).is_empty());
}

#[test]
fn dangling_symlink_creates_its_target() {
    let d = tempfile::tempdir().unwrap();
    symlink("made.txt", d.path().join("dangling")).unwrap();
    write_via(&d.path().join("dangling"), b"x").unwrap();
    assert_eq!(fs::read(d.path().join("made.txt")).unwrap(), b"x");
    assert!(fs::symlink_metadata(d.path().join("dangling")).unwrap().file_type().is_symlink());
}

#[test]
fn hard_link_replaces_only_the_name_written() {
    let d = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    fs::write(&a, b"old").unwrap();
    fs::hard_link(&a, d.path().join("b")).unwrap();
    write_via(&a, b"new").unwrap();
    assert_eq!(fs::read(&a).unwrap(), b"new");
    assert_eq!(fs::read(d.path().join("b")).unwrap(), b"old");
}

/// A backup's hard link is made under a registered temp name: a signal's
/// cleanup removes it (it used to be an unregistered name left behind),
/// and renamed into place it is the original's inode.
#[test]
fn link_of_is_a_registered_temp_file_of_the_same_inode() {
    use std::os::unix::fs::MetadataExt;
    let d = tempfile::tempdir().unwrap();
    let (orig, bak) = (d.path().join("f"), d.path().join("f.bak"));
    fs::write(&orig, b"data").unwrap();
    fs::write(&bak, b"older backup").unwrap();
    let t = TempFile::link_of(&orig, &bak).unwrap();
    assert!(live_temp_files().contains(&t.path().to_path_buf()));
    assert_eq!(temps_in(d.path()), [t.path().to_path_buf()]);
    drop(t);
    assert!(temps_in(d.path()).is_empty(), "removed on drop");
    TempFile::link_of(&orig, &bak).unwrap().rename_to(&bak, true).unwrap();
    assert_eq!(fs::metadata(&bak).unwrap().ino(), fs::metadata(&orig).unwrap().ino());
    assert!(temps_in(d.path()).is_empty());
    let e = TempFile::link_of(&d.path().join("missing"), &bak).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT), "{e}");
}

#[test]
fn in_place_opens_and_removals() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f");
    assert_eq!(open_in_place(&p, InPlace::Write).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    open_in_place(&p, InPlace::Create).unwrap().write_all(b"abc").unwrap();
    open_in_place(&p, InPlace::Create).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"abc", "Create keeps the content");
    open_in_place(&p, InPlace::Truncate).unwrap();
    assert_eq!(fs::read(&p).unwrap(), b"");
    assert!(open_in_place(&p, InPlace::Read).unwrap().write_all(b"x").is_err());
    assert!(remove_file(&p).unwrap());
    assert!(!remove_file(&p).unwrap(), "a missing file is not an error");
}

#[test]
fn fifo_directory_and_devices_are_refused_untouched() {
    let d = tempfile::tempdir().unwrap();
    let fifo = d.path().join("ff");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let e = AtomicFile::create(&fifo, &[]).unwrap_err().to_string();
    assert!(e.contains("ff") && e.contains("FIFO"), "{e}");
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    let e = AtomicFile::create(d.path(), &[]).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EISDIR));
    // /dev/null is a character device that is not our stdout (test harness
    // stdout is captured through a pipe or a file).
    if stdout_meta().is_some_and(|s| !same_file(&s, &fs::metadata("/dev/null").unwrap())) {
        let e = AtomicFile::create(Path::new("/dev/null"), &[]).unwrap_err().to_string();
        assert!(e.contains("character device"), "{e}");
    }
    assert!(temps_in(d.path()).is_empty());
}

#[test]
fn output_that_is_an_input_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let input = d.path().join("in.fa");
    fs::write(&input, b">r\nACGT\n").unwrap();
    symlink("in.fa", d.path().join("link")).unwrap();
    fs::hard_link(&input, d.path().join("hard")).unwrap();
    for out in ["in.fa", "link", "hard"] {
        let e = output_target(&d.path().join(out), &[&input]).unwrap_err().to_string();
        assert!(e.contains(out) && e.contains("input"), "{e}");
    }
    assert!(matches!(output_target(&d.path().join("other"), &[&input]), Ok(Target::File { .. })));
    assert!(matches!(output_target(Path::new("-"), &[&input]), Ok(Target::Stdout)));
    assert_eq!(fs::read(&input).unwrap(), b">r\nACGT\n");
}

#[test]
fn missing_directory_error_names_it() {
    let d = tempfile::tempdir().unwrap();
    let e = AtomicFile::create(&d.path().join("no/such/x"), &[]).unwrap_err().to_string();
    assert!(e.contains("no/such"), "{e}");
}

#[test]
fn dropped_temp_file_is_removed_and_unregistered() {
    let d = tempfile::tempdir().unwrap();
    let a = AtomicFile::create(&d.path().join("x"), &[]).unwrap();
    let tmp = a.temp_path().to_owned();
    assert!(tmp.exists());
    assert!(live_temp_files().contains(&tmp));
    drop(a);
    assert!(!tmp.exists());
    assert!(!live_temp_files().contains(&tmp));
    assert!(!d.path().join("x").exists());
}

#[test]
fn stale_temp_files_of_dead_processes_are_removed_live_ones_kept() {
    let d = tempfile::tempdir().unwrap();
    let target = d.path().join("out.csv");
    // A pid that is gone: a child that has been reaped.
    let mut dead = std::process::Command::new("true").spawn().unwrap();
    let dead_pid = dead.id();
    dead.wait().unwrap();
    let mut live = std::process::Command::new("sleep").arg("30").spawn().unwrap();
    let stale = d.path().join(format!(".out.csv.mmapkit-{dead_pid}-0.tmp"));
    let alive = d.path().join(format!(".out.csv.mmapkit-{}-0.tmp", live.id()));
    let other = d.path().join(format!(".other.mmapkit-{dead_pid}-0.tmp"));
    for p in [&stale, &alive, &other] {
        fs::write(p, b"partial").unwrap();
    }
    write_via(&target, b"done").unwrap();
    live.kill().unwrap();
    live.wait().unwrap();
    assert!(!stale.exists(), "a dead process's temp file of this target is removed");
    assert!(alive.exists(), "a live process's temp file is never removed");
    assert!(other.exists(), "only temp files of this target are removed");
    assert_eq!(fs::read(&target).unwrap(), b"done");
}

#[test]
fn remove_file_durably_removes_once_and_refuses_directories() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("meta.json");
    fs::write(&f, b"{}").unwrap();
    assert!(remove_file_durably(&f).unwrap());
    assert!(!f.exists());
    assert!(!remove_file_durably(&f).unwrap(), "nothing left to remove");
    let e = remove_file_durably(d.path()).unwrap_err();
    assert_eq!(e.path(), Some(d.path()));
}

//! kind, path and errno of errors from real failures: front ends decide by
//! these fields, so each must be right without looking at the text.

use std::path::Path;
use std::process::Command;

use crate::map::{Map, MapOptions, Mode};
use crate::scan::{self, ReplaceOptions, ScanOptions};
use crate::{Error, ErrorKind};

/// The fields of `e`, and its Display built from them.
fn fields(e: &Error) -> (ErrorKind, Option<&Path>, Option<i32>) {
    let shown = match e.path() {
        Some(p) => format!("{}: {}", p.display(), e.message()),
        None => e.message(),
    };
    assert_eq!(e.to_string(), shown);
    (e.kind(), e.path(), e.errno())
}

#[test]
fn missing_file_is_not_found_with_enoent_and_the_path() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("x: y").join("a: b");
    let e = Map::open(&p, Mode::Read).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::NotFound, Some(p.as_path()), Some(libc::ENOENT)));
    assert_eq!(e.message(), "open: No such file or directory");
}

#[test]
fn directory_is_a_directory() {
    let d = tempfile::tempdir().unwrap();
    let e = Map::open(d.path(), Mode::Read).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::IsADirectory, Some(d.path()), Some(libc::EISDIR)));
    let e = scan::replace(
        d.path(),
        b"a",
        b"b",
        &ReplaceOptions::default().fixed(true),
        &ScanOptions::default(),
    )
    .unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::IsADirectory, Some(d.path()), Some(libc::EISDIR)));
}

#[test]
fn fifo_is_not_a_file() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("ff");
    if !Command::new("mkfifo").arg(&p).status().is_ok_and(|s| s.success()) {
        eprintln!("skipped: no mkfifo");
        return;
    }
    let e = scan::keep_lines(&p, 1, &ScanOptions::default()).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::NotAFile, Some(p.as_path()), None));
    let e = crate::fs::output_target(&p, &[]).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::NotAFile, Some(p.as_path()), None));
}

#[test]
fn bad_pattern_is_an_invalid_argument_about_no_file() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f");
    std::fs::write(&p, b"abc").unwrap();
    let e = scan::count(&p, b"", &ScanOptions::default()).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::InvalidArgument, None, None));
    let regex = ReplaceOptions::default();
    let e = scan::replace(&p, b"(", b"x", &regex, &ScanOptions::default()).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::InvalidArgument, None, None));
    // Out of range for this file: an invalid argument that names it.
    let e = MapOptions::new().offset(10).open(&p).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::InvalidArgument, Some(p.as_path()), None));
}

/// Root ignores permission bits, so an immutable file (`chattr +i`, which
/// binds root too) is the real way to get EPERM; removed on drop.
struct Immutable<'a>(&'a Path);

impl Drop for Immutable<'_> {
    fn drop(&mut self) {
        let _ = Command::new("chattr").arg("-i").arg(self.0).status();
    }
}

#[test]
fn immutable_file_is_permission_denied() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("locked");
    std::fs::write(&p, b"abc").unwrap();
    if !Command::new("chattr").arg("+i").arg(&p).status().is_ok_and(|s| s.success()) {
        eprintln!(
            "skipped: chattr +i is not possible here (not root, or a file system without it)"
        );
        return;
    }
    let _undo = Immutable(&p);
    let e = Map::open(&p, Mode::ReadWrite).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::PermissionDenied, Some(p.as_path()), Some(libc::EPERM)));
}

#[test]
fn bad_npy_header_is_a_format_error() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("junk.npy");
    std::fs::write(&p, b"not an npy file at all, just text").unwrap();
    let e = crate::store::ArrayStore::open(&p, false, None).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::Format, Some(p.as_path()), None));
}

#[test]
fn errno_kinds() {
    for (errno, kind) in [
        (libc::ENOENT, ErrorKind::NotFound),
        (libc::EACCES, ErrorKind::PermissionDenied),
        (libc::EPERM, ErrorKind::PermissionDenied),
        (libc::EEXIST, ErrorKind::AlreadyExists),
        (libc::EISDIR, ErrorKind::IsADirectory),
        (libc::ENOTDIR, ErrorKind::NotADirectory),
        (libc::EINTR, ErrorKind::Interrupted),
        (libc::EIO, ErrorKind::Io),
    ] {
        let e = Error::io(Path::new("f"), "read", std::io::Error::from_raw_os_error(errno));
        assert_eq!(fields(&e), (kind, Some(Path::new("f")), Some(errno)));
    }
    // ENOSPC becomes DiskFull whatever the call.
    let e = Error::io(Path::new("f"), "write", std::io::Error::from_raw_os_error(libc::EDQUOT));
    assert_eq!(fields(&e), (ErrorKind::DiskFull, Some(Path::new("f")), Some(libc::ENOSPC)));
}

#[test]
fn npy_with_zero_byte_rows_names_its_file_once() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("empty-rows.npy");
    let mut dict = b"{'descr': '<i4', 'fortran_order': False, 'shape': (2, 0), }".to_vec();
    dict.resize(128 - 10 - 1, b' ');
    dict.push(b'\n');
    let mut bytes = b"\x93NUMPY\x01\x00".to_vec();
    bytes.extend_from_slice(&(dict.len() as u16).to_le_bytes());
    bytes.extend_from_slice(&dict);
    std::fs::write(&p, &bytes).unwrap();
    let e = crate::store::ArrayStore::open(&p, false, None).unwrap_err();
    assert_eq!(fields(&e), (ErrorKind::Format, Some(p.as_path()), None));
    assert!(e.message().starts_with("rows of zero bytes cannot be stored"), "{e}");
}

#[test]
fn os_message_is_the_c_library_text() {
    for errno in [libc::ENOENT, libc::EACCES, libc::ENOSPC, libc::EIO, 9999] {
        let e = std::io::Error::from_raw_os_error(errno);
        assert_eq!(format!("{} (os error {errno})", crate::os_message(&e)), e.to_string());
    }
    let e = std::io::Error::other("no errno here");
    assert_eq!(crate::os_message(&e), "no errno here");
}

#[test]
fn a_thread_panic_is_its_own_kind_not_a_bad_argument() {
    let payload = std::thread::spawn(|| panic!("boom")).join().unwrap_err();
    let e = Error::panicked("the writer thread", &*payload);
    assert_eq!((e.kind(), e.path(), e.errno()), (ErrorKind::Panicked, None, None));
    assert_eq!(e.message(), "the writer thread panicked: boom");
    let payload = std::thread::spawn(|| std::panic::panic_any(7)).join().unwrap_err();
    assert_eq!(Error::panicked("w", &*payload).message(), "w panicked");
}

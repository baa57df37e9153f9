use super::*;
use std::io::Write;

const MIB: u64 = 1 << 20;

#[test]
fn sparse_file_allocates_less_than_its_size() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sparse.bin");
    let mut f = fs::File::create(&path).unwrap();
    f.set_len(10 * MIB).unwrap();
    f.write_all(&[0xAB; 4096]).unwrap();
    f.sync_all().unwrap();
    drop(f);

    let info = file_info(&path).unwrap();
    let page = map::page_size() as u64;
    assert_eq!(info.path, path);
    assert_eq!(info.size, 10 * MIB);
    assert!(info.allocated > 0, "{info:?}");
    assert!(info.allocated < info.size, "{info:?}");
    assert_eq!(info.pages, (10 * MIB).div_ceil(page));
    assert!(info.resident <= info.size, "{info:?}");
    assert!(info.resident_pages <= info.pages, "{info:?}");
}

#[test]
fn empty_file_is_all_zeros() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("empty");
    fs::File::create(&path).unwrap();

    let info = file_info(&path).unwrap();
    assert_eq!(
        info,
        FileInfo {
            path: path.clone(),
            size: 0,
            allocated: 0,
            resident: 0,
            pages: 0,
            resident_pages: 0,
        }
    );
    assert_eq!(info.resident_fraction(), 0.0);
}

#[test]
fn directory_is_rejected_naming_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let err = file_info(dir.path()).unwrap_err();
    assert_eq!(
        (err.kind(), err.errno(), err.path()),
        (ErrorKind::IsADirectory, Some(libc::EISDIR), Some(dir.path()))
    );
    let msg = err.to_string();
    assert!(msg.contains(&*dir.path().to_string_lossy()), "{msg}");
    assert!(msg.contains("is a directory"), "{msg}");

    let err = evict(dir.path()).unwrap_err();
    assert!(err.to_string().contains("is a directory"), "{err}");
}

#[test]
fn missing_file_error_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("no-such-file");
    let err = file_info(&path).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err:?}");
    assert_eq!(err.path(), Some(path.as_path()));
    let msg = err.to_string();
    assert!(msg.contains(&*path.to_string_lossy()), "{msg}");

    let err = evict(&path).unwrap_err();
    assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
}

#[test]
fn fifo_is_rejected_without_blocking() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    let status = std::process::Command::new("mkfifo").arg(&path).status();
    if !matches!(status, Ok(s) if s.success()) {
        return; // no mkfifo on this system: nothing to test
    }
    let err = file_info(&path).unwrap_err();
    assert_eq!((err.kind(), err.path()), (ErrorKind::NotAFile, Some(path.as_path())));
    assert!(err.to_string().contains("not a regular file"), "{err}");
}

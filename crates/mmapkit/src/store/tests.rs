use super::*;
use std::os::unix::fs::MetadataExt;

#[test]
fn sparse_beyond_off_t_is_efbig_and_creates_nothing() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("huge");
    let e = sparse(&p, 1 << 63).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EFBIG), "{e}");
    assert!(e.to_string().contains("huge"), "{e}");
    assert!(!p.exists());
}

#[test]
fn sparse_files_are_big_and_empty() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("s.bin");
    sparse(&p, 1 << 40).unwrap();
    let m = std::fs::metadata(&p).unwrap();
    assert_eq!(m.len(), 1 << 40);
    assert!(m.blocks() * 512 < 1 << 20, "{} blocks", m.blocks());
    sparse(&p, 1 << 40).unwrap();
    let e = sparse(&p, 10).unwrap_err();
    assert!(e.to_string().contains("refusing to shrink"), "{e}");
    assert_eq!(std::fs::metadata(&p).unwrap().len(), 1 << 40);
    let e = sparse(d.path().join("no/such/dir"), 1).unwrap_err();
    assert!(e.to_string().contains("no/such/dir"), "{e}");
}

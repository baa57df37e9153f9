use super::*;

/// A copy of the whole data.
fn data(s: &Segment) -> Vec<u8> {
    let mut v = vec![0u8; s.nbytes()];
    s.read_at(0, &mut v).unwrap();
    v
}

fn dir() -> tempfile::TempDir {
    // A memory file system when there is one, like real segments.
    tempfile::tempdir_in(SHM_DIR).or_else(|_| tempfile::tempdir()).unwrap()
}

/// The path of a segment `name` in a fresh directory.
fn named(name: &str) -> (tempfile::TempDir, std::path::PathBuf) {
    let d = dir();
    let p = segment_path(name, Some(d.path())).unwrap();
    (d, p)
}

#[test]
fn create_attach_share_data() {
    let (_d, p) = named("seg");
    let a = Segment::create(&p, "'<i8'", 8, &[4, 2], false).unwrap();
    assert_eq!((a.nbytes(), a.header().shape.clone()), (64, vec![4, 2]));
    a.write_at(8, &7i64.to_le_bytes()).unwrap();
    let b = Segment::attach(&p, false, false).unwrap();
    assert_eq!(&data(&b)[8..16], &7i64.to_le_bytes());
    a.write_at(16, &9i64.to_le_bytes()).unwrap();
    assert_eq!(&data(&b)[16..24], &9i64.to_le_bytes(), "same memory");
    assert!(b.write_at(0, &[1]).is_err());
    assert!(a.write_at(60, &[0; 8]).unwrap_err().to_string().contains("outside"));
    let e = Segment::create(&p, "'<i8'", 8, &[1], false).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EEXIST));
}

#[test]
fn unlink_on_last_close_only() {
    let (_d, p) = named("rc");
    let a = Segment::create(&p, "'|u1'", 1, &[10], true).unwrap();
    // A handle with its own open file description (as another process has).
    let b = Segment::attach(&p, true, true).unwrap();
    drop(a);
    assert!(p.exists(), "b still holds it");
    let c = Segment::attach(&p, true, false).unwrap();
    drop(b);
    assert!(p.exists(), "c still holds it");
    drop(c);
    assert!(p.exists(), "c does not unlink on close");
    let e = Segment::attach(&p, true, true).unwrap();
    drop(e);
    assert!(!p.exists(), "last closer unlinks");
    let err = Segment::attach(&p, true, false).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::ENOENT));
}

#[test]
fn explicit_unlink_keeps_mappings() {
    let (_d, p) = named("u");
    let a = Segment::create(&p, "'|u1'", 1, &[3], false).unwrap();
    a.write_at(0, b"abc").unwrap();
    a.unlink().unwrap();
    a.unlink().unwrap();
    assert!(!p.exists());
    assert_eq!(&data(&a)[..], b"abc");
    // A new segment under the same name is not touched by the old handle.
    let b = Segment::create(&p, "'|u1'", 1, &[3], false).unwrap();
    a.unlink().unwrap();
    assert!(p.exists());
    drop(b);
}

#[test]
fn bad_names_and_too_big() {
    for n in ["", "a/b", "..", "."] {
        assert!(segment_path(n, None).is_err(), "{n}");
    }
    let (_d, p) = named("big");
    let e = Segment::create(&p, "'<f8'", 8, &[u64::MAX / 4], false).unwrap_err();
    assert!(e.to_string().contains("too large"), "{e}");
    assert!(!p.exists());
}

#[test]
fn anonymous_segments_attach_through_proc() {
    let a = Segment::anonymous("'<u4'", 4, &[5]).unwrap();
    a.write_at(4, &42u32.to_le_bytes()).unwrap();
    let b = Segment::attach(a.path(), true, true).unwrap();
    assert_eq!(&data(&b)[4..8], &42u32.to_le_bytes());
    assert!(a.is_anonymous() && !b.is_anonymous());
}

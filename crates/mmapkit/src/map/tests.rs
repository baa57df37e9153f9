use super::*;
use std::io::Write;

fn file_with(data: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.bin");
    std::fs::write(&path, data).unwrap();
    (dir, path)
}

fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 7 + i / 251) as u8).collect()
}

#[test]
fn empty_file_maps_and_grows() {
    let (_d, path) = file_with(b"");
    let mut m = Map::open(&path, Mode::ReadWrite).unwrap();
    assert_eq!(m.len(), 0);
    assert!(m.as_slice().is_empty());
    m.grow(10_000).unwrap();
    m.write_at(9_995, b"hello").unwrap();
    m.flush().unwrap();
    let on_disk = std::fs::read(&path).unwrap();
    assert_eq!(on_disk.len(), 10_000);
    assert_eq!(&on_disk[9_995..], b"hello");
}

#[test]
fn read_only_empty_file() {
    let (_d, path) = file_with(b"");
    let m = Map::open(&path, Mode::Read).unwrap();
    assert_eq!(m.len(), 0);
    assert_eq!(m.count(b"x").unwrap(), 0);
    assert_eq!(m.grow(1).unwrap_err().kind(), crate::ErrorKind::InvalidArgument);
}

#[test]
fn slices_survive_growth() {
    let data = pattern(3 * page_size() + 17);
    let (_d, path) = file_with(&data);
    let m = Map::open(&path, Mode::ReadWrite).unwrap();
    let before = m.as_slice();
    let ptr = before.as_ptr();
    m.grow(64 << 20).unwrap();
    // The slice taken before growing still reads the same bytes.
    assert_eq!(before, &data[..]);
    assert_eq!(m.as_ptr(), ptr);
    assert_eq!(m.len(), 64 << 20);
    assert_eq!(&m.as_slice()[..data.len()], &data[..]);
    assert!(m.as_slice()[data.len()..].iter().all(|&b| b == 0));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 64 << 20);
}

#[test]
fn growth_past_reserve_in_place_or_clear_error() {
    let (_d, path) = file_with(&pattern(100));
    let m = Map::options().mode(Mode::ReadWrite).reserve(page_size()).open(&path).unwrap();
    let ptr = m.as_ptr();
    match m.grow(10 * page_size()) {
        Ok(()) => assert_eq!(m.as_ptr(), ptr),
        Err(Error::ReservationExhausted { .. }) => {}
        Err(e) => panic!("unexpected {e}"),
    }
}

#[test]
fn resize_moves_when_needed_and_keeps_data() {
    let data = pattern(5000);
    let (_d, path) = file_with(&data);
    let mut m = Map::options().mode(Mode::ReadWrite).reserve(page_size()).open(&path).unwrap();
    m.resize(1 << 20).unwrap();
    assert_eq!(&m.as_slice()[..5000], &data[..]);
    m.resize(10).unwrap();
    assert_eq!(m.as_slice(), &data[..10]);
    assert_eq!(std::fs::metadata(&path).unwrap().len(), 10);
}

#[test]
fn copy_on_write_never_reaches_the_file() {
    let data = pattern(10_000);
    let (_d, path) = file_with(&data);
    let mut m = Map::open(&path, Mode::CopyOnWrite).unwrap();
    m.as_mut_slice().unwrap()[..4].copy_from_slice(b"XXXX");
    m.flush().unwrap();
    assert_eq!(&m.as_slice()[..4], b"XXXX");
    drop(m);
    assert_eq!(std::fs::read(&path).unwrap(), data);
}

#[test]
fn read_only_map_refuses_writes() {
    let (_d, path) = file_with(b"abc");
    let mut m = Map::open(&path, Mode::Read).unwrap();
    assert!(matches!(m.write_at(0, b"x"), Err(Error::ReadOnly { .. })));
    assert!(m.as_mut_slice().is_err());
}

#[test]
fn any_offset_and_length() {
    let data = pattern(5 * page_size());
    let (_d, path) = file_with(&data);
    for (off, len) in
        [(0usize, 0usize), (1, 10), (4095, 2), (4096, 4096), (5000, 100), (12345, 3000)]
    {
        let m = Map::options().offset(off as u64).len(len).open(&path).unwrap();
        assert_eq!(m.as_slice(), &data[off..off + len], "off={off} len={len}");
        m.advise(Advice::Sequential, 0, None).unwrap();
        m.populate(false).unwrap();
    }
    let m = Map::options().offset(7000).open(&path).unwrap();
    assert_eq!(m.as_slice(), &data[7000..]);
    assert!(Map::options().offset(data.len() as u64 + 1).open(&path).is_err());
    assert!(Map::options().offset(10).len(data.len()).open(&path).is_err());
}

#[test]
fn unaligned_flush_and_advise() {
    let (_d, path) = file_with(&pattern(20_000));
    let mut m = Map::options().mode(Mode::ReadWrite).offset(123).open(&path).unwrap();
    m.write_at(5000, b"zz").unwrap();
    m.flush_range(4999, 3, true).unwrap();
    m.flush_range(1, 1, false).unwrap();
    m.advise(Advice::WillNeed, 77, Some(9000)).unwrap();
    m.advise(Advice::Random, 0, None).unwrap();
    assert!(m.flush_range(19_000, 10_000, true).is_err());
    assert_eq!(&std::fs::read(&path).unwrap()[5123..5125], b"zz");
}

#[test]
fn anonymous_shared_memory_is_seen_after_fork() {
    let m = Map::anonymous(4096).unwrap();
    assert!(m.as_slice().iter().all(|&b| b == 0));
    // SAFETY: the child only writes to the mapping and exits immediately.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        // SAFETY: child: in bounds of a writable map; nothing else runs.
        unsafe {
            std::ptr::copy_nonoverlapping(b"from child".as_ptr(), m.as_mut_ptr(), 10);
            libc::_exit(0);
        }
    }
    let mut status = 0;
    // SAFETY: waiting for our own child.
    unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(&m.as_slice()[..10], b"from child");
}

#[test]
fn anonymous_grows_and_shrinks() {
    let mut m = Map::anonymous(0).unwrap();
    m.grow(100_000).unwrap();
    m.write_at(99_999, b"x").unwrap();
    m.resize(10).unwrap();
    assert_eq!(m.len(), 10);
    m.resize(200_000).unwrap();
    assert_eq!(m.as_slice()[99_999], 0, "shrunk pages come back zeroed");
}

#[test]
fn truncation_by_someone_else_is_an_error_not_a_crash() {
    let data = pattern(64 * page_size());
    let (_d, path) = file_with(&data);
    let mut m = Map::open(&path, Mode::Read).unwrap();
    assert_eq!(m.count(&[7]).unwrap(), crate::bytes::count(&data, &[7]));
    let view = m.as_slice();
    // Another writer cuts the file to one page.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(page_size() as u64)
        .unwrap();
    let err = m.count(&[7]).unwrap_err();
    assert!(matches!(err, Error::FileTruncated { .. }), "{err}");
    assert!(err.to_string().contains("f.bin"), "{err}");
    // Raw readers see zeros where the lost pages were, and survive.
    assert!(view[10 * page_size()..].iter().all(|&b| b == 0));
    assert_eq!(&view[..page_size()], &data[..page_size()]);
    // Sticky until refreshed.
    assert!(m.check().is_err());
    assert_eq!(m.refresh(true).unwrap(), page_size());
    assert_eq!(m.as_slice(), &data[..page_size()]);
    m.check().unwrap();
}

#[test]
fn refresh_follows_appends() {
    let (_d, path) = file_with(b"one\n");
    let mut m = Map::open(&path, Mode::Read).unwrap();
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"two\n").unwrap();
    assert_eq!(m.refresh(true).unwrap(), 8);
    assert_eq!(m.as_slice(), b"one\ntwo\n");
    // grow(&self) works too once the file is long enough.
    std::fs::OpenOptions::new().append(true).open(&path).unwrap().write_all(b"three\n").unwrap();
    m.grow(14).unwrap();
    assert_eq!(m.as_slice(), b"one\ntwo\nthree\n");
}

#[test]
fn residency_counts_pages() {
    let (_d, path) = file_with(&pattern(16 * page_size()));
    let m = Map::open(&path, Mode::Read).unwrap();
    m.populate(false).unwrap();
    // Locked, so memory pressure cannot evict a page before mincore looks
    // (populated pages alone may be gone again on a loaded machine).
    m.lock().unwrap();
    let r = m.residency().unwrap();
    assert_eq!(r.mapped_bytes, 16 * page_size() as u64);
    assert_eq!(r.resident_bytes, r.mapped_bytes);
    m.unlock().unwrap();
}

#[test]
fn lock_of_a_truncated_file_is_an_error_not_a_crash() {
    let (_d, path) = file_with(&pattern(16 * page_size()));
    let m = Map::open(&path, Mode::Read).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(0).unwrap();
    let err = m.lock().unwrap_err();
    assert!(err.to_string().contains("f.bin"), "{err}");
}

#[test]
fn errors_name_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.txt");
    let e = Map::open(&missing, Mode::Read).unwrap_err();
    assert!(e.to_string().contains("nope.txt"), "{e}");
    assert_eq!(e.raw_os_error(), Some(libc::ENOENT));
    let e = Map::open(dir.path(), Mode::Read).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EISDIR), "{e}");
}

#[test]
fn disk_full_is_an_error_not_a_sigbus() {
    // Needs a small file system: a 1 MiB tmpfs (root only; skipped otherwise).
    let dir = tempfile::tempdir().unwrap();
    let mnt = dir.path().to_str().unwrap();
    let ok = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", mnt])
        .stderr(std::process::Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        eprintln!("skipped: cannot mount a tmpfs here");
        return;
    }
    let result = (|| {
        let mut m = Map::create(dir.path().join("big"), 4096)?;
        m.grow(512 << 10)?;
        m.write_at(500_000, b"fits")?;
        m.grow(8 << 20)
    })();
    let _ = std::process::Command::new("umount").arg(mnt).status();
    match result {
        Err(Error::DiskFull { path, size }) => {
            assert!(path.ends_with("big"));
            assert_eq!(size, 8 << 20);
        }
        other => panic!("expected DiskFull, got {other:?}"),
    }
}

#[test]
fn large_reads_via_pread_equal_memcpy_and_see_map_writes() {
    let data = pattern(3 << 20);
    let (_d, path) = file_with(&data);
    let mut m = Map::options().mode(Mode::ReadWrite).offset(4097).open(&path).unwrap();
    m.write_at(1 << 20, b"written through the map").unwrap();
    let mut big = vec![0u8; 2 << 20]; // pread path
    m.read_at(1000, &mut big).unwrap();
    let mut expect = data[4097..].to_vec();
    expect[1 << 20..(1 << 20) + 23].copy_from_slice(b"written through the map");
    assert_eq!(&big[..], &expect[1000..1000 + (2 << 20)]);
    let mut small = vec![0u8; 4096]; // memcpy path
    m.read_at((1 << 20) - 100, &mut small).unwrap();
    assert_eq!(&small[..], &expect[(1 << 20) - 100..(1 << 20) + 3996]);
    assert!(m.read_at(m.len() - 10, &mut small).is_err(), "out of bounds");
}

#[test]
fn large_reads_of_private_maps_see_private_changes() {
    let data = pattern(1 << 20);
    let (_d, path) = file_with(&data);
    let mut m = Map::open(&path, Mode::CopyOnWrite).unwrap();
    m.as_mut_slice().unwrap()[500_000] = 0xAB;
    let mut all = vec![0u8; 1 << 20];
    m.read_at(0, &mut all).unwrap();
    assert_eq!(all[500_000], 0xAB);
    assert_eq!(std::fs::read(&path).unwrap(), data);
}

#[test]
fn large_read_of_truncated_file_is_an_error() {
    let (_d, path) = file_with(&pattern(4 << 20));
    let m = Map::open(&path, Mode::Read).unwrap();
    std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(1 << 20).unwrap();
    let mut buf = vec![0u8; 2 << 20];
    assert!(matches!(m.read_at(0, &mut buf), Err(Error::FileTruncated { .. })));
}

fn cut(path: &Path, len: u64) {
    std::fs::OpenOptions::new().write(true).open(path).unwrap().set_len(len).unwrap();
}

#[test]
fn flush_of_bytes_a_truncation_dropped_is_an_error() {
    let (_d, path) = file_with(&pattern(16 * page_size()));
    let mut m = Map::open(&path, Mode::ReadWrite).unwrap();
    m.write_at(15 * page_size(), b"dirty").unwrap();
    cut(&path, page_size() as u64);
    // No page faulted: the dirty page was dropped with the file's tail.
    m.check().unwrap();
    for sync in [true, false] {
        let err = m.flush_range(0, m.len(), sync).unwrap_err();
        assert!(matches!(err, Error::FileTruncated { .. }), "{err}");
    }
    // The part still in the file flushes; growing over the cut refuses to
    // fill it with a hole of zeros, and so does shrinking to a length past it.
    m.flush_range(0, page_size(), true).unwrap();
    assert!(matches!(m.grow(17 * page_size()).unwrap_err(), Error::FileTruncated { .. }));
    assert!(matches!(m.resize(8 * page_size()).unwrap_err(), Error::FileTruncated { .. }));
    assert_eq!(std::fs::metadata(&path).unwrap().len(), page_size() as u64);
    assert_eq!(m.refresh(true).unwrap(), page_size());
    m.flush().unwrap();
}

#[test]
fn touch_reads_every_page_of_a_range_and_reports_a_truncation() {
    let data = pattern(8 * page_size() + 100);
    let (_d, path) = file_with(&data);
    let m = MapOptions::new().offset(100).open(&path).unwrap();
    m.touch(0, m.len()).unwrap();
    m.touch(3, 0).unwrap();
    assert!(m.touch(1, m.len()).is_err()); // out of bounds
    cut(&path, 4 * page_size() as u64);
    // Pages before the cut are the file's; touching one past it reports.
    m.touch(0, 3 * page_size()).unwrap();
    let err = m.touch(0, 5 * page_size()).unwrap_err();
    assert!(matches!(err, Error::FileTruncated { .. }), "{err}");
    assert!(m.touch(0, 1).is_err(), "sticky until refreshed");
}

#[test]
fn a_fifo_is_refused_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("fifo");
    assert!(std::process::Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    for mode in [Mode::Read, Mode::ReadWrite, Mode::CopyOnWrite] {
        let err = Map::open(&fifo, mode).unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::NotAFile, "{err}");
        assert!(err.to_string().contains("FIFO"), "{err}");
    }
}

#[test]
fn touch_reports_a_cut_inside_the_last_page_of_the_range() {
    let data = pattern(8 * page_size());
    let (_d, path) = file_with(&data);
    let m = Map::open(&path, Mode::Read).unwrap();
    // Cut in the middle of page 2: its tail reads as zeros without a fault.
    cut(&path, 2 * page_size() as u64 + 100);
    m.touch(0, 2 * page_size() + 100).unwrap();
    let err = m.touch(0, 2 * page_size() + 200).unwrap_err();
    assert!(matches!(err, Error::FileTruncated { .. }), "{err}");
    // The map's own last page: an fstat stands in for the page after.
    let (_d2, path2) = file_with(&data);
    let m2 = Map::open(&path2, Mode::Read).unwrap();
    cut(&path2, 8 * page_size() as u64 - 10);
    m2.touch(0, 8 * page_size() - 10).unwrap();
    assert!(m2.touch(7 * page_size(), page_size()).is_err());
}

use super::*;

#[test]
fn append_map_writes_only_past_the_seal() {
    let mut m = Map::anonymous(64).unwrap();
    m.write_at(0, b"HEADER--").unwrap();
    let a = AppendMap::new(m, 8, 8).unwrap();
    assert!(a.sealed_slice().is_empty());
    a.append_at(8, b"abcd").unwrap();
    a.seal(12).unwrap();
    let s = a.sealed_slice();
    assert_eq!(s, b"abcd");
    // Below the seal: refused, and the slice is unchanged.
    assert!(a.append_at(10, b"XX").is_err());
    assert!(a.append_at(4, b"XX").is_err());
    assert_eq!(s, b"abcd");
    a.append_at(12, b"efgh").unwrap();
    a.seal(10).unwrap(); // never backwards
    assert_eq!(a.sealed(), 12);
    // The header is private and writable at any time.
    a.store_header_word(0, *b"12345678").unwrap();
    assert!(a.write_header(6, b"xyz").is_err());
    let mut h = [0u8; 8];
    a.read_header(0, &mut h).unwrap();
    assert_eq!(&h, b"12345678");
    assert_eq!(s, b"abcd");
    assert!(a.seal(65).is_err());
}

#[test]
fn shared_map_reads_by_copy_and_resyncs_with_views_alive() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f");
    std::fs::write(&p, vec![b'x'; 3 * 4096]).unwrap();
    let m = Map::open(&p, Mode::ReadWrite).unwrap().into_shared();
    let view = m.as_ptr(); // a raw view, as a Python buffer would hold
    m.write_at(1, b"yz").unwrap();
    assert_eq!(m.byte_at(2).unwrap(), b'z');
    assert!(m.eq_at(1, b"yz").unwrap());
    // Another process truncates the file: the guard zero-fills.
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(4096).unwrap();
    let mut b = [1u8];
    assert!(matches!(m.read_at(2 * 4096, &mut b), Err(Error::FileTruncated { .. })));
    // The file comes back longer: resync while the view exists.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&p)
        .unwrap()
        .write_all_at(&[b'w'; 2 * 4096], 4096)
        .unwrap();
    assert_eq!(m.resync(false).unwrap(), 3 * 4096);
    assert_eq!(m.as_ptr(), view);
    m.check().unwrap();
    assert_eq!(m.byte_at(2 * 4096 + 5).unwrap(), b'w');
    // SAFETY-free check through the copy API of what the view sees.
    let mut all = vec![0u8; 3 * 4096];
    m.read_at(0, &mut all).unwrap();
    assert_eq!(&all[..3], b"xyz");
    // Shrunk again: resync shortens the map, the view's pages stay mapped.
    std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(100).unwrap();
    assert_eq!(m.resync(false).unwrap(), 100);
    assert_eq!(m.as_ptr(), view);
    m.check().unwrap();
    assert_eq!(m.byte_at(99).unwrap(), b'x');
}

use std::os::unix::fs::FileExt;

/// Bytes over several search windows, with needles straddling the
/// window boundaries (the growing first ones from 0: 4, 12, 28 KiB, ...;
/// and multiples of the largest) and self-overlapping ones ("aa").
fn sample() -> Vec<u8> {
    let mut v: Vec<u8> = (0..3 * WINDOW + 777).map(|i| b"abcdefgh"[(i * 7 + i / 13) % 8]).collect();
    let f = FIRST_WINDOW;
    let grown = [f - 2, 3 * f - 3, 7 * f - 1, 15 * f - 2];
    for at in grown.into_iter().chain([WINDOW - 2, WINDOW - 1, 2 * WINDOW - 3, 3 * WINDOW + 770]) {
        v[at..at + 5].copy_from_slice(b"aaaaa");
    }
    v
}

#[test]
fn shared_map_searches_over_copies_match_the_slice_kernels() {
    let data = sample();
    let mut m = Map::anonymous(data.len()).unwrap();
    m.write_at(0, &data).unwrap();
    let s = m.into_shared();
    let len = data.len();
    let needles: [&[u8]; 6] = [b"", b"a", b"aa", b"aaa", b"habcd", b"zz"];
    let ranges = [
        (0, len),
        (1, len - 1),
        (WINDOW - 1, 2 * WINDOW + 2),
        (FIRST_WINDOW - 3, len),
        (5, 5),
        (len + 3, len + 9),
        (9, 3),
    ];
    for needle in needles {
        for &(a, e) in &ranges {
            let want = data.get(a.min(e.min(len))..e.min(len)).unwrap_or(&[]);
            let f = crate::bytes::find(want, needle).map(|i| i + a);
            let r = crate::bytes::rfind(want, needle).map(|i| i + a);
            assert_eq!(s.find(needle, a, e).unwrap(), f, "find {needle:?} {a}..{e}");
            assert_eq!(s.rfind(needle, a, e).unwrap(), r, "rfind {needle:?} {a}..{e}");
        }
        assert_eq!(
            s.count(needle).unwrap(),
            crate::bytes::count(&data, needle),
            "count {needle:?}"
        );
        if needle.is_empty() {
            assert!(s.find_all(needle, None).is_err());
            continue;
        }
        let all = crate::bytes::find_all(&data, needle, None).unwrap();
        assert_eq!(s.find_all(needle, None).unwrap(), all, "find_all {needle:?}");
        assert_eq!(s.find_all(needle, Some(3)).unwrap(), &all[..all.len().min(3)]);
    }
    assert!(s.eq_at(WINDOW - 2, b"aaaaa").unwrap());
    assert!(s.eq_at(7, &data[7..]).unwrap());
    assert!(!s.eq_at(8, &data[7..]).unwrap());
    assert!(!s.eq_at(usize::MAX, b"x").unwrap());
}

#[test]
fn dontneed_and_raw_advice_only_where_no_slice_can_see_them() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("f");
    std::fs::write(&p, vec![b'x'; 8192]).unwrap();
    let mut m = Map::open(&p, Mode::CopyOnWrite).unwrap();
    m.write_at(0, b"private").unwrap();
    // Through `&self`, a private change under live slices: refused.
    assert!(m.advise(Advice::DontNeed, 0, None).is_err());
    assert_eq!(&m.as_slice()[..7], b"private");
    m.advise(Advice::WillNeed, 0, None).unwrap();
    // Through `&mut self`: allowed, the file's bytes come back.
    m.discard(0, None).unwrap();
    assert_eq!(&m.as_slice()[..7], b"xxxxxxx");
    // A SharedMap has no slices: DontNeed and the safe raw values go.
    m.write_at(0, b"again").unwrap();
    let s = m.into_shared();
    s.advise(Advice::DontNeed, 0, None).unwrap();
    assert_eq!(s.byte_at(0).unwrap(), b'x');
    s.madvise(libc::MADV_DONTNEED, 0, Some(1)).unwrap();
    for bad in [libc::MADV_DONTFORK, 102, 12345] {
        let e = s.madvise(bad, 0, None).unwrap_err();
        assert_eq!(e.errno(), Some(libc::EINVAL), "{bad}: {e}");
    }
    // A shared map's DontNeed keeps the bytes: allowed through `&self`.
    let w = Map::open(&p, Mode::ReadWrite).unwrap();
    w.advise(Advice::DontNeed, 0, None).unwrap();
    // Protection from safe code: R/W/X only, and an unreadable map is
    // never read (errors, or a panic for a slice).
    assert!(crate::map::MapOptions::new().checked_protection(libc::PROT_GROWSDOWN).is_err());
    let mut o = crate::map::MapOptions::new();
    o.checked_protection(libc::PROT_READ).unwrap();
    assert!(o.anonymous(8).unwrap().write_at(0, b"x").is_err());
    o.checked_protection(libc::PROT_NONE).unwrap();
    let guard = o.anonymous(4096).unwrap();
    assert_eq!(guard.read_at(0, &mut [0u8; 1]).unwrap_err().errno(), Some(libc::EACCES));
    assert!(guard.read_with(|d| d.len()).is_err() && guard.populate(false).is_err());
    assert!(std::panic::catch_unwind(|| guard.as_slice().len()).is_err());
    let guard = guard.into_shared();
    assert!(
        guard.find(b"x", 0, 4096).is_err()
            && guard.count(b"x").is_err()
            && guard.eq_at(0, b"x").is_err()
    );
    let guard = AppendMap::new(guard.into_inner(), 0, 8).unwrap();
    assert!(std::panic::catch_unwind(|| guard.sealed_slice().len()).is_err());
}

/// Threads write disjoint records through `&self` while others copy
/// and search the whole map (and an AppendMap is appended to and
/// sealed while its sealed prefix and open part are read): defined
/// races only. Run under ThreadSanitizer by `make tsan`.
#[test]
fn concurrent_disjoint_writers_with_searchers_and_copiers() {
    const REC: usize = 64;
    const RECS: usize = 256;
    const WRITERS: usize = 4;
    let m = Map::anonymous(REC * RECS * WRITERS).unwrap().into_shared();
    let done = std::sync::atomic::AtomicBool::new(false);
    std::thread::scope(|sc| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|t| {
                let m = &m;
                sc.spawn(move || {
                    for round in 0..4u8 {
                        for r in 0..RECS {
                            let rec = [b'a' + t as u8 + round; REC];
                            m.write_at((t * RECS + r) * REC, &rec).unwrap();
                        }
                    }
                })
            })
            .collect();
        for _ in 0..2 {
            sc.spawn(|| {
                let mut buf = vec![0u8; 4096];
                while !done.load(Ordering::Acquire) {
                    m.read_at(100, &mut buf).unwrap();
                    let _ = m.count(b"d").unwrap();
                    let _ = m.find(b"ee", 0, m.len()).unwrap();
                    let _ = m.rfind(b"a", 0, m.len()).unwrap();
                    let _ = m.eq_at(0, &buf[..64]).unwrap();
                }
            });
        }
        for w in writers {
            w.join().unwrap();
        }
        done.store(true, Ordering::Release);
    });
    for t in 0..WRITERS {
        assert!(m.eq_at(t * RECS * REC, &vec![b'a' + t as u8 + 3; RECS * REC]).unwrap());
    }
    // A copy within the map while readers search it.
    std::thread::scope(|sc| {
        sc.spawn(|| m.copy_within(0, 1, 4096).unwrap());
        sc.spawn(|| m.count(b"dd").unwrap());
    });

    let a = AppendMap::new(Map::anonymous(1 << 16).unwrap(), 8, 8).unwrap();
    std::thread::scope(|sc| {
        sc.spawn(|| {
            for i in 0..256usize {
                let at = 8 + i * 16;
                a.append_at(at, &[i as u8; 16]).unwrap();
                a.seal(at + 16).unwrap();
                a.store_header_word(0, (i as u64).to_ne_bytes()).unwrap();
            }
        });
        sc.spawn(|| {
            let mut open = [0u8; 256];
            let mut h = [0u8; 8];
            for _ in 0..256 {
                let s = a.sealed_slice();
                if let Some(&last) = s.last() {
                    assert_eq!(last as usize, s.len() / 16 - 1);
                }
                a.read_at(a.sealed(), &mut open).unwrap();
                a.read_header(0, &mut h).unwrap();
            }
        });
    });
    assert_eq!(a.sealed(), 8 + 256 * 16);
}

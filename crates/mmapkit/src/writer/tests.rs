use super::*;
use proptest::prelude::*;
use std::fs;

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

fn rec(i: u64, width: usize) -> Vec<u8> {
    (0..width).map(|j| (i as usize * 31 + j * 7) as u8).collect()
}

fn expected(n: u64, width: usize) -> Vec<u8> {
    (0..n).flat_map(|i| rec(i, width)).collect()
}

fn leftovers(d: &Path) -> Vec<String> {
    fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect()
}

#[test]
fn known_count_parallel_writes_in_order() {
    let d = dir();
    let out = d.path().join("out.bin");
    let w = RecordWriter::create(&out, 13, Some(1000), &WriterOptions::default()).unwrap();
    std::thread::scope(|s| {
        for t in 0..4u64 {
            let w = &w;
            s.spawn(move || {
                for i in (t..1000).step_by(4).collect::<Vec<_>>().into_iter().rev() {
                    w.write(i, &rec(i, 13)).unwrap();
                }
            });
        }
    });
    assert!(!out.exists(), "nothing at the destination before finish");
    assert_eq!(w.finish().unwrap(), 1000);
    assert_eq!(fs::read(&out).unwrap(), expected(1000, 13));
    assert_eq!(leftovers(d.path()), vec!["out.bin"]);
}

#[test]
fn unknown_count_grows_under_concurrent_writers() {
    let d = dir();
    let out = d.path().join("grow.bin");
    // Tiny growth steps: hundreds of grows race with the writes.
    let opts = WriterOptions { grow_records: 3, ..Default::default() };
    let w = RecordWriter::create(&out, 1001, None, &opts).unwrap();
    let base = w.map.as_ptr();
    std::thread::scope(|s| {
        for t in 0..3u64 {
            let w = &w;
            s.spawn(move || {
                for i in (t..2000).step_by(3) {
                    w.write(i, &rec(i, 1001)).unwrap();
                }
            });
        }
    });
    assert_eq!(w.map.as_ptr(), base, "growth never moves the mapping");
    assert_eq!(w.finish().unwrap(), 2000);
    assert_eq!(fs::read(&out).unwrap(), expected(2000, 1001));
}

#[test]
fn npy_header_is_the_same_whether_the_count_was_known_or_not() {
    let d = dir();
    let header = HeaderSpec::Npy { dtype: "<f4".into(), row_shape: vec![3] };
    let opts = WriterOptions { header, grow_records: 2, ..Default::default() };
    let mut files = Vec::new();
    for n in [Some(5), None] {
        let out = d.path().join(format!("a{}.npy", n.is_some()));
        let w = RecordWriter::create(&out, 12, n, &opts).unwrap();
        for i in (0..5u64).rev() {
            let row: Vec<u8> =
                (0..3).flat_map(|j| (i as f32 * 10.0 + j as f32).to_le_bytes()).collect();
            w.write(i, &row).unwrap();
        }
        w.finish().unwrap();
        files.push(fs::read(&out).unwrap());
    }
    assert_eq!(files[0], files[1]);
    let (h, off) = Header::decode(&files[0], Path::new("a.npy")).unwrap();
    assert_eq!(h.shape, vec![5, 3]);
    assert_eq!(off % 64, 0);
    assert_eq!(files[0].len(), off + 5 * 12);
    assert_eq!(f32::from_le_bytes(files[0][off + 12..off + 16].try_into().unwrap()), 10.0);
}

#[test]
fn missing_records_fail_finish_and_leave_nothing() {
    let d = dir();
    let out = d.path().join("holes.bin");
    let w = RecordWriter::create(&out, 4, Some(3), &WriterOptions::default()).unwrap();
    w.write(0, b"abcd").unwrap();
    w.write(2, b"abcd").unwrap();
    let e = w.finish().unwrap_err();
    assert!(e.to_string().contains("2 record writes for 3 records"), "{e}");
    assert!(leftovers(d.path()).is_empty(), "{:?}", leftovers(d.path()));
}

#[test]
fn dropping_an_unfinished_writer_keeps_the_old_file() {
    let d = dir();
    let out = d.path().join("keep.txt");
    fs::write(&out, "old complete file\n").unwrap();
    {
        let w = RecordWriter::create(&out, 2, None, &WriterOptions::default()).unwrap();
        w.write(0, b"x\n").unwrap();
        assert_eq!(leftovers(d.path()).len(), 2, "the temporary file exists meanwhile");
    }
    assert_eq!(fs::read_to_string(&out).unwrap(), "old complete file\n");
    assert_eq!(leftovers(d.path()), vec!["keep.txt"]);
}

#[test]
fn bad_writes_are_errors() {
    let d = dir();
    let w = RecordWriter::create(d.path().join("e.bin"), 4, Some(2), &WriterOptions::default())
        .unwrap();
    assert!(w.write(0, b"abc").unwrap_err().to_string().contains("3 bytes"));
    assert!(w.write(2, b"abcd").unwrap_err().to_string().contains("out of range"));
    assert!(RecordWriter::create(d.path(), 4, None, &WriterOptions::default()).is_err());
    assert!(RecordWriter::memory(0, None, &WriterOptions::default()).is_err());
}

#[test]
fn prepare_grows_and_changes_nothing_else() {
    let d = dir();
    // Known count: the range is checked, overflow included.
    let w = RecordWriter::create(d.path().join("k.bin"), 7, Some(10), &WriterOptions::default())
        .unwrap();
    assert!(w.prepare(8, 3).unwrap_err().to_string().contains("out of range"));
    assert!(w.prepare(u64::MAX, 2).is_err());
    w.prepare(0, 10).unwrap();
    w.prepare(3, 0).unwrap();
    // Unknown count: prepared blocks past the end (ahead of their writes,
    // out of order, one a block already released) do not count as records.
    let out = d.path().join("u.bin");
    let opts = WriterOptions {
        header: HeaderSpec::Bytes(b"HEAD".to_vec()),
        grow_records: 5,
        ..Default::default()
    };
    let u = RecordWriter::create(&out, 4096 + 3, None, &opts).unwrap();
    u.prepare(1500, 100).unwrap();
    for first in (0..1500u64).step_by(100) {
        u.prepare(first, 100).unwrap();
        for i in first..first + 100 {
            u.write(i, &rec(i, 4096 + 3)).unwrap();
        }
        u.release(first + 100).unwrap();
        u.prepare(first, 1).unwrap();
    }
    assert_eq!(u.records(), 1500, "prepared records past the end are not records");
    assert_eq!(u.finish().unwrap(), 1500);
    let mut want = b"HEAD".to_vec();
    want.extend(expected(1500, 4096 + 3));
    assert_eq!(fs::read(&out).unwrap(), want);
    // Memory writers take it too.
    let m = RecordWriter::memory(5, None, &WriterOptions::default()).unwrap();
    m.prepare(0, 1000).unwrap();
    m.write(0, &rec(0, 5)).unwrap();
    assert_eq!(m.finish_bytes().unwrap(), expected(1, 5));
}

#[test]
fn write_records_gives_the_bytes_of_write() {
    // Blocks of records from several threads, mixed with single writes, out
    // of order, growing an unknown count past several grow steps, with a
    // header: the same bytes as `write` of each record (file and memory).
    let d = dir();
    let width = 4096 + 3;
    let opts = WriterOptions {
        header: HeaderSpec::Bytes(b"HEAD".to_vec()),
        grow_records: 7,
        ..Default::default()
    };
    let n = 600u64;
    let blocks: Vec<(u64, u64)> = (0..n).step_by(37).map(|f| (f, (f + 37).min(n))).collect();
    let fill = |w: &RecordWriter| {
        std::thread::scope(|s| {
            for t in 0..3usize {
                let blocks = &blocks;
                s.spawn(move || {
                    for (b, &(f, e)) in blocks.iter().enumerate().rev() {
                        if b % 3 != t {
                            continue;
                        }
                        if b % 2 == 0 {
                            let recs: Vec<u8> = (f..e).flat_map(|i| rec(i, width)).collect();
                            w.write_records(f, &recs).unwrap();
                        } else {
                            for i in f..e {
                                w.write(i, &rec(i, width)).unwrap();
                            }
                        }
                        w.write_records(e, &[]).unwrap();
                    }
                });
            }
        });
    };
    let mut want = b"HEAD".to_vec();
    want.extend(expected(n, width));
    let out = d.path().join("blocks.bin");
    let w = RecordWriter::create(&out, width, None, &opts).unwrap();
    fill(&w);
    assert_eq!(w.records(), n);
    assert_eq!(w.finish().unwrap(), n);
    assert_eq!(fs::read(&out).unwrap(), want);
    let m = RecordWriter::memory(width, None, &opts).unwrap();
    fill(&m);
    assert_eq!(m.finish_bytes().unwrap(), want);
    // Known count: checked like `write`; a partial record is refused.
    let k = RecordWriter::create(d.path().join("k.bin"), 4, Some(3), &WriterOptions::default())
        .unwrap();
    assert!(k.write_records(0, b"abcdef").unwrap_err().to_string().contains("whole records"));
    assert!(k.write_records(2, b"abcdefgh").unwrap_err().to_string().contains("out of range"));
    assert!(k.write_records(u64::MAX, b"abcd").is_err());
    k.write_records(0, b"abcdefghijkl").unwrap();
    assert_eq!(k.finish().unwrap(), 3);
    assert_eq!(fs::read(d.path().join("k.bin")).unwrap(), b"abcdefghijkl");
}

#[test]
fn release_keeps_the_data() {
    let d = dir();
    let out = d.path().join("rel.bin");
    let w = RecordWriter::create(&out, 4096 + 7, None, &WriterOptions::default()).unwrap();
    for i in 0..3000u64 {
        w.write(i, &rec(i, 4096 + 7)).unwrap();
        if i % 100 == 0 {
            w.release(i).unwrap();
        }
    }
    w.release(3000).unwrap();
    assert!(*w.released.lock().unwrap() > 0);
    w.finish().unwrap();
    assert_eq!(fs::read(&out).unwrap(), expected(3000, 4096 + 7));
}

#[test]
fn memory_writer_returns_its_bytes() {
    let opts = WriterOptions {
        header: HeaderSpec::Bytes(b"HDR".to_vec()),
        grow_records: 1,
        ..Default::default()
    };
    let w = RecordWriter::memory(5, None, &opts).unwrap();
    for i in (0..10u64).rev() {
        w.write(i, &rec(i, 5)).unwrap();
    }
    let mut want = b"HDR".to_vec();
    want.extend(expected(10, 5));
    assert_eq!(w.finish_bytes().unwrap(), want);
}

#[test]
fn stream_writer_matches_record_writer() {
    let d = dir();
    let header = HeaderSpec::Npy { dtype: "<u4".into(), row_shape: vec![2] };
    let opts = WriterOptions { header, ..Default::default() };
    let a = d.path().join("a.npy");
    let b = d.path().join("b.npy");
    let mut s = StreamWriter::create(&a, 8, &opts).unwrap();
    let r = RecordWriter::create(&b, 8, None, &opts).unwrap();
    for i in 0..7u64 {
        s.push(&rec(i, 8)).unwrap();
        r.write(i, &rec(i, 8)).unwrap();
    }
    assert!(s.push(b"abc").is_err());
    assert!(!a.exists());
    assert_eq!(s.finish().unwrap(), 7);
    r.finish().unwrap();
    assert_eq!(fs::read(&a).unwrap(), fs::read(&b).unwrap());
    let mut m = StreamWriter::memory(8, &opts).unwrap();
    m.push(&expected(7, 8)).unwrap();
    assert_eq!(m.finish_bytes().unwrap(), fs::read(&a).unwrap());
    // dropped unfinished: nothing left
    let s = StreamWriter::create(d.path().join("c.npy"), 8, &opts).unwrap();
    drop(s);
    let mut names = leftovers(d.path());
    names.sort();
    assert_eq!(names, vec!["a.npy", "b.npy"]);
}

#[test]
fn line_format_pads_fields() {
    let f = LineFormat { fields: 3, field_width: 4, sep: b',' };
    let mut line = vec![0u8; f.line_len()];
    f.put(&mut line, 0, b"1.5").unwrap();
    f.put(&mut line, 1, b"22").unwrap();
    f.put(&mut line, 2, b"1234").unwrap();
    assert_eq!(line, b" 1.5,  22,1234\n");
    assert!(f.put(&mut line, 0, b"12345").is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Any write order, thread count and growth step gives the sequential model's bytes.
    #[test]
    fn any_order_gives_the_model(n in 0u64..300, width in 1usize..70, threads in 1usize..4,
                                 grow in 1u64..50, known in any::<bool>(), seed in any::<u64>()) {
        let d = dir();
        let out = d.path().join("p.bin");
        let opts = WriterOptions { grow_records: grow, ..Default::default() };
        let w = RecordWriter::create(&out, width, known.then_some(n), &opts).unwrap();
        let mut order: Vec<u64> = (0..n).collect();
        // a seeded shuffle (xorshift)
        let mut x = seed | 1;
        for i in (1..order.len()).rev() {
            x ^= x << 13; x ^= x >> 7; x ^= x << 17;
            order.swap(i, (x % (i as u64 + 1)) as usize);
        }
        std::thread::scope(|s| {
            for t in 0..threads {
                let (w, order) = (&w, &order);
                s.spawn(move || {
                    for &i in order.iter().skip(t).step_by(threads) {
                        w.write(i, &rec(i, width)).unwrap();
                    }
                });
            }
        });
        prop_assert_eq!(w.finish().unwrap(), n);
        prop_assert_eq!(fs::read(&out).unwrap(), expected(n, width));
    }
}

#[test]
fn writers_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<RecordWriter>();
    fn send<T: Send>() {}
    send::<StreamWriter>();
}

use super::*;
use crate::exec::Threads;
use proptest::prelude::*;

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("a.npy");
    (d, p)
}

fn rows_f64(vals: &[f64]) -> Vec<u8> {
    vals.iter().flat_map(|v| v.to_le_bytes()).collect()
}

fn header_rows(path: &Path) -> (u64, usize, u64) {
    let bytes = std::fs::read(path).unwrap();
    let (h, off) = Header::decode(&bytes, path).unwrap();
    (h.shape[0], off, bytes.len() as u64)
}

#[test]
fn create_append_reopen() {
    let (_d, p) = tmp();
    let mut s = ArrayStore::create(&p, "'<f8'", 8, &[3], &StoreOptions::default()).unwrap();
    assert_eq!((s.len(), s.row_bytes(), s.data_offset() % 64), (0, 24, 0));
    assert_eq!(s.append(&rows_f64(&[1., 2., 3.])).unwrap(), 1);
    assert_eq!(s.append(&rows_f64(&[4., 5., 6., 7., 8., 9.])).unwrap(), 3);
    assert!(s.capacity() >= 3);
    // Visible on disk before close, with capacity beyond the header's count.
    let (rows, off, file_len) = header_rows(&p);
    assert_eq!(rows, 3);
    assert!(file_len > off as u64 + 3 * 24, "capacity is reserved ahead");
    let e = s.append(&[0u8; 10]).unwrap_err();
    assert!(e.to_string().contains("not a whole number of 24-byte rows"), "{e}");
    s.close().unwrap();
    let (rows, off, file_len) = header_rows(&p);
    assert_eq!((rows, file_len), (3, off as u64 + 72), "close trims the capacity");

    let r = ArrayStore::open(&p, false, None).unwrap();
    assert_eq!(r.len(), 3);
    assert_eq!(r.data(), &rows_f64(&[1., 2., 3., 4., 5., 6., 7., 8., 9.])[..]);
    assert!(matches!(
        ArrayStore::open(&p, false, None).unwrap().append(&[0; 24]),
        Err(Error::ReadOnly { .. })
    ));
    let mut w = ArrayStore::open(&p, true, None).unwrap();
    w.append(&rows_f64(&[10., 11., 12.])).unwrap();
    assert_eq!(w.len(), 4);
    drop(w);
    assert_eq!(header_rows(&p).2, off as u64 + 96, "drop trims too");
}

#[test]
fn one_writer_at_a_time() {
    let (_d, p) = tmp();
    let _w = ArrayStore::create(&p, "'<i4'", 4, &[], &StoreOptions::default()).unwrap();
    // The holder is this process: the refusal says so, not "another process".
    let e = ArrayStore::open(&p, true, None).unwrap_err();
    assert!(e.to_string().contains("this process already has the store open for writing"), "{e}");
    let e = ArrayStore::create(&p, "'<i4'", 4, &[], &StoreOptions::default()).unwrap_err();
    assert!(e.to_string().contains("open for writing"), "{e}");
    ArrayStore::open(&p, false, None).unwrap();
}

#[test]
fn release_gives_the_writer_lock_back_while_the_data_stays_mapped() {
    let (_d, p) = tmp();
    let mut w = ArrayStore::create(&p, "'<f8'", 8, &[], &StoreOptions::default()).unwrap();
    w.append(&rows_f64(&[1., 2.])).unwrap();
    w.release().unwrap();
    // `w` still maps its rows (a binding keeps it for live views) ...
    assert_eq!(w.data(), &rows_f64(&[1., 2.])[..]);
    // ... but no longer holds the lock: a new writer opens at once.
    let mut w2 = ArrayStore::open(&p, true, None).unwrap();
    w2.append(&rows_f64(&[3.])).unwrap();
    assert_eq!(w.data(), &rows_f64(&[1., 2.])[..]);
    drop(w);
    // Dropping the released handle does not take w2's registration away.
    let e = ArrayStore::open(&p, true, None).unwrap_err();
    assert!(e.to_string().contains("this process already has"), "{e}");
    w2.close().unwrap();
    ArrayStore::open(&p, true, None).unwrap();
}

#[test]
fn readers_map_copy_on_write() {
    let (_d, p) = tmp();
    let mut w = ArrayStore::create(&p, "'<u8'", 8, &[], &StoreOptions::default()).unwrap();
    w.append(&[7u8; 8]).unwrap();
    let mut r = ArrayStore::open(&p, false, None).unwrap();
    assert_eq!(r.map().mode(), Mode::CopyOnWrite);
    assert!(!r.is_writable(), "the store itself stays read-only");
    w.append(&[9u8; 8]).unwrap();
    assert_eq!(r.refresh().unwrap(), 2);
    assert_eq!(r.data(), &[[7u8; 8], [9u8; 8]].concat()[..], "growth still shows the file");
}

#[test]
fn reader_refresh_follows_growth_and_slices_stay_valid() {
    let (_d, p) = tmp();
    let opts = StoreOptions { chunk_bytes: 64, ..StoreOptions::default() };
    let mut w = ArrayStore::create(&p, "'<u8'", 8, &[], &opts).unwrap();
    let mut r = ArrayStore::open(&p, false, None).unwrap();
    let mut expect = Vec::new();
    for i in 0..2000u64 {
        let bytes = i.to_le_bytes();
        w.append(&bytes).unwrap();
        expect.extend_from_slice(&bytes);
    }
    let ptr = w.data_ptr();
    assert_eq!(r.len(), 0);
    assert_eq!(r.refresh().unwrap(), 2000);
    let first = r.data().as_ptr();
    assert_eq!(r.data(), &expect[..]);
    for i in 2000..300_000u64 {
        w.append(&i.to_le_bytes()).unwrap();
    }
    assert_eq!(w.data_ptr(), ptr, "writer growth never moves the data");
    assert_eq!(r.refresh().unwrap(), 300_000);
    assert_eq!(r.data().as_ptr(), first, "reader growth never moves the data");
    assert_eq!(&r.data()[8 * 299_999..], &299_999u64.to_le_bytes());
}

#[test]
fn unpublished_rows_are_invisible_and_reused() {
    let (_d, p) = tmp();
    let mut w = ArrayStore::create(&p, "'<u8'", 8, &[2], &StoreOptions::default()).unwrap();
    w.append(&[1u8; 16]).unwrap();
    // A fill that fails (as a crash would) writes rows but never publishes.
    let r: std::result::Result<u64, &str> = w
        .append_with(5, |rows| {
            rows.fill(0xee);
            Err("boom")
        })
        .unwrap();
    assert_eq!(r, Err("boom"));
    assert_eq!((w.len(), header_rows(&p).0), (1, 1));
    assert_eq!(ArrayStore::open(&p, false, None).unwrap().data(), &[1u8; 16]);
    // The next append reuses the unpublished capacity.
    w.append(&[2u8; 16]).unwrap();
    let mut want = vec![1u8; 16];
    want.extend([2u8; 16]);
    assert_eq!(ArrayStore::open(&p, false, None).unwrap().data(), &want[..]);
}

#[test]
fn grows_np_save_files_and_rejects_bad_ones() {
    let (_d, p) = tmp();
    // What np.save(np.arange(4, dtype='<i2')) writes: a minimal header.
    let h = Header::new("<i2", vec![4]);
    let mut bytes = h.encode().unwrap();
    assert!(h.growable_len() > bytes.len() || h.growable_len() == bytes.len());
    bytes.extend([1u8, 0, 2, 0, 3, 0, 4, 0]);
    std::fs::write(&p, &bytes).unwrap();
    let mut w = ArrayStore::open(&p, true, None).unwrap();
    w.append(&[5, 0]).unwrap();
    w.close().unwrap();
    let r = ArrayStore::open(&p, false, None).unwrap();
    assert_eq!(r.data(), &[1, 0, 2, 0, 3, 0, 4, 0, 5, 0]);

    for (content, want) in [
        (b"not numpy at all".to_vec(), "bad magic"),
        (Header::new("<f8", vec![10]).encode().unwrap(), "header says 10 rows"),
        (Header::new("<f8", vec![]).encode().unwrap(), "0-d array"),
        (
            Header { descr: "'<f8'".into(), fortran_order: true, shape: vec![2, 2] }
                .encode()
                .unwrap(),
            "Fortran",
        ),
    ] {
        std::fs::write(&p, &content).unwrap();
        let e = ArrayStore::open(&p, false, None).unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "{e}");
        assert!(e.to_string().contains(want) && e.to_string().contains("a.npy"), "{e}");
    }
    let e = ArrayStore::create(&p, "'<f8'", 8, &[0], &StoreOptions::default()).unwrap_err();
    assert!(e.to_string().contains("zero bytes"), "{e}");
    let s = Header { descr: "[('a', '<i4')]".into(), fortran_order: false, shape: vec![0] };
    std::fs::write(&p, s.encode().unwrap()).unwrap();
    assert!(ArrayStore::open(&p, false, None).unwrap_err().to_string().contains("item size"));
    assert_eq!(ArrayStore::open(&p, false, Some(4)).unwrap().len(), 0);
}

#[test]
fn create_replaces_atomically_and_leaves_no_temp_files() {
    let (d, p) = tmp();
    std::fs::write(&p, b"old").unwrap();
    let s = ArrayStore::create(
        &p,
        "'|u1'",
        1,
        &[],
        &StoreOptions { capacity_rows: 1000, ..Default::default() },
    )
    .unwrap();
    assert!(s.capacity() >= 1000);
    let mut names: Vec<_> =
        std::fs::read_dir(d.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    names.sort();
    // The store and its durable-rows record (see `durable`), no temp file.
    assert_eq!(names, [".a.npy.mmapkit-durable", "a.npy"].map(std::ffi::OsString::from));
    let e = ArrayStore::create(
        d.path().join("missing/x.npy"),
        "'|u1'",
        1,
        &[],
        &StoreOptions::default(),
    )
    .unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
}

#[test]
fn concurrent_reader_sees_only_whole_published_rows() {
    let (_d, p) = tmp();
    let opts = StoreOptions { chunk_bytes: 4096, ..Default::default() };
    let mut w = ArrayStore::create(&p, "'<u8'", 8, &[4], &opts).unwrap();
    let p2 = p.clone();
    // The writer starts once the reader has looked once, so the reader sees
    // the array grow however the threads are scheduled (issue 27).
    let (looked, first_look) = std::sync::mpsc::channel();
    let reader = std::thread::spawn(move || {
        let mut r = ArrayStore::open(&p2, false, None).unwrap();
        let mut last = 0;
        let mut checks = 0;
        while last < 50_000 {
            let n = r.refresh().unwrap();
            assert!(n >= last);
            // Every published row is complete: row i holds i + 1 four times.
            for (i, row) in r.data().chunks_exact(32).enumerate().skip(last as usize) {
                for k in 0..4 {
                    let v = u64::from_le_bytes(row[8 * k..8 * k + 8].try_into().unwrap());
                    assert_eq!(v, i as u64 + 1, "row {i} of {n}");
                }
            }
            last = n;
            checks += 1;
            let _ = looked.send(());
        }
        checks
    });
    first_look.recv().unwrap();
    for i in 0..50_000u64 {
        let row: Vec<u8> = std::iter::repeat_n((i + 1).to_le_bytes(), 4).flatten().collect();
        w.append(&row).unwrap();
    }
    assert!(reader.join().unwrap() > 1);
}

#[test]
fn row_counts_crossing_ten_to_the_eight() {
    let (_d, p) = tmp();
    let h = Header::new("|u1", vec![99_999_999]);
    let off = h.growable_len();
    std::fs::write(&p, h.encode_growable(off).unwrap().0).unwrap();
    crate::store::sparse(&p, off as u64 + 99_999_999).unwrap(); // no blocks written
    let mut w = ArrayStore::open(&p, true, None).unwrap();
    assert_eq!(w.len(), 99_999_999);
    w.append(&[7, 8, 9]).unwrap();
    assert_eq!(header_rows(&p).0, 100_000_002);
    let r = ArrayStore::open(&p, false, None).unwrap();
    assert_eq!(&r.data()[99_999_999..], &[7, 8, 9]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
    /// Any sequence of appends, reopens and trims gives the concatenation
    /// of the appended rows (the naive model), on disk and in memory.
    #[test]
    fn appends_match_a_vec(ops in prop::collection::vec((0usize..40, 0u8..4), 1..30), width in 1u64..4) {
        let (_d, p) = tmp();
        let rb = 2 * width as usize;
        let opts = StoreOptions { chunk_bytes: 16, ..Default::default() };
        let mut s = ArrayStore::create(&p, "'<i2'", 2, &[width], &opts).unwrap();
        let mut model: Vec<u8> = Vec::new();
        for (k, (n, op)) in ops.into_iter().enumerate() {
            let rows: Vec<u8> = (0..n * rb).map(|i| (i + k * 7) as u8).collect();
            s.append(&rows).unwrap();
            model.extend_from_slice(&rows);
            match op {
                0 => { s.close().unwrap(); s = ArrayStore::open_with(&p, true, None, &opts).unwrap(); }
                1 => s.trim().unwrap(),
                _ => {}
            }
            prop_assert_eq!(s.data(), &model[..]);
            let r = ArrayStore::open(&p, false, None).unwrap();
            prop_assert_eq!(r.data(), &model[..]);
        }
    }
}

#[test]
fn open_validates_before_changing_a_byte() {
    let (_d, p) = tmp();
    // An object array as np.save writes it (pickled payload after the header).
    let mut obj = Header::new("|O", vec![4]).encode().unwrap();
    obj.extend_from_slice(&[
        0x80, 4, 0x95, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21,
        22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32,
    ]);
    let structured = Header {
        descr: "[('a', '<i4'), ('b', '|O')]".into(),
        fortran_order: false,
        shape: vec![1],
    };
    let mut structured = structured.encode().unwrap();
    structured.extend([0u8; 12]);
    let mut short = Header::new("<f8", vec![3]).encode().unwrap();
    short.extend([0u8; 23]);
    for (content, want) in [(obj, "|O"), (structured, "objects"), (short, "3 rows")] {
        std::fs::write(&p, &content).unwrap();
        for writable in [false, true] {
            let e = ArrayStore::open(&p, writable, Some(8)).unwrap_err();
            assert!(matches!(e, Error::Format { .. }), "{e}");
            assert!(e.to_string().contains(want) && e.to_string().contains("a.npy"), "{e}");
            assert_eq!(std::fs::read(&p).unwrap(), content, "untouched");
        }
    }
    // A simple dtype whose size disagrees with the caller's is refused too.
    let mut f8 = Header::new("<f8", vec![1]).encode().unwrap();
    f8.extend([0u8; 8]);
    std::fs::write(&p, &f8).unwrap();
    let e = ArrayStore::open(&p, true, Some(4)).unwrap_err();
    assert!(e.to_string().contains("8-byte items, not 4"), "{e}");
    assert_eq!(std::fs::read(&p).unwrap(), f8);
}

#[test]
fn open_and_close_keeps_bytes_past_the_row_count() {
    let (_d, p) = tmp();
    let mut w = ArrayStore::create(&p, "'<u2'", 2, &[], &StoreOptions::default()).unwrap();
    w.append(&[1, 0, 2, 0]).unwrap();
    w.close().unwrap();
    let mut bytes = std::fs::read(&p).unwrap();
    bytes.extend_from_slice(b"not ours to drop");
    std::fs::write(&p, &bytes).unwrap();
    ArrayStore::open(&p, true, None).unwrap().close().unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), bytes);
    // Appending overwrites those bytes as capacity, then trims to the rows
    // or the old length, whichever is longer.
    let mut w = ArrayStore::open(&p, true, None).unwrap();
    w.append(&[3, 0]).unwrap();
    w.close().unwrap();
    assert_eq!(std::fs::metadata(&p).unwrap().len(), bytes.len() as u64);
    assert_eq!(ArrayStore::open(&p, false, None).unwrap().data(), &[1, 0, 2, 0, 3, 0]);
}

// ----- the durable-rows record (power loss between flushes) ------------------

/// A writer's state after a power loss, simulated: 5 rows flushed, 3 more
/// published (header says 8) but never flushed, copied into `to` with the
/// record as a later boot sees it. Returns the copy's path.
fn survivor_of_power_loss(to: &Path) -> PathBuf {
    let (_d, p) = tmp();
    let rows =
        |r: std::ops::Range<u64>| -> Vec<u8> { r.flat_map(|i| (i + 1).to_le_bytes()).collect() };
    let mut s = ArrayStore::create(&p, "'<u8'", 8, &[], &StoreOptions::default()).unwrap();
    s.append(&rows(0..5)).unwrap();
    s.flush().unwrap();
    s.append(&rows(5..8)).unwrap();
    let rec = durable::path_of(&p);
    let q = to.join("a.npy");
    std::fs::copy(&p, &q).unwrap();
    std::fs::copy(&rec, durable::path_of(&q)).unwrap();
    durable::set_boot(&durable::path_of(&q), false);
    q
}

#[test]
fn record_exists_while_writing_and_goes_on_close() {
    let (d, p) = tmp();
    let mut s = ArrayStore::create(&p, "'<u8'", 8, &[], &StoreOptions::default()).unwrap();
    let rec = d.path().join(".a.npy.mmapkit-durable");
    s.append(&7u64.to_le_bytes()).unwrap();
    s.flush().unwrap();
    assert_eq!(durable::read(&rec).unwrap().map(|r| (r.rows, r.this_boot)), Some((1, true)));
    s.close().unwrap();
    assert!(!rec.exists());
    // A writer reopening, and dropping without close: gone too.
    drop(ArrayStore::open(&p, true, None).unwrap());
    assert!(!rec.exists());
}

#[test]
fn rows_past_the_record_of_an_earlier_boot_are_not_trusted() {
    let d = tempfile::tempdir().unwrap();
    let q = survivor_of_power_loss(d.path());
    assert_eq!(header_rows(&q).0, 8, "the header counts the unflushed rows");
    let mut r = ArrayStore::open(&q, false, None).unwrap();
    assert_eq!(r.len(), 5, "a reader trusts only the flushed rows");
    assert_eq!(r.refresh().unwrap(), 5);
    // A writer cuts the header back, durably, and goes on from there.
    let mut w = ArrayStore::open(&q, true, None).unwrap();
    assert_eq!((w.len(), header_rows(&q).0), (5, 5));
    w.append(&100u64.to_le_bytes()).unwrap();
    w.close().unwrap();
    let back = ArrayStore::open(&q, false, None).unwrap();
    let vals: Vec<u64> =
        back.data().chunks(8).map(|c| u64::from_le_bytes(c.try_into().unwrap())).collect();
    assert_eq!(vals, [1, 2, 3, 4, 5, 100]);
}

#[test]
fn a_record_of_this_boot_or_of_other_content_is_not_applied() {
    let d = tempfile::tempdir().unwrap();
    let q = survivor_of_power_loss(d.path());
    // Same boot: the page cache held every published row; nothing is cut
    // (the record is rewritten as of now by the writer).
    durable::set_boot(&durable::path_of(&q), true);
    assert_eq!(ArrayStore::open(&q, false, None).unwrap().len(), 8);
    // Another file at the path (written over by another tool, other
    // content): an earlier boot's record does not apply to it.
    std::fs::create_dir(d.path().join("x")).unwrap();
    let q = survivor_of_power_loss(&d.path().join("x"));
    let mut bytes = std::fs::read(&q).unwrap();
    let (_, off, _) = header_rows(&q);
    bytes[off + 4 * 8] ^= 0xff; // row 4 (the last flushed one) differs
    std::fs::write(&q, &bytes).unwrap();
    assert_eq!(ArrayStore::open(&q, false, None).unwrap().len(), 8);
}

#[test]
fn a_damaged_record_is_an_error_naming_it() {
    let d = tempfile::tempdir().unwrap();
    let rec = durable::path_of(&survivor_of_power_loss(d.path()));
    let mut b = std::fs::read(&rec).unwrap();
    b[20] ^= 1; // the row count
    std::fs::write(&rec, &b).unwrap();
    let e = ArrayStore::open(d.path().join("a.npy"), false, None).unwrap_err();
    assert!(
        matches!(e, Error::Corrupt { .. }) && e.to_string().contains(".a.npy.mmapkit-durable"),
        "{e}"
    );
}

#[test]
fn a_record_that_is_not_a_regular_file_is_refused_without_opening_it() {
    let (d, p) = tmp();
    ArrayStore::create(&p, "'<u8'", 8, &[], &StoreOptions::default()).unwrap().close().unwrap();
    let rec = d.path().join(".a.npy.mmapkit-durable");
    assert!(std::process::Command::new("mkfifo").arg(&rec).status().unwrap().success());
    let e = ArrayStore::open(&p, false, None).unwrap_err();
    assert!(e.to_string().contains("not a regular file"), "{e}");
}

#[test]
fn gather_rows_copies_runs_and_checks_bounds() {
    let (_d, p) = tmp();
    let mut s = ArrayStore::create(&p, "'<f8'", 8, &[2], &StoreOptions::default()).unwrap();
    let vals: Vec<f64> = (0..20).map(|v| v as f64).collect();
    s.append(&rows_f64(&vals)).unwrap();
    let r = ArrayStore::open(&p, false, None).unwrap();
    let idx = [7u64, 8, 9, 0, 1, 5, 5, 3];
    let mut out = vec![0u8; idx.len() * 16];
    r.gather_rows(&idx, &mut out).unwrap();
    let want: Vec<f64> = idx.iter().flat_map(|&i| [2.0 * i as f64, 2.0 * i as f64 + 1.0]).collect();
    assert_eq!(out, rows_f64(&want));
    r.gather_rows(&[], &mut []).unwrap();
    let e = r.gather_rows(&[10], &mut [0u8; 16]).unwrap_err();
    assert!(e.to_string().contains("row 10 is out of range"), "{e}");
    assert!(e.to_string().contains("a.npy"), "{e}");
    let e = r.gather_rows(&[1], &mut [0u8; 8]).unwrap_err();
    assert!(e.to_string().contains("not 1 rows of 16 bytes"), "{e}");
}

/// Both forms split large gathers between threads: every thread count
/// gives the rows' bytes (a naive reference), the sink form writes each
/// output byte exactly once, and a bad row or length copies nothing.
#[test]
fn gather_rows_with_and_on_split_between_threads_like_gather_rows() {
    use std::sync::Mutex;
    let (_d, p) = tmp();
    let mut s = ArrayStore::create(&p, "'<f8'", 8, &[4], &StoreOptions::default()).unwrap();
    let n = 3 * GATHER_PART / 32 + 77; // rows of 32 bytes: a few parts' worth
    let vals: Vec<f64> = (0..n * 4).map(|v| v as f64).collect();
    s.append(&rows_f64(&vals)).unwrap();
    let r = ArrayStore::open(&p, false, None).unwrap();
    // Blocks of 5 consecutive rows in a scrambled order (repeats included:
    // collected in pieces), then long runs (handed on straight from the map).
    let scrambled: Vec<u64> =
        (0..n as u64).map(|i| ((i / 5) * 7919 % (n as u64 / 5)) * 5 + i % 5).collect();
    let long: Vec<u64> = (0..n as u64).map(|i| (i + n as u64 / 2) % n as u64).collect();
    for idx in [scrambled, long] {
        let want: Vec<u8> =
            idx.iter().flat_map(|&i| rows_f64(&vals[i as usize * 4..][..4])).collect();
        let mut one = vec![0u8; want.len()];
        r.gather_rows(&idx, &mut one).unwrap();
        assert_eq!(one, want);
        for t in [1, 2, 3, 8] {
            let mut on = vec![0u8; want.len()];
            r.gather_rows_on(&idx, &mut on, Threads::from(t)).unwrap();
            assert_eq!(on, want, "threads {t}");
            let words = r.take_rows(&idx, Threads::from(t)).unwrap();
            assert_eq!(bytemuck::cast_slice::<u64, u8>(&words), &want[..], "threads {t}");
            let out = Mutex::new(vec![0u8; want.len()]);
            let written = Mutex::new(0usize);
            r.gather_rows_with(&idx, want.len(), Threads::from(t), |at, src| {
                out.lock().unwrap()[at..at + src.len()].copy_from_slice(src);
                *written.lock().unwrap() += src.len();
            })
            .unwrap();
            assert_eq!(out.into_inner().unwrap(), want, "threads {t}");
            assert_eq!(written.into_inner().unwrap(), want.len(), "threads {t}");
        }
    }
    let never = |_: usize, _: &[u8]| panic!("nothing may be copied");
    assert!(r.gather_rows_with(&[0, n as u64], 64, Threads::from(2), never).is_err());
    assert!(r.gather_rows_with(&[0, 1], 63, Threads::from(2), never).is_err());
    let mut out = vec![7u8; 64];
    assert!(r.gather_rows_on(&[0, n as u64], &mut out, Threads::from(2)).is_err());
    assert_eq!(out, vec![7u8; 64]);
    assert!(r.take_rows(&[0, n as u64], Threads::from(2)).is_err());
    assert_eq!(r.take_rows(&[], Threads::from(2)).unwrap(), Vec::<u64>::new());
}

/// `take_rows` pads its last word with zeros when the rows' bytes are not
/// a whole number of words.
#[test]
fn take_rows_pads_the_last_word_with_zeros() {
    let (_d, p) = tmp();
    let mut s = ArrayStore::create(&p, "'|u1'", 1, &[3], &StoreOptions::default()).unwrap();
    s.append(&[1, 2, 3, 4, 5, 6, 7, 8, 9]).unwrap();
    let words = s.take_rows(&[2, 0, 2], Threads::from(2)).unwrap();
    assert_eq!(
        bytemuck::cast_slice::<u64, u8>(&words),
        &[7, 8, 9, 1, 2, 3, 7, 8, 9, 0, 0, 0, 0, 0, 0, 0]
    );
}

#[test]
fn truncate_rows_cuts_the_count_and_reuses_the_rows() {
    let (_d, p) = tmp();
    let mut s = ArrayStore::create(&p, "'<f8'", 8, &[], &StoreOptions::default()).unwrap();
    s.append(&rows_f64(&[1., 2., 3., 4.])).unwrap();
    let e = s.truncate_rows(5).unwrap_err();
    assert!(e.to_string().contains("cannot truncate to 5 rows"), "{e}");
    s.truncate_rows(2).unwrap();
    assert_eq!((s.len(), header_rows(&p).0), (2, 2));
    s.append(&rows_f64(&[9.])).unwrap();
    assert_eq!(s.data(), &rows_f64(&[1., 2., 9.])[..]);
    let mut r = ArrayStore::open(&p, false, None).unwrap();
    assert!(matches!(r.truncate_rows(0), Err(Error::ReadOnly { .. })));
    s.truncate_rows(1).unwrap();
    let e = r.refresh().unwrap_err();
    assert!(e.to_string().contains("went down"), "{e}");
    s.close().unwrap();
    assert_eq!(ArrayStore::open(&p, false, None).unwrap().data(), &rows_f64(&[1.])[..]);
}

/// A sparse file of `len` bytes starting with `head`.
fn sparse(path: &Path, head: &[u8], len: u64) {
    let f = File::create(path).unwrap();
    f.write_all_at(head, 0).unwrap();
    f.set_len(len).unwrap();
}

const RLIMIT_CHILD: &str = "MMAPKIT_TEST_RLIMIT_CHILD";

/// Lengths read from a file are capped before anything is allocated for
/// them: under a 256 MiB address-space limit, a `.npy` header claiming
/// ~4 GB in a file that really is 6 GiB long (sparse), and a durable-rows
/// record of 6 GiB, are clean errors, not an allocation failure (abort).
/// Runs itself again as a child with `RLIMIT_AS` set (the limit must not
/// apply to the other tests).
#[test]
fn claimed_lengths_are_capped_under_rlimit_as() {
    if let Some(dir) = std::env::var_os(RLIMIT_CHILD) {
        let dir = PathBuf::from(dir);
        let p = dir.join("huge-header.npy");
        let mut head = b"\x93NUMPY\x02\x00".to_vec();
        head.extend_from_slice(&4_000_000_000u32.to_le_bytes());
        sparse(&p, &head, 6 << 30);
        let e = ArrayStore::open(&p, false, None).unwrap_err();
        assert_eq!((e.kind(), e.path()), (crate::ErrorKind::Format, Some(p.as_path())), "{e}");
        assert!(e.message().contains("4000000000"), "{e}");
        let e = crate::stats::MappedArray::open(&p, None, 0, None).unwrap_err();
        assert_eq!((e.kind(), e.path()), (crate::ErrorKind::Format, Some(p.as_path())), "{e}");
        let e = crate::store::Segment::attach(&p, false, false).unwrap_err();
        assert_eq!((e.kind(), e.path()), (crate::ErrorKind::Format, Some(p.as_path())), "{e}");

        // A store whose durable-rows record is 6 GiB long.
        let q = dir.join("q.npy");
        // (A small reserve: the default 64 GiB does not fit the limit.)
        let opts = StoreOptions { reserve: 1 << 20, ..StoreOptions::default() };
        ArrayStore::create(&q, "'<f8'", 8, &[], &opts).unwrap().close().unwrap();
        let rec = durable::path_of(&q);
        sparse(&rec, b"MMAPKIT-DURABLE\x01", 6 << 30);
        let e = ArrayStore::open_with(&q, false, None, &opts).unwrap_err();
        assert_eq!((e.kind(), e.path()), (crate::ErrorKind::Corrupt, Some(rec.as_path())), "{e}");
        // The metadata-file reader (log truncation history, follower and
        // raft records) on the same file.
        let e = crate::fs::read_small(&rec, 1 << 20).unwrap_err();
        assert_eq!((e.kind(), e.path()), (crate::ErrorKind::Corrupt, Some(rec.as_path())), "{e}");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    // The limit through the shell's `ulimit -v` (KiB), then exec: no
    // unsafe `pre_exec` (unsafe code lives in `map/` only).
    let mut cmd = std::process::Command::new("sh");
    cmd.args(["-c", "ulimit -v 262144 && exec \"$0\" \"$@\""])
        .arg(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "store::array::tests::claimed_lengths_are_capped_under_rlimit_as",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(RLIMIT_CHILD, dir.path());
    let out = cmd.output().unwrap();
    let text =
        format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(
        out.status.success() && text.contains("1 passed"),
        "child under RLIMIT_AS failed ({}):\n{text}",
        out.status
    );
}

/// Errors about a file carry its path as the field, not in the message.
#[test]
fn refusals_carry_the_path_as_a_field() {
    let (_d, p) = tmp();
    let e = ArrayStore::create(&p, "  ", 8, &[1], &StoreOptions::default()).unwrap_err();
    assert_eq!((e.kind(), e.path()), (crate::ErrorKind::InvalidArgument, Some(p.as_path())), "{e}");
    assert_eq!(e.message(), "empty dtype description");
    let header = Header {
        descr: "[('a', '<f8'), ('b', '<i4')]".into(),
        fortran_order: false,
        shape: vec![0],
    };
    std::fs::write(&p, header.encode().unwrap()).unwrap();
    let e = ArrayStore::open(&p, false, None).unwrap_err();
    assert_eq!((e.kind(), e.path()), (crate::ErrorKind::InvalidArgument, Some(p.as_path())), "{e}");
    assert!(!e.message().contains(p.to_str().unwrap()), "{e}");
}

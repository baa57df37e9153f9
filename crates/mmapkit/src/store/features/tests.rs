use super::*;
use proptest::prelude::*;

fn f32s(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn i64s(v: &[i64]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn schema(dim: u64) -> Schema {
    Schema::new(dim, "<f4", "<i8").unwrap()
}

/// `n` rows of `dim` from `start`: row i is all i, its label i.
fn rows(start: usize, n: usize, dim: usize) -> (Vec<u8>, Vec<u8>) {
    let x: Vec<f32> = (start..start + n).flat_map(|i| std::iter::repeat_n(i as f32, dim)).collect();
    let y: Vec<i64> = (start..start + n).map(|i| i as i64).collect();
    (f32s(&x), i64s(&y))
}

/// What a writer killed mid-add leaves: rows past meta.json's count.
fn leave_uncommitted(dir: &Path, nf: usize, nl: usize, dim: usize) {
    let mut f = ArrayStore::open(dir.join(FEATURES), true, None).unwrap();
    f.append(&f32s(&vec![-1.0; nf * dim])).unwrap();
    f.close().unwrap();
    let mut l = ArrayStore::open(dir.join(LABELS), true, None).unwrap();
    l.append(&i64s(&vec![-1; nl])).unwrap();
    l.close().unwrap();
}

#[test]
fn add_commits_rows_readers_see_and_meta_is_what_python_writes() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    let mut w = FeatureStore::create(&p, &schema(3)).unwrap();
    let (x, y) = rows(0, 5, 3);
    assert_eq!(w.add(&x, &y).unwrap(), 5);
    assert_eq!(w.add(&[], &[]).unwrap(), 5);
    let meta = std::fs::read_to_string(p.join(META)).unwrap();
    assert_eq!(
        meta,
        "{\n \"format\": \"mmapkit.FeatureStore\",\n \"version\": 1,\n \"dim\": 3,\n \
         \"dtype\": \"<f4\",\n \"label_dtype\": \"<i8\",\n \"rows\": 5,\n \
         \"features\": \"features.npy\",\n \"labels\": \"labels.npy\"\n}\n"
    );
    let r = FeatureStore::open(&p, false).unwrap();
    assert_eq!(r.committed(), (&x[..], &y[..]));
    assert_eq!(r.features().header().descr, "'<f4'");
    // Not whole rows, or counts that differ: nothing is written.
    let e = w.add(&x[..7], &y).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument, "{e}");
    let e = w.add(&x, &y[..8]).unwrap_err();
    assert!(e.to_string().contains("same number of whole rows"), "{e}");
    assert_eq!(w.len(), 5);
    let mut ro = FeatureStore::open(&p, false).unwrap();
    assert_eq!(ro.add(&x, &y).unwrap_err().kind(), crate::ErrorKind::ReadOnly);
    assert_eq!(ro.refresh().unwrap(), 5);
    w.close().unwrap();
}

#[test]
fn one_writer_and_the_refusal_names_this_process() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    let w = FeatureStore::create(&p, &schema(2)).unwrap();
    let e = FeatureStore::open(&p, true).unwrap_err();
    assert_eq!(e.errno(), Some(libc::EWOULDBLOCK));
    assert!(e.to_string().contains("this process already has"), "{e}");
    assert!(!e.to_string().contains("another process"), "{e}");
    let e = FeatureStore::create(&p, &schema(2)).unwrap_err();
    assert!(e.to_string().contains("cannot re-create"), "{e}");
    assert!(!e.to_string().contains("another process"), "{e}");
    w.close().unwrap();
    FeatureStore::open(&p, true).unwrap().close().unwrap();
}

#[test]
fn bad_stores_are_clear_errors() {
    let d = tempfile::tempdir().unwrap();
    let e = FeatureStore::open(d.path().join("nope"), false).unwrap_err();
    assert_eq!((e.errno(), e.path()), (Some(libc::ENOENT), Some(&*d.path().join("nope"))));
    let e = FeatureStore::open(d.path(), false).unwrap_err();
    assert_eq!(e.path(), Some(&*d.path().join(META)));
    assert!(e.to_string().contains("not a FeatureStore"), "{e}");
    std::fs::write(d.path().join("file"), "x").unwrap();
    let e = FeatureStore::open(d.path().join("file"), false).unwrap_err();
    assert_eq!(e.errno(), Some(libc::ENOTDIR));
    let p = d.path().join("fs");
    FeatureStore::create(&p, &schema(3)).unwrap().close().unwrap();
    for (meta, want) in [
        ("{not json", "not valid JSON"),
        (r#"{"format": "mmapkit.FeatureStore", "version": 99}"#, "version 99"),
        (r#"{"format": "x", "version": 1}"#, "not a FeatureStore's"),
        (
            r#"{"format": "mmapkit.FeatureStore", "version": 1, "dim": 3, "rows": 5, "dtype": "<f4", "label_dtype": "<i8"}"#,
            "fewer than the 5",
        ),
        (
            r#"{"format": "mmapkit.FeatureStore", "version": 1, "dim": 4, "rows": 0, "dtype": "<f4", "label_dtype": "<i8"}"#,
            "features.npy: holds rows of (3,) <f4, but meta.json says (4,) <f4",
        ),
        (
            r#"{"format": "mmapkit.FeatureStore", "version": 1, "dim": 3, "rows": 0, "dtype": "<f4", "label_dtype": "<f8"}"#,
            "labels.npy: holds rows of () <i8",
        ),
        (
            r#"{"format": "mmapkit.FeatureStore", "version": 1, "dim": 0, "rows": 0, "dtype": "<f4", "label_dtype": "<f8"}"#,
            "bad schema",
        ),
    ] {
        std::fs::write(p.join(META), meta).unwrap();
        let e = FeatureStore::open(&p, false).unwrap_err();
        assert_eq!(e.kind(), crate::ErrorKind::Format, "{e}");
        assert!(e.to_string().contains(want), "{meta}: {e}");
    }
}

#[test]
fn a_writer_cuts_off_uncommitted_rows_and_readers_never_see_them() {
    for (nf, nl) in [(7, 0), (7, 7), (0, 3)] {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("fs");
        let mut w = FeatureStore::create(&p, &schema(2)).unwrap();
        let (x, y) = rows(0, 10, 2);
        w.add(&x, &y).unwrap();
        w.close().unwrap();
        leave_uncommitted(&p, nf, nl, 2);
        let mut r = FeatureStore::open(&p, false).unwrap();
        assert_eq!(r.committed(), (&x[..], &y[..]));
        let mut w = FeatureStore::open(&p, true).unwrap();
        assert_eq!((w.features().len(), w.labels().len()), (10, 10));
        let (x2, y2) = rows(10, 2, 2);
        w.add(&x2, &y2).unwrap();
        // The reader that mapped the cut rows maps the arrays again.
        assert_eq!(r.refresh().unwrap(), 12);
        assert_eq!(r.committed(), (&[x.clone(), x2].concat()[..], &[y.clone(), y2].concat()[..]));
        w.close().unwrap();
    }
}

/// A commit torn by a power loss between the array syncs and the rename:
/// rows and labels synced, meta.json's replacement left in its temp file.
/// The store opens with the old count.
#[test]
fn reopening_after_a_torn_commit_gives_the_old_count() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    let mut w = FeatureStore::create(&p, &schema(2)).unwrap();
    let (x, y) = rows(0, 4, 2);
    w.add(&x, &y).unwrap();
    // Torn: rows and labels appended and synced, meta.json's replacement
    // written to its temp file but never renamed (the writer "lost power").
    w.features.append(&f32s(&[9.0; 6])).unwrap();
    w.labels.append(&i64s(&[9; 3])).unwrap();
    w.features.sync().unwrap();
    w.labels.sync().unwrap();
    let tmp = crate::fs::temp_path(&p.join(META));
    std::fs::write(&tmp, encode_meta(w.schema(), 7)).unwrap();
    // No close: what a crash leaves (the forgotten handle keeps its lock,
    // so a reader checks here; the next test has a writer take over).
    std::mem::forget(w);
    let r = FeatureStore::open(&p, false).unwrap();
    assert_eq!(r.len(), 4);
    assert_eq!(r.committed(), (&x[..], &y[..]));
    assert!(tmp.exists());
}

/// The same, with a writer taking over (the dead writer's lock is gone).
#[test]
fn a_writer_after_a_torn_commit_cuts_back_and_commits_again() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    let mut w = FeatureStore::create(&p, &schema(2)).unwrap();
    let (x, y) = rows(0, 4, 2);
    w.add(&x, &y).unwrap();
    w.close().unwrap();
    leave_uncommitted(&p, 3, 3, 2);
    let tmp = crate::fs::temp_path(&p.join(META));
    std::fs::write(&tmp, encode_meta(&schema(2), 7)).unwrap();
    let mut w = FeatureStore::open(&p, true).unwrap();
    assert_eq!((w.len(), w.features().len(), w.labels().len()), (4, 4, 4));
    let (x2, y2) = rows(4, 1, 2);
    assert_eq!(w.add(&x2, &y2).unwrap(), 5);
    w.close().unwrap();
    let r = FeatureStore::open(&p, false).unwrap();
    assert_eq!(r.committed(), (&[x, x2].concat()[..], &[y, y2].concat()[..]));
}

#[test]
fn create_replaces_a_store_and_readers_follow() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    let mut w = FeatureStore::create(&p, &schema(2)).unwrap();
    let (x, y) = rows(0, 30, 2);
    w.add(&x, &y).unwrap();
    w.close().unwrap();
    let mut r = FeatureStore::open(&p, false).unwrap();
    let mut w = FeatureStore::create(&p, &schema(2)).unwrap();
    let (x2, y2) = rows(100, 5, 2);
    w.add(&x2, &y2).unwrap();
    assert_eq!(r.refresh().unwrap(), 5);
    assert_eq!(r.committed(), (&x2[..], &y2[..]));
    drop(w);
    FeatureStore::create(&p, &schema(3)).unwrap().close().unwrap();
    let e = r.refresh().unwrap_err();
    assert!(e.to_string().contains("schema changed"), "{e}");
    let mut a = FeatureStore::open_or_create(&p, &schema(9)).unwrap();
    assert_eq!(a.schema().dim(), 3);
    a.add(&f32s(&[1.0; 3]), &i64s(&[1])).unwrap();
    a.close().unwrap();
    let n = FeatureStore::open_or_create(d.path().join("new"), &schema(4)).unwrap();
    assert_eq!((n.len(), n.schema().dim()), (0, 4));
}

/// Stores written before the core had a FeatureStore (by the Python
/// implementation: arrays with durable-rows records, `np.save`-style
/// headers) open, and a stale record does not limit readers.
#[test]
fn stores_written_by_the_python_implementation_open() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    std::fs::create_dir(&p).unwrap();
    let s = schema(2);
    let mut f =
        ArrayStore::create(p.join(FEATURES), "'<f4'", 4, &[2], &Default::default()).unwrap();
    let mut l = ArrayStore::create(p.join(LABELS), "'<i8'", 8, &[], &Default::default()).unwrap();
    let (x, y) = rows(0, 3, 2);
    f.append(&x).unwrap();
    l.append(&y).unwrap();
    f.flush().unwrap();
    l.flush().unwrap();
    std::fs::write(p.join(META), encode_meta(&s, 3)).unwrap();
    // A writer that died: its durable-rows records stay, at 3 rows.
    std::mem::forget(f);
    std::mem::forget(l);
    let r = FeatureStore::open(&p, false).unwrap();
    assert_eq!(r.committed(), (&x[..], &y[..]));
}

fn check_against_model(batches: &[usize], refresh_every: usize) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    let dim = 3;
    let mut w = FeatureStore::create(&p, &schema(dim as u64)).unwrap();
    let mut r = FeatureStore::open(&p, false).unwrap();
    let (mut mx, mut my) = (Vec::new(), Vec::new());
    for (i, &n) in batches.iter().enumerate() {
        let (x, y) = rows(my.len() / 8, n, dim);
        let got = w.add(&x, &y).unwrap();
        mx.extend_from_slice(&x);
        my.extend_from_slice(&y);
        assert_eq!(got as usize, my.len() / 8);
        if i % refresh_every == 0 {
            assert_eq!(r.refresh().unwrap() as usize, my.len() / 8);
            assert_eq!(r.committed(), (&mx[..], &my[..]));
        }
    }
    w.close().unwrap();
    let r = FeatureStore::open(&p, true).unwrap();
    assert_eq!(r.committed(), (&mx[..], &my[..]));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]
    #[test]
    fn add_and_refresh_match_a_vec(batches in proptest::collection::vec(0usize..300, 1..12), every in 1usize..4) {
        check_against_model(&batches, every);
    }
}

/// A second writer arriving at any step of `create` is refused: it never
/// gets the old features array (then replaced under it) nor the new
/// features with the old labels.
#[test]
fn create_holds_the_writer_lock_while_it_replaces_both_arrays() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("fs");
    let mut w = FeatureStore::create(&p, &schema(2)).unwrap();
    let (x, y) = rows(0, 10, 2);
    w.add(&x, &y).unwrap();
    w.close().unwrap();
    let seen = std::rc::Rc::new(std::cell::RefCell::new(Vec::new()));
    let fpath = p.join(FEATURES);
    let second_writer = {
        let seen = seen.clone();
        move |step: &str| {
            let got = match ArrayStore::open_with(&fpath, true, None, &array_options()) {
                Ok(a) => {
                    a.close().unwrap();
                    "opened".to_owned()
                }
                Err(e) => match e.errno() {
                    Some(libc::ENOENT) => "ENOENT".to_owned(),
                    Some(libc::EWOULDBLOCK) => "EWOULDBLOCK".to_owned(),
                    _ => e.to_string(),
                },
            };
            seen.borrow_mut().push(format!("{step}: {got}"));
        }
    };
    let hook = second_writer.clone();
    STEP.with(|s| {
        *s.borrow_mut() = Some(Box::new(move |name: &str| hook(&format!("before {name}"))))
    });
    let w = FeatureStore::create(&p, &schema(3)).unwrap();
    STEP.with(|s| *s.borrow_mut() = None);
    second_writer("after");
    assert_eq!(
        *seen.borrow(),
        [
            "before features.npy: ENOENT", // the old one is gone, locked
            "before labels.npy: EWOULDBLOCK",
            "before meta.json: EWOULDBLOCK",
            "after: EWOULDBLOCK",
        ]
    );
    w.close().unwrap();
    let r = FeatureStore::open(&p, true).unwrap();
    assert_eq!((r.len(), r.schema().dim()), (0, 3));
}

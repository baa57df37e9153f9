use super::*;
use crate::store::StoreOptions;

fn store(dir: &std::path::Path, name: &str, rows: u64, width: usize) -> ArrayStore {
    let mut s =
        ArrayStore::create(dir.join(name), "'|u1'", 1, &[width as u64], &StoreOptions::default())
            .unwrap();
    let bytes: Vec<u8> = (0..rows as usize * width).map(|i| (i / width) as u8).collect();
    s.append(&bytes).unwrap();
    s
}

/// Every group of every store, in order, equals `take_rows` of it, for
/// any depth and thread count; then `None`, and `None` again.
#[test]
fn groups_arrive_in_order_as_take_rows_gives_them() {
    let d = tempfile::tempdir().unwrap();
    let a = store(d.path(), "a.npy", 200, 3);
    let b = store(d.path(), "b.npy", 200, 8);
    let rows: Vec<u64> = (0..200).map(|i| (i * 37) % 200).collect();
    let groups = vec![0..50, 50..50, 50..130, 130..200];
    for depth in [0, 1, 4] {
        for t in [1, 2] {
            let mut ahead = GatherAhead::start(
                vec![a.reader().unwrap(), b.reader().unwrap()],
                rows.clone(),
                groups.clone(),
                depth,
                Threads::from(t),
            )
            .unwrap();
            for g in &groups {
                let got = ahead.next().unwrap().unwrap();
                let want = [&a, &b].map(|s| s.take_rows(&rows[g.clone()], Threads::ONE).unwrap());
                assert_eq!(got, want);
            }
            assert!(ahead.next().is_none() && ahead.next().is_none());
        }
    }
}

/// A bad group is refused before anything starts; a bad row ends the
/// sequence with its error; dropping mid-way stops the thread.
#[test]
fn errors_end_the_sequence_and_dropping_stops_the_thread() {
    let d = tempfile::tempdir().unwrap();
    let a = store(d.path(), "a.npy", 10, 4);
    let start = |rows: Vec<u64>, groups| {
        GatherAhead::start(vec![a.reader().unwrap()], rows, groups, 2, Threads::ONE)
    };
    assert!(matches!(start(vec![0, 1], vec![0..1, 1..3]), Err(Error::InvalidArgument(_))));
    let mut ahead = start(vec![0, 1, 99, 2], vec![0..2, 2..3, 3..4]).unwrap();
    assert!(ahead.next().unwrap().is_ok());
    let e = ahead.next().unwrap().unwrap_err();
    assert!(e.to_string().contains("row 99 is out of range"), "{e}");
    assert_eq!(e.path(), Some(a.path()));
    assert!(ahead.next().is_none());
    // Many groups, one taken: dropping returns (the thread, blocked on
    // a full channel, sees the consumer gone).
    let rows: Vec<u64> = (0..10).collect();
    let mut ahead = start(rows, (0..1000).map(|_| 0..10).collect()).unwrap();
    assert!(ahead.next().unwrap().is_ok());
    drop(ahead);
}

/// The reader is of the file this store has open, not of whatever is
/// at its path later.
#[test]
fn a_reader_reads_this_stores_file_after_the_path_is_replaced() {
    let d = tempfile::tempdir().unwrap();
    let a = store(d.path(), "a.npy", 5, 2);
    let other = store(d.path(), "other.npy", 3, 2);
    std::fs::rename(other.path(), a.path()).unwrap();
    let r = a.reader().unwrap();
    assert_eq!((r.len(), r.path()), (5, a.path()));
    assert_eq!(r.take_rows(&[4], Threads::ONE).unwrap(), vec![0x0404]);
}

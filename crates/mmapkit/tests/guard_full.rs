//! When the SIGBUS guard's table is full, new maps work unprotected, and
//! that state is observable (a counter, `is_protected`, a warning) instead
//! of silent. Its own test binary: the table size is read from the
//! environment once per process.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use mmapkit::map::{guard_stats, Map};

#[test]
fn a_full_guard_table_is_counted_and_reported() {
    // SAFETY-free in edition 2021; nothing else in this process reads it yet.
    std::env::set_var("MMAPKIT_GUARD_SLOTS", "3");
    let maps: Vec<Map> = (0..3).map(|_| Map::anonymous(4096).unwrap()).collect();
    assert!(maps.iter().all(Map::is_protected));
    let s = guard_stats();
    assert_eq!((s.capacity, s.in_use, s.unprotected), (3, 3, 0));

    let extra = Map::anonymous(4096).unwrap();
    assert!(!extra.is_protected(), "the fourth map cannot be protected");
    assert_eq!(guard_stats().unprotected, 1);
    // It still works as memory.
    let mut extra = extra;
    extra.write_at(0, b"ok").unwrap();
    assert_eq!(&extra.as_slice()[..2], b"ok");

    // A slot freed is reused; the unprotected count is a running total.
    drop(maps);
    let again = Map::anonymous(4096).unwrap();
    assert!(again.is_protected());
    let s = guard_stats();
    assert_eq!((s.in_use, s.unprotected), (1, 1));
}

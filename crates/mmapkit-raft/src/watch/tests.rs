use super::*;

fn ev(revision: u64, key: &str) -> Event {
    Event { revision, key: key.into(), value: Some("v".into()) }
}

#[test]
fn whole_revisions_are_compacted_and_never_split() {
    let mut h = History::new(1, 3, usize::MAX);
    for e in [ev(1, "a"), ev(2, "a"), ev(2, "b"), ev(3, "c")] {
        h.push(e);
    }
    assert_eq!(h.since(1, |_| true, 10, 3), Err(Compacted { oldest: 2 }));
    let (got, next) = h.since(2, |_| true, 1, 3).unwrap();
    assert_eq!(got, [ev(2, "a"), ev(2, "b")], "revision 2 whole though max is 1");
    assert_eq!(next, 3);
    let (got, next) = h.since(next, |k| k != "x", 10, 3).unwrap();
    assert_eq!((got, next), (vec![ev(3, "c")], 4));
    let (got, next) = h.since(4, |_| true, 10, 7).unwrap();
    assert_eq!((got, next), (vec![], 8), "revisions 4-7 changed nothing");
    h.reset(9);
    assert_eq!(h.since(8, |_| true, 10, 8), Err(Compacted { oldest: 9 }));
}

/// The window is bounded in bytes too: large values compact it sooner,
/// still by whole revisions.
#[test]
fn the_window_is_bounded_in_bytes() {
    let one = size(&ev(1, "a"));
    let mut h = History::new(1, 100, 3 * one);
    for e in [ev(1, "a"), ev(2, "a"), ev(2, "b"), ev(3, "c")] {
        h.push(e);
    }
    assert_eq!(h.since(1, |_| true, 10, 3), Err(Compacted { oldest: 2 }));
    let big = Event { revision: 4, key: "k".into(), value: Some("x".repeat(3 * one)) };
    h.push(big.clone());
    assert_eq!(h.since(4, |_| true, 10, 4), Err(Compacted { oldest: 5 }));
    assert_eq!(h.bytes, 0);
    h.push(ev(5, "a"));
    assert_eq!(h.since(5, |_| true, 10, 5).unwrap(), (vec![ev(5, "a")], 6));
}

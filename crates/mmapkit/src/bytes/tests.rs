use super::*;
use crate::test_util::naive_all;
use proptest::prelude::*;

#[test]
fn borders() {
    for (n, b) in [
        (&b"a"[..], false),
        (b"aa", true),
        (b"ab", false),
        (b"abab", true),
        (b"aba", true),
        (b"abc", false),
        (b"", false),
    ] {
        assert_eq!(has_border(n), b, "{n:?}");
    }
}

#[test]
fn overlapping_rule() {
    assert_eq!(count(b"aaaa", b"aa"), 2);
    assert_eq!(find_all(b"aaaaa", b"aa", None).unwrap(), vec![0, 2]);
    assert_eq!(count(b"abc", b""), 4);
    assert_eq!(find_all(b"abc", b"", None), None);
    assert_eq!(find_all(b"xaxax", b"x", Some(2)).unwrap(), vec![0, 2]);
}

proptest! {
    #[test]
    fn matches_naive(hay in proptest::collection::vec(0u8..3, 0..300),
                     needle in proptest::collection::vec(0u8..3, 1..4)) {
        let expect = naive_all(&hay, &needle);
        prop_assert_eq!(find_all(&hay, &needle, None).unwrap(), expect.clone());
        prop_assert_eq!(count(&hay, &needle), expect.len() as u64);
        prop_assert_eq!(find(&hay, &needle).map(|x| x as u64), expect.first().copied());
    }
}

use super::*;

#[test]
fn history_parses_and_ignores_only_a_torn_last_record() {
    let mut b = Vec::new();
    b.extend_from_slice(&record(10, INTENT));
    b.extend_from_slice(&record(10, DONE));
    b.extend_from_slice(&record(4, INTENT));
    let c = parse_cuts(&b).unwrap();
    assert_eq!((c.epoch(), c.completed, c.pending()), (2, 1, Some(4)));
    assert_eq!(c.cut_since(Path::new("d"), 0).unwrap(), Some(4));
    assert_eq!(c.cut_since(Path::new("d"), 1).unwrap(), Some(4));
    assert_eq!(c.cut_since(Path::new("d"), 2).unwrap(), None);
    assert!(c.cut_since(Path::new("d"), 3).is_err());
    // A torn (partial) or damaged last record is ignored.
    for cut in [b.len() - 1, b.len() - 15] {
        let c = parse_cuts(&b[..cut]).unwrap();
        assert_eq!((c.epoch(), c.completed), (1, 1));
    }
    let mut d = b.clone();
    d[40] ^= 1;
    assert_eq!(parse_cuts(&d).unwrap().epoch(), 1);
    // Damage before the last record is corruption.
    let mut d = b.clone();
    d[3] ^= 1;
    assert!(parse_cuts(&d).is_err());
    // A done record that does not match its intent is damage too.
    let mut d = b[..16].to_vec();
    d.extend_from_slice(&record(11, DONE));
    d.extend_from_slice(&record(3, INTENT));
    assert!(parse_cuts(&d).is_err());
}

use super::*;

#[test]
fn round_trip_and_every_damage_is_detected() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("m");
    assert!(matches!(read::<Vec<u64>>(&p).unwrap(), Read::Missing));
    write(&p, &vec![1u64, 2, 3], true).unwrap();
    let good = std::fs::read(&p).unwrap();
    assert!(matches!(read::<Vec<u64>>(&p).unwrap(), Read::Valid(v) if v == [1, 2, 3]));
    // Every truncation and every single-byte flip is reported, never misread.
    for cut in 0..good.len() - 1 {
        assert!(matches!(parse::<Vec<u64>>(&good[..cut]), Read::Damaged(_)), "cut at {cut}");
    }
    for i in 0..good.len() {
        for bit in 0..8 {
            let mut b = good.clone();
            b[i] ^= 1 << bit;
            match parse::<Vec<u64>>(&b) {
                Read::Valid(v) => assert_eq!(v, [1, 2, 3], "flip at {i}.{bit} misread"),
                Read::Damaged(_) => {}
                Read::Missing => unreachable!(),
            }
        }
    }
    // Nothing is left beside it.
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
}

#[test]
fn a_slot_is_overwritten_in_place_and_a_torn_record_is_never_misread() {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("slot");
    let s = Slot::open(&p).unwrap();
    assert!(matches!(s.read::<u64>().unwrap(), Read::Missing));
    s.write(&123_456_789u64).unwrap();
    s.write(&7u64).unwrap();
    assert!(matches!(s.read::<u64>().unwrap(), Read::Valid(7)));
    assert_eq!(std::fs::metadata(&p).unwrap().len(), SLOT as u64);
    // A sector torn between the old and the new record: the new prefix
    // over the old suffix, at every cut.
    s.write(&123_456_789u64).unwrap();
    let old = std::fs::read(&p).unwrap();
    s.write(&7u64).unwrap();
    let new = std::fs::read(&p).unwrap();
    for cut in 0..SLOT {
        let mut torn = new[..cut].to_vec();
        torn.extend_from_slice(&old[cut..]);
        std::fs::write(&p, &torn).unwrap();
        match Slot::open(&p).unwrap().read::<u64>().unwrap() {
            Read::Valid(v) => assert!(v == 7 || v == 123_456_789, "cut {cut}: {v}"),
            Read::Damaged(_) | Read::Missing => {}
        }
    }
}

use super::*;

#[test]
fn a_mark_round_trips_and_damage_or_a_torn_mix_is_refused() {
    let m = DurableMark { incarnation: 0x0123_4567_89ab_cdef, durable: 42 };
    let b = encode(m);
    assert_eq!(decode(&b), Some(m));
    for i in 0..LEN - 4 {
        let mut c = b;
        c[i] ^= 1;
        assert_eq!(decode(&c), None, "byte {i}");
    }
    // Half of one value and half of the next.
    let n = encode(DurableMark { durable: 43, ..m });
    let mut mix = b;
    mix[16..].copy_from_slice(&n[16..]);
    mix[24..28].copy_from_slice(&b[24..28]);
    assert_eq!(decode(&mix), None);
    assert_eq!(decode(&b[..31]), None);
    assert_eq!(decode(&[&b[..], b"more"].concat()), Some(m));
}

#[test]
fn a_damaged_file_means_nothing_is_known_durable() {
    let d = tempfile::tempdir().unwrap();
    let p = Publisher::open(d.path()).unwrap();
    p.publish(7).unwrap();
    let mut b = std::fs::read(d.path().join(FILE)).unwrap();
    b[17] ^= 1;
    std::fs::write(d.path().join(FILE), &b).unwrap();
    assert_eq!(read(d.path()).unwrap(), Some(DurableMark { incarnation: 0, durable: 0 }));
    std::fs::write(d.path().join(FILE), b"").unwrap();
    assert_eq!(read(d.path()).unwrap(), Some(DurableMark { incarnation: 0, durable: 0 }));
    // The writer's next publication heals it.
    p.publish(8).unwrap();
    assert_eq!(read(d.path()).unwrap().map(|m| m.durable), Some(8));
    // Not a file, or too long for one: an error naming it.
    std::fs::write(d.path().join(FILE), vec![0u8; 8192]).unwrap();
    assert!(read(d.path()).unwrap_err().to_string().contains("durable"));
}

#[test]
fn published_values_are_read_back_and_a_missing_file_is_none() {
    let d = tempfile::tempdir().unwrap();
    assert_eq!(read(d.path()).unwrap(), None);
    let p = Publisher::open(d.path()).unwrap();
    p.publish(7).unwrap();
    assert_eq!(read(d.path()).unwrap().map(|m| m.durable), Some(7));
    p.publish(3).unwrap();
    let m = read(d.path()).unwrap().unwrap();
    assert_eq!((m.incarnation, m.durable), (p.incarnation(), 3));
    let q = Publisher::open(d.path()).unwrap();
    assert_ne!(q.incarnation(), p.incarnation());
}

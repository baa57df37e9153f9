use super::*;

fn meta() -> Meta {
    Meta { last_log_id: None, last_membership: Default::default(), snapshot_id: "s".into() }
}

fn encode(pairs: &[(&str, &str, u64)]) -> Vec<u8> {
    let mut w = Writer::new(Vec::new(), &meta(), Path::new("x")).unwrap();
    for (k, v, r) in pairs {
        w.push(k, v, *r).unwrap();
    }
    w.finish().unwrap()
}

fn decode(b: &[u8]) -> Result<Vec<(String, String, u64)>> {
    let (m, mut r) = Reader::new(b, Path::new("x"))?;
    let mut out = vec![(m.snapshot_id, String::new(), 0)];
    while let Some(rec) = r.next_record()? {
        out.push((rec.key, rec.value, rec.mod_revision));
    }
    Ok(out)
}

#[test]
fn round_trip_and_every_damage_is_refused() {
    let pairs = [("a", "1", 3), ("b", "", 4), ("ünï", "vålue", 9)];
    let b = encode(&pairs);
    let got = decode(&b).unwrap();
    let mut want = vec![("s".to_string(), String::new(), 0)];
    want.extend(pairs.iter().map(|(k, v, r)| (k.to_string(), v.to_string(), *r)));
    assert_eq!(got, want);
    assert_eq!(decode(&encode(&[])).unwrap().len(), 1);
    // Every cut and every flipped byte is an error (never fewer keys).
    for cut in 0..b.len() {
        assert!(decode(&b[..cut]).is_err(), "cut at {cut}");
    }
    for i in 0..b.len() {
        let mut d = b.clone();
        d[i] ^= 0x40;
        assert!(decode(&d).is_err(), "byte {i} flipped");
    }
    let mut longer = b.clone();
    longer.push(0);
    assert!(decode(&longer).is_err());
}

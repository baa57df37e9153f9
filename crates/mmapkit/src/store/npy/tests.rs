use super::*;

fn p() -> &'static Path {
    Path::new("x.npy")
}

#[test]
fn round_trip_and_alignment() {
    for shape in [vec![], vec![0], vec![7], vec![3, 136], vec![u64::MAX, 2, 5]] {
        let h = Header::new("<f4", shape.clone());
        for total in [h.min_len(), h.reserved_len(), h.reserved_len() + 64] {
            let b = h.encode_into(total).unwrap();
            assert_eq!(b.len(), total);
            assert_eq!(total % ALIGN, 0);
            assert_eq!(*b.last().unwrap(), b'\n');
            let (back, off) = Header::decode(&b, p()).unwrap();
            assert_eq!(back, h);
            assert_eq!(off, total);
        }
    }
}

#[test]
fn reserved_len_fits_any_row_count() {
    let h = Header::new("<i2", vec![0, 4]);
    let r = h.reserved_len();
    let big = Header::new("<i2", vec![u64::MAX, u64::MAX]);
    assert!(big.encode_into(r).is_ok());
    assert!(Header::new("<i2", vec![1, 4]).min_len() <= r);
}

#[test]
fn parses_what_numpy_writes() {
    // np.save of np.zeros((2, 3), '<f8') and a structured dtype
    let mut b =
        b"\x93NUMPY\x01\x00v\x00{'descr': '<f8', 'fortran_order': False, 'shape': (2, 3), }"
            .to_vec();
    b.resize(128 - 1, b' ');
    b.push(b'\n');
    let (h, off) = Header::decode(&b, p()).unwrap();
    assert_eq!(
        (h.simple_dtype(), h.item_size(), h.shape.as_slice(), off),
        (Some("<f8"), Some(8), &[2u64, 3][..], 128)
    );
    let s =
        "{'descr': [('a', '<i4'), ('b', '<f8', (2,))], 'fortran_order': False, 'shape': (5,), }";
    let h = Header {
        descr: "[('a', '<i4'), ('b', '<f8', (2,))]".into(),
        fortran_order: false,
        shape: vec![5],
    };
    let enc = h.encode().unwrap();
    assert!(std::str::from_utf8(&enc[10..]).unwrap().starts_with(s));
    assert_eq!(Header::decode(&enc, p()).unwrap().0, h);
    assert_eq!(h.simple_dtype(), None);
    assert_eq!(Header::new("<U10", vec![1]).item_size(), Some(40));
    assert_eq!(Header::new("|S3", vec![1]).item_size(), Some(3));
    assert_eq!(Header::new("<M8[ns]", vec![1]).item_size(), None);
}

/// Found by the `npy_header` fuzz target: a 0-d header was encoded
/// growable as `'shape': (      0)`, which no reader takes for a tuple.
#[test]
fn a_0d_header_is_not_encoded_growable() {
    let h = Header::new("<f4", vec![]);
    let e = h.encode_growable(h.growable_len()).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::InvalidArgument);
    let (back, _) = Header::decode(&h.encode().unwrap(), p()).unwrap();
    assert_eq!(back, h);
}

#[test]
fn growable_headers_parse_and_keep_their_layout() {
    for (descr, shape) in [
        ("'<f8'", vec![0u64]),
        ("'|u1'", vec![5, 3, 2]),
        ("[('a', '<i4'), ('b', '<f8', (2,))]", vec![7]),
    ] {
        let mut h = Header { descr: descr.into(), fortran_order: false, shape };
        let total = h.growable_len();
        let (_, field) = h.encode_growable(total).unwrap();
        assert_eq!(field.end % 8, 0);
        assert!(field.len() >= 20);
        for rows in [0, 9, 10, 99_999_999, 100_000_000, u64::MAX] {
            h.shape[0] = rows;
            let (b, f2) = h.encode_growable(total).unwrap();
            assert_eq!((b.len(), f2.clone()), (total, field.clone()));
            let (back, off) = Header::decode(&b, p()).unwrap();
            assert_eq!((back, off), (h.clone(), total));
            let text = std::str::from_utf8(&b[field.clone()]).unwrap();
            assert_eq!(text.trim_start(), rows.to_string());
        }
    }
    assert!(Header::new("<f8", vec![1]).encode_growable(64).is_err());
}

#[test]
fn headers_numpy_rejects_are_rejected() {
    let good = Header::new("<i2", vec![5]).encode().unwrap();
    assert!(Header::decode(&good, p()).is_ok());
    let text_at = |needle: &[u8]| good.windows(needle.len()).position(|w| w == needle).unwrap();
    let mut cases: Vec<(Vec<u8>, &str)> = Vec::new();
    let mut flip = |at: usize, to: u8, want: &'static str| {
        let mut b = good.clone();
        b[at] = to;
        cases.push((b, want));
    };
    flip(7, 1, "version 1.1");
    flip(10, b'z', "not a dict");
    flip(text_at(b"}"), b'|', "not a dict");
    flip(text_at(b", 'fortran"), b'!', "no 'fortran_order'");
    flip(text_at(b"}") + 2, b'!', "not a dict");
    flip(good.len() - 1, b' ', "newline");
    flip(text_at(b"5,)") + 1, b' ', "not a tuple of integers");
    for (b, want) in cases {
        let e = Header::decode(&b, p()).unwrap_err();
        assert!(e.to_string().contains(want), "{e} / {}", String::from_utf8_lossy(&b));
    }
    let extra = Header { descr: "'<i2', 'extra': 1".into(), fortran_order: false, shape: vec![1] }
        .encode()
        .unwrap();
    assert!(Header::decode(&extra, p()).unwrap_err().to_string().contains("unexpected key"));
    // Versions 1 and 2 are latin-1 both ways (numpy reads and writes
    // such field names so); beyond latin-1 is refused, not mangled.
    let latin =
        Header { descr: "[('\u{e9}', '<i4')]".into(), fortran_order: false, shape: vec![1] };
    let b = latin.encode().unwrap();
    assert!(b.contains(&0xe9) && !b.contains(&0xc3));
    assert_eq!(Header::decode(&b, p()).unwrap().0, latin);
    let wide =
        Header { descr: "[('\u{4e2d}', '<i4')]".into(), fortran_order: false, shape: vec![1] };
    assert!(wide.encode().is_err() && wide.encode_growable(wide.growable_len()).is_err());
}

#[test]
fn bad_headers_are_format_errors() {
    for b in
        [&b"hello world!"[..], b"\x93NUMPY\x09\x00\x10\x00{}", b"\x93NUMPY\x01\x00\xff\x00{'descr'"]
    {
        let e = Header::decode(b, p()).unwrap_err();
        assert!(matches!(e, Error::Format { .. }), "{e}");
        assert!(e.to_string().starts_with("x.npy: "), "{e}");
    }
}

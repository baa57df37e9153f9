use super::*;

#[test]
fn every_spelling_parses_to_one_canonical_name() {
    for d in DType::ALL {
        let t = d.descr();
        let bare = &t[1..];
        for s in [d.name(), t, bare, &format!("={bare}"), &format!("<{bare}")] {
            let got: DType = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(got, d, "{s}");
        }
        assert_eq!(d.to_string(), d.name());
        assert_eq!(d.name().parse::<DType>().unwrap().to_string(), d.name());
        assert_eq!(with_dtype!(d, |T| std::mem::size_of::<T>()), d.size());
        assert_eq!(with_dtype!(d, |T| <T as Native>::DTYPE), d);
        assert_eq!(TypeStr::parse(t).unwrap().item_size(), Some(d.size()));
    }
    let names: Vec<_> = DType::ALL.iter().map(|d| d.name()).collect();
    assert_eq!(
        names,
        [
            "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64", "float32",
            "float64"
        ]
    );
    assert_eq!(DType::ALL.map(|d| d.descr())[..3], ["|i1", "|u1", "<i2"]);
    assert_eq!(
        ("b".parse::<DType>().unwrap(), "B".parse::<DType>().unwrap()),
        (DType::I8, DType::U8)
    );
    // 1-byte types have no byte order, so '>' is fine there.
    assert_eq!(
        (">u1".parse::<DType>().unwrap(), "|i1".parse::<DType>().unwrap()),
        (DType::U8, DType::I8)
    );
    // numpy's meaning of i8/u8: 8 bytes.
    assert_eq!(
        ("i8".parse::<DType>().unwrap(), "u8".parse::<DType>().unwrap()),
        (DType::I64, DType::U64)
    );
}

#[test]
fn little_endian_data_is_collected() {
    assert_eq!(collect_le::<u32>(&[1, 0, 0, 0, 2, 1, 0, 0, 9]), [1, 258]);
    assert_eq!(collect_le::<f32>(&1.5f32.to_le_bytes()), [1.5]);
    assert!(collect_le::<f64>(&[0; 7]).is_empty());
}

#[test]
fn other_types_are_refused_with_the_accepted_names() {
    for bad in [
        ">i2",
        ">f8",
        "complex64",
        "<c8",
        "f2",
        "<f16",
        "float16",
        "bool",
        "|b1",
        "<M8[ns]",
        "i3",
        "",
        "<",
        "f64",
        "int",
        "Float64",
        " <f8",
    ] {
        let e = bad.parse::<DType>().unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e:?}");
        assert!(
            msg.starts_with(&format!("unsupported dtype {bad:?}"))
                && msg.contains("int8")
                && msg.contains("float64"),
            "{msg}"
        );
    }
}

#[test]
fn type_strings_come_apart() {
    let t = |s| TypeStr::parse(s);
    assert_eq!(t("<f8"), Some(TypeStr { order: Some('<'), kind: 'f', count: 8, unit: None }));
    assert_eq!(
        t("<M8[ns]"),
        Some(TypeStr { order: Some('<'), kind: 'M', count: 8, unit: Some("ns") })
    );
    assert_eq!(t("<U10").unwrap().item_size(), Some(40));
    assert_eq!(t("|S3").unwrap().item_size(), Some(3));
    assert_eq!(t("<M8[ns]").unwrap().item_size(), None);
    for bad in ["", "<", "f", "<8", "<f8[", "<f8[]", "<f8[n s]", "<f8x", "ff8", "<é8"] {
        assert_eq!(t(bad), None, "{bad}");
    }
}

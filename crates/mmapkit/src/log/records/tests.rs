use super::*;

fn all(input: &[u8], format: RecordFormat) -> Result<Vec<Vec<u8>>> {
    RecordReader::new(Box::new(std::io::Cursor::new(input.to_vec())), Path::new("in"), format)
        .collect()
}

fn prefixed(entries: &[&[u8]]) -> Vec<u8> {
    let mut b = Vec::new();
    for e in entries {
        b.extend_from_slice(&(e.len() as u32).to_le_bytes());
        b.extend_from_slice(e);
    }
    b
}

#[test]
fn lines_drop_the_newline_and_keep_a_last_unterminated_line() {
    let got = all(b"a\n\nbc\nlast", RecordFormat::Lines).unwrap();
    assert_eq!(got, [&b"a"[..], b"", b"bc", b"last"]);
    assert!(all(b"", RecordFormat::Lines).unwrap().is_empty());
}

#[test]
fn length_prefixed_records_round_trip_binary_entries() {
    let entries: [&[u8]; 3] = [b"line\nwith newline", b"", &[0, 255, 10, 13]];
    let got = all(&prefixed(&entries), RecordFormat::LengthPrefixed).unwrap();
    assert_eq!(got, entries);
}

#[test]
fn a_cut_off_length_prefix_is_a_format_error() {
    let e = all(b"\x03\x00\x00", RecordFormat::LengthPrefixed).unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Format, "{e}");
    assert_eq!(e.path(), Some(Path::new("in")));
    assert!(e.message().contains("length prefix of record 1 (byte 0: 3 of 4"), "{e}");
}

#[test]
fn a_record_shorter_than_its_prefix_is_a_format_error_after_the_good_ones() {
    let mut input = prefixed(&[b"ok"]);
    input.extend_from_slice(b"\x05\x00\x00\x00abc");
    let mut r = RecordReader::new(
        Box::new(std::io::Cursor::new(input)),
        Path::new("in"),
        RecordFormat::LengthPrefixed,
    );
    assert_eq!(r.next_record().unwrap().unwrap(), b"ok");
    let e = r.next_record().unwrap_err();
    assert_eq!(e.kind(), crate::ErrorKind::Format, "{e}");
    assert!(e.message().contains("record 2 (byte 6) of 5 bytes is cut short after 3"), "{e}");
    assert_eq!(r.records_read(), 1);
}

#[test]
fn open_reads_a_file_through_open_input() {
    let (d, p) = crate::test_util::temp_file(b"x\ny\n");
    let r = RecordReader::open(&p, RecordFormat::Lines).unwrap();
    assert_eq!(r.collect::<Result<Vec<_>>>().unwrap(), [b"x", b"y"]);
    let e = RecordReader::open(d.path(), RecordFormat::Lines).err().unwrap();
    assert_eq!(e.kind(), crate::ErrorKind::IsADirectory, "{e}");
}

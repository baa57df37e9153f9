use super::*;

#[test]
fn source_keeps_utf8_and_escapes_other_bytes() {
    assert_eq!(source(b"caf\xe9", false), "caf\\xE9");
    assert_eq!(source("é.".as_bytes(), false), "é.");
    assert_eq!(source(b"a.b\xff", true), "a\\.b\\xFF");
    let re = build(&source(b"caf\xe9", false), true, false).unwrap();
    assert!(re.is_match(b"un caf\xe9"));
    assert!(!re.is_match("un café".as_bytes()));
}

/// `.` is one byte, `\b` ASCII: "é" is two bytes to `[^ -~]`, and
/// "Köthe" has a word boundary before "the".
#[test]
fn bytes_not_characters() {
    let re = build(".", true, false).unwrap();
    assert_eq!(re.find_iter("é".as_bytes()).count(), 2);
    assert!(build(r"\bthe\b", true, false).unwrap().is_match("Köthe".as_bytes()));
    assert!(!build(r"(?u)\bthe\b", true, false).unwrap().is_match("Köthe".as_bytes()));
    assert_eq!(build("(?u).", true, false).unwrap().find_iter("é".as_bytes()).count(), 1);
}

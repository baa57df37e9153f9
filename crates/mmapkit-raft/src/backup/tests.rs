use super::*;

fn read(text: &[u8]) -> Result<(Vec<KeyValue>, Summary), String> {
    // Fed in 3-byte pieces: lines split across chunks.
    read_chunks(text.chunks(3))
}

#[test]
fn a_complete_backup_reads_and_every_cut_is_refused() {
    let text = concat!(
        r#"{"mmapkit_kv_backup":1,"revision":9}"#,
        "\n",
        r#"{"key":"a","value":"1","mod_revision":3}"#,
        "\n",
        r#"{"key":"b","value":"x\ny","mod_revision":9}"#,
        "\n",
        r#"{"end":true,"count":2}"#,
        "\n"
    )
    .as_bytes();
    assert!(text.starts_with(MAGIC));
    let (kvs, s) = read(text).unwrap();
    assert_eq!(s, Summary { revision: 9, count: 2 });
    assert_eq!(kvs[1].value, "x\ny");
    for cut in 0..text.len() {
        assert!(read(&text[..cut]).is_err(), "cut at {cut} read as a backup");
    }
    let mut more = text.to_vec();
    more.extend_from_slice(b"{\"key\":\"c\",\"value\":\"\",\"mod_revision\":1}\n");
    assert!(read(&more).unwrap_err().contains("after the end"));
    let wrong = String::from_utf8(text.to_vec()).unwrap().replace("\"count\":2", "\"count\":3");
    assert!(read(wrong.as_bytes()).unwrap_err().contains("says 3 keys"));
    let swapped = String::from_utf8(text.to_vec()).unwrap().replace("\"b\"", "\"0\"");
    assert!(read(swapped.as_bytes()).unwrap_err().contains("out of order"));
}

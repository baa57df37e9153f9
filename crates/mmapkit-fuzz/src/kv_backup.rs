//! The KV backup reader (`mmapkit_raft::backup`): arbitrary bytes, fed in
//! chunks cut where the input's first byte says, read as a backup stream or
//! file. Never a panic; the answer does not depend on where the chunks were
//! cut; a backup that is taken re-encodes to one that is taken with the
//! same keys and summary; every proper prefix of a taken backup is refused.

use mmapkit_raft::backup::Summary;
use mmapkit_raft::kv::KeyValue;

/// The keys and summary of `data` read as a backup fed `step` bytes at a
/// time (0: whole), or why not.
fn read(data: &[u8], step: usize) -> Result<(Vec<KeyValue>, Summary), String> {
    let step = if step == 0 { data.len().max(1) } else { step };
    mmapkit_raft::backup::read_chunks(data.chunks(step))
}

/// The harness (see the module docs).
pub fn kv_backup(data: &[u8]) {
    let (step, data) = match data.split_first() {
        Some((&s, rest)) => (usize::from(s % 17), rest),
        None => (0, data),
    };
    let whole = read(data, 0);
    let split = read(data, step);
    assert_eq!(whole.is_ok(), split.is_ok(), "the chunking changed the answer");
    let Ok((kvs, summary)) = whole else { return };
    assert_eq!(split.ok(), Some((kvs.clone(), summary)));
    let mut again = serde_json::to_vec(&serde_json::json!({
        "mmapkit_kv_backup": mmapkit_raft::backup::FORMAT,
        "revision": summary.revision,
    }))
    .expect("json");
    again.push(b'\n');
    for kv in &kvs {
        again.extend(serde_json::to_vec(kv).expect("json"));
        again.push(b'\n');
    }
    again.extend(
        serde_json::to_vec(&serde_json::json!({"end": true, "count": kvs.len()})).expect("json"),
    );
    again.push(b'\n');
    assert_eq!(
        read(&again, step).ok(),
        Some((kvs, summary)),
        "a taken backup re-encoded is refused"
    );
    for cut in 0..data.len().min(4096) {
        assert!(read(&data[..cut], step).is_err(), "a prefix of {cut} bytes was taken");
    }
}

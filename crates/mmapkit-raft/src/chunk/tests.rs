use openraft::storage::SnapshotMeta;
use openraft::Vote;

use super::*;

fn request(data: Vec<u8>) -> InstallSnapshotRequest<KvConfig> {
    let meta = SnapshotMeta {
        last_log_id: None,
        last_membership: Default::default(),
        snapshot_id: "1-2-3".into(),
    };
    InstallSnapshotRequest { vote: Vote::new(3, 1), meta, offset: 1 << 20, data, done: true }
}

#[test]
fn a_chunk_round_trips_byte_for_byte_and_every_cut_header_is_refused() {
    let data: Vec<u8> = (0..=255u8).cycle().take(70_000).collect();
    let body = encode(request(data.clone())).unwrap();
    let head = u32::from_le_bytes(body[..4].try_into().unwrap()) as usize;
    // Raw bytes: the body is the data plus a header of fixed size.
    assert_eq!(body.len(), 4 + head + data.len());
    let got = decode(&body).unwrap();
    assert_eq!(got, request(data));
    assert_eq!(decode(&encode(request(Vec::new())).unwrap()).unwrap(), request(Vec::new()));
    for cut in 0..4 + head {
        assert!(decode(&body[..cut]).is_err(), "cut at {cut}");
    }
    let mut huge = body.clone();
    huge[..4].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode(&huge).unwrap_err().contains("header of"));
    // A header that smuggles data of its own is not a chunk.
    let mut json = serde_json::to_vec(&request(vec![1])).unwrap();
    let mut smuggled = (json.len() as u32).to_le_bytes().to_vec();
    smuggled.append(&mut json);
    assert!(decode(&smuggled).unwrap_err().contains("carries data"));
}

//! The body of a `/raft/snapshot` call: one chunk of a snapshot file as
//! raw bytes behind a small JSON header, not as JSON numbers (up to 4
//! characters a byte, and a parse of each).
//!
//! ```text
//! body = header_len:u32 header data      (little-endian)
//! ```
//!
//! `header` is openraft's `InstallSnapshotRequest` as JSON with `data`
//! empty; `data` is the rest of the body, the chunk itself. A body sent
//! as `application/json` (a node from before this format) is read as the
//! whole request in JSON.

use openraft::raft::InstallSnapshotRequest;

use crate::kv::KvConfig;

/// The content type of a body in this format.
pub(crate) const CONTENT_TYPE: &str = "application/vnd.mmapkit.snapshot-chunk";

/// The largest header read (a membership of thousands of nodes fits).
const MAX_HEADER: usize = 16 << 20;

/// The body for `req`: its header and then its data, moved, not copied
/// twice.
pub(crate) fn encode(
    mut req: InstallSnapshotRequest<KvConfig>,
) -> Result<Vec<u8>, serde_json::Error> {
    let data = std::mem::take(&mut req.data);
    let head = serde_json::to_vec(&req)?;
    let mut body = Vec::with_capacity(4 + head.len() + data.len());
    body.extend_from_slice(&(head.len() as u32).to_le_bytes());
    body.extend_from_slice(&head);
    body.extend_from_slice(&data);
    Ok(body)
}

/// The request in `body`, or why it is not one.
pub(crate) fn decode(body: &[u8]) -> Result<InstallSnapshotRequest<KvConfig>, String> {
    let Some((len, rest)) = body.split_first_chunk::<4>() else {
        return Err(format!("a snapshot chunk of {} bytes has no header length", body.len()));
    };
    let len = u32::from_le_bytes(*len) as usize;
    if len > MAX_HEADER || len > rest.len() {
        return Err(format!("a snapshot chunk header of {len} bytes in {} bytes", rest.len()));
    }
    let (head, data) = rest.split_at(len);
    let mut req: InstallSnapshotRequest<KvConfig> = serde_json::from_slice(head)
        .map_err(|e| format!("a snapshot chunk header does not decode: {e}"))?;
    if !req.data.is_empty() {
        return Err("a snapshot chunk header carries data".into());
    }
    req.data = data.to_vec();
    Ok(req)
}

#[cfg(test)]
mod tests {
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
}

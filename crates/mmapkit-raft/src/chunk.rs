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
mod tests;

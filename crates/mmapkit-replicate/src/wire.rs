//! The binary framing of `/v1/entries` bodies.
//!
//! ```text
//! body  = frame*
//! frame = index:u64 term:u64 len:u32 crc:u32 payload[len]     (little-endian)
//! ```
//!
//! `crc` is the CRC32C the log stored with the entry
//! ([`mmapkit::log::Entry::crc`]); the receiver recomputes it with
//! [`mmapkit::log::entry_crc`] (index, term and payload) before it keeps the
//! entry, so damage anywhere in a frame is caught.

use bytes::{Buf, Bytes, BytesMut};

/// Bytes of a frame header.
pub const HEADER: usize = 24;

/// Encodes a frame header.
pub fn header(index: u64, term: u64, len: u32, crc: u32) -> [u8; HEADER] {
    let mut h = [0u8; HEADER];
    h[..8].copy_from_slice(&index.to_le_bytes());
    h[8..16].copy_from_slice(&term.to_le_bytes());
    h[16..20].copy_from_slice(&len.to_le_bytes());
    h[20..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// One received frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// Entry index.
    pub index: u64,
    /// Entry term.
    pub term: u64,
    /// CRC32C sent with it.
    pub crc: u32,
    /// Payload.
    pub payload: Bytes,
}

impl Frame {
    /// Whether the CRC sent matches the index, term and payload.
    pub fn crc_ok(&self) -> bool {
        mmapkit::log::entry_crc(self.index, self.term, &self.payload) == self.crc
    }
}

/// Incremental decoder: feed body chunks, take whole frames.
#[derive(Default)]
pub struct Decoder {
    buf: BytesMut,
}

impl Decoder {
    /// Adds received bytes.
    pub fn extend(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }
    /// The next whole frame, if one has arrived. `max_len` bounds the
    /// length field (a damaged length must not make us wait for gigabytes).
    pub fn next_frame(&mut self, max_len: usize) -> Result<Option<Frame>, String> {
        if self.buf.len() < HEADER {
            return Ok(None);
        }
        let len = u32::from_le_bytes(self.buf[16..20].try_into().expect("4")) as usize;
        if len > max_len {
            let index = u64::from_le_bytes(self.buf[..8].try_into().expect("8"));
            return Err(format!(
                "frame of entry {index} claims {len} bytes (more than {max_len}): damaged in transit"
            ));
        }
        if self.buf.len() < HEADER + len {
            self.buf.reserve(HEADER + len - self.buf.len());
            return Ok(None);
        }
        let mut h = self.buf.split_to(HEADER);
        let index = h.get_u64_le();
        let term = h.get_u64_le();
        let _ = h.get_u32_le();
        let crc = h.get_u32_le();
        let payload = self.buf.split_to(len).freeze();
        Ok(Some(Frame {
            index,
            term,
            crc,
            payload,
        }))
    }
    /// Bytes received but not yet a whole frame.
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_roundtrip_in_any_chunking() {
        let payloads: Vec<Vec<u8>> = (0..20).map(|n| vec![n as u8; n * 13]).collect();
        let mut body = Vec::new();
        for (k, p) in payloads.iter().enumerate() {
            let i = 5 + k as u64;
            body.extend_from_slice(&header(
                i,
                2,
                p.len() as u32,
                mmapkit::log::entry_crc(i, 2, p),
            ));
            body.extend_from_slice(p);
        }
        for step in [1, 7, 24, 1000, body.len()] {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            for c in body.chunks(step) {
                d.extend(c);
                while let Some(f) = d.next_frame(1 << 20).unwrap() {
                    assert!(f.crc_ok());
                    got.push(f);
                }
            }
            assert_eq!(d.pending(), 0);
            assert_eq!(got.len(), 20);
            assert_eq!(got[3].payload.as_ref(), &payloads[3][..]);
        }
        // A flipped payload byte fails the CRC; a huge length is refused.
        let mut bad = body.clone();
        bad[HEADER + 20] ^= 1;
        let mut d = Decoder::default();
        d.extend(&bad);
        d.next_frame(1 << 20).unwrap().unwrap();
        assert!(!d.next_frame(1 << 20).unwrap().unwrap().crc_ok());
        let mut d = Decoder::default();
        d.extend(&header(1, 1, u32::MAX, 0));
        assert!(d.next_frame(1 << 20).is_err());
    }
}

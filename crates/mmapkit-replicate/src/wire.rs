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

/// Incremental decoder: feed body chunks, take whole frames. Frames lying
/// whole inside a pushed chunk are zero-copy slices of it; only a frame
/// split across chunks is assembled (copied) in a buffer of its own.
#[derive(Default)]
pub struct Decoder {
    /// The start of a frame split across chunks.
    part: BytesMut,
    /// The rest of the last chunk pushed.
    cur: Bytes,
}

impl Decoder {
    /// Adds received bytes (copied; see [`Decoder::push`]).
    pub fn extend(&mut self, chunk: &[u8]) {
        self.push(Bytes::copy_from_slice(chunk));
    }
    /// Adds a received chunk without copying it.
    pub fn push(&mut self, chunk: Bytes) {
        if !self.cur.is_empty() {
            // Frames not taken yet: keep the order (part, cur, chunk).
            self.part.extend_from_slice(&self.cur);
        }
        self.cur = chunk;
    }
    /// Moves up to `n` bytes from `cur` to the end of `part`.
    fn take(&mut self, n: usize) {
        let n = n.min(self.cur.len());
        self.part.extend_from_slice(&self.cur.split_to(n));
    }
    /// The next whole frame, if one has arrived. `max_len` bounds the
    /// length field (a damaged length must not make us wait for gigabytes).
    pub fn next_frame(&mut self, max_len: usize) -> Result<Option<Frame>, String> {
        if self.part.is_empty() {
            let Some(len) = frame_len(&self.cur, max_len)? else {
                self.take(usize::MAX);
                return Ok(None);
            };
            if self.cur.len() < HEADER + len {
                // Nothing reserved for the claimed length: the buffer grows
                // with the bytes that really arrive.
                self.take(usize::MAX);
                return Ok(None);
            }
            let frame = self.cur.split_to(HEADER + len);
            return Ok(Some(parse(&frame, frame.slice(HEADER..))));
        }
        if self.part.len() < HEADER {
            self.take(HEADER - self.part.len());
        }
        let Some(len) = frame_len(&self.part, max_len)? else {
            return Ok(None);
        };
        self.take(HEADER + len - self.part.len());
        if self.part.len() < HEADER + len {
            return Ok(None);
        }
        let h = self.part.split_to(HEADER);
        let payload = self.part.split_to(len).freeze();
        Ok(Some(parse(&h, payload)))
    }
    /// Bytes received but not yet a whole frame.
    pub fn pending(&self) -> usize {
        self.part.len() + self.cur.len()
    }
}

/// The payload length of the frame starting `buf`, once its header arrived.
fn frame_len(buf: &[u8], max_len: usize) -> Result<Option<usize>, String> {
    if buf.len() < HEADER {
        return Ok(None);
    }
    let len = u32::from_le_bytes(buf[16..20].try_into().expect("4")) as usize;
    if len > max_len {
        let index = u64::from_le_bytes(buf[..8].try_into().expect("8"));
        return Err(format!(
            "frame of entry {index} claims {len} bytes (more than {max_len}): damaged in transit"
        ));
    }
    Ok(Some(len))
}

fn parse(mut h: &[u8], payload: Bytes) -> Frame {
    let index = h.get_u64_le();
    let term = h.get_u64_le();
    let _ = h.get_u32_le();
    let crc = h.get_u32_le();
    Frame { index, term, crc, payload }
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
            body.extend_from_slice(&header(i, 2, p.len() as u32, mmapkit::log::entry_crc(i, 2, p)));
            body.extend_from_slice(p);
        }
        for step in [1, 7, 24, 1000, body.len()] {
            let mut d = Decoder::default();
            let mut got = Vec::new();
            for (k, c) in body.chunks(step).enumerate() {
                if k % 2 == 0 {
                    d.extend(c);
                } else {
                    d.push(Bytes::copy_from_slice(c));
                }
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

    /// Issue 22, defect 12: a frame length from the network reserves
    /// nothing before the bytes arrive (a hostile server claimed ~4 GiB).
    #[test]
    fn a_claimed_length_allocates_nothing_ahead() {
        let mut d = Decoder::default();
        let mut h = header(1, 1, 1 << 30, 0).to_vec();
        h.extend_from_slice(&[7u8; 100]);
        d.push(Bytes::from(h));
        assert!(d.next_frame(usize::MAX).unwrap().is_none());
        d.extend(&[1u8; 10]);
        assert!(d.next_frame(usize::MAX).unwrap().is_none());
        assert!(d.part.capacity() < 1 << 20, "reserved {}", d.part.capacity());
    }
}

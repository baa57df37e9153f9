//! The replication wire: the frame decoder fed the body in arbitrary
//! chunks agrees with a whole-body reference parse, and the HTTP query
//! parameters of `/v1/entries` and `/v1/state` parse without panicking
//! into values that survive a canonical re-encoding. One target for both
//! (the first byte chooses): the query parser is a few lines and needs no
//! run of its own.

use bytes::Bytes;
use mmapkit_replicate::server::fuzz_parse_queries;
use mmapkit_replicate::wire::{Decoder, Frame, HEADER};

use crate::Input;

pub fn replicate(data: &[u8]) {
    let mut b = Input::new(data);
    if b.u8() & 1 == 0 {
        wire(b);
    } else {
        query(b.rest());
    }
}

/// The frames of `body` parsed in one piece: the frames, then the error or
/// the bytes left over.
fn reference(mut body: &[u8], max_len: usize) -> (Vec<Frame>, Result<usize, ()>) {
    let mut out = Vec::new();
    while body.len() >= HEADER {
        let len = u32::from_le_bytes(body[16..20].try_into().unwrap()) as usize;
        if len > max_len {
            return (out, Err(()));
        }
        if body.len() < HEADER + len {
            break;
        }
        let u64_at = |p: usize| u64::from_le_bytes(body[p..p + 8].try_into().unwrap());
        out.push(Frame {
            index: u64_at(0),
            term: u64_at(8),
            crc: u32::from_le_bytes(body[20..24].try_into().unwrap()),
            payload: Bytes::copy_from_slice(&body[HEADER..HEADER + len]),
        });
        body = &body[HEADER + len..];
    }
    (out, Ok(body.len()))
}

fn wire(mut b: Input<'_>) {
    let max_len = [0, 1, 15, 64, 1 << 20, usize::MAX][b.u8() as usize % 6];
    let mut steps: Vec<usize> = (0..b.u8() % 8).map(|_| b.u8() as usize).collect();
    if steps.iter().all(|&s| s == 0) {
        steps = vec![usize::MAX];
    }
    let body = b.rest();
    let (want, want_end) = reference(body, max_len);
    let mut d = Decoder::default();
    let mut got = Vec::new();
    let mut failed = false;
    let (mut at, mut k) = (0, 0);
    'feed: while at < body.len() {
        let n = steps[k % steps.len()].clamp(1, body.len() - at);
        let chunk = &body[at..at + n];
        if k % 2 == 0 {
            d.extend(chunk);
        } else {
            d.push(Bytes::copy_from_slice(chunk));
        }
        at += n;
        k += 1;
        loop {
            match d.next_frame(max_len) {
                Ok(Some(f)) => {
                    let _ = f.crc_ok();
                    got.push(f);
                }
                Ok(None) => break,
                Err(_) => {
                    failed = true;
                    break 'feed;
                }
            }
        }
    }
    assert_eq!(got, want);
    match want_end {
        Ok(left) => {
            assert!(!failed, "the decoder failed where the reference did not");
            assert_eq!(d.pending(), left);
        }
        Err(()) => assert!(failed, "the decoder accepted a length over {max_len}"),
    }
}

fn query(raw: &[u8]) {
    let q = String::from_utf8_lossy(raw);
    for q in [None, Some(q.as_ref())] {
        let (page, since) = fuzz_parse_queries(q);
        if let Ok(p) = page {
            let [from, max_count, max_bytes, ..] = p;
            assert!(from.is_some_and(|f| f >= 1), "{q:?}: from {from:?}");
            assert!(max_count.is_none_or(|n| n >= 1) && max_bytes.is_none_or(|n| n >= 1));
            // The canonical form parses to the same values.
            let names = ["from", "max_count", "max_bytes", "prev_term", "prev_crc", "wait_ms"];
            let canon: Vec<String> =
                names.iter().zip(p).filter_map(|(k, v)| v.map(|v| format!("{k}={v}"))).collect();
            assert_eq!(fuzz_parse_queries(Some(&canon.join("&"))).0, Ok(p), "{q:?}");
        }
        if let Ok(s) = since {
            let canon = s.map(|s| format!("since={s}")).unwrap_or_default();
            assert_eq!(fuzz_parse_queries(Some(&canon)).1, Ok(s), "{q:?}");
        }
    }
}

//! The `.npy` header codec: decoding arbitrary bytes never panics and what
//! it accepts re-encodes (minimal, reserved and growable layouts) to a
//! header that decodes to the same value; headers built from simple dtypes
//! and any shape round-trip too.

use std::path::Path;

use mmapkit::store::npy::{Header, ALIGN, MAX_HEADER_LEN, PREAMBLE_LEN};

use crate::Input;

pub fn npy_header(data: &[u8]) {
    let path = Path::new("fuzz.npy");
    let _ = Header::total_len(data, path);
    if let Ok((h, end)) = Header::decode(data, path) {
        assert!(end <= data.len() && end <= MAX_HEADER_LEN + PREAMBLE_LEN, "end {end}");
        let pre = &data[..PREAMBLE_LEN.min(data.len())];
        assert_eq!(Header::total_len(pre, path).expect("total_len of a decoded header"), end);
        round_trip(&h);
    }
    // A header built by a writer: a simple dtype string and any shape.
    let mut b = Input::new(data);
    let order = [b'<', b'>', b'|', b'='][b.u8() as usize % 4] as char;
    let kind = (b'a' + b.u8() % 26) as char;
    let dtype = format!("{order}{kind}{}", b.u16());
    let fortran_order = b.u8() & 1 == 1;
    let shape = (0..b.u8() % 5).map(|_| b.u64() >> (b.u8() % 64)).collect();
    let h = Header { fortran_order, ..Header::new(&dtype, shape) };
    let _ = h.item_size();
    round_trip(&h);
}

fn decodes_to(bytes: &[u8], h: &Header) {
    let (back, end) = Header::decode(bytes, Path::new("x")).unwrap_or_else(|e| {
        panic!("{h:?} encoded as {:?} does not decode: {e}", String::from_utf8_lossy(bytes))
    });
    assert_eq!(&back, h, "encoded as {:?}", String::from_utf8_lossy(bytes));
    assert_eq!(end, bytes.len());
}

fn round_trip(h: &Header) {
    let _ = h.simple_dtype();
    let Ok(bytes) = h.encode() else {
        return; // not latin-1 (a version 3 header): numpy writes it as v3
    };
    assert_eq!(bytes.len() % ALIGN, 0);
    assert_eq!(bytes.len(), h.min_len());
    decodes_to(&bytes, h);
    let reserved = h.encode_into(h.reserved_len()).expect("the reserved length holds the header");
    decodes_to(&reserved, h);
    if h.shape.is_empty() {
        // No rows to grow (a growable 0-d header once read back as an int).
        assert!(h.encode_growable(h.growable_len()).is_err());
        return;
    }
    let (grow, field) =
        h.encode_growable(h.growable_len()).expect("the growable length holds the header");
    assert!(field.end <= grow.len() && field.end % 8 == 0, "{field:?}");
    decodes_to(&grow, h);
}

//! The `.npy` file header (NumPy format versions 1.0, 2.0 and 3.0).
//!
//! A `.npy` file is a fixed preamble (`\x93NUMPY`, major, minor, header
//! length), an ASCII Python-dict header such as
//! `{'descr': '<f4', 'fortran_order': False, 'shape': (10, 136), }`
//! padded with spaces to a multiple of 64 bytes and ending in `\n`, then the
//! raw array data.
//!
//! Growable stores and writers whose row count is unknown up front reserve
//! header room ([`Header::reserved_len`]) so the shape can later be rewritten
//! **in place** without moving the data: [`Header::encode_into`] pads to an
//! exact total length. numpy accepts any amount of trailing padding.

#[cfg(doc)]
use crate::dtype::DType;
use crate::dtype::TypeStr;
use crate::{Error, Result};
use std::path::Path;

const MAGIC: &[u8; 6] = b"\x93NUMPY";
/// numpy aligns the data offset to this.
pub const ALIGN: usize = 64;
/// Minimum width of the row-count field of growable headers (`u64::MAX`
/// has 20 digits).
const GROW_FIELD: usize = 20;
/// The longest header dict (the length field of the preamble) read:
/// numpy's `max_header_size` default. The length comes from the file, so
/// it is checked before anything is allocated for it; numpy too refuses
/// longer headers unless told otherwise.
pub const MAX_HEADER_LEN: usize = 10_000;
/// Bytes of the preamble [`Header::total_len`] needs to see (version 2
/// and 3 have 12; version 1, 10).
pub const PREAMBLE_LEN: usize = 12;

/// What a `.npy` header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// The dtype exactly as the header spells it, as a Python literal:
    /// `'<f4'` (quotes included) or a list for structured dtypes.
    pub descr: String,
    /// Column-major data (stores only write C order).
    pub fortran_order: bool,
    /// The array's shape; the first axis is the one that grows.
    pub shape: Vec<u64>,
}

impl Header {
    /// A C-order header for a simple dtype string such as `<f4` or `|u1`
    /// (for one of ours: [`DType::descr`]).
    pub fn new(dtype: &str, shape: Vec<u64>) -> Header {
        Header { descr: format!("'{dtype}'"), fortran_order: false, shape }
    }

    /// The dtype string when `descr` is a plain quoted string (`<f4`).
    pub fn simple_dtype(&self) -> Option<&str> {
        let d = self.descr.trim();
        let q = d.chars().next().filter(|c| *c == '\'' || *c == '"')?;
        d.strip_prefix(q)?.strip_suffix(q)
    }

    /// Bytes per element for simple dtypes (`<f4` → 4, `|u1` → 1, `<c16` → 16).
    pub fn item_size(&self) -> Option<usize> {
        TypeStr::parse(self.simple_dtype()?)?.item_size()
    }

    /// The dict literal without padding.
    fn dict(&self) -> String {
        let shape = match self.shape.as_slice() {
            [one] => format!("({one},)"),
            dims => format!("({})", dims.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")),
        };
        let fo = if self.fortran_order { "True" } else { "False" };
        format!("{{'descr': {}, 'fortran_order': {fo}, 'shape': {shape}, }}", self.descr)
    }

    /// The smallest total header length (preamble included, a multiple of
    /// [`ALIGN`]) that holds this header even when every dimension of the
    /// shape grows to 20 digits (`u64::MAX`): reserve this much and the
    /// shape can always be rewritten in place.
    pub fn reserved_len(&self) -> usize {
        let mut widest = self.clone();
        widest.shape = vec![u64::MAX; self.shape.len().max(1)];
        aligned_total(elen(&widest.dict()))
    }

    /// The smallest total header length for this exact header, like numpy
    /// writes it.
    pub fn min_len(&self) -> usize {
        aligned_total(elen(&self.dict()))
    }

    /// Encodes the header padded to exactly `total` bytes (preamble, dict,
    /// spaces, `\n`); `total` must be a multiple of [`ALIGN`] and at least
    /// [`Header::min_len`].
    pub fn encode_into(&self, total: usize) -> Result<Vec<u8>> {
        let dict = self.dict();
        latin1_only(&dict)?;
        if !total.is_multiple_of(ALIGN) || total < aligned_total(elen(&dict)) {
            return Err(Error::InvalidArgument(format!(
                "npy header of {total} bytes cannot hold {dict}"
            )));
        }
        Ok(framed(&dict, total))
    }

    /// Encodes with the minimal length.
    pub fn encode(&self) -> Result<Vec<u8>> {
        self.encode_into(self.min_len())
    }

    /// The dict for a growable header whose first dimension is written
    /// right-aligned in a space-padded field ending on an 8-byte boundary
    /// of the file (`pre` is the preamble length). Returns the dict and the
    /// field's byte range in the file.
    fn growable_dict(&self, pre: usize) -> (String, std::ops::Range<usize>) {
        let first = self.shape.first().copied().unwrap_or(0);
        let rest: String = self.shape.iter().skip(1).map(|d| format!(", {d}")).collect();
        let rest = if self.shape.len() == 1 { ",".to_owned() } else { rest };
        let fo = if self.fortran_order { "True" } else { "False" };
        let head = format!("{{'descr': {}, 'fortran_order': {fo}, 'shape': (", self.descr);
        let start = pre + elen(&head);
        let end = (start + GROW_FIELD).div_ceil(8) * 8;
        let width = end - start;
        (format!("{head}{first:>width$}{rest}), }}"), start..end)
    }

    /// Total header length (a multiple of [`ALIGN`]) for a growable header
    /// (see [`Header::encode_growable`]) that holds any row count.
    pub fn growable_len(&self) -> usize {
        let (dict, _) = self.growable_dict(10);
        let total = aligned_total(elen(&dict));
        if total - 10 <= u16::MAX as usize {
            total
        } else {
            aligned_total(elen(&self.growable_dict(12).0)).max(total)
        }
    }

    /// Encodes a header of exactly `total` bytes in which the first
    /// dimension is a fixed-width, right-aligned, space-padded field (numpy
    /// parses `(     12, 3)` like `(12, 3)`), so a growable store can
    /// rewrite its row count in place without moving anything. The field
    /// ends on an 8-byte boundary of the file: when only its last 8 bytes
    /// change (row counts below 10^8, and all but one in 10^8 updates
    /// beyond) the update is one aligned 8-byte store. Returns the bytes
    /// and the field's byte range.
    ///
    /// A 0-d header has no first dimension to grow and is refused (its
    /// field would make the shape `(   0)`, an integer, not a tuple).
    pub fn encode_growable(&self, total: usize) -> Result<(Vec<u8>, std::ops::Range<usize>)> {
        if self.shape.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "a 0-d npy header ({}) has no rows to grow",
                self.descr
            )));
        }
        let pre = if total.saturating_sub(10) <= u16::MAX as usize { 10 } else { 12 };
        let (dict, field) = self.growable_dict(pre);
        latin1_only(&dict)?;
        if !total.is_multiple_of(ALIGN) || total < pre + elen(&dict) + 1 {
            return Err(Error::InvalidArgument(format!(
                "npy header of {total} bytes cannot hold {dict}"
            )));
        }
        Ok((framed(&dict, total), field))
    }

    /// The total length of the header (preamble, dict and padding: the
    /// data offset) that starts with `prefix`, which needs
    /// [`PREAMBLE_LEN`] bytes (or the whole file when shorter). Checks
    /// the magic, the version and [`MAX_HEADER_LEN`], so a reader can
    /// allocate exactly this much: a length claimed by the file is never
    /// trusted further than that.
    pub fn total_len(prefix: &[u8], path: &Path) -> Result<usize> {
        preamble(prefix, path).map(|(_, end)| end)
    }

    /// Parses the header at the start of `bytes` (at least the whole header
    /// must be present). Returns the header and the data offset. `path`
    /// only labels errors.
    ///
    /// As strict as numpy: versions 1.0, 2.0 and 3.0 only; the header is a
    /// dict literal with exactly the keys `descr`, `fortran_order` and
    /// `shape`, followed only by spaces and a final `\n`. Versions 1 and 2
    /// are latin-1, 3 is UTF-8.
    pub fn decode(bytes: &[u8], path: &Path) -> Result<(Header, usize)> {
        let bad = |detail: String| Error::Format { path: path.to_owned(), detail };
        let (pre, end) = preamble(bytes, path)?;
        let raw = bytes
            .get(pre..end)
            .ok_or_else(|| bad(format!("truncated .npy header ({end} bytes expected)")))?;
        let text: String = if bytes[6] == 3 {
            std::str::from_utf8(raw).map_err(|_| bad("npy header is not UTF-8".into()))?.to_owned()
        } else {
            raw.iter().map(|&b| b as char).collect()
        };
        let body = text
            .strip_suffix('\n')
            .ok_or_else(|| bad("npy header does not end in a newline".into()))?
            .trim_end_matches(' ');
        let inner = body
            .strip_prefix('{')
            .and_then(|b| b.strip_suffix('}'))
            .ok_or_else(|| bad("npy header is not a dict literal".into()))?;
        let (mut descr, mut fo, mut shape_lit) = (None, None, None);
        for item in
            split_top(inner).ok_or_else(|| bad("npy header is not a dict literal".into()))?
        {
            let item = item.trim();
            if item.is_empty() {
                continue; // the trailing comma
            }
            let (key, value) = item
                .split_once(':')
                .ok_or_else(|| bad(format!("npy header item {item} is not key: value")))?;
            let slot = match key.trim() {
                "'descr'" | "\"descr\"" => &mut descr,
                "'fortran_order'" | "\"fortran_order\"" => &mut fo,
                "'shape'" | "\"shape\"" => &mut shape_lit,
                other => return Err(bad(format!("npy header has an unexpected key {other}"))),
            };
            if slot.replace(value.trim()).is_some() {
                return Err(bad(format!("npy header repeats {}", key.trim())));
            }
        }
        let descr = descr.ok_or_else(|| bad("npy header has no 'descr'".into()))?;
        let fo = fo.ok_or_else(|| bad("npy header has no 'fortran_order'".into()))?;
        let shape_lit = shape_lit.ok_or_else(|| bad("npy header has no 'shape'".into()))?;
        let inner = shape_lit
            .strip_prefix('(')
            .and_then(|s| s.strip_suffix(')'))
            .ok_or_else(|| bad(format!("npy shape {shape_lit} is not a tuple")))?;
        let parts: Vec<&str> = inner.split(',').map(str::trim).collect();
        // `()`, `(n,)` and `(n, m)`; not `(n m)`, `(,)` or `(n,,)`.
        let dims = match parts.as_slice() {
            [""] => &parts[..0],
            [one, ""] => std::slice::from_ref(one),
            [all @ .., ""] if all.len() > 1 => all,
            all => all,
        };
        let shape =
            dims.iter()
                .map(|s| {
                    if s.bytes().all(|b| b.is_ascii_digit()) {
                        s.parse::<u64>().ok()
                    } else {
                        None
                    }
                })
                .collect::<Option<Vec<_>>>()
                .filter(|v| v.len() != 1 || inner.trim_end().ends_with(','))
                .ok_or_else(|| bad(format!("npy shape {shape_lit} is not a tuple of integers")))?;
        let fortran_order = match fo {
            "False" => false,
            "True" => true,
            other => return Err(bad(format!("npy fortran_order is {other}"))),
        };
        if !(descr.starts_with(['\'', '"']) || descr.starts_with('[')) {
            return Err(bad(format!("npy descr {descr} is neither a string nor a list")));
        }
        Ok((Header { descr: descr.to_owned(), fortran_order, shape }, end))
    }
}

/// The preamble's length and the header's end (the data offset).
fn preamble(bytes: &[u8], path: &Path) -> Result<(usize, usize)> {
    let bad = |detail: String| Error::Format { path: path.to_owned(), detail };
    if bytes.len() < 10 || &bytes[..6] != MAGIC {
        return Err(bad("not a .npy file (bad magic)".into()));
    }
    let (pre, hlen) = match (bytes[6], bytes[7]) {
        (1, 0) => (10, u16::from_le_bytes([bytes[8], bytes[9]]) as usize),
        (2 | 3, 0) if bytes.len() >= 12 => {
            (12, u32::from_le_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]) as usize)
        }
        (2 | 3, 0) => return Err(bad("truncated .npy header (12 bytes expected)".into())),
        (v, m) => return Err(bad(format!("unsupported .npy format version {v}.{m}"))),
    };
    if hlen > MAX_HEADER_LEN {
        return Err(bad(format!(
            "the .npy header claims {hlen} bytes; headers longer than {MAX_HEADER_LEN} bytes are refused (as numpy's max_header_size does)"
        )));
    }
    Ok((pre, pre + hlen))
}

/// Preamble + `dict` + space padding + `\n`, exactly `total` bytes: format
/// 1.0 when the header length fits in a u16, else 2.0 (3.0 only differs for
/// non-ASCII descr, which numpy never writes for dtypes it can memmap).
fn framed(dict: &str, total: usize) -> Vec<u8> {
    let v1 = total.saturating_sub(10) <= u16::MAX as usize;
    let pre = if v1 { 10 } else { 12 };
    let mut out = Vec::with_capacity(total);
    out.extend_from_slice(MAGIC);
    if v1 {
        out.extend_from_slice(&[1, 0]);
        out.extend_from_slice(&((total - pre) as u16).to_le_bytes());
    } else {
        out.extend_from_slice(&[2, 0]);
        out.extend_from_slice(&((total - pre) as u32).to_le_bytes());
    }
    // Versions 1.0 and 2.0 are latin-1 (callers checked `latin1_only`).
    out.extend(dict.chars().map(|c| c as u32 as u8));
    out.resize(total - 1, b' ');
    out.push(b'\n');
    out
}

/// Encoded length of header text (latin-1: one byte per char).
fn elen(text: &str) -> usize {
    text.chars().count()
}

/// Versions 1.0 and 2.0 hold latin-1 only; 3.0 (UTF-8) is not written.
fn latin1_only(dict: &str) -> Result<()> {
    if dict.chars().all(|c| (c as u32) <= 0xff) {
        Ok(())
    } else {
        Err(Error::InvalidArgument(format!(
            "npy header {dict} has characters beyond latin-1 (format 3.0 is not written)"
        )))
    }
}

fn aligned_total(dict_len: usize) -> usize {
    // preamble (10 for v1, 12 for v2) + dict + at least the final '\n'
    let v1 = (10 + dict_len + 1).div_ceil(ALIGN) * ALIGN;
    if v1 - 10 <= u16::MAX as usize {
        v1
    } else {
        (12 + dict_len + 1).div_ceil(ALIGN) * ALIGN
    }
}

/// Splits a dict literal's inside at the commas at bracket depth 0
/// (outside quotes and nested lists/tuples); None if unbalanced.
fn split_top(text: &str) -> Option<Vec<&str>> {
    let (mut depth, mut quote, mut start, mut out) = (0i32, None::<char>, 0, Vec::new());
    for (i, c) in text.char_indices() {
        match (quote, c) {
            (Some(q), c) if c == q => quote = None,
            (Some(_), _) => {}
            (None, '\'' | '"') => quote = Some(c),
            (None, '(' | '[' | '{') => depth += 1,
            (None, ')' | ']' | '}') => {
                depth -= 1;
                if depth < 0 {
                    return None;
                }
            }
            (None, ',') if depth == 0 => {
                out.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    (depth == 0 && quote.is_none()).then(|| {
        out.push(&text[start..]);
        out
    })
}

#[cfg(test)]
mod tests;

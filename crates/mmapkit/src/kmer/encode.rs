//! Output encoding: count vectors as csv/tsv lines (6 decimals or plain
//! counts) or little-endian `f32`/`u32` rows, and the vectorising of a
//! block of reads into records.

use std::path::Path;

use super::{Kmerizer, OutFormat};
use crate::dtype::DType;
use crate::writer::HeaderSpec;
use crate::{Error, Result};

/// The element type of npy and raw output: `u32` counts or `f32`
/// frequencies.
pub(super) fn element_type(counts: bool) -> DType {
    if counts {
        DType::U32
    } else {
        DType::F32
    }
}

/// Encodes count vectors as output records.
#[derive(Clone, Copy, Debug)]
pub(super) struct Encoder {
    format: OutFormat,
    counts: bool,
    dims: usize,
    sep: u8,
}

impl Encoder {
    pub(super) fn new(format: OutFormat, counts: bool, dims: usize) -> Encoder {
        let sep = if format == OutFormat::Tsv { b'\t' } else { b',' };
        Encoder { format, counts, dims, sep }
    }

    /// Bytes per record; None for csv/tsv counts, which are plain decimal
    /// numbers (`0,`) like kmertools', so their lines vary in length.
    pub(super) fn fixed_width(&self) -> Option<usize> {
        match (self.format, self.counts) {
            (OutFormat::Npy | OutFormat::Raw, _) => Some(self.dtype().size() * self.dims),
            // `0.015625,`: 6 decimals of a value in [0, 1] are always 8 bytes
            (OutFormat::Csv | OutFormat::Tsv, false) => Some(self.dims * 9),
            (OutFormat::Csv | OutFormat::Tsv, true) => None,
        }
    }

    /// The writers' unit: one record, or one byte when records vary.
    pub(super) fn unit(&self) -> usize {
        self.fixed_width().unwrap_or(1)
    }

    pub(super) fn header(&self) -> HeaderSpec {
        match self.format {
            OutFormat::Npy => HeaderSpec::npy(self.dtype(), &[self.dims as u64]),
            _ => HeaderSpec::None,
        }
    }

    pub(super) fn dtype(&self) -> DType {
        element_type(self.counts)
    }

    /// Appends the record of `counts` to `out`.
    pub(super) fn encode(&self, counts: &[u32], total: u64, out: &mut Vec<u8>) {
        let Some(width) = self.fixed_width() else {
            let mut buf = itoa_buf();
            for &c in counts {
                out.extend_from_slice(itoa(c, &mut buf));
                out.push(self.sep);
            }
            // dims >= 2, so the last byte is the last field's separator
            let end = out.len() - 1;
            out[end] = b'\n';
            return;
        };
        let start = out.len();
        out.resize(start + width, 0);
        let out = &mut out[start..];
        match (self.format, self.counts) {
            (OutFormat::Npy | OutFormat::Raw, true) => {
                for (o, c) in out.chunks_exact_mut(4).zip(counts) {
                    o.copy_from_slice(&c.to_le_bytes());
                }
            }
            (OutFormat::Npy | OutFormat::Raw, false) => {
                for (o, &c) in out.chunks_exact_mut(4).zip(counts) {
                    let v = if total == 0 { 0.0 } else { (c as f64 / total as f64) as f32 };
                    o.copy_from_slice(&v.to_le_bytes());
                }
            }
            (_, true) => unreachable!("csv/tsv counts have no fixed width"),
            (_, false) => {
                for (j, (o, &c)) in out.chunks_exact_mut(9).zip(counts).enumerate() {
                    six_decimals(c, total, &mut o[..8]);
                    o[8] = if j + 1 == self.dims { b'\n' } else { self.sep };
                }
            }
        }
    }
}

pub(super) fn itoa_buf() -> [u8; 10] {
    [0; 10]
}

pub(super) fn itoa(mut v: u32, buf: &mut [u8; 10]) -> &[u8] {
    let mut i = buf.len();
    loop {
        i -= 1;
        buf[i] = b'0' + (v % 10) as u8;
        v /= 10;
        if v == 0 {
            return &buf[i..];
        }
    }
}

/// `c / total` with 6 decimals into 8 bytes, exactly as
/// `format!("{:.6}", c as f64 / total as f64)` prints it, without its cost:
/// the scaled value is rounded directly unless it lies so close to a
/// rounding tie that the multiplication's error could matter.
pub(super) fn six_decimals(c: u32, total: u64, out: &mut [u8]) {
    if c == 0 || total == 0 {
        out.copy_from_slice(b"0.000000");
        return;
    }
    let v = c as f64 / total as f64;
    let x = v * 1e6;
    // c <= total, so 0 < x <= 1e6: truncation is floor, and the fraction
    // is exact. (`floor`/`round` are libm calls without SSE4.1: 6 % of a
    // k-mers profile.)
    let whole = x as u32;
    let frac = x - whole as f64;
    if (frac - 0.5).abs() < 1e-6 {
        let s = format!("{v:.6}");
        out.copy_from_slice(&s.as_bytes()[..8]);
        return;
    }
    let mut r = whole + u32::from(frac > 0.5);
    for i in (2..8).rev() {
        out[i] = b'0' + (r % 10) as u8;
        r /= 10;
    }
    out[1] = b'.';
    out[0] = b'0' + r as u8;
}

/// Appends the records of `seqs` (regions of `data`; the first is record
/// `first`) to `out`; `counts` is scratch of `dims()` entries.
#[allow(clippy::too_many_arguments, reason = "the hot loop's context, passed flat")]
pub(super) fn vectorise(
    km: &Kmerizer,
    enc: &Encoder,
    data: &[u8],
    seqs: &[std::ops::Range<usize>],
    first: u64,
    counts: &mut [u32],
    out: &mut Vec<u8>,
    path: &Path,
) -> Result<()> {
    for (j, seq) in seqs.iter().enumerate() {
        counts.fill(0);
        let total = km.count(&data[seq.clone()], counts).map_err(|b| Error::Format {
            path: path.to_owned(),
            detail: format!(
                "record {}: invalid byte 0x{b:02x} in the sequence",
                first + j as u64 + 1
            ),
        })?;
        enc.encode(counts, total, out);
    }
    Ok(())
}

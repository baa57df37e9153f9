//! The counting: canonical k-mer codes (a k-mer and its reverse
//! complement under the smaller), the byte classes, [`Kmerizer`].

use super::MAX_K;
use crate::{Error, Result};

/// Number of canonical k-mers of length `k`.
pub fn dims(k: usize) -> usize {
    let all = 1usize << (2 * k);
    if k.is_multiple_of(2) {
        (all + (1 << k)) / 2
    } else {
        all / 2
    }
}

pub(super) fn revcomp(x: usize, k: usize) -> usize {
    let mut r = 0;
    let mut x = x;
    for _ in 0..k {
        r = (r << 2) | (3 - (x & 3));
        x >>= 2;
    }
    r
}

const BASE_A: u8 = 0;
const SKIP: u8 = 4;
const BREAK: u8 = 5;
const INVALID: u8 = 6;

/// Byte classes: 0..=3 bases, SKIP line breaks, BREAK other printable
/// ASCII (N, IUPAC, '-'), INVALID anything else.
static CLASS: [u8; 256] = {
    let mut t = [INVALID; 256];
    let mut b = 0x20;
    while b < 0x7f {
        t[b] = BREAK;
        b += 1;
    }
    t[b'\t' as usize] = BREAK;
    t[b'\n' as usize] = SKIP;
    t[b'\r' as usize] = SKIP;
    t[b'A' as usize] = BASE_A;
    t[b'a' as usize] = BASE_A;
    t[b'C' as usize] = 1;
    t[b'c' as usize] = 1;
    t[b'G' as usize] = 2;
    t[b'g' as usize] = 2;
    t[b'T' as usize] = 3;
    t[b't' as usize] = 3;
    t
};

/// Counts canonical k-mers; see the [module docs](crate::kmer).
#[derive(Clone, Debug)]
pub struct Kmerizer {
    k: usize,
    dims: usize,
    /// k-mer code → index of its canonical form.
    index: Vec<u32>,
}

impl Kmerizer {
    /// A counter for k-mers of length `k` (1..=[`MAX_K`]).
    pub fn new(k: usize) -> Result<Kmerizer> {
        if !(1..=MAX_K).contains(&k) {
            return Err(Error::InvalidArgument(format!(
                "k must be between 1 and {MAX_K}, not {k}"
            )));
        }
        let all = 1usize << (2 * k);
        let mut index = vec![0u32; all];
        let mut next = 0u32;
        for x in 0..all {
            let rc = revcomp(x, k);
            if x <= rc {
                index[x] = next;
                next += 1;
            } else {
                index[x] = index[rc];
            }
        }
        debug_assert_eq!(next as usize, dims(k));
        Ok(Kmerizer { k, dims: dims(k), index })
    }

    /// k.
    pub fn k(&self) -> usize {
        self.k
    }

    /// Vector length.
    pub fn dims(&self) -> usize {
        self.dims
    }

    /// The canonical k-mers in vector order (`AAAA`, `AAAC`, ...).
    pub fn labels(&self) -> Vec<String> {
        (0..1usize << (2 * self.k))
            .filter(|&x| x <= revcomp(x, self.k))
            .map(|x| (0..self.k).rev().map(|i| b"ACGT"[(x >> (2 * i)) & 3] as char).collect())
            .collect()
    }

    /// Adds the canonical k-mer counts of `seq` to `out` (`dims()` long);
    /// returns the number of k-mers counted, or the first invalid byte.
    pub fn count(&self, seq: &[u8], out: &mut [u32]) -> std::result::Result<u64, u8> {
        let k = self.k;
        let mask = (1usize << (2 * k)) - 1;
        let (mut code, mut run, mut total) = (0usize, 0usize, 0u64);
        for &b in seq {
            let c = CLASS[b as usize];
            if c < SKIP {
                code = ((code << 2) | c as usize) & mask;
                run += 1;
                if run >= k {
                    out[self.index[code] as usize] += 1;
                    total += 1;
                }
            } else if c == BREAK {
                run = 0;
            } else if c == INVALID {
                return Err(b);
            }
        }
        Ok(total)
    }
}

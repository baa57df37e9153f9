//! Reading rows out: the published bytes, and gathers of rows by index
//! (split between threads, consecutive rows copied as one run).

use std::sync::atomic::Ordering;

use rayon::prelude::*;

use super::*;
use crate::exec::Threads;
use crate::map;
use crate::{Error, Result};

/// Output bytes below which a gather is not split between threads: a
/// part smaller than this costs more to hand off than to copy.
pub const GATHER_PART: usize = 1 << 20;
/// Bytes a gather collects before handing them on (fits the L2 cache).
pub(super) const GATHER_PIECE: usize = 256 << 10;
/// Runs of at least this many bytes skip the piece (see `gather_rows_with`).
pub const GATHER_DIRECT: usize = 64 << 10;

/// How many parts a gather of `out_len` bytes is split into on `threads`.
pub(super) fn gather_parts(out_len: usize, threads: Threads) -> usize {
    // (`Threads::get` may read cgroup files: tens of µs, so not for small gathers.)
    if out_len < 2 * GATHER_PART {
        1
    } else {
        threads.get().min(out_len / GATHER_PART)
    }
}

/// Calls `f(i, j)` for each maximal run `rows[i..j]` of consecutive
/// indices (one `memcpy` each for a gather).
pub(super) fn for_runs(rows: &[u64], mut f: impl FnMut(usize, usize)) {
    let mut i = 0;
    while i < rows.len() {
        let mut j = i + 1;
        while j < rows.len() && rows[j] == rows[j - 1] + 1 {
            j += 1;
        }
        f(i, j);
        i = j;
    }
}

impl ArrayStore {
    /// The published rows' bytes. The address never changes while the
    /// store grows (it is a prefix of one mapping that grows in place).
    pub fn data(&self) -> &[u8] {
        let end = self.data_off + self.len() as usize * self.row_bytes;
        &self.map.as_slice()[self.data_off..end]
    }
    /// Copies the published rows `rows` (any order, repeats allowed) into
    /// `out`, one after another: `out.len()` must be `rows.len()` ×
    /// [`row_bytes`](Self::row_bytes). Runs of consecutive indices are
    /// copied with one `memcpy` each, so a permutation of contiguous blocks
    /// reads mostly sequentially. An index past [`len`](Self::len) is an
    /// error (nothing is copied); a truncation of the file by someone else
    /// is [`Error::FileTruncated`].
    pub fn gather_rows(&self, rows: &[u64], out: &mut [u8]) -> Result<()> {
        self.gather_rows_on(rows, out, Threads::ONE)
    }

    /// [`gather_rows`](Self::gather_rows) on up to `threads` workers: a
    /// gather of at least 2 × [`GATHER_PART`] bytes is split into parts of
    /// equal row counts, each copied into its own slice of `out` (plain
    /// `memcpy`s: the fast path, for an output this crate holds
    /// exclusively, such as a fresh allocation a binding then hands out).
    pub fn gather_rows_on(&self, rows: &[u64], out: &mut [u8], threads: Threads) -> Result<()> {
        self.check_gather(rows, out.len())?;
        let rb = self.row_bytes;
        let off = self.data_off;
        let parts = gather_parts(out.len(), threads);
        self.map.read_faulted(|d| {
            let copy = |rows: &[u64], out: &mut [u8]| {
                for_runs(rows, |i, j| {
                    let from = off + rows[i] as usize * rb;
                    out[i * rb..j * rb].copy_from_slice(&d[from..from + (j - i) * rb]);
                })
            };
            if parts == 1 {
                copy(rows, out);
                return Ok(());
            }
            let per = rows.len().div_ceil(parts);
            threads.install(|| {
                rows.par_chunks(per)
                    .zip(out.par_chunks_mut(per * rb))
                    .for_each(|(r, o)| copy(r, o));
            })
        })??;
        self.check_gathered()
    }

    /// After a gather: the page holding a cut reads as zeros without a
    /// fault, so the file's length is checked too (one `fstat`).
    pub(super) fn check_gathered(&self) -> Result<()> {
        self.check_rows(self.len())
    }

    /// [`gather_rows_on`](Self::gather_rows_on) into a fresh buffer that
    /// is not zero-filled first (see [`map::filled_words`]): the rows'
    /// bytes in `u64` words, 8-byte aligned, the last word's padding zero,
    /// for a binding to hand out without a copy. Checks as
    /// [`gather_rows`](Self::gather_rows) does, before allocating.
    pub fn take_rows(&self, rows: &[u64], threads: Threads) -> Result<Vec<u64>> {
        let rb = self.row_bytes;
        let Some(bytes) = rows.len().checked_mul(rb) else {
            return Err(Error::invalid(
                &self.path,
                format!("{} rows do not fit in memory", rows.len()),
            ));
        };
        self.check_gather(rows, bytes)?;
        let off = self.data_off;
        let parts = gather_parts(bytes, threads);
        let per = rows.len().div_ceil(parts).max(1);
        map::filled_words(bytes, per * rb, |fillers| {
            self.map.read_faulted(|d| {
                let copy = |rows: &[u64], f: &mut map::Filler<'_>| {
                    for_runs(rows, |i, j| {
                        let from = off + rows[i] as usize * rb;
                        f.put(&d[from..from + (j - i) * rb]);
                    })
                };
                if parts == 1 {
                    if let Some(f) = fillers.first_mut() {
                        copy(rows, f);
                    }
                    return Ok(());
                }
                threads.install(|| {
                    rows.par_chunks(per).zip(fillers.par_iter_mut()).for_each(|(r, f)| copy(r, f));
                })
            })??;
            self.check_gathered()
        })
    }

    /// [`gather_rows`](Self::gather_rows) for an output this crate may not
    /// hold a `&mut [u8]` over (a binding's buffer, pinned staging memory):
    /// the output is handed to `sink(offset, bytes)` piece by piece, the
    /// bytes to put at `offset` of an output of `out_len` bytes. Short runs
    /// of consecutive rows are collected with `memcpy` into a cache-sized
    /// piece first (a sink that stores atomically word by word is slow on
    /// scattered sources); runs of at least [`GATHER_DIRECT`] bytes go
    /// straight from the mapping. A gather of at least 2 × [`GATHER_PART`]
    /// bytes is split into parts of equal row counts run on up to `threads`
    /// workers (so `sink` runs concurrently, for disjoint ranges). All
    /// checks come first: nothing reaches `sink` unless the whole gather is
    /// valid.
    pub fn gather_rows_with(
        &self,
        rows: &[u64],
        out_len: usize,
        threads: Threads,
        sink: impl Fn(usize, &[u8]) + Sync,
    ) -> Result<()> {
        self.check_gather(rows, out_len)?;
        let rb = self.row_bytes;
        let off = self.data_off;
        let parts = gather_parts(out_len, threads);
        self.map.read_faulted(|d| {
            let copy = |first: usize, rows: &[u64]| {
                let mut piece = Vec::with_capacity(GATHER_PIECE.min(rows.len() * rb));
                let mut at = 0;
                for_runs(rows, |i, j| {
                    let from = off + rows[i] as usize * rb;
                    let src = &d[from..from + (j - i) * rb];
                    if src.len() >= GATHER_DIRECT {
                        if !piece.is_empty() {
                            sink(at, &piece);
                            piece.clear();
                        }
                        sink((first + i) * rb, src);
                        return;
                    }
                    if piece.is_empty() {
                        at = (first + i) * rb;
                    }
                    piece.extend_from_slice(src);
                    if piece.len() >= GATHER_PIECE {
                        sink(at, &piece);
                        piece.clear();
                    }
                });
                if !piece.is_empty() {
                    sink(at, &piece);
                }
            };
            if parts == 1 {
                copy(0, rows);
                return Ok(());
            }
            let per = rows.len().div_ceil(parts);
            threads.install(|| {
                rows.par_chunks(per).enumerate().for_each(|(k, c)| copy(k * per, c));
            })
        })??;
        self.check_gathered()
    }

    /// The checks of [`gather_rows`](Self::gather_rows) for an output of
    /// `out_len` bytes, for a caller that gathers in pieces and must fail
    /// before copying any.
    pub fn check_gather(&self, rows: &[u64], out_len: usize) -> Result<()> {
        let rb = self.row_bytes;
        if out_len != rows.len().saturating_mul(rb) {
            return Err(Error::invalid(
                &self.path,
                format!("the output has {out_len} bytes, not {} rows of {rb} bytes", rows.len()),
            ));
        }
        if let Some(&bad) = rows.iter().find(|&&r| r >= self.len()) {
            return Err(Error::invalid(
                &self.path,
                format!("row {bad} is out of range: the store has {} rows", self.len()),
            ));
        }
        if self.failure.get().is_some()
            && rows.iter().any(|&r| r >= self.durable_rows.load(Ordering::Acquire))
        {
            self.check_failed()?;
        }
        Ok(())
    }

    /// Err([`Error::FileTruncated`]) if another process truncated the file
    /// under the published rows `[0, rows)` (pages already lost, or the
    /// file now shorter than them): what an iterator over views checks
    /// before it hands out a batch and once more at the end, so an epoch
    /// never ends in silent zeros. One atomic load and one `fstat`.
    pub fn check_rows(&self, rows: u64) -> Result<()> {
        let rows = rows.min(self.len()) as usize;
        self.map.check_covered(0, self.data_off + rows * self.row_bytes)
    }

    /// Reads one byte of every page of the published rows `[lo, hi)` and
    /// checks that none was lost to a truncation ([`Map::touch`]): Ok
    /// means the rows were the file's when looked at. An iterator of
    /// zero-copy views calls it before it hands a batch out.
    pub fn check_read(&self, lo: u64, hi: u64) -> Result<()> {
        let hi = hi.min(self.len());
        let lo = lo.min(hi);
        let rb = self.row_bytes;
        self.map.touch(self.data_off + lo as usize * rb, (hi - lo) as usize * rb)
    }
}

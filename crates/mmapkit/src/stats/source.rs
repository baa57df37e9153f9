//! Where a statistic's elements come from: a slice in memory (a numpy array
//! or a mapped file) or a file read with large sequential `pread`s.
//!
//! Every kernel is written once against [`Elements`]: it folds the data's
//! [`CHUNK`]-element chunks (numbered from the start of the data, so both
//! sources cut the data at the same places) into per-worker accumulators.
//! The kernels only merge accumulators commutatively (counts, min/max) or
//! in chunk order (sums), so both sources give identical results.

use std::marker::PhantomData;
use std::sync::atomic::{AtomicUsize, Ordering};

use rayon::prelude::*;

use super::select::CHUNK;
use super::Element;
use crate::scan::source::Source;
use crate::Result;

/// Bytes a streaming worker reads per `pread` (rounded to whole chunks):
/// large sequential requests are what gets a disk to its streaming speed.
pub(crate) const BLOCK_BYTES: usize = 8 << 20;

/// A source of elements of type `T`.
pub(crate) trait Elements<T: Element>: Sync {
    /// Number of elements.
    fn count(&self) -> usize;

    /// Folds every chunk (index, elements) into per-worker accumulators on
    /// the current rayon pool, in any order, and reduces them.
    fn fold_chunks<A, I, F, R>(&self, init: I, fold: F, reduce: R) -> Result<A>
    where
        A: Send,
        I: Fn() -> A + Sync + Send,
        F: Fn(A, usize, &[T]) -> A + Sync + Send,
        R: Fn(A, A) -> A + Sync + Send;

    /// About `want` elements spread evenly over the data (in memory), or
    /// over its first block (a streamed file, where a sample spread over
    /// the file would cost a read of all of it: one `pread` instead).
    fn sample(&self, want: usize) -> Result<Vec<T>>;
}

impl<T: Element> Elements<T> for [T] {
    fn count(&self) -> usize {
        self.len()
    }

    fn fold_chunks<A, I, F, R>(&self, init: I, fold: F, reduce: R) -> Result<A>
    where
        A: Send,
        I: Fn() -> A + Sync + Send,
        F: Fn(A, usize, &[T]) -> A + Sync + Send,
        R: Fn(A, A) -> A + Sync + Send,
    {
        Ok(self
            .par_chunks(CHUNK)
            .enumerate()
            .fold(&init, |a, (i, c)| fold(a, i, c))
            .reduce(&init, reduce))
    }

    fn sample(&self, want: usize) -> Result<Vec<T>> {
        Ok(self.iter().step_by((self.len() / want.max(1)).max(1)).copied().collect())
    }
}

/// Elements of a file (a raw file from a byte offset, or a `.npy` file's
/// data) read with `pread` in [`BLOCK_BYTES`] blocks, each worker into its
/// own reused buffer (the scan tools' read source). Workers take blocks in
/// file order from a shared counter, so the disk sees one sequential
/// stream with a request in flight per worker.
pub(crate) struct Streamed<'a, T> {
    source: &'a Source,
    /// File offset of element 0.
    offset: u64,
    len: usize,
    /// Elements per block: a whole number of chunks.
    block: usize,
    _t: PhantomData<T>,
}

impl<'a, T: Element> Streamed<'a, T> {
    pub(crate) fn new(source: &'a Source, offset: u64, len: usize, block_bytes: usize) -> Self {
        let chunks = (block_bytes / (CHUNK * std::mem::size_of::<T>())).max(1);
        Streamed { source, offset, len, block: chunks * CHUNK, _t: PhantomData }
    }

    /// Like [`Streamed::new`] with blocks of `block` elements, which need
    /// not be whole chunks (tests: tiny blocks force every boundary).
    #[cfg(test)]
    pub(crate) fn with_block(source: &'a Source, offset: u64, len: usize, block: usize) -> Self {
        Streamed { source, offset, len, block: block.max(1), _t: PhantomData }
    }
}

impl<T: Element> Elements<T> for Streamed<'_, T> {
    fn count(&self) -> usize {
        self.len
    }

    fn fold_chunks<A, I, F, R>(&self, init: I, fold: F, reduce: R) -> Result<A>
    where
        A: Send,
        I: Fn() -> A + Sync + Send,
        F: Fn(A, usize, &[T]) -> A + Sync + Send,
        R: Fn(A, A) -> A + Sync + Send,
    {
        let size = std::mem::size_of::<T>();
        let blocks = self.len.div_ceil(self.block);
        let next = AtomicUsize::new(0);
        let worker = || -> Result<A> {
            let mut acc = Some(init());
            loop {
                let b = next.fetch_add(1, Ordering::Relaxed);
                if b >= blocks {
                    return Ok(acc.expect("accumulator"));
                }
                let (start, end) = (b * self.block, ((b + 1) * self.block).min(self.len));
                let (from, to) =
                    (self.offset + (start * size) as u64, self.offset + (end * size) as u64);
                self.source.with_window(from, to, |bytes| {
                    // The read buffer is 8-byte aligned and holds whole elements.
                    let data: &[T] = bytemuck::cast_slice(bytes);
                    let mut a = acc.take().expect("accumulator");
                    // Cut the block at the same chunk boundaries as a slice
                    // (a block need not start on one: tests use tiny blocks).
                    let mut i = start;
                    while i < end {
                        let stop = ((i / CHUNK + 1) * CHUNK).min(end);
                        a = fold(a, i / CHUNK, &data[i - start..stop - start]);
                        i = stop;
                    }
                    acc = Some(a);
                })?;
            }
        };
        let workers = rayon::current_num_threads().min(blocks).max(1);
        let accs: Vec<Result<A>> = (0..workers).into_par_iter().map(|_| worker()).collect();
        let mut out = init();
        for a in accs {
            out = reduce(out, a?);
        }
        Ok(out)
    }

    fn sample(&self, want: usize) -> Result<Vec<T>> {
        let n = self.len.min(self.block);
        let size = std::mem::size_of::<T>() as u64;
        self.source.with_window(self.offset, self.offset + n as u64 * size, |bytes| {
            let data: &[T] = bytemuck::cast_slice(bytes);
            data.iter().step_by((n / want.max(1)).max(1)).copied().collect()
        })
    }
}

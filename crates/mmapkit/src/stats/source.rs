//! Where a statistic's elements come from: a slice in memory (a mapped
//! file, a Rust slice), a file read with large sequential `pread`s, or
//! memory another thread may write (a binding's numpy array), copied out
//! block by block by the caller's reader and never viewed as a slice.
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
use crate::scan::source::{with_read_buffer, Source};
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

/// Where [`Streamed`] gets its blocks: `f` runs on the bytes `[from, to)`
/// (8-byte aligned, whole elements), read or copied into the worker's buffer.
pub(crate) trait Blocks: Sync {
    /// `f` must not call `with_window` itself (the buffer is per thread).
    fn with_window<R>(&self, from: u64, to: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R>;
}

impl Blocks for Source {
    fn with_window<R>(&self, from: u64, to: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        Source::with_window(self, from, to, f)
    }
}

/// A caller's reader: `read(byte_offset, dst)` fills `dst` with a copy of
/// the bytes there (see [`Input::copied`](super::Input::copied)).
pub(crate) struct Reader<'a>(pub(crate) &'a (dyn Fn(usize, &mut [u8]) + Sync));

impl Blocks for Reader<'_> {
    fn with_window<R>(&self, from: u64, to: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        Ok(with_read_buffer((to - from) as usize, |buf| {
            (self.0)(from as usize, buf);
            f(buf)
        }))
    }
}

/// Elements read in [`BLOCK_BYTES`] blocks, each worker into its own
/// reused buffer: a file (a raw file from a byte offset, or a `.npy`
/// file's data) read with `pread` (the scan tools' read source), or a
/// [`Reader`]'s copies. Workers take blocks in order from a shared
/// counter, so a disk sees one sequential stream with a request in flight
/// per worker.
pub(crate) struct Streamed<'a, T, S: ?Sized = Source> {
    source: &'a S,
    /// File offset of element 0.
    offset: u64,
    len: usize,
    /// Elements per block: a whole number of chunks.
    block: usize,
    _t: PhantomData<T>,
}

impl<'a, T: Element, S: Blocks + ?Sized> Streamed<'a, T, S> {
    pub(crate) fn new(source: &'a S, offset: u64, len: usize, block_bytes: usize) -> Self {
        let chunks = (block_bytes / (CHUNK * std::mem::size_of::<T>())).max(1);
        Streamed { source, offset, len, block: chunks * CHUNK, _t: PhantomData }
    }

    /// Like [`Streamed::new`] with blocks of `block` elements, which need
    /// not be whole chunks (tests: tiny blocks force every boundary).
    #[cfg(test)]
    pub(crate) fn with_block(source: &'a S, offset: u64, len: usize, block: usize) -> Self {
        Streamed { source, offset, len, block: block.max(1), _t: PhantomData }
    }
}

impl<T: Element, S: Blocks + ?Sized> Elements<T> for Streamed<'_, T, S> {
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

//! The three execution designs ([`Mode`](super::Mode)): one thread, a
//! reader with a pool of vectorising workers, and workers that each take
//! a block and write it at its offset (mapped input, released behind the
//! lowest unfinished block).

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Condvar, Mutex};

use rayon::prelude::*;

use super::encode::{vectorise, Encoder};
use super::parse::{Block, Caps, Reader};
use super::Kmerizer;
use crate::exec::Threads;
use crate::map::{Advice, Map};
use crate::writer::{RecordWriter, StreamWriter};
use crate::{Error, Result};

const SINGLE_CAPS: Caps = Caps { records: 1024, bytes: 1 << 20 };
/// The article's batch of 10,000 reads (capped in bytes for long reads).
const BATCH_CAPS: Caps = Caps { records: 10_000, bytes: 32 << 20 };
const MMAP_CAPS: Caps = Caps { records: 256, bytes: 1 << 20 };

/// Returns the number of reads.
pub(super) fn run_single(
    mut reader: Reader<'_>,
    km: &Kmerizer,
    enc: &Encoder,
    w: &mut StreamWriter,
    path: &Path,
) -> Result<u64> {
    let mut counts = vec![0u32; km.dims()];
    let mut recs = Vec::new();
    while let Some(block) = reader.next_block(SINGLE_CAPS)? {
        recs.clear();
        vectorise(km, enc, &block.data, &block.seqs, block.first, &mut counts, &mut recs, path)?;
        w.push(&recs)?;
    }
    Ok(reader.next_record())
}

/// Returns the number of reads.
pub(super) fn run_batch(
    mut reader: Reader<'_>,
    km: &Kmerizer,
    enc: &Encoder,
    w: &mut StreamWriter,
    threads: Threads,
    path: &Path,
) -> Result<u64> {
    let pool = threads.pool()?;
    // A few chunks of reads per worker; each encodes into its own buffer
    // (records may vary in length), appended in order.
    let chunks = 4 * threads.get().max(1);
    std::thread::scope(|scope| {
        // Queue of two batches (the article's 20,000 reads).
        let (tx, rx) = mpsc::sync_channel::<Result<Block<'_>>>(1);
        let reader_thread = scope.spawn(move || {
            loop {
                match reader.next_block(BATCH_CAPS) {
                    Ok(Some(b)) => {
                        if tx.send(Ok(b)).is_err() {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        break;
                    }
                }
            }
            reader.next_record()
        });
        let result = (|| {
            for block in rx.iter() {
                let block = block?;
                let per = block.seqs.len().div_ceil(chunks).max(1);
                let bufs = pool.install(|| {
                    block
                        .seqs
                        .par_chunks(per)
                        .enumerate()
                        .map_init(
                            || vec![0u32; km.dims()],
                            |counts, (c, seqs)| {
                                let mut buf = Vec::new();
                                let first = block.first + (c * per) as u64;
                                vectorise(km, enc, &block.data, seqs, first, counts, &mut buf, path)
                                    .map(|()| buf)
                            },
                        )
                        .collect::<Vec<_>>()
                });
                // the first error in read order
                for buf in bufs {
                    w.push(&buf?)?;
                }
            }
            Ok(())
        })();
        drop(rx);
        let records = reader_thread.join();
        result.map(|()| records.expect("the reader thread does not panic"))
    })
}

/// Tracks which blocks are finished, to release memory behind the lowest
/// unfinished one.
struct Watermark {
    low: u64,
    /// block id → (output end, input end) of finished blocks above `low`.
    done: std::collections::BTreeMap<u64, (u64, usize)>,
    /// In the writer's units (records, or bytes when records vary).
    out_end: u64,
    input_end: usize,
    input_released: usize,
}

/// Where variable-length blocks go: block `id` starts where block `id - 1`
/// ends, so its worker waits until that length is known (the previous
/// block's vectorising, not its write). The lowest unplaced block's worker
/// never waits, so the chain always advances.
struct Offsets {
    /// (next block id to place, its byte offset)
    next: Mutex<(u64, u64)>,
    turn: Condvar,
}

impl Offsets {
    /// The offset of block `id` of `len` bytes; None once the run aborts.
    fn place(&self, id: u64, len: usize, abort: &AtomicBool) -> Option<u64> {
        let mut g = self.next.lock().unwrap_or_else(|e| e.into_inner());
        while g.0 != id {
            if abort.load(Ordering::Relaxed) {
                return None;
            }
            g = self.turn.wait(g).unwrap_or_else(|e| e.into_inner());
        }
        let at = g.1;
        *g = (id + 1, at + len as u64);
        self.turn.notify_all();
        Some(at)
    }

    /// Wakes the waiters to see an abort (under the lock, so none misses it
    /// between its check and its wait).
    fn wake(&self) {
        let _g = self.next.lock().unwrap_or_else(|e| e.into_inner());
        self.turn.notify_all();
    }
}

/// Returns the number of reads.
pub(super) fn run_mmap(
    reader: Reader<'_>,
    input_map: Option<&Map>,
    km: &Kmerizer,
    enc: &Encoder,
    w: &RecordWriter,
    threads: Threads,
    path: &Path,
) -> Result<u64> {
    // The one lock: taking the next block (and its record numbers).
    let reader = Mutex::new((reader, 0u64));
    let abort = AtomicBool::new(false);
    let offsets = Offsets { next: Mutex::new((0, 0)), turn: Condvar::new() };
    let fixed = enc.fixed_width().is_some();
    // The error of the lowest record wins, so the message does not depend
    // on thread timing.
    let first_err: Mutex<Option<(u64, Error)>> = Mutex::new(None);
    let fail = |at: u64, e: Error| {
        abort.store(true, Ordering::Relaxed);
        offsets.wake();
        let mut g = first_err.lock().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_none_or(|(a, _)| at < *a) {
            *g = Some((at, e));
        }
    };
    let mark = Mutex::new(Watermark {
        low: 0,
        done: Default::default(),
        out_end: 0,
        input_end: 0,
        input_released: 0,
    });
    // One long-lived task per worker of the shared pool. Only a block of
    // variable-length records waits, for the lower blocks' lengths: those
    // are held by tasks already running, so a busy pool only delays them.
    threads.pool()?.scope(|scope| {
        for _ in 0..threads.get() {
            scope.spawn(|_| {
                let mut counts = vec![0u32; km.dims()];
                // A block's records, encoded in place and written with one
                // call (see `RecordWriter::write_records`).
                let mut recs = Vec::new();
                while !abort.load(Ordering::Relaxed) {
                    let (block, id) = {
                        let mut g = reader.lock().unwrap_or_else(|e| e.into_inner());
                        let next_rec = g.0.next_record();
                        match g.0.next_block(MMAP_CAPS) {
                            Ok(Some(b)) => {
                                g.1 += 1;
                                (b, g.1 - 1)
                            }
                            Ok(None) => return,
                            Err(e) => {
                                fail(next_rec, e);
                                return;
                            }
                        }
                    };
                    recs.clear();
                    if let Err(e) = vectorise(
                        km,
                        enc,
                        &block.data,
                        &block.seqs,
                        block.first,
                        &mut counts,
                        &mut recs,
                        path,
                    ) {
                        fail(block.first, e);
                        return;
                    }
                    // in the writer's units: records, or bytes
                    let at = if fixed {
                        block.first
                    } else {
                        match offsets.place(id, recs.len(), &abort) {
                            Some(at) => at,
                            None => return,
                        }
                    };
                    if let Err(e) = w.write_records(at, &recs) {
                        fail(block.first, e);
                        return;
                    }
                    let out_end = at + (recs.len() / w.width()) as u64;
                    if let Err(e) = release(&mark, id, out_end, block.input_end, w, input_map) {
                        fail(block.first, e);
                        return;
                    }
                }
            });
        }
    });
    match first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(reader.into_inner().unwrap_or_else(|e| e.into_inner()).0.next_record()),
    }
}

/// Block `id` is finished: advance the watermark and release the memory
/// of everything below it.
fn release(
    mark: &Mutex<Watermark>,
    id: u64,
    out_end: u64,
    input_end: usize,
    w: &RecordWriter,
    input: Option<&Map>,
) -> Result<()> {
    let (upto, input_from, input_to) = {
        let mut m = mark.lock().unwrap_or_else(|e| e.into_inner());
        m.done.insert(id, (out_end, input_end));
        let low = m.low;
        let mut low_now = low;
        while let Some((r, i)) = m.done.remove(&low_now) {
            m.out_end = r;
            m.input_end = i;
            low_now += 1;
        }
        m.low = low_now;
        let page = crate::map::page_size();
        let to = m.input_end / page * page;
        let from = m.input_released;
        if to >= from + (4 << 20) {
            m.input_released = to;
        }
        (m.out_end, from, to)
    };
    w.release(upto)?;
    if let Some(map) = input {
        if input_to >= input_from + (4 << 20) {
            map.advise(Advice::DontNeed, input_from, Some(input_to - input_from))?;
        }
    }
    Ok(())
}

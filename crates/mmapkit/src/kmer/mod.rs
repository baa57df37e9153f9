//! Canonical k-mer frequency vectors of DNA reads (FASTA/FASTQ, plain or
//! gzip), one record per read, in input order.
//!
//! # Vectors
//!
//! A k-mer and its reverse complement are counted together under the
//! smaller of the two (2-bit codes A=0 C=1 G=2 T=3, first base most
//! significant): `(4^k + 4^(k/2)) / 2` dimensions for even k (136 at k = 4),
//! `4^k / 2` for odd k, ordered by that code (`AAAA, AAAC, ...`), the
//! convention of kmertools/pykmertools. Lowercase counts like uppercase; a
//! k-mer containing anything other than `ACGT` (`N`, IUPAC codes, `-`) is
//! skipped; line breaks inside a sequence do not interrupt k-mers. By
//! default each count is divided by the read's number of counted k-mers
//! (a read with none gives zeros); [`KmerOptions::counts`] keeps raw counts.
//! A control or non-ASCII byte in a sequence is a
//! [`Error::Format`](crate::Error::Format) naming the record.
//!
//! # Output
//!
//! * `csv` / `tsv`: one line per read, every value with 6 decimals
//!   (`0.015625`, 8 bytes) followed by `,`/`\t`, the last by `\n`: the
//!   layout seq2vec and kmertools write, fixed width by construction.
//!   Values are `count / total` rounded like `format!("{:.6}", f64)`.
//!   Raw counts are plain decimal numbers (`0,3,12\n`), the bytes
//!   `kmertools comp oligo --counts` writes, so those lines vary in length.
//! * `npy`: a `(reads, dims)` array, `<f4` frequencies or `<u4` counts,
//!   with a header reserved at its widest (see [`crate::writer`]).
//!
//! # Modes
//!
//! The three designs of the parallel-writing article, all producing the
//! same bytes for any thread count:
//!
//! * [`Mode::Single`]: one thread reads (buffered std I/O), vectorises and
//!   appends each line ([`StreamWriter`]).
//! * [`Mode::Batch`]: a reader thread fills a bounded queue of batches
//!   (10,000 reads), a pool of `threads` workers vectorises each batch, and
//!   the batch is appended in order.
//! * [`Mode::Mmap`]: the input is mapped (plain files); `threads` workers
//!   each take the next block of reads (the only lock), vectorise them and
//!   write the block's records at their offset in the output
//!   ([`RecordWriter::write_records`]: one positional write per block,
//!   which fills the page cache without the zero-fill a store into a
//!   mapped hole costs; grown in place as needed: no pre-pass to count
//!   reads). Variable-length lines (csv/tsv counts) are placed by bytes:
//!   a block starts where the previous block ends, so its worker waits
//!   only until that block is vectorised (its length known), then writes
//!   at its offset like the others. Pages of finished input are released as the run advances,
//!   so its resident memory does not grow with the data. Gzip
//!   input and streams (stdin `-`, pipes, FIFOs, /proc files) cannot be
//!   mapped: they are read (and decompressed) by whichever worker holds
//!   the lock (a serial step), and records are still written at offsets.
//!
//! The input is opened once, through the scans' input module; gzip is
//! detected from its first two bytes without reopening (a FIFO or a pipe
//! cannot be reopened), so every kind of input gives the same bytes.
//!
//! Errors are reported for the lowest-numbered bad record in every mode, so
//! the message does not depend on the mode or on thread timing. A failed run
//! leaves no output (the temporary file is removed).

mod count;
mod encode;
mod input;
mod modes;
mod parse;
pub use count::{dims, Kmerizer};
#[doc(hidden)]
pub use parse::records_for_fuzzing;

use std::io::Read;
use std::path::Path;

use crate::dtype::DType;
use crate::exec::{Progress, Threads};
use crate::fs::{AtomicFile, Target};
use crate::map::{Advice, Map, Mode as MapMode};
use crate::scan::source::label;
use crate::writer::{RecordWriter, StreamWriter, WriterOptions};
use crate::Result;
use encode::{element_type, Encoder};
use input::{open_source, stream_input, Source};
use modes::{run_batch, run_mmap, run_single};
use parse::{Counting, Input, Reader};
#[cfg(test)]
use {crate::Error, encode::six_decimals};

/// Largest k supported (4^10 table entries, 524,800 dimensions).
pub const MAX_K: usize = 10;

/// How the work is organised; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Mode {
    /// One thread, buffered reads and writes.
    Single,
    /// Reader thread + batch queue + worker pool, ordered appends.
    Batch,
    /// Workers writing records at their offsets in a mapped output.
    #[default]
    Mmap,
}

crate::named_enum!(Mode, "mode", {
    Single => "single",
    Batch => "batch",
    Mmap => "mmap",
});

/// Output format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum OutFormat {
    /// Comma-separated fixed-width lines.
    #[default]
    Csv,
    /// Tab-separated fixed-width lines.
    Tsv,
    /// A `.npy` array (`<f4`, or `<u4` for counts).
    Npy,
    /// The `.npy` data without its header (little-endian rows), for
    /// in-memory results.
    Raw,
}

crate::named_enum!(OutFormat, "format", {
    Csv => "csv",
    Tsv => "tsv",
    Npy => "npy",
}; OutFormat::Raw => "raw");

impl OutFormat {
    /// The format an output path asks for by its extension: `.npy`, `.tsv`,
    /// else csv (what the CLI and the binding use when none is given).
    pub fn for_path(path: &Path) -> OutFormat {
        match path.extension().and_then(|e| e.to_str()) {
            Some("npy") => OutFormat::Npy,
            Some("tsv") => OutFormat::Tsv,
            _ => OutFormat::Csv,
        }
    }
}

crate::options! {
    /// Options of [`write()`] and [`vectors()`].
    #[derive(Clone, Debug)]
    pub struct KmerOptions {
        /// k-mer length, 1..=[`MAX_K`].
        pub k: usize,
        /// Raw counts instead of frequencies.
        pub counts: bool,
        /// single / batch / mmap.
        pub mode: Mode,
        /// Worker threads (see [`Threads`]; default: one per core); `single`
        /// uses one.
        pub threads: Threads,
        /// fsync the output before renaming it into place.
        pub sync: bool,
        /// Input bytes consumed (the total is the file's size, unknown for
        /// streams; gzip input counts compressed bytes).
        pub progress: Progress,
    }
}

impl Default for KmerOptions {
    fn default() -> Self {
        KmerOptions {
            k: 4,
            counts: false,
            mode: Mode::Mmap,
            threads: Threads::AUTO,
            sync: false,
            progress: Progress::none(),
        }
    }
}

impl KmerOptions {
    /// The element type of [`vectors()`] and of `.npy` output.
    pub fn dtype(&self) -> DType {
        element_type(self.counts)
    }
}

/// What a run produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Reads (records written).
    pub records: u64,
    /// Vector length.
    pub dims: usize,
}

/// Where the records go.
enum Out {
    /// A file written atomically (see [`crate::fs`]).
    File(AtomicFile),
    /// Standard output, streamed (`-o -`, `-o /dev/stdout` on a pipe).
    Stdout,
    Memory,
}

/// Writes the vectors of every read of `input` to `output` in `format`.
///
/// `output` follows the rules of [`crate::fs::output_target`]: symlinks are
/// written through, the same file as `input` is refused, a FIFO, device or
/// directory is refused; `-` (or a path that is this process's standard
/// output, like `/dev/stdout` on a pipe) streams csv/tsv to stdout: in
/// `mmap` mode the `batch` design is used then (the same bytes), and `.npy`
/// cannot be streamed (its header holds the final count).
pub fn write(
    input: &Path,
    output: &Path,
    format: OutFormat,
    opts: &KmerOptions,
) -> Result<Summary> {
    let out = match crate::fs::output_target(output, &[input])? {
        Target::File { real, existing } => {
            Out::File(AtomicFile::for_target(output, real, existing.as_ref())?)
        }
        Target::Stdout => Out::Stdout,
    };
    run(input, out, format, opts).map(|(s, _)| s)
}

/// The vectors of every read of `input` as little-endian rows of `dims`
/// values of [`KmerOptions::dtype`] (`f32` frequencies, or `u32` counts),
/// without a header.
pub fn vectors(input: &Path, opts: &KmerOptions) -> Result<(Summary, Vec<u8>)> {
    let (s, bytes) = run(input, Out::Memory, OutFormat::Raw, opts)?;
    Ok((s, bytes.unwrap_or_default()))
}

fn run(
    input: &Path,
    out: Out,
    format: OutFormat,
    opts: &KmerOptions,
) -> Result<(Summary, Option<Vec<u8>>)> {
    let km = Kmerizer::new(opts.k)?;
    let enc = Encoder::new(format, opts.counts, km.dims());
    let name = label(input);
    // progress: counted by the stream as the file is read (mapped input: by the reader)
    let source = open_source(input, &opts.progress)?;
    let wopts = WriterOptions { header: enc.header(), sync: opts.sync, grow_records: 0 };
    // A stream cannot take records at offsets: batch gives the same bytes.
    let mode = match (&out, opts.mode) {
        (Out::Stdout, Mode::Mmap) => Mode::Batch,
        (_, m) => m,
    };
    // Variable-length records go through the writers as bytes.
    let unit = enc.unit();
    let (records, bytes) = match mode {
        Mode::Single | Mode::Batch => {
            let memory = matches!(out, Out::Memory);
            let mut w = match out {
                Out::File(a) => StreamWriter::create_atomic(a, unit, &wopts)?,
                Out::Stdout => StreamWriter::stdout(unit, &wopts)?,
                Out::Memory => StreamWriter::memory(unit, &wopts)?,
            };
            let (r, gz): (Box<dyn Read + Send>, bool) = match source {
                Source::Mappable(f) => {
                    (Box::new(Counting { inner: f, counter: opts.progress.clone() }), false)
                }
                Source::Stream { r, gz } => (r, gz),
            };
            let reader = Reader::new(stream_input(r, gz), name, Progress::none());
            let records = if mode == Mode::Single {
                run_single(reader, &km, &enc, &mut w, name)?
            } else {
                run_batch(reader, &km, &enc, &mut w, opts.threads, name)?
            };
            if memory {
                (records, Some(w.finish_bytes()?))
            } else {
                w.finish()?;
                (records, None)
            }
        }
        Mode::Mmap => {
            let memory = matches!(out, Out::Memory);
            let w = match out {
                Out::File(a) => RecordWriter::create_atomic(a, unit, None, &wopts)?,
                Out::Stdout | Out::Memory => RecordWriter::memory(unit, None, &wopts)?,
            };
            // gzip and streams (pipes, FIFOs, stdin) cannot be mapped: they
            // are read under the block lock, and still written at offsets
            let (map, stream) = match source {
                Source::Mappable(f) => {
                    (Some(Map::options().mode(MapMode::Read).map(f, name)?), None)
                }
                Source::Stream { r, gz } => (None, Some((r, gz))),
            };
            let reader = match (&map, stream) {
                (Some(m), _) => {
                    if !m.is_empty() {
                        m.advise(Advice::Sequential, 0, None)?;
                    }
                    Reader::new(
                        Input::Mapped { data: m.as_slice(), pos: 0 },
                        name,
                        opts.progress.clone(),
                    )
                }
                (None, Some((r, gz))) => Reader::new(stream_input(r, gz), name, Progress::none()),
                (None, None) => unreachable!("one of the two is set"),
            };
            let records = run_mmap(reader, map.as_ref(), &km, &enc, &w, opts.threads, name)?;
            if let Some(m) = &map {
                m.check()?;
            }
            if memory {
                (records, Some(w.finish_bytes()?))
            } else {
                w.finish()?;
                (records, None)
            }
        }
    };
    Ok((Summary { records, dims: km.dims() }, bytes))
}

#[cfg(test)]
mod tests;

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
//! A control or non-ASCII byte in a sequence is a [`Error::Format`] naming
//! the record.
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

mod parse;
#[doc(hidden)]
pub use parse::records_for_fuzzing;

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Condvar, Mutex};

use rayon::prelude::*;

use crate::dtype::DType;
use crate::exec::{Progress, Threads};
use crate::fs::{AtomicFile, Target};
use crate::map::{pread_full, read_full};
use crate::map::{Advice, Map, Mode as MapMode};
use crate::scan::source::{label, open_input, Opened};
use crate::writer::{HeaderSpec, RecordWriter, StreamWriter, WriterOptions};
use crate::{Error, Result};
use parse::{Block, Caps, Counting, Input, Reader};

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

/// Number of canonical k-mers of length `k`.
pub fn dims(k: usize) -> usize {
    let all = 1usize << (2 * k);
    if k.is_multiple_of(2) {
        (all + (1 << k)) / 2
    } else {
        all / 2
    }
}

fn revcomp(x: usize, k: usize) -> usize {
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

/// Counts canonical k-mers; see the [module docs](self).
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

/// The element type of npy and raw output: `u32` counts or `f32`
/// frequencies.
fn element_type(counts: bool) -> DType {
    if counts {
        DType::U32
    } else {
        DType::F32
    }
}

/// Encodes count vectors as output records.
#[derive(Clone, Copy, Debug)]
struct Encoder {
    format: OutFormat,
    counts: bool,
    dims: usize,
    sep: u8,
}

impl Encoder {
    fn new(format: OutFormat, counts: bool, dims: usize) -> Encoder {
        let sep = if format == OutFormat::Tsv { b'\t' } else { b',' };
        Encoder { format, counts, dims, sep }
    }

    /// Bytes per record; None for csv/tsv counts, which are plain decimal
    /// numbers (`0,`) like kmertools', so their lines vary in length.
    fn fixed_width(&self) -> Option<usize> {
        match (self.format, self.counts) {
            (OutFormat::Npy | OutFormat::Raw, _) => Some(self.dtype().size() * self.dims),
            // `0.015625,`: 6 decimals of a value in [0, 1] are always 8 bytes
            (OutFormat::Csv | OutFormat::Tsv, false) => Some(self.dims * 9),
            (OutFormat::Csv | OutFormat::Tsv, true) => None,
        }
    }

    /// The writers' unit: one record, or one byte when records vary.
    fn unit(&self) -> usize {
        self.fixed_width().unwrap_or(1)
    }

    fn header(&self) -> HeaderSpec {
        match self.format {
            OutFormat::Npy => HeaderSpec::npy(self.dtype(), &[self.dims as u64]),
            _ => HeaderSpec::None,
        }
    }

    fn dtype(&self) -> DType {
        element_type(self.counts)
    }

    /// Appends the record of `counts` to `out`.
    fn encode(&self, counts: &[u32], total: u64, out: &mut Vec<u8>) {
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

fn itoa_buf() -> [u8; 10] {
    [0; 10]
}

fn itoa(mut v: u32, buf: &mut [u8; 10]) -> &[u8] {
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
fn six_decimals(c: u32, total: u64, out: &mut [u8]) {
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
fn vectorise(
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

/// What a run produced.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Reads (records written).
    pub records: u64,
    /// Vector length.
    pub dims: usize,
}

/// The input, opened once (never reopened: a FIFO or a pipe cannot be).
enum Source {
    /// A plain (not gzip) regular file: can be mapped.
    Mappable(File),
    /// Read front to back; `gz` from the first two bytes.
    Stream { r: Box<dyn Read + Send>, gz: bool },
}

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Opens the input through the scans' [`open_input`] (`-` is stdin; pipes,
/// FIFOs and /proc files are streams) and sniffs gzip without reopening:
/// a regular file is `pread` at 0, a stream's first bytes are read and
/// put back in front of it.
fn open_source(path: &Path, progress: &Progress) -> Result<Source> {
    let name = label(path);
    let progress = progress.clone();
    match open_input(path)? {
        Opened::File { file, len } => {
            progress.set_total(len);
            let mut magic = [0u8; 2];
            let got = pread_full(&file, &mut magic, 0).map_err(|e| Error::io(name, "read", e))?;
            let gz = got == 2 && magic == GZIP_MAGIC;
            Ok(if gz {
                Source::Stream { r: Box::new(Counting { inner: file, counter: progress }), gz }
            } else {
                Source::Mappable(file)
            })
        }
        Opened::Stream(r) => {
            let mut r = Counting { inner: r, counter: progress };
            let mut head = [0u8; 2];
            let got = read_full(&mut r, &mut head).map_err(|e| Error::io(name, "read", e))?;
            let head = head[..got].to_vec();
            let gz = head == GZIP_MAGIC;
            Ok(Source::Stream { r: Box::new(std::io::Cursor::new(head).chain(r)), gz })
        }
    }
}

/// A stream input for the parser (decompressed when gzip).
fn stream_input<'a>(r: Box<dyn Read + Send>, gz: bool) -> Input<'a> {
    let r: Box<dyn Read + Send> = if gz {
        Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, r)))
    } else {
        r
    };
    Input::Stream { r, buf: Vec::new(), eof: false, base: 0 }
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

const SINGLE_CAPS: Caps = Caps { records: 1024, bytes: 1 << 20 };
/// The article's batch of 10,000 reads (capped in bytes for long reads).
const BATCH_CAPS: Caps = Caps { records: 10_000, bytes: 32 << 20 };
const MMAP_CAPS: Caps = Caps { records: 256, bytes: 1 << 20 };

/// Returns the number of reads.
fn run_single(
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
fn run_batch(
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
fn run_mmap(
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

#[cfg(test)]
mod tests;

//! Canonical k-mer frequency vectors of DNA reads (FASTA/FASTQ, plain or
//! gzip), one fixed-width record per read, in input order.
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
//!   Raw counts are right-aligned in 10-byte fields (`u32::MAX` has 10
//!   digits) so lines stay fixed width.
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
//!   reads). Pages of finished input are released as the run advances,
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
use std::sync::{mpsc, Mutex};

use rayon::prelude::*;

use crate::dtype::DType;
use crate::exec::{Progress, Threads};
use crate::fs::{AtomicFile, Target};
use crate::map::{pread_full, read_full};
use crate::map::{Advice, Map, Mode as MapMode};
use crate::scan::source::{label, open_input, Opened};
use crate::writer::{HeaderSpec, LineFormat, RecordWriter, StreamWriter, WriterOptions};
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
    line: LineFormat,
}

impl Encoder {
    fn new(format: OutFormat, counts: bool, dims: usize) -> Encoder {
        let sep = if format == OutFormat::Tsv { b'\t' } else { b',' };
        let field_width = if counts { 10 } else { 8 };
        Encoder { format, counts, dims, line: LineFormat { fields: dims, field_width, sep } }
    }

    fn width(&self) -> usize {
        match self.format {
            OutFormat::Csv | OutFormat::Tsv => self.line.line_len(),
            OutFormat::Npy | OutFormat::Raw => self.dtype().size() * self.dims,
        }
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

    fn encode(&self, counts: &[u32], total: u64, out: &mut [u8]) {
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
            (_, true) => {
                let mut buf = itoa_buf();
                for (j, &c) in counts.iter().enumerate() {
                    let s = itoa(c, &mut buf);
                    // 10 digits always fit a 10-byte field
                    let _ = self.line.put(out, j, s);
                }
            }
            (_, false) => {
                let sep = self.line.sep;
                for (j, (o, &c)) in out.chunks_exact_mut(9).zip(counts).enumerate() {
                    six_decimals(c, total, &mut o[..8]);
                    o[8] = if j + 1 == self.dims { b'\n' } else { sep };
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

/// Per-thread scratch: counts and one encoded record.
struct Scratch {
    counts: Vec<u32>,
    rec: Vec<u8>,
}

impl Scratch {
    fn new(dims: usize, width: usize) -> Scratch {
        Scratch { counts: vec![0; dims], rec: vec![0; width] }
    }
}

/// Vectorises one sequence region into `out` (one record).
fn vectorise(
    km: &Kmerizer,
    enc: &Encoder,
    seq: &[u8],
    counts: &mut [u32],
    out: &mut [u8],
    index: u64,
    path: &Path,
) -> Result<()> {
    counts.fill(0);
    let total = km.count(seq, counts).map_err(|b| Error::Format {
        path: path.to_owned(),
        detail: format!("record {}: invalid byte 0x{b:02x} in the sequence", index + 1),
    })?;
    enc.encode(counts, total, out);
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
    let (records, bytes) = match mode {
        Mode::Single | Mode::Batch => {
            let memory = matches!(out, Out::Memory);
            let mut w = match out {
                Out::File(a) => StreamWriter::create_atomic(a, enc.width(), &wopts)?,
                Out::Stdout => StreamWriter::stdout(enc.width(), &wopts)?,
                Out::Memory => StreamWriter::memory(enc.width(), &wopts)?,
            };
            let (r, gz): (Box<dyn Read + Send>, bool) = match source {
                Source::Mappable(f) => {
                    (Box::new(Counting { inner: f, counter: opts.progress.clone() }), false)
                }
                Source::Stream { r, gz } => (r, gz),
            };
            let reader = Reader::new(stream_input(r, gz), name, Progress::none());
            if mode == Mode::Single {
                run_single(reader, &km, &enc, &mut w, name)?;
            } else {
                run_batch(reader, &km, &enc, &mut w, opts.threads, name)?;
            }
            if memory {
                (w.records(), Some(w.finish_bytes()?))
            } else {
                (w.finish()?, None)
            }
        }
        Mode::Mmap => {
            let memory = matches!(out, Out::Memory);
            let w = match out {
                Out::File(a) => RecordWriter::create_atomic(a, enc.width(), None, &wopts)?,
                Out::Stdout | Out::Memory => RecordWriter::memory(enc.width(), None, &wopts)?,
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
            run_mmap(reader, map.as_ref(), &km, &enc, &w, opts.threads, name)?;
            if let Some(m) = &map {
                m.check()?;
            }
            if memory {
                let n = w.records();
                (n, Some(w.finish_bytes()?))
            } else {
                (w.finish()?, None)
            }
        }
    };
    Ok((Summary { records, dims: km.dims() }, bytes))
}

const SINGLE_CAPS: Caps = Caps { records: 1024, bytes: 1 << 20 };
/// The article's batch of 10,000 reads (capped in bytes for long reads).
const BATCH_CAPS: Caps = Caps { records: 10_000, bytes: 32 << 20 };
const MMAP_CAPS: Caps = Caps { records: 256, bytes: 1 << 20 };

fn run_single(
    mut reader: Reader<'_>,
    km: &Kmerizer,
    enc: &Encoder,
    w: &mut StreamWriter,
    path: &Path,
) -> Result<()> {
    let mut s = Scratch::new(km.dims(), enc.width());
    while let Some(block) = reader.next_block(SINGLE_CAPS)? {
        for (j, seq) in block.seqs.iter().enumerate() {
            vectorise(
                km,
                enc,
                &block.data[seq.clone()],
                &mut s.counts,
                &mut s.rec,
                block.first + j as u64,
                path,
            )?;
            w.push(&s.rec)?;
        }
    }
    Ok(())
}

fn run_batch(
    mut reader: Reader<'_>,
    km: &Kmerizer,
    enc: &Encoder,
    w: &mut StreamWriter,
    threads: Threads,
    path: &Path,
) -> Result<()> {
    let pool = threads.pool()?;
    let width = enc.width();
    std::thread::scope(|scope| {
        // Queue of two batches (the article's 20,000 reads).
        let (tx, rx) = mpsc::sync_channel::<Result<Block<'_>>>(1);
        let reader_thread = scope.spawn(move || loop {
            match reader.next_block(BATCH_CAPS) {
                Ok(Some(b)) => {
                    if tx.send(Ok(b)).is_err() {
                        return;
                    }
                }
                Ok(None) => return,
                Err(e) => {
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        });
        let mut buf = Vec::new();
        let result = (|| {
            for block in rx.iter() {
                let block = block?;
                buf.resize(block.seqs.len() * width, 0);
                pool.install(|| {
                    buf.par_chunks_mut(width)
                        .zip(block.seqs.par_iter())
                        .enumerate()
                        .map_init(
                            || vec![0u32; km.dims()],
                            |counts, (j, (out, seq))| {
                                vectorise(
                                    km,
                                    enc,
                                    &block.data[seq.clone()],
                                    counts,
                                    out,
                                    block.first + j as u64,
                                    path,
                                )
                            },
                        )
                        // the first error in read order
                        .collect::<Vec<_>>()
                        .into_iter()
                        .collect::<Result<()>>()
                })?;
                w.push(&buf)?;
            }
            Ok(())
        })();
        drop(rx);
        let _ = reader_thread.join();
        result
    })
}

/// Tracks which blocks are finished, to release memory behind the lowest
/// unfinished one.
struct Watermark {
    low: u64,
    /// block id → (records end, input end) of finished blocks above `low`.
    done: std::collections::BTreeMap<u64, (u64, usize)>,
    rec_end: u64,
    input_end: usize,
    input_released: usize,
}

fn run_mmap(
    reader: Reader<'_>,
    input_map: Option<&Map>,
    km: &Kmerizer,
    enc: &Encoder,
    w: &RecordWriter,
    threads: Threads,
    path: &Path,
) -> Result<()> {
    // The one lock: taking the next block (and its record numbers).
    let reader = Mutex::new((reader, 0u64));
    let abort = AtomicBool::new(false);
    // The error of the lowest record wins, so the message does not depend
    // on thread timing.
    let first_err: Mutex<Option<(u64, Error)>> = Mutex::new(None);
    let fail = |at: u64, e: Error| {
        abort.store(true, Ordering::Relaxed);
        let mut g = first_err.lock().unwrap_or_else(|e| e.into_inner());
        if g.as_ref().is_none_or(|(a, _)| at < *a) {
            *g = Some((at, e));
        }
    };
    let mark = Mutex::new(Watermark {
        low: 0,
        done: Default::default(),
        rec_end: 0,
        input_end: 0,
        input_released: 0,
    });
    let width = enc.width();
    // One long-lived task per worker of the shared pool; no task waits for
    // another, so a pool busy with other work only delays them.
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
                    recs.resize(block.seqs.len() * width, 0);
                    for (j, (seq, out)) in
                        block.seqs.iter().zip(recs.chunks_exact_mut(width)).enumerate()
                    {
                        let i = block.first + j as u64;
                        let data = &block.data[seq.clone()];
                        if let Err(e) = vectorise(km, enc, data, &mut counts, out, i, path) {
                            fail(i, e);
                            return;
                        }
                    }
                    if let Err(e) = w.write_records(block.first, &recs) {
                        fail(block.first, e);
                        return;
                    }
                    let rec_end = block.first + block.seqs.len() as u64;
                    if let Err(e) = release(&mark, id, rec_end, block.input_end, w, input_map) {
                        fail(block.first, e);
                        return;
                    }
                }
            });
        }
    });
    match first_err.into_inner().unwrap_or_else(|e| e.into_inner()) {
        Some((_, e)) => Err(e),
        None => Ok(()),
    }
}

/// Block `id` is finished: advance the watermark and release the memory
/// of everything below it.
fn release(
    mark: &Mutex<Watermark>,
    id: u64,
    rec_end: u64,
    input_end: usize,
    w: &RecordWriter,
    input: Option<&Map>,
) -> Result<()> {
    let (recs, input_from, input_to) = {
        let mut m = mark.lock().unwrap_or_else(|e| e.into_inner());
        m.done.insert(id, (rec_end, input_end));
        let low = m.low;
        let mut low_now = low;
        while let Some((r, i)) = m.done.remove(&low_now) {
            m.rec_end = r;
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
        (m.rec_end, from, to)
    };
    w.release(recs)?;
    if let Some(map) = input {
        if input_to >= input_from + (4 << 20) {
            map.advise(Advice::DontNeed, input_from, Some(input_to - input_from))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;

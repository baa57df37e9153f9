//! FASTA/FASTQ record boundaries, from a mapped file or a stream.
//!
//! Only the structure is parsed here (where each record's sequence lines
//! are, that FASTQ quality matches the sequence in length); the sequence
//! bytes themselves are checked by the counting loop, which sees them
//! anyway. Both formats may wrap sequences over several lines; `\r\n` line
//! ends are accepted; blank lines between records are skipped. The format
//! is taken from the first record's first byte (`>` FASTA, `@` FASTQ).

use std::borrow::Cow;
use std::io::Read;
use std::ops::Range;
use std::path::Path;
use std::sync::LazyLock;

use memchr::{memchr, memmem};

use crate::exec::Progress;
use crate::{Error, Result};

/// Which format the input is in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Format {
    Unknown,
    Fasta,
    Fastq,
}

/// Whole records: their sequence regions (line breaks included) in `data`,
/// and the 0-based index of the first.
pub(crate) struct Block<'a> {
    pub data: Cow<'a, [u8]>,
    pub seqs: Vec<Range<usize>>,
    pub first: u64,
    /// End of this block in the (decompressed) input, for page release.
    pub input_end: usize,
}

/// Limits on one block.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Caps {
    pub records: usize,
    pub bytes: usize,
}

enum Step {
    /// A record: its sequence region and where the next one starts.
    Record(Range<usize>, usize),
    /// Only blank lines (or nothing) left.
    End,
    /// The record is cut off by the end of the buffer: read more.
    More,
}

fn line_end(buf: &[u8], from: usize) -> Option<usize> {
    memchr(b'\n', &buf[from..]).map(|i| from + i)
}

fn skip_blank(buf: &[u8], mut p: usize) -> usize {
    while p < buf.len() && (buf[p] == b'\n' || buf[p] == b'\r') {
        p += 1;
    }
    p
}

/// Bytes of a line without its `\r`.
fn line_len(buf: &[u8], a: usize, b: usize) -> usize {
    if b > a && buf[b - 1] == b'\r' {
        b - a - 1
    } else {
        b - a
    }
}

fn show(b: u8) -> String {
    if b.is_ascii_graphic() {
        format!("'{}'", b as char)
    } else {
        format!("byte 0x{b:02x}")
    }
}

/// Parses one record at `p`. `n` is its 1-based number (for errors).
fn step(buf: &[u8], p: usize, fmt: &mut Format, eof: bool, n: u64, path: &Path) -> Result<Step> {
    let bad = |detail: String| Error::Format {
        path: path.to_owned(),
        detail: format!("record {n}: {detail}"),
    };
    let p = skip_blank(buf, p);
    if p >= buf.len() {
        return Ok(if eof { Step::End } else { Step::More });
    }
    if *fmt == Format::Unknown {
        *fmt = match buf[p] {
            b'>' => Format::Fasta,
            b'@' => Format::Fastq,
            b => {
                return Err(bad(format!(
                    "expected '>' (FASTA) or '@' (FASTQ) at the start of the input, found {}",
                    show(b)
                )))
            }
        };
    }
    match *fmt {
        Format::Fasta => {
            if buf[p] != b'>' {
                return Err(bad(format!(
                    "expected '>' at the start of a FASTA record, found {}",
                    show(buf[p])
                )));
            }
            let Some(nl) = line_end(buf, p) else {
                return Ok(if eof {
                    Step::Record(buf.len()..buf.len(), buf.len())
                } else {
                    Step::More
                });
            };
            // built once: building a finder per record cost ~0.3 % of a run
            static NEXT_HEADER: LazyLock<memmem::Finder<'static>> =
                LazyLock::new(|| memmem::Finder::new(b"\n>"));
            match NEXT_HEADER.find(&buf[nl..]) {
                Some(i) => Ok(Step::Record(nl + 1..nl + i + 1, nl + i + 1)),
                None if eof => Ok(Step::Record(nl + 1..buf.len(), buf.len())),
                None => Ok(Step::More),
            }
        }
        Format::Fastq => {
            if buf[p] != b'@' {
                return Err(bad(format!(
                    "expected '@' at the start of a FASTQ record, found {}",
                    show(buf[p])
                )));
            }
            let cut = |what: &str| {
                if eof {
                    Err(bad(format!("truncated FASTQ record: {what}")))
                } else {
                    Ok(Step::More)
                }
            };
            let Some(nl) = line_end(buf, p) else { return cut("no sequence line") };
            let seq_start = nl + 1;
            let mut q = seq_start;
            let mut seq_len = 0usize;
            // sequence lines up to the '+' line
            loop {
                if q >= buf.len() {
                    return cut("no '+' line");
                }
                if buf[q] == b'+' {
                    break;
                }
                let Some(e) = line_end(buf, q) else {
                    return cut("no '+' line");
                };
                seq_len += line_len(buf, q, e);
                q = e + 1;
            }
            let seq = seq_start..q;
            let Some(e) = line_end(buf, q) else {
                return if seq_len == 0 && eof {
                    Ok(Step::Record(seq, buf.len()))
                } else {
                    cut("no quality line")
                };
            };
            let mut r = e + 1;
            let mut qual = 0usize;
            while qual < seq_len {
                if r >= buf.len() {
                    return cut(&format!("quality has {qual} of {seq_len} characters"));
                }
                let e = match line_end(buf, r) {
                    Some(e) => e,
                    None if eof => buf.len(),
                    None => return Ok(Step::More),
                };
                qual += line_len(buf, r, e);
                r = (e + 1).min(buf.len());
            }
            if qual != seq_len {
                return Err(bad(format!(
                    "quality length {qual} differs from sequence length {seq_len}"
                )));
            }
            Ok(Step::Record(seq, r))
        }
        Format::Unknown => unreachable!("set above"),
    }
}

/// Parses whole records of `buf` from `start`, within `caps`. Returns the
/// sequence regions and where parsing stopped; `done` when the input is
/// exhausted (only possible at `eof`).
fn parse(
    buf: &[u8],
    start: usize,
    fmt: &mut Format,
    eof: bool,
    first: u64,
    caps: Caps,
    path: &Path,
) -> Result<(Vec<Range<usize>>, usize, bool)> {
    let mut seqs = Vec::new();
    let mut p = start;
    loop {
        if seqs.len() >= caps.records || p - start >= caps.bytes {
            return Ok((seqs, p, false));
        }
        match step(buf, p, fmt, eof, first + seqs.len() as u64 + 1, path)? {
            Step::Record(seq, next) => {
                seqs.push(seq);
                p = next;
            }
            Step::End => return Ok((seqs, buf.len(), true)),
            Step::More => return Ok((seqs, p, false)),
        }
    }
}

/// Where records come from.
pub(crate) enum Input<'a> {
    /// A plain file's mapping: blocks borrow from it.
    Mapped { data: &'a [u8], pos: usize },
    /// A stream (std I/O or gzip): blocks own their bytes.
    Stream { r: Box<dyn Read + Send + 'a>, buf: Vec<u8>, eof: bool, base: usize },
}

/// The input with its parsing state.
pub(crate) struct Reader<'a> {
    pub input: Input<'a>,
    fmt: Format,
    next: u64,
    done: bool,
    path: &'a Path,
    progress: Progress,
}

impl<'a> Reader<'a> {
    pub fn new(input: Input<'a>, path: &'a Path, progress: Progress) -> Reader<'a> {
        Reader { input, fmt: Format::Unknown, next: 0, done: false, path, progress }
    }

    /// Index of the next record to be read.
    pub fn next_record(&self) -> u64 {
        self.next
    }

    /// The next block of whole records, or None at the end.
    pub fn next_block(&mut self, caps: Caps) -> Result<Option<Block<'a>>> {
        if self.done {
            return Ok(None);
        }
        let first = self.next;
        match &mut self.input {
            Input::Mapped { data, pos } => {
                let data: &'a [u8] = data;
                let (seqs, end, done) =
                    parse(data, *pos, &mut self.fmt, true, first, caps, self.path)?;
                self.progress.advance((end - *pos) as u64);
                *pos = end;
                self.done = done;
                if seqs.is_empty() {
                    self.done = true;
                    return Ok(None);
                }
                self.next += seqs.len() as u64;
                Ok(Some(Block { data: Cow::Borrowed(data), seqs, first, input_end: end }))
            }
            Input::Stream { r, buf, eof, base } => loop {
                let (seqs, end, done) = parse(buf, 0, &mut self.fmt, *eof, first, caps, self.path)?;
                if !seqs.is_empty() || done {
                    self.done = done;
                    if seqs.is_empty() {
                        return Ok(None);
                    }
                    let rest = buf.split_off(end);
                    let data = std::mem::replace(buf, rest);
                    *base += end;
                    self.next += seqs.len() as u64;
                    return Ok(Some(Block {
                        data: Cow::Owned(data),
                        seqs,
                        first,
                        input_end: *base,
                    }));
                }
                // Nothing whole yet: read more (at least doubling, so a
                // huge record is re-parsed O(log n) times).
                let want = buf.len().max(1 << 20);
                let old = buf.len();
                buf.resize(old + want, 0);
                let got = crate::map::read_full(r, &mut buf[old..]).map_err(|e| {
                    let what = if e.kind() == std::io::ErrorKind::InvalidInput
                        || e.kind() == std::io::ErrorKind::InvalidData
                    {
                        "decompress"
                    } else {
                        "read"
                    };
                    Error::io(self.path, what, e)
                })?;
                *eof = got < want;
                buf.truncate(old + got);
            },
        }
    }
}

/// For the fuzz harness (`crates/mmapkit-fuzz`) only: the sequence region
/// of every record of `data`, read as a mapped file or (`stream`) as a
/// stream, in blocks of at most `records` records and `bytes` bytes.
#[doc(hidden)]
pub fn records_for_fuzzing(
    data: &[u8],
    stream: bool,
    records: usize,
    bytes: usize,
) -> Result<Vec<Vec<u8>>> {
    let input = if stream {
        Input::Stream { r: Box::new(data), buf: Vec::new(), eof: false, base: 0 }
    } else {
        Input::Mapped { data, pos: 0 }
    };
    let path = Path::new("fuzz");
    let mut reader = Reader::new(input, path, Progress::none());
    let mut out = Vec::new();
    while let Some(b) = reader.next_block(Caps { records, bytes })? {
        assert_eq!(b.first, out.len() as u64, "block numbering");
        out.extend(b.seqs.iter().map(|r| b.data[r.clone()].to_vec()));
    }
    Ok(out)
}

/// Counts the bytes read from the file (progress for streamed input).
pub(crate) struct Counting<R> {
    pub inner: R,
    pub counter: Progress,
}

impl<R: Read> Read for Counting<R> {
    fn read(&mut self, b: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(b)?;
        self.counter.advance(n as u64);
        Ok(n)
    }
}

//! Parallel output of fixed-width records through one shared mapping.
//!
//! [`RecordWriter`] is the pattern of the parallel-writing article: when
//! every record has the same width, record `i` lives at
//! `header + i × width`, so any number of threads can write their records
//! straight into a mapped output, in input order, with no reordering queue
//! and no lock on the output.
//!
//! * **Known count** (`n` given): the file is sized (and its blocks
//!   allocated, so a full disk fails at creation) up front.
//! * **Unknown count**: the file grows in chunks as records past its end are
//!   written. Growth goes through [`Map::grow`], which never moves the
//!   mapping, so a thread that is copying a record into a lower offset
//!   while another grows the file keeps writing into valid memory; growth
//!   itself is serialised inside `Map`, and `len` only ever increases until
//!   [`RecordWriter::finish`] (which takes the writer by value, so no write
//!   can be in flight) trims the file to the records written.
//! * **Crash safety**: the data is written through [`crate::fs::AtomicFile`]
//!   (a temporary file beside the real destination, symlinks followed,
//!   owner and mode kept) that is renamed over it only by `finish()`; a
//!   process killed before that leaves the destination as it was (absent,
//!   or the previous complete file), never a file that looks complete.
//!   Dropping an unfinished writer removes the temporary file.
//! * **Header**: optional bytes before the first record; for `.npy` output
//!   with an unknown count the header is reserved at its widest
//!   ([`Header::growable_len`]) and rewritten with the final shape by
//!   `finish()`, in place.
//! * **Bounded memory**: [`RecordWriter::release`] drops the pages of
//!   records that are complete from this process's memory (they stay in the
//!   page cache, dirty, and reach the disk by normal write-back), so the
//!   resident size of a long run does not grow with the output.
//!
//! [`StreamWriter`] is the sequential counterpart (one thread appends the
//! records in order through a buffered `write`), with the same header,
//! temporary-file and rename rules, so both produce the same bytes.
//!
//! [`LineFormat`] is the text variant: lines built from fixed-width fields
//! (values padded to their field width), so a line of text is a
//! fixed-width record too.

use std::fs::File;
use std::io::{self, BufWriter, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

use crate::dtype::DType;
use crate::fs::AtomicFile;
use crate::map::{page_size, Advice, Map, MapOptions, Mode, SharedMap};
use crate::store::npy::Header;
use crate::{Error, Result};

/// What precedes the records.
#[derive(Clone, Debug, Default)]
pub enum HeaderSpec {
    /// Records start at byte 0.
    #[default]
    None,
    /// These exact bytes.
    Bytes(Vec<u8>),
    /// A `.npy` header for an array of shape `(records, *row_shape)` of the
    /// simple dtype `dtype` (e.g. `<f4`), in the growable layout of
    /// [`crate::store`]'s array stores (`Header::encode_growable`): the
    /// output is the same bytes whether the count was known or not, and an
    /// `ArrayStore` can open it and append rows without rewriting it.
    Npy {
        /// numpy dtype string such as `<f4` or `<u4` (any simple dtype; for
        /// one of [`DType`]'s, [`HeaderSpec::npy`] spells it).
        dtype: String,
        /// Shape of one record (e.g. `[136]`).
        row_shape: Vec<u64>,
    },
}

impl HeaderSpec {
    /// A `.npy` header for records of `row_shape` elements of `dtype`.
    pub fn npy(dtype: DType, row_shape: &[u64]) -> HeaderSpec {
        HeaderSpec::Npy { dtype: dtype.descr().to_owned(), row_shape: row_shape.to_vec() }
    }

    fn npy_header(dtype: &str, row_shape: &[u64], n: u64) -> Header {
        let mut shape = vec![n];
        shape.extend_from_slice(row_shape);
        Header::new(dtype, shape)
    }

    /// The header's length in bytes.
    pub fn len(&self) -> usize {
        match self {
            HeaderSpec::None => 0,
            HeaderSpec::Bytes(b) => b.len(),
            HeaderSpec::Npy { dtype, row_shape } => {
                Self::npy_header(dtype, row_shape, 0).growable_len()
            }
        }
    }

    /// Whether there is no header.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The header's bytes for `n` records.
    pub fn encode(&self, n: u64) -> Result<Vec<u8>> {
        Ok(match self {
            HeaderSpec::None => Vec::new(),
            HeaderSpec::Bytes(b) => b.clone(),
            HeaderSpec::Npy { dtype, row_shape } => {
                let h = Self::npy_header(dtype, row_shape, n);
                let total = Self::npy_header(dtype, row_shape, 0).growable_len();
                h.encode_growable(total)?.0
            }
        })
    }
}

crate::options! {
    /// Options of [`RecordWriter::create`].
    #[derive(Clone, Debug, Default)]
    pub struct WriterOptions {
        /// What precedes the records.
        pub header: HeaderSpec,
        /// `fsync` the data and the directory in `finish()`.
        pub sync: bool,
        /// Records to grow by at a time when the count is unknown (0: enough
        /// for ~64 MiB).
        pub grow_records: u64,
    }
}

/// Where the bytes go.
enum Dest {
    /// A temporary file renamed into place by `finish()` (None once done).
    File { path: PathBuf, out: Option<AtomicFile> },
    /// Anonymous memory (read back with [`RecordWriter::finish_bytes`]).
    Memory,
}

/// Fixed-width records written from any thread; see the [module docs](self).
pub struct RecordWriter {
    map: SharedMap,
    dest: Dest,
    width: usize,
    header: HeaderSpec,
    header_len: usize,
    n: Option<u64>,
    grow_records: u64,
    sync: bool,
    /// Highest record index written + 1.
    end: AtomicU64,
    /// Number of `write` calls.
    writes: AtomicU64,
    /// Bytes from the start already released from memory.
    released: Mutex<usize>,
}

impl std::fmt::Debug for RecordWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RecordWriter")
            .field("path", &self.path())
            .field("width", &self.width)
            .field("n", &self.n)
            .field("written", &self.writes.load(Ordering::Relaxed))
            .finish()
    }
}

/// Address space to reserve: the size when it is known, else plenty (a
/// `PROT_NONE` reservation costs no memory), so growth never runs out.
fn reserve(size: usize, n: Option<u64>) -> usize {
    match n {
        Some(_) => size.max(1),
        None => size.max(256 << 30),
    }
}

impl RecordWriter {
    /// A writer of `width`-byte records to `path`; `n` records if known,
    /// else it grows. Nothing appears at `path` until [`finish`](Self::finish).
    pub fn create(
        path: impl AsRef<Path>,
        width: usize,
        n: Option<u64>,
        opts: &WriterOptions,
    ) -> Result<RecordWriter> {
        Self::create_atomic(AtomicFile::create(path.as_ref(), &[])?, width, n, opts)
    }

    /// The same, into an output already opened (and checked against the
    /// inputs) with [`AtomicFile::create`]. Dropping the writer unfinished
    /// removes the temporary file.
    pub fn create_atomic(
        out: AtomicFile,
        width: usize,
        n: Option<u64>,
        opts: &WriterOptions,
    ) -> Result<RecordWriter> {
        let size = Self::initial_len(width, n, opts)?;
        let tmp = out.temp_path().to_owned();
        let file = out.file().try_clone().map_err(|e| Error::io(&tmp, "dup", e))?;
        let m = MapOptions::new()
            .mode(Mode::ReadWrite)
            .len(0)
            .reserve(reserve(size, n))
            .map(file, &tmp)?;
        m.grow(size)?;
        Self::init(m, Dest::File { path: out.path().to_owned(), out: Some(out) }, width, n, opts)
    }

    /// The same, into anonymous memory; read the result with
    /// [`finish_bytes`](Self::finish_bytes).
    pub fn memory(width: usize, n: Option<u64>, opts: &WriterOptions) -> Result<RecordWriter> {
        let size = Self::initial_len(width, n, opts)?;
        let map = MapOptions::new().reserve(reserve(size, n)).anonymous(size)?;
        Self::init(map, Dest::Memory, width, n, opts)
    }

    fn initial_len(width: usize, n: Option<u64>, opts: &WriterOptions) -> Result<usize> {
        if width == 0 {
            return Err(Error::InvalidArgument("record width must be at least 1 byte".into()));
        }
        let records = n.unwrap_or(0);
        (records as usize)
            .checked_mul(width)
            .and_then(|b| b.checked_add(opts.header.len()))
            .ok_or_else(|| {
                Error::InvalidArgument(format!(
                    "{records} records of {width} bytes do not fit in memory"
                ))
            })
    }

    fn init(
        map: Map,
        dest: Dest,
        width: usize,
        n: Option<u64>,
        opts: &WriterOptions,
    ) -> Result<RecordWriter> {
        let grow_records = if opts.grow_records > 0 {
            opts.grow_records
        } else {
            ((64 << 20) / width as u64).max(1)
        };
        let header_len = opts.header.len();
        let w = RecordWriter {
            map: map.into_shared(),
            dest,
            width,
            header: opts.header.clone(),
            header_len,
            n,
            grow_records,
            sync: opts.sync,
            end: AtomicU64::new(0),
            writes: AtomicU64::new(0),
            released: Mutex::new(0),
        };
        if header_len > 0 {
            w.map.grow(header_len)?;
            w.map.write_at(0, &w.header.encode(n.unwrap_or(0))?)?;
        }
        Ok(w)
    }

    /// The destination path (None for memory writers).
    pub fn path(&self) -> Option<&Path> {
        match &self.dest {
            Dest::File { path, .. } => Some(path),
            Dest::Memory => None,
        }
    }

    /// Bytes per record.
    pub fn width(&self) -> usize {
        self.width
    }

    /// The record count given at creation, if any.
    pub fn count(&self) -> Option<u64> {
        self.n
    }

    /// Bytes before record 0.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// Writes record `i` (exactly `width` bytes). Any thread may call this
    /// concurrently for different `i`; writing the same `i` twice from two
    /// threads at once leaves one of them (or a mix).
    pub fn write(&self, i: u64, record: &[u8]) -> Result<()> {
        if record.len() != self.width {
            return Err(Error::InvalidArgument(format!(
                "record {i} is {} bytes; this writer's records are {} bytes",
                record.len(),
                self.width
            )));
        }
        let off = self.span(i, 1)?;
        self.map.write_at(off, record)?;
        self.end.fetch_max(i + 1, Ordering::AcqRel);
        self.writes.fetch_add(1, Ordering::AcqRel);
        Ok(())
    }

    /// Writes records `first..first + k` at once: `records` holds the `k`
    /// records in order (`k × width` bytes). Any thread may call this
    /// concurrently for disjoint ranges, mixed with [`write`](Self::write).
    ///
    /// To a file it is one positional write (`pwrite`) into the temporary
    /// file at the records' offset, not stores through the mapping: the
    /// pages of a freshly grown file are holes, and a store into a mapped
    /// hole first makes the kernel zero-fill the page (`filemap_fault` →
    /// `memset`), then writes it again; `pwrite` fills the page cache
    /// straight from `records` (k-mers mmap mode: 20 % of its profile was
    /// that `memset`). The page cache is one, so the mapping (header,
    /// [`finish`](Self::finish)) sees the bytes. To memory: one populate
    /// call, then stores.
    pub fn write_records(&self, first: u64, records: &[u8]) -> Result<()> {
        if !records.len().is_multiple_of(self.width) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes are not whole records of {} bytes",
                records.len(),
                self.width
            )));
        }
        let k = (records.len() / self.width) as u64;
        if k == 0 {
            return Ok(());
        }
        let off = self.span(first, k)?;
        match &self.dest {
            Dest::File { out: Some(out), .. } => {
                use std::os::unix::fs::FileExt;
                out.file()
                    .write_all_at(records, off as u64)
                    .map_err(|e| Error::io(out.temp_path(), "write", e))?;
            }
            _ => {
                self.map.advise(Advice::PopulateWrite, off, Some(records.len()))?;
                self.map.write_at(off, records)?;
            }
        }
        self.end.fetch_max(first + k, Ordering::AcqRel);
        self.writes.fetch_add(k, Ordering::AcqRel);
        Ok(())
    }

    /// Byte offset of record `i`, with the output grown to hold records
    /// `i..i + count`.
    fn span(&self, i: u64, count: u64) -> Result<usize> {
        if let Some(n) = self.n {
            if i.checked_add(count).is_none_or(|e| e > n) {
                return Err(Error::InvalidArgument(format!(
                    "record index {i} is out of range (the writer holds {n} records)"
                )));
            }
        }
        let off = (i as usize)
            .checked_mul(self.width)
            .and_then(|o| o.checked_add(self.header_len))
            .ok_or_else(|| Error::InvalidArgument(format!("record index {i} is too large")))?;
        let end = (count as usize)
            .checked_mul(self.width)
            .and_then(|b| b.checked_add(off))
            .ok_or_else(|| Error::InvalidArgument(format!("record index {i} is too large")))?;
        if end > self.map.len() {
            // Grow a chunk past the records. `grow` is serialised in Map and
            // never moves the mapping, so writers below are unaffected.
            let chunk = (self.grow_records as usize).saturating_mul(self.width);
            self.map.grow(end.saturating_add(chunk).max(self.map.len().saturating_add(chunk)))?;
        }
        Ok(off)
    }

    /// Records `first..first + count` are about to be written: grows the
    /// output to hold them and faults their pages in with one call
    /// (`MADV_POPULATE_WRITE`) instead of one fault per page as they are
    /// written. Optional: [`write`](Self::write) works without it.
    pub fn prepare(&self, first: u64, count: u64) -> Result<()> {
        if count == 0 {
            return Ok(());
        }
        let off = self.span(first, count)?;
        self.map.advise(Advice::PopulateWrite, off, Some(count as usize * self.width))
    }

    /// Records < `upto` are complete: drop their pages from this process's
    /// memory (a shared mapping's dirty pages stay in the page cache and are
    /// written back normally; nothing is lost). Keeps the resident size of
    /// long runs bounded. Cheap when called often: works in ≥ 4 MiB steps.
    pub fn release(&self, upto: u64) -> Result<()> {
        if !self.map.is_shared() {
            return Ok(());
        }
        let page = page_size();
        let want = (upto as usize)
            .saturating_mul(self.width)
            .saturating_add(self.header_len)
            .min(self.map.len());
        let want = want / page * page;
        let mut released = self.released.lock().unwrap_or_else(|e| e.into_inner());
        if want < *released + (4 << 20) {
            return Ok(());
        }
        self.map.advise(Advice::DontNeed, *released, Some(want - *released))?;
        *released = want;
        Ok(())
    }

    /// Number of records the output will have: `n` if given, else the
    /// highest index written + 1.
    pub fn records(&self) -> u64 {
        self.n.unwrap_or_else(|| self.end.load(Ordering::Acquire))
    }

    fn complete(&mut self) -> Result<u64> {
        let records = self.records();
        let writes = self.writes.load(Ordering::Acquire);
        if writes != records {
            return Err(Error::invalid(self.map.path(), format!(
                "{writes} record writes for {records} records; every record must be written once before finish()"
            )));
        }
        if self.n.is_none() && self.header_len > 0 {
            self.map.write_at(0, &self.header.encode(records)?)?;
        }
        let len = self.header_len + records as usize * self.width;
        self.map.resize(len)?;
        Ok(records)
    }

    /// Completes the output: checks every record was written, rewrites the
    /// header with the final count, trims, optionally fsyncs, and renames
    /// the temporary file to the destination. Returns the record count.
    /// A failed sync fails it before the rename (a retried sync would
    /// "succeed" without the pages the kernel dropped): the destination
    /// stays as it was and the temporary file is removed.
    pub fn finish(mut self) -> Result<u64> {
        let records = self.complete()?;
        if let Dest::File { out, .. } = &mut self.dest {
            if self.sync {
                self.map.flush()?;
            }
            if let Some(out) = out.take() {
                out.commit(self.sync)?;
            }
        }
        Ok(records)
    }

    /// Completes a writer and returns its bytes (header included); for
    /// memory writers (a file writer is finished and its file read back).
    pub fn finish_bytes(mut self) -> Result<Vec<u8>> {
        if matches!(self.dest, Dest::File { .. }) {
            let path = self.path().map(Path::to_owned);
            self.finish()?;
            let path = path.expect("file writer has a path");
            return crate::fs::read_regular(&path);
        }
        self.complete()?;
        let mut out = vec![0u8; self.map.len()];
        self.map.read_at(0, &mut out)?;
        Ok(out)
    }
}

/// Records appended in order by one thread through a buffered `write`
/// (the conventional way; the "single" and "batch" designs of the article).
/// Same header, temporary file and rename-on-finish rules as
/// [`RecordWriter`], so the output bytes are identical.
pub struct StreamWriter {
    dest: StreamDest,
    width: usize,
    header: HeaderSpec,
    records: u64,
    sync: bool,
}

enum StreamDest {
    /// `out` writes to a dup of `atomic`'s temp file (None once renamed).
    File {
        path: PathBuf,
        atomic: Option<AtomicFile>,
        out: BufWriter<File>,
    },
    /// Standard output, as a stream: no temp file, and no header rewrite.
    Stdout(BufWriter<io::Stdout>),
    Memory(Vec<u8>),
}

impl std::fmt::Debug for StreamWriter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StreamWriter")
            .field("width", &self.width)
            .field("records", &self.records)
            .finish()
    }
}

impl StreamWriter {
    /// A writer of `width`-byte records to `path` (through a temporary file).
    pub fn create(
        path: impl AsRef<Path>,
        width: usize,
        opts: &WriterOptions,
    ) -> Result<StreamWriter> {
        Self::create_atomic(AtomicFile::create(path.as_ref(), &[])?, width, opts)
    }

    /// The same, into an output opened with [`AtomicFile::create`].
    pub fn create_atomic(
        atomic: AtomicFile,
        width: usize,
        opts: &WriterOptions,
    ) -> Result<StreamWriter> {
        let file =
            atomic.file().try_clone().map_err(|e| Error::io(atomic.temp_path(), "dup", e))?;
        let out = BufWriter::with_capacity(1 << 20, file);
        Self::init(
            StreamDest::File { path: atomic.path().to_owned(), atomic: Some(atomic), out },
            width,
            opts,
        )
    }

    /// A writer streaming to standard output (`-o -`). A `.npy` header
    /// needs the final count written at the start, so it is refused.
    pub fn stdout(width: usize, opts: &WriterOptions) -> Result<StreamWriter> {
        if matches!(opts.header, HeaderSpec::Npy { .. }) {
            return Err(Error::InvalidArgument(
                "standard output: .npy output cannot be streamed (its header holds the final row count); give a file name".into(),
            ));
        }
        Self::init(StreamDest::Stdout(BufWriter::with_capacity(1 << 20, io::stdout())), width, opts)
    }

    /// The same, into a `Vec` (read it with [`finish_bytes`](Self::finish_bytes)).
    pub fn memory(width: usize, opts: &WriterOptions) -> Result<StreamWriter> {
        Self::init(StreamDest::Memory(Vec::new()), width, opts)
    }

    fn init(dest: StreamDest, width: usize, opts: &WriterOptions) -> Result<StreamWriter> {
        if width == 0 {
            return Err(Error::InvalidArgument("record width must be at least 1 byte".into()));
        }
        let mut w =
            StreamWriter { dest, width, header: opts.header.clone(), records: 0, sync: opts.sync };
        let h = w.header.encode(0)?;
        w.put(&h)?;
        Ok(w)
    }

    fn put(&mut self, bytes: &[u8]) -> Result<()> {
        match &mut self.dest {
            StreamDest::File { atomic: Some(a), out, .. } => {
                out.write_all(bytes).map_err(|e| Error::io(a.temp_path(), "write", e))
            }
            StreamDest::File { path, .. } => {
                Err(Error::io(path, "write", io::Error::from_raw_os_error(libc::EBADF)))
            }
            StreamDest::Stdout(out) => out
                .write_all(bytes)
                .map_err(|e| Error::io(Path::new("standard output"), "write", e)),
            StreamDest::Memory(v) => {
                v.extend_from_slice(bytes);
                Ok(())
            }
        }
    }

    /// Appends whole records (`bytes.len()` a multiple of the width).
    pub fn push(&mut self, bytes: &[u8]) -> Result<()> {
        if !bytes.len().is_multiple_of(self.width) {
            return Err(Error::InvalidArgument(format!(
                "{} bytes are not whole records of {} bytes",
                bytes.len(),
                self.width
            )));
        }
        self.put(bytes)?;
        self.records += (bytes.len() / self.width) as u64;
        Ok(())
    }

    /// Records written so far.
    pub fn records(&self) -> u64 {
        self.records
    }

    fn final_header(&self) -> Result<Option<Vec<u8>>> {
        Ok(match self.header {
            HeaderSpec::Npy { .. } => Some(self.header.encode(self.records)?),
            _ => None,
        })
    }

    /// Writes the final header, optionally fsyncs, renames into place (not
    /// after a failed fsync: the destination then stays as it was).
    pub fn finish(mut self) -> Result<u64> {
        let header = self.final_header()?;
        let records = self.records;
        match &mut self.dest {
            StreamDest::File { atomic, out, path } => {
                let Some(a) = atomic.take() else {
                    return Err(Error::io(
                        path,
                        "write",
                        io::Error::from_raw_os_error(libc::EBADF),
                    ));
                };
                let tmp = a.temp_path().to_owned();
                out.flush().map_err(|e| Error::io(&tmp, "write", e))?;
                let f = out.get_mut();
                if let Some(h) = header {
                    f.seek(SeekFrom::Start(0))
                        .and_then(|_| f.write_all(&h))
                        .map_err(|e| Error::io(&tmp, "write", e))?;
                }
                a.commit(self.sync)?;
            }
            StreamDest::Stdout(out) => {
                out.flush().map_err(|e| Error::io(Path::new("standard output"), "write", e))?;
            }
            StreamDest::Memory(v) => {
                if let Some(h) = header {
                    v[..h.len()].copy_from_slice(&h);
                }
            }
        }
        Ok(records)
    }

    /// Completes a memory writer and returns its bytes (header included).
    pub fn finish_bytes(mut self) -> Result<Vec<u8>> {
        if let StreamDest::Memory(_) = self.dest {
            if let Some(h) = self.final_header()? {
                if let StreamDest::Memory(v) = &mut self.dest {
                    v[..h.len()].copy_from_slice(&h);
                }
            }
            return match std::mem::replace(&mut self.dest, StreamDest::Memory(Vec::new())) {
                StreamDest::Memory(v) => Ok(v),
                _ => unreachable!(),
            };
        }
        let path = match &self.dest {
            StreamDest::File { path, .. } => path.clone(),
            StreamDest::Stdout(_) => {
                return Err(Error::InvalidArgument(
                    "standard output: cannot read the output back".into(),
                ))
            }
            StreamDest::Memory(_) => unreachable!(),
        };
        self.finish()?;
        crate::fs::read_regular(&path)
    }
}

/// Text lines made of `fields` fixed-width fields: every value is written
/// right-aligned (space padded) in `field_width` bytes and followed by the
/// separator, the last one by `\n`. All lines then have the same length,
/// [`LineFormat::line_len`], so they can go through a [`RecordWriter`].
///
/// With `field_width` 8 and values printed with 6 decimals in `[0, 1]`
/// (`0.015625`), no padding is ever needed: that is exactly the CSV/TSV
/// layout of seq2vec and kmertools.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LineFormat {
    /// Fields per line.
    pub fields: usize,
    /// Bytes per field, separator excluded.
    pub field_width: usize,
    /// Byte after each field but the last (`,` or `\t`).
    pub sep: u8,
}

impl LineFormat {
    /// Bytes per line, newline included.
    pub fn line_len(&self) -> usize {
        self.fields * (self.field_width + 1)
    }

    /// Puts `value` into field `j` of `line` (a buffer of `line_len()`
    /// bytes), right-aligned, and the separator or newline after it.
    /// Errs if `value` is wider than the field.
    pub fn put(&self, line: &mut [u8], j: usize, value: &[u8]) -> Result<()> {
        if value.len() > self.field_width {
            return Err(Error::InvalidArgument(format!(
                "value {:?} does not fit in a field of {} bytes",
                String::from_utf8_lossy(value),
                self.field_width
            )));
        }
        let start = j * (self.field_width + 1);
        let field = &mut line[start..start + self.field_width + 1];
        let pad = self.field_width - value.len();
        field[..pad].fill(b' ');
        field[pad..self.field_width].copy_from_slice(value);
        field[self.field_width] = if j + 1 == self.fields { b'\n' } else { self.sep };
        Ok(())
    }
}

#[cfg(test)]
mod tests;

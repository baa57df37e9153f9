//! A growable `.npy` file: [`ArrayStore`].
//!
//! The file is a real `.npy` array whose first axis grows. Its header is
//! written with room for any row count ([`Header::encode_growable`]), and
//! the file is kept longer than the header says: the extra bytes are
//! *capacity*, allocated ahead in chunks (geometric growth, at least
//! [`StoreOptions::chunk_bytes`]), so appends are amortised O(rows) and a
//! full disk is reported by the append that needs more room, never as a
//! `SIGBUS` later.
//!
//! # Publication order
//!
//! An append writes the rows into the capacity, then rewrites the header's
//! row count in place (an aligned 8-byte store, see [`Map::store_word`],
//! and `publish` for the one update in 10^8 that changes more digits). Readers (this crate's [`ArrayStore::open`] in read
//! mode, `np.load(path, mmap_mode="r")`, anything that reads the header
//! first) therefore only ever see rows that were completely written; rows
//! past the count are ignored (numpy accepts a file longer than its
//! header says). A process killed mid-append leaves the old count, and a
//! writer reopening the file reuses the unpublished rows as capacity.
//! [`ArrayStore::flush`] adds durability against power loss: data pages are
//! synced, then the header page, then the count is recorded in the
//! store's durable-rows record (`.NAME.mmapkit-durable` beside it while a
//! writer has it open; see the `durable` module). The kernel may write the
//! header back before the rows between flushes, so after a power loss the
//! header alone could count rows that read as zeros; a store opened in a
//! later boot trusts only the rows the record says were flushed (readers
//! see that many, a writer cuts the header back). Rows flushed are always
//! there; rows appended since the last flush may be gone, never garbage.
//!
//! # Fail-stop
//!
//! A flush whose sync fails (`msync` of the data or header, or the
//! durable-rows record's `fdatasync`) poisons the writer: the kernel may
//! have dropped the dirty pages and marked them clean, so a later sync
//! that succeeds would not write them and a flush would record rows as
//! durable that are not ("fsyncgate"). Every later append, flush, resize,
//! truncation and read past the rows last flushed is then
//! [`Error::Failed`], and closing leaves the durable-rows record as it
//! was, until the store is reopened.
//!
//! One writer at a time: writers hold an exclusive `flock` on the file;
//! readers take no lock. Readers map only the published rows and follow
//! growth with [`ArrayStore::refresh`]; since counts only grow and
//! trimming ([`ArrayStore::close`]) only removes unpublished capacity, a
//! writer never takes pages away from a reader.

use std::fs::File;
use std::io::Write;
use std::ops::Range;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicU64;
use std::sync::OnceLock;

use super::npy::Header;
use crate::dtype::TypeStr;
use crate::map::{Map, MapOptions, Mode};
use crate::{Error, Result};
use durable::Durable;
pub use gather::{GATHER_DIRECT, GATHER_PART};
pub use header::read_header_of;
pub(crate) use header::{check_descr, read_header, read_header_stable};
use header::{check_dtype, format_err, read_full, row_bytes_of, trusted_rows};
pub(crate) use lock::lock_writer_for;
use lock::{file_id, held_here, lock_writer};

crate::options! {
    /// Options for [`ArrayStore::create`] and [`ArrayStore::open_with`].
    #[derive(Clone, Debug)]
    pub struct StoreOptions {
        /// Rows of capacity to allocate at creation.
        pub capacity_rows: u64,
        /// Minimum bytes of capacity added when the store runs out (growth is
        /// otherwise geometric, ×1.5).
        pub chunk_bytes: u64,
        /// Address space reserved for growth in place (views stay valid while
        /// the data fits in it; it is extended in place when possible).
        pub reserve: usize,
        /// Keep the durable-rows record (see `durable`; default true). Off
        /// for a caller whose own commit record says how many rows are
        /// durable (a feature store's `meta.json`): a writer then syncs
        /// with [`ArrayStore::sync`] alone and removes a record another
        /// writer left, and readers trust the header.
        pub durable_record: bool,
    }
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions {
            capacity_rows: 0,
            chunk_bytes: 1 << 20,
            reserve: 64 << 30,
            durable_record: true,
        }
    }
}

/// A `.npy` array file whose first axis grows; see the [module docs](self).
#[derive(Debug)]
pub struct ArrayStore {
    map: Map,
    path: PathBuf,
    header: Header,
    item_size: usize,
    row_bytes: usize,
    data_off: usize,
    /// The row-count field's bytes in the header.
    field: Range<usize>,
    writable: bool,
    chunk_bytes: u64,
    /// The process that opened it: a forked child dropping its inherited
    /// copy must not trim the parent's file.
    owner: u32,
    /// File length when opened: trimming never goes below it, so opening
    /// and closing without appending leaves the file as it was.
    keep_len: usize,
    /// The header is valid but not in our fixed-width layout: rewritten by
    /// the first publish, not by opening.
    header_dirty: bool,
    /// The durable-rows record (writers; see `durable`).
    durable: Option<Durable>,
    /// Rows known to be on disk: as opened, then as last flushed.
    durable_rows: AtomicU64,
    /// What failed, once a flush's sync did (fail-stop; module docs).
    failure: OnceLock<String>,
    /// [`StoreOptions::durable_record`].
    use_record: bool,
}

/// Writes `header` (and `copy_from` data, if any) to a new temporary file
/// beside `path` (through symlinks, owner and mode kept; see
/// [`crate::fs`]), syncs it and renames it over the real file, so the user
/// has either the old file or the whole new one. Returns the open new file,
/// locked for writing.
fn replace_atomically(
    path: &Path,
    header: &[u8],
    copy_from: Option<(&File, u64, u64)>,
    allocate: u64,
) -> Result<File> {
    let mut out = crate::fs::AtomicFile::create(path, &[])?;
    let tmp = out.temp_path().to_owned();
    lock_writer(out.file(), &tmp)?;
    out.file_mut().write_all(header).map_err(|e| Error::io(&tmp, "write", e))?;
    if let Some((src, off, len)) = copy_from {
        let mut reader = std::io::Read::take(
            std::io::BufReader::with_capacity(1 << 20, ReadAt { file: src, pos: off }),
            len,
        );
        let n =
            std::io::copy(&mut reader, out.file_mut()).map_err(|e| Error::io(path, "copy", e))?;
        if n != len {
            return Err(Error::FileTruncated { path: path.to_owned() });
        }
    }
    // Capacity is allocated before the rename: a full disk fails here,
    // with the old file still in place.
    crate::map::allocate(out.file(), path, allocate)?;
    let f = out.file().try_clone().map_err(|e| Error::io(&tmp, "dup", e))?;
    out.commit(true)?;
    Ok(f)
}

/// `Read` over a file from a position, with pread (leaves the file's
/// cursor alone).
struct ReadAt<'a> {
    file: &'a File,
    pos: u64,
}

impl std::io::Read for ReadAt<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.file.read_at(buf, self.pos)?;
        self.pos += n as u64;
        Ok(n)
    }
}

impl ArrayStore {
    /// Creates (or atomically replaces) `path` as an empty store of rows of
    /// shape `row_shape` whose items are `descr` (the header literal, e.g.
    /// `'<f8'` with quotes, or a structured-dtype list) of `item_size`
    /// bytes. The new file appears at `path` complete (written to a
    /// temporary file, synced, renamed).
    pub fn create(
        path: impl AsRef<Path>,
        descr: &str,
        item_size: usize,
        row_shape: &[u64],
        opts: &StoreOptions,
    ) -> Result<ArrayStore> {
        let path = path.as_ref();
        let row_bytes = row_bytes_of(path, item_size, row_shape)?;
        if descr.trim().is_empty() {
            return Err(Error::invalid(path, "empty dtype description"));
        }
        let mut shape = vec![0];
        shape.extend_from_slice(row_shape);
        let header = Header { descr: descr.trim().to_owned(), fortran_order: false, shape };
        let data_off = header.growable_len();
        let (bytes, field) = header.encode_growable(data_off)?;
        // Replacing a store that another process is writing would leave
        // that writer appending to a file nobody can see.
        // (Checked on the resolved target: a FIFO is refused, never opened.)
        if let crate::fs::Target::File { existing: Some(_), real } =
            crate::fs::output_target(path, &[])?
        {
            if let Ok(old) = crate::fs::open_nonblocking(&real, 0) {
                lock_writer(&old, path)?;
            }
        }
        let capacity = opts
            .capacity_rows
            .checked_mul(row_bytes as u64)
            .and_then(|b| b.checked_add(data_off as u64))
            .ok_or_else(|| {
                Error::invalid(path, format!("{} rows are too many", opts.capacity_rows))
            })?;
        let file = replace_atomically(path, &bytes, None, capacity)?;
        let mut store =
            Self::map_store(file, path, header, item_size, row_bytes, data_off, field, opts, None)?;
        store.keep_len = data_off;
        store.reserve_rows(opts.capacity_rows)?;
        store.start_durable(false)?;
        Ok(store)
    }

    /// Opens an existing `.npy` file: read-only (`writable = false`; no
    /// lock, sees rows published so far, [`refresh`](Self::refresh) to
    /// see more) or as the one writer. The item size is taken from the
    /// header for simple dtypes; pass `item_size` for structured ones.
    pub fn open(
        path: impl AsRef<Path>,
        writable: bool,
        item_size: Option<usize>,
    ) -> Result<ArrayStore> {
        Self::open_with(path, writable, item_size, &StoreOptions::default())
    }

    /// Another read-only handle on this store's file (not on whatever
    /// is at its path now: opened through this handle's descriptor), for
    /// a thread of its own; it sees the rows published so far, errors
    /// name this store's path.
    pub fn reader(&self) -> Result<ArrayStore> {
        use std::os::fd::AsRawFd;
        let fd = PathBuf::from(format!("/proc/self/fd/{}", self.map.file().as_raw_fd()));
        // A file cut under the published rows is that, not a bad header.
        let mut r = Self::open(&fd, false, Some(self.item_size)).map_err(|e| {
            self.check_rows(self.len()).err().unwrap_or_else(|| e.with_path(&self.path))
        })?;
        r.path = self.path.clone();
        Ok(r)
    }

    /// [`open`](Self::open) with options (chunk size, reserve).
    ///
    /// Everything is validated before a byte changes: an unsupported dtype
    /// (objects, zero-size items), Fortran order, a malformed header or a
    /// file shorter than its header says is a [`Error::Format`] and the
    /// file is untouched. A file written by `np.save` whose header has no
    /// room for a growing row count is then rewritten once, atomically,
    /// with a bigger header when opened for writing (the data and anything
    /// after it are copied unchanged).
    pub fn open_with(
        path: impl AsRef<Path>,
        writable: bool,
        item_size: Option<usize>,
        opts: &StoreOptions,
    ) -> Result<ArrayStore> {
        let path = path.as_ref();
        let how = if writable { crate::fs::InPlace::Write } else { crate::fs::InPlace::Read };
        let mut file = crate::fs::open_in_place(path, how)?;
        if file.metadata().map_err(|e| Error::io(path, "stat", e))?.is_dir() {
            return Err(Error::io(path, "open", std::io::Error::from_raw_os_error(libc::EISDIR)));
        }
        if writable {
            lock_writer(&file, path)?;
        }
        let (mut header, mut data_off) = read_header_stable(&file, path)?;
        if header.shape.is_empty() {
            return Err(format_err(path, "a 0-d array has no rows to grow".into()));
        }
        if header.fortran_order && header.shape.len() > 1 {
            return Err(format_err(
                path,
                "Fortran-order arrays cannot grow by rows (C order only)".into(),
            ));
        }
        header.fortran_order = false;
        let item_size = check_dtype(path, &header, item_size)?;
        let row_bytes = row_bytes_of(path, item_size, &header.shape[1..])
            .map_err(|e| format_err(path, e.message()))?;
        if !writable {
            header.shape[0] =
                trusted_rows(&file, path, &header, data_off, row_bytes, opts.durable_record)?;
        }
        let rows = header.shape[0];
        let file_len = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
        let need = rows
            .checked_mul(row_bytes as u64)
            .and_then(|b| b.checked_add(data_off as u64))
            .ok_or_else(|| format_err(path, format!("shape {:?} is too large", header.shape)))?;
        if file_len < need {
            return Err(format_err(
                path,
                format!("the header says {rows} rows ({need} bytes) but the file has only {file_len} bytes"),
            ));
        }
        if !writable {
            let len =
                usize::try_from(need).map_err(|_| format_err(path, "too large to map".into()))?;
            return Self::map_store(
                file,
                path,
                header,
                item_size,
                row_bytes,
                data_off,
                0..0,
                opts,
                Some(len),
            );
        }
        // Our layout needs the count field to end 8-byte aligned; a header
        // of another length (or alignment) cannot hold it in place.
        let in_place =
            header.growable_len() <= data_off && header.encode_growable(data_off).is_ok();
        let mut keep_len = file_len;
        if !in_place {
            // No room to grow the count in place (np.save writes minimal
            // headers): rewrite the file once with a bigger header.
            let new_off = header.growable_len();
            let (bytes, _) = header.encode_growable(new_off)?;
            let rest = file_len - data_off as u64;
            file = replace_atomically(path, &bytes, Some((&file, data_off as u64, rest)), 0)?;
            data_off = new_off;
            keep_len = new_off as u64 + rest;
        }
        let (bytes, field) = header.encode_growable(data_off)?;
        let mut current = vec![0u8; data_off];
        read_full(&file, &mut current, path)?;
        let mut store =
            Self::map_store(file, path, header, item_size, row_bytes, data_off, field, opts, None)?;
        store.keep_len =
            usize::try_from(keep_len).map_err(|_| format_err(path, "too large to map".into()))?;
        // Same shape, not our fixed-width layout: the first publish
        // rewrites the header (opening alone changes nothing).
        store.header_dirty = current != bytes;
        store.start_durable(true)?;
        Ok(store)
    }

    /// Maps `file` and assembles the store: a writer, or with `read_len` a
    /// reader of that many bytes.
    #[allow(clippy::too_many_arguments)]
    fn map_store(
        file: File,
        path: &Path,
        header: Header,
        item_size: usize,
        row_bytes: usize,
        data_off: usize,
        field: Range<usize>,
        opts: &StoreOptions,
        read_len: Option<usize>,
    ) -> Result<ArrayStore> {
        let mut mo = MapOptions::new();
        // Readers map copy-on-write: the buffers they lend are read-only,
        // but a consumer that writes anyway (torch tensors of a batch have
        // no read-only flag) changes private pages instead of faulting.
        match read_len {
            Some(len) => mo.mode(Mode::CopyOnWrite).len(len).reserve(opts.reserve.max(len)),
            None => mo.mode(Mode::ReadWrite).reserve(opts.reserve),
        };
        let map = mo.map(file, path)?;
        if read_len.is_none() {
            held_here().extend(file_id(map.file()));
        }
        let rows = header.shape[0];
        Ok(ArrayStore {
            map,
            path: path.to_owned(),
            header,
            item_size,
            row_bytes,
            data_off,
            field,
            writable: read_len.is_none(),
            chunk_bytes: opts.chunk_bytes.max(1),
            owner: std::process::id(),
            keep_len: 0,
            header_dirty: false,
            durable_rows: AtomicU64::new(rows),
            durable: None,
            failure: OnceLock::new(),
            use_record: opts.durable_record,
        })
    }

    // ----- accessors ------------------------------------------------------

    /// Published rows.
    pub fn len(&self) -> u64 {
        self.header.shape[0]
    }
    /// Whether there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Rows that fit without allocating more (writers; readers: `len`).
    pub fn capacity(&self) -> u64 {
        (self.map.len().saturating_sub(self.data_off) / self.row_bytes) as u64
    }
    /// The path it was opened with.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The header as last published (`shape[0]` is [`len`](Self::len)).
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// The dtype literal of the header (`'<f8'`, or a structured list).
    pub fn descr(&self) -> &str {
        &self.header.descr
    }
    /// The shape of one row.
    pub fn row_shape(&self) -> &[u64] {
        &self.header.shape[1..]
    }
    /// Bytes per item.
    pub fn item_size(&self) -> usize {
        self.item_size
    }
    /// Bytes per row.
    pub fn row_bytes(&self) -> usize {
        self.row_bytes
    }
    /// File offset of row 0 (the header length, a multiple of 64).
    pub fn data_offset(&self) -> usize {
        self.data_off
    }
    /// Whether this handle is the writer.
    pub fn is_writable(&self) -> bool {
        self.writable
    }
    /// Pointer to row 0, for bindings that hand out views (valid for
    /// [`len`](Self::len) rows while the store lives; writable for writers).
    pub fn data_ptr(&self) -> *const u8 {
        self.map.as_ptr().wrapping_add(self.data_off)
    }
    /// The underlying map (header included).
    pub fn map(&self) -> &Map {
        &self.map
    }

    // ----- reading --------------------------------------------------------

    /// Readers: re-reads the header and maps rows published since (the
    /// data never moves: earlier slices and views stay valid). Writers
    /// already see everything. Returns the row count.
    pub fn refresh(&mut self) -> Result<u64> {
        if self.writable {
            return Ok(self.len());
        }
        let (header, off) = read_header_stable(self.map.file(), &self.path)?;
        if off != self.data_off
            || header.shape[1..] != self.header.shape[1..]
            || header.descr != self.header.descr
        {
            return Err(format_err(
                &self.path,
                "the header changed shape or dtype (was the file replaced?); open it again".into(),
            ));
        }
        let rows = trusted_rows(
            self.map.file(),
            &self.path,
            &header,
            off,
            self.row_bytes,
            self.use_record,
        )?;
        if rows < self.len() {
            return Err(format_err(
                &self.path,
                format!(
                    "the row count went down from {} to {rows} (was the file replaced?)",
                    self.len()
                ),
            ));
        }
        let end = usize::try_from(rows as u128 * self.row_bytes as u128 + self.data_off as u128)
            .map_err(|_| format_err(&self.path, "too large to map".into()))?;
        self.map.grow(end)?;
        self.header.shape[0] = rows;
        Ok(rows)
    }
}

impl Drop for ArrayStore {
    /// Writers [`release`](ArrayStore::release) (best effort; use
    /// [`ArrayStore::close`] to see errors).
    fn drop(&mut self) {
        let _ = self.release();
    }
}

mod durable;
mod gather;
mod header;
mod lock;
#[cfg(test)]
mod tests;
mod write;

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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use rayon::prelude::*;

use super::npy::Header;
use crate::dtype::TypeStr;
use crate::exec::Threads;
use crate::map::{self, Map, MapOptions, Mode};
use crate::{Error, Result};
use durable::Durable;

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

/// Output bytes below which a gather is not split between threads: a
/// part smaller than this costs more to hand off than to copy.
pub const GATHER_PART: usize = 1 << 20;
/// Bytes a gather collects before handing them on (fits the L2 cache).
const GATHER_PIECE: usize = 256 << 10;
/// Runs of at least this many bytes skip the piece (see `gather_rows_with`).
pub const GATHER_DIRECT: usize = 64 << 10;

/// How many parts a gather of `out_len` bytes is split into on `threads`.
fn gather_parts(out_len: usize, threads: Threads) -> usize {
    // (`Threads::get` may read cgroup files: tens of µs, so not for small gathers.)
    if out_len < 2 * GATHER_PART {
        1
    } else {
        threads.get().min(out_len / GATHER_PART)
    }
}

/// Calls `f(i, j)` for each maximal run `rows[i..j]` of consecutive
/// indices (one `memcpy` each for a gather).
fn for_runs(rows: &[u64], mut f: impl FnMut(usize, usize)) {
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

fn format_err(path: &Path, detail: String) -> Error {
    Error::Format { path: path.to_owned(), detail }
}

/// Reads and parses the header of the `.npy` file `file`: the preamble
/// first, then exactly the header length it claims (capped at
/// [`npy::MAX_HEADER_LEN`](super::npy::MAX_HEADER_LEN) before anything is
/// allocated).
pub(crate) fn read_header(file: &File, path: &Path) -> Result<(Header, usize)> {
    let mut pre = [0u8; super::npy::PREAMBLE_LEN];
    let n = read_full(file, &mut pre, path)?;
    let total = Header::total_len(&pre[..n], path)?;
    let mut buf = vec![0u8; total];
    let n = read_full(file, &mut buf, path)?;
    if n < total {
        return Err(format_err(
            path,
            format!("truncated .npy header ({total} bytes expected, the file has {n})"),
        ));
    }
    Header::decode(&buf, path)
}

fn read_full(file: &File, buf: &mut [u8], path: &Path) -> Result<usize> {
    crate::map::pread_full(file, buf, 0).map_err(|e| Error::io(path, "read", e))
}

/// Reads the header twice until two reads agree, so a read racing with a
/// writer's in-place update cannot return a torn row count.
pub(crate) fn read_header_stable(file: &File, path: &Path) -> Result<(Header, usize)> {
    let mut last = read_header(file, path)?;
    for _ in 0..100 {
        let next = read_header(file, path)?;
        if next == last {
            return Ok(next);
        }
        last = next;
    }
    Ok(last)
}

/// The header's row count, or fewer when the store's durable-rows record
/// says a power loss since may have lost the rest (see `durable`).
fn trusted_rows(
    file: &File,
    path: &Path,
    header: &Header,
    data_off: usize,
    row_bytes: usize,
    use_record: bool,
) -> Result<u64> {
    let rows = header.shape[0];
    if !use_record {
        return Ok(rows);
    }
    match durable::read(&durable::path_of(path))? {
        Some(r)
            if !r.this_boot
                && r.rows < rows
                && r.fingerprint
                    == durable::fingerprint(file, path, header, data_off, row_bytes, r.rows)? =>
        {
            Ok(r.rows)
        }
        _ => Ok(rows),
    }
}

/// Reads the header of the `.npy` file at `path`: the header and the
/// offset of the data.
/// A FIFO or device is refused unread (and its open does not block).
pub fn read_header_of(path: &Path) -> Result<(Header, usize)> {
    let file = crate::fs::open_regular(path, "a .npy header is read from a file")?;
    read_header_stable(&file, path)
}

/// Checks that the header's dtype is plain fixed-width data that can be
/// mapped: a known kind, no Python objects (pickled, not data).
pub(super) fn check_descr(path: &Path, header: &Header) -> Result<()> {
    let descr = header.descr.trim();
    if let Some(d) = header.simple_dtype() {
        // A kind numpy stores as plain bytes, as numpy spells plain types.
        if !TypeStr::parse(d).is_some_and(|t| "biufcSUVMma".contains(t.kind)) {
            let objects = d.strip_prefix(['<', '>', '|', '=']).unwrap_or(d).starts_with('O');
            let why = if objects { " (Python objects, pickled; not plain data)" } else { "" };
            return Err(format_err(path, format!("unsupported dtype {descr}{why}")));
        }
    } else if !descr.starts_with('[') {
        return Err(format_err(path, format!("unsupported dtype {descr}")));
    } else if ["'O", "'|O", "'<O", "'>O", "'=O", "\"O", "\"|O"]
        .iter()
        .any(|t| descr.contains(&format!(", {t}")))
    {
        // A structured dtype with an object field (its type follows ", ").
        return Err(format_err(path, format!("unsupported dtype {descr} (holds Python objects)")));
    }
    Ok(())
}

/// [`check_descr`], and a known non-zero item size agreeing with
/// `item_size` when both are known. Returns the item size.
fn check_dtype(path: &Path, header: &Header, item_size: Option<usize>) -> Result<usize> {
    check_descr(path, header)?;
    let descr = header.descr.trim();
    let size = match (item_size, header.item_size()) {
        (Some(given), Some(known)) if given != known => {
            return Err(format_err(
                path,
                format!("dtype {descr} has {known}-byte items, not {given}"),
            ))
        }
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => {
            return Err(Error::invalid(
                path,
                format!("cannot tell the item size of dtype {descr}; pass it explicitly"),
            ))
        }
    };
    if size == 0 {
        return Err(format_err(path, format!("dtype {descr} has zero-byte items")));
    }
    Ok(size)
}

/// Bytes per row, from the item size and the row shape.
fn row_bytes_of(path: &Path, item_size: usize, row_shape: &[u64]) -> Result<usize> {
    let items = row_shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    match items.and_then(|n| n.checked_mul(item_size as u64)).and_then(|b| usize::try_from(b).ok()) {
        Some(0) => Err(Error::invalid(
            path,
            format!("rows of zero bytes cannot be stored (item size {item_size}, row shape {row_shape:?})"),
        )),
        Some(b) => Ok(b),
        None => Err(Error::invalid(path, format!("row shape {row_shape:?} is too large"))),
    }
}

/// (device, inode, pid) of each array this process holds the writer lock of:
/// a second open in the same process conflicts with that `flock` too, and
/// the refusal must say who holds it (the pid: a forked child inherits the
/// set, not the ownership).
static HELD_HERE: Mutex<Vec<(u64, u64, u32)>> = Mutex::new(Vec::new());

fn file_id(file: &File) -> Option<(u64, u64, u32)> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino(), std::process::id()))
}

fn held_here() -> std::sync::MutexGuard<'static, Vec<(u64, u64, u32)>> {
    HELD_HERE.lock().unwrap_or_else(|e| e.into_inner())
}

fn lock_writer(file: &File, path: &Path) -> Result<()> {
    lock_writer_for(file, path, false)
}

/// Takes the writer lock of the array `file` (opened from `path`); the
/// refusal says whether this process or another holds it, and with
/// `recreate` that the store it belongs to cannot be re-created.
pub(crate) fn lock_writer_for(file: &File, path: &Path, recreate: bool) -> Result<()> {
    // Held by this process: say so at once (no retry can help).
    let here = file_id(file).is_some_and(|id| held_here().contains(&id));
    if !here && crate::fs::try_lock_exclusive(file, path)? {
        return Ok(());
    }
    let who = match (here, recreate) {
        (true, false) => {
            "lock (this process already has the store open for writing: close that first)"
        }
        (false, false) => "lock (another process has the store open for writing)",
        (true, true) => {
            "lock (this process already has the store open for writing: close that first; \
             cannot re-create it)"
        }
        (false, true) => {
            "lock (another process has the store open for writing; cannot re-create it)"
        }
    };
    Err(Error::io(path, who, std::io::Error::from_raw_os_error(libc::EWOULDBLOCK)))
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
    fn check_gathered(&self) -> Result<()> {
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

    /// Pointer to row 0, for bindings that hand out views (valid for
    /// [`len`](Self::len) rows while the store lives; writable for writers).
    pub fn data_ptr(&self) -> *const u8 {
        self.map.as_ptr().wrapping_add(self.data_off)
    }
    /// The underlying map (header included).
    pub fn map(&self) -> &Map {
        &self.map
    }

    // ----- writing --------------------------------------------------------

    fn need_writer(&self) -> Result<()> {
        if !self.writable {
            return Err(Error::ReadOnly { path: self.path.clone() });
        }
        if self.owner != std::process::id() {
            return Err(Error::invalid(&self.path, "this writer was inherited from the parent process (fork), which still owns it; open the store again"));
        }
        self.check_failed()
    }

    /// The fail-stop error once a flush's sync failed (see the module docs).
    fn check_failed(&self) -> Result<()> {
        match self.failure.get() {
            Some(why) => Err(Error::Failed {
                path: self.path.clone(),
                detail: format!(
                    "{why}; the store refuses appends, flushes, resizes and reads past row {} (the rows last flushed) \
                     until it is reopened (reopening reads what is really on disk)",
                    self.durable_rows.load(Ordering::Acquire)
                ),
            }),
            None => Ok(()),
        }
    }

    /// Fail-stop: after a failed sync the kernel may have dropped the dirty
    /// pages and marked them clean, so no later sync may count them as
    /// durable. Returns the error to report.
    fn fail(&self, what: &str, e: Error) -> Error {
        let _ = self.failure.set(format!("{what} failed ({e})"));
        e
    }

    /// Makes room for `extra` more rows past [`len`](Self::len) (allocating
    /// file blocks: a full disk fails here). Growth never moves the data.
    pub fn reserve_rows(&mut self, extra: u64) -> Result<()> {
        self.need_writer()?;
        let want = self.len().checked_add(extra).filter(|_| extra > 0);
        let Some(want) = want else { return Ok(()) };
        if want <= self.capacity() {
            return Ok(());
        }
        let rb = self.row_bytes as u64;
        let cap = self.capacity();
        let grown = cap + (cap / 2).max(self.chunk_bytes.div_ceil(rb));
        let rows = want.max(grown);
        let bytes = rows
            .checked_mul(rb)
            .and_then(|b| b.checked_add(self.data_off as u64))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| Error::invalid(&self.path, format!("{rows} rows are too many")))?;
        self.map.grow(bytes)
    }

    /// Appends whole rows (`bytes.len()` must be a multiple of
    /// [`row_bytes`](Self::row_bytes)) and publishes them. Returns the new
    /// row count.
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        self.need_writer()?;
        let n = self.whole_rows(bytes.len())?;
        if n == 0 {
            return Ok(self.len());
        }
        self.reserve_rows(n)?;
        let at = self.data_off + self.len() as usize * self.row_bytes;
        self.map.write_at(at, bytes)?;
        self.publish(self.len() + n)?;
        Ok(self.len())
    }

    /// The number of rows in `bytes` bytes, or an error unless it is a
    /// whole number of them (what [`append`](Self::append) accepts; a
    /// binding that fills rows through [`append_with`](Self::append_with)
    /// checks its input with it).
    pub fn whole_rows(&self, bytes: usize) -> Result<u64> {
        if !bytes.is_multiple_of(self.row_bytes) {
            return Err(Error::invalid(
                &self.path,
                format!("{bytes} bytes are not a whole number of {}-byte rows", self.row_bytes),
            ));
        }
        Ok((bytes / self.row_bytes) as u64)
    }

    /// Appends `n` rows written in place by `fill`, which gets the rows'
    /// bytes (zeroed or stale: unpublished capacity) to fill; they are
    /// published only after it returns Ok. No rows: `fill` is not called.
    pub fn append_with<E>(
        &mut self,
        n: u64,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    ) -> Result<std::result::Result<u64, E>> {
        self.need_writer()?;
        if n == 0 {
            return Ok(Ok(self.len()));
        }
        self.reserve_rows(n)?;
        let at = self.data_off + self.len() as usize * self.row_bytes;
        let len = n as usize * self.row_bytes;
        let slice = self.map.as_mut_slice()?;
        if let Err(e) = fill(&mut slice[at..at + len]) {
            return Ok(Err(e));
        }
        self.map.check()?;
        self.publish(self.len() + n)?;
        Ok(Ok(self.len()))
    }

    /// Writers: cuts the published row count back to `rows` (at most
    /// [`len`](Self::len)) and flushes, for a caller whose own commit
    /// record (e.g. a feature store's metadata) counts fewer rows than a
    /// writer that died left published. The cut rows become capacity that
    /// the next append overwrites. Readers that already saw them get a
    /// [`Error::Format`] from [`refresh`](Self::refresh) ("the row count
    /// went down") and must open the store again.
    pub fn truncate_rows(&mut self, rows: u64) -> Result<()> {
        self.need_writer()?;
        if rows > self.len() {
            return Err(Error::invalid(
                &self.path,
                format!("cannot truncate to {rows} rows: the store has {}", self.len()),
            ));
        }
        if rows == self.len() {
            return Ok(());
        }
        self.publish(rows)?;
        self.flush()
    }

    /// Rewrites the header's row count in place. The low 8 bytes of the
    /// count field go first, with one atomic store; the digits above them
    /// change only when the count crosses a multiple of 10^8, and are
    /// written after, so a reader racing with that rare update sees a
    /// count no larger than the new one (or, numpy, for an instant, a
    /// header it cannot parse), never rows that were not written.
    fn publish(&mut self, rows: u64) -> Result<()> {
        let mut h = self.header.clone();
        h.shape[0] = rows;
        let (bytes, field) = h.encode_growable(self.data_off)?;
        debug_assert_eq!(field, self.field);
        if self.header_dirty {
            // Readers may see this whole-header write torn for an instant;
            // it happens once per handle, on the first append.
            self.map
                .file()
                .write_all_at(&bytes, 0)
                .map_err(|e| Error::io(&self.path, "write", e))?;
            self.header_dirty = false;
            self.header = h;
            return Ok(());
        }
        let word = field.end - 8;
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[word..field.end]);
        self.map.store_word(word, w)?;
        let high = field.start..word;
        if self.map.as_slice()[high.clone()] != bytes[high.clone()] {
            self.map.write_at(high.start, &bytes[high])?;
        }
        self.header = h;
        Ok(())
    }

    /// Makes everything published so far durable: syncs the data pages
    /// past the header's page first, then the header's page (which also
    /// holds the first rows), then records the count in the durable-rows
    /// record. Between flushes the header's new count is in the page cache
    /// (other processes must see it) and may reach the disk before the
    /// rows; after a power loss the record limits the store to the rows
    /// flushed (see the module docs).
    pub fn flush(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.check_failed()?;
        let rows = self.len();
        let end = self.data_off + rows as usize * self.row_bytes;
        let page = crate::map::page_size().max(self.data_off);
        if end > page {
            self.map
                .flush_range(page, end - page, true)
                .map_err(|e| self.fail("flush (msync of the data)", e))?;
        }
        self.map
            .flush_range(0, end.min(page), true)
            .map_err(|e| self.fail("flush (msync of the header)", e))?;
        if let Some(d) = &self.durable {
            let fp = self.fingerprint(rows)?;
            d.update(rows, fp)
                .map_err(|e| self.fail("flush (sync of the durable-rows record)", e))?;
        }
        self.durable_rows.store(rows, Ordering::Release);
        Ok(())
    }

    /// Makes everything published so far durable, for a caller that keeps
    /// its own commit record ([`StoreOptions::durable_record`] off): one
    /// `msync(MS_SYNC)` over the header and the rows, in any order, since
    /// the caller commits only after it returns. With the record kept,
    /// this is [`flush`](Self::flush). Fail-stop as `flush`.
    pub fn sync(&self) -> Result<()> {
        if self.durable.is_some() || !self.writable {
            return self.flush();
        }
        self.check_failed()?;
        let rows = self.len();
        let end = self.data_off + rows as usize * self.row_bytes;
        self.map.flush_range(0, end, true).map_err(|e| self.fail("sync (msync)", e))?;
        self.durable_rows.store(rows, Ordering::Release);
        Ok(())
    }

    fn fingerprint(&self, rows: u64) -> Result<u32> {
        durable::fingerprint(
            self.map.file(),
            &self.path,
            &self.header,
            self.data_off,
            self.row_bytes,
            rows,
        )
    }

    /// Writers, on open: a header counting rows past the durable-rows
    /// record of an earlier boot is cut back to the record (a power loss
    /// may have lost them; see `durable`); rows a writer that died in this
    /// boot left are made durable; then the record is (re)created.
    fn start_durable(&mut self, existing: bool) -> Result<()> {
        let rec = durable::path_of(&self.path);
        if !self.use_record {
            // Left by a writer that kept one: it would hold readers that
            // consult it to its count.
            crate::fs::remove_file_durably(&rec)?;
            return Ok(());
        }
        if existing {
            if let Some(r) = durable::read(&rec)? {
                if !r.this_boot
                    && r.rows < self.len()
                    && r.fingerprint == self.fingerprint(r.rows)?
                {
                    self.publish(r.rows)?;
                }
                self.flush()?;
            }
        }
        self.durable = Durable::create(&rec, self.len(), self.fingerprint(self.len())?)?;
        Ok(())
    }

    /// Gives the reserved capacity back to the file system (the file ends
    /// right after the last row, as `np.save` would write it, or where it
    /// ended when opened if that is further: bytes that were there before
    /// are not ours to drop). The store stays usable; the next append
    /// reserves again.
    pub fn trim(&mut self) -> Result<()> {
        self.need_writer()?;
        let end = (self.data_off + self.len() as usize * self.row_bytes).max(self.keep_len);
        if self.map.len() > end {
            self.map.resize(end)?;
        }
        Ok(())
    }

    /// Ends writing: trims ([`trim`](Self::trim)) and flushes, then the
    /// handle is read-only (its data stays mapped for existing views).
    /// Readers and a forked child's inherited copy of a writer: nothing
    /// to do. After a failed flush: [`Error::Failed`], nothing written.
    ///
    /// The writer lock goes with it, even while views keep the data mapped,
    /// so the store can be opened for writing again at once.
    pub fn release(&mut self) -> Result<()> {
        if !(self.writable && self.owner == std::process::id()) {
            self.writable = false;
            return Ok(());
        }
        let r = if self.failure.get().is_some() {
            // No trim, no flush, and the durable-rows record stays: it is
            // what a later boot may trust.
            self.durable = None;
            self.check_failed()
        } else {
            self.trim().and_then(|()| self.flush()).and_then(|()| match self.durable.take() {
                Some(d) => d.remove(),
                None => Ok(()),
            })
        };
        if r.is_err() && self.failure.get().is_none() {
            return r; // still the writer: the caller may retry
        }
        self.writable = false;
        if let Some(id) = file_id(self.map.file()) {
            held_here().retain(|h| *h != id);
        }
        self.map.file().unlock().map_err(|e| Error::io(&self.path, "unlock", e))?;
        r
    }

    /// [`release`](Self::release)s and closes.
    pub fn close(mut self) -> Result<()> {
        self.release()
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
#[cfg(test)]
mod tests;

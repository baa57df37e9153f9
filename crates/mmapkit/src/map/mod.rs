//! Memory-mapped files that grow in place and survive truncation.
//!
//! [`Map`] is the one mapped-file type: read-only, read-write (shared,
//! write-through), copy-on-write (private) and anonymous shared memory are
//! modes of it, opened with [`Map::open`], [`Map::create`],
//! [`Map::anonymous`] or the [`MapOptions`] builder.
//!
//! # Layout: reserve, then map over the start
//!
//! Each map first reserves a range of address space (`PROT_NONE`, costs no
//! memory) and maps the file over its start with `MAP_FIXED`. Growing maps
//! more of the file right after what is mapped, so **the base address never
//! changes** and every slice handed out stays valid: [`Map::grow`] takes
//! `&self`. Only [`Map::resize`] / [`Map::refresh`] (which take `&mut self`,
//! so no slice can be alive) may shrink or move the mapping. The reserve
//! defaults to `max(1 GiB, 1.25 × length)` and is extended in place when the
//! neighbouring addresses are free.
//!
//! Offsets need not be page aligned: the map starts at the page below the
//! offset and the slice starts `offset % page` bytes into it.
//!
//! # Safety contract
//!
//! Like every mmap wrapper (see memmap2's docs), a [`Map`] hands out `&[u8]`
//! that another process may change underneath. mmapkit guarantees what it
//! can:
//!
//! * **Truncation** by another process does not crash: a `SIGBUS` handler
//!   (see the `guard` module) replaces the lost pages with zero pages.
//!   Operations that go through [`Map::read_with`] (all of mmapkit's own)
//!   then return [`Error::FileTruncated`] naming the file. Readers of raw
//!   pointers or of slices/numpy views taken earlier see **zero bytes** where
//!   the lost pages were, and no signal; the next mmapkit operation on the
//!   map reports the truncation, until [`Map::refresh`] re-syncs with the
//!   file.
//! * **Disk full**: extending a file allocates its blocks with `fallocate`
//!   before they are mapped, so a full disk is an [`Error::DiskFull`] from
//!   [`Map::grow`], never a `SIGBUS` on a later write.
//! * **Concurrent writes** by other processes are not prevented: bytes may
//!   change while you read them (torn reads of plain bytes). Use advisory
//!   locks or an append-only protocol when that matters.

mod fresh;
mod guard;
mod share;
mod shmem;

pub use fresh::{filled_words, Filler};
pub use guard::GuardStats;
pub use share::{AppendMap, SharedMap};
pub use shmem::{copy_from_view, load_from_view, store_to_view};

/// How many mappings the `SIGBUS` guard protects, can protect, and had to
/// leave unprotected because its table was full (see [`Map::is_protected`]).
pub fn guard_stats() -> GuardStats {
    guard::stats()
}

/// Puts the `SIGBUS` guard's handler back in front of a handler installed
/// after it (Python's `faulthandler.enable()`, PyTorch's DataLoader
/// workers, a JVM), which then gets every `SIGBUS` that is not a truncated
/// mmapkit mapping's. Returns whether it had to; a no-op before the first
/// map. Without it, a later handler that restores ours and re-raises
/// (`faulthandler`) still ends in zeros (see the guard's docs), one that
/// resets to the default action and re-raises (PyTorch's) kills.
pub fn guard_on_top() -> bool {
    guard::on_top()
}

/// Tells the guard that the handler [`guard_on_top`] last went in front
/// of has removed itself (`faulthandler.disable()`): signals that are not
/// the guard's go on to the handler before it again.
pub fn guard_below_removed() {
    guard::below_removed()
}

use std::fs::File;
use std::mem::MaybeUninit;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use libc::c_int;

use crate::sys;

pub use sys::{bound_malloc_retention, page_size, sigpipe_ignored_at_start, stdio_closed_at_start};
pub(crate) use sys::{
    fadvise_sequential, free_descriptors, fs_type, pread_full, read_full, retry_eintr,
    retry_emfile, seek_hole, start_writeback, thread_blocks_read,
};

use crate::{Error, Result};

/// How a file is mapped.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Mode {
    /// Read-only, shared with the file.
    Read,
    /// Read-write, shared: writes reach the file (write-through).
    ReadWrite,
    /// Private copy-on-write: writes stay in this process, never reach the file.
    CopyOnWrite,
}

crate::named_enum!(Mode, "map mode", {
    Read => "read",
    ReadWrite => "write",
    CopyOnWrite => "copy",
});

/// Access-pattern advice for [`Map::advise`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Advice {
    /// No special treatment.
    Normal,
    /// Expect sequential reads: aggressive read-ahead, early reclaim.
    Sequential,
    /// Expect random access: no read-ahead.
    Random,
    /// Start reading these pages in now.
    WillNeed,
    /// Drop these pages from this process (shared data stays in the page
    /// cache). Through `&self` ([`Map::advise`]) only for maps without
    /// private changes (shared, or not writable): on a writable private
    /// (copy-on-write) map it would discard changes under live slices, so
    /// it is refused there; use [`Map::discard`] (`&mut self`) instead.
    DontNeed,
    /// Back with transparent huge pages where possible.
    HugePage,
    /// Never back with transparent huge pages.
    NoHugePage,
    /// Fault the pages in for reading now (`MADV_POPULATE_READ`).
    PopulateRead,
    /// Fault the pages in for writing now (`MADV_POPULATE_WRITE`; breaks
    /// copy-on-write sharing, keeps the contents).
    PopulateWrite,
}

impl Advice {
    fn raw(self) -> c_int {
        match self {
            Advice::Normal => libc::MADV_NORMAL,
            Advice::Sequential => libc::MADV_SEQUENTIAL,
            Advice::Random => libc::MADV_RANDOM,
            Advice::WillNeed => libc::MADV_WILLNEED,
            Advice::DontNeed => libc::MADV_DONTNEED,
            Advice::HugePage => libc::MADV_HUGEPAGE,
            Advice::NoHugePage => libc::MADV_NOHUGEPAGE,
            Advice::PopulateRead => libc::MADV_POPULATE_READ,
            Advice::PopulateWrite => libc::MADV_POPULATE_WRITE,
        }
    }
}

crate::named_enum!(Advice, "advice", {
    Normal => "normal",
    Sequential => "sequential",
    Random => "random",
    WillNeed => "willneed",
    DontNeed => "dontneed",
    HugePage => "hugepage",
    NoHugePage => "nohugepage",
    PopulateRead => "populate_read",
    PopulateWrite => "populate_write",
});

/// How much of a mapping is in the page cache ([`Map::residency`]).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency {
    /// Bytes of the mapped range whose pages are resident (page granular,
    /// capped at `mapped_bytes`).
    pub resident_bytes: u64,
    /// Bytes of the mapped range.
    pub mapped_bytes: u64,
}

const DEFAULT_RESERVE: usize = 1 << 30;
/// From this size on, `read_into` copies with pread (see there).
const PREAD_MIN: usize = 256 << 10;

/// Builder setters: `name(T) -> field [as Some]` writes
/// `pub fn name(&mut self, v: T) -> &mut Self` storing `v` (or `Some(v)`).
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($t:ty) -> $field:ident $(as $wrap:ident)?;)*) => {$(
        $(#[$doc])*
        pub fn $name(&mut self, v: $t) -> &mut Self {
            self.$field = $($wrap)?(v);
            self
        }
    )*};
}

/// Builder for [`Map`]s with every option. Its fields are private and its
/// setters take `&mut self` (like `std::fs::OpenOptions`: the builder is
/// kept and reused for several maps), so adding an option never breaks
/// callers.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct MapOptions {
    mode: Mode,
    offset: u64,
    len: Option<usize>,
    reserve: Option<usize>,
    prot: Option<c_int>,
    shared: Option<bool>,
    create: bool,
    truncate: bool,
    size: Option<u64>,
}

impl Default for MapOptions {
    fn default() -> Self {
        Self::new()
    }
}

impl MapOptions {
    /// Read-only, whole file, default reserve.
    pub fn new() -> Self {
        MapOptions {
            mode: Mode::Read,
            offset: 0,
            len: None,
            reserve: None,
            prot: None,
            shared: None,
            create: false,
            truncate: false,
            size: None,
        }
    }
    setters! {
        /// The mapping mode.
        mode(Mode) -> mode;
        /// Byte offset in the file where the mapping starts (any value).
        offset(u64) -> offset;
        /// Bytes to map; default: from `offset` to the end of the file.
        len(usize) -> len as Some;
        /// Address space to reserve for growth in place.
        reserve(usize) -> reserve as Some;
        /// Force `MAP_SHARED` (true) or `MAP_PRIVATE` (false) regardless of mode.
        shared(bool) -> shared as Some;
        /// With [`Mode::ReadWrite`]: create the file if missing.
        create(bool) -> create;
        /// With [`Mode::ReadWrite`]: empty the file first.
        truncate(bool) -> truncate;
        /// With [`Mode::ReadWrite`]: make the file at least `size` bytes
        /// (allocated, so a full disk fails here and not later).
        size(u64) -> size as Some;
    }

    /// Raw `PROT_*` bits overriding the mode's, any value (`PROT_NONE`
    /// guards, write-only, ...). For a checked subset see
    /// [`MapOptions::checked_protection`].
    ///
    /// ```compile_fail,E0133
    /// // Not from safe code: a PROT_NONE map's slice would fault (UB).
    /// let m = mmapkit::map::MapOptions::new().protection(0).anonymous(8).unwrap();
    /// let _ = m.as_slice()[0];
    /// ```
    ///
    /// # Safety
    /// Every safe method of the map (and of a [`SharedMap`] or
    /// [`AppendMap`] made from it) assumes its bytes are readable, and
    /// writable when `PROT_WRITE` is set: the caller must not call any
    /// method that reads the bytes (`as_slice`, `read_*`, searches, ...)
    /// unless `prot` includes `PROT_READ`.
    pub unsafe fn protection(&mut self, prot: i32) -> &mut Self {
        self.prot = Some(prot);
        self
    }

    /// `PROT_*` bits overriding the mode's, for mmap(2)-compatible
    /// callers: any combination of `PROT_READ`, `PROT_WRITE` and
    /// `PROT_EXEC` (other bits are an [`Error::InvalidArgument`]). A map
    /// without `PROT_READ` (a `PROT_NONE` guard, ...) is never read by
    /// mmapkit: its reads and searches fail with `EACCES`, and
    /// [`Map::as_slice`] / [`AppendMap::sealed_slice`] panic.
    pub fn checked_protection(&mut self, prot: i32) -> Result<&mut Self> {
        let known = libc::PROT_READ | libc::PROT_WRITE | libc::PROT_EXEC;
        if prot & !known != 0 {
            return Err(Error::InvalidArgument(format!(
                "protection {prot:#x} has bits other than PROT_READ, PROT_WRITE and PROT_EXEC"
            )));
        }
        self.prot = Some(prot);
        Ok(self)
    }

    /// Opens `path` and maps it.
    pub fn open(&self, path: impl AsRef<Path>) -> Result<Map> {
        let path = path.as_ref();
        let writable = self.mode == Mode::ReadWrite;
        use crate::fs::InPlace;
        let how = match (writable, self.create, self.truncate) {
            (false, ..) => InPlace::Read,
            (true, true, true) => InPlace::Truncate,
            (true, true, false) => InPlace::Create,
            (true, false, _) => InPlace::Write,
        };
        let file = crate::fs::open_in_place(path, how)?;
        let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
        if meta.is_dir() {
            return Err(Error::io(path, "map", std::io::Error::from_raw_os_error(libc::EISDIR)));
        }
        {
            use std::os::unix::fs::FileTypeExt;
            let t = meta.file_type();
            if t.is_fifo() || t.is_socket() {
                let what = if t.is_fifo() { "a FIFO" } else { "a socket" };
                return Err(Error::not_a_file(
                    path,
                    format!("is {what}, not a regular file (it cannot be mapped)"),
                ));
            }
        }
        if let Some(size) = self.size {
            if !writable {
                return Err(Error::invalid(path, "size= needs a writable mode"));
            }
            if meta.len() < size {
                sys::allocate(&file, meta.len(), size - meta.len())
                    .map_err(|e| disk_err(path, size, e))?;
            }
        }
        self.map_file(file, Label::known(path.to_owned()), false)
    }

    /// Maps an already open file; `label` names it in errors.
    pub fn map(&self, file: File, label: impl Into<PathBuf>) -> Result<Map> {
        self.map_file(file, Label::known(label.into()), false)
    }

    /// Maps an already open file named in errors by its path, looked up
    /// (`/proc/self/fd`) only when first needed, or `<fd {fd}>` when it
    /// has none: the lookup costs more than the rest of a small map, and
    /// most maps never report an error. `meta` is the caller's fresh
    /// `fstat` of `file` (saves a second one).
    pub fn map_fd(&self, file: File, fd: i32, meta: std::fs::Metadata) -> Result<Map> {
        let label = Label { path: OnceLock::new(), fd: file.as_raw_fd(), shown_fd: fd };
        self.map_meta(file, label, false, Some(meta))
    }

    /// [`MapOptions::map`] with the caller's fresh `fstat` of `file` (saves a second one).
    pub(crate) fn map_with_meta(
        &self,
        file: File,
        label: &Path,
        meta: std::fs::Metadata,
    ) -> Result<Map> {
        self.map_meta(file, Label::known(label.to_owned()), false, Some(meta))
    }

    /// Anonymous memory of `len` bytes (backed by a memfd so it can grow);
    /// shared with children forked later unless `shared(false)`.
    pub fn anonymous(&self, len: usize) -> Result<Map> {
        let label = PathBuf::from("<anonymous>");
        let file = sys::memfd(c"mmapkit").map_err(|e| Error::io(&label, "memfd_create", e))?;
        file.set_len(len as u64).map_err(|e| Error::io(&label, "ftruncate", e))?;
        let mut opts = self.clone();
        opts.mode = Mode::ReadWrite;
        opts.offset = 0;
        opts.len = Some(len);
        opts.map_file(file, Label::known(label), true)
    }

    fn map_file(&self, file: File, path: Label, anonymous: bool) -> Result<Map> {
        self.map_meta(file, path, anonymous, None)
    }

    fn map_meta(
        &self,
        file: File,
        path: Label,
        anonymous: bool,
        meta: Option<std::fs::Metadata>,
    ) -> Result<Map> {
        let page = page_size();
        let meta = match meta {
            Some(m) => m,
            None => file.metadata().map_err(|e| Error::io(&path, "stat", e))?,
        };
        let file_len = meta.len();
        let regular = meta.file_type().is_file();
        let len = match self.len {
            Some(n) => n,
            None if !regular => {
                return Err(Error::not_a_file(&path, "not a regular file; give the length to map"))
            }
            None => {
                if self.offset > file_len {
                    return Err(Error::invalid(
                        &path,
                        format!(
                            "offset {} is past the end of the file ({} bytes)",
                            self.offset, file_len
                        ),
                    ));
                }
                usize::try_from(file_len - self.offset)
                    .map_err(|_| Error::invalid(&path, "file too large to map"))?
            }
        };
        let end = self
            .offset
            .checked_add(len as u64)
            .ok_or_else(|| Error::invalid(&path, "offset + length overflows"))?;
        if regular && end > file_len {
            return Err(Error::invalid(
                &path,
                format!(
                    "cannot map {} bytes at offset {}: the file has only {} bytes",
                    len, self.offset, file_len
                ),
            ));
        }
        let shared = self.shared.unwrap_or(self.mode != Mode::CopyOnWrite);
        let prot = self.prot.unwrap_or(match self.mode {
            Mode::Read => libc::PROT_READ,
            Mode::ReadWrite | Mode::CopyOnWrite => libc::PROT_READ | libc::PROT_WRITE,
        });
        // A private map is charged for the pages it writes, not up front: a
        // copy-on-write map of a file larger than free memory must work.
        let flags = if shared { libc::MAP_SHARED } else { libc::MAP_PRIVATE | libc::MAP_NORESERVE };
        let aligned = self.offset & !(page as u64 - 1);
        let delta = (self.offset - aligned) as usize;
        let need = sys::round_up(delta + len);
        let want_reserve =
            self.reserve.unwrap_or_else(|| DEFAULT_RESERVE.max(need.saturating_add(need / 4)));
        let reserved = sys::round_up(want_reserve.max(need).max(page));
        // No room to grow asked for: one mmap where the kernel likes, half
        // the system calls of reserve + MAP_FIXED (growth still extends in
        // place when the next addresses happen to be free).
        let direct = reserved == need;
        let base = if direct {
            sys::map_anywhere(need, prot, flags, file.as_raw_fd(), aligned)
                .map_err(|e| Error::io(&path, "mmap", e))?
        } else {
            sys::reserve(reserved).map_err(|e| Error::io(&path, "mmap (reserve)", e))?
        };
        let mut map = Map {
            base,
            reserved: AtomicUsize::new(reserved),
            mapped: AtomicUsize::new(0),
            len: AtomicUsize::new(0),
            delta,
            offset: self.offset,
            aligned,
            prot,
            flags,
            mode: self.mode,
            anonymous,
            file,
            path,
            slot: None,
            resize: Mutex::new(()),
        };
        if need > 0 && !direct {
            // SAFETY: [base, base+need) is inside our fresh reservation.
            unsafe { sys::map_fixed(base, need, prot, flags, map.file.as_raw_fd(), aligned) }
                .map_err(|e| Error::io(&map.path, "mmap", e))?;
        }
        map.mapped.store(need, Ordering::Release);
        map.len.store(len, Ordering::Release);
        map.slot = guard::Slot::register(
            base as usize,
            base as usize + need,
            prot,
            map.file.as_raw_fd(),
            aligned,
        );
        Ok(map)
    }
}

fn disk_err(path: &Path, size: u64, e: std::io::Error) -> Error {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) | Some(libc::EFBIG) => {
            Error::DiskFull { path: path.to_owned(), size }
        }
        _ => Error::io(path, "fallocate", e),
    }
}

/// What errors call a map's file: a known path, or the path behind its
/// descriptor looked up on first use (see [`MapOptions::map_fd`]).
struct Label {
    path: OnceLock<PathBuf>,
    /// Our descriptor (owned by the map's `file`, open as long as it).
    fd: c_int,
    /// The caller's descriptor, for `<fd N>` when there is no path.
    shown_fd: i32,
}

impl Label {
    fn known(path: PathBuf) -> Label {
        Label { path: OnceLock::from(path), fd: -1, shown_fd: -1 }
    }
}

impl std::ops::Deref for Label {
    type Target = PathBuf;
    fn deref(&self) -> &PathBuf {
        self.path.get_or_init(|| {
            fd_path(self.fd).unwrap_or_else(|| PathBuf::from(format!("<fd {}>", self.shown_fd)))
        })
    }
}

/// A memory-mapped file (or anonymous memory); see the [module docs](self).
pub struct Map {
    base: *mut u8,
    reserved: AtomicUsize,
    /// Bytes from `base` backed by the file (a page multiple).
    mapped: AtomicUsize,
    len: AtomicUsize,
    delta: usize,
    offset: u64,
    aligned: u64,
    prot: c_int,
    flags: c_int,
    mode: Mode,
    anonymous: bool,
    file: File,
    path: Label,
    slot: Option<guard::Slot>,
    resize: Mutex<()>,
}

// SAFETY: the mapping is plain memory owned by this value; the fields that
// change through `&self` (`grow`) are atomics serialised by `resize`.
unsafe impl Send for Map {}
// SAFETY: as above; `&Map` only reads memory or grows it past `len`.
unsafe impl Sync for Map {}

impl std::fmt::Debug for Map {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Map")
            .field("path", &*self.path)
            .field("mode", &self.mode)
            .field("offset", &self.offset)
            .field("len", &self.len())
            .field("reserved", &self.reserved())
            .finish()
    }
}

impl Map {
    /// Maps the whole of `path` (an empty file gives an empty map).
    pub fn open(path: impl AsRef<Path>, mode: Mode) -> Result<Map> {
        MapOptions::new().mode(mode).open(path)
    }

    /// Creates (or truncates) `path` with `size` allocated bytes and maps it read-write.
    pub fn create(path: impl AsRef<Path>, size: u64) -> Result<Map> {
        MapOptions::new().mode(Mode::ReadWrite).create(true).truncate(true).size(size).open(path)
    }

    /// Anonymous shared memory of `len` bytes, zero filled, visible to
    /// children forked later.
    pub fn anonymous(len: usize) -> Result<Map> {
        MapOptions::new().anonymous(len)
    }

    /// A builder with every option.
    pub fn options() -> MapOptions {
        MapOptions::new()
    }

    // ----- accessors ------------------------------------------------------

    /// Mapped bytes.
    pub fn len(&self) -> usize {
        self.len.load(Ordering::Acquire)
    }
    /// Whether the map has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The file's path, or `<anonymous>`.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The mode it was opened with.
    pub fn mode(&self) -> Mode {
        self.mode
    }
    /// File offset of byte 0 of the map.
    pub fn offset(&self) -> u64 {
        self.offset
    }
    /// Address space reserved for growth in place, from the page below `offset`.
    pub fn reserved(&self) -> usize {
        self.reserved.load(Ordering::Acquire)
    }
    /// Whether writes through the map are allowed.
    pub fn is_writable(&self) -> bool {
        self.prot & libc::PROT_WRITE != 0
    }
    /// Whether mmapkit reads the bytes (the map has `PROT_READ`; see
    /// [`MapOptions::checked_protection`]).
    pub fn is_readable(&self) -> bool {
        self.prot & libc::PROT_READ != 0
    }
    /// Err(`EACCES`) for a map without `PROT_READ`: its bytes are never
    /// read (the access would fault).
    fn readable(&self) -> Result<()> {
        if self.is_readable() {
            return Ok(());
        }
        Err(self.err("read", std::io::Error::from_raw_os_error(libc::EACCES)))
    }
    /// Whether the mapping is shared (writes reach the file / other processes).
    pub fn is_shared(&self) -> bool {
        self.flags & libc::MAP_SHARED != 0
    }
    /// Whether this is anonymous memory.
    pub fn is_anonymous(&self) -> bool {
        self.anonymous
    }
    /// Whether a truncation of the file by another process is turned into
    /// an error (zero pages + [`Error::FileTruncated`]). False only when
    /// the guard's table was full when the map was made ([`guard_stats`]).
    pub fn is_protected(&self) -> bool {
        self.slot.is_some()
    }
    /// The underlying file (a memfd for anonymous maps).
    pub fn file(&self) -> &File {
        &self.file
    }
    /// Current size of the underlying file.
    pub fn file_len(&self) -> Result<u64> {
        Ok(self.file.metadata().map_err(|e| self.err("stat", e))?.len())
    }

    fn data(&self) -> *mut u8 {
        // `delta` < page size and the first page is always reserved.
        self.base.wrapping_add(self.delta)
    }

    /// Pointer to byte 0. Stays the same for the life of the map unless
    /// [`Map::resize`] or [`Map::refresh`] has to move it.
    pub fn as_ptr(&self) -> *const u8 {
        self.data()
    }

    /// Mutable pointer to byte 0, for bindings that manage aliasing
    /// themselves (Python buffers, parallel record writers).
    ///
    /// # Safety
    /// Writing requires a writable map, offsets below [`Map::len`], and no
    /// concurrent access to the same bytes through any other pointer or
    /// slice.
    pub unsafe fn as_mut_ptr(&self) -> *mut u8 {
        self.data()
    }

    /// The mapped bytes. They may read as zeros if the file was truncated
    /// (see the module docs); prefer [`Map::read_with`], which reports it.
    ///
    /// # Panics
    /// If the map was made without `PROT_READ`
    /// ([`MapOptions::checked_protection`]).
    pub fn as_slice(&self) -> &[u8] {
        assert!(self.is_readable(), "{}: mapped without PROT_READ", self.path.display());
        // SAFETY: [data, data+len) is mapped for as long as `self` is
        // borrowed: only `&mut self` methods shrink or move the mapping.
        unsafe { std::slice::from_raw_parts(self.data(), self.len()) }
    }

    /// `[start, end)` of the mapped bytes (in bounds), without making a
    /// reference to any byte outside it.
    ///
    /// # Safety
    /// Nothing may write `[start, end)` while the slice lives (`AppendMap`
    /// writes only past its sealed prefix).
    unsafe fn slice_of(&self, start: usize, end: usize) -> &[u8] {
        assert!(start <= end && end <= self.len(), "slice {start}..{end} of {} bytes", self.len());
        assert!(self.is_readable(), "{}: mapped without PROT_READ", self.path.display());
        // SAFETY: in bounds of a mapping that stays mapped while `self` is
        // borrowed (only `&mut self` shrinks or moves it); unwritten while
        // the slice lives (caller).
        unsafe { std::slice::from_raw_parts(self.data().add(start), end - start) }
    }

    /// The mapped bytes, writable.
    pub fn as_mut_slice(&mut self) -> Result<&mut [u8]> {
        if !self.is_writable() {
            return Err(Error::ReadOnly { path: self.path.clone() });
        }
        self.readable()?;
        // SAFETY: writable mapping of `len` bytes, borrowed exclusively.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.data(), self.len()) })
    }

    /// Runs `f` over the mapped bytes and reports a truncation of the file
    /// that happened before or during it as [`Error::FileTruncated`].
    pub fn read_with<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        let r = self.read_faulted(f)?;
        self.check_tail(0, self.len())?;
        Ok(r)
    }

    /// [`read_with`](Self::read_with) that reports only the pages the
    /// guard saw lost, for a caller that checks the file's length itself
    /// (a store's gather: its map's tail is zeroed capacity, which would
    /// cost every call an `fstat` here).
    pub(crate) fn read_faulted<R>(&self, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.readable()?;
        self.check()?;
        let r = f(self.as_slice());
        self.check()?;
        Ok(r)
    }

    /// After a read of `[offset, offset+len)`: [`check`](Self::check), and
    /// where a cut may hide in the range's last page
    /// ([`cut_may_end`](Self::cut_may_end)), whether the file still holds
    /// the range ([`check_covered`](Self::check_covered)). A truncation
    /// inside a page leaves the rest of that page mapped, reading as zeros
    /// without a fault; those zeros always end the range read, so a read
    /// that ends in anything else needs no `fstat`.
    fn check_tail(&self, offset: usize, len: usize) -> Result<()> {
        if self.cut_may_end(offset + len) {
            return self.check_covered(offset, len);
        }
        self.check()
    }

    /// Err([`Error::FileTruncated`]) if pages of this map were lost to a
    /// truncation since it was mapped (or last refreshed).
    pub fn check(&self) -> Result<()> {
        match &self.slot {
            Some(s) if s.faults() > 0 => Err(Error::FileTruncated { path: self.path.clone() }),
            _ => Ok(()),
        }
    }

    /// [`check`](Self::check), and Err([`Error::FileTruncated`]) if the
    /// file (a regular file) no longer holds bytes `[offset, offset+len)`
    /// of the map: another process shortened it, so what is there (or was
    /// written there) is in no file, even where no page has faulted yet.
    /// One `fstat`: what every write-back, growth and commit checks before
    /// it reports success.
    pub fn check_covered(&self, offset: usize, len: usize) -> Result<()> {
        self.check()?;
        let meta = self.file.metadata().map_err(|e| self.err("stat", e))?;
        let want = self.offset.saturating_add(offset.saturating_add(len) as u64);
        if meta.file_type().is_file() && meta.len() < want {
            return Err(Error::FileTruncated { path: self.path.clone() });
        }
        Ok(())
    }

    /// Copies `buf.len()` bytes at `offset` into `buf`.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        // SAFETY: viewing initialised bytes as MaybeUninit is always sound,
        // and read_into only ever writes initialised bytes.
        let uninit = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.read_into(offset, uninit)
    }

    /// Copies `buf.len()` bytes at `offset` into a possibly uninitialised
    /// buffer (fully initialised on `Ok`), choosing the faster copy:
    /// large copies out of a shared file mapping use `pread` from the same
    /// page cache (the kernel fills a fresh destination ~15% faster than
    /// memcpy page-faulting through both mappings; measured by
    /// `examples/copy_strategies.rs`), small ones use memcpy.
    pub fn read_into(&self, offset: usize, buf: &mut [MaybeUninit<u8>]) -> Result<()> {
        self.copy_out(offset, buf, false)
    }

    /// `read_into` for maps written through `&self` ([`SharedMap`],
    /// [`AppendMap`]): the copy loads the mapped bytes atomically (see
    /// the `shmem` module), so it may race with those writes, and never
    /// makes a `&[u8]` over them.
    fn raw_read_into(&self, offset: usize, buf: &mut [MaybeUninit<u8>]) -> Result<()> {
        self.copy_out(offset, buf, self.is_writable())
    }

    /// `raw_read_into` into initialised bytes.
    fn raw_read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        // SAFETY: viewing initialised bytes as MaybeUninit is always sound,
        // and the copy only ever writes initialised bytes.
        let uninit = unsafe { &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>]) };
        self.raw_read_into(offset, uninit)
    }

    fn copy_out(&self, offset: usize, buf: &mut [MaybeUninit<u8>], racy: bool) -> Result<()> {
        self.bounds(offset, buf.len())?;
        self.readable()?;
        if buf.len() >= PREAD_MIN && self.is_shared() && !self.anonymous {
            self.check()?;
            let n = sys::pread_full_uninit(&self.file, buf, self.offset + offset as u64)
                .map_err(|e| self.err("pread", e))?;
            if n < buf.len() {
                return Err(Error::FileTruncated { path: self.path.clone() });
            }
            return Ok(());
        }
        self.check()?;
        let src = self.data().wrapping_add(offset);
        if racy {
            // SAFETY: in bounds of a mapping that stays mapped while `self`
            // is borrowed; `&self` writers of this map (SharedMap,
            // AppendMap) store atomically through `shmem`, and `buf` is
            // the caller's own memory.
            unsafe { shmem::load(src, buf) };
        } else {
            // SAFETY: as above; no `&self` writer can run (the map is not
            // writable, or is a plain `Map`, which writes through `&mut`),
            // so plain reads cannot race.
            unsafe { std::ptr::copy_nonoverlapping(src, buf.as_mut_ptr().cast::<u8>(), buf.len()) };
        }
        self.check_tail(offset, buf.len())
    }

    /// Writes `data` at `offset`.
    ///
    /// Takes `&mut self`: no slice of this map can be alive, so nothing
    /// safe can watch the bytes change. To write while readers hold
    /// slices or views, use [`SharedMap`] (no slices at all) or
    /// [`AppendMap`] (slices of a sealed prefix, writes only after it).
    pub fn write_at(&mut self, offset: usize, data: &[u8]) -> Result<()> {
        self.writable_range(offset, data.len())?;
        // SAFETY: in bounds of a writable mapping, borrowed exclusively
        // (`&mut self`: no slice of it is alive); `copy` allows overlap
        // with `data` should it point into this map (a raw view).
        unsafe { std::ptr::copy(data.as_ptr(), self.data().add(offset), data.len()) };
        self.check()
    }

    /// Writes the 8 bytes `bytes` at `offset` with one aligned atomic
    /// store (release ordering), so a concurrent reader of the page in
    /// another process (or through a raw view) sees either the old or the
    /// new 8 bytes and everything written before this call (used to
    /// publish row counts). `offset` must be 8-byte aligned in memory
    /// (file offsets that are multiples of 8 are, since mappings are page
    /// aligned).
    pub fn store_word(&mut self, offset: usize, bytes: [u8; 8]) -> Result<()> {
        self.raw_store_word(offset, bytes)
    }

    /// Copies `count` bytes from `src` to `dest` within the map (overlap allowed).
    pub fn copy_within(&mut self, src: usize, dest: usize, count: usize) -> Result<()> {
        self.bounds(src, count)?;
        self.readable()?;
        self.writable_range(dest, count)?;
        // SAFETY: both ranges are in bounds of a writable mapping,
        // borrowed exclusively; `copy` allows the overlap.
        unsafe { std::ptr::copy(self.data().add(src), self.data().add(dest), count) };
        self.check()
    }

    fn writable_range(&self, offset: usize, len: usize) -> Result<()> {
        if !self.is_writable() {
            return Err(Error::ReadOnly { path: self.path.clone() });
        }
        self.bounds(offset, len)?;
        self.check()
    }

    // The `&self` writers behind `SharedMap` and `AppendMap`. Private to
    // this module: `SharedMap` hands out no slices at all and reads only
    // through `raw_read_into` (atomic loads), `AppendMap` hands out slices
    // of its sealed prefix only and never writes there, and every access
    // these make is atomic (`shmem`), so concurrent calls race only in
    // the defined way (each byte is some writer's).

    fn raw_write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.writable_range(offset, data.len())?;
        // SAFETY: in bounds of a writable mapping that stays mapped while
        // `self` is borrowed; no reference covers the range (see above);
        // `data` is a reference, so it cannot be a range others write
        // (callers holding raw views copy them out first).
        unsafe { shmem::store(self.data().add(offset), data) };
        self.check()
    }

    fn raw_store_word(&self, offset: usize, bytes: [u8; 8]) -> Result<()> {
        if !self.is_writable() {
            return Err(Error::ReadOnly { path: self.path.clone() });
        }
        self.bounds(offset, 8)?;
        let ptr = self.data().wrapping_add(offset);
        if !(ptr as usize).is_multiple_of(8) {
            return Err(Error::invalid(
                &self.path,
                format!("store_word at offset {offset} is not 8-byte aligned"),
            ));
        }
        self.check()?;
        // SAFETY: in bounds of a writable mapping that stays mapped while
        // `self` is borrowed, and aligned for a u64 (checked above). Plain
        // memory shared with other processes: an atomic store is the
        // strongest guarantee we can give them.
        let word = unsafe { std::sync::atomic::AtomicU64::from_ptr(ptr.cast::<u64>()) };
        word.store(u64::from_ne_bytes(bytes), Ordering::Release);
        self.check()
    }

    fn raw_copy_within(&self, src: usize, dest: usize, count: usize) -> Result<()> {
        self.bounds(src, count)?;
        self.readable()?;
        self.writable_range(dest, count)?;
        // SAFETY: both ranges are in bounds of a writable mapping that
        // stays mapped while `self` is borrowed; through `&mut self`
        // nothing else accesses them, through `&self` (`SharedMap`) no
        // reference covers them and other accesses are atomic (see above).
        unsafe { shmem::copy(self.data().add(src), self.data().add(dest), count) };
        self.check()
    }

    fn bounds(&self, offset: usize, len: usize) -> Result<usize> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len() => Ok(end),
            _ => Err(Error::invalid(
                &self.path,
                format!(
                    "range {}..{} is outside the map of {} bytes",
                    offset,
                    offset.saturating_add(len),
                    self.len()
                ),
            )),
        }
    }

    fn err(&self, op: &'static str, e: std::io::Error) -> Error {
        Error::io(&self.path, op, e)
    }

    // ----- growth -------------------------------------------------------

    /// Grows the map to `new_len` bytes **without moving it**: every slice,
    /// pointer and view handed out stays valid. Writable shared maps extend
    /// (and allocate) the file; read-only and copy-on-write maps can grow
    /// only as far as the file already goes (e.g. after another process
    /// appended). Shrinking is [`Map::resize`]'s job; a smaller `new_len`
    /// is a no-op here.
    pub fn grow(&self, new_len: usize) -> Result<()> {
        let _g = self.resize.lock().unwrap_or_else(|e| e.into_inner());
        self.grow_locked(new_len)
    }

    fn grow_locked(&self, new_len: usize) -> Result<()> {
        self.check()?;
        let len = self.len();
        if new_len <= len {
            return Ok(());
        }
        let need = self
            .delta
            .checked_add(new_len)
            .map(sys::round_up)
            .ok_or_else(|| Error::invalid(&self.path, format!("length {new_len} too large")))?;
        let reserved = self.reserved();
        if need > reserved {
            let extra = sys::round_up((need - reserved).max(reserved / 2));
            sys::reserve_exact(self.base.wrapping_add(reserved), extra).map_err(|_| {
                Error::ReservationExhausted {
                    path: self.path.clone(),
                    reserved,
                    requested: new_len,
                }
            })?;
            self.reserved.store(reserved + extra, Ordering::Release);
        }
        self.ensure_file_len(self.offset + new_len as u64)?;
        let mapped = self.mapped.load(Ordering::Acquire);
        if need > mapped {
            // SAFETY: [base+mapped, base+need) is reserved and unborrowed:
            // slices only ever cover [data, data+len) ⊂ [base, base+mapped).
            unsafe {
                sys::map_fixed(
                    self.base.add(mapped),
                    need - mapped,
                    self.prot,
                    self.flags,
                    self.file.as_raw_fd(),
                    self.aligned + mapped as u64,
                )
            }
            .map_err(|e| self.err("mmap", e))?;
            self.mapped.store(need, Ordering::Release);
            if let Some(s) = &self.slot {
                s.set_range(self.base as usize, self.base as usize + need);
            }
        }
        self.len.store(new_len, Ordering::Release);
        Ok(())
    }

    fn ensure_file_len(&self, want: u64) -> Result<()> {
        let have = self.file_len()?;
        if have >= want {
            return Ok(());
        }
        if have < self.offset + self.len() as u64 {
            // Someone else cut the file under the map: extending it again
            // would turn the lost bytes into a hole of zeros, silently.
            return Err(Error::FileTruncated { path: self.path.clone() });
        }
        if !(self.is_writable() && (self.is_shared() || self.anonymous)) {
            return Err(Error::invalid(&self.path, format!(
                "cannot map up to byte {want}: the file has only {have} bytes and this map cannot extend it"
            )));
        }
        sys::allocate(&self.file, have, want - have).map_err(|e| disk_err(&self.path, want, e))
    }

    /// Sets the length to `new_len`, growing or shrinking. A writable
    /// shared (or anonymous) map resizes the file to `offset + new_len` as
    /// well, like Python's `mmap.resize`. May move the mapping when the
    /// reserve is exhausted (it takes `&mut self`, so nothing is borrowed).
    pub fn resize(&mut self, new_len: usize) -> Result<()> {
        let len = self.len();
        if new_len >= len {
            self.make_room(new_len)?;
            return self.grow_locked(new_len);
        }
        if !self.anonymous {
            // Shrinking a file someone else cut shorter than the new length
            // would extend it again with a hole of zeros.
            self.check_covered(0, new_len)?;
        }
        let need = sys::round_up(self.delta + new_len);
        let mapped = *self.mapped.get_mut();
        if need < mapped {
            // SAFETY: `&mut self`: nothing borrows the tail being dropped.
            unsafe { sys::unmap_to_reserve(self.base.add(need), mapped - need) }
                .map_err(|e| self.err("mmap", e))?;
            *self.mapped.get_mut() = need;
            if let Some(s) = &self.slot {
                s.set_range(self.base as usize, self.base as usize + need);
            }
        }
        *self.len.get_mut() = new_len;
        if self.is_writable() && (self.is_shared() || self.anonymous) {
            self.file
                .set_len(self.offset + new_len as u64)
                .map_err(|e| self.err("ftruncate", e))?;
        }
        Ok(())
    }

    /// Makes room for `len` bytes in the reservation: the addresses after
    /// it, or (taken) a larger reservation the mapping moves to (`&mut
    /// self`: nothing borrows it). Changes neither the length nor the file.
    pub fn make_room(&mut self, len: usize) -> Result<()> {
        let need = sys::round_up(self.delta.saturating_add(len));
        if need <= self.reserved() {
            return Ok(());
        }
        let extra = sys::round_up(need - self.reserved());
        if sys::reserve_exact(self.base.wrapping_add(self.reserved()), extra).is_ok() {
            *self.reserved.get_mut() += extra;
            return Ok(());
        }
        self.relocate(DEFAULT_RESERVE.max(need.saturating_add(need / 4)))
    }

    fn relocate(&mut self, reserve: usize) -> Result<()> {
        let reserve = sys::round_up(reserve);
        let new = sys::reserve(reserve).map_err(|e| self.err("mmap (reserve)", e))?;
        let mapped = *self.mapped.get_mut();
        if mapped > 0 {
            // SAFETY: `&mut self`: no borrow of the old range exists; the
            // new range is our fresh reservation.
            if let Err(e) = unsafe { sys::move_pages(self.base, mapped, new) } {
                // SAFETY: the fresh reservation is unused.
                unsafe { sys::release(new, reserve) };
                return Err(self.err("mremap", e));
            }
        }
        // SAFETY: the old reservation's pages have moved; nothing refers to it.
        unsafe { sys::release(self.base, self.reserved()) };
        self.base = new;
        *self.reserved.get_mut() = reserve;
        if let Some(s) = &self.slot {
            s.set_range(new as usize, new as usize + mapped);
        }
        Ok(())
    }

    /// Re-synchronises with the file after another process changed its
    /// size: remaps every page from the file (discarding zero pages put in
    /// by a truncation, and private copy-on-write changes), and, when the
    /// map was made to reach the end of the file, follows the file's new
    /// length. Returns the new length.
    pub fn refresh(&mut self, to_end: bool) -> Result<usize> {
        if self.anonymous {
            return Ok(self.len());
        }
        let file_len = self.file_len()?;
        let avail = file_len.saturating_sub(self.offset) as usize;
        let new_len = if to_end { avail } else { self.len().min(avail) };
        let need = sys::round_up(self.delta + new_len);
        let mapped = *self.mapped.get_mut();
        if need < mapped {
            // SAFETY: `&mut self`: nothing borrows the range.
            unsafe { sys::unmap_to_reserve(self.base.add(need), mapped - need) }
                .map_err(|e| self.err("mmap", e))?;
        }
        let keep = need.min(mapped);
        if keep > 0 {
            // SAFETY: as above; remapping the file over its own range.
            unsafe {
                sys::map_fixed(
                    self.base,
                    keep,
                    self.prot,
                    self.flags,
                    self.file.as_raw_fd(),
                    self.aligned,
                )
            }
            .map_err(|e| self.err("mmap", e))?;
        }
        *self.mapped.get_mut() = keep;
        *self.len.get_mut() = new_len.min(keep.saturating_sub(self.delta));
        if let Some(s) = &self.slot {
            s.set_range(self.base as usize, self.base as usize + keep);
            s.clear_faults();
        }
        if new_len > self.len() {
            self.resize(new_len)?;
        }
        Ok(self.len())
    }

    /// `refresh` through `&self`, for maps that hand out no slices
    /// ([`SharedMap`]): the file is mapped again over the same addresses
    /// (views keep their address; pages a truncation replaced with zeros
    /// show the file again), pages now past the end of the file become
    /// zero pages instead of being unmapped, and the length follows the
    /// file. Nothing is unmapped, so raw views stay valid.
    fn raw_resync(&self, to_end: bool) -> Result<usize> {
        if self.anonymous {
            return Ok(self.len());
        }
        let _g = self.resize.lock().unwrap_or_else(|e| e.into_inner());
        let file_len = self.file_len()?;
        let avail = usize::try_from(file_len.saturating_sub(self.offset)).unwrap_or(usize::MAX);
        let backed = sys::round_up(
            usize::try_from(file_len.saturating_sub(self.aligned)).unwrap_or(usize::MAX),
        );
        let mapped = self.mapped.load(Ordering::Acquire);
        let keep = backed.min(mapped);
        let faulted = self.slot.as_ref().is_some_and(|s| s.faults() > 0);
        if faulted && keep > 0 {
            // SAFETY: remapping the file over its own range inside our
            // reservation; nothing is unmapped, so raw views stay valid,
            // and SharedMap hands out no slices that could see the change.
            unsafe {
                sys::map_fixed(
                    self.base,
                    keep,
                    self.prot,
                    self.flags,
                    self.file.as_raw_fd(),
                    self.aligned,
                )
            }
            .map_err(|e| self.err("mmap", e))?;
        }
        if keep < mapped {
            // SAFETY: as above: the pages past the file's end become zero
            // pages (still mapped) instead of raising SIGBUS when touched.
            unsafe { sys::map_zero(self.base.add(keep), mapped - keep, self.prot) }
                .map_err(|e| self.err("mmap", e))?;
            self.mapped.store(keep, Ordering::Release);
        }
        if let Some(s) = &self.slot {
            s.set_range(self.base as usize, self.base as usize + keep);
            s.clear_faults();
        }
        let len = self.len();
        let new_len = if to_end { avail } else { len.min(avail) };
        self.len.store(new_len.min(keep.saturating_sub(self.delta)), Ordering::Release);
        if new_len > self.len() {
            self.grow_locked(new_len)?;
        }
        Ok(self.len())
    }

    // ----- paging -------------------------------------------------------

    /// Page-aligned absolute range covering `[offset, offset+len)` of the map.
    fn page_range(&self, offset: usize, len: usize) -> Result<(*mut u8, usize)> {
        let end = self.bounds(offset, len)?;
        let start = sys::round_down(self.delta + offset);
        let stop = sys::round_up(self.delta + end);
        Ok((self.base.wrapping_add(start), stop - start))
    }

    /// Gives the kernel `advice` about `[offset, offset+len)` (`len` None:
    /// to the end). Alignment is handled here. [`Advice::DontNeed`] on a
    /// writable private (copy-on-write) map is refused
    /// ([`Error::InvalidArgument`]): it would discard private changes
    /// under live slices; [`Map::discard`] does it through `&mut self`.
    ///
    /// ```compile_fail,E0599
    /// // No raw MADV_* value from safe code (MADV_REMOVE = 9 would zero
    /// // pages under live slices): see the unsafe `Map::advise_raw`.
    /// let m = mmapkit::map::Map::anonymous(8).unwrap();
    /// m.advise(mmapkit::map::Advice::Raw(9), 0, None).unwrap();
    /// ```
    pub fn advise(&self, advice: Advice, offset: usize, len: Option<usize>) -> Result<()> {
        if advice == Advice::DontNeed && !self.is_shared() && self.is_writable() {
            return Err(Error::invalid(
                &self.path,
                "dontneed through a shared borrow of a copy-on-write map would discard private changes under live slices (use discard)",
            ));
        }
        // SAFETY: every `Advice` keeps the contents (DontNeed drops pages
        // that refault with the same bytes on a shared or unwritable map,
        // checked above) and the mapping's protection.
        unsafe { self.advise_raw(advice.raw(), offset, len) }
    }

    /// `MADV_DONTNEED` on `[offset, offset+len)`: drops the pages from this
    /// process; on a copy-on-write map **private changes are discarded**
    /// (the range reads the file's bytes again). Takes `&mut self`, so no
    /// slice can watch the bytes change.
    ///
    /// ```compile_fail,E0502
    /// // A slice of a private map cannot live across a discard.
    /// let d = std::env::temp_dir().join(format!("mmapkit-doc-discard-{}", std::process::id()));
    /// std::fs::write(&d, b"abcdefgh").unwrap();
    /// let mut m = mmapkit::map::Map::open(&d, mmapkit::map::Mode::CopyOnWrite).unwrap();
    /// m.write_at(0, b"X").unwrap();
    /// let s = m.as_slice();
    /// m.discard(0, None).unwrap();
    /// assert_eq!(s[0], b'X');
    /// ```
    pub fn discard(&mut self, offset: usize, len: Option<usize>) -> Result<()> {
        // SAFETY: `&mut self`: no slice of the map is alive, and the pages
        // stay mapped (they refault from the file, or as zeros).
        unsafe { self.advise_raw(libc::MADV_DONTNEED, offset, len) }
    }

    /// Passes any `MADV_*` value to `madvise(2)` for `[offset, offset+len)`
    /// (`len` None: to the end), page aligned here.
    ///
    /// ```compile_fail,E0133
    /// // Not from safe code: MADV_REMOVE (9) would zero bytes under `s`.
    /// let m = mmapkit::map::Map::anonymous(4096).unwrap();
    /// let s = m.as_slice();
    /// m.advise_raw(9, 0, None).unwrap();
    /// assert_eq!(s[0], 0);
    /// ```
    ///
    /// # Safety
    /// The advice must not change bytes that a live slice of this map
    /// covers (`MADV_DONTNEED` or `MADV_FREE` on private changes,
    /// `MADV_REMOVE`, ...) nor make them unreadable or unmapped
    /// (`MADV_GUARD_INSTALL`, `MADV_HWPOISON`, `MADV_DONTFORK` before a
    /// fork whose child uses the map, ...) while any method of the map may
    /// still read them.
    pub unsafe fn advise_raw(&self, advice: i32, offset: usize, len: Option<usize>) -> Result<()> {
        let len = len.unwrap_or_else(|| self.len().saturating_sub(offset));
        let (addr, n) = self.page_range(offset, len)?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the range is mapped (page_range checked the bounds); the
        // advice's effect on the contents is the caller's contract.
        unsafe { sys::madvise(addr, n, advice) }.map_err(|e| self.err("madvise", e))
    }

    /// Faults in every page now (`MADV_POPULATE_READ`/`_WRITE`), so later
    /// accesses do not stall; a truncated file is reported as an error here
    /// instead of a fault later.
    pub fn populate(&self, write: bool) -> Result<()> {
        self.readable()?;
        let (addr, n) = self.page_range(0, self.len())?;
        if n == 0 {
            return Ok(());
        }
        let advice = if write && self.is_writable() {
            libc::MADV_POPULATE_WRITE
        } else {
            libc::MADV_POPULATE_READ
        };
        // SAFETY: the range is mapped.
        match unsafe { sys::madvise(addr, n, advice) } {
            Ok(()) => self.check(),
            Err(e) if e.raw_os_error() == Some(libc::EFAULT) => {
                Err(Error::FileTruncated { path: self.path.clone() })
            }
            // Kernel before 5.14: touch one byte per page instead.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => self.touch(0, self.len()),
            Err(e) => Err(self.err("madvise(populate)", e)),
        }
    }

    /// Reads one byte of every page of `[offset, offset+len)` (faulting it
    /// in), then checks as every read does (the fault record, and the
    /// file's length where a cut may hide in the range's last page): Ok means every byte of the range was the file's when
    /// it was looked at. What an iterator of views calls before it hands
    /// one out (a few nanoseconds a resident page).
    pub fn touch(&self, offset: usize, len: usize) -> Result<()> {
        self.readable()?;
        self.check()?;
        let end = self.bounds(offset, len)?;
        if len == 0 {
            return Ok(());
        }
        let page = page_size();
        let mut acc = 0u8;
        let mut i = offset;
        while i < end {
            // SAFETY: in bounds of the mapping; an atomic load (no slice),
            // so it may race with `&self` writers (SharedMap), and is not
            // elided. Loads are allowed on read-only memory.
            let b = unsafe { std::sync::atomic::AtomicU8::from_ptr(self.data().add(i)) };
            acc ^= b.load(Ordering::Relaxed);
            // The first byte of the next page (every page the range
            // overlaps starts below `end` or holds `offset`).
            i = ((i + self.delta) / page + 1) * page - self.delta;
        }
        std::hint::black_box(acc);
        self.check_tail(offset, len)
    }

    /// Whether a truncation could have cut the file inside the page holding
    /// byte `end - 1`, before `end`, without a fault (after a
    /// [`check`](Self::check) that found none): the rest of that page then
    /// reads as zeros. False as soon as a byte at or after `end - 1` in that
    /// page is not zero (the file reaches past it); true where they all are,
    /// and the caller checks the file's length. Usually one byte is read.
    fn cut_may_end(&self, end: usize) -> bool {
        if self.anonymous || end == 0 {
            return false;
        }
        let page = page_size();
        let page_end = ((end - 1 + self.delta) / page + 1) * page - self.delta;
        let stop = page_end.min(self.mapped.load(Ordering::Acquire) - self.delta);
        let mut i = end - 1;
        while i < stop {
            let at = self.data().wrapping_add(i);
            // Whole aligned words where they fit (a page of zeroed capacity
            // is 512 loads, not 4096).
            let zero = if (at as usize).is_multiple_of(8) && i + 8 <= stop {
                i += 8;
                // SAFETY: inside the mapping ([data, base + mapped) is
                // mapped, the page holding a byte below `len` whole),
                // 8-byte aligned; an atomic load.
                unsafe { std::sync::atomic::AtomicU64::from_ptr(at.cast()) }.load(Ordering::Relaxed)
                    == 0
            } else {
                i += 1;
                // SAFETY: as above, one byte.
                unsafe { std::sync::atomic::AtomicU8::from_ptr(at) }.load(Ordering::Relaxed) == 0
            };
            if !zero {
                return false;
            }
        }
        true
    }

    /// Pins every page of the mapping in memory (`mlock`): all are read in
    /// now and stay resident, whatever the memory pressure, until
    /// [`unlock`](Self::unlock) or the map is dropped. Needs
    /// `RLIMIT_MEMLOCK` room (or `CAP_IPC_LOCK`); a truncated file is an
    /// error here.
    pub fn lock(&self) -> Result<()> {
        self.lock_pages(true)
    }

    /// Undoes [`lock`](Self::lock).
    pub fn unlock(&self) -> Result<()> {
        self.lock_pages(false)
    }

    fn lock_pages(&self, lock: bool) -> Result<()> {
        let (addr, n) = self.page_range(0, self.len())?;
        if n == 0 {
            return Ok(());
        }
        // SAFETY: the range is mapped.
        match unsafe { sys::mlock(addr, n, lock) } {
            Ok(()) => self.check(),
            Err(e) if lock && e.raw_os_error() == Some(libc::EFAULT) => {
                Err(Error::FileTruncated { path: self.path.clone() })
            }
            Err(e) => Err(self.err(if lock { "mlock" } else { "munlock" }, e)),
        }
    }

    /// Writes dirty pages of `[offset, offset+len)` back to the file,
    /// waiting for the I/O when `sync` (`msync(MS_SYNC)` vs `MS_ASYNC`).
    /// A truncation of the file under the range (before or during the
    /// call) is [`Error::FileTruncated`]: those bytes reached no file.
    pub fn flush_range(&self, offset: usize, len: usize, sync: bool) -> Result<()> {
        let (addr, n) = self.page_range(offset, len)?;
        if n == 0 {
            return self.check();
        }
        self.check_covered(offset, len)?;
        // SAFETY: the range is mapped.
        unsafe { sys::msync(addr, n, sync) }.map_err(|e| self.err("msync", e))?;
        self.check_covered(offset, len)
    }

    /// Flushes the whole map synchronously.
    pub fn flush(&self) -> Result<()> {
        self.flush_range(0, self.len(), true)
    }

    /// How much of the mapped range is in the page cache (`mincore`).
    pub fn residency(&self) -> Result<Residency> {
        let (addr, n) = self.page_range(0, self.len())?;
        if n == 0 {
            return Ok(Residency::default());
        }
        // SAFETY: the range is mapped.
        let pages = unsafe { sys::mincore(addr, n) }.map_err(|e| self.err("mincore", e))?;
        let resident = pages.iter().filter(|&&b| b & 1 != 0).count() as u64;
        let mapped = self.len() as u64;
        Ok(Residency {
            resident_bytes: (resident * page_size() as u64).min(mapped),
            mapped_bytes: mapped,
        })
    }

    // ----- searching (kernels in `scan`) --------------------------------

    /// First offset of `needle` in `[start, end)`, absolute.
    pub fn find(&self, needle: &[u8], start: usize, end: usize) -> Result<Option<usize>> {
        self.in_range(start, end, |d| crate::bytes::find(d, needle).map(|i| i + start))
    }
    /// Last offset of `needle` in `[start, end)`, absolute.
    pub fn rfind(&self, needle: &[u8], start: usize, end: usize) -> Result<Option<usize>> {
        self.in_range(start, end, |d| crate::bytes::rfind(d, needle).map(|i| i + start))
    }
    /// Non-overlapping occurrences of `needle` in the whole map.
    pub fn count(&self, needle: &[u8]) -> Result<u64> {
        self.read_with(|d| crate::bytes::count(d, needle))
    }
    /// Offsets of non-overlapping occurrences of `needle`, at most `limit`.
    pub fn find_all(&self, needle: &[u8], limit: Option<usize>) -> Result<Vec<u64>> {
        self.read_with(|d| crate::bytes::find_all(d, needle, limit))?
            .ok_or_else(|| Error::InvalidArgument("find_all: the pattern is empty".into()))
    }

    fn in_range<R>(&self, start: usize, end: usize, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        self.read_with(|d| {
            let end = end.min(d.len());
            f(&d[start.min(end)..end])
        })
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        self.slot = None;
        // SAFETY: we own the reservation; `&mut self` means nothing borrows it.
        unsafe { sys::release(self.base, self.reserved()) };
    }
}

/// Makes `file` at least `len` bytes long with its blocks allocated
/// (`fallocate`), so writes through a mapping of it cannot fail later with
/// `SIGBUS` for lack of space: a full file system (or a too small
/// `/dev/shm`) is an [`Error::DiskFull`] here. `path` labels errors.
pub fn allocate(file: &File, path: &Path, len: u64) -> Result<()> {
    let have = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
    sys::allocate(file, 0, len.max(have)).map_err(|e| disk_err(path, len, e))
}

/// Whether signal `sig` is ignored by this process (`SIG_IGN`): a CLI
/// leaves such signals alone, like coreutils.
pub fn signal_ignored(sig: i32) -> bool {
    sys::signal_ignored(sig)
}

/// Writes the file's dirty pages and drops all of its pages from the page
/// cache (`fsync` + `posix_fadvise(DONTNEED)`), like `vmtouch -e`.
pub fn drop_cache(path: impl AsRef<Path>) -> Result<()> {
    let path = path.as_ref();
    // O_NONBLOCK: opening a FIFO must not hang waiting for a writer.
    let file = crate::fs::open_regular(path, "only a file's pages are cached")?;
    file.sync_all().map_err(|e| Error::io(path, "fsync", e))?;
    sys::fadvise_dontneed(&file).map_err(|e| Error::io(path, "posix_fadvise", e))
}

#[cfg(test)]
mod tests;

/// Duplicates a caller's file descriptor into an owned [`File`] (as
/// Python's `mmap` does), so the caller may close theirs.
pub fn dup_fd(fd: i32) -> Result<File> {
    let label = PathBuf::from(format!("<fd {fd}>"));
    // SAFETY: F_DUPFD_CLOEXEC only reads the descriptor table; an invalid
    // descriptor is reported as EBADF.
    let new = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, 3) };
    if new < 0 {
        return Err(Error::last_os(&label, "dup"));
    }
    // SAFETY: `new` is a fresh descriptor that nothing else owns.
    Ok(unsafe { <File as std::os::fd::FromRawFd>::from_raw_fd(new) })
}

/// The path behind an open descriptor (via `/proc/self/fd`), if it has one.
pub fn fd_path(fd: i32) -> Option<PathBuf> {
    let p = std::fs::read_link(format!("/proc/self/fd/{fd}")).ok()?;
    p.is_absolute().then_some(p).filter(|p| !p.to_string_lossy().ends_with(" (deleted)"))
}

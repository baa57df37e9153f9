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
mod grow;
mod guard;
mod options;
mod pages;
mod share;
mod shmem;

pub use fresh::{filled_words, Filler};
pub use guard::GuardStats;
pub use options::MapOptions;
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

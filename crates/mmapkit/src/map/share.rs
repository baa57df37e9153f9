//! The read/write split for maps used by several threads or handles at
//! once.
//!
//! [`Map`] hands out `&[u8]` and so writes only through `&mut self`. Two
//! wrappers write through `&self` without ever letting safe code watch a
//! slice change:
//!
//! * [`SharedMap`] hands out **no slices at all**: reads copy out (or run
//!   mmapkit's own search kernels), writes go in through `&self`. For
//!   bindings whose callers hold raw views (Python buffers, numpy arrays)
//!   and for writers filling disjoint records from many threads.
//! * [`AppendMap`] hands out slices of a **sealed prefix** only and writes
//!   only past it (plus an optional private header that is never handed
//!   out). Sealing moves the boundary forward under the same lock as the
//!   writes, so a slice never covers a byte that is still being written.
//!   For append-only structures read while they grow (log segments, array
//!   stores).
//!
//! Every access these two make to bytes another thread may write is
//! atomic (the `shmem` module): reads copy out, searches run over copied
//! windows, so no `&[u8]` ever covers bytes a write through `&self` can
//! reach, and two threads racing through them is defined behaviour.
//!
//! Compile-fail checks (each the safe path a data race would need):
//!
//! ```compile_fail,E0502
//! // A slice of a `Map` cannot outlive a write through the same map.
//! let mut m = mmapkit::map::Map::anonymous(8).unwrap();
//! let s = m.as_slice();
//! m.write_at(0, &[7]).unwrap();
//! assert_eq!(s[0], 7);
//! ```
//!
//! ```compile_fail,E0599
//! // A SharedMap has no slices to watch.
//! let m = mmapkit::map::Map::anonymous(8).unwrap().into_shared();
//! let s: &[u8] = m.as_slice();
//! ```
//!
//! ```compile_fail,E0599
//! // Shared between threads, one writing: no slice-returning method
//! // (`read_with`, `as_slice`) to search the bytes with while it writes.
//! let m = std::sync::Arc::new(mmapkit::map::Map::anonymous(8).unwrap().into_shared());
//! let w = std::sync::Arc::clone(&m);
//! let t = std::thread::spawn(move || w.write_at(0, &[7]).unwrap());
//! let n = m.read_with(|d| d.iter().filter(|&&b| b == 7).count()).unwrap();
//! t.join().unwrap();
//! ```
//!
//! ```compile_fail,E0596
//! // Nor through the inner Map while another thread holds the SharedMap.
//! let m = std::sync::Arc::new(mmapkit::map::Map::anonymous(8).unwrap().into_shared());
//! let w = std::sync::Arc::clone(&m);
//! let t = std::thread::spawn(move || w.write_at(0, &[7]).unwrap());
//! let s = m.get_mut().as_slice();
//! t.join().unwrap();
//! ```
//!
//! ```compile_fail,E0502
//! // Nor can a sealed slice of an AppendMap outlive exclusive access.
//! let mut m = mmapkit::map::AppendMap::new(mmapkit::map::Map::anonymous(8).unwrap(), 0, 8).unwrap();
//! let s = m.sealed_slice();
//! m.get_mut().write_at(0, &[7]).unwrap();
//! assert_eq!(s[0], 7);
//! ```
//!
//! ```compile_fail,E0596
//! // And while another thread appends, the whole map (open part
//! // included) cannot be sliced.
//! let m = mmapkit::map::AppendMap::new(mmapkit::map::Map::anonymous(8).unwrap(), 0, 0).unwrap();
//! let a = std::sync::Arc::new(m);
//! let w = std::sync::Arc::clone(&a);
//! let t = std::thread::spawn(move || w.append_at(0, &[7]).unwrap());
//! let all = a.get_mut().as_slice();
//! t.join().unwrap();
//! ```

use std::fs::File;
use std::mem::MaybeUninit;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{Advice, Map, Mode, Residency};
use crate::{Error, Result};

/// Read-side methods that never hand out a slice, forwarded to the inner
/// [`Map`] (see its docs).
macro_rules! forward_sliceless {
    ($t:ty) => {
        impl $t {
            /// Mapped bytes.
            pub fn len(&self) -> usize {
                self.map.len()
            }
            /// Whether the map has no bytes.
            pub fn is_empty(&self) -> bool {
                self.map.is_empty()
            }
            /// The file's path, or `<anonymous>`.
            pub fn path(&self) -> &Path {
                self.map.path()
            }
            /// The mode it was opened with.
            pub fn mode(&self) -> Mode {
                self.map.mode()
            }
            /// File offset of byte 0 of the map.
            pub fn offset(&self) -> u64 {
                self.map.offset()
            }
            /// Address space reserved for growth in place.
            pub fn reserved(&self) -> usize {
                self.map.reserved()
            }
            /// Whether writes through the map are allowed.
            pub fn is_writable(&self) -> bool {
                self.map.is_writable()
            }
            /// Whether the mapping is shared with the file / other processes.
            pub fn is_shared(&self) -> bool {
                self.map.is_shared()
            }
            /// Whether this is anonymous memory.
            pub fn is_anonymous(&self) -> bool {
                self.map.is_anonymous()
            }
            /// Whether a truncation of the file is caught (see [`Map::is_protected`]).
            pub fn is_protected(&self) -> bool {
                self.map.is_protected()
            }
            /// The underlying file.
            pub fn file(&self) -> &File {
                self.map.file()
            }
            /// Current size of the underlying file.
            pub fn file_len(&self) -> Result<u64> {
                self.map.file_len()
            }
            /// Pointer to byte 0 (for raw views; see [`Map::as_ptr`]).
            pub fn as_ptr(&self) -> *const u8 {
                self.map.as_ptr()
            }
            /// Err([`Error::FileTruncated`]) after a truncation of the file.
            pub fn check(&self) -> Result<()> {
                self.map.check()
            }
            /// Err([`Error::FileTruncated`]) after a truncation, or when the
            /// file no longer holds the range (see [`Map::check_covered`]).
            pub fn check_covered(&self, offset: usize, len: usize) -> Result<()> {
                self.map.check_covered(offset, len)
            }
            /// Copies `buf.len()` bytes at `offset` into `buf` (atomic
            /// loads: may race with writes through `&self`, never makes a
            /// slice of the map).
            pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
                self.map.raw_read_at(offset, buf)
            }
            /// Copies into a possibly uninitialised buffer (see
            /// [`Map::read_into`]; loads as [`read_at`](Self::read_at) does).
            pub fn read_into(&self, offset: usize, buf: &mut [MaybeUninit<u8>]) -> Result<()> {
                self.map.raw_read_into(offset, buf)
            }
            /// Grows without moving (see [`Map::grow`]).
            pub fn grow(&self, new_len: usize) -> Result<()> {
                self.map.grow(new_len)
            }
            /// Faults every page in (see [`Map::populate`]).
            pub fn populate(&self, write: bool) -> Result<()> {
                self.map.populate(write)
            }
            /// Writes dirty pages of a range back (see [`Map::flush_range`]).
            pub fn flush_range(&self, offset: usize, len: usize, sync: bool) -> Result<()> {
                self.map.flush_range(offset, len, sync)
            }
            /// Flushes the whole map synchronously.
            pub fn flush(&self) -> Result<()> {
                self.map.flush()
            }
            /// Page-cache residency (see [`Map::residency`]).
            pub fn residency(&self) -> Result<Residency> {
                self.map.residency()
            }
        }
    };
}

/// Bytes a [`SharedMap`] search copies at a time (stays in L2, and under
/// the size from which `read_into` switches to `pread`).
const WINDOW: usize = 64 << 10;
/// The first window of a [`SharedMap::windows`] scan.
const FIRST_WINDOW: usize = 4 << 10;

/// The raw `madvise` values [`SharedMap::madvise`] passes on.
const SAFE_MADVISE: &[i32] = &[
    libc::MADV_NORMAL,
    libc::MADV_RANDOM,
    libc::MADV_SEQUENTIAL,
    libc::MADV_WILLNEED,
    libc::MADV_DONTNEED,
    libc::MADV_FREE,
    libc::MADV_REMOVE,
    libc::MADV_DOFORK,
    libc::MADV_MERGEABLE,
    libc::MADV_UNMERGEABLE,
    libc::MADV_HUGEPAGE,
    libc::MADV_NOHUGEPAGE,
    libc::MADV_DONTDUMP,
    libc::MADV_DODUMP,
    libc::MADV_WIPEONFORK,
    libc::MADV_KEEPONFORK,
    libc::MADV_COLD,
    libc::MADV_PAGEOUT,
    libc::MADV_POPULATE_READ,
    libc::MADV_POPULATE_WRITE,
    24, // MADV_DONTNEED_LOCKED
    25, // MADV_COLLAPSE
];

/// A writable map shared by threads or handles that hands out no slices;
/// see the [module docs](crate::map).
///
/// Reads copy out or search; writes go in through `&self`. Concurrent
/// writes to overlapping bytes, or a search racing a write, see some mix
/// of old and new bytes (as with another process writing the file):
/// callers that care give each writer its own range.
#[derive(Debug)]
pub struct SharedMap {
    map: Map,
}

forward_sliceless!(SharedMap);

impl Map {
    /// Turns this map into a [`SharedMap`] (writes through `&self`, no slices).
    pub fn into_shared(self) -> SharedMap {
        SharedMap { map: self }
    }
}

impl SharedMap {
    /// The map back, for exclusive use (slices again).
    pub fn into_inner(self) -> Map {
        self.map
    }
    /// Exclusive access to the map: no write through `&self` can run while
    /// the returned borrow (and any slice taken from it) lives.
    pub fn get_mut(&mut self) -> &mut Map {
        &mut self.map
    }
    /// Writes `data` at `offset`.
    pub fn write_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.map.raw_write(offset, data)
    }
    /// Writes the `len` bytes at `src`, a raw view (a Python buffer,
    /// possibly of this very map: overlap is allowed), at `offset`,
    /// without making a reference to either side: both are accessed
    /// atomically (see the [module docs](crate::map)).
    ///
    /// # Safety
    /// `[src, src + len)` is mapped readable for the whole call, and no
    /// `&mut [u8]` covers it while the call runs; concurrent writers of it
    /// in this process must use atomic accesses (as every `SharedMap`
    /// write does) for the race to be defined.
    pub unsafe fn write_from_view(&self, offset: usize, src: *const u8, len: usize) -> Result<()> {
        self.map.writable_range(offset, len)?;
        // SAFETY: the destination is in bounds of a writable mapping that
        // stays mapped while `self` is borrowed and that no reference
        // covers (a SharedMap hands out none); the source is the caller's
        // contract; `shmem::copy` handles an overlap.
        unsafe { super::shmem::copy(src, self.map.data().add(offset), len) };
        self.map.check()
    }
    /// Aligned atomic 8-byte store (see [`Map::store_word`]).
    pub fn store_word(&self, offset: usize, bytes: [u8; 8]) -> Result<()> {
        self.map.raw_store_word(offset, bytes)
    }
    /// Copies `count` bytes from `src` to `dest` within the map (overlap allowed).
    pub fn copy_within(&self, src: usize, dest: usize, count: usize) -> Result<()> {
        self.map.raw_copy_within(src, dest, count)
    }
    /// The byte at `offset`.
    pub fn byte_at(&self, offset: usize) -> Result<u8> {
        let mut b = [0u8];
        self.map.raw_read_at(offset, &mut b)?;
        Ok(b[0])
    }
    /// Gives the kernel advice (see [`Map::advise`]). Unlike a [`Map`], a
    /// `SharedMap` takes [`Advice::DontNeed`] on a copy-on-write map too
    /// (dropping private changes): it has no slices that could see it.
    pub fn advise(&self, advice: Advice, offset: usize, len: Option<usize>) -> Result<()> {
        // SAFETY: no slice of a SharedMap exists (reads copy atomically),
        // and every `Advice` keeps the range mapped and readable.
        unsafe { self.map.advise_raw(advice.raw(), offset, len) }
    }
    /// `madvise(2)` with a raw `MADV_*` value (for mmap-compatible
    /// bindings). Values that can make the range unreadable or unmapped
    /// in this process or a forked child (`MADV_DONTFORK`, the guard,
    /// poison and offline values) and unknown ones fail with `EINVAL`, as
    /// the kernel answers an unknown value; the rest (including
    /// `MADV_DONTNEED`, `MADV_FREE`, `MADV_REMOVE`, which may change the
    /// bytes) are sound here because a `SharedMap` hands out no slices.
    pub fn madvise(&self, advice: i32, offset: usize, len: Option<usize>) -> Result<()> {
        if !SAFE_MADVISE.contains(&advice) {
            return Err(Error::io(
                self.map.path(),
                "madvise",
                std::io::Error::from_raw_os_error(libc::EINVAL),
            ));
        }
        // SAFETY: no slice of a SharedMap exists, and the allowed values
        // keep the range mapped and readable (pages may read new bytes or
        // zeros, which the atomic copies tolerate).
        unsafe { self.map.advise_raw(advice, offset, len) }
    }
    /// Runs `f(pos, window)` over copies of `[start, end)` taken a window
    /// at a time (a snapshot the caller cannot alias), consecutive windows
    /// overlapping by `overlap` bytes so that a needle of `overlap + 1`
    /// bytes lies whole in some window. `f` returns where the next window
    /// may start at the earliest (it starts at `max(that, end of this
    /// window - overlap)`), or None to stop.
    ///
    /// The first window is a page and each next one twice the last, up to
    /// [`WINDOW`]: a search that stops near `start` (a `find` of a common
    /// word) copies a page, not 64 KiB; a whole scan pays four more windows.
    fn windows(
        &self,
        start: usize,
        end: usize,
        overlap: usize,
        mut f: impl FnMut(usize, &[u8]) -> Option<usize>,
    ) -> Result<()> {
        self.map.check()?;
        let max = WINDOW.max(2 * overlap + 1);
        let mut size = FIRST_WINDOW.max(2 * overlap + 1).min(max);
        let mut buf = Vec::new();
        let mut pos = start;
        while pos < end {
            let stop = (pos + size).min(end);
            if buf.len() < stop - pos {
                buf.resize(stop - pos, 0);
            }
            let w = &mut buf[..stop - pos];
            self.map.raw_read_at(pos, w)?;
            match f(pos, w) {
                Some(next) if stop < end => pos = next.max(stop - overlap),
                _ => break,
            }
            size = (size * 2).min(max);
        }
        Ok(())
    }
    /// First offset of `needle` in `[start, end)`, absolute (searched in
    /// copied windows: a concurrent write may or may not be seen).
    pub fn find(&self, needle: &[u8], start: usize, end: usize) -> Result<Option<usize>> {
        let end = end.min(self.len());
        if needle.is_empty() {
            self.map.check()?;
            return Ok(Some(start));
        }
        let mut found = None;
        self.windows(start.min(end), end, needle.len() - 1, |pos, w| {
            match crate::bytes::find(w, needle) {
                Some(i) => {
                    found = Some(pos + i);
                    None
                }
                None => Some(0),
            }
        })?;
        Ok(found)
    }
    /// Last offset of `needle` in `[start, end)`, absolute.
    pub fn rfind(&self, needle: &[u8], start: usize, end: usize) -> Result<Option<usize>> {
        self.map.check()?;
        let end = end.min(self.len());
        let s = start.min(end);
        let n = needle.len();
        if n == 0 {
            return Ok(Some(start + (end - s)));
        }
        let size = WINDOW.max(2 * n);
        let mut buf = vec![0u8; size.min(end - s)];
        let mut hi = end;
        while hi - s >= n {
            let lo = hi.saturating_sub(size).max(s);
            let w = &mut buf[..hi - lo];
            self.map.raw_read_at(lo, w)?;
            if let Some(i) = crate::bytes::rfind(w, needle) {
                return Ok(Some(lo + i));
            }
            if lo == s {
                break;
            }
            hi = lo + n - 1;
        }
        Ok(None)
    }
    /// Non-overlapping occurrences of `needle` in the whole map.
    pub fn count(&self, needle: &[u8]) -> Result<u64> {
        let n = needle.len();
        if n == 0 {
            self.map.check()?;
            return Ok(self.len() as u64 + 1);
        }
        let mut total = 0u64;
        let mut next = 0usize;
        self.windows(0, self.len(), n - 1, |pos, w| {
            if n == 1 {
                total += crate::bytes::count(w, needle);
                return Some(pos + w.len());
            }
            let from = next.saturating_sub(pos);
            for i in crate::bytes::find_iter(&w[from..], needle) {
                total += 1;
                next = pos + from + i + n;
            }
            Some(next)
        })?;
        Ok(total)
    }
    /// Offsets of non-overlapping occurrences of `needle`, at most `limit`.
    pub fn find_all(&self, needle: &[u8], limit: Option<usize>) -> Result<Vec<u64>> {
        let n = needle.len();
        if n == 0 {
            self.map.check()?;
            return Err(Error::InvalidArgument("find_all: the pattern is empty".into()));
        }
        let cap = limit.unwrap_or(usize::MAX);
        let mut out = Vec::new();
        if cap == 0 {
            self.map.check()?;
            return Ok(out);
        }
        let mut next = 0usize;
        self.windows(0, self.len(), n - 1, |pos, w| {
            let from = next.saturating_sub(pos);
            for i in crate::bytes::find_iter(&w[from..], needle) {
                out.push((pos + from + i) as u64);
                next = pos + from + i + n;
                if out.len() >= cap {
                    return None;
                }
            }
            Some(next)
        })?;
        Ok(out)
    }
    /// Whether `[offset, offset+other.len())` equals `other`.
    pub fn eq_at(&self, offset: usize, other: &[u8]) -> Result<bool> {
        self.map.check()?;
        match offset.checked_add(other.len()) {
            Some(end) if end <= self.len() => {}
            _ => return Ok(false),
        }
        let mut buf = vec![0u8; WINDOW.min(other.len())];
        for (k, part) in other.chunks(WINDOW).enumerate() {
            let w = &mut buf[..part.len()];
            self.map.raw_read_at(offset + k * WINDOW, w)?;
            if w != part {
                return Ok(false);
            }
        }
        Ok(true)
    }
    /// Re-synchronises with the file **while views exist**: remaps the
    /// file over the same addresses (zero pages a truncation left become
    /// the file's bytes again), turns pages now past the file's end into
    /// zero pages instead of unmapping them, and follows the file's length
    /// (to its end when `to_end`, else never longer than before). Raw
    /// views keep their address and stay readable. Returns the new length.
    pub fn resync(&self, to_end: bool) -> Result<usize> {
        self.map.raw_resync(to_end)
    }
    /// Sets the length, growing or shrinking (see [`Map::resize`]); needs
    /// exclusive access because it may unmap or move memory.
    pub fn resize(&mut self, new_len: usize) -> Result<()> {
        self.map.resize(new_len)
    }
    /// Room for `len` bytes, moving the mapping if it must (see
    /// [`Map::make_room`]); needs exclusive access for the move.
    pub fn make_room(&mut self, len: usize) -> Result<()> {
        self.map.make_room(len)
    }
}

/// A map read as a growing, sealed prefix while it is appended to; see
/// the [module docs](crate::map).
///
/// Layout: `[0, header)` is private (never handed out, written through
/// [`AppendMap::write_header`] / [`AppendMap::store_header_word`]),
/// `[header, sealed)` is sealed (handed out by
/// [`AppendMap::sealed_slice`]; immutable while shared), `[sealed, len)`
/// is open for [`AppendMap::append_at`].
#[derive(Debug)]
pub struct AppendMap {
    map: Map,
    header: usize,
    sealed: AtomicUsize,
    write: Mutex<()>,
}

forward_sliceless!(AppendMap);

impl AppendMap {
    /// Wraps `map` with a private header of `header` bytes and the bytes
    /// up to `sealed` sealed (`header <= sealed <= len`).
    pub fn new(map: Map, header: usize, sealed: usize) -> Result<AppendMap> {
        if header > sealed || sealed > map.len() {
            return Err(Error::invalid(
                map.path(),
                format!("append map bounds {header}..{sealed} outside {} bytes", map.len()),
            ));
        }
        Ok(AppendMap { map, header, sealed: AtomicUsize::new(sealed), write: Mutex::new(()) })
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, ()> {
        self.write.lock().unwrap_or_else(|e| e.into_inner())
    }
    /// Bytes of the private header.
    pub fn header_len(&self) -> usize {
        self.header
    }
    /// End of the sealed prefix.
    pub fn sealed(&self) -> usize {
        self.sealed.load(Ordering::Acquire)
    }
    /// The sealed bytes `[header, sealed)`: they never change while this
    /// slice lives (unless another process writes the file).
    ///
    /// The slice covers `[header, sealed)` only (no reference is ever made
    /// to the open part that [`append_at`](Self::append_at) writes, nor to
    /// the header), and those bytes are never written through `&self`:
    /// `append_at` refuses offsets below the seal under the same lock as
    /// [`seal`](Self::seal), which only moves forward, and the header
    /// writers stay below `header`. The `&mut self` methods that could
    /// rewrite them cannot run while the slice borrows `self`.
    pub fn sealed_slice(&self) -> &[u8] {
        let end = self.sealed();
        // SAFETY: see above: nothing writes [header, sealed) while `self`
        // is shared; writes before the seal happen-before this load
        // (the lock, then the seal's release and our acquire).
        unsafe { self.map.slice_of(self.header, end) }
    }
    /// Writes `data` at `offset >= sealed()`.
    pub fn append_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        let _g = self.lock();
        let sealed = self.sealed();
        if offset < sealed {
            return Err(Error::invalid(
                self.map.path(),
                format!("write at {offset} inside the sealed prefix ({sealed} bytes)"),
            ));
        }
        self.map.raw_write(offset, data)
    }
    /// Seals `[.., upto)`: from now on those bytes can be handed out and
    /// are never written again through `&self`. Never moves backwards.
    pub fn seal(&self, upto: usize) -> Result<()> {
        let _g = self.lock();
        if upto > self.map.len() {
            return Err(Error::invalid(
                self.map.path(),
                format!("cannot seal {upto} bytes of a {}-byte map", self.map.len()),
            ));
        }
        // Under the lock (the only `&self` writer of `sealed`), so a load
        // and a store are a fetch_max; a plain release store is also what
        // ThreadSanitizer can follow (it does not instrument atomic max).
        if upto > self.sealed.load(Ordering::Relaxed) {
            self.sealed.store(upto, Ordering::Release);
        }
        Ok(())
    }
    /// Writes `data` at `offset` inside the private header.
    pub fn write_header(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.header_range(offset, data.len())?;
        let _g = self.lock();
        self.map.raw_write(offset, data)
    }
    /// Aligned atomic 8-byte store inside the private header (see [`Map::store_word`]).
    pub fn store_header_word(&self, offset: usize, bytes: [u8; 8]) -> Result<()> {
        self.header_range(offset, 8)?;
        let _g = self.lock();
        self.map.raw_store_word(offset, bytes)
    }
    /// Copies of header bytes `[offset, offset+buf.len())`.
    pub fn read_header(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        self.header_range(offset, buf.len())?;
        self.map.raw_read_at(offset, buf)
    }
    /// Gives the kernel advice (see [`Map::advise`]: `DontNeed` on a
    /// copy-on-write map is refused, since sealed slices may be alive).
    pub fn advise(&self, advice: Advice, offset: usize, len: Option<usize>) -> Result<()> {
        self.map.advise(advice, offset, len)
    }
    fn header_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.header => Ok(()),
            _ => Err(Error::invalid(
                self.map.path(),
                format!("range {offset}..+{len} is outside the {}-byte header", self.header),
            )),
        }
    }
    /// Exclusive access to the whole map (e.g. to rewrite sealed bytes
    /// when nothing else holds this value).
    pub fn get_mut(&mut self) -> &mut Map {
        &mut self.map
    }
    /// Moves the sealed boundary anywhere in `[header, len]` (exclusive
    /// access: no sealed slice can be alive).
    pub fn set_sealed(&mut self, sealed: usize) -> Result<()> {
        if sealed < self.header || sealed > self.map.len() {
            return Err(Error::invalid(
                self.map.path(),
                format!("sealed end {sealed} outside {}..={}", self.header, self.map.len()),
            ));
        }
        *self.sealed.get_mut() = sealed;
        Ok(())
    }
    /// The map back.
    pub fn into_inner(self) -> Map {
        self.map
    }
}

#[cfg(test)]
mod tests;

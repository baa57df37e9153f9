//! The kernel's side of a map's pages: advice, discard, populate,
//! `touch`, locking, flushing and residency.

use std::sync::atomic::Ordering;

use super::*;
use crate::sys;
use crate::{Error, Result};

impl Map {
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
    pub(super) fn cut_may_end(&self, end: usize) -> bool {
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
}

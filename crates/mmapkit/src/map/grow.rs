//! Growth without moving ([`Map::grow`]), and the moves that need
//! `&mut self`: [`Map::resize`], [`Map::make_room`], [`Map::refresh`].

use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;

use super::*;
use crate::sys;
use crate::{Error, Result};

impl Map {
    /// Maps the file (from `aligned + from`) over `[base + from, base + to)`
    /// of the reservation, with the map's protection and flags.
    ///
    /// # Safety
    /// As [`sys::map_fixed`]: the range lies inside this map's reservation,
    /// and no live reference into it may see its bytes change.
    unsafe fn map_file_range(&self, from: usize, to: usize) -> Result<()> {
        // SAFETY: guaranteed by the caller (the range is ours, nothing
        // borrowed sees the change).
        unsafe {
            sys::map_fixed(
                self.base.add(from),
                to - from,
                self.prot,
                self.flags,
                self.file.as_raw_fd(),
                self.aligned + from as u64,
            )
        }
        .map_err(|e| self.err("mmap", e))
    }

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
            unsafe { self.map_file_range(mapped, need) }?;
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
            unsafe { self.map_file_range(0, keep) }?;
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
    pub(super) fn raw_resync(&self, to_end: bool) -> Result<usize> {
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
            unsafe { self.map_file_range(0, keep) }?;
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
}

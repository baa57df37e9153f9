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
//! ```compile_fail
//! // A slice of a `Map` cannot outlive a write through the same map.
//! let mut m = mmapkit::map::Map::anonymous(8).unwrap();
//! let s = m.as_slice();
//! m.write_at(0, &[7]).unwrap();
//! assert_eq!(s[0], 7);
//! ```
//!
//! ```compile_fail
//! // A SharedMap has no slices to watch.
//! let m = mmapkit::map::Map::anonymous(8).unwrap().into_shared();
//! let s: &[u8] = m.as_slice();
//! ```
//!
//! ```compile_fail
//! // Nor can a sealed slice of an AppendMap outlive exclusive access.
//! let mut m = mmapkit::map::AppendMap::new(mmapkit::map::Map::anonymous(8).unwrap(), 0, 8).unwrap();
//! let s = m.sealed_slice();
//! m.get_mut().write_at(0, &[7]).unwrap();
//! assert_eq!(s[0], 7);
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
            /// Copies `buf.len()` bytes at `offset` into `buf`.
            pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
                self.map.read_at(offset, buf)
            }
            /// Copies into a possibly uninitialised buffer (see [`Map::read_into`]).
            pub fn read_into(&self, offset: usize, buf: &mut [MaybeUninit<u8>]) -> Result<()> {
                self.map.read_into(offset, buf)
            }
            /// Grows without moving (see [`Map::grow`]).
            pub fn grow(&self, new_len: usize) -> Result<()> {
                self.map.grow(new_len)
            }
            /// Gives the kernel advice (see [`Map::advise`]).
            pub fn advise(&self, advice: Advice, offset: usize, len: Option<usize>) -> Result<()> {
                self.map.advise(advice, offset, len)
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

/// A writable map shared by threads or handles that hands out no slices;
/// see the [module docs](self).
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
        self.map.read_at(offset, &mut b)?;
        Ok(b[0])
    }
    /// First offset of `needle` in `[start, end)`, absolute.
    pub fn find(&self, needle: &[u8], start: usize, end: usize) -> Result<Option<usize>> {
        self.map.find(needle, start, end)
    }
    /// Last offset of `needle` in `[start, end)`, absolute.
    pub fn rfind(&self, needle: &[u8], start: usize, end: usize) -> Result<Option<usize>> {
        self.map.rfind(needle, start, end)
    }
    /// Non-overlapping occurrences of `needle` in the whole map.
    pub fn count(&self, needle: &[u8]) -> Result<u64> {
        self.map.count(needle)
    }
    /// Offsets of non-overlapping occurrences of `needle`, at most `limit`.
    pub fn find_all(&self, needle: &[u8], limit: Option<usize>) -> Result<Vec<u64>> {
        self.map.find_all(needle, limit)
    }
    /// Whether `[offset, offset+other.len())` equals `other`.
    pub fn eq_at(&self, offset: usize, other: &[u8]) -> Result<bool> {
        self.map.read_with(|d| d.get(offset..offset + other.len()) == Some(other))
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
}

/// A map read as a growing, sealed prefix while it is appended to; see
/// the [module docs](self).
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
            return Err(Error::invalid(map.path(), format!(
                "append map bounds {header}..{sealed} outside {} bytes",
                map.len()
            )));
        }
        Ok(AppendMap {
            map,
            header,
            sealed: AtomicUsize::new(sealed),
            write: Mutex::new(()),
        })
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
    pub fn sealed_slice(&self) -> &[u8] {
        let end = self.sealed();
        &self.map.as_slice()[self.header..end]
    }
    /// Writes `data` at `offset >= sealed()`.
    pub fn append_at(&self, offset: usize, data: &[u8]) -> Result<()> {
        let _g = self.lock();
        let sealed = self.sealed();
        if offset < sealed {
            return Err(Error::invalid(self.map.path(), format!(
                "write at {offset} inside the sealed prefix ({sealed} bytes)"
            )));
        }
        self.map.raw_write(offset, data)
    }
    /// Seals `[.., upto)`: from now on those bytes can be handed out and
    /// are never written again through `&self`. Never moves backwards.
    pub fn seal(&self, upto: usize) -> Result<()> {
        let _g = self.lock();
        if upto > self.map.len() {
            return Err(Error::invalid(self.map.path(), format!(
                "cannot seal {upto} bytes of a {}-byte map",
                self.map.len()
            )));
        }
        self.sealed.fetch_max(upto, Ordering::AcqRel);
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
        self.map.read_at(offset, buf)
    }
    fn header_range(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.header => Ok(()),
            _ => Err(Error::invalid(self.map.path(), format!(
                "range {offset}..+{len} is outside the {}-byte header",
                self.header
            ))),
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
            return Err(Error::invalid(self.map.path(), format!(
                "sealed end {sealed} outside {}..={}",
                self.header,
                self.map.len()
            )));
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
mod tests {
    use super::*;

    #[test]
    fn append_map_writes_only_past_the_seal() {
        let mut m = Map::anonymous(64).unwrap();
        m.write_at(0, b"HEADER--").unwrap();
        let a = AppendMap::new(m, 8, 8).unwrap();
        assert!(a.sealed_slice().is_empty());
        a.append_at(8, b"abcd").unwrap();
        a.seal(12).unwrap();
        let s = a.sealed_slice();
        assert_eq!(s, b"abcd");
        // Below the seal: refused, and the slice is unchanged.
        assert!(a.append_at(10, b"XX").is_err());
        assert!(a.append_at(4, b"XX").is_err());
        assert_eq!(s, b"abcd");
        a.append_at(12, b"efgh").unwrap();
        a.seal(10).unwrap(); // never backwards
        assert_eq!(a.sealed(), 12);
        // The header is private and writable at any time.
        a.store_header_word(0, *b"12345678").unwrap();
        assert!(a.write_header(6, b"xyz").is_err());
        let mut h = [0u8; 8];
        a.read_header(0, &mut h).unwrap();
        assert_eq!(&h, b"12345678");
        assert_eq!(s, b"abcd");
        assert!(a.seal(65).is_err());
    }

    #[test]
    fn shared_map_reads_by_copy_and_resyncs_with_views_alive() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("f");
        std::fs::write(&p, vec![b'x'; 3 * 4096]).unwrap();
        let m = Map::open(&p, Mode::ReadWrite).unwrap().into_shared();
        let view = m.as_ptr(); // a raw view, as a Python buffer would hold
        m.write_at(1, b"yz").unwrap();
        assert_eq!(m.byte_at(2).unwrap(), b'z');
        assert!(m.eq_at(1, b"yz").unwrap());
        // Another process truncates the file: the guard zero-fills.
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(4096).unwrap();
        let mut b = [1u8];
        assert!(matches!(m.read_at(2 * 4096, &mut b), Err(Error::FileTruncated { .. })));
        // The file comes back longer: resync while the view exists.
        std::fs::OpenOptions::new()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all_at(&[b'w'; 2 * 4096], 4096)
            .unwrap();
        assert_eq!(m.resync(false).unwrap(), 3 * 4096);
        assert_eq!(m.as_ptr(), view);
        m.check().unwrap();
        assert_eq!(m.byte_at(2 * 4096 + 5).unwrap(), b'w');
        // SAFETY-free check through the copy API of what the view sees.
        let mut all = vec![0u8; 3 * 4096];
        m.read_at(0, &mut all).unwrap();
        assert_eq!(&all[..3], b"xyz");
        // Shrunk again: resync shortens the map, the view's pages stay mapped.
        std::fs::OpenOptions::new().write(true).open(&p).unwrap().set_len(100).unwrap();
        assert_eq!(m.resync(false).unwrap(), 100);
        assert_eq!(m.as_ptr(), view);
        m.check().unwrap();
        assert_eq!(m.byte_at(99).unwrap(), b'x');
    }

    use std::os::unix::fs::FileExt;
}

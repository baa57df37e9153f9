//! Shared-memory arrays: [`Segment`].
//!
//! A named segment is a `.npy` file in a memory file system (`/dev/shm` by
//! default), so the name alone tells an attaching process the dtype and
//! shape, and `np.load("/dev/shm/NAME", mmap_mode="r+")` works too. An
//! anonymous segment is the same layout in a memfd, inherited by forked
//! children and reachable by others as `/proc/PID/fd/FD` while its creator
//! lives.
//!
//! # Reference counting
//!
//! Every handle ([`Segment::create`], [`Segment::attach`]) holds a shared
//! `flock` on the segment for as long as it lives. A handle created or
//! attached with `unlink_on_close` removes the name when it is dropped
//! **only if it can take the lock exclusively**, i.e. no other process
//! holds the segment; an attacher that opened the file just before the
//! removal notices (the name no longer leads to its file) and fails with
//! `ENOENT` instead of using an orphan. So a segment survives its
//! creator's exit while others use it, and disappears with the last user;
//! [`Segment::unlink`] removes the name at once (mappings stay valid, as
//! with `shm_unlink`). A process killed without unwinding leaves the name
//! until the last remaining user closes (or forever if there is none:
//! `unlink` it, or look in `/dev/shm`).
//!
//! Space is allocated at creation (`fallocate`), so a `/dev/shm` too small
//! for the segment is an [`Error::DiskFull`] from [`Segment::create`] and
//! never a `SIGBUS` later.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::npy::Header;
use crate::map::{Map, MapOptions, Mode, SharedMap};
use crate::{Error, Result};

/// Where named segments live by default.
pub const SHM_DIR: &str = "/dev/shm";

/// A shared-memory array; see the [module docs](self).
#[derive(Debug)]
pub struct Segment {
    map: SharedMap,
    path: PathBuf,
    header: Header,
    data_off: usize,
    nbytes: usize,
    /// (device, inode) of the named file, to recognise it at unlink time.
    id: Option<(u64, u64)>,
    unlink_on_close: bool,
    /// The process that made this handle: a forked child inherits the
    /// handle but not the right to unlink (it shares the parent's lock).
    owner: u32,
}

// std's flock is stable since 1.89; the workspace MSRV still says 1.85
// (to be bumped when merging), hence the allows.
fn lock_shared(file: &std::fs::File) -> std::io::Result<()> {
    file.lock_shared()
}

/// Takes (or converts our shared lock to) an exclusive lock if nobody else
/// holds the file.
fn try_lock(file: &std::fs::File) -> bool {
    file.try_lock().is_ok()
}

fn ident(meta: &std::fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

/// The path of segment `name` in `dir`. Names are single path components.
pub fn segment_path(name: &str, dir: Option<&Path>) -> Result<PathBuf> {
    let bad =
        name.is_empty() || name == "." || name == ".." || name.contains('/') || name.contains('\0');
    if bad {
        return Err(Error::InvalidArgument(format!(
            "invalid shared-memory name {name:?}: use a non-empty name without '/'"
        )));
    }
    Ok(dir.unwrap_or(Path::new(SHM_DIR)).join(name))
}

fn nbytes_of(label: &Path, item_size: usize, shape: &[u64]) -> Result<usize> {
    shape
        .iter()
        .try_fold(item_size as u64, |a, &d| a.checked_mul(d))
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(|| Error::invalid(label, format!("shape {shape:?} is too large")))
}

impl Segment {
    /// Creates the named segment `path` (failing with `EEXIST` if it
    /// exists) holding a zeroed C-order array of `shape` and dtype `descr`
    /// (header literal) with `item_size`-byte items, and attaches to it.
    pub fn create(
        path: impl AsRef<Path>,
        descr: &str,
        item_size: usize,
        shape: &[u64],
        unlink_on_close: bool,
    ) -> Result<Segment> {
        let path = path.as_ref();
        let nbytes = nbytes_of(path, item_size, shape)?;
        let header =
            Header { descr: descr.trim().to_owned(), fortran_order: false, shape: shape.to_vec() };
        let bytes = header.encode()?;
        let total = (bytes.len() as u64).saturating_add(nbytes as u64);
        // Built under a temporary name and linked into place complete
        // (link fails if the name exists), so an attacher never sees a
        // segment without its header.
        let tmp = crate::fs::TempFile::beside(path)?;
        let file = tmp.file().try_clone().map_err(|e| Error::io(path, "create", e))?;
        tmp.file()
            .set_permissions(std::fs::Permissions::from_mode(0o600))
            .map_err(|e| Error::io(tmp.path(), "fchmod", e))?;
        lock_shared(&file).map_err(|e| Error::io(path, "flock", e))?;
        let id = ident(&file.metadata().map_err(|e| Error::io(path, "stat", e))?);
        crate::map::allocate(&file, path, total)?;
        let mut map = MapOptions::new().mode(Mode::ReadWrite).reserve(0).map(file, path)?;
        map.write_at(0, &bytes)?;
        let map = map.into_shared();
        tmp.link_to(path)?;
        Ok(Segment {
            map,
            path: path.to_owned(),
            header,
            data_off: bytes.len(),
            nbytes,
            id: Some(id),
            unlink_on_close,
            owner: std::process::id(),
        })
    }

    /// Attaches to an existing segment (or any `.npy` file): read-write,
    /// or read-only when `writable` is false.
    pub fn attach(
        path: impl AsRef<Path>,
        writable: bool,
        unlink_on_close: bool,
    ) -> Result<Segment> {
        let path = path.as_ref();
        let how = if writable { crate::fs::InPlace::Write } else { crate::fs::InPlace::Read };
        let file = crate::fs::open_in_place(path, how)?;
        lock_shared(&file).map_err(|e| Error::io(path, "flock", e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
        if meta.is_dir() {
            return Err(Error::io(path, "open", std::io::Error::from_raw_os_error(libc::EISDIR)));
        }
        // The last user may have removed the name between our open and our
        // lock: then this file is an orphan and the segment is gone.
        let id = ident(&meta);
        let named = !path.starts_with("/proc");
        if named && std::fs::metadata(path).map(|m| ident(&m)).ok() != Some(id) {
            return Err(Error::io(path, "attach", std::io::Error::from_raw_os_error(libc::ENOENT)));
        }
        let (header, data_off) = super::array::read_header(&file, path)?;
        if header.fortran_order && header.shape.len() > 1 {
            return Err(Error::Format {
                path: path.to_owned(),
                detail: "Fortran-order arrays are not supported".into(),
            });
        }
        super::array::check_descr(path, &header)?;
        let item_size = header.item_size();
        let nbytes = match item_size {
            Some(n) => nbytes_of(path, n, &header.shape)?,
            // Structured dtypes: trust the file length (the binding checks
            // it against numpy's itemsize).
            None => (meta.len() as usize).saturating_sub(data_off),
        };
        if (meta.len() as u128) < data_off as u128 + nbytes as u128 {
            return Err(Error::Format {
                path: path.to_owned(),
                detail: format!(
                    "the header says {nbytes} data bytes but the file has only {}",
                    meta.len()
                ),
            });
        }
        let mode = if writable { Mode::ReadWrite } else { Mode::Read };
        // A segment never grows: no address space reserved for growth, so
        // attaching is one mmap (and closing unmaps no big reservation).
        let map = MapOptions::new()
            .mode(mode)
            .len(data_off + nbytes)
            .reserve(0)
            .map_with_meta(file, path, meta)?
            .into_shared();
        Ok(Segment {
            map,
            path: path.to_owned(),
            header,
            data_off,
            nbytes,
            id: named.then_some(id),
            unlink_on_close: unlink_on_close && named,
            owner: std::process::id(),
        })
    }

    /// An anonymous segment (memfd): shared with children forked later,
    /// reachable by other processes as [`Segment::path`]
    /// (`/proc/PID/fd/FD`) while this process keeps it open.
    pub fn anonymous(descr: &str, item_size: usize, shape: &[u64]) -> Result<Segment> {
        let label = Path::new("<anonymous>");
        let nbytes = nbytes_of(label, item_size, shape)?;
        let header =
            Header { descr: descr.trim().to_owned(), fortran_order: false, shape: shape.to_vec() };
        let bytes = header.encode()?;
        let mut map = Map::anonymous(bytes.len() + nbytes)?;
        crate::map::allocate(map.file(), label, (bytes.len() + nbytes) as u64)?;
        map.write_at(0, &bytes)?;
        let map = map.into_shared();
        use std::os::fd::AsRawFd;
        let path =
            PathBuf::from(format!("/proc/{}/fd/{}", std::process::id(), map.file().as_raw_fd()));
        Ok(Segment {
            map,
            path,
            header,
            data_off: bytes.len(),
            nbytes,
            id: None,
            unlink_on_close: false,
            owner: std::process::id(),
        })
    }

    /// The file behind the segment (for anonymous ones, a `/proc` path
    /// valid while the creating process keeps it open).
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The `.npy` header (dtype literal and shape).
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// File offset of the data.
    pub fn data_offset(&self) -> usize {
        self.data_off
    }
    /// Bytes of array data.
    pub fn nbytes(&self) -> usize {
        self.nbytes
    }
    /// Whether the data is writable through this handle.
    pub fn is_writable(&self) -> bool {
        self.map.is_writable()
    }
    /// Whether this is a memfd segment.
    pub fn is_anonymous(&self) -> bool {
        self.map.is_anonymous()
    }
    /// Pointer to the first data byte, valid for [`nbytes`](Self::nbytes)
    /// while the segment lives (writable when [`is_writable`](Self::is_writable)).
    pub fn data_ptr(&self) -> *const u8 {
        self.map.as_ptr().wrapping_add(self.data_off)
    }
    /// A copy of `buf.len()` data bytes from `offset` (the data is shared
    /// and written through raw views, so no slice of it is handed out).
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> Result<()> {
        let at = self.data_range("read", offset, buf.len())?;
        self.map.read_at(at, buf)
    }
    /// Writes `bytes` at `offset` into the data.
    pub fn write_at(&self, offset: usize, bytes: &[u8]) -> Result<()> {
        let at = self.data_range("write", offset, bytes.len())?;
        self.map.write_at(at, bytes)
    }
    /// The map offset of data bytes `[offset, offset+len)`, if inside the array.
    fn data_range(&self, what: &str, offset: usize, len: usize) -> Result<usize> {
        if offset.checked_add(len).is_none_or(|e| e > self.nbytes) {
            return Err(Error::invalid(
                &self.path,
                format!(
                    "{what} of {len} bytes at {offset} is outside the {}-byte array",
                    self.nbytes
                ),
            ));
        }
        Ok(self.data_off + offset)
    }

    /// Removes the segment's name now: nobody can attach any more; every
    /// existing mapping stays valid until closed. Removing an already
    /// removed name is not an error; a name that now belongs to another
    /// segment is left alone.
    pub fn unlink(&self) -> Result<()> {
        let Some(id) = self.id else { return Ok(()) };
        match std::fs::metadata(&self.path) {
            Ok(m) if ident(&m) == id => crate::fs::remove_file(&self.path).map(drop),
            Ok(_) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(Error::io(&self.path, "stat", e)),
        }
    }
}

impl Segment {
    /// Turns `unlink_on_close` on or off after attaching (a caller that
    /// validates the segment first attaches with it off, so that a
    /// rejected segment is not removed). Never on for unnamed segments.
    pub fn set_unlink_on_close(&mut self, on: bool) {
        self.unlink_on_close = on && self.id.is_some();
    }
}

impl Drop for Segment {
    /// Releases this handle; with `unlink_on_close`, removes the name if no
    /// other process holds the segment (see the module docs).
    fn drop(&mut self) {
        if self.unlink_on_close && self.owner == std::process::id() && try_lock(self.map.file()) {
            let _ = self.unlink();
        }
    }
}

#[cfg(test)]
mod tests;

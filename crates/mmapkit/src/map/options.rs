//! [`MapOptions`]: the builder every map is opened through, and the
//! opening itself (reserve, map over the start, the guard's slot).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};

use libc::c_int;

use super::*;
use crate::sys;
use crate::{Error, Result};

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

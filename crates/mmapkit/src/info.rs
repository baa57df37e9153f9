//! Size, allocated blocks and page-cache residency of files.
//!
//! This module holds no `unsafe` code: residency comes from
//! [`Map::residency`](crate::map::Map::residency) and eviction from
//! [`drop_cache`](crate::map::drop_cache), both in [`crate::map`].
//!
//! ```no_run
//! let info = mmapkit::info::file_info("data.bin".as_ref())?;
//! println!("{} of {} bytes are in the page cache", info.resident, info.size);
//! mmapkit::info::evict("data.bin".as_ref())?;
//! # Ok::<(), mmapkit::Error>(())
//! ```

use std::fs::{self, Metadata};
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::map::{self, Map, Mode};
use crate::{Error, ErrorKind, Result};

/// What [`file_info`] reports about one regular file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileInfo {
    /// The path, as given.
    pub path: PathBuf,
    /// Logical size in bytes (`st_size`).
    pub size: u64,
    /// Bytes of disk actually allocated (`st_blocks * 512`); less than
    /// [`size`](Self::size) for sparse files, possibly more for small files.
    pub allocated: u64,
    /// Bytes of the file currently in the page cache, at most
    /// [`size`](Self::size) (a resident partial last page counts only up
    /// to the end of the file).
    pub resident: u64,
    /// Number of pages the file spans (`size` rounded up to whole pages).
    pub pages: u64,
    /// How many of those pages are in the page cache.
    pub resident_pages: u64,
}

impl FileInfo {
    /// Fraction of the file that is resident, from 0.0 to 1.0 (0.0 for an
    /// empty file).
    pub fn resident_fraction(&self) -> f64 {
        if self.pages == 0 {
            0.0
        } else {
            self.resident_pages as f64 / self.pages as f64
        }
    }
}

/// Reports size, allocation and page-cache residency of the regular file at
/// `path` (symbolic links are followed).
///
/// Looking at residency does not read the file, so it does not change it.
/// Errors name the path: a missing or unreadable file gives
/// [`Error::Io`], a directory or other non-regular file gives
/// [`Error::Invalid`] (kind `IsADirectory` or `NotAFile`).
pub fn file_info(path: &Path) -> Result<FileInfo> {
    let meta = regular_file_metadata(path)?;
    let size = meta.len();
    let allocated = meta.blocks().saturating_mul(512);

    let residency = Map::open(path, Mode::Read)?.residency()?;

    let page = map::page_size() as u64;
    let pages = size.div_ceil(page);
    let resident = residency.resident_bytes.min(size);
    let resident_pages = resident.div_ceil(page).min(pages);

    Ok(FileInfo { path: path.to_owned(), size, allocated, resident, pages, resident_pages })
}

/// Drops the pages of the regular file at `path` from the page cache
/// (after writing back dirty ones), via [`map::drop_cache`].
///
/// This is advice to the kernel: pages that another process has mapped
/// and locked, or that are being written, may stay. Errors name the path,
/// as for [`file_info`].
pub fn evict(path: &Path) -> Result<()> {
    regular_file_metadata(path)?;
    map::drop_cache(path)
}

/// `stat`s `path` and rejects anything that is not a regular file, before
/// any `open` (which could block on a FIFO).
fn regular_file_metadata(path: &Path) -> Result<Metadata> {
    let meta = fs::metadata(path).map_err(|e| Error::io(path, "stat", e))?;
    let ft = meta.file_type();
    if ft.is_file() {
        return Ok(meta);
    }
    if ft.is_dir() {
        return Err(Error::Invalid {
            path: path.to_owned(),
            kind: ErrorKind::IsADirectory,
            detail: "is a directory".into(),
        });
    }
    let what = if ft.is_fifo() {
        "is a FIFO, not a regular file"
    } else if ft.is_socket() {
        "is a socket, not a regular file"
    } else if ft.is_block_device() || ft.is_char_device() {
        "is a device, not a regular file"
    } else {
        "is not a regular file"
    };
    Err(Error::not_a_file(path, what))
}

#[cfg(test)]
mod tests;

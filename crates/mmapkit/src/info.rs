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
mod tests {
    use super::*;
    use std::io::Write;

    const MIB: u64 = 1 << 20;

    #[test]
    fn sparse_file_allocates_less_than_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sparse.bin");
        let mut f = fs::File::create(&path).unwrap();
        f.set_len(10 * MIB).unwrap();
        f.write_all(&[0xAB; 4096]).unwrap();
        f.sync_all().unwrap();
        drop(f);

        let info = file_info(&path).unwrap();
        let page = map::page_size() as u64;
        assert_eq!(info.path, path);
        assert_eq!(info.size, 10 * MIB);
        assert!(info.allocated > 0, "{info:?}");
        assert!(info.allocated < info.size, "{info:?}");
        assert_eq!(info.pages, (10 * MIB).div_ceil(page));
        assert!(info.resident <= info.size, "{info:?}");
        assert!(info.resident_pages <= info.pages, "{info:?}");
    }

    #[test]
    fn empty_file_is_all_zeros() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("empty");
        fs::File::create(&path).unwrap();

        let info = file_info(&path).unwrap();
        assert_eq!(
            info,
            FileInfo {
                path: path.clone(),
                size: 0,
                allocated: 0,
                resident: 0,
                pages: 0,
                resident_pages: 0,
            }
        );
        assert_eq!(info.resident_fraction(), 0.0);
    }

    #[test]
    fn directory_is_rejected_naming_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let err = file_info(dir.path()).unwrap_err();
        assert_eq!(
            (err.kind(), err.errno(), err.path()),
            (ErrorKind::IsADirectory, Some(libc::EISDIR), Some(dir.path()))
        );
        let msg = err.to_string();
        assert!(msg.contains(&*dir.path().to_string_lossy()), "{msg}");
        assert!(msg.contains("is a directory"), "{msg}");

        let err = evict(dir.path()).unwrap_err();
        assert!(err.to_string().contains("is a directory"), "{err}");
    }

    #[test]
    fn missing_file_error_names_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("no-such-file");
        let err = file_info(&path).unwrap_err();
        assert_eq!(err.raw_os_error(), Some(libc::ENOENT), "{err:?}");
        assert_eq!(err.path(), Some(path.as_path()));
        let msg = err.to_string();
        assert!(msg.contains(&*path.to_string_lossy()), "{msg}");

        let err = evict(&path).unwrap_err();
        assert!(err.to_string().contains(&*path.to_string_lossy()), "{err}");
    }

    #[test]
    fn fifo_is_rejected_without_blocking() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo").arg(&path).status();
        if !matches!(status, Ok(s) if s.success()) {
            return; // no mkfifo on this system: nothing to test
        }
        let err = file_info(&path).unwrap_err();
        assert_eq!((err.kind(), err.path()), (ErrorKind::NotAFile, Some(path.as_path())));
        assert!(err.to_string().contains("not a regular file"), "{err}");
    }
}

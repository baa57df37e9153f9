//! Segment files: naming, creation (temp file + fallocate + rename), the
//! generation bump by rename, and directory fsync.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;

use super::format::{self, HEADER_LEN};
use crate::map::{Map, Mode};
use crate::{Error, Result};

/// `{first_index:020}-{generation:08}.seg`: sorted by name = sorted by
/// first index; the generation makes every incarnation's name unique.
pub(crate) fn seg_name(first: u64, gen: u32) -> String {
    format!("{first:020}-{gen:08}.seg")
}

/// (first index, generation) from a segment file name.
pub(crate) fn parse_name(name: &str) -> Option<(u64, u32)> {
    let stem = name.strip_suffix(".seg")?;
    let (a, b) = stem.split_once('-')?;
    if a.len() != 20 || b.len() < 8 || !a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((a.parse().ok()?, b.parse().ok()?))
}

/// Makes directory entry changes (create, rename, unlink) durable.
pub(crate) fn sync_dir(dir: &Path) -> Result<()> {
    crate::fs::sync_dir(dir)
}

/// One segment file, mapped whole.
pub(crate) struct SegFile {
    pub first: u64,
    gen: AtomicU32,
    path: Mutex<PathBuf>,
    pub map: Map,
}

impl SegFile {
    /// Creates segment `first` of generation `gen` with `size` allocated
    /// bytes: written under a temporary name and renamed, so a crash never
    /// leaves a segment without a valid header. A full disk is
    /// [`Error::DiskFull`] and leaves nothing behind.
    pub fn create(dir: &Path, first: u64, gen: u32, size: u64) -> Result<SegFile> {
        let path = dir.join(seg_name(first, gen));
        // `.NAME.mmapkit-PID-N.tmp`: removed on a signal, or by the next
        // writer if this process dies (see crate::fs).
        let tmp = crate::fs::TempFile::beside(&path)?;
        let m = Map::create(tmp.path(), size)?;
        m.write_at(0, &format::encode_header(first))?;
        m.flush_range(0, HEADER_LEN, true)?;
        drop(m);
        tmp.rename_to(&path, false)?;
        sync_dir(dir)?;
        Self::open(path, first, gen, true)
    }

    /// Maps an existing segment and checks its header.
    pub fn open(path: PathBuf, first: u64, gen: u32, writable: bool) -> Result<SegFile> {
        let map = Map::open(
            &path,
            if writable {
                Mode::ReadWrite
            } else {
                Mode::Read
            },
        )?;
        match format::decode_header(map.as_slice()) {
            Ok(f) if f == first => {}
            Ok(f) => {
                return Err(Error::Corrupt {
                    path,
                    detail: format!("segment header says first index {f}, its name says {first}"),
                })
            }
            Err(what) => {
                return Err(Error::Corrupt {
                    path,
                    detail: what.into(),
                })
            }
        }
        Ok(SegFile {
            first,
            gen: AtomicU32::new(gen),
            path: Mutex::new(path),
            map,
        })
    }

    pub fn gen(&self) -> u32 {
        self.gen.load(Ordering::Acquire)
    }

    pub fn path(&self) -> PathBuf {
        self.path.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Renames the file to generation `gen` (durably): batches written
    /// from now on carry this epoch, larger than any stale batch's.
    pub fn bump_gen(&self, dir: &Path, gen: u32) -> Result<()> {
        let mut p = self.path.lock().unwrap_or_else(|e| e.into_inner());
        let new = dir.join(seg_name(self.first, gen));
        std::fs::rename(&*p, &new).map_err(|e| Error::io(&p, "rename", e))?;
        sync_dir(dir)?;
        *p = new;
        self.gen.store(gen, Ordering::Release);
        Ok(())
    }

    pub fn data(&self) -> &[u8] {
        self.map.as_slice()
    }

    pub fn corrupt(&self, detail: String) -> Error {
        Error::Corrupt {
            path: self.path(),
            detail,
        }
    }
}

//! Segment files: naming, creation (temp file + fallocate + rename), the
//! generation bump by rename, and directory fsync.

use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, AtomicUsize, Ordering};
use std::sync::Mutex;

use super::format::{self, Header, HEADER_LEN};
use crate::map::{AppendMap, Map, Mode};
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

pub(crate) use crate::fs::sync_dir;

/// One segment file, mapped whole.
pub(crate) struct SegFile {
    pub first: u64,
    /// Its inode (a read-only view reuses a mapping only of the same file).
    pub ino: u64,
    /// What its header says (recorded file length, nominal segment size).
    pub header: Header,
    gen: AtomicU32,
    path: Mutex<PathBuf>,
    /// Bytes from 0 whose blocks zero-ahead wrote and synced (0: none
    /// yet; per file, so a rewritten copy starts over).
    pub zeroed: AtomicUsize,
    /// Bytes from 0 the populate-ahead was asked for (see
    /// `append::populate_ahead`; per mapping).
    pub populated: AtomicUsize,
    /// Sealed up to the end of the last committed batch: entries read
    /// from it never change; appends go past the seal, and only exclusive
    /// access ([`SegFile::rewrite`]) writes below it.
    pub map: AppendMap,
}

impl SegFile {
    /// Creates segment `first` of generation `gen` with `size` allocated
    /// bytes in a log of nominal `seg_size` segments: written under a
    /// temporary name and renamed, so a crash never leaves a segment
    /// without a valid header. The rename atomically replaces a segment of
    /// the same name (used to swap an empty tail for a larger one). A full
    /// disk is [`Error::DiskFull`] and leaves nothing behind.
    pub fn create(dir: &Path, first: u64, gen: u32, size: u64, seg_size: u64) -> Result<SegFile> {
        let f = Self::create_unlisted(dir, first, gen, size, seg_size)?;
        sync_dir(dir)?;
        Ok(f)
    }

    /// [`create`](Self::create) without the sync of `dir`: for a directory
    /// nobody sees yet (a new log built beside its place), whose one sync
    /// before it is renamed into place makes every entry durable at once.
    pub fn create_unlisted(
        dir: &Path,
        first: u64,
        gen: u32,
        size: u64,
        seg_size: u64,
    ) -> Result<SegFile> {
        let path = dir.join(seg_name(first, gen));
        // `.NAME.mmapkit-PID-N.tmp`: removed on a signal, or by the next
        // writer if this process dies (see crate::fs).
        let tmp = crate::fs::TempFile::beside(&path)?;
        let m = Map::create(tmp.path(), size)?;
        m.file()
            .write_all_at(&format::encode_header(first, size, seg_size), 0)
            .map_err(|e| Error::io(tmp.path(), "pwrite", e))?;
        m.flush_range(0, HEADER_LEN, true)?;
        drop(m);
        tmp.rename_to(&path, false)?;
        let mut f = Self::open(path, first, gen, true)?;
        f.map.set_sealed(HEADER_LEN)?;
        Ok(f)
    }

    /// Maps an existing segment and checks its header.
    pub fn open(path: PathBuf, first: u64, gen: u32, writable: bool) -> Result<SegFile> {
        let map = Map::open(&path, if writable { Mode::ReadWrite } else { Mode::Read })?;
        let header = match format::decode_header(map.as_slice()) {
            Ok(h) if h.first == first => h,
            Ok(h) => {
                return Err(Error::Corrupt {
                    path,
                    detail: format!(
                        "segment header says first index {}, its name says {first}",
                        h.first
                    ),
                })
            }
            Err(what) => return Err(Error::Corrupt { path, detail: what.into() }),
        };
        let len = map.len();
        let ino = {
            use std::os::unix::fs::MetadataExt;
            map.file().metadata().map_err(|e| Error::io(&path, "stat", e))?.ino()
        };
        Ok(SegFile {
            first,
            ino,
            header,
            gen: AtomicU32::new(gen),
            path: Mutex::new(path),
            zeroed: AtomicUsize::new(0),
            populated: AtomicUsize::new(0),
            map: AppendMap::new(map, 0, len)?,
        })
    }

    /// Moves the seal down to `pos` if it is above (exclusive access).
    pub fn unseal_from(&mut self, pos: usize) -> Result<()> {
        let sealed = self.map.sealed().min(pos);
        self.map.set_sealed(sealed)
    }

    /// A copy of this segment under the same name (the old file stays
    /// mapped, unchanged, for readers still holding entries of it), for a
    /// rewrite below the seal while it is shared.
    pub fn copy_for_rewrite(&self) -> Result<SegFile> {
        let path = self.path();
        let tmp = crate::fs::TempFile::beside(&path)?;
        let mut src = crate::fs::open_regular(&path, "a log segment")?;
        // copy_file_range under the hood: an in-kernel copy (a reflink
        // where the file system can).
        std::io::copy(&mut src, &mut tmp.file()).map_err(|e| Error::io(tmp.path(), "copy", e))?;
        tmp.rename_to(&path, true)?;
        Self::open(path, self.first, self.gen(), true)
    }

    /// Unseals from `pos` on and writes `bytes` there, durably (exclusive
    /// access: no entry of this mapping is being read).
    pub fn rewrite(&mut self, pos: usize, bytes: &[u8]) -> Result<()> {
        self.unseal_from(pos)?;
        self.map.get_mut().write_at(pos, bytes)?;
        self.map.flush_range(pos, bytes.len(), true)
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
        crate::fs::rename(&p, &new)?;
        sync_dir(dir)?;
        *p = new;
        self.gen.store(gen, Ordering::Release);
        Ok(())
    }

    /// The sealed bytes, from offset 0 (header included).
    pub fn data(&self) -> &[u8] {
        self.map.sealed_slice()
    }

    /// `Some(recorded length)` when the file is not as long as its header
    /// says (segments are preallocated whole: it was truncated, or, when
    /// longer, written past its end by something else; see [`SegFile::long`]).
    pub fn short(&self) -> Option<u64> {
        self.header.file_len.filter(|&l| l != self.map.len() as u64)
    }

    /// The error for a file longer than its header records: nothing of the
    /// log's goes there, so no repair can tell what it is.
    pub fn long(&self) -> Option<Error> {
        let (have, want) = (self.map.len() as u64, self.header.file_len?);
        (have > want).then(|| {
            self.corrupt(format!(
                "the file is {have} bytes, longer than the {want} its header records"
            ))
        })
    }

    pub fn corrupt(&self, detail: String) -> Error {
        Error::Corrupt { path: self.path(), detail }
    }
}

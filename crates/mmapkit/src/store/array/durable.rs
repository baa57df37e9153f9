//! The durable-rows record of a store being written (`.NAME.mmapkit-durable`
//! beside it), which keeps a power loss from leaving a header that counts
//! rows whose data never reached the disk.
//!
//! An append publishes the new row count in the mapped header at once
//! (live readers and a reopening writer after a crash of the process must
//! see it), and the kernel may write that page back before the rows'
//! pages. So the header alone cannot be trusted after a power loss. The
//! record says how many rows a returned [`ArrayStore::flush`] made
//! durable, and in which boot: when a store is opened in a later boot
//! (the machine went down) and the header counts more rows than the
//! record, only the recorded rows are trusted (readers see that many; a
//! writer cuts the header back to it). In the same boot the page cache
//! still holds every published row, so the header is right.
//!
//! The record is created durably (temp file, fsync, rename, directory
//! fsync) when a writer opens the store, rewritten in place (one
//! 72-byte sector write + fdatasync) by every flush, and removed on
//! close. It names the store's content (a checksum of the header with the
//! row count masked, and of the last durable row), so a record left by a
//! writer that died is ignored once the file was replaced by something
//! else (`np.save` over it). A writer that cannot create it (read-only
//! directory) goes on without it, and then has only the older guarantee:
//! rows flushed are there after a power loss.
//!
//! [`ArrayStore::flush`]: super::ArrayStore::flush

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use super::Header;
use crate::{Error, Result};

const MAGIC: &[u8; 16] = b"MMAPKIT-DURABLE\x01";
const BOOT_LEN: usize = 40;
const LEN: usize = 16 + 8 + 4 + BOOT_LEN + 4;
/// Reads of a record that does not check out before it is called damaged
/// (a concurrent in-place update settles within one of them).
const RACE_RETRIES: usize = 20;

/// The record's path for the store file `path` (symlinks resolved: the
/// record belongs to the file, wherever it is opened from).
pub(super) fn path_of(path: &Path) -> PathBuf {
    let real = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let name = real.file_name().unwrap_or_default().to_string_lossy().into_owned();
    real.with_file_name(format!(".{name}.mmapkit-durable"))
}

/// This boot's id (with the `test-hooks` feature, `MMAPKIT_TEST_BOOT_ID`
/// stands in for it in power-loss tests, where the "reboot" is an
/// unmount; never in release builds: it decides which rows are trusted).
fn boot_id() -> [u8; BOOT_LEN] {
    #[cfg(feature = "test-hooks")]
    let hook = std::env::var("MMAPKIT_TEST_BOOT_ID").ok();
    #[cfg(not(feature = "test-hooks"))]
    let hook = None;
    let id = hook
        .or_else(|| {
            let b = crate::fs::read_small(Path::new("/proc/sys/kernel/random/boot_id"), 64);
            Some(String::from_utf8_lossy(&b.ok()??).into_owned())
        })
        .unwrap_or_default();
    let mut b = [0u8; BOOT_LEN];
    let id = id.trim().as_bytes();
    let n = id.len().min(BOOT_LEN);
    b[..n].copy_from_slice(&id[..n]);
    b
}

/// A checksum naming the store's content: its header bytes (from the
/// file: another writer's layout differs) with the row count field
/// masked, and its row `rows - 1`.
pub(super) fn fingerprint(
    file: &File,
    path: &Path,
    header: &Header,
    data_off: usize,
    row_bytes: usize,
    rows: u64,
) -> Result<u32> {
    let mut head = vec![0u8; data_off];
    read_exact_at(file, path, &mut head, 0)?;
    if let Ok((_, field)) = header.encode_growable(data_off) {
        head[field].fill(0);
    }
    let c = crc32c::crc32c_append(crc32c::crc32c(&(data_off as u64).to_le_bytes()), &head);
    if rows == 0 {
        return Ok(c);
    }
    // The row length comes from the header: hashed through a fixed
    // buffer, never allocated whole.
    let mut c = c;
    let mut buf = vec![0u8; row_bytes.min(1 << 16)];
    let (mut at, mut left) = (data_off as u64 + (rows - 1) * row_bytes as u64, row_bytes);
    while left > 0 {
        let n = left.min(buf.len());
        read_exact_at(file, path, &mut buf[..n], at)?;
        c = crc32c::crc32c_append(c, &buf[..n]);
        at += n as u64;
        left -= n;
    }
    Ok(c)
}

/// `pread` of exactly `buf.len()` bytes; a short file reads as zeros
/// past its end (the fingerprint then just does not match).
fn read_exact_at(file: &File, path: &Path, buf: &mut [u8], at: u64) -> Result<()> {
    let done = crate::map::pread_full(file, buf, at).map_err(|e| Error::io(path, "read", e))?;
    buf[done..].fill(0);
    Ok(())
}

fn encode(rows: u64, fp: u32) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..16].copy_from_slice(MAGIC);
    b[16..24].copy_from_slice(&rows.to_le_bytes());
    b[24..28].copy_from_slice(&fp.to_le_bytes());
    b[28..28 + BOOT_LEN].copy_from_slice(&boot_id());
    let crc = crc32c::crc32c(&b[..LEN - 4]);
    b[LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    b
}

/// What a record says: durable rows, the fingerprint at that count, and
/// whether it was written in this boot.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Record {
    pub rows: u64,
    pub fingerprint: u32,
    pub this_boot: bool,
}

/// Reads the record at `rec` (`None` when there is none). A record that
/// does not check out is [`Error::Corrupt`]: it is only ever written
/// whole (one sector), so damage is not a crash's doing.
pub(super) fn read(rec: &Path) -> Result<Option<Record>> {
    let not_regular = || Error::Corrupt {
        path: rec.to_owned(),
        detail: "the durable-rows record is not a regular file".into(),
    };
    // One open, then fstat and pread through it: the name cannot be
    // swapped between the check and the read. O_NONBLOCK: a FIFO planted
    // under the name must not block the open; O_NOFOLLOW: nor a symlink
    // lead elsewhere.
    let file = match crate::fs::open_nonblocking(rec, libc::O_NOFOLLOW) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => return Err(not_regular()),
        Err(e) => return Err(Error::io(rec, "open", e)),
    };
    if !file.metadata().map_err(|e| Error::io(rec, "stat", e))?.file_type().is_file() {
        return Err(not_regular());
    }
    // One byte more than a record: enough to tell a longer file, whatever
    // length it has, without reading (or allocating) the rest. A writer
    // rewrites the record in place (`Durable::update`), and a buffered read
    // racing that write can see half of each: a record that does not check
    // out is read again a few times before it is called damaged.
    let mut b = vec![0u8; LEN + 1];
    let mut ok = false;
    for attempt in 0..RACE_RETRIES {
        if attempt > 0 {
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        b.resize(LEN + 1, 0);
        let n = crate::map::pread_full(&file, &mut b, 0).map_err(|e| Error::io(rec, "read", e))?;
        b.truncate(n);
        ok = b.len() == LEN
            && crc32c::crc32c(&b[..LEN - 4]).to_le_bytes() == b[LEN - 4..]
            && &b[..16] == MAGIC;
        if ok {
            break;
        }
    }
    if !ok {
        return Err(Error::Corrupt {
            path: rec.to_owned(),
            detail:
                "not a valid durable-rows record (remove it to trust the store's header as it is)"
                    .into(),
        });
    }
    Ok(Some(Record {
        rows: u64::from_le_bytes(b[16..24].try_into().expect("8 bytes")),
        fingerprint: u32::from_le_bytes(b[24..28].try_into().expect("4 bytes")),
        this_boot: b[28..28 + BOOT_LEN] == boot_id(),
    }))
}

/// The open record of a writer.
#[derive(Debug)]
pub(super) struct Durable {
    file: File,
    path: PathBuf,
}

impl Durable {
    /// Creates (or replaces) the record durably, saying `rows` with
    /// fingerprint `fp`. `None` when the directory does not let us
    /// (read-only, no permission): the store works without it.
    pub(super) fn create(rec: &Path, rows: u64, fp: u32) -> Result<Option<Durable>> {
        let tmp = match crate::fs::TempFile::beside(rec) {
            Ok(t) => t,
            Err(e)
                if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EROFS | libc::EPERM)) =>
            {
                return Ok(None)
            }
            Err(e) => return Err(e),
        };
        tmp.file()
            .write_all_at(&encode(rows, fp), 0)
            .and_then(|()| tmp.file().sync_all())
            .map_err(|e| Error::io(tmp.path(), "write", e))?;
        let file = tmp.file().try_clone().map_err(|e| Error::io(tmp.path(), "dup", e))?;
        tmp.rename_to(rec, true)?;
        Ok(Some(Durable { file, path: rec.to_owned() }))
    }

    /// Records `rows` (with fingerprint `fp`) as durable: one sector,
    /// synced before this returns.
    pub(super) fn update(&self, rows: u64, fp: u32) -> Result<()> {
        self.file
            .write_all_at(&encode(rows, fp), 0)
            .and_then(|()| self.file.sync_data())
            .map_err(|e| Error::io(&self.path, "write", e))
    }

    /// Removes the record (the store was closed with everything durable).
    pub(super) fn remove(self) -> Result<()> {
        crate::fs::remove_file(&self.path)?;
        crate::fs::sync_dir(self.path.parent().unwrap_or(Path::new(".")))
    }
}

/// Tests: rewrites the record at `rec` as if written in another boot
/// (`this_boot`: in this one), with a valid checksum.
#[cfg(test)]
pub(super) fn set_boot(rec: &Path, this_boot: bool) {
    let mut b = std::fs::read(rec).unwrap();
    let id = if this_boot { boot_id() } else { [b'x'; BOOT_LEN] };
    b[28..28 + BOOT_LEN].copy_from_slice(&id);
    let crc = crc32c::crc32c(&b[..LEN - 4]);
    b[LEN - 4..].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(rec, b).unwrap();
}

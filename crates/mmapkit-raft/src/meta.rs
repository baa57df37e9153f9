//! Small metadata files (vote, purge point, committed id): whole or absent.
//!
//! Each file is JSON followed by a line `crc32c=XXXXXXXX` over the JSON,
//! written through `mmapkit::fs::AtomicFile` (temp file beside it, rename;
//! with `sync`, fsync of the file before and of the directory after). A
//! reader therefore sees the old content, the new content, or (for a file
//! written without `sync`, after a power loss) possibly an empty or torn
//! file, which the CRC tells apart from a valid one.

use std::io::Write;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Error, Result};

/// Replaces `path` with `value` (durably when `sync`).
pub(crate) fn write<T: Serialize>(path: &Path, value: &T, sync: bool) -> Result<()> {
    let mut body = serde_json::to_vec(value).map_err(|e| Error::Encode(e.to_string()))?;
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(format!("\ncrc32c={crc:08x}\n").as_bytes());
    let mut f = mmapkit::fs::AtomicFile::create(path, &[])?;
    f.file_mut().write_all(&body).map_err(|e| Error::Io(path.to_owned(), "write", e))?;
    f.commit(sync)?;
    Ok(())
}

/// Bytes of a record written in place (one sector: a power loss tears it
/// at worst, and the CRC tells).
const SLOT: usize = 512;

/// A small file overwritten in place, without sync, for hints written
/// often (openraft's committed id): one `pwrite` of one sector, no new
/// file, no rename, nothing for the next journal commit to carry. A torn
/// or stale record reads as damaged or old, never as a wrong value.
pub(crate) struct Slot {
    path: std::path::PathBuf,
    file: std::fs::File,
}

impl Slot {
    /// Opens (creating) the slot file at `path`.
    pub(crate) fn open(path: &Path) -> Result<Slot> {
        let file = mmapkit::fs::open_in_place(path, mmapkit::fs::InPlace::Create)?;
        Ok(Slot { path: path.to_owned(), file })
    }

    /// Overwrites the record with `value` (not synced).
    pub(crate) fn write<T: Serialize>(&self, value: &T) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let mut body = serde_json::to_vec(value).map_err(|e| Error::Encode(e.to_string()))?;
        let crc = crc32c::crc32c(&body);
        body.extend_from_slice(format!("\ncrc32c={crc:08x}\n").as_bytes());
        if body.len() > SLOT {
            return Err(Error::Encode(format!(
                "{} bytes do not fit a {SLOT}-byte slot",
                body.len()
            )));
        }
        body.resize(SLOT, 0);
        self.file.write_all_at(&body, 0).map_err(|e| Error::Io(self.path.clone(), "pwrite", e))
    }

    /// The record, if a whole one is there.
    pub(crate) fn read<T: DeserializeOwned>(&self) -> Result<Read<T>> {
        use std::os::unix::fs::FileExt;
        let mut buf = vec![0u8; SLOT];
        let n =
            self.file.read_at(&mut buf, 0).map_err(|e| Error::Io(self.path.clone(), "pread", e))?;
        buf.truncate(n);
        let end = buf.iter().rposition(|&b| b != 0).map_or(0, |p| p + 1);
        if end == 0 {
            return Ok(Read::Missing);
        }
        Ok(parse(&buf[..end]))
    }
}

/// What a metadata file holds.
pub(crate) enum Read<T> {
    Missing,
    Valid(T),
    /// Empty, torn or damaged (the detail says how).
    Damaged(String),
}

/// Reads `path`.
pub(crate) fn read<T: DeserializeOwned>(path: &Path) -> Result<Read<T>> {
    // Small JSON records: a longer file is refused before it is read.
    match mmapkit::fs::read_small(path, 1 << 20) {
        Ok(Some(bytes)) => Ok(parse(&bytes)),
        Ok(None) => Ok(Read::Missing),
        Err(e) if e.kind() == mmapkit::ErrorKind::Corrupt => Ok(Read::Damaged(e.message())),
        Err(e) => Err(e.into()),
    }
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Read<T> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(_) => return Read::Damaged("not UTF-8".into()),
    };
    let Some((body, tail)) = text.trim_end_matches('\n').rsplit_once('\n') else {
        return Read::Damaged(format!("no checksum line ({} bytes)", bytes.len()));
    };
    let Some(crc) = tail.strip_prefix("crc32c=").and_then(|h| u32::from_str_radix(h, 16).ok())
    else {
        return Read::Damaged("malformed checksum line".into());
    };
    if crc32c::crc32c(body.as_bytes()) != crc {
        return Read::Damaged("checksum mismatch".into());
    }
    match serde_json::from_str(body) {
        Ok(v) => Read::Valid(v),
        Err(e) => Read::Damaged(format!("checksummed but not readable: {e}")),
    }
}

#[cfg(test)]
mod tests;

//! `DIR/durable`: the durable watermark, published for readers in other
//! processes. A log server serves only entries a power loss cannot take
//! back (see `mmapkit_replicate`): a follower must never hold, as copied,
//! entries its leader loses when its disk returns to the last sync.
//!
//! 32 bytes, rewritten in place by one `pwrite` after every sync that
//! raises the watermark and every truncation that lowers it:
//! `magic:8 ("MKDURBL1") incarnation:u64 durable:u64 crc32c:u32 zero:u32`
//! (little-endian; the CRC covers the first 24 bytes). The file itself is
//! never synced, and need not be: a value is written only after the sync
//! that made it true returned, so whatever a reader sees was durable (a
//! truncation since is recorded in the truncation history, which readers
//! check anyway). The **incarnation** is random per writable open: what a
//! reader got past the watermark of one incarnation may be gone in the
//! next (a power loss between them took it), and followers that copied
//! such entries check for that. A log written only by versions before this
//! file existed has none: [`CommitLog::durable_mark`](super::CommitLog::durable_mark)
//! is `None`.

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::Result;

/// The file's name in the log directory.
pub(super) const FILE: &str = "durable";

const MAGIC: &[u8; 8] = b"MKDURBL1";
const LEN: usize = 32;

/// What a log's writer has made durable, as published for readers: see
/// [`CommitLog::durable_mark`](super::CommitLog::durable_mark).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DurableMark {
    /// Random per writable open of the log.
    pub incarnation: u64,
    /// Every entry up to this index was durable (synced) when published.
    pub durable: u64,
}

fn encode(m: DurableMark) -> [u8; LEN] {
    let mut b = [0u8; LEN];
    b[..8].copy_from_slice(MAGIC);
    b[8..16].copy_from_slice(&m.incarnation.to_le_bytes());
    b[16..24].copy_from_slice(&m.durable.to_le_bytes());
    let crc = crc32c::crc32c(&b[..24]);
    b[24..28].copy_from_slice(&crc.to_le_bytes());
    b
}

fn decode(b: &[u8]) -> Option<DurableMark> {
    let b = b.get(..LEN)?;
    if &b[..8] != MAGIC {
        return None;
    }
    let u = |r: std::ops::Range<usize>| u64::from_le_bytes(b[r].try_into().expect("8 bytes"));
    let crc = u32::from_le_bytes(b[24..28].try_into().expect("4 bytes"));
    (crc == crc32c::crc32c(&b[..24]))
        .then(|| DurableMark { incarnation: u(8..16), durable: u(16..24) })
}

/// Reads the published mark: `None` if the file is missing. A read
/// racing the writer's `pwrite` can see a mix of two values, which the
/// CRC refuses: read again a few times. A file that still holds no valid
/// mark was damaged: nothing is known durable (a mark of 0 in no
/// incarnation, until the writer's next publication), never "no mark",
/// which would serve everything.
pub(super) fn read(dir: &Path) -> Result<Option<DurableMark>> {
    let p = dir.join(FILE);
    for _ in 0..8 {
        match crate::fs::read_small(&p, 4096)? {
            None => return Ok(None),
            Some(b) => {
                if let Some(m) = decode(&b) {
                    return Ok(Some(m));
                }
            }
        }
        std::thread::yield_now();
    }
    Ok(Some(DurableMark { incarnation: 0, durable: 0 }))
}

/// The writer's handle on the file.
pub(super) struct Publisher {
    file: File,
    path: PathBuf,
    incarnation: u64,
}

impl Publisher {
    /// Opens (creating) the file for a new incarnation of the writer.
    pub fn open(dir: &Path) -> Result<Publisher> {
        let path = dir.join(FILE);
        let file = crate::fs::open_in_place(&path, crate::fs::InPlace::Create)?;
        let incarnation = u64::from_le_bytes(super::identity::random::<8>()?);
        Ok(Publisher { file, path, incarnation })
    }

    pub fn incarnation(&self) -> u64 {
        self.incarnation
    }

    /// Publishes `durable` (the caller holds the sync mutex, so values
    /// are written in the order they were set). Writing it is advisory: a
    /// failed write leaves an older value, lower (readers serve less,
    /// never more) or, after a truncation, one the truncation history
    /// already answers for; the next publication writes it again.
    pub fn publish(&self, durable: u64) -> Result<()> {
        let b = encode(DurableMark { incarnation: self.incarnation, durable });
        self.file.write_all_at(&b, 0).map_err(|e| crate::Error::io(&self.path, "write", e))
    }
}

#[cfg(test)]
mod tests;

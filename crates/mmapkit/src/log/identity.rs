//! A log's identity and its truncation history, what replication needs to
//! know *which* log it copies and *whether* entries it copied may have
//! changed since.
//!
//! * `DIR/log-id`: 32 hex digits and a newline, random, written once when
//!   the log is created (or first opened for writing by a version that did
//!   not have it), never changed. A follower records it and refuses a
//!   leader serving another log; a directory replaced by another log is
//!   told apart from the one that was served.
//! * `DIR/truncations`: append-only, 16-byte records
//!   `after:u64 kind:u32 crc32c:u32` (little-endian; the CRC covers the
//!   first 12 bytes). Every truncation that drops entries other processes
//!   may have seen writes an **intent** record (`kind` 1, the index it
//!   truncates after) and syncs it *before* it changes anything, and a
//!   **done** record (`kind` 2) after. Truncations are numbered from 0 in
//!   file order; the log's **epoch** is the number started, and
//!   [`cut_since(e)`](crate::log::CommitLog::cut_since) the lowest index
//!   any truncation numbered `e` or later cut after. A reader tags what it
//!   read with the number *completed* when it read (see
//!   [`Entries::epoch`](crate::log::Entries::epoch)): whatever it saw
//!   that is not in the log of that tag was changed by a truncation
//!   numbered at or after the tag, so a follower holding entries read under
//!   tag `t` that sees the leader at epoch `e > t` truncates its own copy
//!   after `cut_since(t)` and fetches the rest again. Recovery cutting a
//!   torn tail counts as a truncation too; a crash between intent and done
//!   is completed by the next writable open.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::Arc;

use crate::{Error, Result};

/// The file holding the log's id.
pub(super) const ID_FILE: &str = "log-id";
/// The truncation history.
pub(super) const CUTS_FILE: &str = "truncations";

const REC: usize = 16;
const INTENT: u32 = 1;
const DONE: u32 = 2;

/// Who a log is and how often it was truncated; see
/// [`CommitLog::identity`](crate::log::CommitLog::identity).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogIdentity {
    /// The random id written when the log was created (`None` only for a
    /// log made by an old version and never opened for writing since).
    pub id: Option<Arc<str>>,
    /// Truncations started (the epoch followers compare against).
    pub epoch: u64,
    /// Truncations completed (reads are tagged with this).
    pub completed: u64,
}

/// [`CommitLog::status`](crate::log::CommitLog::status): one view's identity and range.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LogStatus {
    /// Id and epoch.
    pub identity: LogIdentity,
    /// First index (of an empty log too).
    pub first_index: u64,
    /// Last index (`first_index - 1` when empty).
    pub last_index: u64,
    /// `cut_since(since)` when asked.
    pub cut_since: Option<u64>,
}

/// The truncation history as read from `DIR/truncations`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(super) struct Cuts {
    /// The index each truncation cut after, in order.
    pub after: Vec<u64>,
    /// How many of them completed (`after.len()` or one less).
    pub completed: u64,
    /// Bytes of whole, valid records (a writable open cuts the rest).
    valid_len: u64,
}

impl Cuts {
    pub fn epoch(&self) -> u64 {
        self.after.len() as u64
    }
    /// The truncation started and not completed (crash part-way).
    pub fn pending(&self) -> Option<u64> {
        (self.completed < self.epoch()).then(|| *self.after.last().expect("pending"))
    }
    /// The lowest index cut after by truncations numbered `epoch` or
    /// later; an error for an epoch this log never reached.
    pub fn cut_since(&self, dir: &Path, epoch: u64) -> Result<Option<u64>> {
        if epoch > self.epoch() {
            return Err(Error::invalid(
                dir,
                format!(
                    "epoch {epoch} is ahead of this log's {} (its truncation history went back: restored from a backup?)",
                    self.epoch()
                ),
            ));
        }
        Ok(self.after[epoch as usize..].iter().copied().min())
    }
}

/// Reads the log's id (`None` when the file does not exist).
pub(super) fn read_id(dir: &Path) -> Result<Option<Arc<str>>> {
    let p = dir.join(ID_FILE);
    let Some(b) = crate::fs::read_small(&p, 256)? else { return Ok(None) };
    let s = String::from_utf8_lossy(&b);
    let id = s.trim_end_matches('\n');
    if id.len() != 32 || !id.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(Error::Corrupt { path: p, detail: "the log id is not 32 hex digits".into() });
    }
    Ok(Some(id.into()))
}

/// `N` random bytes from the kernel (`/dev/urandom`).
pub(super) fn random<const N: usize>() -> Result<[u8; N]> {
    let mut raw = [0u8; N];
    let urandom = Path::new("/dev/urandom");
    let got = match crate::scan::source::open_input(urandom)? {
        crate::scan::source::Opened::Stream(mut r) => crate::map::read_full(&mut r, &mut raw),
        crate::scan::source::Opened::File { file, .. } => {
            crate::map::pread_full(&file, &mut raw, 0)
        }
    };
    if got.map_err(|e| Error::io(urandom, "read", e))? < raw.len() {
        return Err(Error::io(urandom, "read", std::io::ErrorKind::UnexpectedEof.into()));
    }
    Ok(raw)
}

/// The log's id, created (durably, never replacing one) if missing.
pub(super) fn ensure_id(dir: &Path) -> Result<Arc<str>> {
    if let Some(id) = read_id(dir)? {
        return Ok(id);
    }
    match write_id(dir) {
        Ok(()) => crate::fs::sync_dir(dir)?,
        // Another opener won the race: theirs is the id.
        Err(e) if e.errno() == Some(libc::EEXIST) => {}
        Err(e) => return Err(e),
    }
    Ok(read_id(dir)?.expect("just written"))
}

/// Writes a new random id into `dir` (the file synced, the directory not:
/// [`ensure_id`] syncs it, a new log's builder syncs its directory once);
/// an `EEXIST` error when the id file exists (never replaced).
pub(super) fn write_id(dir: &Path) -> Result<()> {
    let raw: [u8; 16] = random()?;
    let id: String = raw.iter().map(|b| format!("{b:02x}")).collect();
    let p = dir.join(ID_FILE);
    let mut tmp = crate::fs::TempFile::beside(&p)?;
    tmp.file_mut()
        .write_all(format!("{id}\n").as_bytes())
        .and_then(|()| tmp.file().sync_all())
        .map_err(|e| Error::io(tmp.path(), "write", e))?;
    tmp.link_to(&p)
}

/// Reads the truncation history (empty when the file does not exist). A
/// torn or damaged last record is ignored (it was never synced, so the
/// truncation it started had not begun); damage before the last record is
/// corruption.
pub(super) fn read_cuts(dir: &Path) -> Result<Cuts> {
    let p = dir.join(CUTS_FILE);
    // 16 bytes a record, two records a truncation: 64 MiB is millions
    // of truncations.
    let Some(bytes) = crate::fs::read_small(&p, 64 << 20)? else {
        return Ok(Cuts::default());
    };
    parse_cuts(&bytes).map_err(|detail| Error::Corrupt { path: p, detail })
}

pub(super) fn parse_cuts(bytes: &[u8]) -> std::result::Result<Cuts, String> {
    let mut c = Cuts::default();
    let n = bytes.len() / REC;
    for (k, r) in bytes.chunks_exact(REC).enumerate() {
        let after = u64::from_le_bytes(r[..8].try_into().expect("8"));
        let kind = u32::from_le_bytes(r[8..12].try_into().expect("4"));
        let crc = u32::from_le_bytes(r[12..].try_into().expect("4"));
        let expect = if c.completed == c.epoch() { INTENT } else { DONE };
        if crc != crc32c::crc32c(&r[..12])
            || kind != expect
            || (kind == DONE && Some(after) != c.pending())
        {
            if k + 1 == n {
                break; // a torn last record: ignored
            }
            return Err(format!("record {k} (byte {}) is damaged", k * REC));
        }
        if kind == INTENT {
            c.after.push(after);
        } else {
            c.completed += 1;
        }
        c.valid_len += REC as u64;
    }
    Ok(c)
}

fn record(after: u64, kind: u32) -> [u8; REC] {
    let mut r = [0u8; REC];
    r[..8].copy_from_slice(&after.to_le_bytes());
    r[8..12].copy_from_slice(&kind.to_le_bytes());
    let crc = crc32c::crc32c(&r[..12]);
    r[12..].copy_from_slice(&crc.to_le_bytes());
    r
}

/// The writer's handle on `DIR/truncations`: appends records durably.
pub(super) struct CutsFile {
    file: Option<File>,
    path: std::path::PathBuf,
    len: u64,
}

impl CutsFile {
    /// Opens (creating on first use) for appending after the valid
    /// records of `cuts`; a torn tail is cut off first.
    pub fn open(dir: &Path, cuts: &Cuts) -> Result<CutsFile> {
        let path = dir.join(CUTS_FILE);
        let mut f = CutsFile { file: None, path, len: cuts.valid_len };
        if f.path.exists() {
            let path = f.path.clone();
            let file = f.handle()?;
            let have = file.metadata().map_err(|e| Error::io(&path, "stat", e))?.len();
            if have != cuts.valid_len {
                file.set_len(cuts.valid_len)
                    .and_then(|()| file.sync_data())
                    .map_err(|e| Error::io(&path, "truncate", e))?;
            }
        }
        Ok(f)
    }

    fn handle(&mut self) -> Result<&File> {
        if self.file.is_none() {
            let existed = self.path.exists();
            let file = crate::fs::open_in_place(&self.path, crate::fs::InPlace::Create)?;
            if !existed {
                file.sync_all().map_err(|e| Error::io(&self.path, "fsync", e))?;
                crate::fs::sync_dir(crate::fs::parent(&self.path))?;
            }
            self.file = Some(file);
        }
        Ok(self.file.as_ref().expect("opened"))
    }

    fn append(&mut self, rec: [u8; REC]) -> Result<()> {
        let at = self.len;
        let path = self.path.clone();
        let f = self.handle()?;
        f.write_all_at(&rec, at)
            .and_then(|()| f.sync_data())
            .map_err(|e| Error::io(&path, "write", e))?;
        self.len += REC as u64;
        Ok(())
    }

    /// Records (durably) that a truncation after `after` starts.
    pub fn intent(&mut self, after: u64) -> Result<()> {
        self.append(record(after, INTENT))
    }
    /// Records (durably) that it finished.
    pub fn done(&mut self, after: u64) -> Result<()> {
        self.append(record(after, DONE))
    }
}

#[cfg(test)]
mod tests;

//! The writer lock of an array file: an exclusive `flock`, and the
//! registry of the arrays this process holds it on, so that a refusal
//! can say who holds it.

use std::fs::File;
use std::path::Path;
use std::sync::Mutex;

use crate::{Error, Result};

/// (device, inode, pid) of each array this process holds the writer lock of:
/// a second open in the same process conflicts with that `flock` too, and
/// the refusal must say who holds it (the pid: a forked child inherits the
/// set, not the ownership).
static HELD_HERE: Mutex<Vec<(u64, u64, u32)>> = Mutex::new(Vec::new());

pub(super) fn file_id(file: &File) -> Option<(u64, u64, u32)> {
    use std::os::unix::fs::MetadataExt;
    file.metadata().ok().map(|m| (m.dev(), m.ino(), std::process::id()))
}

pub(super) fn held_here() -> std::sync::MutexGuard<'static, Vec<(u64, u64, u32)>> {
    HELD_HERE.lock().unwrap_or_else(|e| e.into_inner())
}

pub(super) fn lock_writer(file: &File, path: &Path) -> Result<()> {
    lock_writer_for(file, path, false)
}

/// Takes the writer lock of the array `file` (opened from `path`); the
/// refusal says whether this process or another holds it, and with
/// `recreate` that the store it belongs to cannot be re-created.
pub(crate) fn lock_writer_for(file: &File, path: &Path, recreate: bool) -> Result<()> {
    // Held by this process: say so at once (no retry can help).
    let here = file_id(file).is_some_and(|id| held_here().contains(&id));
    if !here && crate::fs::try_lock_exclusive(file, path)? {
        return Ok(());
    }
    let who = match (here, recreate) {
        (true, false) => {
            "lock (this process already has the store open for writing: close that first)"
        }
        (false, false) => "lock (another process has the store open for writing)",
        (true, true) => {
            "lock (this process already has the store open for writing: close that first; \
             cannot re-create it)"
        }
        (false, true) => {
            "lock (another process has the store open for writing; cannot re-create it)"
        }
    };
    Err(Error::io(path, who, std::io::Error::from_raw_os_error(libc::EWOULDBLOCK)))
}

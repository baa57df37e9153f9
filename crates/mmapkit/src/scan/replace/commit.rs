//! Committing a rewrite: the real target, its metadata, fsync + rename, and backups.

use super::*;

/// `path` with symbolic links resolved: the file that gets replaced.
pub(super) fn real_path(path: &Path) -> Result<PathBuf> {
    match crate::fs::output_target(path, &[])? {
        crate::fs::Target::File { real, .. } => Ok(real),
        crate::fs::Target::Stdout => Err(Error::not_a_file(path, "not a regular file")),
    }
}

/// Makes the temporary file the new `real`: owner and mode, fsync, backup,
/// rename, fsync of the directory.
pub(super) fn commit(
    path: &Path,
    real: &Path,
    meta: &Metadata,
    tmp: TempFile,
    ropts: &ReplaceOptions,
) -> Result<()> {
    tmp.copy_owner_and_mode(meta)?;
    // Reported on the user's file: the temporary one is removed, and
    // never renamed after a failed sync (a retry would "succeed" without
    // writing what the kernel dropped).
    tmp.file().sync_all().map_err(|e| {
        Error::io(path, "fsync of the rewritten copy (the original is left as it was)", e)
    })?;
    // The file must not have changed (or been replaced) meanwhile.
    let now = fs::metadata(real).map_err(|e| Error::io(path, "stat", e))?;
    if (now.ino(), now.dev(), now.len(), now.mtime(), now.mtime_nsec())
        != (meta.ino(), meta.dev(), meta.len(), meta.mtime(), meta.mtime_nsec())
    {
        return Err(Error::invalid(
            path,
            "the file changed while it was being rewritten; left as it is",
        ));
    }
    if let Some(sfx) = &ropts.backup {
        link_backup(real, sfx)?;
    }
    tmp.rename_to(real, true)
}

pub(super) fn backup_path(real: &Path, sfx: &str) -> PathBuf {
    let mut name = real.file_name().unwrap_or_default().to_os_string();
    name.push(sfx);
    crate::fs::parent(real).join(name)
}

/// Keeps the original as the backup by hard-linking it (atomically
/// replacing an older backup); copies where links are not supported.
pub(super) fn link_backup(real: &Path, sfx: &str) -> Result<()> {
    let backup = backup_path(real, sfx);
    // Linked under a registered temp name (a signal's cleanup removes it),
    // then renamed over the old backup (synced with the commit's rename:
    // same directory).
    match TempFile::link_of(real, &backup) {
        Ok(tmp) => tmp.rename_to(&backup, false),
        Err(e)
            if matches!(
                e.raw_os_error(),
                Some(libc::EPERM | libc::EOPNOTSUPP | libc::EMLINK | libc::EXDEV)
            ) =>
        {
            copy_backup(real, sfx)
        }
        Err(e) => Err(e),
    }
}

/// Copies the original to the backup (through a temporary file, fsynced,
/// renamed into place).
pub(super) fn copy_backup(real: &Path, sfx: &str) -> Result<()> {
    let backup = backup_path(real, sfx);
    let mut tmp = TempFile::beside(&backup)?;
    let mut src = crate::fs::open_regular(real, "a backup copies a file")?;
    io::copy(&mut src, tmp.file_mut()).map_err(|e| Error::io(&backup, "backup", e))?;
    tmp.rename_to(&backup, true)
}

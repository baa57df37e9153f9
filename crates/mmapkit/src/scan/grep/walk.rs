//! The files `grep -r` searches under a directory.

use std::path::{Path, PathBuf};

use crate::{Error, Result};

/// Calls `f` with every regular file under the directory `root`, depth
/// first, each directory's entries in byte order of their names (GNU grep
/// uses the order the file system lists them in, which is not
/// reproducible). Like `grep -r` (not `-R`): `root` itself may be a
/// symlink, but symlinks met in the walk are skipped, as are devices,
/// FIFOs and sockets. A directory that cannot be listed is passed to `f`
/// as an error and the walk goes on.
pub fn walk(root: &Path, f: &mut dyn FnMut(Result<PathBuf>)) {
    let mut entries = match std::fs::read_dir(root) {
        Ok(rd) => rd.filter_map(|e| e.ok()).collect::<Vec<_>>(),
        Err(e) => return f(Err(Error::io(root, "read directory", e))),
    };
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let Ok(kind) = e.file_type() else { continue };
        let path = root.join(e.file_name());
        if kind.is_dir() {
            walk(&path, f);
        } else if kind.is_file() {
            f(Ok(path));
        }
    }
}

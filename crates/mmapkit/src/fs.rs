//! Atomic output: the one way mmapkit creates or replaces a file (and the
//! one module that opens files for writing in place, renames and removes
//! them: `clippy.toml` forbids the `std::fs` calls everywhere else).
//!
//! Every writer (k-mer output, [`RecordWriter`](crate::writer::RecordWriter),
//! [`StreamWriter`](crate::writer::StreamWriter), `ArrayStore::create`,
//! replace's rewrite, shared segments, log segments) writes into a
//! [`TempFile`] beside the real target and renames (or links) it into place,
//! so a reader sees either the old file or the whole new one.
//!
//! * **One naming scheme**: `.NAME.mmapkit-PID-N.tmp` beside `NAME`.
//! * **Targets** ([`output_target`]): symbolic links are followed to the real
//!   file, which is replaced while the link stays a link; a dangling link
//!   creates its target. Directories, FIFOs, devices and sockets are refused
//!   with an error naming the path, except `-` and a path that is the
//!   process's standard output (`/dev/stdout` on a pipe or terminal, or on
//!   a file the shell opened for appending: `>>`), which mean "stream to
//!   stdout" for writers that can. An output that is the
//!   same file as an input (same device and inode, also through links and
//!   hard links) is refused before anything is written.
//! * **Owner and mode** of a replaced file are copied to the temp file.
//! * **Hard links**: the rename replaces only the name written to, like
//!   `sed -i`: other names of the old inode keep the old content.
//! * **Cleanup**: live temp files are in a process-wide registry;
//!   [`remove_live_temp_files`] (the CLI's SIGINT/SIGTERM/SIGHUP thread)
//!   deletes them. A temp file of a process that no longer exists (killed
//!   with SIGKILL, power loss) is removed by the next run that writes the
//!   same target; a live process's temp files are never touched.

#![allow(
    clippy::disallowed_methods,
    reason = "fs is the module that opens, creates, replaces, renames and removes files"
)]

use std::ffi::OsStr;
use std::fs::{self, File, Metadata, OpenOptions};
use std::io;
use std::os::fd::AsFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, RwLock, RwLockReadGuard};

use crate::{Error, Result};

const MARK: &str = ".mmapkit-";

/// The directory of `p` (`.` for a bare name).
pub(crate) fn parent(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// `.NAME.mmapkit-PID-N.tmp` beside `target` (a fresh N every call).
pub fn temp_path(target: &Path) -> PathBuf {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let name = target.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    parent(target).join(format!(".{name}{MARK}{}-{n}.tmp", std::process::id()))
}

/// `(NAME, PID)` of a temp file name made by [`temp_path`].
pub fn parse_temp_name(file_name: &OsStr) -> Option<(&OsStr, u32)> {
    let b = file_name.as_bytes();
    let rest = b.strip_prefix(b".")?.strip_suffix(b".tmp")?;
    let at = rest.windows(MARK.len()).rposition(|w| w == MARK.as_bytes())?;
    let (name, tail) = (&rest[..at], &rest[at + MARK.len()..]);
    let (pid, n) = std::str::from_utf8(tail).ok()?.split_once('-')?;
    if name.is_empty() || n.is_empty() || !n.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    Some((OsStr::from_bytes(name), pid.parse().ok()?))
}

/// Removes the temp files in `dir` left by processes that no longer exist,
/// for targets whose name `keep` accepts. Best effort (a directory we
/// cannot read or a file we cannot remove is left alone). Returns how many
/// were removed.
pub fn remove_stale_temp_files(dir: &Path, keep: impl Fn(&OsStr) -> bool) -> usize {
    let Ok(rd) = fs::read_dir(dir) else { return 0 };
    let me = std::process::id();
    let mut removed = 0;
    for ent in rd.flatten() {
        let name = ent.file_name();
        let Some((target, pid)) = parse_temp_name(&name) else { continue };
        if pid == me || !keep(target) || crate::sys::process_exists(pid as i32) {
            continue;
        }
        if fs::remove_file(ent.path()).is_ok() {
            removed += 1;
        }
    }
    removed
}

/// Removes the stale temp files of `target` (symlinks resolved by the
/// caller): for writers that edit in place and so create none themselves.
pub fn remove_stale_temp_files_of(target: &Path) -> usize {
    match target.file_name() {
        Some(name) => remove_stale_temp_files(parent(target), |t| t == name),
        None => 0,
    }
}

// ----- registry of live temp files -------------------------------------

/// The live temp files; `None` once [`remove_live_temp_files`] ran (the
/// process is exiting: no new temp file may be created).
static LIVE: Mutex<Option<Vec<(u64, PathBuf)>>> = Mutex::new(Some(Vec::new()));
static CRITICAL: RwLock<()> = RwLock::new(());

fn live() -> std::sync::MutexGuard<'static, Option<Vec<(u64, PathBuf)>>> {
    LIVE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Creates `path` with `O_EXCL` and registers it, under the registry lock,
/// so a signal's cleanup either sees it or runs before it exists (and then
/// no file is created).
fn create_registered(path: &Path) -> io::Result<(File, u64)> {
    register(path, || {
        OpenOptions::new().read(true).write(true).create_new(true).mode(0o666).open(path)
    })
}

/// Runs `make` (which creates `path`) and registers `path`, under the
/// registry lock (see [`create_registered`]).
fn register(path: &Path, make: impl FnOnce() -> io::Result<File>) -> io::Result<(File, u64)> {
    static ID: AtomicU64 = AtomicU64::new(0);
    let mut live = live();
    let Some(list) = live.as_mut() else {
        return Err(io::Error::from_raw_os_error(libc::EINTR));
    };
    let file = make()?;
    let id = ID.fetch_add(1, Ordering::Relaxed);
    list.push((id, path.to_owned()));
    Ok((file, id))
}

fn unregister(id: u64) {
    if let Some(list) = live().as_mut() {
        list.retain(|(i, _)| *i != id);
    }
}

/// Paths of this process's live temp files.
pub fn live_temp_files() -> Vec<PathBuf> {
    live().iter().flatten().map(|(_, p)| p.clone()).collect()
}

/// A section that a termination signal must not cut in half (a commit's
/// rename, an in-place edit): [`remove_live_temp_files`] waits for every
/// guard to be dropped. Do not nest.
pub fn critical_section() -> RwLockReadGuard<'static, ()> {
    CRITICAL.read().unwrap_or_else(|e| e.into_inner())
}

/// For a process about to exit on a signal: waits for critical sections to
/// end, then deletes every live temp file. Returns the paths removed. The
/// critical-section lock stays taken (writers block) until the process
/// exits, so call this only right before exiting.
pub fn remove_live_temp_files() -> Vec<PathBuf> {
    std::mem::forget(CRITICAL.write().unwrap_or_else(|e| e.into_inner()));
    let list = live().take().unwrap_or_default();
    list.into_iter().filter(|(_, p)| fs::remove_file(p).is_ok()).map(|(_, p)| p).collect()
}

// ----- temp files --------------------------------------------------------

/// A temporary file beside a target (`.NAME.mmapkit-PID-N.tmp`, created
/// with `O_EXCL`), registered for signal cleanup and removed on drop unless
/// it was renamed or linked into place.
#[derive(Debug)]
pub struct TempFile {
    path: PathBuf,
    file: File,
    id: u64,
    done: bool,
}

impl TempFile {
    /// Creates a temp file beside `target` (mode 0666 less the umask); stale
    /// temp files of the same target are removed first. A directory that
    /// does not let us create files is an error naming the directory.
    pub fn beside(target: &Path) -> Result<TempFile> {
        let dir = parent(target);
        remove_stale_temp_files_of(target);
        loop {
            let path = temp_path(target);
            match create_registered(&path) {
                Ok((file, id)) => return Ok(TempFile { path, file, id, done: false }),
                Err(e) => {
                    if e.kind() != io::ErrorKind::AlreadyExists {
                        // Name the directory (absolute for a bare file name).
                        let dir = match dir == Path::new(".") {
                            true => std::env::current_dir().unwrap_or_else(|_| dir.to_owned()),
                            false => dir.to_owned(),
                        };
                        return Err(Error::io(&dir, "create a temporary file in the directory", e));
                    }
                }
            }
        }
    }

    /// A new name for the existing file `src` (a hard link) under a temp
    /// name beside `target`, registered like any temp file: renamed over
    /// `target` it replaces that atomically with `src`'s inode (a backup
    /// that shares the original's blocks). A file system without hard links
    /// gives the link's error (EPERM, EOPNOTSUPP, EMLINK, EXDEV) naming
    /// `target`.
    pub fn link_of(src: &Path, target: &Path) -> Result<TempFile> {
        remove_stale_temp_files_of(target);
        loop {
            let path = temp_path(target);
            let made = register(&path, || {
                fs::hard_link(src, &path)?;
                File::open(&path)
            });
            match made {
                Ok((file, id)) => return Ok(TempFile { path, file, id, done: false }),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(Error::io(target, "link", e)),
            }
        }
    }

    /// The temp file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The open temp file (read-write).
    pub fn file(&self) -> &File {
        &self.file
    }

    /// Mutable access (for `Write`).
    pub fn file_mut(&mut self) -> &mut File {
        &mut self.file
    }

    /// Gives the temp file the owner and permission bits of `meta` (owner
    /// first: chown clears set-id bits). Only root may give a file away: an
    /// EPERM on chown is ignored.
    pub fn copy_owner_and_mode(&self, meta: &Metadata) -> Result<()> {
        if meta.uid() != self.meta()?.uid() || meta.gid() != self.meta()?.gid() {
            if let Err(e) =
                std::os::unix::fs::fchown(&self.file, Some(meta.uid()), Some(meta.gid()))
            {
                if e.raw_os_error() != Some(libc::EPERM) {
                    return Err(Error::io(&self.path, "fchown", e));
                }
            }
        }
        self.file
            .set_permissions(fs::Permissions::from_mode(meta.mode() & 0o7777))
            .map_err(|e| Error::io(&self.path, "fchmod", e))
    }

    fn meta(&self) -> Result<Metadata> {
        self.file.metadata().map_err(|e| Error::io(&self.path, "stat", e))
    }

    /// Renames the temp file to `target` (fsyncing the file before and the
    /// directory after when `sync`). Not cut by a termination signal.
    pub fn rename_to(mut self, target: &Path, sync: bool) -> Result<()> {
        if sync {
            self.file.sync_all().map_err(|e| Error::io(&self.path, "fsync", e))?;
        }
        let _g = critical_section();
        fs::rename(&self.path, target).map_err(|e| Error::io(target, "rename", e))?;
        self.finished();
        drop(_g);
        if sync {
            sync_dir(parent(target))?;
        }
        Ok(())
    }

    /// Links the temp file to `target`, failing with EEXIST if `target`
    /// exists (creation without replacing), then removes the temp name.
    pub fn link_to(mut self, target: &Path) -> Result<()> {
        fs::hard_link(&self.path, target).map_err(|e| Error::io(target, "create", e))?;
        let _ = fs::remove_file(&self.path);
        self.finished();
        Ok(())
    }

    fn finished(&mut self) {
        self.done = true;
        unregister(self.id);
    }
}

impl Drop for TempFile {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.path);
            unregister(self.id);
        }
    }
}

/// Reads a small metadata file whole, refusing one longer than `max`
/// bytes without reading (or allocating for) more than `max + 1`: a file
/// planted or grown past any size the format can reach must not exhaust
/// memory. `Ok(None)` when it does not exist; a longer file is
/// [`Error::Corrupt`]. Opened `O_NONBLOCK` (a FIFO under the name does
/// not block the open) and refused unless it is a regular file.
pub fn read_small(path: &Path, max: u64) -> Result<Option<Vec<u8>>> {
    let file = match open_nonblocking(path, 0) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(Error::io(path, "open", e)),
    };
    if !file.metadata().map_err(|e| Error::io(path, "stat", e))?.file_type().is_file() {
        return Err(Error::Corrupt { path: path.to_owned(), detail: "not a regular file".into() });
    }
    let mut b = Vec::new();
    io::Read::read_to_end(&mut io::Read::take(&file, max + 1), &mut b)
        .map_err(|e| Error::io(path, "read", e))?;
    if b.len() as u64 > max {
        return Err(Error::Corrupt {
            path: path.to_owned(),
            detail: format!("longer than the {max} bytes this file can hold"),
        });
    }
    Ok(Some(b))
}

/// `create_dir_all`, made durable: the parent of every directory created
/// is fsynced, so a power loss cannot take a new directory (and what was
/// made durable inside it) away (found by the crashfs matrices).
pub fn create_dir_durably(dir: &Path) -> Result<()> {
    let mut missing = Vec::new();
    let mut d = dir;
    while !d.as_os_str().is_empty() && !d.exists() {
        missing.push(d);
        match d.parent() {
            Some(p) => d = p,
            None => break,
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    fs::create_dir_all(dir).map_err(|e| Error::io(dir, "mkdir", e))?;
    for made in missing.iter().rev() {
        sync_dir(parent(made))?;
    }
    Ok(())
}

/// Makes directory entry changes (create, rename, unlink) durable.
pub fn sync_dir(dir: &Path) -> Result<()> {
    File::open(dir).and_then(|d| d.sync_all()).map_err(|e| Error::io(dir, "fsync (directory)", e))
}

/// Starts writing `file`'s dirty pages in `[offset, offset + len)` to
/// disk without waiting for them (`len` 0: to the end of the file). A
/// hint that keeps a large write from reaching the disk all at once at
/// its `fsync` (where it would queue ahead of other files' syncs); a
/// failure shows in that sync.
pub fn start_writeback(file: &File, offset: u64, len: u64) {
    let _ = crate::sys::start_writeback(file, offset, len);
}

// ----- files changed in place, renames and removals -------------------

/// How [`open_in_place`] opens a file that is used where it is (mapped,
/// edited, extended, locked) rather than replaced through a temp file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    /// Read only.
    Read,
    /// Read and write an existing file.
    Write,
    /// Read and write, creating the file if it is missing (never truncating).
    Create,
    /// Read and write, created if missing and emptied if not.
    Truncate,
}

/// Opens `path` for use in place (see [`InPlace`]); errors name the path.
/// `O_NONBLOCK`, so a FIFO under the name cannot block the open (the
/// caller's `fstat` then refuses it); on regular files the flag changes
/// nothing (open(2): "no effect for regular files and block devices").
pub fn open_in_place(path: &Path, how: InPlace) -> Result<File> {
    let write = how != InPlace::Read;
    OpenOptions::new()
        .read(true)
        .write(write)
        .create(matches!(how, InPlace::Create | InPlace::Truncate))
        .truncate(how == InPlace::Truncate)
        .custom_flags(libc::O_CLOEXEC | libc::O_NONBLOCK)
        .open(path)
        .map_err(|e| Error::io(path, "open", e))
}

/// `rename(2)` of `from` to `to` (an error names `to`); not cut by a
/// termination signal. The caller syncs the directories it needs durable.
pub fn rename(from: &Path, to: &Path) -> Result<()> {
    let _g = critical_section();
    fs::rename(from, to).map_err(|e| Error::io(to, "rename", e))
}

/// Removes the file `path`: `Ok(false)` when there was none.
pub fn remove_file(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, "unlink", e)),
    }
}

/// Removes the directory `path` and everything in it.
pub fn remove_dir_all(path: &Path) -> Result<()> {
    fs::remove_dir_all(path).map_err(|e| Error::io(path, "remove", e))
}

/// Creates the directory `path` (its parent must exist; an existing one is
/// EEXIST). Not synced: see [`create_dir_durably`].
pub fn create_dir(path: &Path) -> Result<()> {
    fs::create_dir(path).map_err(|e| Error::io(path, "mkdir", e))
}

// ----- output targets ----------------------------------------------------

/// Where an output path leads; see [`output_target`].
#[derive(Debug)]
pub enum Target {
    /// A regular file at `real` (symbolic links resolved), replaced by
    /// rename; `existing` is its metadata when it exists.
    File {
        /// The real file.
        real: PathBuf,
        /// Its metadata, when it exists.
        existing: Option<Metadata>,
    },
    /// The process's standard output, as a stream.
    Stdout,
}

/// `path` with every symbolic link of its last component followed (a
/// dangling link gives the path it points to).
fn resolve_links(path: &Path) -> Result<PathBuf> {
    let mut p = path.to_path_buf();
    for _ in 0..40 {
        match fs::symlink_metadata(&p) {
            Ok(m) if m.file_type().is_symlink() => {
                let t = fs::read_link(&p).map_err(|e| Error::io(&p, "readlink", e))?;
                p = if t.is_absolute() { t } else { parent(&p).join(t) };
            }
            Ok(_) => return Ok(p),
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(p),
            Err(e) => return Err(Error::io(path, "stat", e)),
        }
    }
    Err(Error::io(path, "open", io::Error::from_raw_os_error(libc::ELOOP)))
}

fn stdout_meta() -> Option<Metadata> {
    let fd = io::stdout().as_fd().try_clone_to_owned().ok()?;
    File::from(fd).metadata().ok()
}

/// Whether standard output is the regular file `m`, opened for appending.
fn stdout_appends_to(m: &Metadata) -> bool {
    stdout_meta().is_some_and(|s| same_file(&s, m)) && crate::sys::is_append(io::stdout().as_fd())
}

fn stdin_meta() -> Option<Metadata> {
    let fd = io::stdin().as_fd().try_clone_to_owned().ok()?;
    File::from(fd).metadata().ok()
}

fn same_file(a: &Metadata, b: &Metadata) -> bool {
    (a.dev(), a.ino()) == (b.dev(), b.ino())
}

fn kind_name(m: &Metadata) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    let t = m.file_type();
    if t.is_fifo() {
        "a FIFO"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else if t.is_socket() {
        "a socket"
    } else {
        "not a regular file"
    }
}

/// Decides where output to `path` goes, before anything is written:
///
/// * `-`, or a path that is the same pipe/terminal/device as standard
///   output, or the same regular file when standard output appends to it
///   (`>>`): [`Target::Stdout`];
/// * a regular file or a new name (through any symlinks):
///   [`Target::File`] with the real path;
/// * a directory: EISDIR naming the path; a FIFO, device or socket: an
///   error naming it (it is never replaced by a regular file);
/// * the same file as one of `inputs` (device and inode): an error.
pub fn output_target(path: &Path, inputs: &[&Path]) -> Result<Target> {
    if path.as_os_str() == "-" {
        return Ok(Target::Stdout);
    }
    let target = match fs::metadata(path) {
        Ok(m) if m.is_dir() => {
            return Err(Error::io(path, "write", io::Error::from_raw_os_error(libc::EISDIR)))
        }
        // `-o /dev/stdout >> f`: the shell opened f for appending, so write
        // through standard output as asked; replacing f would drop its
        // content. (`>` truncated it already: replacing it gives the same.)
        Ok(m) if m.is_file() && stdout_appends_to(&m) => Target::Stdout,
        Ok(m) if m.is_file() => {
            let real = resolve_links(path)?;
            // The real path must be the file stat saw (not a magic link
            // to a deleted file).
            match fs::metadata(&real) {
                Ok(r) if same_file(&r, &m) => Target::File { real, existing: Some(m) },
                _ => {
                    return Err(Error::invalid(
                        path,
                        "cannot find the file this path refers to; refusing to write it",
                    ))
                }
            }
        }
        Ok(m) => {
            if stdout_meta().is_some_and(|s| same_file(&s, &m)) {
                return Ok(Target::Stdout);
            }
            return Err(Error::not_a_file(
                path,
                format!("is {}, not a regular file; refusing to replace it", kind_name(&m)),
            ));
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            Target::File { real: resolve_links(path)?, existing: None }
        }
        Err(e) => return Err(Error::io(path, "stat", e)),
    };
    let out = match &target {
        Target::File { existing, .. } => existing.clone(),
        Target::Stdout => stdout_meta(),
    };
    if let Some(out) = &out {
        for input in inputs {
            // `-` is standard input: what it is redirected from counts
            // (`kmers - -o s.fa < s.fa` would replace its own input).
            let m = if input.as_os_str() == "-" { stdin_meta() } else { fs::metadata(input).ok() };
            if m.is_some_and(|m| same_file(&m, out)) {
                return Err(Error::invalid(
                    path,
                    format!(
                        "the output is the input file {}; refusing to overwrite it",
                        input.display()
                    ),
                ));
            }
        }
    }
    Ok(target)
}

/// An output file being written: a [`TempFile`] beside the real target,
/// committed by rename.
#[derive(Debug)]
pub struct AtomicFile {
    requested: PathBuf,
    real: PathBuf,
    tmp: TempFile,
}

impl AtomicFile {
    /// Starts writing `path` (which must resolve to a regular file or a new
    /// name; standard output is an error here: use [`output_target`] to
    /// stream). `inputs` are refused as outputs.
    pub fn create(path: &Path, inputs: &[&Path]) -> Result<AtomicFile> {
        match output_target(path, inputs)? {
            Target::File { real, existing } => Self::for_target(path, real, existing.as_ref()),
            Target::Stdout => {
                Err(Error::invalid(path, "is standard output; this output needs a regular file"))
            }
        }
    }

    /// Starts writing the resolved target `real` (from [`output_target`]).
    pub fn for_target(
        requested: &Path,
        real: PathBuf,
        existing: Option<&Metadata>,
    ) -> Result<AtomicFile> {
        let tmp = TempFile::beside(&real)?;
        if let Some(m) = existing {
            tmp.copy_owner_and_mode(m)?;
        }
        Ok(AtomicFile { requested: requested.to_owned(), real, tmp })
    }

    /// The path as given.
    pub fn path(&self) -> &Path {
        &self.requested
    }

    /// The file that will be replaced (symlinks resolved).
    pub fn real_path(&self) -> &Path {
        &self.real
    }

    /// The temp file's path.
    pub fn temp_path(&self) -> &Path {
        self.tmp.path()
    }

    /// The open temp file.
    pub fn file(&self) -> &File {
        self.tmp.file()
    }

    /// Mutable access to the temp file.
    pub fn file_mut(&mut self) -> &mut File {
        self.tmp.file_mut()
    }

    /// Renames the temp file over the real target (fsync of the file before
    /// and of the directory after when `sync`).
    pub fn commit(self, sync: bool) -> Result<()> {
        self.tmp.rename_to(&self.real, sync)
    }
}

/// Removes the file `path` (a symbolic link itself, not its target) and
/// fsyncs its directory, so the removal survives a power loss; `Ok(false)`
/// when there was nothing to remove.
pub fn remove_file_durably(path: &Path) -> Result<bool> {
    match fs::remove_file(path) {
        Ok(()) => sync_dir(parent(path)).map(|()| true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(path, "unlink", e)),
    }
}

/// Takes an exclusive `flock` on `file` (opened from `path`) if no other
/// open file description holds one: `Ok(true)` when taken, `Ok(false)` when
/// someone else holds it. A lock released a moment ago can still be held by
/// a child process forked (by any thread of ours) before the release, until
/// that child execs and its close-on-exec copy goes away: so "held" is
/// retried for up to half a second before it is believed. The one place
/// the log and the array stores take their writer locks.
pub fn try_lock_exclusive(file: &File, path: &Path) -> Result<bool> {
    for tries in 0.. {
        match file.try_lock() {
            Ok(()) => return Ok(true),
            Err(std::fs::TryLockError::WouldBlock) if tries < 50 => {
                std::thread::sleep(std::time::Duration::from_millis(10));
            }
            Err(std::fs::TryLockError::WouldBlock) => return Ok(false),
            Err(std::fs::TryLockError::Error(e)) => return Err(Error::io(path, "flock", e)),
        }
    }
    unreachable!("the loop returns")
}

/// Opens `path` read-only, as `File::open` does, waiting out a
/// descriptor shortage (`EMFILE`) as the other opens do: the open under
/// every tool's input ([`crate::scan`]'s `open_input`).
pub(crate) fn open_read(path: &Path) -> io::Result<File> {
    crate::sys::retry_emfile(|| File::open(path))
}

/// Opens `path` read-only for a reader that then fstats what it got
/// (headers, records, metadata files): `O_NONBLOCK`, so a FIFO planted
/// under the name does not block the open, plus `extra` flags
/// (`O_NOFOLLOW`). The raw error is returned for callers that treat a
/// missing file as an answer.
pub(crate) fn open_nonblocking(path: &Path, extra: libc::c_int) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC | extra)
        .open(path)
}

/// Opens `path`, which must be a regular file (`why` says why, in the
/// refusal): a directory is EISDIR, a FIFO, device or socket is refused
/// unread. Everything after reads, fstats and maps through the one
/// descriptor, so a name replaced meanwhile cannot mix two files.
pub(crate) fn open_regular(path: &Path, why: &str) -> Result<File> {
    let file = open_nonblocking(path, 0).map_err(|e| Error::io(path, "open", e))?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if meta.is_dir() {
        return Err(Error::io(path, "open", io::Error::from_raw_os_error(libc::EISDIR)));
    }
    if !meta.file_type().is_file() {
        return Err(Error::not_a_file(path, format!("not a regular file ({why})")));
    }
    Ok(file)
}

/// The whole of the regular file `path` (an output read back).
pub(crate) fn read_regular(path: &Path) -> Result<Vec<u8>> {
    use std::io::Read;
    let mut b = Vec::new();
    open_regular(path, "read whole")?
        .read_to_end(&mut b)
        .map_err(|e| Error::io(path, "read", e))?;
    Ok(b)
}

#[cfg(test)]
mod tests;

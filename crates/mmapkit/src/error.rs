//! The one error type of the core. Every variant names the file it is about
//! (anonymous mappings are labelled `<anonymous>`), so messages are useful
//! on their own at the CLI and in Python tracebacks.

use std::path::{Path, PathBuf};
use std::{fmt, io};

/// Result alias used throughout the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, for front ends to decide by (which Python exception,
/// whether an error concerns one file or the whole command) without
/// reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The file or a directory on its path does not exist (ENOENT).
    NotFound,
    /// The OS refused access (EACCES, EPERM).
    PermissionDenied,
    /// The name exists already (EEXIST).
    AlreadyExists,
    /// A directory where a file was needed (EISDIR).
    IsADirectory,
    /// A path component is not a directory (ENOTDIR).
    NotADirectory,
    /// Not a regular file (a FIFO, device or socket), or a /proc or /sys
    /// pseudo-file that cannot be edited.
    NotAFile,
    /// The file system is full (ENOSPC, EDQUOT).
    DiskFull,
    /// Another process truncated the file while it was in use.
    Truncated,
    /// Stored data failed an integrity check.
    Corrupt,
    /// An input file is not in the expected format.
    Format,
    /// A caller-supplied argument is out of range or inconsistent.
    InvalidArgument,
    /// The operation needs a writable mapping.
    ReadOnly,
    /// The reserved address range of a growable mapping is used up.
    ReservationExhausted,
    /// A system call was interrupted by a signal (EINTR).
    Interrupted,
    /// Any other operating-system error; [`Error::errno`] has the number.
    Io,
    /// An earlier write or sync through this handle failed: it refuses
    /// every later write and sync until the file is reopened (fail-stop:
    /// after a failed sync the kernel may have dropped the dirty pages, so
    /// a later sync that succeeds proves nothing).
    Failed,
    /// A worker thread panicked (a bug in mmapkit or in a caller's
    /// callback), not a problem with the arguments or the files.
    Panicked,
}

impl ErrorKind {
    /// The kind of an OS error number.
    pub fn from_errno(errno: i32) -> ErrorKind {
        match errno {
            libc::ENOENT => ErrorKind::NotFound,
            libc::EACCES | libc::EPERM => ErrorKind::PermissionDenied,
            libc::EEXIST => ErrorKind::AlreadyExists,
            libc::EISDIR => ErrorKind::IsADirectory,
            libc::ENOTDIR => ErrorKind::NotADirectory,
            libc::ENOSPC | libc::EDQUOT => ErrorKind::DiskFull,
            libc::EINTR => ErrorKind::Interrupted,
            _ => ErrorKind::Io,
        }
    }

    fn of_io(e: &io::Error) -> ErrorKind {
        if let Some(errno) = e.raw_os_error() {
            return ErrorKind::from_errno(errno);
        }
        match e.kind() {
            io::ErrorKind::NotFound => ErrorKind::NotFound,
            io::ErrorKind::PermissionDenied => ErrorKind::PermissionDenied,
            io::ErrorKind::AlreadyExists => ErrorKind::AlreadyExists,
            io::ErrorKind::Interrupted => ErrorKind::Interrupted,
            _ => ErrorKind::Io,
        }
    }
}

/// Everything that can go wrong in mmapkit.
///
/// Display is "PATH: message" (just the message without a path); front
/// ends read [`kind`](Error::kind), [`path`](Error::path),
/// [`errno`](Error::errno) and [`message`](Error::message) instead of
/// parsing it.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    Io {
        /// The file.
        path: PathBuf,
        /// The call that failed (`open`, `mmap`, `msync`, ...).
        op: &'static str,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// Another process truncated the file while it was mapped; the pages
    /// past the new end were lost and now read as zeros.
    FileTruncated {
        /// The file.
        path: PathBuf,
    },
    /// Another process truncated the file while it was read or edited
    /// through `read`/`pwrite` (not mapped): the operation stopped there.
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was going on ("being read", ...), and what was done about it.
        during: &'static str,
    },
    /// Extending a file failed because the file system is full.
    DiskFull {
        /// The file.
        path: PathBuf,
        /// The size it was being extended to (0 if unknown).
        size: u64,
    },
    /// The mapping cannot grow in place any further while borrowed views
    /// exist (the reserved address range is used up).
    ReservationExhausted {
        /// The file.
        path: PathBuf,
        /// Bytes of address space reserved.
        reserved: usize,
        /// The length asked for.
        requested: usize,
    },
    /// The operation needs a writable mapping.
    ReadOnly {
        /// The file.
        path: PathBuf,
    },
    /// Stored data failed an integrity check (a checksum, a broken frame,
    /// a sealed log segment that does not verify). `detail` says where
    /// (entry index, segment, offset).
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What failed and where.
        detail: String,
    },
    /// An input file is not in the expected format (a malformed `.npy`
    /// header, a FASTA/FASTQ record that does not parse). `detail` names
    /// the record or field.
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        detail: String,
    },
    /// A request this file cannot serve: not a regular file, a range past
    /// its end, an output that is one of the inputs. `kind` is
    /// [`ErrorKind::NotAFile`], [`ErrorKind::IsADirectory`] or
    /// [`ErrorKind::InvalidArgument`].
    Invalid {
        /// The file.
        path: PathBuf,
        /// What kind of refusal.
        kind: ErrorKind,
        /// What is wrong.
        detail: String,
    },
    /// A caller-supplied argument is out of range or inconsistent, not
    /// tied to one file (a bad pattern, option or dtype).
    InvalidArgument(String),
    /// This handle failed earlier (see [`ErrorKind::Failed`]); `detail`
    /// says what failed.
    Failed {
        /// The file or log directory.
        path: PathBuf,
        /// What failed, and what to do.
        detail: String,
    },
    /// A worker thread panicked; `detail` says which one and, when the
    /// panic had a message, what it said.
    Panicked {
        /// "WHAT panicked: MESSAGE".
        detail: String,
    },
}

/// "WHAT panicked: MESSAGE" ("WHAT panicked" when the payload is not a
/// string).
pub fn panic_detail(what: &str, payload: &(dyn std::any::Any + Send)) -> String {
    let msg = payload
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| payload.downcast_ref::<String>().map(String::as_str));
    match msg {
        Some(m) => format!("{what} panicked: {m}"),
        None => format!("{what} panicked"),
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.path() {
            Some(path) => write!(f, "{}: {}", path.display(), self.message()),
            None => f.write_str(&self.message()),
        }
    }
}

/// " to extend the file to N bytes", or nothing when the size is unknown (0).
fn extend_to(size: u64) -> String {
    if size == 0 {
        String::new()
    } else {
        format!(" to extend the file to {size} bytes")
    }
}

/// An OS error's text without Rust's " (os error N)" suffix, as coreutils
/// and Python print it ("No such file or directory").
pub fn os_message(e: &io::Error) -> String {
    e.raw_os_error().map_or_else(|| e.to_string(), crate::sys::strerror)
}

/// The `path` field of an [`Error`] (by reference or mutably, as the
/// scrutinee is); `None` for the variants not about a file. The one list of
/// which variants carry a path.
macro_rules! path_field {
    ($error:expr) => {
        match $error {
            Error::Io { path, .. }
            | Error::FileTruncated { path }
            | Error::Truncated { path, .. }
            | Error::DiskFull { path, .. }
            | Error::ReservationExhausted { path, .. }
            | Error::ReadOnly { path }
            | Error::Corrupt { path, .. }
            | Error::Format { path, .. }
            | Error::Invalid { path, .. }
            | Error::Failed { path, .. } => Some(path),
            Error::InvalidArgument(_) | Error::Panicked { .. } => None,
        }
    };
}

impl Error {
    /// An OS error of call `op` on `path` ([`Error::DiskFull`] for ENOSPC
    /// and EDQUOT, else [`Error::Io`]).
    pub fn io(path: &Path, op: &'static str, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
                Error::DiskFull { path: path.to_owned(), size: 0 }
            }
            _ => Error::Io { path: path.to_owned(), op, source },
        }
    }

    pub(crate) fn last_os(path: &Path, op: &'static str) -> Self {
        Self::io(path, op, io::Error::last_os_error())
    }

    /// A request that is invalid for this file (see [`Error::Invalid`]).
    pub fn invalid(path: &Path, detail: impl Into<String>) -> Self {
        Error::Invalid {
            path: path.to_owned(),
            kind: ErrorKind::InvalidArgument,
            detail: detail.into(),
        }
    }

    /// This file is not a regular file (or is one this operation cannot use).
    pub fn not_a_file(path: &Path, detail: impl Into<String>) -> Self {
        Error::Invalid { path: path.to_owned(), kind: ErrorKind::NotAFile, detail: detail.into() }
    }

    /// The error for a thread that panicked with `payload` (what
    /// `JoinHandle::join` returns); `what` names the thread.
    pub fn panicked(what: &str, payload: &(dyn std::any::Any + Send)) -> Self {
        Error::Panicked { detail: panic_detail(what, payload) }
    }

    /// What went wrong.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Io { source, .. } => ErrorKind::of_io(source),
            Error::FileTruncated { .. } | Error::Truncated { .. } => ErrorKind::Truncated,
            Error::DiskFull { .. } => ErrorKind::DiskFull,
            Error::ReservationExhausted { .. } => ErrorKind::ReservationExhausted,
            Error::ReadOnly { .. } => ErrorKind::ReadOnly,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Format { .. } => ErrorKind::Format,
            Error::Invalid { kind, .. } => *kind,
            Error::InvalidArgument(_) => ErrorKind::InvalidArgument,
            Error::Failed { .. } => ErrorKind::Failed,
            Error::Panicked { .. } => ErrorKind::Panicked,
        }
    }

    /// The errno behind this error, when there is one: the OS's for
    /// failed calls, and the conventional one for the conditions mmapkit
    /// detects itself (ENOSPC for a full disk, EFAULT for a truncated file,
    /// EIO for corrupt data, EACCES for a read-only mapping, EISDIR).
    pub fn errno(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::DiskFull { .. } => Some(libc::ENOSPC),
            Error::FileTruncated { .. } | Error::Truncated { .. } => Some(libc::EFAULT),
            Error::ReadOnly { .. } => Some(libc::EACCES),
            Error::Corrupt { .. } | Error::Failed { .. } => Some(libc::EIO),
            Error::Invalid { kind: ErrorKind::IsADirectory, .. } => Some(libc::EISDIR),
            _ => None,
        }
    }

    /// Same as [`errno`](Error::errno) (the name `std::io::Error` uses).
    pub fn raw_os_error(&self) -> Option<i32> {
        self.errno()
    }

    /// The same error about `path` instead (for a file reached through
    /// another name, such as `/proc/self/fd/N`); errors not about a file
    /// are unchanged.
    pub fn with_path(mut self, to: &Path) -> Self {
        if let Some(path) = path_field!(&mut self) {
            *path = to.to_owned();
        }
        self
    }

    /// The file this error is about; `None` for an argument not tied to a
    /// file (a bad pattern or option).
    pub fn path(&self) -> Option<&Path> {
        path_field!(self).map(PathBuf::as_path)
    }

    /// The message without the path: what Display prints after "PATH: "
    /// (for an OS error, "op: OS text", e.g. "open: No such file or
    /// directory").
    pub fn message(&self) -> String {
        match self {
            Error::Io { op, source, .. } => format!("{op}: {}", os_message(source)),
            Error::FileTruncated { .. } => "file was truncated while mapped; data past its new end is gone".into(),
            Error::Truncated { during, .. } => format!("file was truncated by another process while {during}"),
            Error::DiskFull { size, .. } => format!("no space left on device{}", extend_to(*size)),
            Error::ReservationExhausted { reserved, requested, .. } => format!(
                "cannot grow to {requested} bytes in place: {reserved} bytes of address space are reserved \
                 for the map and it cannot move while it is shared or viewed (release its views and \
                 try again, reopen it, or map it with a larger reserve)"
            ),
            Error::ReadOnly { .. } => "mapping is read-only".into(),
            Error::Corrupt { detail, .. } => format!("corrupt: {detail}"),
            Error::Format { detail, .. }
            | Error::Invalid { detail, .. }
            | Error::InvalidArgument(detail)
            | Error::Failed { detail, .. } => detail.clone(),
            Error::Panicked { detail } => detail.clone(),
        }
    }
}

#[cfg(test)]
mod message_tests {
    use super::*;

    #[test]
    fn disk_full_without_a_known_size_does_not_invent_one() {
        let e = Error::io(Path::new("f"), "write", io::Error::from_raw_os_error(libc::ENOSPC));
        assert_eq!(e.to_string(), "f: no space left on device");
        let e = Error::DiskFull { path: "f".into(), size: 4096 };
        assert_eq!(e.to_string(), "f: no space left on device to extend the file to 4096 bytes");
    }

    #[test]
    fn core_messages_name_no_python_method() {
        // The CLI prints these as they are; the Python binding adds its hint.
        let e = Error::FileTruncated { path: "f".into() };
        assert_eq!(
            e.to_string(),
            "f: file was truncated while mapped; data past its new end is gone"
        );
    }
}

#[cfg(test)]
mod tests;

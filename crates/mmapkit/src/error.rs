//! The one error type of the core. Every variant names the file it is about
//! (anonymous mappings are labelled `<anonymous>`), so messages are useful
//! on their own at the CLI and in Python tracebacks.

use std::io;
use std::path::{Path, PathBuf};

/// Result alias used throughout the core.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong in mmapkit.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed.
    #[error("{}: {op}: {}", path.display(), os_message(source))]
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
    #[error("{}: file was truncated while mapped; data past its new end is gone", path.display())]
    FileTruncated {
        /// The file.
        path: PathBuf,
    },
    /// Another process truncated the file while it was read or edited
    /// through `read`/`pwrite` (not mapped): the operation stopped there.
    #[error("{}: file was truncated by another process while {during}", path.display())]
    Truncated {
        /// The file.
        path: PathBuf,
        /// What was going on ("being read", ...), and what was done about it.
        during: &'static str,
    },
    /// Extending a file failed because the file system is full.
    #[error("{}: no space left on device{}", path.display(), extend_to(*size))]
    DiskFull {
        /// The file.
        path: PathBuf,
        /// The size it was being extended to (0 if unknown).
        size: u64,
    },
    /// The mapping cannot grow in place any further while borrowed views
    /// exist (the reserved address range is used up).
    #[error("{}: cannot grow to {requested} bytes in place: {reserved} bytes of address space are reserved and views are still alive (open with a larger reserve)", path.display())]
    ReservationExhausted {
        /// The file.
        path: PathBuf,
        /// Bytes of address space reserved.
        reserved: usize,
        /// The length asked for.
        requested: usize,
    },
    /// The operation needs a writable mapping.
    #[error("{}: mapping is read-only", path.display())]
    ReadOnly {
        /// The file.
        path: PathBuf,
    },
    /// Stored data failed an integrity check (a checksum, a broken frame,
    /// a sealed log segment that does not verify). `detail` says where
    /// (entry index, segment, offset).
    #[error("{}: corrupt: {detail}", path.display())]
    Corrupt {
        /// The file.
        path: PathBuf,
        /// What failed and where.
        detail: String,
    },
    /// An input file is not in the expected format (a malformed `.npy`
    /// header, a FASTA/FASTQ record that does not parse). `detail` names
    /// the record or field.
    #[error("{}: {detail}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong and where.
        detail: String,
    },
    /// A caller-supplied argument is out of range or inconsistent.
    #[error("{0}")]
    InvalidArgument(String),
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
    let s = e.to_string();
    match s.find(" (os error ") {
        Some(i) => s[..i].to_owned(),
        None => s,
    }
}

impl Error {
    pub(crate) fn io(path: &Path, op: &'static str, source: io::Error) -> Self {
        match source.raw_os_error() {
            Some(libc::ENOSPC) | Some(libc::EDQUOT) => Error::DiskFull {
                path: path.to_owned(),
                size: 0,
            },
            _ => Error::Io {
                path: path.to_owned(),
                op,
                source,
            },
        }
    }

    pub(crate) fn last_os(path: &Path, op: &'static str) -> Self {
        Self::io(path, op, io::Error::last_os_error())
    }

    /// The errno behind this error, when there is one (used by the Python
    /// binding to raise the matching `OSError` subclass).
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Io { source, .. } => source.raw_os_error(),
            Error::DiskFull { .. } => Some(libc::ENOSPC),
            Error::FileTruncated { .. } | Error::Truncated { .. } => Some(libc::EFAULT),
            Error::ReadOnly { .. } => Some(libc::EACCES),
            Error::Corrupt { .. } => Some(libc::EIO),
            _ => None,
        }
    }

    /// The file this error is about, if any.
    pub fn path(&self) -> Option<&Path> {
        match self {
            Error::Io { path, .. }
            | Error::FileTruncated { path }
            | Error::Truncated { path, .. }
            | Error::DiskFull { path, .. }
            | Error::ReservationExhausted { path, .. }
            | Error::ReadOnly { path }
            | Error::Corrupt { path, .. }
            | Error::Format { path, .. } => Some(path),
            Error::InvalidArgument(_) => None,
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
        assert_eq!(e.to_string(), "f: file was truncated while mapped; data past its new end is gone");
    }
}

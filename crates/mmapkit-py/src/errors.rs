//! Core errors → Python exceptions, decided by the error's fields (kind,
//! errno, path), never by its text. OS errors become
//! `OSError(errno, strerror, filename)`, so Python picks the subclass
//! (FileNotFoundError, PermissionError, IsADirectoryError, ...) and sets
//! `errno`, `strerror` and `filename` like the stdlib does.

use std::ffi::OsString;

use mmapkit::{Error, ErrorKind};
use pyo3::exceptions::{PyBufferError, PyOSError, PyTypeError, PyValueError};
use pyo3::prelude::*;
use pyo3::{create_exception, PyErr};

/// Defines mmapkit's exception classes and `register`, which adds them
/// all to the module: one table for both.
macro_rules! exceptions {
    ($($name:ident($base:ty): $doc:literal;)*) => {
        $(create_exception!(mmapkit, $name, $base, $doc);)*

        /// Adds the exception classes to the module.
        pub fn register(m: &Bound<'_, PyModule>) -> PyResult<()> {
            $(m.add(stringify!($name), m.py().get_type::<$name>())?;)*
            Ok(())
        }
    };
}

exceptions! {
    FileTruncatedError(PyOSError): "The mapped file was truncated by someone else; data past its new end is gone.";
    DiskFullError(PyOSError): "No space left on the device to extend a mapped file (errno ENOSPC).";
    CorruptError(PyOSError): "Stored data failed an integrity check (checksum, torn frame); errno EIO.";
    FailedError(PyOSError): "An earlier sync through this handle failed; it refuses writes and syncs until reopened (fail-stop); errno EIO.";
    FormatError(PyValueError): "An input file is not in the expected format (bad .npy header, malformed FASTA/FASTQ record).";
    ReservationExhaustedError(PyBufferError): "The mapping cannot grow in place further while views of it are alive.";
}

/// `(errno, strerror, filename)`, the arguments from which `OSError` and
/// its subclasses set their attributes. The file name goes over as an
/// `OsStr` (decoded like `os.fsdecode`), so it round-trips names that are
/// not valid UTF-8.
fn os_args(e: &Error, strerror: String) -> (Option<i32>, String, Option<OsString>) {
    (e.errno(), strerror, e.path().map(|p| p.as_os_str().to_owned()))
}

/// Converts a core error into the Python exception documented for it.
pub fn to_py(e: Error) -> PyErr {
    match e.kind() {
        ErrorKind::Truncated => {
            let mut msg = e.message();
            if matches!(e, Error::FileTruncated { .. }) {
                msg.push_str(" (call refresh() to re-sync)");
            }
            FileTruncatedError::new_err(os_args(&e, msg))
        }
        ErrorKind::DiskFull => DiskFullError::new_err(os_args(&e, e.message())),
        ErrorKind::Corrupt => CorruptError::new_err(os_args(&e, e.message())),
        // Its own class (still an OSError with EIO): a caller can tell a
        // handle that must be reopened from a one-off I/O error.
        ErrorKind::Failed => FailedError::new_err(os_args(&e, e.message())),
        ErrorKind::Format => FormatError::new_err(e.to_string()),
        ErrorKind::ReservationExhausted => ReservationExhaustedError::new_err(e.to_string()),
        ErrorKind::ReadOnly => {
            PyTypeError::new_err(format!("mmap can't modify a readonly memory map ({e})"))
        }
        ErrorKind::InvalidArgument | ErrorKind::NotAFile => PyValueError::new_err(e.to_string()),
        // A bug in mmapkit or in a callback, not a bad argument.
        ErrorKind::Panicked => pyo3::exceptions::PyRuntimeError::new_err(e.to_string()),
        // The OS kinds (NotFound, PermissionDenied, IsADirectory, ...) and
        // any kind added later that comes with an errno.
        _ if e.errno().is_some() || matches!(e, Error::Io { .. }) => {
            PyOSError::new_err(os_args(&e, e.message()))
        }
        _ => PyValueError::new_err(e.to_string()),
    }
}

/// `.map_err(to_py)` shorthand.
pub trait IntoPy<T> {
    fn py_err(self) -> pyo3::PyResult<T>;
}

impl<T> IntoPy<T> for Result<T, Error> {
    fn py_err(self) -> pyo3::PyResult<T> {
        self.map_err(to_py)
    }
}

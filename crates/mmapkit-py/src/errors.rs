//! Core errors → Python exceptions. OS errors become the matching
//! `OSError` subclass (FileNotFoundError, PermissionError, ...) with
//! `errno` and `filename` set, like the stdlib raises them.

use mmapkit::Error;
use pyo3::create_exception;
use pyo3::exceptions::{PyBufferError, PyOSError, PyTypeError, PyValueError};
use pyo3::PyErr;

create_exception!(
    mmapkit,
    FileTruncatedError,
    PyOSError,
    "The mapped file was truncated by someone else; data past its new end is gone."
);
create_exception!(
    mmapkit,
    DiskFullError,
    PyOSError,
    "No space left on the device to extend a mapped file (errno ENOSPC)."
);
create_exception!(
    mmapkit,
    ReservationExhaustedError,
    PyBufferError,
    "The mapping cannot grow in place further while views of it are alive."
);

create_exception!(
    mmapkit,
    CorruptError,
    PyOSError,
    "Stored data failed an integrity check (checksum, torn frame); errno EIO."
);
create_exception!(
    mmapkit,
    FormatError,
    PyValueError,
    "An input file is not in the expected format (bad .npy header, malformed FASTA/FASTQ record)."
);

fn os_parts(e: &Error) -> (i32, String, String) {
    let errno = e.raw_os_error().unwrap_or(0);
    let path = e.path().map(|p| p.display().to_string()).unwrap_or_default();
    let msg = match e {
        Error::Io { op, source, .. } => format!("{op}: {}", mmapkit::os_message(source)),
        other => {
            let full = other.to_string();
            full.strip_prefix(&format!("{path}: ")).map(str::to_owned).unwrap_or(full)
        }
    };
    (errno, msg, path)
}

/// Converts a core error into the Python exception documented for it.
pub fn to_py(e: Error) -> PyErr {
    match &e {
        Error::Io { .. } => PyOSError::new_err(os_parts(&e)),
        Error::FileTruncated { .. } => {
            let (errno, msg, path) = os_parts(&e);
            FileTruncatedError::new_err((errno, format!("{msg} (call refresh() to re-sync)"), path))
        }
        Error::Truncated { .. } => FileTruncatedError::new_err(os_parts(&e)),
        Error::DiskFull { .. } => DiskFullError::new_err(os_parts(&e)),
        Error::Corrupt { .. } => CorruptError::new_err(os_parts(&e)),
        Error::Format { .. } => FormatError::new_err(e.to_string()),
        Error::ReservationExhausted { .. } => ReservationExhaustedError::new_err(e.to_string()),
        Error::ReadOnly { .. } => PyTypeError::new_err(format!("mmap can't modify a readonly memory map ({e})")),
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

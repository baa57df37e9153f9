//! Standard output for data (grep's lines, count's numbers, JSON), where a
//! failed write is an error, as in GNU's tools.
//!
//! std's `Stdout` reports a closed descriptor (EBADF) as a success, and
//! Rust's runtime puts `/dev/null` on a descriptor closed at start, so
//! `mmapkit grep ... >&-` would exit 0 with its output gone. [`Stdout`]
//! writes to a duplicate of descriptor 1 instead (opened at the first
//! write: a run that prints nothing does not fail), refuses one that was
//! closed when the process started, and marks every failure as a
//! [`WriteError`], which `main` turns into GNU's outcome: a closed pipe
//! ends the process by SIGPIPE (status 141, what `set -o pipefail` sees),
//! anything else is "write error on standard output" and status 2.

use std::fmt;
use std::fs::File;
use std::io::{self, Write};
use std::os::fd::AsFd;

/// Descriptor 1, as a writer whose failures are [`WriteError`]s. Not
/// buffered: wrap it in a `BufWriter` (and never mix it with `print!`).
#[derive(Default)]
pub struct Stdout {
    file: Option<File>,
}

/// Standard output, unbuffered (see [`Stdout`]).
pub fn stdout() -> Stdout {
    Stdout::default()
}

impl Stdout {
    fn file(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            if mmapkit::map::stdio_closed_at_start(1) {
                return Err(WriteError::wrap(io::Error::from_raw_os_error(libc::EBADF)));
            }
            let fd = io::stdout().as_fd().try_clone_to_owned().map_err(WriteError::wrap)?;
            self.file = Some(File::from(fd));
        }
        Ok(self.file.as_mut().expect("opened above"))
    }
}

impl Write for Stdout {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file()?.write(buf).map_err(WriteError::wrap)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(()) // unbuffered
    }
}

/// A write to standard output failed (carried inside the `io::Error` that
/// the write returned, with the same kind).
#[derive(Debug)]
pub struct WriteError(io::Error);

impl WriteError {
    fn wrap(e: io::Error) -> io::Error {
        if e.get_ref().is_some_and(|inner| inner.is::<WriteError>()) {
            return e;
        }
        io::Error::new(e.kind(), WriteError(e))
    }

    /// The write error in `e`'s chain, if one is there.
    pub fn find(e: &anyhow::Error) -> Option<&WriteError> {
        e.chain().find_map(|c| {
            c.downcast_ref::<WriteError>()
                .or_else(|| c.downcast_ref::<io::Error>()?.get_ref()?.downcast_ref::<WriteError>())
        })
    }

    /// The reader went away (EPIPE).
    pub fn is_broken_pipe(&self) -> bool {
        self.0.kind() == io::ErrorKind::BrokenPipe
    }
}

impl fmt::Display for WriteError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "write error on standard output: {}", mmapkit::os_message(&self.0))
    }
}

impl std::error::Error for WriteError {}

/// Ends the process as a write to a closed pipe does in GNU's tools: by
/// SIGPIPE with its default action (Rust ignores it, so the write saw
/// EPIPE instead). Exits 141 if the signal somehow does not end it.
pub fn die_of_sigpipe() -> ! {
    let _ = signal_hook::low_level::emulate_default_handler(signal_hook::consts::SIGPIPE);
    std::process::exit(128 + signal_hook::consts::SIGPIPE)
}

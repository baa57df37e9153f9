//! Where the bytes come from: a mapping or `pread` into a reusable buffer.
//!
//! Both strategies hand the same kernels the same `&[u8]` windows, so they
//! differ only in I/O. The read strategy keeps one buffer per thread and
//! reuses it for every window (no allocation per window).

use std::cell::RefCell;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};

use crate::map::{Advice, Map, Mode};
use crate::{Error, Result};

/// How a file's bytes are brought in.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Strategy {
    /// Pick per operation and size (see [`Strategy::resolve`]).
    #[default]
    Auto,
    /// Map the file and scan the mapping.
    Mmap,
    /// `pread` into a reusable per-thread buffer.
    Read,
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "auto" => Ok(Strategy::Auto),
            "mmap" => Ok(Strategy::Mmap),
            "read" => Ok(Strategy::Read),
            other => Err(Error::InvalidArgument(format!(
                "unknown strategy {other:?} (expected auto, mmap or read)"
            ))),
        }
    }
}

/// Below this size `Auto` reads, above it maps (see [`Strategy::resolve`]).
pub const AUTO_MMAP_MIN: u64 = 256 << 10;

impl Strategy {
    /// The concrete strategy for a read-only scan of `len` bytes.
    ///
    /// Rule: `read` below [`AUTO_MMAP_MIN`] (256 KiB), `mmap` from there
    /// on. Measured in-process (counting lines, warm cache, 2 cores): at
    /// 4 KiB read 3 µs vs mmap 17 µs, at 200 KB 11.7 vs 17.4 µs (one `pread`
    /// beats the cost of setting up a mapping: reservation, `mmap`,
    /// `madvise`, page faults, `munmap`), at 1 MiB read 70 µs vs mmap 34 µs
    /// and at 8 MiB 609 vs 317 µs (copying every byte out of the page cache
    /// costs more than faulting it in place); the crossover is near 300 KB.
    /// The `files` benchmark re-measures both on every run.
    pub fn resolve(self, len: u64) -> Strategy {
        match self {
            Strategy::Auto if len < AUTO_MMAP_MIN => Strategy::Read,
            Strategy::Auto => Strategy::Mmap,
            s => s,
        }
    }
}

/// An open input file, read through one strategy.
pub(crate) enum Source {
    Mapped(Map),
    Read { file: File, len: u64, path: PathBuf },
}

thread_local! {
    static BUF: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl Source {
    pub(crate) fn open(path: &Path, strategy: Strategy) -> Result<Source> {
        let file = File::open(path).map_err(|e| Error::io(path, "open", e))?;
        let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
        if meta.is_dir() {
            return Err(Error::io(path, "read", std::io::Error::from_raw_os_error(libc::EISDIR)));
        }
        if !meta.is_file() {
            return Err(Error::InvalidArgument(format!(
                "{}: not a regular file (use - to read a stream from stdin)",
                path.display()
            )));
        }
        Ok(match strategy.resolve(meta.len()) {
            Strategy::Read => Source::Read { file, len: meta.len(), path: path.to_owned() },
            _ => {
                let map = Map::options().mode(Mode::Read).map(file, path)?;
                // Whole-file scans read front to back: ask for read-ahead.
                map.advise(Advice::Sequential, 0, None)?;
                Source::Mapped(map)
            }
        })
    }

    pub(crate) fn len(&self) -> u64 {
        match self {
            Source::Mapped(m) => m.len() as u64,
            Source::Read { len, .. } => *len,
        }
    }

    /// Calls `f` with the bytes `[start, end)` (within the file).
    ///
    /// `f` must not call `with_window` itself (the read buffer is per thread).
    pub(crate) fn with_window<R>(&self, start: u64, end: u64, f: impl FnOnce(&[u8]) -> R) -> Result<R> {
        debug_assert!(start <= end && end <= self.len());
        match self {
            Source::Mapped(m) => m.read_with(|d| f(&d[start as usize..end as usize])),
            Source::Read { file, path, .. } => BUF.with(|cell| {
                let mut buf = cell.borrow_mut();
                let n = (end - start) as usize;
                if buf.len() < n {
                    buf.resize(n, 0);
                }
                let got = pread_full(file, &mut buf[..n], start).map_err(|e| Error::io(path, "read", e))?;
                if got < n {
                    return Err(Error::FileTruncated { path: path.clone() });
                }
                Ok(f(&buf[..n]))
            }),
        }
    }
}

fn pread_full(file: &File, buf: &mut [u8], mut off: u64) -> std::io::Result<usize> {
    let mut done = 0;
    while done < buf.len() {
        match file.read_at(&mut buf[done..], off) {
            Ok(0) => break,
            Ok(n) => {
                done += n;
                off += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(done)
}

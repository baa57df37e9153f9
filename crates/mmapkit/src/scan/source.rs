//! Where the bytes come from: a mapping, `pread` into a reusable buffer, or
//! a stream read front to back.
//!
//! All strategies hand the same kernels the same `&[u8]` windows, so they
//! differ only in I/O. The read strategy keeps one buffer per thread and
//! reuses it for every window (no allocation per window).
//!
//! [`open_input`] is the one place that opens an input and decides whether
//! it can be read at offsets or must be streamed (scans and k-mers use it):
//! `-` is standard input; pipes, FIFOs, sockets and character devices are
//! streams; so are files on procfs and sysfs, whose size reads as 0 (or as
//! a page) whatever they hold, and any regular file whose size reads as 0
//! (like `wc`, read it and see).

use std::cell::RefCell;
use std::fs::File;
use std::io::Read;
use std::os::fd::AsFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt};
use std::path::{Path, PathBuf};

use crate::map::{pread_full, Advice, Map, Mode};
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
    /// `read` front to back into one reusable buffer, on one thread (what
    /// pipes, FIFOs, stdin and procfs/sysfs files always get).
    Stream,
}

crate::named_enum!(Strategy, "strategy", {
    Auto => "auto",
    Mmap => "mmap",
    Read => "read",
    Stream => "stream",
});

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

/// Mapped windows at least this long give their pages back once read
/// ([`Source::release`]): a scan's 8 MiB windows do, a header peek does not.
pub(crate) const RELEASE_MIN: u64 = 1 << 20;

/// An open input file, read at offsets through one strategy.
pub(crate) enum Source {
    Mapped(Map),
    Read { file: File, len: u64, path: PathBuf },
}

/// An input as [`open_input`] found it.
pub(crate) enum Opened {
    /// A regular file with a meaningful size: can be mapped or read at offsets.
    File { file: File, len: u64 },
    /// Read front to back only (stdin, a pipe, a procfs file, ...).
    Stream(Box<dyn Read + Send>),
}

/// An input ready for a scan.
pub(crate) enum Input {
    Random(Source),
    /// Read front to back, with the file's size when it has one (standard
    /// input redirected from a file, `--strategy stream`; `None` for a
    /// pipe, FIFO or terminal, which answers with what has arrived).
    Stream(Box<dyn Read + Send>, Option<u64>),
}

/// `procfs` and `sysfs` (`statfs` f_type): sizes there are not contents.
const PROC_SUPER_MAGIC: i64 = 0x9fa0;
const SYSFS_MAGIC: i64 = 0x6265_6572;

/// The name errors use for `path` (`-` is standard input).
pub(crate) fn label(path: &Path) -> &Path {
    if path.as_os_str() == "-" {
        Path::new("(standard input)")
    } else {
        path
    }
}

/// Opens an input and decides how it can be read; see the module docs.
pub(crate) fn open_input(path: &Path) -> Result<Opened> {
    if path.as_os_str() == "-" {
        // Standard input is read from where it stands, even when it is a
        // regular file (`(read hdr; mmapkit count ...) < f`).
        return Ok(Opened::Stream(Box::new(stdin_file()?)));
    }
    classify(open_file(path)?, path)
}

/// Opens the input file `path` (not `-`).
fn open_file(path: &Path) -> Result<File> {
    crate::fs::open_read(path).map_err(|e| Error::io(path, "open", e))
}

/// What [`peek_whole`] found.
pub(crate) enum Peeked<R> {
    /// The file was shorter than the peek: `f`'s answer on all of it.
    Whole(R),
    /// The file is longer, or cannot be read at offsets (a FIFO, a
    /// terminal, ...): as [`Input::open`] would have opened it.
    Larger(Input),
}

/// Opens `path` (not `-`) and, when it holds fewer than `max` bytes, reads
/// it whole with one `pread` into this thread's buffer and calls
/// `f(file, bytes)`: no `fstat` first, whose call was a quarter of a
/// `grep -r` walk's system calls (open, fstat, pread, close per file).
/// A short `pread` of a regular file is its end (Linux reads regular
/// files whole up to the end, FUSE's short reads included); procfs and
/// sysfs files, whose sizes are not their contents, are read the same
/// way. A directory is `read: Is a directory`, as [`Input::open`] says.
pub(crate) fn peek_whole<R>(
    path: &Path,
    max: usize,
    strategy: Strategy,
    f: impl FnOnce(&File, &[u8]) -> R,
) -> Result<Peeked<R>> {
    use std::os::unix::fs::FileExt;
    let file = open_file(path)?;
    let got = with_read_buffer(max, |buf| {
        match crate::map::retry_eintr(|| file.read_at(buf, 0)) {
            Ok(n) if n < max => Ok(Some(f(&file, &buf[..n]))),
            Ok(_) => Ok(None),
            Err(e) if e.raw_os_error() == Some(libc::EISDIR) => Err(Error::io(path, "read", e)),
            // Not readable at offsets (ESPIPE, EINVAL): classified below.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ESPIPE | libc::EINVAL)) => Ok(None),
            Err(e) => Err(Error::io(path, "read", e)),
        }
    })?;
    match got {
        Some(r) => Ok(Peeked::Whole(r)),
        None => Ok(Peeked::Larger(Input::from_opened(classify(file, path)?, path, strategy)?)),
    }
}

/// Decides how the open input `file` can be read; see the module docs.
fn classify(file: File, path: &Path) -> Result<Opened> {
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    let ft = meta.file_type();
    if ft.is_dir() {
        return Err(Error::io(path, "read", std::io::Error::from_raw_os_error(libc::EISDIR)));
    }
    if ft.is_fifo()
        || ft.is_char_device()
        || ft.is_socket()
        || (ft.is_file() && (meta.len() == 0 || pseudo_fs_dev(&file, meta.dev())))
    {
        return Ok(Opened::Stream(Box::new(file)));
    }
    if !ft.is_file() {
        return Err(Error::not_a_file(path, "not a regular file, pipe or character device"));
    }
    Ok(Opened::File { file, len: meta.len() })
}

/// Standard input as a file of its own descriptor (a dup: the offset is
/// shared, so reads and seeks move standard input's).
pub(crate) fn stdin_file() -> Result<File> {
    let fd = std::io::stdin().as_fd().try_clone_to_owned();
    Ok(File::from(fd.map_err(|e| Error::io(label(Path::new("-")), "dup", e))?))
}

/// The size of standard input when `path` is `-` and it is a regular file
/// with one (`grep -T < f` aligns as for `f`, as GNU grep does).
fn stdin_size(path: &Path) -> Option<u64> {
    if path.as_os_str() != "-" {
        return None;
    }
    let fd = std::io::stdin().as_fd().try_clone_to_owned().ok()?;
    let file = File::from(fd);
    let meta = file.metadata().ok()?;
    (meta.is_file() && meta.len() > 0 && !pseudo_fs_dev(&file, meta.dev())).then_some(meta.len())
}

/// The whole of an input, opened as the tools open theirs (`-`: standard
/// input; pipes and FIFOs read to their end), e.g. `grep -f FILE`.
pub fn read_input(path: &Path) -> Result<Vec<u8>> {
    let mut b = Vec::new();
    let mut r: Box<dyn Read> = match open_input(path)? {
        Opened::File { file, .. } => Box::new(file),
        Opened::Stream(s) => s,
    };
    r.read_to_end(&mut b).map_err(|e| Error::io(label(path), "read", e))?;
    Ok(b)
}

/// Whether the file lives on procfs or sysfs.
pub(crate) fn pseudo_fs(file: &File) -> bool {
    matches!(crate::map::fs_type(file), Some(PROC_SUPER_MAGIC | SYSFS_MAGIC))
}

/// [`pseudo_fs`] for a file on the device `dev` (its `st_dev`): asked once
/// per device and thread, not once per file (`grep -r` opens tens of
/// thousands of files on a few file systems; `fstatfs` was a fifth of its
/// system calls).
fn pseudo_fs_dev(file: &File, dev: u64) -> bool {
    thread_local! {
        static SEEN: RefCell<Vec<(u64, bool)>> = const { RefCell::new(Vec::new()) };
    }
    SEEN.with(|seen| {
        if let Some(&(_, p)) = seen.borrow().iter().find(|(d, _)| *d == dev) {
            return p;
        }
        let p = pseudo_fs(file);
        let mut seen = seen.borrow_mut();
        if seen.len() >= 64 {
            seen.clear(); // a walk over many mounts: stay small
        }
        seen.push((dev, p));
        p
    })
}

thread_local! {
    // u64 words so a window is 8-byte aligned: statistics view it as typed elements.
    static BUF: RefCell<Vec<u64>> = const { RefCell::new(Vec::new()) };
}

/// Where a read buffer starts: on a page. The kernel copies a `read` into
/// it with `rep movsb`, which on AMD EPYC ran at a third of the speed into
/// a buffer 16 bytes past a page (malloc's) than into a page-aligned one:
/// `grep -r -j1 -c EHWPOISON /usr/include` spent 38% of its time in that
/// copy (154 ms) against 105 ms aligned, and rg's 130.
const PAGE_ALIGN: usize = 4096;

/// Runs `f` on this thread's reused read buffer, `n` bytes long and
/// page-aligned (see [`PAGE_ALIGN`]; statistics view what is read into it
/// as typed elements).
/// `f` must not call it again (the buffer is borrowed).
pub(crate) fn with_read_buffer<R>(n: usize, f: impl FnOnce(&mut [u8]) -> R) -> R {
    BUF.with(|cell| {
        let mut words = cell.borrow_mut();
        if words.len() * 8 < n + PAGE_ALIGN {
            words.resize((n + PAGE_ALIGN).div_ceil(8), 0);
        }
        let buf: &mut [u8] = bytemuck::cast_slice_mut(&mut words[..]);
        let skip = buf.as_ptr().align_offset(PAGE_ALIGN);
        f(&mut buf[skip..skip + n])
    })
}

impl Input {
    /// Opens `path` for a scan with `strategy` (streams are streamed whatever it says).
    pub(crate) fn open(path: &Path, strategy: Strategy) -> Result<Input> {
        Input::from_opened(open_input(path)?, path, strategy)
    }

    /// [`Input::open`] once [`open_input`] has opened and classified it.
    fn from_opened(opened: Opened, path: &Path, strategy: Strategy) -> Result<Input> {
        let (file, len) = match opened {
            Opened::Stream(r) => return Ok(Input::Stream(r, stdin_size(path))),
            Opened::File { file, len } => (file, len),
        };
        Ok(match strategy.resolve(len) {
            Strategy::Stream => Input::Stream(Box::new(file), Some(len)),
            Strategy::Read => Input::Random(Source::Read { file, len, path: path.to_owned() }),
            _ => {
                let map = Map::options().mode(Mode::Read).map(file, path)?;
                // Whole-file scans read front to back: ask for read-ahead.
                map.advise(Advice::Sequential, 0, None)?;
                Input::Random(Source::Mapped(map))
            }
        })
    }
}

impl Source {
    /// Opens `path` for access at offsets (editing tools): a stream is an error.
    pub(crate) fn open(path: &Path, strategy: Strategy) -> Result<Source> {
        let strategy = if strategy == Strategy::Stream { Strategy::Read } else { strategy };
        match Input::open(path, strategy)? {
            Input::Random(s) => Ok(s),
            Input::Stream(..) => Err(Error::not_a_file(
                label(path),
                "not a regular file with a size (a pipe, device or /proc file can only be read as a stream)",
            )),
        }
    }

    /// The path the input was opened as.
    pub(crate) fn path(&self) -> &Path {
        match self {
            Source::Mapped(m) => m.path(),
            Source::Read { path, .. } => path,
        }
    }

    /// The open file (for `fstat`).
    pub(crate) fn file(&self) -> &File {
        match self {
            Source::Mapped(m) => m.file(),
            Source::Read { file, .. } => file,
        }
    }

    pub(crate) fn len(&self) -> u64 {
        match self {
            Source::Mapped(m) => m.len() as u64,
            Source::Read { len, .. } => *len,
        }
    }

    /// Gives the mapped pages of `[start, end)` back (`MADV_DONTNEED`; they
    /// stay in the page cache and refault from it if read again), so a
    /// scan's resident memory is a window per thread, not the files it has
    /// read (`grep -r` over `/usr/lib` held hundreds of MB of `.so` pages
    /// until each file was unmapped). A no-op for the read strategy. The
    /// advice is a hint: a refusal changes nothing read.
    pub(crate) fn release(&self, start: u64, end: u64) {
        if let Source::Mapped(m) = self {
            // A read-only map: DontNeed keeps its bytes (Map::advise checks).
            let _ = m.advise(Advice::DontNeed, start as usize, Some((end - start) as usize));
        }
    }

    /// Calls `f` with the bytes `[start, end)` (within the file); a mapped
    /// window of [`RELEASE_MIN`] or more is [released](Source::release)
    /// after.
    ///
    /// `f` must not call `with_window` itself (the read buffer is per thread).
    pub(crate) fn with_window<R>(
        &self,
        start: u64,
        end: u64,
        f: impl FnOnce(&[u8]) -> R,
    ) -> Result<R> {
        debug_assert!(start <= end && end <= self.len());
        match self {
            Source::Mapped(m) => {
                let r = m.read_with(|d| f(&d[start as usize..end as usize]))?;
                if end - start >= RELEASE_MIN {
                    self.release(start, end);
                }
                Ok(r)
            }
            Source::Read { file, path, .. } => with_read_buffer((end - start) as usize, |buf| {
                let got = pread_full(file, buf, start).map_err(|e| Error::io(path, "read", e))?;
                if got < buf.len() {
                    // Not mapped: say so (FileTruncated is about mappings).
                    return Err(Error::Truncated {
                        path: path.clone(),
                        during: "being read; stopped there",
                    });
                }
                Ok(f(buf))
            }),
        }
    }
}

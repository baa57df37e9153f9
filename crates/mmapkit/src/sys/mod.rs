//! The bottom floor: thin wrappers over every system call mmapkit makes,
//! and the vector kernels (`simd`). It uses no other module of the crate
//! (its errors are `io::Error`s), so every module may use it.
//!
//! memmap2 cannot reserve address space or map over part of an existing
//! mapping (`MAP_FIXED`), which growth-in-place depends on, so this module
//! talks to libc directly. Functions that take raw addresses are `unsafe`:
//! the caller promises the range belongs to a reservation it owns.

use std::ffi::CStr;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::OnceLock;

use libc::{c_int, c_void};

pub(crate) mod simd;

/// The system page size (cached; it cannot change while we run).
pub fn page_size() -> usize {
    static PAGE: OnceLock<usize> = OnceLock::new();
    *PAGE.get_or_init(|| {
        // SAFETY: sysconf has no preconditions.
        let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        if p > 0 {
            p as usize
        } else {
            4096
        }
    })
}

pub(crate) fn round_up(n: usize) -> usize {
    let p = page_size();
    n.div_ceil(p) * p
}

pub(crate) fn round_down(n: usize) -> usize {
    n & !(page_size() - 1)
}

fn check(ret: c_int) -> io::Result<()> {
    if ret == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// An inaccessible anonymous mapping (`PROT_NONE`, no swap or commit
/// charge) at `addr` (a hint, or exact with MAP_FIXED[_NOREPLACE] in `flags`).
///
/// # Safety
/// With `MAP_FIXED` in `flags`, the range must be owned by the caller and
/// unborrowed (it is replaced).
unsafe fn map_none(addr: *mut u8, len: usize, flags: c_int) -> io::Result<*mut u8> {
    // SAFETY: guaranteed by the caller for MAP_FIXED; otherwise the kernel
    // never replaces existing mappings.
    let p = unsafe {
        libc::mmap(
            addr.cast(),
            len,
            libc::PROT_NONE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE | flags,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// Reserves `len` bytes of address space that nothing can touch.
pub(crate) fn reserve(len: usize) -> io::Result<*mut u8> {
    // SAFETY: no MAP_FIXED: the kernel picks a free range.
    unsafe { map_none(std::ptr::null_mut(), len, 0) }
}

/// Tries to reserve `[addr, addr+len)` exactly, failing (without touching
/// anything) when any of it is already in use.
pub(crate) fn reserve_exact(addr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: MAP_FIXED_NOREPLACE never replaces an existing mapping.
    let p = unsafe { map_none(addr, len, libc::MAP_FIXED_NOREPLACE) }?;
    if p != addr {
        // Kernels before 4.17 ignore the flag and treat it as a hint.
        // SAFETY: `p` is the mapping we just made and nobody else knows it.
        unsafe { libc::munmap(p.cast(), len) };
        return Err(io::Error::from_raw_os_error(libc::EEXIST));
    }
    Ok(())
}

/// Replaces `[addr, addr+len)` with private anonymous zero pages.
///
/// # Safety
/// As for [`map_fixed`]: the range lies inside a reservation owned by the
/// caller, and no live reference relies on its old contents.
pub(crate) unsafe fn map_zero(addr: *mut u8, len: usize, prot: c_int) -> io::Result<()> {
    // SAFETY: guaranteed by the caller.
    let p = unsafe {
        libc::mmap(
            addr.cast(),
            len,
            prot,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_FIXED,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Maps `len` bytes of `fd` at file offset `off` where the kernel chooses.
pub(crate) fn map_anywhere(
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: u64,
) -> io::Result<*mut u8> {
    // SAFETY: no MAP_FIXED: the kernel picks a free range and replaces nothing.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, off as libc::off_t) };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(p.cast())
    }
}

/// Maps `len` bytes of `fd` at file offset `off` over `[addr, addr+len)`.
///
/// # Safety
/// The range must lie inside a reservation owned by the caller, and no
/// live reference may point into the part being replaced.
pub(crate) unsafe fn map_fixed(
    addr: *mut u8,
    len: usize,
    prot: c_int,
    flags: c_int,
    fd: c_int,
    off: u64,
) -> io::Result<()> {
    // SAFETY: guaranteed by the caller (range owned, nothing borrowed).
    let p = unsafe {
        libc::mmap(addr.cast(), len, prot, flags | libc::MAP_FIXED, fd, off as libc::off_t)
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// Returns `[addr, addr+len)` to the inaccessible reservation.
///
/// # Safety
/// As for [`map_fixed`].
pub(crate) unsafe fn unmap_to_reserve(addr: *mut u8, len: usize) -> io::Result<()> {
    // SAFETY: guaranteed by the caller.
    unsafe { map_none(addr, len, libc::MAP_FIXED) }.map(drop)
}

/// Releases a whole reservation.
///
/// # Safety
/// Nothing may refer into the range afterwards.
pub(crate) unsafe fn release(addr: *mut u8, len: usize) {
    // SAFETY: guaranteed by the caller. munmap only fails for bad
    // arguments, which would be a bug here; there is nothing to recover.
    unsafe { libc::munmap(addr.cast(), len) };
}

/// Moves the pages of `[old, old+len)` to `new` (which must be reserved),
/// keeping their contents, private copies included.
///
/// # Safety
/// Both ranges must be owned by the caller and nothing may refer into `old`.
pub(crate) unsafe fn move_pages(old: *mut u8, len: usize, new: *mut u8) -> io::Result<()> {
    // SAFETY: guaranteed by the caller.
    let p = unsafe {
        libc::mremap(
            old.cast(),
            len,
            len,
            libc::MREMAP_MAYMOVE | libc::MREMAP_FIXED,
            new.cast::<c_void>(),
        )
    };
    if p == libc::MAP_FAILED {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// # Safety
/// `[addr, addr+len)` must be mapped and owned by the caller.
pub(crate) unsafe fn madvise(addr: *mut u8, len: usize, advice: c_int) -> io::Result<()> {
    // SAFETY: guaranteed by the caller; madvise never invalidates memory
    // except for MADV_DONTNEED/REMOVE on private pages, which the public
    // API documents.
    check(unsafe { libc::madvise(addr.cast(), len, advice) })
}

/// `mlock` (`lock`) or `munlock` of `[addr, addr+len)`.
///
/// # Safety
/// `[addr, addr+len)` must be mapped and owned by the caller.
pub(crate) unsafe fn mlock(addr: *mut u8, len: usize, lock: bool) -> io::Result<()> {
    // SAFETY: guaranteed by the caller; locking faults pages in and pins
    // them, it never changes their contents.
    check(unsafe {
        if lock {
            libc::mlock(addr.cast(), len)
        } else {
            libc::munlock(addr.cast(), len)
        }
    })
}

/// # Safety
/// `[addr, addr+len)` must be mapped and owned by the caller.
pub(crate) unsafe fn msync(addr: *mut u8, len: usize, sync: bool) -> io::Result<()> {
    let flags = if sync { libc::MS_SYNC } else { libc::MS_ASYNC };
    // SAFETY: guaranteed by the caller; msync does not change memory.
    check(unsafe { libc::msync(addr.cast(), len, flags) })
}

/// Page-cache residency of `[addr, addr+len)` (page aligned), one bool per page.
///
/// # Safety
/// `[addr, addr+len)` must be mapped and owned by the caller.
pub(crate) unsafe fn mincore(addr: *mut u8, len: usize) -> io::Result<Vec<u8>> {
    let mut vec = vec![0u8; len.div_ceil(page_size())];
    // SAFETY: `vec` has one byte per page of the range, as mincore requires.
    check(unsafe { libc::mincore(addr.cast(), len, vec.as_mut_ptr().cast()) })?;
    Ok(vec)
}

/// Allocates blocks for `[from, from+len)` of `file`, extending it if
/// needed, so later writes through a mapping cannot hit ENOSPC (which the
/// kernel reports as SIGBUS).
///
/// A failed `fallocate` may have allocated part of the range before it
/// ran out of space (ext4 allocates extent by extent and keeps what it
/// got, even growing the file): on failure the file is cut back to its old
/// size, which also frees blocks preallocated past the end, so disk usage
/// returns to what it was. (Holes inside the old size that were filled
/// before the failure stay allocated; callers only ever allocate past the
/// end of the file.)
pub(crate) fn allocate(file: &File, from: u64, len: u64) -> io::Result<()> {
    if len == 0 {
        return Ok(());
    }
    let old = file.metadata()?.len();
    // Asking for more than is free fails at once, before fallocate
    // allocates (and ext4 grows the extent tree for) a partial range that
    // would have to be given back.
    if let Ok(free) = free_bytes(file) {
        if from.saturating_add(len).saturating_sub(old) > free {
            return Err(io::Error::from_raw_os_error(libc::ENOSPC));
        }
    }
    // SAFETY: plain syscall on a valid descriptor.
    let r =
        unsafe { libc::fallocate(file.as_raw_fd(), 0, from as libc::off_t, len as libc::off_t) };
    if r == 0 {
        return Ok(());
    }
    let err = io::Error::last_os_error();
    match err.raw_os_error() {
        // File systems without fallocate: extend sparsely, the best we can do.
        Some(libc::EOPNOTSUPP) | Some(libc::ENOSYS) => {
            if old < from + len {
                file.set_len(from + len)?;
            }
            Ok(())
        }
        _ => {
            // ftruncate to the same size still frees blocks past the end
            // (ext4 and xfs truncate preallocations on every size change).
            let _ = file.set_len(old);
            Err(err)
        }
    }
}

/// Bytes available to this process on the file's file system.
fn free_bytes(file: &File) -> io::Result<u64> {
    let mut st = std::mem::MaybeUninit::<libc::statvfs>::uninit();
    // SAFETY: valid descriptor and a properly sized out-pointer.
    check(unsafe { libc::fstatvfs(file.as_raw_fd(), st.as_mut_ptr()) })?;
    // SAFETY: fstatvfs succeeded, so the struct is initialised.
    let st = unsafe { st.assume_init() };
    if st.f_blocks == 0 {
        // No size reported (memfd's internal mount, some FUSE and network
        // file systems): let fallocate decide.
        return Ok(u64::MAX);
    }
    // Root may use the reserved blocks too.
    // SAFETY: geteuid has no preconditions.
    let avail = if unsafe { libc::geteuid() } == 0 { st.f_bfree } else { st.f_bavail };
    Ok((avail as u64).saturating_mul(st.f_frsize))
}

/// An anonymous in-memory file (memfd); anonymous mappings are made over
/// one so that they can grow and be shared exactly like file mappings.
pub(crate) fn memfd(name: &CStr) -> io::Result<File> {
    // SAFETY: `name` is a valid C string.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `fd` was just created and is owned by nobody else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

/// Whether process `pid` may still exist: false only when `kill(pid, 0)`
/// says ESRCH (EPERM means it exists but belongs to someone else).
pub(crate) fn process_exists(pid: i32) -> bool {
    if pid <= 0 {
        return true;
    }
    // SAFETY: signal 0 sends nothing; it only checks that `pid` exists.
    let r = unsafe { libc::kill(pid, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Whether signal `sig` is currently ignored (`SIG_IGN`), e.g. SIGHUP
/// under `nohup` or SIGINT in a background job of a script.
pub(crate) fn signal_ignored(sig: c_int) -> bool {
    let mut old = std::mem::MaybeUninit::<libc::sigaction>::zeroed();
    // SAFETY: a null new action only reads the current one into `old`,
    // which is valid zeroed memory for a `sigaction`.
    let r = unsafe { libc::sigaction(sig, std::ptr::null(), old.as_mut_ptr()) };
    // SAFETY: sigaction filled `old` (or it is still all zeros).
    r == 0 && unsafe { old.assume_init() }.sa_sigaction == libc::SIG_IGN
}

/// Descriptors this process may still open: the soft `RLIMIT_NOFILE`
/// less those open now (counted by probing each number below the limit
/// with `fcntl(F_GETFD)`; `None` above 4,096, where there is no limit to
/// speak of).
pub(crate) fn free_descriptors() -> Option<usize> {
    let mut lim = std::mem::MaybeUninit::<libc::rlimit>::zeroed();
    // SAFETY: getrlimit writes one `rlimit` into valid memory.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, lim.as_mut_ptr()) } != 0 {
        return None;
    }
    // SAFETY: getrlimit filled it.
    let soft = unsafe { lim.assume_init() }.rlim_cur;
    if soft == libc::RLIM_INFINITY || soft > 1 << 12 {
        return None; // room for any thread count (EMFILE is retried anyway)
    }
    let soft = soft as c_int;
    // SAFETY: F_GETFD only reads the descriptor table; no memory.
    let open = (0..soft).filter(|&fd| unsafe { libc::fcntl(fd, libc::F_GETFD) } != -1).count();
    Some((soft as usize).saturating_sub(open))
}

/// Bounds what glibc's malloc keeps of freed memory, for long-running
/// servers: allocations of 128 KiB or more are mapped and given back when
/// freed, and two arenas are kept. With glibc's defaults the mmap
/// threshold rises after the first large frees, and freed buffers then
/// stay in up to 8 arenas per core: an `mmapkit-kv` node that took 200 MB
/// of 256 KiB values kept ~190 MiB of heap it no longer used, against
/// 105 MiB with these settings (`mmapkit-raft/tests/memory.rs`). Call it
/// first in `main`, before other threads start. A no-op off glibc.
pub fn bound_malloc_retention() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    // SAFETY: mallopt only sets allocator parameters (its result, whether
    // the value was taken, is a hint's).
    unsafe {
        libc::mallopt(libc::M_MMAP_THRESHOLD, 128 << 10);
        libc::mallopt(libc::M_ARENA_MAX, 2);
    }
}

/// Blocks the calling thread has read from storage so far
/// (`getrusage(RUSAGE_THREAD)`'s `ru_inblock`; 0 where it cannot tell):
/// 0 while everything it read came from the page cache.
pub(crate) fn thread_blocks_read() -> u64 {
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: getrusage writes one `rusage` into valid memory.
    if unsafe { libc::getrusage(libc::RUSAGE_THREAD, usage.as_mut_ptr()) } != 0 {
        return 0;
    }
    // SAFETY: getrusage filled it.
    u64::try_from(unsafe { usage.assume_init() }.ru_inblock).unwrap_or(0)
}

/// `posix_fadvise(SEQUENTIAL)` over the whole file: a hint (doubles the
/// read-ahead window), so a refusal is ignored.
pub(crate) fn fadvise_sequential(file: &File) {
    // SAFETY: plain syscall on a valid descriptor; it touches no memory.
    let _ = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_SEQUENTIAL) };
}

/// The offset of the first hole at or after `from` (`lseek(SEEK_HOLE)`;
/// the file's size when it has none; `None` where the file system cannot
/// tell).
pub(crate) fn seek_hole(file: &File, from: u64) -> Option<u64> {
    let from = libc::off_t::try_from(from).ok()?;
    // SAFETY: plain syscall on a valid descriptor; it touches no memory.
    // The descriptor's offset moves, but every read through it is a pread.
    let r = unsafe { libc::lseek(file.as_raw_fd(), from, libc::SEEK_HOLE) };
    u64::try_from(r).ok()
}

/// `posix_fadvise(DONTNEED)` over the whole file.
pub(crate) fn fadvise_dontneed(file: &File) -> io::Result<()> {
    // SAFETY: plain syscall on a valid descriptor.
    let r = unsafe { libc::posix_fadvise(file.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::from_raw_os_error(r))
    }
}

/// Starts writeback of `[offset, offset+len)` of `file` without waiting
/// (`sync_file_range(SYNC_FILE_RANGE_WRITE)`): a hint, not a sync.
pub fn start_writeback(file: &File, offset: u64, len: u64) -> io::Result<()> {
    // SAFETY: plain syscall on a valid descriptor; it reads only its arguments.
    let r = unsafe {
        libc::sync_file_range(
            file.as_raw_fd(),
            offset as libc::off64_t,
            len as libc::off64_t,
            libc::SYNC_FILE_RANGE_WRITE,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Runs `f` again while it fails with EMFILE (too many open files in
/// this process), for up to about half a second: other threads of a walk
/// close theirs within a file's search. Then the error stands.
pub(crate) fn retry_emfile<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    let mut pause = std::time::Duration::from_micros(100);
    let mut waited = std::time::Duration::ZERO;
    loop {
        match f() {
            Err(e) if e.raw_os_error() == Some(libc::EMFILE) && waited.as_millis() < 500 => {
                std::thread::sleep(pause);
                waited += pause;
                pause = (pause * 2).min(std::time::Duration::from_millis(20));
            }
            r => return r,
        }
    }
}

/// Runs `f` again while it fails with EINTR: the one retry loop for
/// interrupted system calls.
pub(crate) fn retry_eintr<T>(mut f: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            r => return r,
        }
    }
}

/// The one read-until-full loop: calls `step(done)` (which reads into the
/// buffer from `done` on and returns how many bytes it got, 0 at the end)
/// until `len` bytes are in or the input ends; EINTR is retried. Returns
/// the bytes read.
fn fill(len: usize, mut step: impl FnMut(usize) -> io::Result<usize>) -> io::Result<usize> {
    let mut done = 0;
    while done < len {
        match retry_eintr(|| step(done))? {
            0 => break,
            n => done += n,
        }
    }
    Ok(done)
}

/// `read` until `buf` is full or the input ends; returns the bytes read.
pub(crate) fn read_full(r: &mut (impl io::Read + ?Sized), buf: &mut [u8]) -> io::Result<usize> {
    fill(buf.len(), |done| r.read(&mut buf[done..]))
}

/// `pread` from `off` until `buf` is full or the file ends; returns the
/// bytes read.
pub(crate) fn pread_full(file: &File, buf: &mut [u8], off: u64) -> io::Result<usize> {
    use std::os::unix::fs::FileExt;
    fill(buf.len(), |done| file.read_at(&mut buf[done..], off + done as u64))
}

/// [`pread_full`] into uninitialised memory (no zeroing first).
pub(crate) fn pread_full_uninit(
    file: &File,
    buf: &mut [std::mem::MaybeUninit<u8>],
    off: u64,
) -> io::Result<usize> {
    fill(buf.len(), |done| {
        let rest = &mut buf[done..];
        // SAFETY: `rest` is valid for writes of `rest.len()` bytes; pread
        // only writes initialised bytes into it.
        let n = unsafe {
            libc::pread(
                file.as_raw_fd(),
                rest.as_mut_ptr().cast(),
                rest.len(),
                (off + done as u64) as libc::off_t,
            )
        };
        if n < 0 {
            Err(io::Error::last_os_error())
        } else {
            Ok(n as usize)
        }
    })
}

/// Whether `fd` was opened with `O_APPEND` (a shell's `>>`); false when
/// it cannot be asked.
pub fn is_append(fd: std::os::fd::BorrowedFd<'_>) -> bool {
    // SAFETY: F_GETFL reads the descriptor's status flags and touches no memory.
    let flags = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFL) };
    flags >= 0 && flags & libc::O_APPEND != 0
}

/// The file system type of `file` (`statfs` f_type), None when unknown.
pub fn fs_type(file: &File) -> Option<i64> {
    let mut st = std::mem::MaybeUninit::<libc::statfs>::zeroed();
    // SAFETY: fstatfs writes at most one `statfs` into `st`, valid for writes.
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), st.as_mut_ptr()) };
    if rc != 0 {
        return None;
    }
    // SAFETY: fstatfs succeeded, so `st` is initialised.
    let st = unsafe { st.assume_init() };
    #[allow(clippy::unnecessary_cast)] // f_type is not i64 on every target
    Some(st.f_type as i64)
}

/// The C library's text for an errno ("No such file or directory"), as
/// coreutils and Python print it (and Rust's `io::Error` before its
/// " (os error N)"); "Unknown error N" for a number it does not know.
pub fn strerror(errno: c_int) -> String {
    let mut buf = [0u8; 256];
    // SAFETY: the XSI strerror_r (what the libc crate binds on Linux)
    // writes a NUL-terminated string of at most `buf.len()` bytes into
    // `buf`, valid for writes; on failure `buf` stays zeroed (empty).
    unsafe { libc::strerror_r(errno, buf.as_mut_ptr().cast(), buf.len()) };
    let text = CStr::from_bytes_until_nul(&buf).map(CStr::to_string_lossy).unwrap_or_default();
    if text.is_empty() {
        format!("Unknown error {errno}")
    } else {
        text.into_owned()
    }
}

/// What the process started with, before Rust's runtime changed it: bit
/// `fd` set if standard descriptor `fd` (0, 1 or 2) was closed (the
/// runtime opens `/dev/null` on it, so `>&-` could no longer be told from
/// `> /dev/null`, and output that went nowhere would be reported as
/// written), [`SIGPIPE_IGNORED`] if SIGPIPE was ignored (the runtime
/// ignores it always). Recorded by a constructor, see [`RECORD_START`].
static AT_START: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);
const SIGPIPE_IGNORED: u8 = 1 << 3;

extern "C" fn record_start() {
    let mut bits = 0;
    for fd in 0..3 {
        // SAFETY: F_GETFD only asks whether the descriptor is open.
        if unsafe { libc::fcntl(fd, libc::F_GETFD) } == -1 {
            bits |= 1 << fd;
        }
    }
    if signal_ignored(libc::SIGPIPE) {
        bits |= SIGPIPE_IGNORED;
    }
    AT_START.store(bits, std::sync::atomic::Ordering::Relaxed);
}

// Run by the loader before Rust's runtime starts (and when the Python
// extension is loaded, where it records what the interpreter has).
#[used]
#[link_section = ".init_array"]
static RECORD_START: extern "C" fn() = record_start;

/// Whether standard descriptor `fd` (0, 1 or 2) was closed when the
/// process started (recorded before Rust's runtime starts; see `AT_START`).
pub fn stdio_closed_at_start(fd: c_int) -> bool {
    (0..3).contains(&fd) && AT_START.load(std::sync::atomic::Ordering::Relaxed) & (1 << fd) != 0
}

/// Whether SIGPIPE was ignored when the process started (Rust's runtime
/// ignores it always; see `AT_START`).
pub fn sigpipe_ignored_at_start() -> bool {
    AT_START.load(std::sync::atomic::Ordering::Relaxed) & SIGPIPE_IGNORED != 0
}

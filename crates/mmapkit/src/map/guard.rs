//! Turning `SIGBUS` from truncated files into errors.
//!
//! When a mapped file shrinks (another process truncates it), touching a
//! page past the new end raises `SIGBUS`, which kills the process by
//! default. mmapkit installs a process-wide handler that:
//!
//! 1. looks the faulting address up in a lock-free table of mmapkit
//!    mappings (reads only atomics, so it is async-signal-safe);
//! 2. if found, maps anonymous zero pages from the faulting page to the
//!    end of that mapping (one signal per mapping, not one per page), bumps
//!    the mapping's fault counter and returns, so the faulting instruction
//!    is retried and reads zeros;
//! 3. otherwise chains to the handler that was installed before it
//!    (Python's `faulthandler`, a JVM, ...) or, if there was none, restores
//!    the default action so the process dies exactly as it would have.
//!
//! Every mmapkit operation checks the counter after touching memory and
//! reports [`crate::Error::FileTruncated`]; the counter is sticky until the
//! mapping is re-synchronised with the file (`Map::refresh`).
//!
//! The handler is (re)installed each time a mapping is registered, so a
//! library that replaced it after mmapkit was loaded gets chained to from
//! the next mapping on; [`on_top`] puts it back in front at once (the
//! Python package calls it after `faulthandler.enable()` and after
//! PyTorch's DataLoader workers set their handlers, which would otherwise
//! see the fault first).
//!
//! A handler installed after ours that restores the previous handler and
//! re-raises the signal (`faulthandler` does) reaches us with a sent
//! signal (`si_code` `SI_TKILL`/`SI_USER` from our own process), without
//! the faulting address. Then every protected mapping's file is looked at
//! (`fstat`): a mapping whose file no longer covers it has its lost tail
//! probed (a one-byte `write` of its first lost page into a pipe of ours,
//! which fails with `EFAULT` instead of faulting) and, if that page is
//! still unreadable, replaced with zero pages as above; then the handler
//! returns and the faulting access runs again, on zeros. A sent `SIGBUS`
//! with no such mapping is passed on (and kills) as before.
//!
//! `mmap` is not on POSIX's async-signal-safe list, but on Linux it is a
//! bare system call with no user-space locks; `fstat`, `write`, `read`
//! and `sigaction` are on it.

use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use libc::{c_int, c_void, siginfo_t};

const CHUNK: usize = 1024;
const CHUNKS: usize = 64; // up to 65,536 live mappings, the default vm.max_map_count

/// Slots in use, and maps that found the table full (sticky total).
static IN_USE: AtomicUsize = AtomicUsize::new(0);
static UNPROTECTED: AtomicUsize = AtomicUsize::new(0);
static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The table's capacity: 65,536 slots, or (with the `test-hooks`
/// feature, for tests of the full-table state) fewer when the environment
/// variable `MMAPKIT_GUARD_SLOTS` says so when the first map is made.
fn capacity() -> usize {
    static CAP: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CAP.get_or_init(|| {
        #[cfg(feature = "test-hooks")]
        let hook: Option<usize> =
            std::env::var("MMAPKIT_GUARD_SLOTS").ok().and_then(|v| v.parse().ok());
        #[cfg(not(feature = "test-hooks"))]
        let hook: Option<usize> = None;
        hook.map_or(CHUNK * CHUNKS, |n: usize| n.min(CHUNK * CHUNKS))
    })
}

/// The state of the truncation guard ([`super::guard_stats`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GuardStats {
    /// Mappings the guard can protect at once.
    pub capacity: usize,
    /// Mappings protected now.
    pub in_use: usize,
    /// Mappings made while the table was full, since the process started:
    /// they work, but a truncation of their file raises `SIGBUS` as with a
    /// plain `mmap` (and [`super::Map::is_protected`] says false).
    pub unprotected: usize,
}

pub(crate) fn stats() -> GuardStats {
    GuardStats {
        capacity: capacity(),
        in_use: IN_USE.load(Ordering::Acquire),
        unprotected: UNPROTECTED.load(Ordering::Acquire),
    }
}

struct Entry {
    start: AtomicUsize, // 0 = free
    end: AtomicUsize,   // end of the file-backed part
    prot: AtomicI32,
    faults: AtomicUsize,
    /// The mapped file's descriptor (open as long as the entry is in use:
    /// a map clears its slot before it closes the file) and the file
    /// offset mapped at `start`, for a re-raised signal (module docs).
    fd: AtomicI32,
    file_off: AtomicU64,
}

impl Entry {
    const fn new() -> Self {
        Entry {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            prot: AtomicI32::new(0),
            faults: AtomicUsize::new(0),
            fd: AtomicI32::new(-1),
            file_off: AtomicU64::new(0),
        }
    }
}

type Chunk = [Entry; CHUNK];

static TABLE: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(ptr::null_mut()) }; CHUNKS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
/// What `PREVIOUS` was before the last [`on_top`] moved it (one deep: see
/// [`below_removed`]).
static BEFORE_TOP: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
static INSTALL: Mutex<()> = Mutex::new(());
/// The thread (kernel tid) now passing a signal on to `PREVIOUS`: a signal
/// that comes back to us in that thread was re-raised by it, and ends the
/// process (a chain that loops back to us must not loop forever).
static CHAINING: AtomicI32 = AtomicI32::new(0);
/// The last foreign fault passed on and how many times in a row it came
/// back (a previous handler that returns without fixing anything, as a
/// disabled `faulthandler` does, would otherwise re-run the fault forever).
static LAST_FOREIGN: AtomicUsize = AtomicUsize::new(0);
static REPEATS: AtomicUsize = AtomicUsize::new(0);
const MAX_REPEATS: usize = 64;
/// A non-blocking pipe of ours that probes whether a page can be read
/// without a fault (`[read end, write end]`; -1 until the first install).
static PROBE: [AtomicI32; 2] = [AtomicI32::new(-1), AtomicI32::new(-1)];

/// A mapping's entry in the fault table; unregisters itself on drop.
pub(crate) struct Slot {
    entry: &'static Entry,
}

impl Slot {
    /// Registers `[start, end)` (the file-backed part of a mapping) and
    /// makes sure the handler is installed.
    pub(crate) fn register(
        start: usize,
        end: usize,
        prot: c_int,
        fd: c_int,
        file_off: u64,
    ) -> Option<Slot> {
        install();
        let _g = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
        if IN_USE.load(Ordering::Acquire) >= capacity() {
            return Self::full();
        }
        for chunk_ptr in TABLE.iter() {
            let mut chunk = chunk_ptr.load(Ordering::Acquire);
            if chunk.is_null() {
                // Chunks are leaked on purpose: the handler may be reading
                // them at any moment, so they can never be freed.
                let fresh: &'static Chunk = Box::leak(Box::new([const { Entry::new() }; CHUNK]));
                chunk = fresh as *const Chunk as *mut Chunk;
                chunk_ptr.store(chunk, Ordering::Release);
            }
            // SAFETY: non-null chunk pointers come from Box::leak above and
            // live for the rest of the process.
            let chunk: &'static Chunk = unsafe { &*chunk };
            if let Some(entry) = chunk.iter().find(|e| e.start.load(Ordering::Relaxed) == 0) {
                entry.end.store(end, Ordering::Relaxed);
                entry.prot.store(prot, Ordering::Relaxed);
                entry.faults.store(0, Ordering::Relaxed);
                entry.fd.store(fd, Ordering::Relaxed);
                entry.file_off.store(file_off, Ordering::Relaxed);
                entry.start.store(start.max(1), Ordering::Release);
                IN_USE.fetch_add(1, Ordering::AcqRel);
                return Some(Slot { entry });
            }
        }
        Self::full()
    }

    /// Table full: the mapping works, unprotected; counted, and said once.
    fn full() -> Option<Slot> {
        UNPROTECTED.fetch_add(1, Ordering::AcqRel);
        if !WARNED.swap(true, Ordering::AcqRel) {
            ::log::warn!(
                "{} mappings are already protected against truncation; new ones are not (a \
                 truncated file raises SIGBUS for them; see map::guard_stats)",
                capacity()
            );
        }
        None
    }

    pub(crate) fn set_range(&self, start: usize, end: usize) {
        self.entry.end.store(end, Ordering::Release);
        self.entry.start.store(start.max(1), Ordering::Release);
    }

    pub(crate) fn faults(&self) -> usize {
        self.entry.faults.load(Ordering::Acquire)
    }

    pub(crate) fn clear_faults(&self) {
        self.entry.faults.store(0, Ordering::Release);
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.entry.start.store(0, Ordering::Release);
        IN_USE.fetch_sub(1, Ordering::AcqRel);
    }
}

fn lookup(addr: usize) -> Option<&'static Entry> {
    for chunk_ptr in TABLE.iter() {
        let chunk = chunk_ptr.load(Ordering::Acquire);
        if chunk.is_null() {
            return None;
        }
        // SAFETY: see `register`: chunks are never freed.
        let chunk: &'static Chunk = unsafe { &*chunk };
        for e in chunk.iter() {
            let start = e.start.load(Ordering::Acquire);
            if start != 0 && addr >= start && addr < e.end.load(Ordering::Acquire) {
                return Some(e);
            }
        }
    }
    None
}

/// Replaces `[page, end)` of `e`'s mapping with zero pages and counts the
/// fault; false if the kernel refused.
fn zero_tail(e: &Entry, page: usize, end: usize) -> bool {
    // SAFETY: [page, end) lies inside an mmapkit mapping whose file pages
    // are gone; replacing them with zero pages is what turns the fault
    // into a recoverable error.
    let zeroed = unsafe {
        super::sys::map_zero(page as *mut u8, end - page, e.prot.load(Ordering::Relaxed))
    };
    if zeroed.is_ok() {
        e.faults.fetch_add(1, Ordering::AcqRel);
    }
    zeroed.is_ok()
}

/// Whether the byte at `addr` can be read without a fault: the kernel
/// copies it into our pipe (and we take it out again), answering `EFAULT`
/// where a user-space read would raise `SIGBUS`. Async-signal-safe.
fn readable(addr: usize) -> Option<bool> {
    let (r, w) = (PROBE[0].load(Ordering::Acquire), PROBE[1].load(Ordering::Acquire));
    if r < 0 || w < 0 {
        return None;
    }
    // SAFETY: write only reads one byte at `addr` (and reports EFAULT if it
    // cannot); read drains it into a local.
    unsafe {
        if libc::write(w, addr as *const c_void, 1) == 1 {
            let mut b = 0u8;
            libc::read(r, (&mut b as *mut u8).cast(), 1);
            return Some(true);
        }
        (*libc::__errno_location() == libc::EFAULT).then_some(false)
    }
}

/// A `SIGBUS` sent by our own process (another handler re-raised a fault
/// we never saw, module docs): zero the lost tail of every protected
/// mapping whose file no longer covers it and whose first lost page is
/// still unreadable. Returns whether one was found.
fn recover_reraised() -> bool {
    let page_size = PAGE.load(Ordering::Relaxed);
    let mut found = false;
    for chunk_ptr in TABLE.iter() {
        let chunk = chunk_ptr.load(Ordering::Acquire);
        if chunk.is_null() {
            break;
        }
        // SAFETY: see `register`: chunks are never freed.
        let chunk: &'static Chunk = unsafe { &*chunk };
        for e in chunk.iter() {
            let start = e.start.load(Ordering::Acquire);
            let end = e.end.load(Ordering::Acquire);
            let fd = e.fd.load(Ordering::Acquire);
            if start == 0 || end <= start || fd < 0 || e.prot.load(Ordering::Relaxed) == 0 {
                continue;
            }
            // SAFETY: fstat writes into a local; fd is the map's own.
            let size = unsafe {
                let mut st: libc::stat = MaybeUninit::zeroed().assume_init();
                if libc::fstat(fd, &mut st) != 0 || st.st_mode & libc::S_IFMT != libc::S_IFREG {
                    continue;
                }
                st.st_size as u64
            };
            let off = e.file_off.load(Ordering::Relaxed);
            let backed = size.saturating_sub(off).div_ceil(page_size as u64) * page_size as u64;
            let lost = start.saturating_add(usize::try_from(backed).unwrap_or(usize::MAX));
            // Still the same mapping (a map clears its slot before it
            // unmaps), and its first lost page still unreadable.
            let same =
                e.start.load(Ordering::Acquire) == start && e.fd.load(Ordering::Acquire) == fd;
            if lost < end && same && readable(lost) == Some(false) && zero_tail(e, lost, end) {
                found = true;
            }
        }
    }
    found
}

/// The calling thread's kernel id (async-signal-safe).
fn tid() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

extern "C" fn on_sigbus(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    if code > 0 {
        if let Some(e) = lookup(addr) {
            let page = addr & !(PAGE.load(Ordering::Relaxed) - 1);
            let end = e.end.load(Ordering::Acquire);
            if end > page && zero_tail(e, page, end) {
                return;
            }
        }
    } else if CHAINING.load(Ordering::Acquire) == tid() {
        // The handler we passed the signal to sent it back: the end.
        die(sig, info);
        return;
    } else {
        // SAFETY: as above; a sent signal carries the sender's pid.
        let sender = unsafe { (*info).si_pid() };
        // SAFETY: getpid has no preconditions.
        if sender == unsafe { libc::getpid() } && recover_reraised() {
            return;
        }
    }
    chain(sig, info, ctx);
}

/// Restores the default action: a real fault re-executes and kills the
/// process as usual; a sent signal is re-raised.
fn die(sig: c_int, info: *mut siginfo_t) {
    // SAFETY: sigaction/raise are async-signal-safe; `info` is the
    // kernel's.
    unsafe {
        let mut dfl: libc::sigaction = MaybeUninit::zeroed().assume_init();
        dfl.sa_sigaction = libc::SIG_DFL;
        libc::sigaction(sig, &dfl, ptr::null_mut());
        if (*info).si_code <= 0 {
            libc::raise(sig);
        }
    }
}

fn chain(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let prev = PREVIOUS.load(Ordering::Acquire);
    // SAFETY: PREVIOUS is null or a leaked, never-freed sigaction.
    let handler = if prev.is_null() { libc::SIG_DFL } else { unsafe { (*prev).sa_sigaction } };
    // SAFETY: the kernel's siginfo_t.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    if code > 0 {
        let key = addr ^ (tid() as usize).rotate_left(48);
        let again = LAST_FOREIGN.swap(key, Ordering::AcqRel) == key;
        let n = if again { REPEATS.fetch_add(1, Ordering::AcqRel) + 1 } else { 0 };
        if !again {
            REPEATS.store(0, Ordering::Release);
        }
        if n >= MAX_REPEATS {
            die(sig, info);
            return;
        }
    }
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        die(sig, info);
        return;
    }
    // SAFETY: `prev` is non-null here (handler is not SIG_DFL).
    let flags = unsafe { (*prev).sa_flags };
    let me = tid();
    let marked = CHAINING.compare_exchange(0, me, Ordering::AcqRel, Ordering::Acquire).is_ok();
    if flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the previous owner installed this as an SA_SIGINFO handler.
        let f: extern "C" fn(c_int, *mut siginfo_t, *mut c_void) =
            unsafe { std::mem::transmute(handler) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the previous owner installed this as a plain handler.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(handler) };
        f(sig);
    }
    if marked {
        CHAINING.store(0, Ordering::Release);
    }
}

/// Installs the handler unless it is the current one; returns whether it
/// was installed now (the replaced handler becomes the one chained to).
fn install() -> bool {
    let _g = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    PAGE.store(super::sys::page_size(), Ordering::Relaxed);
    if PROBE[1].load(Ordering::Acquire) < 0 {
        let mut fds = [-1 as c_int; 2];
        // SAFETY: pipe2 writes two descriptors into `fds`.
        if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) } == 0 {
            PROBE[0].store(fds[0], Ordering::Release);
            PROBE[1].store(fds[1], Ordering::Release);
        }
    }
    // SAFETY: querying and setting a signal action with valid pointers.
    unsafe {
        let mut cur: libc::sigaction = MaybeUninit::zeroed().assume_init();
        if libc::sigaction(libc::SIGBUS, ptr::null(), &mut cur) != 0 {
            return false;
        }
        if cur.sa_sigaction == on_sigbus as *const () as usize {
            return false;
        }
        let old = PREVIOUS.swap(Box::into_raw(Box::new(cur)), Ordering::AcqRel);
        BEFORE_TOP.store(old, Ordering::Release);
        let mut act: libc::sigaction = MaybeUninit::zeroed().assume_init();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGBUS, &act, ptr::null_mut());
    }
    true
}

/// Puts the guard's handler back in front of one installed after it
/// (which then gets every `SIGBUS` that is not a truncated mmapkit
/// mapping's). Returns whether it had to. A no-op until the first map.
pub(crate) fn on_top() -> bool {
    if IN_USE.load(Ordering::Acquire) == 0 && PREVIOUS.load(Ordering::Acquire).is_null() {
        return false;
    }
    install()
}

/// The handler that [`on_top`] last put ours in front of has been removed
/// again, restoring ours (as `faulthandler.disable()` restores what it
/// found): signals go back to the handler chained to before. If removing
/// it restored something else (it was installed before ours), ours is put
/// in front of that.
pub(crate) fn below_removed() {
    // SAFETY: a query with a valid out-pointer.
    let ours = unsafe {
        let mut cur: libc::sigaction = MaybeUninit::zeroed().assume_init();
        libc::sigaction(libc::SIGBUS, ptr::null(), &mut cur) == 0
            && cur.sa_sigaction == on_sigbus as *const () as usize
    };
    if !ours {
        on_top();
        return;
    }
    let _g = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    let before = BEFORE_TOP.swap(ptr::null_mut(), Ordering::AcqRel);
    if !before.is_null() {
        PREVIOUS.store(before, Ordering::Release);
    }
}

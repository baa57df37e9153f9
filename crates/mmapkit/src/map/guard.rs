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
//! the next mapping on. `mmap` is not on POSIX's async-signal-safe list,
//! but on Linux it is a bare system call with no user-space locks.

use std::mem::MaybeUninit;
use std::ptr;
use std::sync::atomic::{AtomicI32, AtomicPtr, AtomicUsize, Ordering};
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
}

impl Entry {
    const fn new() -> Self {
        Entry {
            start: AtomicUsize::new(0),
            end: AtomicUsize::new(0),
            prot: AtomicI32::new(0),
            faults: AtomicUsize::new(0),
        }
    }
}

type Chunk = [Entry; CHUNK];

static TABLE: [AtomicPtr<Chunk>; CHUNKS] = [const { AtomicPtr::new(ptr::null_mut()) }; CHUNKS];
static PAGE: AtomicUsize = AtomicUsize::new(4096);
static PREVIOUS: AtomicPtr<libc::sigaction> = AtomicPtr::new(ptr::null_mut());
static INSTALL: Mutex<()> = Mutex::new(());

/// A mapping's entry in the fault table; unregisters itself on drop.
pub(crate) struct Slot {
    entry: &'static Entry,
}

impl Slot {
    /// Registers `[start, end)` (the file-backed part of a mapping) and
    /// makes sure the handler is installed.
    pub(crate) fn register(start: usize, end: usize, prot: c_int) -> Option<Slot> {
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

extern "C" fn on_sigbus(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    // SAFETY: the kernel passes a valid siginfo_t to SA_SIGINFO handlers.
    let (addr, code) = unsafe { ((*info).si_addr() as usize, (*info).si_code) };
    if code > 0 {
        if let Some(e) = lookup(addr) {
            let page = addr & !(PAGE.load(Ordering::Relaxed) - 1);
            let end = e.end.load(Ordering::Acquire);
            if end > page {
                // SAFETY: [page, end) lies inside an mmapkit mapping whose
                // file pages are gone; replacing them with zero pages is
                // what turns the fault into a recoverable error.
                let zeroed = unsafe {
                    super::sys::map_zero(
                        page as *mut u8,
                        end - page,
                        e.prot.load(Ordering::Relaxed),
                    )
                };
                if zeroed.is_ok() {
                    e.faults.fetch_add(1, Ordering::AcqRel);
                    return;
                }
            }
        }
    }
    chain(sig, info, ctx);
}

fn chain(sig: c_int, info: *mut siginfo_t, ctx: *mut c_void) {
    let prev = PREVIOUS.load(Ordering::Acquire);
    // SAFETY: PREVIOUS is null or a leaked, never-freed sigaction.
    let handler = if prev.is_null() { libc::SIG_DFL } else { unsafe { (*prev).sa_sigaction } };
    if handler == libc::SIG_DFL || handler == libc::SIG_IGN {
        // Restore the default action: a real fault re-executes and kills
        // the process as usual; a sent signal is re-raised.
        // SAFETY: sigaction/raise are async-signal-safe.
        unsafe {
            let mut dfl: libc::sigaction = MaybeUninit::zeroed().assume_init();
            dfl.sa_sigaction = libc::SIG_DFL;
            libc::sigaction(sig, &dfl, ptr::null_mut());
            if (*info).si_code <= 0 {
                libc::raise(sig);
            }
        }
        return;
    }
    // SAFETY: `prev` is non-null here (handler is not SIG_DFL).
    let flags = unsafe { (*prev).sa_flags };
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
}

fn install() {
    let _g = INSTALL.lock().unwrap_or_else(|e| e.into_inner());
    PAGE.store(super::sys::page_size(), Ordering::Relaxed);
    // SAFETY: querying and setting a signal action with valid pointers.
    unsafe {
        let mut cur: libc::sigaction = MaybeUninit::zeroed().assume_init();
        if libc::sigaction(libc::SIGBUS, ptr::null(), &mut cur) != 0 {
            return;
        }
        if cur.sa_sigaction == on_sigbus as *const () as usize {
            return;
        }
        PREVIOUS.store(Box::into_raw(Box::new(cur)), Ordering::Release);
        let mut act: libc::sigaction = MaybeUninit::zeroed().assume_init();
        act.sa_sigaction = on_sigbus as *const () as usize;
        act.sa_flags = libc::SA_SIGINFO | libc::SA_ONSTACK | libc::SA_NODEFER;
        libc::sigemptyset(&mut act.sa_mask);
        libc::sigaction(libc::SIGBUS, &act, ptr::null_mut());
    }
}

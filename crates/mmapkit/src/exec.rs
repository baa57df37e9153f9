//! The execution context every parallel operation shares: how many threads
//! ([`Threads`]), the worker pools they run on (built once per count and
//! reused), and how far the work has got ([`Progress`]).
//!
//! One meaning of a thread count everywhere (scans, grep, replace, k-mers,
//! statistics, log verification; CLI `-j/--threads`, Python `threads=`):
//!
//! * `auto` (or `0`): one worker per available core
//!   ([`std::thread::available_parallelism`]), the default;
//! * `1`: sequential, no parallel work is started (scans run in the
//!   caller's thread; rayon-only code such as [`crate::stats`] runs on a
//!   one-worker pool);
//! * `n`: `n` workers (up to [`Threads::MAX`]), even above the core count.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use rayon::ThreadPool;

use crate::{Error, Result};

/// A thread count: `auto` (all cores) or an explicit number of workers.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Threads(usize);

impl Threads {
    /// One worker per available core.
    pub const AUTO: Threads = Threads(0);
    /// Sequential.
    pub const ONE: Threads = Threads(1);
    /// The largest explicit count accepted (more is a typo, not a plan).
    pub const MAX: usize = 1024;

    /// `n` workers; `0` means [`Threads::AUTO`]. More than [`Threads::MAX`]
    /// is an error.
    pub fn new(n: usize) -> Result<Threads> {
        if n > Self::MAX {
            return Err(Error::InvalidArgument(format!(
                "threads: {n} is too many (at most {}; 0 or auto: one per core)",
                Self::MAX
            )));
        }
        Ok(Threads(n))
    }

    /// Whether this is `auto`.
    pub fn is_auto(self) -> bool {
        self.0 == 0
    }

    /// The number of workers (`auto` resolved to the core count).
    pub fn get(self) -> usize {
        if self.0 == 0 {
            cores()
        } else {
            self.0
        }
    }

    /// Whether the work runs sequentially.
    pub fn is_sequential(self) -> bool {
        self.get() <= 1
    }

    /// The worker pool for this count: built on first use, then the same
    /// pool for every later call with the same (resolved) count, from any
    /// module (building a pool costs more than scanning a small file).
    pub fn pool(self) -> Result<Arc<ThreadPool>> {
        static POOLS: OnceLock<Mutex<HashMap<usize, Arc<ThreadPool>>>> = OnceLock::new();
        let n = self.get();
        let mut pools =
            POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        if let Some(p) = pools.get(&n) {
            return Ok(p.clone());
        }
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(n)
            .thread_name(|i| format!("mmapkit-{i}"))
            .build()
            .map_err(|e| Error::InvalidArgument(format!("cannot start {n} worker threads: {e}")))?;
        Ok(pools.entry(n).or_insert(Arc::new(pool)).clone())
    }

    /// Runs `f` on this count's pool: rayon parallel iterators inside it use
    /// exactly these workers (how [`crate::stats`] gets its thread count).
    pub fn install<R: Send>(self, f: impl FnOnce() -> R + Send) -> Result<R> {
        Ok(self.pool()?.install(f))
    }
}

/// `n` workers, `0` for auto, unchecked (Rust callers choose freely; front
/// ends parse user input with [`Threads::new`] or `FromStr`, which refuse
/// more than [`Threads::MAX`]).
impl From<usize> for Threads {
    fn from(n: usize) -> Threads {
        Threads(n)
    }
}

/// The available cores, asked once: `available_parallelism` reads the
/// cgroup files and the affinity mask each time (a dozen system calls),
/// which `grep -r` would otherwise pay for every file it opens.
fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

impl FromStr for Threads {
    type Err = Error;
    /// `auto`, `0` (auto) or a number of workers.
    fn from_str(s: &str) -> Result<Threads> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Threads::AUTO);
        }
        match s.parse::<usize>() {
            Ok(n) => Threads::new(n),
            Err(_) => Err(Error::InvalidArgument(format!(
                "threads: {s:?} is not a number of threads (expected auto, 0 for auto, or 1 to {})",
                Self::MAX
            ))),
        }
    }
}

impl fmt::Display for Threads {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_auto() {
            f.write_str("auto")
        } else {
            write!(f, "{}", self.0)
        }
    }
}

/// How far an operation has got, in its own unit (bytes for every
/// operation today): the core adds to `done` as it works and sets `total`
/// once it knows it; a front end polls both to draw a bar.
///
/// Clones share the counters. [`Progress::none`] (the default) counts
/// nothing: updating it is one branch.
#[derive(Clone, Debug, Default)]
pub struct Progress(Option<Arc<Counters>>);

#[derive(Debug, Default)]
struct Counters {
    done: AtomicU64,
    total: AtomicU64,
    #[cfg(test)]
    hook: test_hook::Hook,
}

/// Tests that must act at an exact point of an operation (truncate the
/// input mid-scan) run their action on the working thread, from
/// `advance`: a thread polling `done` can miss the whole scan on a
/// loaded machine.
#[cfg(test)]
mod test_hook {
    use std::sync::Mutex;

    type Action = Box<dyn FnOnce() + Send>;

    #[derive(Default)]
    pub(super) struct Hook(pub(super) Mutex<Option<(u64, Action)>>);

    impl std::fmt::Debug for Hook {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("Hook")
        }
    }

    impl Hook {
        /// Runs the action once `done` has reached its threshold.
        pub(super) fn check(&self, done: u64) {
            let mut slot = self.0.lock().unwrap_or_else(|e| e.into_inner());
            if slot.as_ref().is_some_and(|(at, _)| done >= *at) {
                let (_, action) = slot.take().expect("checked");
                drop(slot);
                action();
            }
        }
    }
}

impl Progress {
    /// Nobody watches.
    pub fn none() -> Progress {
        Progress(None)
    }

    /// A progress to watch (total unknown until the operation sets it).
    pub fn watched() -> Progress {
        Progress(Some(Arc::default()))
    }

    /// Whether anyone watches.
    pub fn is_watched(&self) -> bool {
        self.0.is_some()
    }

    /// Adds `n` units done.
    pub fn advance(&self, n: u64) {
        if let Some(c) = &self.0 {
            let _done = c.done.fetch_add(n, Ordering::Relaxed) + n;
            #[cfg(test)]
            c.hook.check(_done);
        }
    }

    /// Test-only: a watched progress that runs `action` once, on the
    /// thread that advances `done` to `at` or past it, before the
    /// operation goes on.
    #[cfg(test)]
    pub(crate) fn watched_then(at: u64, action: impl FnOnce() + Send + 'static) -> Progress {
        let c = Counters::default();
        *c.hook.0.lock().unwrap() = Some((at, Box::new(action)));
        Progress(Some(Arc::new(c)))
    }

    /// Sets the total (0: unknown, e.g. a stream).
    pub fn set_total(&self, total: u64) {
        if let Some(c) = &self.0 {
            c.total.store(total, Ordering::Relaxed);
        }
    }

    /// Units done so far.
    pub fn done(&self) -> u64 {
        self.0.as_ref().map_or(0, |c| c.done.load(Ordering::Relaxed))
    }

    /// The total (0 while unknown).
    pub fn total(&self) -> u64 {
        self.0.as_ref().map_or(0, |c| c.total.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests;

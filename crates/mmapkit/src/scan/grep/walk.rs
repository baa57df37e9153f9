//! The files `grep -r` searches under a directory, with GNU grep's rules
//! (`-r`/`-R`, `--include`/`--exclude`/`--exclude-dir`, `-D`), on one
//! thread or several.
//!
//! GNU grep walks with `fts`: depth first, each directory's entries in the
//! order the file system lists them. One walking thread does the same
//! (or, with [`WalkOptions::sort`], name order). Several threads share a
//! stack of directories: each searches the files of the directories it
//! reads itself (handing the rest to the stack when another thread waits
//! for work), so each file is searched on one thread, with no pool started
//! for it. Directories are read whole, then closed, and the walk keeps its
//! own stack: depth costs memory, never the thread's stack or descriptors.

use std::ffi::OsStr;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};

use crate::exec::Threads;
use crate::{Error, Result};

/// `-D ACTION`: what to do with devices, FIFOs and sockets.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Devices {
    /// Read them, also those met in a walk.
    Read,
    /// Skip them, also those named as operands.
    Skip,
}

crate::named_enum!(Devices, "devices action", {
    Read => "read",
    Skip => "skip",
});

/// `--include GLOB` or `--exclude GLOB`, in the order given: GNU grep's
/// rule is that the last given filter matching a name decides; a name no
/// filter matches is skipped when the first filter given is an include.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NameFilter {
    /// Search only files whose name matches.
    Include(Vec<u8>),
    /// Skip files whose name matches.
    Exclude(Vec<u8>),
}

crate::options! {
    /// How a directory tree is walked (GNU grep's walk options).
    #[derive(Clone, Debug, Default)]
    pub struct WalkOptions {
        /// `-R`: follow every symbolic link (`-r` follows only operands).
        pub follow_links: bool,
        /// `--include`/`--exclude`, in the order given: file names (base
        /// names in the walk, any trailing part after a `/` of operands)
        /// matched as `fnmatch(3)` globs without flags.
        pub name_filters: Vec<NameFilter>,
        /// `--exclude-dir GLOB`: directories whose name matches are not
        /// entered (trailing slashes of the glob are ignored).
        pub exclude_dirs: Vec<Vec<u8>>,
        /// `-D`: `None` reads devices, FIFOs and sockets named as operands
        /// and skips those met in a walk (GNU grep's default).
        pub devices: Option<Devices>,
        /// Visit in name order (byte order of names, depth first) on one
        /// walking thread, whatever the thread count.
        pub sort: bool,
        /// The root is `.` given by no operand: names lose the `./`.
        pub bare_dot: bool,
    }
}

/// What the walk found.
#[derive(Debug)]
pub enum Visit<'a> {
    /// A file to search (or a device, with `-D read`), named as printed.
    File(&'a Path),
    /// An entry that could not be read (the walk goes on; GNU grep says
    /// so on standard error and exits 2 at the end).
    Error(Error),
    /// A directory that is one of its own ancestors (through a symbolic
    /// link under `-R`, or a bind mount): not entered. GNU grep warns
    /// ("recursive directory loop") without failing.
    Loop(&'a Path),
}

impl WalkOptions {
    /// Whether an operand (a name given on the command line, not
    /// standard input) is skipped unread: by `--include`/`--exclude` (a
    /// file), `--exclude-dir` (a directory, unless it is the implied
    /// `.`), or `-D skip` (a device). `recurse`: directories are walked
    /// (`-r`); without it they are skipped only by `-d skip`, which the
    /// caller handles.
    pub fn skips_operand(&self, path: &Path) -> bool {
        let Ok(meta) = std::fs::metadata(path) else { return false };
        let name = path.as_os_str().as_bytes();
        if meta.is_dir() {
            !self.bare_dot && self.exclude_dirs.iter().any(|g| matches_suffix(g, name))
        } else if is_device(&meta.file_type()) && self.devices == Some(Devices::Skip) {
            true
        } else {
            excluded(&self.name_filters, name, false)
        }
    }

    fn file_wanted(&self, name: &OsStr) -> bool {
        !excluded(&self.name_filters, name.as_bytes(), true)
    }

    fn dir_wanted(&self, name: &OsStr) -> bool {
        !self.exclude_dirs.iter().any(|g| fnmatch(trim_slashes(g), name.as_bytes()))
    }
}

fn is_device(ft: &std::fs::FileType) -> bool {
    use std::os::unix::fs::FileTypeExt;
    ft.is_block_device() || ft.is_char_device() || ft.is_fifo() || ft.is_socket()
}

/// GNU's `excluded_file_name`: the latest run of same-kind filters with a
/// match decides; without a match, a name is excluded iff the earliest
/// filter is an include. `anchored`: the whole name only (base names in
/// a walk); else also every part after a `/` (operands).
fn excluded(filters: &[NameFilter], name: &[u8], anchored: bool) -> bool {
    let Some(first) = filters.first() else { return false };
    let hit = |g: &[u8]| if anchored { fnmatch(g, name) } else { matches_suffix(g, name) };
    for f in filters.iter().rev() {
        match f {
            NameFilter::Include(g) if hit(g) => return false,
            NameFilter::Exclude(g) if hit(g) => return true,
            _ => {}
        }
    }
    matches!(first, NameFilter::Include(_))
}

/// The glob matches `name` or a part of it that follows a `/` and does
/// not start with one (gnulib's `exclude_fnmatch` without
/// `EXCLUDE_ANCHORED`).
fn matches_suffix(glob: &[u8], name: &[u8]) -> bool {
    let glob = trim_slashes(glob);
    fnmatch(glob, name)
        || (0..name.len()).any(|i| {
            name[i] == b'/' && name.get(i + 1).is_some_and(|&c| c != b'/') && {
                fnmatch(glob, &name[i + 1..])
            }
        })
}

fn trim_slashes(g: &[u8]) -> &[u8] {
    let mut g = g;
    while g.len() > 1 && g.ends_with(b"/") {
        g = &g[..g.len() - 1];
    }
    g
}

/// `fnmatch(3)` with no flags, over bytes: `*` matches any bytes (`/`
/// and leading dots included), `?` one byte, `[...]` a set (`!` or `^`
/// negates; ranges; `[:alpha:]`-style classes, ASCII), `\` quotes.
pub(crate) fn fnmatch(glob: &[u8], name: &[u8]) -> bool {
    // Iterative with one backtrack point (the last `*`): linear enough,
    // and no recursion.
    let (mut g, mut n) = (0usize, 0usize);
    let mut star: Option<(usize, usize)> = None;
    loop {
        if g < glob.len() {
            let c = glob[g];
            if c == b'*' {
                star = Some((g + 1, n));
                g += 1;
                continue;
            }
            if n < name.len() {
                let step = match c {
                    b'?' => Some(g + 1),
                    b'[' => match bracket(glob, g, name[n]) {
                        Some((hit, next)) => hit.then_some(next),
                        None => (name[n] == b'[').then_some(g + 1), // unclosed: literal
                    },
                    b'\\' if g + 1 < glob.len() => (glob[g + 1] == name[n]).then_some(g + 2),
                    _ => (c == name[n]).then_some(g + 1),
                };
                if let Some(next) = step {
                    g = next;
                    n += 1;
                    continue;
                }
            }
        } else if n == name.len() {
            return true;
        }
        match star {
            Some((sg, sn)) if sn < name.len() => {
                star = Some((sg, sn + 1));
                g = sg;
                n = sn + 1;
            }
            _ => return false,
        }
    }
}

/// The set `[...]` starting at `glob[at]` against `c`: whether it matches
/// and where the glob goes on, or `None` when the `[` is not closed.
fn bracket(glob: &[u8], at: usize, c: u8) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = matches!(glob.get(i), Some(b'!' | b'^'));
    if negate {
        i += 1;
    }
    let mut hit = false;
    let mut first = true;
    loop {
        let &b = glob.get(i)?;
        if b == b']' && !first {
            return Some((hit != negate, i + 1));
        }
        first = false;
        if b == b'[' && glob.get(i + 1) == Some(&b':') {
            if let Some(end) = glob[i + 2..].windows(2).position(|w| w == b":]") {
                let class = &glob[i + 2..i + 2 + end];
                hit |= in_class(class, c);
                i += end + 4;
                continue;
            }
        }
        let (lo, next) = if b == b'\\' { (*glob.get(i + 1)?, i + 2) } else { (b, i + 1) };
        if glob.get(next) == Some(&b'-') && glob.get(next + 1).is_some_and(|&h| h != b']') {
            let (hi, after) = if glob[next + 1] == b'\\' {
                (*glob.get(next + 2)?, next + 3)
            } else {
                (glob[next + 1], next + 2)
            };
            hit |= lo <= c && c <= hi;
            i = after;
        } else {
            hit |= lo == c;
            i = next;
        }
    }
}

fn in_class(class: &[u8], c: u8) -> bool {
    match class {
        b"alpha" => c.is_ascii_alphabetic(),
        b"digit" => c.is_ascii_digit(),
        b"alnum" => c.is_ascii_alphanumeric(),
        b"upper" => c.is_ascii_uppercase(),
        b"lower" => c.is_ascii_lowercase(),
        b"space" => matches!(c, b' ' | b'\t' | b'\n' | b'\r' | 0x0b | 0x0c),
        b"blank" => c == b' ' || c == b'\t',
        b"punct" => c.is_ascii_punctuation(),
        b"print" => (0x20..0x7f).contains(&c),
        b"graph" => c.is_ascii_graphic(),
        b"cntrl" => c.is_ascii_control(),
        b"xdigit" => c.is_ascii_hexdigit(),
        _ => false,
    }
}

/// A directory and the identities of it and its ancestors (loop check).
struct Dir {
    path: PathBuf,
    chain: Option<Arc<Chain>>,
}

struct Chain {
    id: (u64, u64),
    up: Option<Arc<Chain>>,
}

impl Chain {
    fn contains(mut c: Option<&Chain>, id: (u64, u64)) -> bool {
        while let Some(x) = c {
            if x.id == id {
                return true;
            }
            c = x.up.as_deref();
        }
        false
    }
}

enum Work {
    Dir(Dir),
    File(PathBuf),
}

/// The name of `name` inside `parent` as GNU grep prints it: `d/` and
/// `d` give `d/x` (trailing slashes of an operand were trimmed to one).
fn child(parent: &Path, name: &OsStr, bare_dot: bool) -> PathBuf {
    if bare_dot && parent.as_os_str() == "." {
        return PathBuf::from(name);
    }
    let p = parent.as_os_str().as_bytes();
    let mut v = Vec::with_capacity(p.len() + 1 + name.len());
    v.extend_from_slice(p);
    if !p.ends_with(b"/") {
        v.push(b'/');
    }
    v.extend_from_slice(name.as_bytes());
    PathBuf::from(OsStr::from_bytes(&v))
}

/// An operand as `fts` names it: two or more trailing slashes become one.
pub(crate) fn operand_name(root: &Path) -> PathBuf {
    let b = root.as_os_str().as_bytes();
    let mut len = b.len();
    if len > 2 && b[len - 1] == b'/' {
        while len > 1 && b[len - 2] == b'/' {
            len -= 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&b[..len]))
}

/// Reads a directory: its subdirectories and files to visit, in the
/// order listed (or by name), or an error about it or an entry.
fn read_dir(
    dir: &Dir,
    opts: &WalkOptions,
    out: &mut Vec<Work>,
    visit: &mut dyn FnMut(Visit<'_>) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let meta = match std::fs::metadata(&dir.path) {
        Ok(m) => m,
        Err(e) => return visit(Visit::Error(Error::io(&dir.path, "stat", e))),
    };
    let id = (meta.dev(), meta.ino());
    if Chain::contains(dir.chain.as_deref(), id) {
        return visit(Visit::Loop(&dir.path));
    }
    let chain = Some(Arc::new(Chain { id, up: dir.chain.clone() }));
    let rd = match crate::map::retry_emfile(|| std::fs::read_dir(&dir.path)) {
        Ok(rd) => rd,
        Err(e) => return visit(Visit::Error(Error::io(&dir.path, "read directory", e))),
    };
    let mut entries = Vec::new();
    for e in rd {
        match e {
            Ok(e) => entries.push(e),
            Err(e) => visit(Visit::Error(Error::io(&dir.path, "read directory", e)))?,
        }
    }
    if opts.sort {
        entries.sort_by_key(|e| e.file_name());
    }
    for e in entries {
        let name = e.file_name();
        let path = child(&dir.path, &name, opts.bare_dot);
        let mut kind = match e.file_type() {
            Ok(k) => k,
            Err(err) => {
                visit(Visit::Error(Error::io(&path, "stat", err)))?;
                continue;
            }
        };
        if kind.is_symlink() {
            if !opts.follow_links {
                continue;
            }
            match std::fs::metadata(&path) {
                Ok(m) => kind = m.file_type(),
                // A link that cannot be followed is no directory: GNU grep
                // filters it by name as a file first (`--include='*.c'`
                // says nothing of a dangling `notes.txt`).
                Err(_) if !opts.file_wanted(&name) => continue,
                Err(err) => {
                    visit(Visit::Error(Error::io(&path, "stat", err)))?;
                    continue;
                }
            }
        }
        if kind.is_dir() {
            if opts.dir_wanted(&name) {
                out.push(Work::Dir(Dir { path, chain: chain.clone() }));
            }
        } else if (kind.is_file() || opts.devices == Some(Devices::Read)) && opts.file_wanted(&name)
        {
            out.push(Work::File(path));
        }
    }
    ControlFlow::Continue(())
}

/// Walking threads when the count is `auto`: at least this many, more
/// than cores. A walk over files not in the page cache spends most of its
/// time waiting for the disk (directory blocks, inodes, the files' first
/// pages); more threads keep more reads in flight. Measured cold on
/// `/usr/include` (7,935 files) on 2 cores: `-rl size_t` 0.55–0.68 s with
/// 2 threads, 0.43–0.45 s with 4, 0.37–0.39 s with 8. Warm, threads
/// beyond the cores only switch and contend (`-rc EHWPOISON`: 40 ms on 2
/// threads, 42.5 on 8), so those start walking only once a walking thread
/// has read a block from storage (see [`IO_CHECK_EVERY`]).
pub const WALK_THREADS: usize = 8;

/// Items a walking thread visits between two looks at the blocks it has
/// read from storage (one `getrusage` each).
const IO_CHECK_EVERY: u32 = 16;

/// Visits the files under the directory `root` (an operand, which may be
/// a symbolic link), on `threads` walking threads (`auto`: the cores, at
/// least `WALK_THREADS`, 8): each calls `visit`
/// with its own `state` (made by `state()` once per thread). Returning
/// `Break` stops the whole walk. Files are named `root/...` (`root`'s
/// trailing slashes trimmed to one). One thread (or
/// [`WalkOptions::sort`]) visits in `fts` order, depth first, on the
/// calling thread; several visit as they come, each file's visit on one
/// thread.
pub fn walk<S>(
    root: &Path,
    opts: &WalkOptions,
    threads: Threads,
    state: &(dyn Fn() -> S + Sync),
    visit: &(dyn Fn(&mut S, Visit<'_>) -> ControlFlow<()> + Sync),
) {
    let root = Dir { path: operand_name(root), chain: None };
    let n = if threads.is_auto() { threads.get().max(WALK_THREADS) } else { threads.get() };
    let n = n.min(descriptor_room());
    if n <= 1 || opts.sort {
        let mut s = state();
        let _ = walk_sequential(root, opts, &mut |v| visit(&mut s, v));
        return;
    }
    // `auto`: the threads beyond the cores wait for the disk (see WALK_THREADS).
    let eager = if threads.is_auto() { threads.get().clamp(1, n) } else { n };
    let shared = Shared {
        queue: Mutex::new(Queue { work: vec![Work::Dir(root)], busy: 0 }),
        ready: Condvar::new(),
        grow: Condvar::new(),
        stop: AtomicBool::new(false),
        waiting: AtomicUsize::new(0),
        disk: AtomicBool::new(eager == n),
    };
    std::thread::scope(|scope| {
        for i in 1..n {
            let shared = &shared;
            scope.spawn(move || {
                if i < eager || shared.wait_for_disk() {
                    shared.worker(opts, state, visit);
                }
            });
        }
        shared.worker(opts, state, visit);
    });
}

/// Descriptors a walking thread may hold at once: a directory while it
/// is read, or a file while it is searched (never both), and one more for
/// what the search opens beside it.
const DESCRIPTORS_PER_THREAD: usize = 2;

/// Descriptors kept free for the rest of the process (output, a dup of
/// standard input, the allocator's or the runtime's own).
const DESCRIPTORS_KEPT: usize = 4;

/// How many walking threads the open-files limit leaves room for (at
/// least one): under `ulimit -n 12` a walk runs on fewer threads rather
/// than failing with "Too many open files" (what EMFILE is left, from
/// descriptors opened meanwhile, is retried: [`crate::map::retry_emfile`]).
fn descriptor_room() -> usize {
    crate::map::free_descriptors().map_or(usize::MAX, |free| {
        (free.saturating_sub(DESCRIPTORS_KEPT) / DESCRIPTORS_PER_THREAD).max(1)
    })
}

/// Depth first, each directory's entries in the order read.
fn walk_sequential(
    root: Dir,
    opts: &WalkOptions,
    visit: &mut dyn FnMut(Visit<'_>) -> ControlFlow<()>,
) -> ControlFlow<()> {
    // Each level's entries, reversed so the next is popped from the end.
    let mut levels: Vec<Vec<Work>> = vec![vec![Work::Dir(root)]];
    while let Some(level) = levels.last_mut() {
        let Some(w) = level.pop() else {
            levels.pop();
            continue;
        };
        match w {
            Work::File(p) => visit(Visit::File(&p))?,
            Work::Dir(d) => {
                let mut found = Vec::new();
                read_dir(&d, opts, &mut found, visit)?;
                found.reverse();
                levels.push(found);
            }
        }
    }
    ControlFlow::Continue(())
}

struct Queue {
    /// Directories to read, and files a thread gave away.
    work: Vec<Work>,
    /// Threads holding work (an item taken, or files of their own left),
    /// which may add more.
    busy: usize,
}

struct Shared {
    queue: Mutex<Queue>,
    ready: Condvar,
    stop: AtomicBool,
    /// Threads waiting for work: a thread searching its directory's files
    /// gives the rest away when one is.
    waiting: AtomicUsize,
    /// A walking thread has read from storage: the threads beyond the
    /// cores walk too (see [`WALK_THREADS`]).
    disk: AtomicBool,
    /// Where those wait (not on `ready`: new work would wake them all).
    grow: Condvar,
}

impl Shared {
    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A thread beyond the cores: waits until the walk reads from storage
    /// (true: then walk) or ends (false).
    fn wait_for_disk(&self) -> bool {
        let mut q = self.lock();
        loop {
            if self.disk.load(Ordering::Relaxed) {
                return true;
            }
            if self.stop.load(Ordering::Relaxed) || (q.work.is_empty() && q.busy == 0) {
                return false;
            }
            q = self.grow.wait(q).unwrap_or_else(|e| e.into_inner());
        }
    }

    /// Wakes every waiting thread (the walk ends or stops; under the lock).
    fn wake_all(&self) {
        self.ready.notify_all();
        self.grow.notify_all();
    }

    /// Every [`IO_CHECK_EVERY`] items: whether this thread has read from
    /// storage, and if so, wakes the threads waiting for that.
    fn note_disk(&self, visits: &mut u32) {
        *visits += 1;
        if !(*visits).is_multiple_of(IO_CHECK_EVERY) || self.disk.load(Ordering::Relaxed) {
            return;
        }
        if crate::map::thread_blocks_read() > 0 {
            let _q = self.lock(); // (a waiter between its check and its wait cannot miss it)
            self.disk.store(true, Ordering::Relaxed);
            self.grow.notify_all();
        }
    }

    /// One walking thread: takes a directory, puts its subdirectories on
    /// the shared stack and searches its files itself, one lock per
    /// directory rather than per file (the lock was most of the walk's
    /// system calls, in futex waits), unless another thread waits for
    /// work: then the files left go to the stack too.
    fn worker<S>(
        &self,
        opts: &WalkOptions,
        state: &(dyn Fn() -> S + Sync),
        visit: &(dyn Fn(&mut S, Visit<'_>) -> ControlFlow<()> + Sync),
    ) {
        let _unblock = Unblock(self);
        let mut s = state();
        let mut found = Vec::new();
        // This thread's files, next last; `holding`: counted in `busy`.
        let mut files: Vec<PathBuf> = Vec::new();
        let mut holding = false;
        let mut visits = 0;
        loop {
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            self.note_disk(&mut visits);
            let item = match files.pop() {
                Some(p) => {
                    if !files.is_empty() && self.waiting.load(Ordering::Relaxed) > 0 {
                        let mut q = self.lock();
                        q.work.extend(files.drain(..).map(Work::File));
                        self.ready.notify_all();
                    }
                    Work::File(p)
                }
                None => {
                    let mut q = self.lock();
                    if std::mem::take(&mut holding) {
                        q.busy -= 1;
                    }
                    loop {
                        if self.stop.load(Ordering::Relaxed) {
                            return;
                        }
                        if let Some(w) = q.work.pop() {
                            q.busy += 1;
                            holding = true;
                            break w;
                        }
                        if q.busy == 0 {
                            self.wake_all();
                            return;
                        }
                        self.waiting.fetch_add(1, Ordering::Relaxed);
                        q = self.ready.wait(q).unwrap_or_else(|e| e.into_inner());
                        self.waiting.fetch_sub(1, Ordering::Relaxed);
                    }
                }
            };
            let flow = match item {
                Work::File(p) => visit(&mut s, Visit::File(&p)),
                Work::Dir(d) => read_dir(&d, opts, &mut found, &mut |v| visit(&mut s, v)),
            };
            if flow.is_break() {
                self.stop.store(true, Ordering::Relaxed);
                let _q = self.lock(); // (see Unblock)
                self.wake_all();
                return;
            }
            if !found.is_empty() {
                // Reversed: popped in the order listed, as far as it goes.
                let mut dirs = Vec::new();
                for w in found.drain(..).rev() {
                    match w {
                        Work::File(p) => files.push(p),
                        d => dirs.push(d),
                    }
                }
                if !dirs.is_empty() {
                    self.lock().work.extend(dirs);
                    self.ready.notify_all();
                }
            }
        }
    }
}

/// Stops the walk when its thread panics: the others would otherwise
/// wait for the item it never finishes (the panic goes on to the caller
/// through the thread scope).
struct Unblock<'a>(&'a Shared);

impl Drop for Unblock<'_> {
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.0.stop.store(true, Ordering::Relaxed);
            // Under the lock: a thread between its check and its wait
            // cannot miss the wake-up.
            let _queue = self.0.queue.lock().unwrap_or_else(|e| e.into_inner());
            self.0.wake_all();
        }
    }
}

/// The files under `root` as a list (tests and simple callers): one
/// thread, in name order, errors included.
pub fn walk_files(root: &Path, opts: &WalkOptions) -> Vec<Result<PathBuf>> {
    let mut got = Vec::new();
    let opts = opts.clone().sort(true);
    let got_ref = Mutex::new(&mut got);
    walk(root, &opts, Threads::ONE, &|| (), &|_, v| {
        let mut g = got_ref.lock().unwrap_or_else(|e| e.into_inner());
        match v {
            Visit::File(p) => g.push(Ok(p.to_path_buf())),
            Visit::Error(e) => g.push(Err(e)),
            Visit::Loop(p) => g.push(Err(Error::InvalidArgument(format!(
                "{}: recursive directory loop",
                p.display()
            )))),
        }
        ControlFlow::Continue(())
    });
    got
}

#[cfg(test)]
mod tests {
    use super::{excluded, fnmatch, operand_name, NameFilter};
    use std::path::Path;

    #[test]
    fn fnmatch_is_posix_without_flags() {
        for (g, n) in [
            ("*.c", "a.c"),
            ("*.c", ".c"),
            ("*", "a/b"),
            ("a?c", "abc"),
            ("[ab]x", "bx"),
            ("[!ab]x", "cx"),
            ("[^ab]x", "cx"),
            ("[a-c]", "b"),
            ("[]]", "]"),
            ("[!]]", "a"),
            ("[[:digit:]]*", "1a"),
            ("\\*", "*"),
            ("a[", "a["),
            ("*a*b*", "xxaxxbxx"),
            ("", ""),
        ] {
            assert!(fnmatch(g.as_bytes(), n.as_bytes()), "{g} {n}");
        }
        for (g, n) in
            [("*.c", "a.h"), ("a?c", "ac"), ("[!ab]x", "ax"), ("[a-c]", "d"), ("\\*", "a")]
        {
            assert!(!fnmatch(g.as_bytes(), n.as_bytes()), "{g} {n}");
        }
    }

    #[test]
    fn the_last_matching_filter_decides_else_the_first_kind() {
        let inc = |g: &str| NameFilter::Include(g.into());
        let exc = |g: &str| NameFilter::Exclude(g.into());
        let f = [inc("*.c")];
        assert!(!excluded(&f, b"a.c", true) && excluded(&f, b"a.h", true));
        let f = [exc("a*")];
        assert!(excluded(&f, b"a.c", true) && !excluded(&f, b"b.c", true));
        let f = [inc("*.c"), exc("a*")];
        assert!(excluded(&f, b"a.c", true) && !excluded(&f, b"b.c", true));
        assert!(excluded(&f, b"b.h", true));
        let f = [exc("a*"), inc("*.c")];
        assert!(!excluded(&f, b"a.c", true) && excluded(&f, b"a.h", true));
        assert!(!excluded(&f, b"b.h", true));
        // Operands: any part after a '/'.
        assert!(excluded(&[exc("*.c")], b"d/x.c", false));
        assert!(excluded(&[exc("x.c")], b"d/x.c", false));
        assert!(!excluded(&[exc("x.c")], b"d/x.c", true));
    }

    #[test]
    fn operands_keep_one_trailing_slash() {
        for (a, b) in
            [("d", "d"), ("d/", "d/"), ("d//", "d/"), ("d///", "d/"), ("/", "/"), ("//", "//")]
        {
            assert_eq!(operand_name(Path::new(a)), Path::new(b));
        }
        assert_eq!(super::child(Path::new("d/"), "x".as_ref(), false), Path::new("d/x"));
        assert_eq!(super::child(Path::new("//"), "x".as_ref(), false), Path::new("//x"));
        assert_eq!(super::child(Path::new("."), "x".as_ref(), true), Path::new("x"));
        assert_eq!(super::child(Path::new("."), "x".as_ref(), false), Path::new("./x"));
    }
}

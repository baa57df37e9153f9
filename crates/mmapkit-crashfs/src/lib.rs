//! A FUSE file system that forgets what was not synced: power-loss tests.
//!
//! Killing a process (SIGKILL) loses nothing that reached the page cache,
//! so it cannot tell `fdatasync` from no sync, `msync(MS_SYNC)` from
//! `MS_ASYNC`, or a rename whose directory was synced from one that was
//! not. This file system can: [`CrashFs::mount`] serves a backing
//! directory from memory, and [`Mount::crash`] unmounts it and writes to
//! the backing directory only what a power loss would have left.
//!
//! # The model
//!
//! * Every inode has a *current* state (what reads see, like a page cache)
//!   and a *durable* one (what survives). The backing directory is read
//!   at mount (all durable) and written only at the crash (or
//!   [`Mount::unmount`]); nothing touches it in between.
//! * **File data, size and mode** (`write`, page writebacks of shared
//!   mappings, `setattr` size = truncate, `fallocate`, `chmod`) are
//!   pending until the file is `fsync`ed or `fdatasync`ed; `msync(MS_SYNC)`
//!   arrives as an fsync (after the kernel wrote the dirty pages back),
//!   `msync(MS_ASYNC)` arrives as nothing. A FUSE fsync covers the whole
//!   file, so a ranged sync makes every write the file system has received
//!   durable (as a disk cache flush would).
//! * **Names** (create, mkdir, link, rename, unlink, rmdir) are pending until
//!   their directory is fsynced (both directories for a move). This is the
//!   strict POSIX rule: by default, fsync of a new file does NOT make its
//!   name durable. [`Options::own_entry_on_fsync`] gives the ext4-like
//!   behaviour instead, where a file's fsync also persists the names it
//!   has (only those: ext4's journal would commit every pending name, a
//!   parent directory's creation included).
//! * **Crash** ([`Mode`]): [`Mode::DropAll`] drops every pending
//!   operation; [`Mode::KeepRandom`] keeps a seeded random subset: every
//!   pending 512-byte sector independently (later writes may survive where
//!   earlier ones did not: torn and reordered writes; never part of a
//!   sector), each file's pending size change, each directory's pending
//!   names (all or none per directory). A sector keeps its latest content,
//!   never an intermediate one. [`Mode::KeepAll`] keeps everything.
//! * **Crash points**: [`Mount::set_crash_after`] crashes the file system at
//!   the modifying operation number N+1 (write, setattr, create, mknod,
//!   mkdir, unlink, rmdir, rename, fsync, fsyncdir, fallocate, open with
//!   O_TRUNC, link; lookups and reads do not count): that operation and every
//!   later request change nothing and get no answer until the workload is
//!   killed (then EIO), so a workload can never be told an fsync succeeded
//!   that the survivor does not reflect, nor go on past the crash.
//!   [`Mount::freeze`] crashes at once; [`Mount::run`] also crashes on a
//!   marker line from the workload or after a time ([`CrashAt`]).
//!
//! # Mount choices
//!
//! No `direct_io` (shared writable mappings need the page cache) and no
//! writeback cache (fuser does not ask for it): `write` reaches the file
//! system synchronously and dirty mapped pages as writebacks, so the file
//! system sees every byte before the fsync that makes it durable. The
//! kernel mount is done directly (root); `fusermount3` is not needed.
//! Only regular files and directories exist (no symlinks, no xattrs); a
//! hard link is a second name of the inode (its `nlink` reads 1), and the
//! survivor gets a copy of the file under each durable name.
//!
//! # Use
//!
//! ```no_run
//! use std::process::Command;
//! use std::time::Duration;
//! use mmapkit_crashfs::{CrashAt, CrashFs, Mode};
//! # fn main() -> std::io::Result<()> {
//! let backing = std::path::Path::new("/tmp/state"); // an existing directory
//! let m = CrashFs::mount(backing)?;
//! let mut cmd = Command::new("my-workload");
//! cmd.arg(m.path());
//! let run = m.run(cmd, CrashAt::Ops(40), Duration::from_secs(60))?; // stdout: what it acknowledged
//! let crashed = m.crash_state()?;
//! for seed in 0..8 {
//!     crashed.materialize(Mode::KeepRandom { seed }, backing)?;
//!     // ... check the survivor in `backing` against run.stdout
//! }
//! # let _ = run; Ok(()) }
//! ```
//!
//! The power-loss matrices of mmapkit's durability promises are this
//! crate's integration tests (`tests/power_loss_*.rs`; the workloads are
//! the `crashfs-workload` binary). They run in `make test`;
//! `MMAPKIT_CRASH_LONG=1` runs them with longer workloads and more random
//! survivors per crash point. Without FUSE (not root, no `/dev/fuse`) every
//! test fails, saying what it needs; `MMAPKIT_ALLOW_NO_FUSE=1` lets them
//! pass unrun, each printing `NOT RUN` and why.
#![forbid(unsafe_code)]
#![allow(
    clippy::disallowed_methods,
    reason = "crashfs is dev-only: a FUSE test harness that writes its fixtures directly"
)]

mod fs;
mod model;
pub mod payload;

use std::io::{self, BufRead, BufReader};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use model::Mode;

use fs::{CrashFsImpl, Shared};
use model::Model;

/// Why FUSE cannot be used here (not root, no `/dev/fuse`), or `None`.
/// Tests that get a reason fail (see [`require_fuse!`]).
pub fn unavailable() -> Option<String> {
    if let Err(e) = std::fs::OpenOptions::new().read(true).write(true).open("/dev/fuse") {
        return Some(format!("cannot open /dev/fuse: {e}"));
    }
    let uid = std::fs::metadata("/proc/self").map(|m| std::os::unix::fs::MetadataExt::uid(&m));
    if uid.ok() != Some(0) {
        return Some("not root (the FUSE mount is done directly, without fusermount)".into());
    }
    None
}

/// The variable that lets the FUSE tests pass unrun where FUSE is
/// unavailable (`MMAPKIT_ALLOW_NO_FUSE=1`); without it they fail.
pub const ALLOW_NO_FUSE: &str = "MMAPKIT_ALLOW_NO_FUSE";

/// Fails the calling test when FUSE is unavailable, saying what it needs:
/// a power-loss matrix that did not run must not pass. With
/// [`ALLOW_NO_FUSE`]`=1` it returns from the test instead, saying loudly
/// that it did not run.
#[macro_export]
macro_rules! require_fuse {
    () => {
        if let Some(why) = $crate::unavailable() {
            $crate::without_fuse(&why, std::env::var_os($crate::ALLOW_NO_FUSE).as_deref());
            return;
        }
    };
}

/// What a test does where FUSE is unavailable for `why`: panics, unless
/// `allow` (the value of [`ALLOW_NO_FUSE`]) is `1`; then prints that it
/// did not run. For [`require_fuse!`].
#[doc(hidden)]
pub fn without_fuse(why: &str, allow: Option<&std::ffi::OsStr>) {
    let msg = no_fuse_message(why);
    if allow.is_some_and(|v| v == "1") {
        let line = format!("NOT RUN ({ALLOW_NO_FUSE}=1): {msg}");
        println!("{line}");
        eprintln!("{line}");
    } else {
        panic!("{msg}; to let these tests pass without running, set {ALLOW_NO_FUSE}=1");
    }
}

fn no_fuse_message(why: &str) -> String {
    format!(
        "the power-loss tests need FUSE, unavailable here: {why}. They mount it directly \
         (no fusermount): run them as root with /dev/fuse (`modprobe fuse`; in a container \
         `--device /dev/fuse --cap-add SYS_ADMIN`)"
    )
}

/// Mount options.
#[derive(Clone, Debug, Default)]
pub struct Options {
    /// fsync of a file also makes its names durable (ext4); default: only
    /// a directory fsync does (strict POSIX).
    pub own_entry_on_fsync: bool,
}

/// The file system; see the crate docs.
pub struct CrashFs;

impl CrashFs {
    /// Mounts a crash file system over `backing` at a fresh temporary mount point.
    pub fn mount(backing: impl AsRef<Path>) -> io::Result<Mount> {
        Self::mount_with(backing, &Options::default())
    }

    /// [`mount`](Self::mount) with options.
    pub fn mount_with(backing: impl AsRef<Path>, opts: &Options) -> io::Result<Mount> {
        let backing = backing.as_ref().canonicalize()?;
        let model = Model::load(&backing, opts.own_entry_on_fsync)?;
        let shared = Arc::new(Shared {
            model: Mutex::new(model),
            ops: Default::default(),
            limit: u64::MAX.into(),
            frozen: false.into(),
            released: Mutex::new(false),
            released_cv: Default::default(),
            fail_fsyncs: 0.into(),
            failed_fsyncs: 0.into(),
        });
        let mnt = std::env::temp_dir().join(format!(
            "crashfs-{}-{}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&mnt)?;
        let mut cfg = fuser::Config::default();
        cfg.mount_options = vec![
            fuser::MountOption::FSName("crashfs".into()),
            fuser::MountOption::Subtype("crashfs".into()),
            fuser::MountOption::RW,
        ];
        let session = fuser::spawn_mount(CrashFsImpl { shared: shared.clone() }, &mnt, &cfg)
            .map_err(|e| {
                io::Error::new(e.kind(), format!("mount crashfs at {}: {e}", mnt.display()))
            })?;
        Ok(Mount { session: Some(session), mnt, backing, shared })
    }
}

static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A mounted crash file system. Dropping it without [`crash`](Self::crash)
/// or [`unmount`](Self::unmount) crashes it ([`Mode::DropAll`]).
pub struct Mount {
    session: Option<fuser::BackgroundSession>,
    mnt: PathBuf,
    backing: PathBuf,
    shared: Arc<Shared>,
}

/// When [`Mount::run`] crashes the file system.
#[derive(Clone, Debug)]
pub enum CrashAt {
    /// After this many modifying operations (counted from the mount).
    Ops(u64),
    /// When the workload prints a line equal to this, for the `nth` time (1-based).
    Marker(String, usize),
    /// This long after the start.
    After(Duration),
    /// Not during the run: the workload finishes (crash afterwards yourself).
    Never,
}

/// What a workload run did.
#[derive(Debug)]
pub struct Run {
    /// Its stdout lines, all of them (also those printed after the crash).
    pub stdout: Vec<String>,
    /// Its stderr.
    pub stderr: String,
    /// Its exit status (killed if the file system crashed under it).
    pub status: ExitStatus,
    /// Whether the file system crashed during the run.
    pub crashed: bool,
    /// Modifying operations served.
    pub ops: u64,
}

/// The frozen state of a crashed file system: materialize any number of
/// power-loss survivors from it.
pub struct Crashed {
    shared: Arc<Shared>,
}

impl Crashed {
    /// Writes the survivor of `mode` into the directory `dest` (emptied first).
    pub fn materialize(&self, mode: Mode, dest: impl AsRef<Path>) -> io::Result<()> {
        self.shared.lock().materialize(mode, dest.as_ref())
    }
    /// (files with pending data, directories with pending names) at the crash.
    pub fn pending(&self) -> (usize, usize) {
        self.shared.lock().pending()
    }
}

impl Mount {
    /// The mount point.
    pub fn path(&self) -> &Path {
        &self.mnt
    }
    /// The backing directory.
    pub fn backing(&self) -> &Path {
        &self.backing
    }
    /// What a power loss now would leave (by `mode`), written into `dest`
    /// (emptied first); the mount goes on. For workloads in this process,
    /// which cannot be killed at a crash point: the survivor is taken
    /// while they run.
    pub fn snapshot(&self, mode: Mode, dest: impl AsRef<Path>) -> io::Result<()> {
        self.shared.lock().materialize(mode, dest.as_ref())
    }
    /// Modifying operations served so far.
    pub fn op_count(&self) -> u64 {
        self.shared.ops.load(Ordering::SeqCst)
    }
    /// Crash at the modifying operation after the `n`-th (counted from the mount).
    pub fn set_crash_after(&self, n: u64) {
        self.shared.limit.store(n, Ordering::SeqCst);
    }
    /// Crash now: the state is frozen; every later request hangs (as on a
    /// machine without power) until [`crash`](Self::crash),
    /// [`crash_state`](Self::crash_state) or drop, then fails with EIO. Do
    /// not touch the mount from this process in between.
    pub fn freeze(&self) {
        let _m = self.shared.lock();
        self.shared.frozen.store(true, Ordering::SeqCst);
    }
    /// Makes the next `n` fsyncs (fdatasync, msync(MS_SYNC)) of files with
    /// pending writes fail with EIO, dropping those writes, as a disk's
    /// writeback error does: the durable state stays what it was, and a
    /// later fsync that succeeds does not bring them back ("fsyncgate").
    pub fn fail_fsyncs(&self, n: u64) {
        self.shared.fail_fsyncs.store(n, Ordering::SeqCst);
    }
    /// Fsyncs failed so far by [`fail_fsyncs`](Self::fail_fsyncs).
    pub fn failed_fsyncs(&self) -> u64 {
        self.shared.failed_fsyncs.load(Ordering::SeqCst)
    }
    /// Whether the file system has crashed.
    pub fn is_frozen(&self) -> bool {
        self.shared.is_frozen()
    }

    /// Runs `cmd` (stdout and stderr captured) with the file system
    /// crashing at `at`; a workload still running when the file system
    /// crashes is killed (SIGKILL, with its process group). Gives up after
    /// `timeout` (an error).
    pub fn run(&self, mut cmd: Command, at: CrashAt, timeout: Duration) -> io::Result<Run> {
        if let CrashAt::Ops(n) = at {
            self.set_crash_after(n);
        }
        // Its own process group, so that a crash kills its children too.
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .spawn()?;
        let kill = |child: &mut std::process::Child| {
            let _ = Command::new("kill")
                .arg("-KILL")
                .arg("--")
                .arg(format!("-{}", child.id()))
                .status();
            let _ = child.kill();
        };
        let out = child.stdout.take().expect("piped");
        let mut err = child.stderr.take().expect("piped");
        let lines = Arc::new(Mutex::new(Vec::new()));
        let reader = {
            let lines = lines.clone();
            let shared = self.shared.clone();
            let marker = match &at {
                CrashAt::Marker(m, n) => Some((m.clone(), *n)),
                _ => None,
            };
            std::thread::spawn(move || {
                let mut seen = 0;
                for line in BufReader::new(out).lines() {
                    let Ok(line) = line else { break };
                    if let Some((m, n)) = &marker {
                        if *m == line {
                            seen += 1;
                            if seen == *n {
                                let _g = shared.lock();
                                shared.frozen.store(true, Ordering::SeqCst);
                            }
                        }
                    }
                    lines.lock().unwrap_or_else(|e| e.into_inner()).push(line);
                }
            })
        };
        let errs = std::thread::spawn(move || {
            let mut s = String::new();
            let _ = io::Read::read_to_string(&mut err, &mut s);
            s
        });
        let t0 = Instant::now();
        let status = loop {
            if let Some(st) = child.try_wait()? {
                break st;
            }
            if matches!(at, CrashAt::After(d) if t0.elapsed() >= d) {
                self.freeze();
            }
            if self.is_frozen() {
                kill(&mut child);
                self.shared.release();
                break child.wait()?;
            }
            if t0.elapsed() > timeout {
                kill(&mut child);
                self.freeze();
                self.shared.release();
                let _ = child.wait();
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    format!("workload {cmd:?} timed out"),
                ));
            }
            std::thread::sleep(Duration::from_micros(500));
        };
        let _ = reader.join();
        let stderr = errs.join().unwrap_or_default();
        self.set_crash_after(u64::MAX);
        let stdout = std::mem::take(&mut *lines.lock().unwrap_or_else(|e| e.into_inner()));
        Ok(Run { stdout, stderr, status, crashed: self.is_frozen(), ops: self.op_count() })
    }

    /// Unmounts. `force` (a crash): a lazy unmount that works with files
    /// still open (by this process: the workload is dead); the FUSE thread
    /// answers EIO to those until they are closed, then ends.
    fn shut(&mut self, force: bool) -> io::Result<()> {
        let Some(s) = self.session.take() else { return Ok(()) };
        if force {
            let st = Command::new("umount").arg("-l").arg(&self.mnt).status()?;
            if !st.success() {
                return Err(io::Error::other(format!("umount -l {}: {st}", self.mnt.display())));
            }
            std::thread::spawn(move || drop(s.join()));
        } else {
            s.umount_and_join().map_err(|e| {
                io::Error::new(e.kind(), format!("unmount {}: {e}", self.mnt.display()))
            })?;
        }
        let _ = std::fs::remove_dir(&self.mnt);
        Ok(())
    }

    /// Power loss: freezes, unmounts, and returns the frozen state (the
    /// backing directory is untouched; see [`Crashed::materialize`]).
    pub fn crash_state(mut self) -> io::Result<Crashed> {
        self.freeze();
        self.shared.release();
        self.shut(true)?;
        Ok(Crashed { shared: self.shared.clone() })
    }

    /// Power loss: freezes, unmounts, and leaves in the backing directory
    /// what `mode` keeps.
    pub fn crash(self, mode: Mode) -> io::Result<Crashed> {
        let backing = self.backing.clone();
        let c = self.crash_state()?;
        c.materialize(mode, &backing)?;
        Ok(c)
    }

    /// A clean shutdown: unmounts and writes everything to the backing directory.
    pub fn unmount(self) -> io::Result<()> {
        let backing = self.backing.clone();
        let shared = self.shared.clone();
        let mut me = self;
        me.shut(false)?;
        // Later writebacks (none: no process uses the mount now) cannot change it.
        shared.frozen.store(true, Ordering::SeqCst);
        shared.release();
        let m = shared.lock();
        m.materialize(Mode::KeepAll, &backing)
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.session.is_some() {
            self.freeze();
            self.shared.release();
            let _ = self.shut(true);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::ffi::OsStr;
    use std::panic::catch_unwind;

    /// Without FUSE a test fails, saying what it needs and how to opt out;
    /// only `MMAPKIT_ALLOW_NO_FUSE=1` lets it return.
    #[test]
    fn a_missing_fuse_fails_unless_explicitly_allowed() {
        for allow in [None, Some("0"), Some(""), Some("yes")] {
            let r = catch_unwind(|| super::without_fuse("no /dev/fuse", allow.map(OsStr::new)));
            let msg = *r.expect_err("must fail").downcast::<String>().unwrap();
            assert!(msg.contains("no /dev/fuse") && msg.contains("as root"), "{msg}");
            assert!(msg.contains("MMAPKIT_ALLOW_NO_FUSE=1"), "{msg}");
        }
        super::without_fuse("no /dev/fuse", Some(OsStr::new("1")));
    }
}

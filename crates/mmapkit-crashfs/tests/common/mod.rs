//! Shared by the power-loss matrices.
#![allow(dead_code)]

use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use mmapkit_crashfs::{CrashAt, CrashFs, Crashed, Mode, Run};

pub const TIMEOUT: Duration = Duration::from_secs(60);

/// `MMAPKIT_CRASH_LONG=1`: many more crash points and seeds.
pub fn long() -> bool {
    std::env::var_os("MMAPKIT_CRASH_LONG").is_some_and(|v| v != "0" && !v.is_empty())
}

pub fn workload(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_crashfs-workload"));
    // The crash is a power loss: the survivor is checked "after a reboot"
    // (ArrayStore's durable-rows record compares boot ids).
    c.args(args).env("MMAPKIT_TEST_BOOT_ID", "the-boot-before-the-power-loss");
    c
}

/// Crash points in `0..=total` (crashing after op `total` is crashing
/// right after the workload ended): every one when there are at most
/// `count`, else `count` spread evenly plus as many seeded random ones.
pub fn crash_points(total: u64, count: usize, seed: u64) -> Vec<u64> {
    if total < count as u64 {
        return (0..=total).collect();
    }
    let mut v: Vec<u64> = (0..count as u64).map(|k| k * total / count as u64).collect();
    v.push(total);
    let mut x = seed | 1;
    for _ in 0..count {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.push(x % total.max(1));
    }
    v.sort();
    v.dedup();
    v
}

/// (crash points, random seeds per point) of a matrix: a bounded run by
/// default, `MMAPKIT_CRASH_LONG=1` for a long one.
pub fn size() -> (usize, u64) {
    if long() {
        (2000, 16)
    } else {
        (150, 4)
    }
}

/// The crash modes checked at every crash point: drop-all and `seeds` random subsets.
pub fn modes(point: u64, seeds: u64) -> Vec<Mode> {
    let mut m = vec![Mode::DropAll];
    m.extend((0..seeds).map(|k| Mode::KeepRandom { seed: point * 1000 + k }));
    m
}

/// Mounts `backing`, runs the workload `make(mount path)` crashing at
/// `at`, and returns the run and the frozen state.
pub fn crash_run(backing: &Path, make: &dyn Fn(&Path) -> Command, at: CrashAt) -> (Run, Crashed) {
    let m = CrashFs::mount(backing).expect("mount crashfs");
    let run = m.run(make(m.path()), at, TIMEOUT).expect("run workload");
    let c = m.crash_state().expect("crash");
    (run, c)
}

/// Modifying operations of a complete run (to place the crash points).
pub fn calibrate(setup: &dyn Fn(&Path), make: &dyn Fn(&Path) -> Command) -> u64 {
    let back = tempfile::tempdir().unwrap();
    setup(back.path());
    let (run, _) = crash_run(back.path(), make, CrashAt::Never);
    assert!(run.status.success(), "the workload fails without a crash: {}", run.stderr);
    run.ops
}

/// `sh -c SCRIPT` with `$0` the `mmapkit` binary and `$1`... `args`, so
/// that the script can say (`echo DONE`) that the CLI exited 0.
pub fn cli_script(cli: &Path, script: &str, args: &[&OsStr]) -> Command {
    let mut c = Command::new("sh");
    c.arg("-c").arg(script).arg(cli).args(args);
    c
}

/// One `#[test]` per `name => body;` (attributes and doc comments kept),
/// each skipped, with the reason, where FUSE is not available.
macro_rules! fuse_tests {
    ($($(#[$attr:meta])* $name:ident => $body:expr;)*) => {
        $(
            $(#[$attr])*
            #[test]
            fn $name() {
                mmapkit_crashfs::require_fuse!();
                $body;
            }
        )*
    };
}
pub(crate) use fuse_tests;

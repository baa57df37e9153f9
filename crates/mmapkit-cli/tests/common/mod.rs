//! Shared by the CLI's end-to-end tests: running the binary, reading what
//! it printed, temporary directories and what a run left in them.
#![allow(dead_code)]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

#[path = "../../../mmapkit/tests/common/plain.rs"]
mod plain;
#[allow(unused_imports)] // not every test file uses every helper
pub use plain::*;

/// The binary under test (`MMAPKIT_TEST_BIN` runs the tests against
/// another build, e.g. the code before a fix).
pub fn bin() -> String {
    std::env::var("MMAPKIT_TEST_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_mmapkit").to_owned())
}

/// A command for the binary under test, with SIGINT, SIGTERM and SIGHUP at
/// their defaults, as an interactive shell starts it. A test run in the
/// background (`cargo test &` in a script ignores SIGINT; `nohup` ignores
/// SIGHUP) would otherwise hand the CLI ignored signals, which it rightly
/// keeps ignored, and the signal tests would wait for an exit that never
/// comes (`with_signals_ignored` tests that case on purpose).
pub fn mmapkit() -> Command {
    with_signal_dispositions(
        Command::new(bin()),
        libc::SIG_DFL,
        &[libc::SIGINT, libc::SIGTERM, libc::SIGHUP],
    )
}

/// `cmd` with `signals` ignored from the start (like `nohup` does for SIGHUP).
pub fn with_signals_ignored(cmd: Command, signals: &[i32]) -> Command {
    with_signal_dispositions(cmd, libc::SIG_IGN, signals)
}

fn with_signal_dispositions(
    mut cmd: Command,
    disposition: libc::sighandler_t,
    signals: &[i32],
) -> Command {
    use std::os::unix::process::CommandExt;
    let signals = signals.to_vec();
    // SAFETY: between fork and exec the closure only calls signal(2), which
    // is async-signal-safe, and allocates nothing (`signals` is moved in).
    unsafe {
        cmd.pre_exec(move || {
            for &s in &signals {
                libc::signal(s, disposition);
            }
            Ok(())
        });
    }
    cmd
}

/// Runs `mmapkit ARGS` to completion (stdin empty).
pub fn run(args: &[&str]) -> Output {
    run_paths(args, &[])
}

/// Runs `mmapkit ARGS PATHS` to completion (stdin empty).
pub fn run_paths(args: &[&str], paths: &[&Path]) -> Output {
    mmapkit()
        .args(args)
        .args(paths)
        .stdin(Stdio::null())
        .output()
        .expect("failed to run the mmapkit binary")
}

/// Runs `mmapkit ARGS`, feeding `stdin` (none: an empty stdin).
pub fn run_stdin(args: &[&str], stdin: Option<&[u8]>) -> Output {
    output(mmapkit().args(args), stdin)
}

/// Runs `cmd` to completion with its output captured, feeding `stdin` from
/// a thread (the command may exit before reading all of it).
pub fn output(cmd: &mut Command, stdin: Option<&[u8]>) -> Output {
    cmd.stdin(if stdin.is_some() { Stdio::piped() } else { Stdio::null() })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("cannot run the command");
    if let Some(data) = stdin {
        let mut pipe = child.stdin.take().unwrap();
        let data = data.to_vec();
        std::thread::spawn(move || {
            let _ = pipe.write_all(&data);
        });
    }
    child.wait_with_output().unwrap()
}

pub fn stdout(out: &Output) -> String {
    String::from_utf8(out.stdout.clone()).unwrap()
}

pub fn stderr(out: &Output) -> String {
    String::from_utf8(out.stderr.clone()).unwrap()
}

/// Bytes as text, for messages.
pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Asserts that the run succeeded (showing stderr if not); its stdout.
#[track_caller]
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    stdout(out)
}

/// Temporary directory on the target's file system (not a possible tmpfs
/// `/tmp`, where page-cache eviction means nothing).
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Writes `data` to `dir/name`; the path.
pub fn file_in(dir: &Path, name: &str, data: impl AsRef<[u8]>) -> PathBuf {
    let p = dir.join(name);
    fs::write(&p, data).unwrap();
    p
}

/// A path as a command-line argument.
pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The names in `d`, sorted.
pub fn files_in(d: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(d)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Names in `d` of temporary files a run may leave: mmapkit's own and
/// `*.tmp`.
pub fn leftovers(d: &Path) -> Vec<String> {
    files_in(d).into_iter().filter(|n| n.contains(".mmapkit-") || n.ends_with(".tmp")).collect()
}

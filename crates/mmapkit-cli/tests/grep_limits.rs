//! Issue 40 defect 10: `grep -r` within the process's resource limits.
//! Open files: a walk at `ulimit -n 12` finds every file (it ran on more
//! threads than descriptors and failed with "Too many open files").
//! Memory: peak RSS is a window per thread, not the files read (mapped
//! pages were held until each file was unmapped: hundreds of MB over
//! `/usr/lib`). `MMAPKIT_TEST_BIN=<old build>` shows both failing before.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Stdio;

mod common;
use common::tempdir;

/// 20 directories of 40 small files and one mapped (300 KiB) file each,
/// every one holding `return`.
fn tree(root: &Path) -> Vec<String> {
    let mut names = Vec::new();
    for d in 0..20 {
        let dir = root.join(format!("d{d:02}"));
        fs::create_dir_all(&dir).unwrap();
        for f in 0..41 {
            let name = format!("d{d:02}/f{f:02}.c");
            let body = if f == 40 {
                "int x;\n".repeat(300 << 10 >> 3) + "return x;\n"
            } else {
                format!("int f{f}(void) {{ return {f}; }}\n")
            };
            fs::write(root.join(&name), body).unwrap();
            names.push(name);
        }
    }
    names.sort();
    names
}

#[test]
fn a_walk_at_ulimit_n_12_finds_every_file() {
    let dir = tempdir();
    let want = tree(dir.path());
    for jobs in [None, Some("8"), Some("16")] {
        // `exec` keeps the shell's limit for mmapkit (dash sets soft and hard).
        let mut cmd = std::process::Command::new("sh");
        cmd.current_dir(dir.path())
            .arg("-c")
            .arg("ulimit -n 12 && exec \"$@\"")
            .arg("sh")
            .arg(common::bin())
            .args(["grep", "-r", "-l"])
            .args(jobs.map(|j| format!("-j{j}")))
            .args(["return", "."]);
        let out = cmd.output().unwrap();
        let mut got: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| l.trim_start_matches("./").to_owned())
            .collect();
        got.sort();
        assert_eq!(
            (got.len(), String::from_utf8_lossy(&out.stderr).lines().take(3).collect::<Vec<_>>()),
            (want.len(), vec![]),
            "-j {jobs:?}"
        );
        assert_eq!(got, want, "-j {jobs:?}");
        assert_eq!(out.status.code(), Some(0), "-j {jobs:?}");
    }
}

/// The peak resident set of `mmapkit ARGS` in `dir`, in KiB (its own, from
/// `wait4`, not every child's of this test process).
fn peak_rss_kib(dir: &Path, args: &[&str]) -> (i64, i32) {
    let child = common::mmapkit()
        .current_dir(dir)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut status = 0;
    let mut usage = std::mem::MaybeUninit::<libc::rusage>::zeroed();
    // SAFETY: waits for our own child (std's `Child` is not waited on
    // after this: it is forgotten), writing into valid memory.
    let pid = unsafe { libc::wait4(child.id() as i32, &mut status, 0, usage.as_mut_ptr()) };
    assert_eq!(pid, child.id() as i32, "wait4: {}", std::io::Error::last_os_error());
    std::mem::forget(child);
    // SAFETY: wait4 filled it.
    let usage = unsafe { usage.assume_init() };
    let status = std::process::ExitStatus::from_raw(status);
    (usage.ru_maxrss, status.code().unwrap_or(-1))
}

#[test]
fn a_walk_holds_a_window_per_thread_not_the_files_read() {
    let dir = tempdir();
    // Four 48 MiB text files and one binary one (a NUL byte: read as a
    // stream through the mapping), none holding the pattern.
    let line = b"the quick brown fox jumps over the lazy dog 0123456789\n";
    for (i, binary) in [(0, false), (1, false), (2, false), (3, false), (4, true)] {
        let mut f = fs::File::create(dir.path().join(format!("big{i}"))).unwrap();
        if binary {
            f.write_all(b"\0\n").unwrap();
        }
        let block = line.repeat((1 << 20) / line.len());
        for _ in 0..48 {
            f.write_all(&block).unwrap();
        }
    }
    for args in [
        &["grep", "-r", "-l", "-j4", "zqxjv", "."][..],
        &["grep", "-r", "-c", "-j4", "zqxjv", "."],
        &["grep", "-r", "-n", "-j1", "zqxjv", "."],
    ] {
        let (kib, code) = peak_rss_kib(dir.path(), args);
        assert_eq!(code, 1, "{args:?}");
        // 240 MiB read; a window (8 MiB) per thread plus the program's own.
        assert!(kib < 80 << 10, "{args:?}: peak RSS {} MiB", kib >> 10);
    }
}

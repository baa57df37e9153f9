//! `mmapkit grep -r` against GNU grep 3.8 under `LC_ALL=C` (`grep -E`):
//! the walk options (-r, -R, -d, -D, --include, --exclude, --exclude-dir),
//! naming (`d//`, no operand), errors (unreadable entries, loops), the
//! threads a walk starts, and random option sets over real trees present
//! on every machine (/usr/include, the Python standard library,
//! /usr/share/common-licenses), compared as sorted lines: files are
//! printed as they are done (`-j 1`: in GNU grep's order, also checked).
//!
//! Deliberate differences: a FIFO met under -R is skipped (GNU grep 3.8
//! opens it and blocks), and messages start with `mmapkit:` and name the
//! failed call.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::os::unix::fs::{symlink, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

mod common;
mod gnu_grep;
use common::tempdir;
use gnu_grep::{gnu, mmapkit, run};

fn sorted(o: &Output) -> Vec<Vec<u8>> {
    let mut v: Vec<Vec<u8>> = o.stdout.split(|&b| b == b'\n').map(<[u8]>::to_vec).collect();
    v.sort();
    v
}

/// Same lines (in any order) and exit status as GNU grep, on several
/// threads; on one thread, the same bytes (GNU grep's order).
#[track_caller]
fn same(args: &[&str], dir: &Path) -> Output {
    let want = gnu(args, dir);
    let many: Vec<&str> = ["-j", "4"].iter().chain(args).copied().collect();
    let got = mmapkit(&many, dir);
    assert!(
        sorted(&got) == sorted(&want) && got.status.code() == want.status.code(),
        "mmapkit grep {many:?} ({:?})\n{}\n--- grep ({:?}):\n{}\n--- mmapkit stderr: {}",
        got.status.code(),
        gnu_grep::show(&got.stdout),
        want.status.code(),
        gnu_grep::show(&want.stdout),
        gnu_grep::show(&got.stderr)
    );
    let one: Vec<&str> = ["-j", "1"].iter().chain(args).copied().collect();
    gnu_grep::assert_same(&format!("{one:?}"), &mmapkit(&one, dir), &want);
    got
}

/// `d/` with files in several directories, hidden ones, a symlink to a
/// file and one to a directory outside, and a FIFO.
fn tree() -> tempfile::TempDir {
    let dir = tempdir();
    let d = dir.path();
    for (name, text) in [
        ("d/a.txt", "foo a\nbar\n"),
        ("d/b.c", "foo b\n"),
        ("d/b.h", "no\n"),
        ("d/.hid/h.c", "foo hidden\n"),
        ("d/sub/c.c", "foo c\nfoo again\n"),
        ("d/sub/deep/e.h", "foo e\n"),
        ("d/skip/s.c", "foo s\n"),
        ("e/x.c", "foo x\n"),
    ] {
        let p = d.join(name);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    symlink("../e", d.join("d/linkdir")).unwrap();
    symlink("a.txt", d.join("d/alink")).unwrap();
    dir
}

fn mkfifo(p: &Path) {
    let ok = Command::new("mkfifo").arg(p).status().is_ok_and(|s| s.success());
    assert!(ok, "mkfifo {p:?}");
}

#[test]
fn operands_are_named_as_gnu_grep_names_them() {
    let Some(dir) = gnu_grep::available().then(tree) else { return };
    let d = dir.path();
    for root in ["d", "d/", "d//", "d///", "./d", "d/sub/", "d/./sub"] {
        same(&["-r", "foo", root], d);
        same(&["-rl", "foo", root], d);
    }
    // No operand: '.', named without './'; an explicit '.' keeps it.
    same(&["-r", "foo"], &d.join("d"));
    same(&["-r", "foo", "."], &d.join("d"));
    same(&["-rc", "foo", "--exclude-dir=sub"], &d.join("d"));
    let out = mmapkit(&["-r", "foo", "d//"], d);
    assert!(String::from_utf8_lossy(&out.stdout).contains("d/sub/c.c:foo c\n"));
}

#[test]
fn walk_options_match_gnu_grep() {
    let Some(dir) = gnu_grep::available().then(tree) else { return };
    let d = dir.path();
    let cases: &[&[&str]] = &[
        &["-r", "foo", "d"],
        &["-R", "foo", "d"],
        &["-r", "foo", "d/linkdir", "d/alink"], // operands are followed under -r
        &["-d", "recurse", "foo", "d"],
        &["-d", "skip", "foo", "d", "d/a.txt"],
        &["-d", "read", "foo", "d"],
        &["foo", "d"],
        &["-r", "-d", "skip", "foo", "d", "d/b.c"], // the last of -r/-d wins
        &["-d", "skip", "-r", "foo", "d"],
        &["-r", "--include=*.c", "foo", "d"],
        &["-r", "--include=*.c", "--include=*.txt", "foo", "d"],
        &["-r", "--exclude=*.c", "foo", "d"],
        &["-r", "--include=*.c", "--exclude=b*", "foo", "d"],
        &["-r", "--exclude=b*", "--include=*.c", "foo", "d"],
        &["-r", "--exclude=*.c", "--include=b*", "foo", "d"],
        &["-r", "--include=[ab].*", "foo", "d"],
        &["-r", "--include=?.c", "--exclude-dir=sub", "foo", "d"],
        &["-r", "--exclude-dir=sub", "--exclude-dir=.hid", "foo", "d"],
        &["-r", "--exclude-dir=s*/", "foo", "d"],
        &["-r", "--exclude-dir=d", "foo", "d"], // operands too
        &["-r", "--exclude-dir=sub", "foo", "d/sub"],
        &["-R", "--exclude-dir=linkdir", "foo", "d"],
        &["--exclude=*.c", "foo", "d/b.c", "d/a.txt"], // operands: any '/'-suffix
        &["--exclude=d/b.c", "foo", "d/b.c", "d/a.txt"],
        &["--include=*.c", "foo", "d/b.c", "d/a.txt"],
        &["-r", "-l", "--exclude=*", "foo", "d"],
        &["-rL", "foo", "d"],
        &["-rch", "foo", "d"],
        &["-rH", "foo", "d/a.txt"],
        &["-rn", "-C", "1", "foo", "d"],
    ];
    for args in cases {
        same(args, d);
    }
}

#[test]
fn devices_met_in_a_walk_are_skipped_unless_d_read() {
    let Some(dir) = gnu_grep::available().then(tree) else { return };
    let d = dir.path();
    mkfifo(&d.join("d/fifo"));
    same(&["-r", "foo", "d"], d);
    same(&["-r", "-D", "skip", "foo", "d"], d);
    // A FIFO operand is skipped by -D skip (read otherwise: not tested, it blocks).
    same(&["-D", "skip", "foo", "d/fifo", "d/a.txt"], d);
    // Under -R GNU grep 3.8 opens the FIFO met in the walk and blocks; mmapkit
    // skips it as under -r (a deliberate difference).
    let out = mmapkit(&["-R", "-l", "foo", "d"], d);
    assert_eq!(out.status.code(), Some(0));
    assert!(!String::from_utf8_lossy(&out.stdout).contains("fifo"));
}

#[test]
fn a_directory_loop_is_skipped_with_a_warning() {
    let Some(dir) = gnu_grep::available().then(tree) else { return };
    let d = dir.path();
    symlink("..", d.join("d/sub/up")).unwrap();
    let out = same(&["-R", "foo", "d"], d);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("d/sub/up: warning: recursive directory loop"), "{err}");
    same(&["-R", "-c", "foo", "d"], d);
    let out = mmapkit(&["-R", "-s", "foo", "d"], d);
    assert!(out.stderr.is_empty(), "{}", String::from_utf8_lossy(&out.stderr));
    same(&["-r", "foo", "d"], d); // not followed under -r
}

/// As a user who cannot read them (the tests may run as root: then as
/// `nobody`, through setpriv).
fn as_user(args: &[&str], bin: &str, dir: &Path) -> Option<Output> {
    let mut cmd = if running_as_root() {
        let mut c = Command::new("setpriv");
        c.args(["--reuid=nobody", "--regid=nogroup", "--clear-groups", bin]);
        c
    } else {
        Command::new(bin)
    };
    let out = run(cmd.env("LC_ALL", "C").args(args), dir);
    if String::from_utf8_lossy(&out.stderr).contains("setpriv:") {
        eprintln!("setpriv failed: skipping ({})", String::from_utf8_lossy(&out.stderr));
        return None;
    }
    Some(out)
}

fn running_as_root() -> bool {
    fs::read_to_string("/proc/self/status").is_ok_and(|s| {
        s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
    })
}

#[test]
fn unreadable_entries_are_reported_and_exit_2() {
    let Some(dir) = gnu_grep::available().then(tree) else { return };
    let d = dir.path();
    fs::create_dir(d.join("d/locked")).unwrap();
    fs::write(d.join("d/locked/f"), "foo\n").unwrap();
    fs::write(d.join("d/unread"), "foo\n").unwrap();
    symlink("nowhere", d.join("d/dangling")).unwrap();
    for p in ["d/locked", "d/unread"] {
        fs::set_permissions(d.join(p), fs::Permissions::from_mode(0o000)).unwrap();
    }
    // `nobody` must reach the tree (the target directory above it is 0755).
    fs::set_permissions(d, fs::Permissions::from_mode(0o755)).unwrap();
    for args in [&["-r", "foo", "d"][..], &["-rl", "foo", "d"], &["-R", "-c", "foo", "d"]] {
        let bin = common::bin();
        let (Some(got), Some(want)) = (
            as_user(&[&["grep"][..], args].concat(), &bin, d),
            as_user(&[&["-E"][..], args].concat(), "grep", d),
        ) else {
            return;
        };
        let err = String::from_utf8_lossy(&got.stderr);
        assert_eq!(sorted(&got), sorted(&want), "{args:?}: {err}");
        assert_eq!(got.status.code(), Some(2), "{args:?}: {err}");
        assert_eq!(want.status.code(), Some(2));
        for name in ["d/locked", "d/unread"] {
            assert!(
                err.contains(&format!("{name}: ")) && err.contains("Permission denied"),
                "{err}"
            );
        }
        // A dangling link is an error under -R only (GNU grep: "No such file").
        assert_eq!(err.contains("d/dangling"), args[0] == "-R", "{err}");
        // -s: the same exit status, no messages.
        let quiet = as_user(&[&["grep", "-s"][..], args].concat(), &bin, d).unwrap();
        assert_eq!(quiet.status.code(), Some(2));
        assert!(quiet.stderr.is_empty(), "{}", String::from_utf8_lossy(&quiet.stderr));
    }
}

/// Each file's lines come out together, whatever the threads.
#[test]
fn each_files_lines_stay_together() {
    let dir = tempdir();
    let d = dir.path();
    for i in 0..200 {
        let lines: String = (0..50).map(|j| format!("foo {i} {j}\n")).collect();
        fs::create_dir_all(d.join(format!("t/{}", i % 7))).unwrap();
        fs::write(d.join(format!("t/{}/f{i}", i % 7)), lines).unwrap();
    }
    let out = mmapkit(&["-j", "4", "-r", "foo", "t"], d);
    let text = String::from_utf8(out.stdout).unwrap();
    let mut seen = std::collections::HashSet::new();
    let mut last = "";
    for line in text.lines() {
        let file = line.split(':').next().unwrap();
        if file != last {
            assert!(seen.insert(file.to_owned()), "{file}'s lines are split");
            last = file;
        }
    }
    assert_eq!(seen.len(), 200);
    // --sort=path: name order, on any number of threads.
    let out = mmapkit(&["-j", "4", "--sort=path", "-rl", "foo", "t"], d);
    let got: Vec<String> = String::from_utf8(out.stdout).unwrap().lines().map(Into::into).collect();
    let mut want = got.clone();
    want.sort_by(|a, b| Path::new(a).cmp(Path::new(b)));
    assert_eq!(got, want);
}

/// The threads a walk starts grow with the cores, not the files: strace
/// counts the clone calls of `grep -r` over 500 tiny files (before the
/// fix, one or more per file).
#[test]
fn a_walk_starts_threads_per_core_not_per_file() {
    let have = Command::new("strace").arg("-V").output().is_ok_and(|o| o.status.success());
    if !have {
        eprintln!("strace not found: skipping");
        return;
    }
    let dir = tempdir();
    let d = dir.path();
    for i in 0..500 {
        fs::create_dir_all(d.join(format!("t/{}", i % 10))).unwrap();
        fs::write(d.join(format!("t/{}/f{i}", i % 10)), "a foo line\nanother\n").unwrap();
    }
    for args in
        [&["-r", "foo", "t"][..], &["-rl", "foo", "t"], &["-rc", "foo", "t"], &["-rn", "foo", "t"]]
    {
        let summary = d.join("strace.out");
        let out = run(
            Command::new("strace")
                .args(["-f", "-qq", "-c", "-e", "trace=clone,clone3,fork,vfork", "-o"])
                .arg(&summary)
                .arg(common::bin())
                .args(["grep", "-j", "4"])
                .args(args),
            d,
        );
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        assert_eq!(out.stdout.split(|&b| b == b'\n').count(), 501, "{args:?}");
        let text = fs::read_to_string(&summary).unwrap();
        let clones: u64 = text
            .lines()
            .filter(|l| l.trim_end().ends_with("clone3") || l.trim_end().ends_with("clone"))
            .filter_map(|l| l.split_whitespace().nth(3)?.parse::<u64>().ok())
            .sum();
        // 3 walking threads + the signal thread, and some slack.
        assert!(clones <= 12, "{args:?}: {clones} clones for 500 files\n{text}");
    }
}

// ---------------------------------------------------------------- real trees

/// Deterministic pseudo-random numbers (no RNG crate needed).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
    fn pick<'a, T>(&mut self, v: &'a [T]) -> &'a T {
        &v[self.next(v.len() as u64) as usize]
    }
}

fn python_stdlib() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .output()
        .ok()?;
    let p = PathBuf::from(String::from_utf8(out.stdout).ok()?.trim());
    p.is_dir().then_some(p)
}

/// The trees searched (small parts of the big ones, so that a debug build
/// stays within about a minute on two busy cores), with options every
/// case over them gets: the standard library's byte-compiled files are
/// binary, whose rules are tested elsewhere.
fn real_trees() -> Vec<(PathBuf, Vec<&'static str>)> {
    let mut trees = Vec::new();
    for p in ["/usr/include/linux/netfilter", "/usr/include/linux/usb", "/usr/include/net"] {
        trees.push((PathBuf::from(p), vec![]));
    }
    trees.push((PathBuf::from("/usr/share/common-licenses"), vec![]));
    if let Some(lib) = python_stdlib() {
        for sub in ["json", "email", "html", "urllib", "wsgiref", "importlib"] {
            trees.push((lib.join(sub), vec!["--exclude-dir=__pycache__"]));
        }
    }
    trees.retain(|(p, _)| p.is_dir());
    trees
}

/// Words of a file: patterns that match somewhere.
fn words(path: &Path) -> Vec<String> {
    let text = fs::read(path).unwrap_or_default();
    let mut out = Vec::new();
    for w in text.split(|b| !(b.is_ascii_alphanumeric() || *b == b'_')) {
        if w.len() >= 3 && w.len() <= 20 && w[0].is_ascii_alphabetic() && out.len() < 400 {
            out.push(String::from_utf8_lossy(w).into_owned());
        }
    }
    out
}

fn files_under(root: &Path, out: &mut Vec<PathBuf>) {
    let Ok(rd) = fs::read_dir(root) else { return };
    for e in rd.flatten() {
        let Ok(t) = e.file_type() else { continue };
        if t.is_dir() && e.file_name() != "__pycache__" {
            files_under(&e.path(), out);
        } else if t.is_file() {
            out.push(e.path());
        }
    }
}

#[test]
fn random_options_over_real_trees_match_gnu_grep() {
    if !gnu_grep::available() {
        return;
    }
    let trees = real_trees();
    if trees.is_empty() {
        eprintln!("no real trees found: skipping");
        return;
    }
    let cases: u64 =
        std::env::var("MMAPKIT_TREE_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut r = Lcg(25);
    let flags: &[&[&str]] = &[
        &["-l"],
        &["-L"],
        &["-c"],
        &["-n"],
        &["-h"],
        &["-H"],
        &["-i"],
        &["-w"],
        &["-v"],
        &["-x"],
        &["-F"],
        &["-R"],
        &["--include=*.h"],
        &["--include=*.py", "--exclude=_*"],
        &["--exclude=*.h"],
        &["--exclude-dir=[a-m]*"],
        &["-m", "3"],
    ];
    let started = std::time::Instant::now();
    let mut words_of = std::collections::HashMap::new();
    for case in 0..cases {
        let (root, fixed) = r.pick(&trees);
        let mut files = Vec::new();
        files_under(root, &mut files);
        if files.is_empty() {
            continue;
        }
        let file = r.pick(&files).clone();
        let ws = words_of.entry(file.clone()).or_insert_with(|| words(&file));
        let mut pattern = if ws.is_empty() { "the".to_owned() } else { r.pick(ws).clone() };
        let mut args: Vec<String> = vec!["-r".into()];
        args.extend(fixed.iter().map(|s| s.to_string()));
        for _ in 0..r.next(4) {
            args.extend(r.pick(flags).iter().map(|s| s.to_string()));
        }
        if args.iter().any(|a| a == "-i") && r.next(2) == 0 {
            pattern = pattern.to_uppercase();
        }
        if r.next(5) == 0 {
            pattern = format!("^.*{pattern}"); // a regex with no literal start
        }
        args.extend(["-e".to_owned(), pattern]);
        args.push(root.to_string_lossy().into_owned());
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let (want, got) = (gnu(&args, Path::new("/")), mmapkit(&args, Path::new("/")));
        assert!(
            sorted(&got) == sorted(&want) && got.status.code() == want.status.code(),
            "case {case}: mmapkit grep {args:?}\n--- mmapkit ({:?}):\n{}\n--- grep ({:?}):\n{}\n--- stderr: {}",
            got.status.code(),
            gnu_grep::show(&got.stdout),
            want.status.code(),
            gnu_grep::show(&want.stdout),
            gnu_grep::show(&got.stderr)
        );
    }
    eprintln!("{cases} cases over {} trees in {:?}", trees.len(), started.elapsed());
}

//! Binary files, `-w` with `-o`, option semantics, one byte rule for grep
//! and replace, one meaning per flag, and GNU grep's options, against GNU grep 3.8
//! under `LC_ALL=C` where it is installed (else against the answers it
//! gives). `MMAPKIT_TEST_BIN=<old build>` shows them failing before.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::process::{Command, Output, Stdio};

mod common;
mod gnu_grep;
use common::tempdir;

fn run_in(cmd: &mut Command, dir: &Path, stdin: Option<&[u8]>) -> Output {
    use std::io::Write;
    let mut child = cmd
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run the command");
    let mut input = child.stdin.take().unwrap();
    let _ = input.write_all(stdin.unwrap_or_default()); // it may stop reading early
    drop(input);
    child.wait_with_output().unwrap()
}

fn mmapkit<S: AsRef<OsStr>>(args: &[S], dir: &Path, stdin: Option<&[u8]>) -> Output {
    run_in(common::mmapkit().arg("grep").args(args), dir, stdin)
}

fn gnu<S: AsRef<OsStr>>(args: &[S], dir: &Path, stdin: Option<&[u8]>) -> Output {
    run_in(Command::new("grep").env("LC_ALL", "C").env_remove("GREP_COLORS").args(args), dir, stdin)
}

/// Same stdout and status as GNU grep (when it is there), and `want`'s
/// stdout and status.
#[track_caller]
fn check<S: AsRef<OsStr> + std::fmt::Debug>(
    args: &[S],
    dir: &Path,
    stdin: Option<&[u8]>,
    want: (&[u8], i32),
) {
    let got = mmapkit(args, dir, stdin);
    assert_eq!(
        (gnu_grep::show(&got.stdout), got.status.code()),
        (gnu_grep::show(want.0), Some(want.1)),
        "mmapkit grep {args:?}: stderr {}",
        gnu_grep::show(&got.stderr)
    );
    if gnu_grep::available() {
        gnu_grep::assert_same(&format!("{args:?}"), &got, &gnu(args, dir, stdin));
    }
}

/// NUL ends lines once a file is binary; counts, anchors and
/// exit statuses follow.
#[test]
fn binary_file_nul_ends_lines() {
    let dir = tempdir();
    let d = dir.path();
    fs::write(d.join("z"), b"abc\0\t\0def\n").unwrap();
    check(&["-c", "^def", "z"], d, None, (b"1\n", 0));
    check(&["-x", "-c", "abc", "z"], d, None, (b"1\n", 0));
    check(&["-l", "^def$", "z"], d, None, (b"z\n", 0));
    check(&["-a", "-c", "^def", "z"], d, None, (b"0\n", 1));
    check(&["--binary-files=text", "-c", "^def", "z"], d, None, (b"0\n", 1));
    check(&["-I", "-c", "def", "z"], d, None, (b"0\n", 1));
    check(&["-I", "-L", "def", "z"], d, None, (b"z\n", 1));
    // -z: NUL ends every line, with no binary rule.
    check(&["-z", "-c", "^def", "z"], d, None, (b"1\n", 0));
    check(&["-z", "-c", "^\t$", "z"], d, None, (b"1\n", 0));
    check(&["-z", "def", "z"], d, None, (b"def\n\0", 0));
}

/// `grep -c ''` over a real executable: every NUL is a line end.
#[test]
fn binary_counts_of_an_executable() {
    if !gnu_grep::available() {
        return;
    }
    let dir = tempdir();
    for args in
        [&["-c", "", "/usr/bin/sed"][..], &["-c", "a", "/usr/bin/sed"], &["-c", "^$", "/bin/ls"]]
    {
        let (got, want) = (mmapkit(args, dir.path(), None), gnu(args, dir.path(), None));
        gnu_grep::assert_same(&format!("{args:?}"), &got, &want);
    }
}

/// GNU grep 3.8 reads 96 KiB buffers and stops printing from the
/// one holding the first NUL (the line carried into it included); the
/// message goes to stderr, naming stdin "(standard input)" and a file
/// name as its bytes.
#[test]
fn binary_from_the_buffer_holding_the_first_nul() {
    let dir = tempdir();
    let d = dir.path();
    for nul in [100, 98_303, 98_304, 98_305, 200_000, 300_000] {
        let mut data: Vec<u8> =
            (0..40_000).flat_map(|i| format!("foo {i:06}\n").into_bytes()).collect();
        data[nul] = 0;
        fs::write(d.join("b"), &data).unwrap();
        let got = mmapkit(&["foo", "b"], d, None);
        let printed = (nul / 98_304 * 98_304) / 11; // whole 11-byte lines before the buffer
        assert_eq!(got.stdout.len(), printed * 11, "NUL at {nul}");
        assert_eq!(common::text(&got.stderr), "mmapkit: b: binary file matches\n");
        assert_eq!(got.status.code(), Some(0));
        let from_stdin = mmapkit(&["-c", "foo"], d, Some(&data));
        assert_eq!(from_stdin.stdout, mmapkit(&["-c", "foo", "b"], d, None).stdout);
        let named = mmapkit(&["o 0399"], d, Some(&data));
        assert_eq!(common::text(&named.stderr), "mmapkit: (standard input): binary file matches\n");
        if gnu_grep::available() {
            for args in [
                &["foo", "b"][..],
                &["-n", "-A", "2", "foo 0089", "b"],
                &["-c", "o", "b"],
                &["-v", "-c", "9", "b"],
            ] {
                gnu_grep::assert_same(
                    &format!("{args:?} NUL at {nul}"),
                    &mmapkit(args, d, None),
                    &gnu(args, d, None),
                );
            }
        }
    }
    let name = OsStr::from_bytes(b"caf\xe9");
    fs::write(d.join(name), b"x\0y\n").unwrap();
    let got = mmapkit(&[OsStr::new("x"), name], d, None);
    assert_eq!(got.stderr, b"mmapkit: caf\xe9: binary file matches\n");
}

/// The same rules in files under 256 KiB, which are read whole in one
/// read and checked for NUL bytes in the buffer searched: a NUL on either
/// side of the 96 KiB buffer boundary, a hole in a file of one buffer and
/// past the first buffer (binary from the start, as GNU grep decides with
/// `SEEK_HOLE`), sysfs files (read as streams, their file system asked
/// once per device) among them; each alone and all under `-r` on one and
/// several threads.
#[test]
fn binary_rules_in_small_files_read_whole() {
    let dir = tempdir();
    let d = dir.path();
    let t = d.join("t");
    fs::create_dir(&t).unwrap();
    let lines: Vec<u8> = (0..20_000).flat_map(|i| format!("foo {i:06}\n").into_bytes()).collect();
    let mut names = Vec::new();
    for nul in [0, 100, 98_303, 98_304, 98_305, 150_000, 219_999] {
        let mut data = lines.clone();
        data[nul] = 0;
        let name = format!("t/nul{nul}");
        fs::write(d.join(&name), &data).unwrap();
        names.push(name);
    }
    // A hole inside the first buffer, and one past it.
    let hole = |name: &str, data: usize, len: u64| {
        use std::io::{Seek, Write};
        let mut f = fs::File::create(d.join(name)).unwrap();
        f.write_all(&lines[..data]).unwrap();
        f.set_len(len).unwrap();
        f.seek(std::io::SeekFrom::End(0)).unwrap();
        f.write_all(b"foo tail\n").unwrap();
    };
    hole("t/hole_small", 110, 60_000);
    hole("t/hole_late", 110_000, 200_000);
    names.extend(["t/hole_small".into(), "t/hole_late".into()]);
    fs::write(d.join("t/text"), &lines[..50_000]).unwrap();
    names.push("t/text".into());
    if !gnu_grep::available() {
        return;
    }
    let sys = ["/sys/devices/system/cpu/online", "/sys/devices/system/cpu/possible"];
    let sys: Vec<&str> = sys.into_iter().filter(|p| Path::new(p).exists()).collect();
    let queries: [&[&str]; 6] = [
        &["foo"],
        &["-n", "-A", "2", "foo 0089"],
        &["-c", "o"],
        &["-v", "-c", "9"],
        &["-l", "foo 019999"],
        &["-c", ""],
    ];
    for q in queries {
        for name in &names {
            let args: Vec<&str> = q.iter().copied().chain([name.as_str()]).collect();
            let (got, want) = (mmapkit(&args, d, None), gnu(&args, d, None));
            gnu_grep::assert_same(&format!("{args:?}"), &got, &want);
            let want_err = common::text(&want.stderr).replace("grep: ", "mmapkit: ");
            assert_eq!(common::text(&got.stderr), want_err, "{args:?}");
        }
        let args: Vec<&str> = q.iter().copied().chain(["t/text"]).chain(sys.clone()).collect();
        gnu_grep::assert_same(&format!("{args:?}"), &mmapkit(&args, d, None), &gnu(&args, d, None));
        for j in ["1", "3"] {
            let plain: Vec<&str> = ["-r"].iter().chain(q).copied().chain(["t"]).collect();
            let args: Vec<&str> = ["-j", j].iter().chain(&plain).copied().collect();
            let (got, want) = (mmapkit(&args, d, None), gnu(&plain, d, None));
            let sorted = |b: &[u8]| {
                let mut v: Vec<Vec<u8>> = b.split(|&c| c == b'\n').map(<[u8]>::to_vec).collect();
                v.sort();
                v
            };
            assert!(
                sorted(&got.stdout) == sorted(&want.stdout)
                    && got.status.code() == want.status.code(),
                "{args:?}: {}\n--- grep:\n{}",
                gnu_grep::show(&got.stdout),
                gnu_grep::show(&want.stdout)
            );
        }
    }
}

/// Word matches may be adjacent (the byte before one is not
/// consumed by the one before).
#[test]
fn word_matches_may_be_adjacent() {
    let dir = tempdir();
    check(&["-ow", "[.]"], dir.path(), Some(b"a ... b\n"), (b".\n.\n.\n", 0));
    check(&["-ow", "-e", "-"], dir.path(), Some(b"x -- y\n"), (b"-\n-\n", 0));
    check(
        &["-w", "--color=always", "-e", "-"],
        dir.path(),
        Some(b"x -- y\n"),
        (b"x \x1b[01;31m\x1b[K-\x1b[m\x1b[K\x1b[01;31m\x1b[K-\x1b[m\x1b[K y\n", 0),
    );
}

/// -L -m0, conflicting matchers, huge and negative counts,
/// patterns that are not UTF-8, stdin's name.
#[test]
fn option_semantics_like_gnu() {
    let dir = tempdir();
    let d = dir.path();
    fs::write(d.join("f"), b"a\nb\n").unwrap();
    check(&["-L", "-m0", "a", "f"], d, None, (b"f\n", 1));
    check(&["-m0", "a", "f"], d, None, (b"", 1));
    check(&["-F", "-E", "a", "f"], d, None, (b"", 2));
    assert!(common::text(&mmapkit(&["-F", "-E", "a", "f"], d, None).stderr)
        .contains("conflicting matchers specified"));
    check(&["-m", "99999999999999999999", "a", "f"], d, None, (b"a\n", 0));
    check(&["-A", "99999999999999999999", "a", "f"], d, None, (b"a\nb\n", 0));
    check(&["-m", "-1", "a", "f"], d, None, (b"a\n", 0));
    check(&["-A", "-1", "a", "f"], d, None, (b"", 2));
    fs::write(d.join("u"), b"caf\xe9\ncafe\n").unwrap();
    for args in [
        &[OsStr::from_bytes(b"caf\xe9"), OsStr::new("u")][..],
        &[OsStr::new("-e"), OsStr::from_bytes(b"caf\xe9"), OsStr::new("u")],
    ] {
        check(args, d, None, (b"caf\xe9\n", 0));
    }
    check(&["-H", "b"], d, Some(b"a\nb\n"), (b"(standard input):b\n", 0));
    check(&["-H", "--label=in", "b"], d, Some(b"a\nb\n"), (b"in:b\n", 0));
}

/// The options people type: -NUM, -f, -y, -G, -T, -Z, -z.
#[test]
fn gnu_options() {
    let dir = tempdir();
    let d = dir.path();
    fs::write(d.join("f"), b"one\ntwo\nthree\nfour\nfive\n").unwrap();
    fs::write(d.join("pats"), b"one\nfive\n").unwrap();
    fs::write(d.join("empty"), b"").unwrap();
    check(&["-1", "three", "f"], d, None, (b"two\nthree\nfour\n", 0));
    check(&["-n1", "three", "f"], d, None, (b"2-two\n3:three\n4-four\n", 0));
    check(&["-f", "pats", "f"], d, None, (b"one\nfive\n", 0));
    check(&["-f", "-", "f"], d, Some(b"two\n"), (b"two\n", 0));
    check(&["-f", "empty", "f"], d, None, (b"", 1));
    check(&["-v", "-c", "-f", "empty", "f"], d, None, (b"5\n", 0));
    check(&["-y", "ONE", "f"], d, None, (b"one\n", 0));
    check(&["-G", "t\\(wo\\|hree\\)", "f"], d, None, (b"two\nthree\n", 0));
    check(&["-G", "-o", "o*n\\{1,\\}e\\?", "f"], d, None, (b"one\n", 0));
    check(&["-G", "-c", "a|b", "f"], d, None, (b"0\n", 1));
    check(&["-T", "-n", "-H", "o", "f"], d, None, (b"f: 1:\tone\nf: 2:\ttwo\nf: 4:\tfour\n", 0));
    check(&["-Z", "-l", "o", "f", "pats"], d, None, (b"f\0pats\0", 0));
    check(&["-Z", "-c", "o", "f"], d, None, (b"3\n", 0));
    check(&["-Z", "-H", "-c", "o", "f"], d, None, (b"f\x003\n", 0));
    check(&["-z", "-n", "b"], d, Some(b"a\nb\0c\0b"), (b"1:a\nb\x003:b\0", 0));
    check(&["--line-buffered", "-c", "o", "f"], d, None, (b"3\n", 0));
}

/// `replace` matches bytes as `grep` does; (?u) opts in.
#[test]
fn replace_matches_bytes_like_grep() {
    let dir = tempdir();
    let d = dir.path();
    fs::write(d.join("u"), b"Re\xaderve e\xff x\n").unwrap();
    let g = run_in(common::mmapkit().args(["grep", "-o", "e.", "u"]), d, None);
    assert_eq!(g.stdout, b"e\xad\ner\ne \ne\xff\n");
    let r = run_in(common::mmapkit().args(["replace", "--dry-run", "e.", "E", "u"]), d, None);
    assert_eq!(common::text(&r.stdout), "4\n");
    fs::write(d.join("e"), "caf\u{e9}\tx\n").unwrap();
    let r = run_in(common::mmapkit().args(["replace", "[^ -~\t]", "?", "e"]), d, None);
    assert_eq!(common::text(&r.stdout), "2\n");
    assert_eq!(fs::read(d.join("e")).unwrap(), b"caf??\tx\n", "as LC_ALL=C sed");
    fs::write(d.join("k"), "K\u{f6}the\n").unwrap();
    let r = run_in(common::mmapkit().args(["replace", "\\bthe\\b", "X", "k"]), d, None);
    assert_eq!(fs::read(d.join("k")).unwrap(), "K\u{f6}X\n".as_bytes(), "{r:?}");
    fs::write(d.join("k"), "K\u{f6}the\n").unwrap();
    let r = run_in(
        common::mmapkit().args(["replace", "--dry-run", "(?u)\\bthe\\b", "X", "k"]),
        d,
        None,
    );
    assert_eq!(common::text(&r.stdout), "0\n");
}

/// `count` takes any file name grep takes (bytes, not UTF-8).
#[test]
fn count_takes_non_utf8_file_names() {
    let dir = tempdir();
    let name = OsStr::from_bytes(b"n\xe9");
    fs::write(dir.path().join(name), b"a,b\n").unwrap();
    let out = run_in(common::mmapkit().arg("count").arg(",").arg(name), dir.path(), None);
    assert_eq!(common::text(&out.stdout), "1\n", "{}", common::text(&out.stderr));
}

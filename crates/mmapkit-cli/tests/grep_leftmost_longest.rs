//! Several patterns under `-o`/`--color` match POSIX leftmost-longest, as
//! GNU grep's do, empty matches included. Each case compares with GNU grep 3.8 under `LC_ALL=C` where it is
//! installed and asserts the expected output too, so no case passes
//! vacuously. `MMAPKIT_TEST_BIN=<old build>` shows them failing before.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::path::Path;
use std::process::Output;

mod common;
mod gnu_grep;
use common::tempdir;
use gnu_grep::{assert_same, gnu, mmapkit};

/// `mmapkit grep ARGS` in `dir` prints `stdout` and exits with `code`, on
/// one thread and on several with tiny windows, and GNU grep (where
/// installed) does the same.
#[track_caller]
fn check(args: &[&str], dir: &Path, stdout: &str, code: i32) {
    let what = format!("{args:?}");
    for extra in [&[][..], &["-j", "3", "--chunk", "7"]] {
        let all: Vec<&str> = extra.iter().chain(args).copied().collect();
        let got = mmapkit(&all, dir);
        assert_eq!(
            (String::from_utf8_lossy(&got.stdout).as_ref(), got.status.code()),
            (stdout, Some(code)),
            "mmapkit grep {all:?}; stderr: {}",
            String::from_utf8_lossy(&got.stderr)
        );
    }
    if gnu_grep::available() {
        let got = mmapkit(args, dir);
        assert_same(&what, &got, &gnu(args, dir));
    }
}

/// A directory holding `files`.
fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempdir();
    for (name, text) in files {
        fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

/// Both print the same bytes and exit the same way (GNU grep installed).
#[track_caller]
fn same(args: &[&str], dir: &Path) -> Output {
    let got = mmapkit(args, dir);
    assert_same(&format!("{args:?}"), &got, &gnu(args, dir));
    got
}

// ---- several patterns, empty matches, leftmost-longest ----

/// The reported case: `x*` matches empty before `123`, which must not
/// shadow the longer match of the other pattern there.
#[test]
fn empty_match_does_not_shadow_another_pattern() {
    let d = dir_with(&[("in", "ab 123 x 45\n")]);
    let p = ["-e", "x*", "-e", "[0-9]{2,}"];
    check(&[&["-o"][..], &p, &["in"]].concat(), d.path(), "123\nx\n45\n", 0);
    check(&[&["-o", "-b"][..], &p, &["in"]].concat(), d.path(), "3:123\n7:x\n9:45\n", 0);
    let red = |s: &str| format!("\x1b[01;31m\x1b[K{s}\x1b[m\x1b[K");
    let want = format!("ab {} {} {}\n", red("123"), red("x"), red("45"));
    check(&[&["--color=always"][..], &p, &["in"]].concat(), d.path(), &want, 0);
    // the empty pattern first, or only empty-matching patterns
    check(&["-o", "-e", "", "-e", "x", "in"], d.path(), "x\n", 0);
    check(&["-o", "-e", "y*", "-e", "z?", "in"], d.path(), "", 0);
}

/// Among the matches at the leftmost start the longest wins, whichever
/// pattern (or alternative) it comes from.
#[test]
fn longest_at_the_leftmost_start() {
    let d = dir_with(&[("in", "abcd ab\n")]);
    check(&["-o", "-e", "ab", "-e", "abc", "in"], d.path(), "abc\nab\n", 0);
    check(&["-o", "-e", "a", "-e", "abcd", "-e", "bc", "in"], d.path(), "abcd\na\n", 0);
    check(&["-o", "a|abc|ab", "in"], d.path(), "abc\nab\n", 0);
    check(&["-o", "-e", "b", "-e", "a(b|bcd)?", "in"], d.path(), "abcd\nab\n", 0);
    check(&["-o", "-i", "-e", "A", "-e", "AB", "in"], d.path(), "ab\nab\n", 0);
    check(&["-o", "-G", "-e", "a", "-e", "a\\(bc\\)*", "in"], d.path(), "abc\na\n", 0);
    check(&["-c", "-o", "-e", "x*", "-e", "q", "in"], d.path(), "1\n", 0);
}

/// A small matrix of patterns with empty and overlapping matches, option
/// sets and lines, against GNU grep.
#[test]
fn leftmost_longest_matrix_matches_gnu_grep() {
    if !gnu_grep::available() {
        return;
    }
    let d = dir_with(&[("in", "ab 123 x 45\n\nxx1 a.b \"q\" _a1\naaa-bab 12x34\n")]);
    let sets: &[&[&str]] = &[
        &["-e", "x*", "-e", "[0-9]{2,}"],
        &["-e", "[0-9]*", "-e", "[a-z]+"],
        &["-e", "b?", "-e", "ab", "-e", "a+b?"],
        &["-e", "(a|ab)(c|bab)?", "-e", "x"],
        &["-e", "", "-e", "[[:punct:]]+"],
        &["-e", "1|12|123", "-e", "2"],
        &["-e", "a*", "-e", "\\.b"],
    ];
    let opts: &[&[&str]] =
        &[&["-o"], &["-o", "-b"], &["--color=always"], &["-o", "-w"], &["-o", "-i"], &["-n", "-o"]];
    for set in sets {
        for o in opts {
            same(&[o, *set, &["in"]].concat(), d.path());
        }
    }
}

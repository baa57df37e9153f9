//! `mmapkit grep -P` (PCRE2): each behaviour against its expected answer,
//! and against GNU grep 3.8's `grep -P` under `LC_ALL=C` where it is
//! installed (stdout and exit status, byte for byte).
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::path::Path;
use std::process::Output;

mod common;
mod gnu_grep;
use common::tempdir;
use gnu_grep::{gnu, mmapkit};

/// The fixtures, as files in one directory.
fn fixtures() -> tempfile::TempDir {
    let dir = tempdir();
    let backtracks = format!("{}!\nhello\n", "a".repeat(40));
    let files: &[(&str, &[u8])] = &[
        ("f", b"foo bar\nfoobar\nx=1 y=22 z=333\nabab abba\nFOO Foo\n\nid=42; id=7;\n"),
        ("words", b"a ... b\nx -- y\nfoo_bar foo-bar (foo)\nfoofoo\n"),
        ("bytes", b"caf\xe9 au lait\ncaf\xc3\xa9 cr\xc3\xa8me\nplain\n"),
        ("bin", b"text foo\n\0binary foo\nend foo\n"),
        ("two", b"a\nb\n"),
        ("one", b"foo\n"),
        ("empty", b""),
        ("ml", backtracks.as_bytes()),
    ];
    for (name, data) in files {
        fs::write(dir.path().join(name), data).unwrap();
    }
    dir
}

/// mmapkit's stdout and status are `want`'s, and GNU grep's (when it is
/// there); on one thread and on several with tiny windows.
#[track_caller]
fn check(args: &[&str], dir: &Path, want: (&[u8], i32)) -> Output {
    let mut last = None;
    for extra in [&["-j", "3", "--chunk", "7"][..], &["-j", "1", "--strategy", "stream"]] {
        let all: Vec<&str> = extra.iter().chain(args).copied().collect();
        let got = mmapkit(&all, dir);
        assert_eq!(
            (gnu_grep::show(&got.stdout), got.status.code()),
            (gnu_grep::show(want.0), Some(want.1)),
            "mmapkit grep {all:?}: stderr {}",
            gnu_grep::show(&got.stderr)
        );
        last = Some(got);
    }
    let got = last.unwrap();
    if gnu_grep::available() {
        gnu_grep::assert_same(&format!("{args:?}"), &got, &gnu(args, dir));
    }
    got
}

/// Exit 2 with `message` on stderr, as GNU grep (whose stderr says the
/// same after "grep:").
#[track_caller]
fn refused(args: &[&str], dir: &Path, message: &str) {
    let got = check(args, dir, (b"", 2));
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(err.contains(message), "mmapkit grep {args:?}: stderr {err:?}, want {message:?}");
}

#[test]
fn perl_syntax_matches() {
    let dir = fixtures();
    let d = dir.path();
    // \K, lookbehind, lookahead, back-references, lazy and possessive.
    check(&["-o", "-P", r"foo\Kbar", "f"], d, (b"bar\n", 0));
    check(&["-o", "-P", r"(?<=y=)\d+", "f"], d, (b"22\n", 0));
    check(&["-o", "-P", r"id=\K\d+(?=;)", "f"], d, (b"42\n7\n", 0));
    check(&["-P", r"(ab)\1", "f"], d, (b"abab abba\n", 0));
    check(&["-o", "-P", r"(\w)\1", "f"], d, (b"oo\noo\n22\n33\nbb\nOO\noo\n", 0));
    check(&["-o", "-P", r"z=\d+?", "f"], d, (b"z=3\n", 0));
    check(&["-c", "-P", r"\d++3", "f"], d, (b"0\n", 1));
    check(&["-n", "-P", r"(?<!y)=\d{2}", "f"], d, (b"3:x=1 y=22 z=333\n7:id=42; id=7;\n", 0));
    check(&["-P", "(?i)foo foo", "f"], d, (b"FOO Foo\n", 0));
    check(&["-c", "-P", "", "f"], d, (b"7\n", 0));
    check(&["-c", "-P", "^$", "f"], d, (b"1\n", 0));
    // Lookbehinds see the line before the search point of -o.
    check(&["-o", "-P", r"(?<=o)o", "f"], d, (b"o\no\no\n", 0));
}

#[test]
fn perl_options() {
    let dir = fixtures();
    let d = dir.path();
    check(&["-i", "-P", "^foo", "f"], d, (b"foo bar\nfoobar\nFOO Foo\n", 0));
    check(&["-w", "-P", "foo", "f"], d, (b"foo bar\n", 0));
    check(&["-wi", "-P", "foo", "f"], d, (b"foo bar\nFOO Foo\n", 0));
    check(&["-ow", "-P", "[.]", "words"], d, (b".\n.\n.\n", 0));
    check(&["-ow", "-P", "-e", "-", "words"], d, (b"-\n-\n", 0));
    check(&["-ow", "-P", r"foo\w*", "words"], d, (b"foo_bar\nfoo\nfoo\nfoofoo\n", 0));
    check(&["-x", "-P", r"foo\w+", "f", "words"], d, (b"f:foobar\nwords:foofoo\n", 0));
    check(&["-xc", "-P", "foo", "f"], d, (b"0\n", 1));
    check(&["-vc", "-P", r"\d", "f"], d, (b"5\n", 0));
    check(&["-l", "-P", r"\d", "f", "words", "two"], d, (b"f\n", 0));
    check(&["-L", "-P", r"\d", "f", "words", "two"], d, (b"words\ntwo\n", 0));
    check(&["-m1", "-n", "-P", "o+", "f"], d, (b"1:foo bar\n", 0));
    check(&["-C1", "-P", "^x=", "f"], d, (b"foobar\nx=1 y=22 z=333\nabab abba\n", 0));
    check(&["-ob", "-P", r"\d+", "f"], d, (b"17:1\n21:22\n26:333\n52:42\n59:7\n", 0));
    check(
        &["--color=always", "-P", r"y=\K\d+", "f"],
        d,
        (b"x=1 y=\x1b[01;31m\x1b[K22\x1b[m\x1b[K z=333\n", 0),
    );
    check(&["-q", "-P", "nothing|FOO", "f"], d, (b"", 0));
    check(&["-zc", "-P", r"bar\nfoo", "f"], d, (b"1\n", 0));
    // Binary files: GNU grep's rules, as without -P.
    check(&["-P", "fo+", "bin"], d, (b"", 0));
    check(&["-c", "-P", "fo+", "bin"], d, (b"3\n", 0));
    check(&["-a", "-P", "^binary", "bin"], d, (b"", 1));
}

/// Bytes, not characters, as the byte rule wants (GNU grep -P in the C
/// locale): `.` is one byte, `\w` ASCII, a non-UTF-8 pattern byte matches
/// itself, `(?u)` is not PCRE2's, and `(*UTF)` on a line that is not
/// UTF-8 is an error.
#[test]
fn perl_matches_bytes() {
    let dir = fixtures();
    let d = dir.path();
    check(&["-o", "-P", "caf.", "bytes"], d, (b"caf\xe9\ncaf\xc3\n", 0));
    check(&["-c", "-P", r"caf\w", "bytes"], d, (b"0\n", 1));
    check(&["-o", "-P", "cr.me", "bytes"], d, (b"", 1));
    check(&["-o", "-P", "cr..me", "bytes"], d, (b"cr\xc3\xa8me\n", 0));
    check(&["-c", "-P", "-i", "CAF\u{c9}", "bytes"], d, (b"0\n", 1));
    let latin1 = mmapkit_bytes(&[b"-P".as_slice(), b"caf\xe9", b"bytes"], d);
    assert_eq!(
        (latin1.stdout.as_slice(), latin1.status.code()),
        (&b"caf\xe9 au lait\n"[..], Some(0))
    );
    refused(&["-P", "(?u)caf", "bytes"], d, "(?u)caf");
    // (*UTF) turns UTF-8 on: on a line that is not UTF-8, PCRE2 refuses.
    let got = mmapkit(&["-P", "(*UTF)caf", "bytes"], d);
    assert_eq!(got.status.code(), Some(2), "stderr {}", gnu_grep::show(&got.stderr));
    assert!(String::from_utf8_lossy(&got.stderr).contains("bytes: "));
    check(&["-c", "-P", "(*UTF)^pl.in$", "two", "one"], d, (b"two:0\none:0\n", 1));
}

/// `mmapkit grep` with arguments that need not be UTF-8.
fn mmapkit_bytes(args: &[&[u8]], dir: &Path) -> Output {
    use std::os::unix::ffi::OsStrExt;
    let args: Vec<&std::ffi::OsStr> = args.iter().map(|a| std::ffi::OsStr::from_bytes(a)).collect();
    gnu_grep::run(common::mmapkit().arg("grep").args(&args), dir)
}

/// GNU grep 3.8 takes one -P pattern: several (-e twice, a newline, a
/// pattern file of two lines) exit 2, once repeated ones are dropped; a
/// pattern file of one line is that pattern, an empty one matches nothing.
#[test]
fn perl_takes_one_pattern() {
    let dir = fixtures();
    let d = dir.path();
    let msg = "the -P option only supports a single pattern";
    refused(&["-P", "-e", "a", "-e", "b", "two"], d, msg);
    refused(&["-P", "a\nb", "two"], d, msg);
    refused(&["-P", "-f", "two", "two"], d, msg);
    // Repeated patterns are one (GNU grep drops them first).
    check(&["-c", "-P", "-e", "", "-e", "", "two"], d, (b"2\n", 0));
    check(&["-P", "-e", "b", "-e", "b", "two"], d, (b"b\n", 0));
    check(&["-P", "-f", "one", "f"], d, (b"foo bar\nfoobar\n", 0));
    check(&["-P", "-f", "empty", "two"], d, (b"", 1));
    check(&["-v", "-P", "-f", "empty", "two"], d, (b"a\nb\n", 0));
    check(&["-P", "-e", "b", "-f", "empty", "two"], d, (b"b\n", 0));
}

#[test]
fn perl_conflicts_with_the_other_matchers() {
    let dir = fixtures();
    let d = dir.path();
    for other in ["-F", "-E", "-G"] {
        refused(&["-P", other, "a", "two"], d, "conflicting matchers specified");
    }
}

/// A pattern PCRE2 refuses: exit 2, the message naming the pattern and
/// saying what is wrong.
#[test]
fn perl_compile_errors_name_the_pattern() {
    let dir = fixtures();
    let d = dir.path();
    refused(&["-P", "a(b", "two"], d, "missing closing parenthesis");
    let got = mmapkit(&["-P", "a(b", "two"], d);
    assert!(String::from_utf8_lossy(&got.stderr).contains("'a(b'"), "{got:?}");
    // As in GNU grep, the pattern is compiled inside -w's wrapper (-x is
    // PCRE2's option there).
    check(&["-w", "-P", "a)|(b", "two"], d, (b"a\nb\n", 0));
    refused(&["-x", "-P", "a)(b", "two"], d, "'a)(b'");
    refused(&["-P", r"(?<=a+)b", "two"], d, "lookbehind");
}

/// A match past PCRE2's backtracking limit is an error of that file
/// (exit 2), not a line that does not match; other files are still
/// searched.
#[test]
fn perl_match_limit_is_an_error() {
    let dir = fixtures();
    let d = dir.path();
    let got = check(&["-P", "^(a+)+$", "ml"], d, (b"", 2));
    let err = String::from_utf8_lossy(&got.stderr);
    assert!(err.contains("ml: ") && err.contains("limit"), "{err}");
    let got = mmapkit(&["-P", "^(a+)+$|foo", "ml", "one"], d);
    assert_eq!((got.stdout.as_slice(), got.status.code()), (&b"one:foo\n"[..], Some(2)));
}

//! `mmapkit grep` against GNU grep (`LC_ALL=C grep -a -E`), byte for byte,
//! over generated corpora, under several strategies, thread counts and
//! window sizes.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

mod common;
mod gnu_grep;
use common::{output, tempdir};

/// Variants of the scan options that must all print the same.
const VARIANTS: &[&[&str]] = &[
    &[],
    &["-j", "1", "--strategy", "read"],
    &["-j", "3", "--chunk", "7"],
    &["-j", "2", "--strategy", "mmap", "--chunk", "64"],
    &["-j", "3", "--strategy", "read", "--chunk", "1000"],
];

fn mmapkit(args: &[&str], files: &[&Path], stdin: Option<&[u8]>) -> Output {
    output(common::mmapkit().arg("grep").args(args).args(files), stdin)
}

fn gnu(args: &[&str], files: &[&Path], stdin: Option<&[u8]>) -> Output {
    // -F and -E conflict in GNU grep; without -F, -E gives the syntax
    // closest to ours.
    let syntax: &[&str] = if args.contains(&"-F") { &["-a"] } else { &["-a", "-E"] };
    output(Command::new("grep").env("LC_ALL", "C").args(syntax).args(args).args(files), stdin)
}

/// Runs both with every variant; same stdout and exit status.
#[track_caller]
fn same(args: &[&str], files: &[&Path]) -> Output {
    same_stdin(args, files, None)
}

#[track_caller]
fn same_stdin(args: &[&str], files: &[&Path], stdin: Option<&[u8]>) -> Output {
    let want = gnu(args, files, stdin);
    let mut last = None;
    for extra in VARIANTS {
        let all: Vec<&str> = extra.iter().chain(args).copied().collect();
        let got = mmapkit(&all, files, stdin);
        gnu_grep::assert_same(&format!("{all:?} {files:?}"), &got, &want);
        last = Some(got);
    }
    last.unwrap()
}

/// Deterministic pseudo-random bytes (no dependency on a RNG crate).
struct Lcg(u64);
impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

/// Lines over a small alphabet (with regex metacharacters), empty lines,
/// some CRLF endings and a few lines longer than the small windows.
fn corpus(seed: u64, lines: usize, trailing_newline: bool) -> Vec<u8> {
    const ALPHABET: &[u8] = b"aaabbbcAB0112 ,.+(";
    let mut r = Lcg(seed);
    let mut out = Vec::new();
    for i in 0..lines {
        let len = match r.next(20) {
            0..=2 => 0,
            3 => 200 + r.next(3000),
            _ => r.next(30),
        };
        for _ in 0..len {
            out.push(ALPHABET[r.next(ALPHABET.len() as u64) as usize]);
        }
        if r.next(8) == 0 {
            out.push(b'\r');
        }
        if i + 1 < lines || trailing_newline {
            out.push(b'\n');
        }
    }
    out
}

struct Corpus {
    _dir: tempfile::TempDir,
    main: PathBuf,
    second: PathBuf,
    no_newline: PathBuf,
    empty: PathBuf,
    crlf: PathBuf,
}

fn corpora() -> Corpus {
    let dir = tempdir();
    let write = |name: &str, data: &[u8]| {
        let p = dir.path().join(name);
        fs::write(&p, data).unwrap();
        p
    };
    Corpus {
        main: write("main.txt", &corpus(1, 3000, true)),
        second: write("second.txt", &corpus(2, 500, true)),
        no_newline: write("no_newline.txt", &corpus(3, 300, false)),
        empty: write("empty.txt", b""),
        crlf: write("crlf.txt", b"ab\r\nab\r\n\r\nxab\r\nb\r\nab"),
        _dir: dir,
    }
}

#[test]
fn same_output_as_gnu_grep() {
    if !gnu_grep::available() {
        return;
    }
    let c = corpora();
    let main = c.main.as_path();
    let cases: &[&[&str]] = &[
        &["ab"],
        &["a[bc]+1"],
        &["^A"],
        &["b$"],
        &["^$"],
        &["[0-9]{2}"],
        &["[[:digit:]]+,"],
        &["\\bab\\b"],
        &["(ab|ba)c"],
        &["c.*\\+"],
        &["-c", "ab"],
        &["-c", "-v", "ab"],
        &["-n", "b1"],
        &["-b", "b1"],
        &["-o", "[0-9]+"],
        &["-o", "-i", "ca"],
        &["-i", "AbC"],
        &["-v", "a"],
        &["-v", "-n", "[ab]"],
        &["-n", "-b", "-o", "b+"],
        &["-n", "-b", "-v", "ab"],
        &["-H", "ab"],
        &["-h", "ab"],
        &["-m", "5", "a"],
        &["-m", "3", "-c", "a"],
        &["-m", "4", "-v", "-n", "a"],
        &["-m", "2", "-o", "-n", "b"],
        &["-e", "ab", "-e", "12"],
        &["-c", "-e", "^a", "-e", "c$"],
        &["-F", "a."],
        &["-F", "1+"],
        &["-F", "(b"],
        &["-F", "-i", "-o", "Ab"],
        &["-F", "-c", ".+("],
        &[""],
        &["-c", ""],
        &["-v", ""],
        &["-n", "-F", ""],
        &["zzz"],
        &["-c", "zzz"],
    ];
    for args in cases {
        same(args, &[main]);
    }
}

#[test]
fn several_files_and_edge_files() {
    if !gnu_grep::available() {
        return;
    }
    let c = corpora();
    let all = [
        c.main.as_path(),
        c.second.as_path(),
        c.no_newline.as_path(),
        c.empty.as_path(),
        c.crlf.as_path(),
    ];
    for args in [
        &["ab"][..],
        &["-c", "ab"],
        &["-n", "-b", "b$"],
        &["-h", "-n", "a"],
        &["-m", "2", "b"],
        &["-o", "b+"],
        &["-v", "-c", "a"],
    ] {
        same(args, &all);
    }
    // A last line without a newline gets one; empty files select nothing.
    for args in [&["a"][..], &["-v", "a"], &["-n", "-b", "-o", "a+"], &["-c", ""], &[""]] {
        same(args, &[&c.no_newline]);
        same(args, &[&c.empty]);
    }
    // CRLF: the \r is part of the line, so `b$` does not match "ab\r".
    for args in [&["b$"][..], &["b.$"], &["-c", "^$"], &["-o", "ab."], &["-v", "-n", "b"]] {
        same(args, &[&c.crlf]);
    }
    let out = same(&["-c", "zz"], &[&c.empty]);
    assert_eq!(out.stdout, b"0\n");
}

#[test]
fn exit_codes_and_errors() {
    if !gnu_grep::available() {
        return;
    }
    let c = corpora();
    assert_eq!(same(&["ab"], &[&c.crlf]).status.code(), Some(0));
    assert_eq!(same(&["zzz"], &[&c.crlf]).status.code(), Some(1));
    // Invalid regex: nothing printed, exit 2, the regex error explained.
    let out = same(&["a("], &[&c.crlf]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.starts_with("mmapkit: invalid regex") && err.contains("unclosed group"), "{err}");
    // A missing file is reported, the other files are still searched.
    let missing = c.main.with_file_name("missing.txt");
    let out = same(&["ab"], &[&c.crlf, &missing, &c.second]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("missing.txt") && err.contains("No such file"), "{err}");
    assert!(!out.stdout.is_empty());
    let out = same(&["-c", "ab"], &[&missing, &c.crlf]);
    assert_eq!(out.stdout, format!("{}:4\n", c.crlf.display()).as_bytes());
    // A directory is an error naming it.
    let out = mmapkit(&["ab"], &[c.main.parent().unwrap()], None);
    assert_eq!(out.status.code(), Some(2));
    // -m 0 reads nothing and selects nothing.
    same(&["-m", "0", "ab"], &[&c.crlf]);
    same(&["-m", "0", "-c", "ab"], &[&c.crlf]);
    // No pattern at all.
    let out = mmapkit(&[], &[], None);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn stdin_is_streamed() {
    if !gnu_grep::available() {
        return;
    }
    let c = corpora();
    let data = fs::read(&c.main).unwrap();
    let dash = Path::new("-");
    for args in [
        &["ab"][..],
        &["-n", "-b", "b1"],
        &["-c", "-v", "a"],
        &["-H", "-n", "ab"],
        &["-m", "3", "b"],
        &["-o", "[0-9]+"],
    ] {
        same_stdin(args, &[dash], Some(&data));
    }
    // Mixed with files; and no FILE at all means stdin.
    same_stdin(&["-n", "ab"], &[&c.crlf, dash, &c.second], Some(&data));
    same_stdin(&["-c", "ab"], &[], Some(&data));
    // No newline at the end of the stream.
    same_stdin(&["-n", "c"], &[dash], Some(b"abc\nxc"));
}

#[test]
fn json_output() {
    let c = corpora();
    let out = mmapkit(&["--json", "-o", "ab"], &[&c.crlf], None);
    assert_eq!(out.status.code(), Some(0));
    let lines: Vec<serde_json::Value> = out
        .stdout
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[2]["line"], 4);
    assert_eq!(lines[2]["offset"], 11);
    assert_eq!(lines[2]["text"], "ab");
    assert_eq!(lines[2]["path"], c.crlf.to_str().unwrap());
    let out = mmapkit(&["--json", "-c", "ab"], &[&c.crlf, &c.empty], None);
    assert_eq!(out.status.code(), Some(0));
    let text = String::from_utf8(out.stdout).unwrap();
    let counts: Vec<serde_json::Value> =
        text.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(counts[0]["count"], 4);
    assert_eq!(counts[1]["count"], 0);
}

/// The parallel path's case of `pipelines.rs`: by SIGPIPE, as GNU grep.
#[test]
fn closed_pipe_ends_by_sigpipe_quietly() {
    let dir = tempdir();
    let p = dir.path().join("big.txt");
    fs::write(&p, "match me\n".repeat(400_000)).unwrap();
    let mut child = common::mmapkit()
        .args(["grep", "-j", "2", "match"])
        .arg(&p)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 9];
    std::io::Read::read_exact(child.stdout.as_mut().unwrap(), &mut first).unwrap();
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(&first, b"match me\n");
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{}", gnu_grep::show(&out.stderr));
    assert!(out.stderr.is_empty(), "{}", gnu_grep::show(&out.stderr));
}

#[test]
fn help_has_examples() {
    let out = mmapkit(&["--help"], &[], None);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("Examples:") && text.contains("-h, --no-filename"), "{text}");
}

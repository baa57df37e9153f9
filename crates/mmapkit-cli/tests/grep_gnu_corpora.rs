//! `mmapkit grep` against GNU grep 3.8 (`LC_ALL=C`) on real files found on
//! every machine: C headers (`/usr/include`), the Python standard library,
//! `/usr/share/common-licenses`, and executables from `/usr/bin` (for the
//! binary-file rules), with random option sets × patterns drawn from those
//! files (seeded: the same cases every run; `MMAPKIT_CORPORA_CASES` sets
//! how many). Stdout and exit status must be identical.
//!
//! `-P` has its own pattern family ([`perl_pattern`]: lookarounds, `\K`,
//! back-references, lazy quantifiers, inline flags), compared with GNU
//! `grep -P` on the same files and options.
//!
//! Deliberate differences, so not drawn: `-w` with `-x` (GNU grep 3.8
//! takes the newline into such a match), `-P` patterns with `$` under `-z`
//! (GNU grep sets PCRE2_DOLLAR_ENDONLY, which the pcre2 crate cannot),
//! patterns beyond the syntax both share (mmapkit's default syntax is the
//! regex crate's, close to `grep -E`: patterns here are literals, words
//! and simple classes, compared with `-E`, or `-G` / `-F` on both), and
//! the wording of messages on stderr ("mmapkit:" for "grep:").
#![allow(clippy::disallowed_methods, reason = "integration tests read their corpora directly")]

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};

mod common;
#[allow(dead_code, reason = "shared with grep_gnu.rs; assert_same is not used here")]
mod gnu_grep;
use gnu_grep::Lcg;

/// Up to `n` regular files under `dir` whose names end in `ext` (any with
/// ""), in name order, each at most `max` bytes.
fn files(dir: &str, ext: &str, n: usize, max: u64) -> Vec<PathBuf> {
    let Ok(rd) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<PathBuf> = rd
        .flatten()
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(ext))
        .filter(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.len() <= max && m.len() > 0)
        })
        .collect();
    v.sort();
    let step = (v.len() / n).max(1);
    v.into_iter().step_by(step).take(n).collect()
}

fn run(cmd: &mut Command) -> Output {
    cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped()).output().unwrap()
}

/// A pattern drawn from a file: a word of one of its lines, sometimes
/// turned into a small regex.
fn pattern(r: &mut Lcg, data: &[u8]) -> String {
    let words: Vec<&[u8]> = data
        .split(|b| !b.is_ascii_alphanumeric() && *b != b'_')
        .filter(|w| (2..20).contains(&w.len()))
        .take(5000)
        .collect();
    let w = if words.is_empty() {
        "the".to_string()
    } else {
        String::from_utf8_lossy(words[r.next(words.len())]).into_owned()
    };
    match r.next(8) {
        0 => format!("^{w}"),
        1 => format!("{w}$"),
        2 => format!("{}[a-z_]+", &w[..w.len().min(3)]),
        3 => format!("{w}|{}", &w[..1]),
        4 => "[0-9]{2,}".to_string(),
        5 => format!("{}.", &w[..w.len() - 1]),
        _ => w,
    }
}

/// A `-P` pattern drawn from a file: one of its words inside PCRE2-only
/// syntax.
fn perl_pattern(r: &mut Lcg, data: &[u8]) -> String {
    let w = pattern(r, data).trim_start_matches('^').trim_end_matches('$').to_string();
    let w: String = w.chars().filter(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
    let w = if w.is_empty() { "the".to_string() } else { w };
    let head = &w[..w.len().min(3)];
    match r.next(12) {
        0 => format!(r"(?<=\W){w}"),
        1 => format!(r"\b{w}\b"),
        2 => format!(r"{w}(?=\W)"),
        3 => format!(r"{head}\w*?\b"),
        4 => format!("(?i){w}"),
        5 => format!(r"{head}\K\w+"),
        6 => r"(\w)\1".to_string(),
        7 => r"\d{2,}+".to_string(),
        8 => format!(r"(?<!_){w}(?!_)"),
        9 => format!(r"^\s*{w}"),
        10 => format!(r"{w}$"),
        _ => w,
    }
}

#[test]
fn real_files_match_gnu_grep() {
    if !gnu_grep::available() {
        return;
    }
    let py = std::fs::read_dir("/usr/lib")
        .map(|rd| {
            let mut v: Vec<PathBuf> = rd
                .flatten()
                .map(|e| e.path())
                .filter(|p| {
                    p.file_name().is_some_and(|n| n.to_string_lossy().starts_with("python3."))
                })
                .collect();
            v.sort();
            v
        })
        .unwrap_or_default();
    let mut corpus: Vec<PathBuf> = files("/usr/include", ".h", 40, 1 << 20);
    if let Some(p) = py.last() {
        corpus.extend(files(&p.to_string_lossy(), ".py", 40, 1 << 20));
    }
    corpus.extend(files("/usr/share/common-licenses", "", 10, 1 << 20));
    let binaries = files("/usr/bin", "", 12, 400 << 10);
    corpus.extend(binaries);
    assert!(corpus.len() > 20, "too few corpus files: {corpus:?}");
    let data: Vec<Vec<u8>> = corpus.iter().map(|p| std::fs::read(p).unwrap()).collect();
    let flags: &[&[&str]] = &[
        &["-n"],
        &["-b"],
        &["-c"],
        &["-o"],
        &["-l"],
        &["-L"],
        &["-v"],
        &["-i"],
        &["-w"],
        &["-x"],
        &["-H"],
        &["-h"],
        &["-A", "2"],
        &["-B", "1"],
        &["-C", "1"],
        &["-2"],
        &["-m", "3"],
        &["-a"],
        &["-I"],
        &["--binary-files=text"],
        &["-z"],
        &["-Z"],
        &["-T"],
        &["-y"],
        &["--color=always"],
        &["-q"],
        &["-s"],
        &["-U"],
        &["--label=x"],
    ];
    let syntaxes: &[&str] = &["-E", "-E", "-E", "-F", "-G", "-P"];
    let cases: usize =
        std::env::var("MMAPKIT_CORPORA_CASES").ok().and_then(|s| s.parse().ok()).unwrap_or(2000);
    let mut r =
        Lcg(std::env::var("MMAPKIT_CORPORA_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(25));
    let mut failures = Vec::new();
    for case in 0..cases {
        let k = r.next(corpus.len());
        let mut args: Vec<OsString> = Vec::new();
        for _ in 0..r.next(4) {
            args.extend(flags[r.next(flags.len())].iter().map(OsString::from));
        }
        if args.iter().any(|a| a == "-w") && args.iter().any(|a| a == "-x") {
            continue; // see the module docs
        }
        let syntax = syntaxes[r.next(syntaxes.len())];
        let mut pat =
            if syntax == "-P" { perl_pattern(&mut r, &data[k]) } else { pattern(&mut r, &data[k]) };
        if syntax == "-P" && pat.ends_with('$') && args.iter().any(|a| a == "-z") {
            continue; // see the module docs
        }
        if syntax == "-G" {
            pat =
                pat.replace('|', "\\|").replace('+', "\\+").replace('{', "\\{").replace('}', "\\}");
        }
        args.push(syntax.into());
        args.extend(["-e".into(), OsString::from(&pat)]);
        args.push(corpus[k].clone().into());
        if r.next(3) == 0 {
            args.push(corpus[r.next(corpus.len())].clone().into());
        }
        let got = run(common::mmapkit().arg("grep").args(&args));
        let want = run(gnu_grep::gnu_command().args(&args));
        if got.stdout != want.stdout || got.status.code() != want.status.code() {
            failures.push(format!(
                "case {case}: grep {args:?}: mmapkit {:?} {} bytes, grep {:?} {} bytes; first difference at {}",
                got.status.code(),
                got.stdout.len(),
                want.status.code(),
                want.stdout.len(),
                got.stdout.iter().zip(&want.stdout).position(|(a, b)| a != b).unwrap_or(got.stdout.len().min(want.stdout.len()))
            ));
        }
    }
    assert!(failures.is_empty(), "{} mismatches:\n{}", failures.len(), failures.join("\n"));
}

//! End-to-end tests of the `mmapkit` binary.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};

use serde_json::Value;

mod common;
use common::*;

const MIB: u64 = 1 << 20;
/// Slack allowed in residency checks: one page of the largest common size.
const PAGE_SLACK: u64 = 64 * 1024;

fn info_json(path: &Path) -> Value {
    let out = run_paths(&["info", "--json"], &[path]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let v: Value = serde_json::from_str(&stdout(&out)).expect("info --json prints JSON");
    let arr = v.as_array().expect("a JSON array");
    assert_eq!(arr.len(), 1, "{v}");
    arr[0].clone()
}

fn field(v: &Value, name: &str) -> u64 {
    v[name].as_u64().unwrap_or_else(|| panic!("{name} missing in {v}"))
}

fn sparse_file(dir: &Path) -> PathBuf {
    let path = dir.join("sparse.bin");
    let mut f = fs::File::create(&path).unwrap();
    f.set_len(10 * MIB).unwrap();
    f.write_all(&[7; 4096]).unwrap();
    f.sync_all().unwrap();
    path
}

#[test]
fn version() {
    let out = run(&["--version"]);
    assert!(out.status.success());
    assert_eq!(stdout(&out).trim(), format!("mmapkit {}", env!("CARGO_PKG_VERSION")));
}

#[test]
fn help_has_overview_and_examples() {
    let out = run(&["--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for needle in [
        "Whole-file tools",
        "Commit log",
        "Parallel writers",
        "Page cache",
        "evict",
        "mmapkit info ",
    ] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }

    let out = run(&["info", "--help"]);
    assert!(out.status.success());
    let text = stdout(&out);
    for needle in ["--json", "--bytes", "Examples:", "mmapkit info "] {
        assert!(text.contains(needle), "{needle:?} not in:\n{text}");
    }

    let out = run(&["evict", "--help"]);
    assert!(out.status.success());
    assert!(stdout(&out).contains("mmapkit evict "));
}

#[test]
fn usage_errors() {
    let out = run(&[]);
    assert!(!out.status.success());
    let out = run(&["info"]);
    assert_eq!(out.status.code(), Some(2), "info without a path");
    assert!(stderr(&out).contains("PATH"), "{}", stderr(&out));
    let out = run(&["frobnicate"]);
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn info_json_of_sparse_file() {
    let dir = tempdir();
    let path = sparse_file(dir.path());
    let v = info_json(&path);
    assert_eq!(v["path"].as_str(), Some(&*path.to_string_lossy()));
    assert_eq!(field(&v, "size"), 10 * MIB);
    let allocated = field(&v, "allocated");
    assert!(allocated > 0 && allocated < 10 * MIB, "{v}");
    let pages = field(&v, "pages");
    assert!(pages > 0, "{v}");
    assert!(field(&v, "resident_pages") <= pages, "{v}");
    assert!(field(&v, "resident") <= 10 * MIB, "{v}");
}

#[test]
fn info_table_human_and_bytes() {
    let dir = tempdir();
    let path = sparse_file(dir.path());

    let out = run_paths(&["info"], &[&path]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let header: Vec<&str> = lines.next().unwrap().split_whitespace().collect();
    assert_eq!(header, ["PATH", "SIZE", "ALLOCATED", "RESIDENT", "RESIDENT%"]);
    let row = lines.next().unwrap();
    assert!(row.starts_with(&*path.to_string_lossy()), "{row}");
    assert!(row.contains("10.0 MiB"), "{row}");
    assert!(row.trim_end().ends_with('%'), "{row}");
    assert!(lines.next().is_none(), "{text}");

    let out = run_paths(&["info", "--bytes"], &[&path]);
    assert!(out.status.success());
    let text = stdout(&out);
    let row: Vec<&str> = text.lines().nth(1).unwrap().split_whitespace().collect();
    assert_eq!(row[1], (10 * MIB).to_string(), "{text}");
}

#[test]
fn empty_file_is_fine() {
    let dir = tempdir();
    let path = dir.path().join("empty");
    fs::File::create(&path).unwrap();
    let v = info_json(&path);
    for name in ["size", "allocated", "resident", "pages", "resident_pages"] {
        assert_eq!(field(&v, name), 0, "{name} in {v}");
    }
    let out = run_paths(&["info"], &[&path]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
    let out = run_paths(&["evict"], &[&path]);
    assert!(out.status.success(), "stderr: {}", stderr(&out));
}

#[test]
fn missing_file_exits_2_and_names_it_but_goes_on() {
    let dir = tempdir();
    let missing = dir.path().join("does-not-exist.bin");
    let good = sparse_file(dir.path());

    let out = run_paths(&["info", "--json"], &[&missing, &good]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert!(err.starts_with("mmapkit: "), "{err}");
    assert!(err.contains(&*missing.to_string_lossy()), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
    // The good path after the bad one is still reported.
    let v: Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(v.as_array().unwrap().len(), 1, "{v}");
    assert_eq!(v[0]["path"].as_str(), Some(&*good.to_string_lossy()));

    let out = run_paths(&["info"], &[&missing]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(&*missing.to_string_lossy()));

    let out = run_paths(&["evict"], &[&missing, &good]);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr(&out).contains(&*missing.to_string_lossy()));
    assert!(stdout(&out).is_empty());
}

#[test]
fn directory_exits_2() {
    let dir = tempdir();
    for cmd in ["info", "evict"] {
        let out = run_paths(&[cmd], &[dir.path()]);
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        let err = stderr(&out);
        assert!(err.starts_with("mmapkit: "), "{cmd}: {err}");
        assert!(err.contains(&*dir.path().to_string_lossy()), "{cmd}: {err}");
        assert!(err.contains("is a directory"), "{cmd}: {err}");
    }
}

#[test]
fn evict_read_evict_residency() {
    let dir = tempdir();
    let path = dir.path().join("eight.bin");
    let size = 8 * MIB;
    let data: Vec<u8> = (0..size).map(|i| (i * 31 % 251) as u8).collect();
    fs::write(&path, &data).unwrap();
    drop(data);

    let evict = || {
        let out = run_paths(&["evict"], &[&path]);
        assert!(out.status.success(), "stderr: {}", stderr(&out));
        assert!(out.stdout.is_empty() && out.stderr.is_empty());
    };

    // Dirty pages are written back by evict, then dropped.
    evict();
    let v = info_json(&path);
    assert_eq!(field(&v, "size"), size);
    assert!(field(&v, "resident") <= PAGE_SLACK, "after evict: {v}");
    assert!(field(&v, "resident_pages") <= 1, "after evict: {v}");

    // Reading it all brings it all in; locked, so memory pressure cannot
    // evict pages before `info` looks (a plain read made this test fail on
    // a loaded machine: 2,045 of 2,048 pages).
    let map = mmapkit::map::Map::open(&path, mmapkit::map::Mode::Read).unwrap();
    map.lock().expect("mlock 8 MiB (root, or RLIMIT_MEMLOCK of 8 MiB or more)");
    let v = info_json(&path);
    assert!(field(&v, "resident") + PAGE_SLACK >= size, "after read: {v}");
    assert!(field(&v, "resident") <= size, "after read: {v}");
    assert_eq!(field(&v, "resident_pages"), field(&v, "pages"), "after read: {v}");
    drop(map);

    evict();
    let v = info_json(&path);
    assert!(field(&v, "resident") <= PAGE_SLACK, "after second evict: {v}");
    assert!(field(&v, "resident_pages") <= 1, "after second evict: {v}");
}

/// `-j/--threads` means the same in every parallel command: auto, 0 (auto),
/// 1 and N give the same output; nonsense is a usage error (exit 2).
#[test]
fn threads_flag_is_the_same_everywhere() {
    let dir = tempdir();
    let text = dir.path().join("t.txt");
    fs::write(&text, b"alpha,1\nbeta,22\n".repeat(20_000)).unwrap();
    let fa = dir.path().join("r.fa");
    fs::write(&fa, b">r1\nACGTACGTTT\n>r2\nGGGCCCAAATTT\n".repeat(50)).unwrap();
    let wal = dir.path().join("wal");
    let wal_s = wal.to_str().unwrap();
    assert!(run(&["log", "init", wal_s, "--segment-size", "4K"]).status.success());
    assert!(run_stdin(&["log", "append", wal_s], Some(&b"an entry of the log\n".repeat(1000)))
        .status
        .success());
    let (t, f) = (text.to_str().unwrap(), fa.to_str().unwrap());
    let out_csv = dir.path().join("o.csv");
    let o = out_csv.to_str().unwrap();
    let commands: [&[&str]; 7] = [
        &["count", "--lines", t],
        &["find", "--all", "beta", t],
        &["grep", "-n", r"a,\d$", t],
        &["grep", "-c", "beta", t],
        &["replace", "--dry-run", "--json", "alpha", "gamma", t],
        &["kmers", "-k", "3", f, "-o", o],
        &["log", "verify", "--json", wal_s],
    ];
    for cmd in commands {
        let with_j = |j: &str| {
            let mut args = cmd.to_vec();
            args.extend(["-j", j]);
            let out = run(&args);
            assert!(out.status.success(), "{args:?}: {}", stderr(&out));
            let bytes = if cmd[0] == "kmers" { fs::read(&out_csv).unwrap() } else { out.stdout };
            assert!(!bytes.is_empty(), "{args:?}");
            bytes
        };
        let want = with_j("1");
        for j in ["0", "auto", "3"] {
            assert_eq!(with_j(j), want, "{cmd:?} -j {j}");
        }
        for bad in ["--threads=-1", "--threads=two", "-j99999"] {
            let mut args = cmd.to_vec();
            args.push(bad);
            let out = run(&args);
            assert_eq!(out.status.code(), Some(2), "{args:?}");
            assert!(stderr(&out).contains("threads"), "{args:?}: {}", stderr(&out));
        }
    }
}

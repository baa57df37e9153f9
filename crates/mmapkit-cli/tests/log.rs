//! End-to-end tests of `mmapkit log ...`.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

mod common;
use common::*;

/// A new log `name` in a temporary directory, made by `log init INIT`.
fn new_log(name: &str, init: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempdir();
    let dir = tmp.path().join(name);
    ok(&run(&[&["init", "DIR"], init].concat(), &dir, b""));
    (tmp, dir)
}

/// `mmapkit log ARGS`, with the argument `DIR` standing for `dir`.
fn run(args: &[&str], dir: &Path, stdin: &[u8]) -> Output {
    let args = args.iter().map(|a| if *a == "DIR" { dir.as_os_str() } else { a.as_ref() });
    output(mmapkit().arg("log").args(args), Some(stdin))
}

#[test]
fn init_append_read_stat_verify() {
    let (_tmp, dir) = new_log("wal", &["--segment-size", "4K", "--first-index", "10"]);
    assert_eq!(
        ok(&run(&["append", "DIR", "--term", "3"], &dir, b"alpha\nbeta\n\ngamma")),
        "10 13\n"
    );
    assert_eq!(ok(&run(&["read", "DIR"], &dir, b"")), "alpha\nbeta\n\ngamma\n");
    assert_eq!(ok(&run(&["read", "DIR", "11", "13"], &dir, b"")), "beta\n\n");
    // Whole entries that fit in 9 bytes: the empty one fits too.
    assert_eq!(ok(&run(&["read", "DIR", "10", "--max-bytes", "9"], &dir, b"")), "alpha\nbeta\n\n");
    assert_eq!(ok(&run(&["read", "DIR", "10", "--max-bytes", "2"], &dir, b"")), "alpha\n");
    let v: Value =
        serde_json::from_str(&ok(&run(&["read", "DIR", "12", "14", "--json"], &dir, b""))).unwrap();
    assert_eq!(
        v,
        serde_json::json!([{"index": 12, "term": 3, "data": ""}, {"index": 13, "term": 3, "data": "gamma"}])
    );
    let v: Value = serde_json::from_str(&ok(&run(&["stat", "DIR", "--json"], &dir, b""))).unwrap();
    assert_eq!(
        (v["first_index"].as_u64(), v["last_index"].as_u64(), v["entries"].as_u64()),
        (Some(10), Some(13), Some(4))
    );
    assert_eq!(v["segments"].as_array().unwrap().len(), 1);
    assert!(ok(&run(&["stat", "DIR"], &dir, b"")).contains("entries:      4 (10..=13)"));
    let v: Value =
        serde_json::from_str(&ok(&run(&["verify", "DIR", "--json"], &dir, b""))).unwrap();
    assert_eq!(v["ok"], true);
    assert_eq!(v["entries"], 4);
    // JSON append output and an empty stdin.
    let v: Value =
        serde_json::from_str(&ok(&run(&["append", "DIR", "--json"], &dir, b"x\n"))).unwrap();
    assert_eq!(v, serde_json::json!({"first_index": 14, "last_index": 14, "appended": 1}));
    assert_eq!(ok(&run(&["append", "DIR"], &dir, b"")), "");
}

#[test]
fn records_roundtrip_binary_entries() {
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let mut input = Vec::new();
    for e in [&b"line\nwith newline"[..], b"", &[0u8, 255, 10, 13][..]] {
        input.extend_from_slice(&(e.len() as u32).to_le_bytes());
        input.extend_from_slice(e);
    }
    ok(&run(&["init", "DIR"], &a, b""));
    ok(&run(&["append", "DIR", "--records", "--batch", "2"], &a, &input));
    let out = run(&["read", "DIR", "--records"], &a, b"");
    assert_eq!(out.stdout, input);
    ok(&run(&["init", "DIR"], &b, b""));
    ok(&run(&["append", "DIR", "--records"], &b, &out.stdout));
    assert_eq!(run(&["read", "DIR", "--records"], &b, b"").stdout, input);
    let v: Value =
        serde_json::from_str(&ok(&run(&["read", "DIR", "3", "--json"], &b, b""))).unwrap();
    assert_eq!(v[0]["data_hex"], "00ff0a0d");
    // A record cut short is an error, nothing half-appended.
    let out = run(&["append", "DIR", "--records"], &b, &[5, 0, 0, 0, b'a']);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut short"));
    let v: Value = serde_json::from_str(&ok(&run(&["stat", "DIR", "--json"], &b, b""))).unwrap();
    assert_eq!(v["entries"], 3);
}

#[test]
fn truncate_purge_and_errors() {
    let (tmp, dir) = new_log("wal", &["--segment-size", "4096"]);
    let lines: String =
        (1..=300).map(|i| format!("entry number {i:04} with some padding text\n")).collect();
    ok(&run(&["append", "DIR", "--batch", "7"], &dir, lines.as_bytes()));
    ok(&run(&["truncate", "DIR", "250"], &dir, b""));
    ok(&run(&["purge", "DIR", "100"], &dir, b""));
    let v: Value = serde_json::from_str(&ok(&run(&["stat", "DIR", "--json"], &dir, b""))).unwrap();
    let first = v["first_index"].as_u64().unwrap();
    assert!(first > 1 && first <= 100, "{first}");
    assert_eq!(v["last_index"], 250);
    assert_eq!(
        ok(&run(&["read", "DIR", "250"], &dir, b"")),
        "entry number 0250 with some padding text\n"
    );
    // Out-of-range reads, a missing log, a bad size: exit 2 with a message naming the log.
    let out = run(&["read", "DIR", "251", "260"], &dir, b"");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("not in the log"));
    let missing = tmp.path().join("missing");
    let out = run(&["append", "DIR"], &missing, b"x\n");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("missing"));
    assert!(!missing.exists(), "append must not create a log");
    let out = run(&["read", "DIR"], &missing, b"");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(run(&["init", "DIR", "--segment-size", "12Q"], &dir, b"").status.code(), Some(2));
}

#[test]
fn verify_reports_corruption_with_exit_1() {
    let (_tmp, dir) = new_log("wal", &["--segment-size", "4096"]);
    let lines: String = (1..=200).map(|i| format!("{i:08}\n")).collect();
    ok(&run(&["append", "DIR", "--batch", "1"], &dir, lines.as_bytes()));
    let segs = segments(&dir);
    let mut b = std::fs::read(&segs[0]).unwrap();
    b[32 + 16 + 3] ^= 1; // first entry's payload
    std::fs::write(&segs[0], &b).unwrap();
    let out = run(&["verify", "DIR"], &dir, b"");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("corrupt")
            && err.contains("entry 1 ")
            && err.contains(&*segs[0].file_name().unwrap().to_string_lossy()),
        "{err}"
    );
    let out = run(&["read", "DIR", "1", "2"], &dir, b"");
    assert_eq!(out.status.code(), Some(2));
}

#[test]
fn every_log_command_has_help_with_an_example() {
    for cmd in ["init", "append", "read", "stat", "verify", "truncate", "purge"] {
        let out = mmapkit().args(["log", cmd, "--help"]).output().unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(text.contains("mmapkit log"), "{cmd} --help has no example:\n{text}");
    }
    let out = mmapkit().args(["log", "--help"]).output().unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains("Examples:"));
}

#[test]
fn append_of_a_batch_bigger_than_the_empty_segment_stays_readable() {
    // `log init w --segment-size 4K; seq 1 2000 | log append w` made two
    // segments starting at index 1: stat failed forever.
    let (_tmp, dir) = new_log("w", &["--segment-size", "4K"]);
    let lines: String = (1..=2000).map(|i| format!("{i}\n")).collect();
    assert_eq!(ok(&run(&["append", "DIR"], &dir, lines.as_bytes())), "1 2000\n");
    let v: Value = serde_json::from_str(&ok(&run(&["stat", "DIR", "--json"], &dir, b""))).unwrap();
    assert_eq!(v["entries"], 2000);
    assert_eq!(ok(&run(&["read", "DIR"], &dir, b"")), lines);
    // The 4 KiB size is remembered without --segment-size.
    ok(&run(&["append", "DIR", "--batch", "50"], &dir, lines.as_bytes()));
    let v: Value = serde_json::from_str(&ok(&run(&["stat", "DIR", "--json"], &dir, b""))).unwrap();
    let sizes: Vec<u64> =
        v["segments"].as_array().unwrap().iter().map(|s| s["size"].as_u64().unwrap()).collect();
    assert!(sizes.len() > 3 && sizes[2..].iter().all(|&s| s == 4096), "{sizes:?}");
    // After `truncate w 0`, a big batch again.
    ok(&run(&["truncate", "DIR", "0"], &dir, b""));
    ok(&run(&["append", "DIR"], &dir, lines.as_bytes()));
    ok(&run(&["verify", "DIR"], &dir, b""));
    assert_eq!(ok(&run(&["read", "DIR"], &dir, b"")), lines);
}

#[test]
fn damage_before_the_last_batch_is_corruption_and_repair_quarantines_it() {
    // `seq 1 3000 | log append b --batch 10`, byte 64 flipped: verify said
    // `ok: 0 entries` and the next append overwrote the rest.
    let (_tmp, dir) = new_log("b", &[]);
    let lines: String = (1..=3000).map(|i| format!("{i}\n")).collect();
    ok(&run(&["append", "DIR", "--batch", "10"], &dir, lines.as_bytes()));
    let seg = segments(&dir)[0].clone();
    let mut b = std::fs::read(&seg).unwrap();
    b[64] ^= 0xFF;
    std::fs::write(&seg, &b).unwrap();
    // verify: exit 1 (was 2 for the tail segment), naming entry and segment.
    let out = run(&["verify", "DIR"], &dir, b"");
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("entry 1") && err.contains(&*seg.file_name().unwrap().to_string_lossy()),
        "{err}"
    );
    // A writer refuses too, and writes nothing.
    let out = run(&["append", "DIR"], &dir, b"x\n");
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(std::fs::read(&seg).unwrap(), b);
    // --repair keeps the valid prefix and moves the rest aside.
    let out = run(&["verify", "DIR", "--repair"], &dir, b"");
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("quarantine"));
    let q: Vec<_> =
        std::fs::read_dir(dir.join("quarantine")).unwrap().map(|e| e.unwrap().path()).collect();
    assert_eq!(q.len(), 1);
    let cut = std::fs::read(&q[0]).unwrap();
    assert!(cut.len() > 30000, "{}", cut.len());
    assert_eq!(cut[..], b[32..32 + cut.len()]);
    ok(&run(&["verify", "DIR"], &dir, b""));
}

#[test]
fn records_input_cut_off_is_an_error() {
    let (_tmp, dir) = new_log("r", &[]);
    // A cut-off length prefix: exit 2, nothing appended.
    let out = run(&["append", "DIR", "--records"], &dir, b"\x03\x00\x00");
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("length prefix") && err.contains("nothing was appended"), "{err}");
    // A record shorter than its prefix says, after a good one in the same batch.
    let out = run(&["append", "DIR", "--records"], &dir, b"\x02\x00\x00\x00ok\x05\x00\x00\x00abc");
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut short"));
    let v: Value = serde_json::from_str(&ok(&run(&["stat", "DIR", "--json"], &dir, b""))).unwrap();
    assert_eq!(v["entries"], 0);
    // With --batch 1 the first record is appended, and the message says so.
    let out = run(
        &["append", "DIR", "--records", "--batch", "1"],
        &dir,
        b"\x02\x00\x00\x00ok\x05\x00\x00\x00abc",
    );
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("entries 1..1 were appended"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(ok(&run(&["read", "DIR"], &dir, b"")), "ok\n");
}

#[test]
fn append_help_does_not_offer_a_segment_size() {
    let out = mmapkit().args(["log", "append", "--help"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(!text.contains("--segment-size"), "{text}");
    assert!(text.contains("create it with `log init`"), "{text}");
}

/// Five synced batches, a byte of the last one flipped: a last batch that
/// does not read back is reported (exit 1), never `ok` (verify once said
/// `ok: 12 entries` and the next append quarantined 3 acknowledged
/// entries): a torn write and damage after the sync cannot be told apart.
#[test]
fn verify_never_says_ok_over_an_unreadable_last_batch() {
    let (_tmp, dir) = new_log("v", &[]);
    for b in 0..5 {
        let lines: String = (0..3).map(|i| format!("batch{b}-entry{i}\n")).collect();
        ok(&run(&["append", "DIR", "--batch", "3"], &dir, lines.as_bytes()));
    }
    ok(&run(&["verify", "DIR"], &dir, b""));
    let seg = segments(&dir)[0].clone();
    let mut b = std::fs::read(&seg).unwrap();
    let at = b.windows(13).rposition(|w| w == b"batch4-entry1").unwrap();
    b[at] ^= 0x20;
    std::fs::write(&seg, &b).unwrap();
    let out = run(&["verify", "DIR"], &dir, b"");
    assert_eq!(out.status.code(), Some(1), "{}", String::from_utf8_lossy(&out.stdout));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("last batch is unreadable") && err.contains("after entry 12"), "{err}");
    let out = run(&["verify", "DIR", "--json"], &dir, b"");
    assert_eq!(out.status.code(), Some(1));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        (v["ok"].as_bool(), v["unreadable_tail"]["first_index"].as_u64()),
        (Some(false), Some(13))
    );
}

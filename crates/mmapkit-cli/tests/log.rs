//! End-to-end tests of `mmapkit log ...`.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

fn run(args: &[&str], dir: &Path, stdin: &[u8]) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_mmapkit"))
        .arg("log")
        .args(args.iter().map(|a| {
            if *a == "DIR" {
                dir.as_os_str()
            } else {
                a.as_ref()
            }
        }))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run mmapkit");
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    child.wait_with_output().unwrap()
}

fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "failed ({:?}): {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).unwrap()
}

#[test]
fn init_append_read_stat_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    ok(&run(
        &["init", "DIR", "--segment-size", "4K", "--first-index", "10"],
        &dir,
        b"",
    ));
    assert_eq!(
        ok(&run(
            &["append", "DIR", "--term", "3"],
            &dir,
            b"alpha\nbeta\n\ngamma"
        )),
        "10 13\n"
    );
    assert_eq!(
        ok(&run(&["read", "DIR"], &dir, b"")),
        "alpha\nbeta\n\ngamma\n"
    );
    assert_eq!(
        ok(&run(&["read", "DIR", "11", "13"], &dir, b"")),
        "beta\n\n"
    );
    // Whole entries that fit in 9 bytes: the empty one fits too.
    assert_eq!(
        ok(&run(&["read", "DIR", "10", "--max-bytes", "9"], &dir, b"")),
        "alpha\nbeta\n\n"
    );
    assert_eq!(
        ok(&run(&["read", "DIR", "10", "--max-bytes", "2"], &dir, b"")),
        "alpha\n"
    );
    let v: Value =
        serde_json::from_str(&ok(&run(&["read", "DIR", "12", "14", "--json"], &dir, b""))).unwrap();
    assert_eq!(
        v,
        serde_json::json!([{"index": 12, "term": 3, "data": ""}, {"index": 13, "term": 3, "data": "gamma"}])
    );
    let v: Value = serde_json::from_str(&ok(&run(&["stat", "DIR", "--json"], &dir, b""))).unwrap();
    assert_eq!(
        (
            v["first_index"].as_u64(),
            v["last_index"].as_u64(),
            v["entries"].as_u64()
        ),
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
    assert_eq!(
        v,
        serde_json::json!({"first_index": 14, "last_index": 14, "appended": 1})
    );
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
    ok(&run(
        &["append", "DIR", "--records", "--batch", "2"],
        &a,
        &input,
    ));
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
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    ok(&run(&["init", "DIR", "--segment-size", "4096"], &dir, b""));
    let lines: String = (1..=300)
        .map(|i| format!("entry number {i:04} with some padding text\n"))
        .collect();
    ok(&run(
        &["append", "DIR", "--batch", "7"],
        &dir,
        lines.as_bytes(),
    ));
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
    assert_eq!(
        run(&["init", "DIR", "--segment-size", "12Q"], &dir, b"")
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn verify_reports_corruption_with_exit_1() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("wal");
    ok(&run(&["init", "DIR", "--segment-size", "4096"], &dir, b""));
    let lines: String = (1..=200).map(|i| format!("{i:08}\n")).collect();
    ok(&run(
        &["append", "DIR", "--batch", "1"],
        &dir,
        lines.as_bytes(),
    ));
    let mut segs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "seg"))
        .collect();
    segs.sort();
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
    for cmd in [
        "init", "append", "read", "stat", "verify", "truncate", "purge",
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_mmapkit"))
            .args(["log", cmd, "--help"])
            .output()
            .unwrap();
        let text = String::from_utf8(out.stdout).unwrap();
        assert!(
            text.contains("mmapkit log"),
            "{cmd} --help has no example:\n{text}"
        );
    }
    let out = Command::new(env!("CARGO_BIN_EXE_mmapkit"))
        .args(["log", "--help"])
        .output()
        .unwrap();
    assert!(String::from_utf8(out.stdout).unwrap().contains("Examples:"));
}

//! End-to-end tests of `mmapkit kmers`.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::os::unix::process::ExitStatusExt;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// Seeded reads of mixed lengths, wrapped at 70, some N and lowercase.
fn fasta(n: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    for i in 0..n {
        out.extend_from_slice(format!(">read{i}\n").as_bytes());
        let len = (rng.next() % 700) as usize;
        let seq: Vec<u8> =
            (0..len).map(|_| b"ACGTACGTACGTacgtN"[(rng.next() % 17) as usize]).collect();
        for line in seq.chunks(70) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
    }
    out
}

#[test]
fn help_has_examples() {
    let out = run(&["kmers", "--help"]);
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        text.contains("Examples:") && text.contains("mmapkit kmers reads.fq.gz -o vectors.csv"),
        "{text}"
    );
}

#[test]
fn every_mode_and_thread_count_writes_the_same_bytes() {
    let d = tempdir();
    let input = file_in(d.path(), "r.fa", fasta(3000, 7));
    for (ext, extra) in [("csv", vec![]), ("npy", vec![]), ("tsv", vec!["--counts", "-k", "3"])] {
        let mut outs: Vec<(String, Vec<u8>)> = Vec::new();
        for mode in ["single", "batch", "mmap"] {
            for j in ["1", "2", "3"] {
                let out: PathBuf = d.path().join(format!("o-{mode}-{j}.{ext}"));
                let mut args = vec![
                    "kmers",
                    "--mode",
                    mode,
                    "-j",
                    j,
                    input.to_str().unwrap(),
                    "-o",
                    out.to_str().unwrap(),
                ];
                args.extend(&extra);
                let r = run(&args);
                assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
                outs.push((format!("{mode} -j{j}"), fs::read(&out).unwrap()));
            }
        }
        for (name, bytes) in &outs {
            assert!(bytes == &outs[0].1, "{ext}: {name} differs from {}", outs[0].0);
        }
        if ext == "csv" {
            let text = String::from_utf8(outs[0].1.clone()).unwrap();
            assert_eq!(text.lines().count(), 3000);
            assert!(text.lines().all(|l| l.len() == 136 * 9 - 1));
        }
    }
}

#[test]
fn json_summary() {
    let d = tempdir();
    let input = file_in(d.path(), "r.fa", fasta(10, 1));
    let out = d.path().join("v.npy");
    let r =
        run(&["kmers", "--json", "-k", "5", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(0));
    let v: serde_json::Value = serde_json::from_slice(&r.stdout).unwrap();
    assert_eq!(
        (v["reads"].as_u64(), v["dims"].as_u64(), v["format"].as_str()),
        (Some(10), Some(512), Some("npy"))
    );
}

#[test]
fn malformed_input_exit_2_naming_file_and_record() {
    let d = tempdir();
    let input = file_in(d.path(), "bad.fq", "@a\nACGT\n+\nIIII\n@b\nACG\n+\nIIII\n");
    let out = d.path().join("v.csv");
    for mode in ["single", "batch", "mmap"] {
        let r =
            run(&["kmers", "--mode", mode, input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
        assert_eq!(r.status.code(), Some(2));
        let err = String::from_utf8(r.stderr).unwrap();
        assert!(
            err.contains(&format!(
                "{}: record 2: quality length 4 differs from sequence length 3",
                input.display()
            )),
            "{err}"
        );
        assert_eq!(files_in(d.path()), vec!["bad.fq"], "no output, no temporary file");
    }
    let r = run(&["kmers", "-k", "0", input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let r = run(&["kmers", "missing.fa", "-o", out.to_str().unwrap()]);
    assert_eq!(r.status.code(), Some(2));
    let err = String::from_utf8(r.stderr).unwrap();
    assert!(err.contains("missing.fa: open: No such file or directory"), "{err}");
    assert_eq!(err.matches("No such file or directory").count(), 1, "OS text once: {err}");
}

#[test]
fn killed_before_finish_leaves_no_output() {
    let d = tempdir();
    let input = file_in(d.path(), "big.fa", fasta(60_000, 3));
    let out = d.path().join("v.csv");
    fs::write(&out, "previous complete output\n").unwrap();
    let mut child = mmapkit()
        .args(["kmers", "-k", "6", "-j", "1", input.to_str().unwrap(), "-o", out.to_str().unwrap()])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    // wait for the temporary output to appear, then kill -9
    while !files_in(d.path()).iter().any(|n| n.starts_with(".v.csv.mmapkit-"))
        && t0.elapsed() < Duration::from_secs(20)
    {
        std::thread::sleep(Duration::from_millis(1));
    }
    child.kill().unwrap();
    // Decided by how it ended, not by a check before the kill (it may finish
    // in between): killed, the previous output is whole; finished, the new.
    let st = child.wait().unwrap();
    let now = fs::read_to_string(&out).unwrap();
    if st.signal() == Some(libc::SIGKILL) {
        assert_eq!(now, "previous complete output\n");
    } else {
        assert!(st.success() && now != "previous complete output\n", "{st:?}");
    }
}

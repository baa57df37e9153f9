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

/// Empty, N-only, too short, lowercase and wrapped reads.
const SMALL_FASTA: &str = ">r1\nACGTACGTAA\n>r2 N only\nNNNN\n>r3\nacgtTTTTGGGGCCCCAAAAACGNACG\n\
>r4 too short\nAC\n>r5 wrapped\nAAAAAAAAAAAAAAAAAAAA\nAAAAAAAAAAAAAAAAAAAAC\n>r6 empty\n";

/// `kmertools comp oligo -i small.fa -o out -k 3 -c -p csv` (kmertools 1.0),
/// byte for byte: plain numbers, no padding.
const KMERTOOLS_COUNTS_CSV: &str = "\
0,0,0,0,0,0,4,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,3,1,0
0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0
6,2,0,0,0,0,4,0,0,0,0,0,0,0,2,0,0,2,4,0,0,0,0,0,0,0,0,2,0,0,0,0
0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0
38,1,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0
0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0,0
";

/// Rows 1, 3 and 5 of the same without `-c` (the other rows are zeros):
/// 6 decimals, 8 bytes a value.
const KMERTOOLS_FREQ_ROWS: [&str; 3] = [
    "0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.500000,0.000000,0.000000,0.000000,\
0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,\
0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.375000,\
0.125000,0.000000",
    "0.272727,0.090909,0.000000,0.000000,0.000000,0.000000,0.181818,0.000000,0.000000,0.000000,\
0.000000,0.000000,0.000000,0.000000,0.090909,0.000000,0.000000,0.090909,0.181818,0.000000,\
0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.090909,0.000000,0.000000,\
0.000000,0.000000",
    "0.974359,0.025641,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,\
0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,\
0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,0.000000,\
0.000000,0.000000",
];

/// `--counts` csv/tsv is what kmertools writes (no padding: it used to
/// pad every count to 10 bytes), in every mode.
#[test]
fn counts_and_frequencies_are_kmertools_bytes() {
    let d = tempdir();
    let input = file_in(d.path(), "small.fa", SMALL_FASTA);
    let zeros = vec!["0.000000"; 32].join(",");
    let [a, b, c] = KMERTOOLS_FREQ_ROWS;
    let freq = [a, &zeros, b, &zeros, c, &zeros].join("\n") + "\n";
    for (counts, want_csv) in [(true, KMERTOOLS_COUNTS_CSV), (false, freq.as_str())] {
        for (format, want) in [("csv", want_csv.to_owned()), ("tsv", want_csv.replace(',', "\t"))] {
            for mode in ["single", "batch", "mmap"] {
                for j in ["1", "3"] {
                    let out = d.path().join(format!("o.{format}"));
                    let mut args = vec!["kmers", "-k", "3", "--mode", mode, "-j", j];
                    if counts {
                        args.push("--counts");
                    }
                    args.extend([input.to_str().unwrap(), "-o", out.to_str().unwrap()]);
                    let r = run(&args);
                    assert_eq!(r.status.code(), Some(0), "{}", String::from_utf8_lossy(&r.stderr));
                    assert_eq!(
                        fs::read_to_string(&out).unwrap(),
                        want,
                        "{format} counts={counts} {mode} -j{j}"
                    );
                }
            }
            // streamed to stdout: the same bytes
            let mut args = vec!["kmers", "-k", "3", "--format", format];
            if counts {
                args.push("--counts");
            }
            args.extend([input.to_str().unwrap(), "-o", "-"]);
            let r = run(&args);
            assert_eq!((r.status.code(), String::from_utf8(r.stdout).unwrap()), (Some(0), want));
        }
    }
}

/// The `kmertools` CLI (from the pykmertools wheel): PATH, else the
/// workspace's `.venv`. None when it is not installed.
fn kmertools() -> Option<PathBuf> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../.venv/bin");
    std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .unwrap_or_default()
        .into_iter()
        .chain([venv])
        .map(|d| d.join("kmertools"))
        .find(|p| p.is_file())
}

/// Differential against kmertools itself, when installed: many reads (so
/// the mmap mode places many blocks of variable-length lines), FASTA and
/// FASTQ, csv and tsv, counts and frequencies, every mode.
#[test]
fn same_bytes_as_the_kmertools_cli() {
    let Some(kt) = kmertools() else {
        eprintln!("SKIPPED same_bytes_as_the_kmertools_cli: kmertools not installed");
        return;
    };
    let d = tempdir();
    let fa = file_in(d.path(), "r.fa", fasta(1200, 11));
    // kmertools 1.0 cannot read an empty FASTQ record (it panics): none here.
    let mut fq = Vec::new();
    let mut rng = Rng(5);
    for i in 0..700 {
        let len = 1 + (rng.next() % 900) as usize;
        let seq: Vec<u8> =
            (0..len).map(|_| b"ACGTACGTAAAAacgtN"[(rng.next() % 17) as usize]).collect();
        fq.extend_from_slice(format!("@q{i}\n").as_bytes());
        fq.extend_from_slice(&seq);
        fq.extend_from_slice(b"\n+\n");
        fq.extend(std::iter::repeat_n(b'I', len));
        fq.push(b'\n');
    }
    let fq = file_in(d.path(), "r.fq", fq);
    for input in [&fa, &fq] {
        for k in ["3", "5"] {
            for format in ["csv", "tsv"] {
                for counts in [true, false] {
                    let want = d.path().join("kt.out");
                    let mut cmd = std::process::Command::new(&kt);
                    cmd.args(["comp", "oligo", "-k", k, "-p", format, "-t", "2", "-i"])
                        .arg(input)
                        .arg("-o")
                        .arg(&want);
                    if counts {
                        cmd.arg("-c");
                    }
                    let r = cmd.output().unwrap();
                    assert!(
                        r.status.success(),
                        "kmertools: {}",
                        String::from_utf8_lossy(&r.stderr)
                    );
                    let want = fs::read(&want).unwrap();
                    for mode in ["single", "batch", "mmap"] {
                        let out = d.path().join("mk.out");
                        let mut args = vec!["kmers", "-k", k, "--format", format, "--mode", mode];
                        args.extend(["-j", "3", input.to_str().unwrap(), "-o", s(&out)]);
                        if counts {
                            args.push("--counts");
                        }
                        let r = run(&args);
                        assert_eq!(
                            r.status.code(),
                            Some(0),
                            "{}",
                            String::from_utf8_lossy(&r.stderr)
                        );
                        assert!(
                            fs::read(&out).unwrap() == want,
                            "{} -k {k} {format} counts={counts} {mode}: differs from kmertools",
                            input.display()
                        );
                    }
                }
            }
        }
    }
}

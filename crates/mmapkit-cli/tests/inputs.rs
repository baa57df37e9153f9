//! Inputs that are not plain regular files (stdin, `-`, `/dev/stdin`,
//! FIFOs, /proc and /sys files whose size reads as 0), escapes, and the
//! order of output and error lines in one pipe.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

mod common;
use common::*;

#[test]
fn proc_files_whose_size_reads_0_are_read() {
    let out = run_stdin(&["grep", "MemTotal", "/proc/meminfo"], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert!(text(&out.stdout).starts_with("MemTotal:"), "{}", text(&out.stdout));
    let want = fs::read("/proc/cpuinfo").unwrap().iter().filter(|&&b| b == b'\n').count();
    assert!(want > 0);
    for strategy in ["auto", "mmap", "read", "stream"] {
        let out = run_stdin(&["count", "--lines", "--strategy", strategy, "/proc/cpuinfo"], None);
        assert_eq!(out.status.code(), Some(0), "{strategy}: {}", text(&out.stderr));
        assert_eq!(text(&out.stdout).trim(), want.to_string(), "{strategy}");
    }
    let out = run_stdin(&["find", "MemTotal", "/proc/meminfo"], None);
    assert_eq!(text(&out.stdout), "0\n", "{}", text(&out.stderr));
    // sysfs attributes claim 4096 bytes: never a bogus "truncated".
    let sys = "/sys/devices/system/cpu/online";
    if Path::new(sys).exists() {
        let out = run_stdin(&["count", "--lines", sys], None);
        assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
        assert_eq!(text(&out.stdout), "1\n");
    }
}

#[test]
fn dash_and_dev_stdin_everywhere_a_file_is_read() {
    let data = b"alpha\nbeta alpha\ngamma\n".repeat(1000);
    let d = tempdir();
    let f: PathBuf = d.path().join("f.txt");
    fs::write(&f, &data).unwrap();
    let cases: [&[&str]; 6] = [
        &["count", "--lines"],
        &["count", "alpha"],
        &["find", "gamma"],
        &["find", "--last", "alpha"],
        &["find", "--all", "-m", "3", "beta"],
        &["grep", "-n", "-c", "beta"],
    ];
    for args in cases {
        let want = run_stdin(&[args, &[s(&f)]].concat(), None);
        assert_eq!(want.status.code(), Some(0), "{args:?}: {}", text(&want.stderr));
        for input in ["-", "/dev/stdin"] {
            let got = run_stdin(&[args, &[input]].concat(), Some(&data));
            assert_eq!(got.status.code(), Some(0), "{args:?} {input}: {}", text(&got.stderr));
            assert_eq!(text(&got.stdout), text(&want.stdout), "{args:?} {input}");
        }
    }
}

#[test]
fn fifos_are_streamed() {
    let d = tempdir();
    let fifo = d.path().join("ff");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let p = fifo.clone();
    let h = std::thread::spawn(move || fs::write(&p, b"x\ny\nx\n").unwrap());
    let out = run_stdin(&["count", "--lines", s(&fifo)], None);
    h.join().unwrap();
    assert_eq!(
        (out.status.code(), text(&out.stdout)),
        (Some(0), "3\n".into()),
        "{}",
        text(&out.stderr)
    );
    let p = fifo.clone();
    let h = std::thread::spawn(move || fs::write(&p, b"x\ny\nx\n").unwrap());
    let out = run_stdin(&["grep", "-n", "x", s(&fifo)], None);
    h.join().unwrap();
    assert_eq!(text(&out.stdout), "1:x\n3:x\n", "{}", text(&out.stderr));
}

/// Runs `mmapkit ARGS 2>&1 | cat`: stdout and stderr into one pipe.
fn one_pipe(args: &[&str]) -> String {
    let quoted: Vec<String> = args.iter().map(|a| format!("'{a}'")).collect();
    let bin = bin();
    let out = Command::new("sh")
        .arg("-c")
        .arg(format!("'{bin}' {} 2>&1 | cat", quoted.join(" ")))
        .output()
        .unwrap();
    text(&out.stdout)
}

#[test]
fn errors_never_overtake_earlier_output_in_one_pipe() {
    let d = tempdir();
    let a = d.path().join("a.txt");
    let b = d.path().join("b.txt");
    fs::write(&a, b"hit 1\nmiss\nhit 2\n").unwrap();
    fs::write(&b, b"hit 3\n").unwrap();
    let missing = d.path().join("missing.txt");
    let out = one_pipe(&["grep", "-h", "hit", s(&a), s(&missing), s(&b)]);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(&lines[..2], ["hit 1", "hit 2"], "{out}");
    assert!(lines[2].starts_with("mmapkit: ") && lines[2].contains("missing.txt"), "{out}");
    assert_eq!(lines[3], "hit 3", "{out}");
    let out = one_pipe(&["count", "hit", s(&a), s(&missing), s(&b)]);
    let lines: Vec<&str> = out.lines().collect();
    assert!(
        lines[0].ends_with("a.txt:2")
            && lines[1].contains("missing.txt")
            && lines[2].ends_with("b.txt:1"),
        "{out}"
    );
}

#[test]
fn unknown_escapes_are_errors_and_touch_nothing() {
    let d = tempdir();
    let f = d.path().join("f.txt");
    fs::write(&f, b"a\\qb AB\n").unwrap();
    for (args, esc) in [
        (vec!["count", r"\q"], r"\q"),
        (vec!["find", r"\xZZ"], r"\xZZ"),
        (vec!["find", "a\\"], "trailing backslash"),
        (vec!["replace", "-F", r"\q", "xx"], r"\q"),
        (vec!["replace", "-F", "AB", r"\xZZ"], r"\xZZ"),
        (vec!["replace", "A", r"\q"], r"\q"),
    ] {
        let out = run_stdin(&[&args[..], &[s(&f)]].concat(), None);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {}", text(&out.stdout));
        assert!(text(&out.stderr).contains(esc), "{args:?}: {}", text(&out.stderr));
        assert_eq!(fs::read(&f).unwrap(), b"a\\qb AB\n", "{args:?}");
    }
    // The supported ones keep working.
    let out = run_stdin(&["count", r"\x41\x42\n", s(&f)], None);
    assert_eq!(text(&out.stdout), "1\n", "{}", text(&out.stderr));
    let out = run_stdin(&["replace", "-F", r"\\q", r"\t!", s(&f)], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(fs::read(&f).unwrap(), b"a\t!b AB\n");
}

#[test]
fn kmers_reads_stdin_and_pipes_plain_or_gzip_like_a_file() {
    let d = tempdir();
    let fa: Vec<u8> = (0..200)
        .flat_map(|i| format!(">r{i}\n{}\n", "ACGTTGCAAC".repeat(1 + i % 7)).into_bytes())
        .collect();
    let f = d.path().join("x.fa");
    fs::write(&f, &fa).unwrap();
    let gz = d.path().join("x.fa.gz");
    assert!(Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -c '{}' > '{}'", s(&f), s(&gz)))
        .status()
        .unwrap()
        .success());
    let want_out = d.path().join("want.csv");
    let out = run_stdin(&["kmers", s(&f), "-o", s(&want_out)], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let want = fs::read(&want_out).unwrap();
    let gzdata = fs::read(&gz).unwrap();
    for mode in ["single", "batch", "mmap"] {
        for (input, data) in [("-", &fa), ("/dev/stdin", &gzdata), ("-", &gzdata)] {
            let o = d.path().join(format!("o-{mode}.csv"));
            let out = run_stdin(&["kmers", "--mode", mode, input, "-o", s(&o)], Some(data));
            assert_eq!(out.status.code(), Some(0), "{mode} {input}: {}", text(&out.stderr));
            assert!(fs::read(&o).unwrap() == want, "{mode} {input}: output differs");
        }
        // A pipe given by path, as bash's <(cat x.fa.gz) does.
        let o = d.path().join(format!("p-{mode}.csv"));
        let cmd =
            format!("cat '{}' | '{}' kmers --mode {mode} /dev/fd/0 -o '{}'", s(&gz), bin(), s(&o));
        let st = Command::new("sh").arg("-c").arg(cmd).status().unwrap();
        assert!(st.success() && fs::read(&o).unwrap() == want, "{mode}: a gzip pipe");
    }
}

/// `replace -F -j1` on an evicted ~200 MB file,
/// truncated to 1000 bytes while it runs: exit 2 naming the file, and the
/// file stays at 1000 bytes (it used to grow back to 100+ MB). The cut
/// comes as soon as the edit has reached 8 MB (polled), not after a fixed
/// delay, so a fast machine cannot finish first.
#[test]
fn truncation_during_in_place_replace_leaves_the_truncated_file() {
    use std::os::unix::fs::FileExt;
    let d = tempdir();
    let f = d.path().join("h2");
    let line = b"alpha beta gamma delta epsilon zeta eta theta iota kappa lambda\n";
    let probe_at = (8u64 << 20) / line.len() as u64 * line.len() as u64;
    for attempt in 0..3 {
        {
            let mut w = std::io::BufWriter::new(fs::File::create(&f).unwrap());
            for _ in 0..(200 << 20) / line.len() {
                w.write_all(line).unwrap();
            }
        }
        assert!(run_stdin(&["evict", s(&f)], None).status.success());
        let child = mmapkit()
            .args(["replace", "-F", "-j1", "alpha", "ALPHA", s(&f)])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let probe = fs::File::open(&f).unwrap();
        let mut head = [0u8; 5];
        let t0 = std::time::Instant::now();
        while probe.read_at(&mut head, probe_at).unwrap() == 5
            && &head != b"ALPHA"
            && t0.elapsed().as_secs() < 60
        {
            std::hint::spin_loop();
        }
        fs::OpenOptions::new().write(true).open(&f).unwrap().set_len(1000).unwrap();
        let out = child.wait_with_output().unwrap();
        let ctx = format!(
            "attempt {attempt}: exit {:?}, stdout {}, stderr {}",
            out.status.code(),
            text(&out.stdout),
            text(&out.stderr)
        );
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert_eq!(fs::metadata(&f).unwrap().len(), 1000, "the file grew back ({ctx})");
        assert_eq!(out.status.code(), Some(2), "{ctx}");
        assert!(
            text(&out.stderr).contains(s(&f)) && text(&out.stderr).contains("truncated"),
            "{ctx}"
        );
    }
}

/// A full disk is "no space left on device", without the meaningless
/// "to extend the file to 0 bytes" (the size is unknown on a failed write).
#[test]
fn full_disk_message_has_no_bogus_size() {
    let d = tempdir();
    let mnt = d.path().join("mnt");
    fs::create_dir(&mnt).unwrap();
    let ok = Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", s(&mnt)])
        .status()
        .map(|st| st.success());
    if !matches!(ok, Ok(true)) {
        eprintln!("skipped: cannot mount a tmpfs (needs root)");
        return;
    }
    let f = mnt.join("f.txt");
    let data = b"a".repeat(600 << 10);
    fs::write(&f, &data).unwrap();
    let out = run_stdin(&["replace", "-F", "a", "aa", s(&f)], None);
    let _ = Command::new("umount").arg(&mnt).status();
    let err = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("no space left on device") && !err.contains("0 bytes"), "{err}");
}

/// `kmers - -o s.fa < s.fa` is refused as the same through `/dev/stdin`
/// is (it once replaced its own input, exit 0): standard input's file is
/// compared with the output too.
#[test]
fn stdin_redirected_from_the_output_file_is_refused() {
    let d = tempdir();
    let fa = d.path().join("s.fa");
    let data = b">r1\nACGTACGTAC\n>r2\nTTGACCA\n".to_vec();
    fs::write(&fa, &data).unwrap();
    for input in ["-", "/dev/stdin"] {
        let out = mmapkit()
            .args(["kmers", input, "-o"])
            .arg(&fa)
            .stdin(fs::File::open(&fa).unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{input}: {}", text(&out.stderr));
        assert!(text(&out.stderr).contains("is the input file"), "{input}: {}", text(&out.stderr));
        assert_eq!(fs::read(&fa).unwrap(), data, "{input}: the input was replaced");
    }
}

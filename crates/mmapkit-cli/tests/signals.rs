//! Signal matrix: every long-running CLI command that
//! writes × SIGINT/SIGTERM/SIGHUP at seeded random moments: exit status
//! 128 + the signal (or 0 if it had finished), the target either
//! byte-identical to the original or the complete new content, and no
//! temporary file left. × SIGKILL: a temp file may remain, and the next run
//! against the same target removes it, but never a live process's.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::fs;
use std::io::Write;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::*;

/// ~18 MB of reads: a run is long enough to be signalled mid-way.
fn big_fasta(path: &Path) {
    let mut r = Rng(7);
    let mut out = Vec::with_capacity(19 << 20);
    for i in 0..60_000 {
        writeln!(out, ">r{i}").unwrap();
        out.extend((0..300).map(|_| b"ACGT"[(r.next() % 4) as usize]));
        out.push(b'\n');
    }
    fs::write(path, out).unwrap();
}

fn signal(child: &Child, sig: &str) {
    let _ = Command::new("kill").args([&format!("-{sig}"), &child.id().to_string()]).status();
}

/// Waits (up to 60 s) until the child catches every signal of `nums` (its
/// handlers installed: their bits in `/proc/PID/status`'s `SigCgt`) or has
/// exited. A signal sent earlier meets the default action, which kills: on
/// a loaded machine exec can take longer than any fixed delay.
fn handlers_installed(child: &Child, nums: &[i32]) {
    let path = format!("/proc/{}/status", child.id());
    let t0 = Instant::now();
    loop {
        let status = fs::read_to_string(&path).unwrap_or_default();
        let field = |name: &str| {
            status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or("")
        };
        if field("State:").starts_with('Z') {
            return;
        }
        let caught = u64::from_str_radix(field("SigCgt:"), 16).unwrap_or(0);
        if nums.iter().all(|&n| caught & (1 << (n - 1)) != 0) {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "no handlers for {nums:?} within 60 s");
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn wait(mut child: Child) -> ExitStatus {
    let t0 = Instant::now();
    loop {
        if let Some(s) = child.try_wait().unwrap() {
            return s;
        }
        if t0.elapsed() > Duration::from_secs(60) {
            let _ = child.kill();
            panic!("the process did not exit within 60 s of the signal");
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

const SIGNALS: [(&str, i32); 3] = [("INT", 2), ("TERM", 15), ("HUP", 1)];

/// One command of the matrix: how to run it in `d` and what the target
/// may hold afterwards.
struct Case {
    name: &'static str,
    args: Vec<String>,
    /// The file the command replaces.
    target: &'static str,
    /// Builds the directory (input and the target's original content).
    prepare: fn(&Path),
}

fn kmers(mode: &'static str) -> Case {
    Case {
        name: mode,
        args: ["kmers", "in.fa", "-o", "out.csv", "--mode", mode].map(String::from).to_vec(),
        target: "out.csv",
        prepare: |d| {
            fs::copy(d.join("../in.fa"), d.join("in.fa")).unwrap();
            fs::write(d.join("out.csv"), b"the previous output\n").unwrap();
        },
    }
}

fn text(d: &Path) {
    fs::copy(d.join("../data.txt"), d.join("data.txt")).unwrap();
}

#[test]
fn signal_matrix() {
    let root = tempdir();
    big_fasta(&root.path().join("in.fa"));
    fs::write(
        root.path().join("data.txt"),
        b"alpha beta gamma delta alpha epsilon zeta\n".repeat(700_000),
    )
    .unwrap();
    let cases = [
        kmers("mmap"),
        kmers("single"),
        kmers("batch"),
        Case {
            name: "replace rewrite",
            args: ["replace", "-F", "alpha", "ALPHA!", "data.txt", "-j1"]
                .map(String::from)
                .to_vec(),
            target: "data.txt",
            prepare: text,
        },
        Case {
            name: "replace in place",
            args: ["replace", "-F", "alpha", "OMEGA", "data.txt", "-j1"].map(String::from).to_vec(),
            target: "data.txt",
            prepare: text,
        },
    ];
    let mut rng = Rng(0x5eed);
    let (mut runs, mut interrupted) = (0, 0);
    for (i, case) in cases.iter().enumerate() {
        // The original and the complete result, and how long a run takes.
        let d = root.path().join(format!("ref{i}"));
        fs::create_dir(&d).unwrap();
        (case.prepare)(&d);
        let original = fs::read(d.join(case.target)).unwrap();
        let t0 = Instant::now();
        let st = mmapkit().current_dir(&d).args(&case.args).stdout(Stdio::null()).status().unwrap();
        let took = t0.elapsed();
        assert!(st.success(), "{}: reference run failed", case.name);
        let done = fs::read(d.join(case.target)).unwrap();
        assert_ne!(original, done);
        fs::remove_dir_all(&d).unwrap();
        for (sig, num) in SIGNALS {
            for k in 0..3 {
                // From the handlers' installation to 90 % of a run.
                let at = took.mul_f64(0.9 * rng.unit());
                let cell = format!("{} × SIG{sig} at {at:?} (run {k})", case.name);
                let d = root.path().join(format!("c{i}-{sig}-{k}"));
                fs::create_dir(&d).unwrap();
                (case.prepare)(&d);
                let child = mmapkit()
                    .current_dir(&d)
                    .args(&case.args)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null())
                    .spawn()
                    .unwrap();
                handlers_installed(&child, &[num]);
                std::thread::sleep(at);
                signal(&child, sig);
                let st = wait(child);
                runs += 1;
                let after = fs::read(d.join(case.target)).unwrap();
                match st.code() {
                    Some(0) => assert!(after == done, "{cell}: exit 0 but not the complete result"),
                    Some(c) if c == 128 + num => {
                        interrupted += 1;
                        assert!(
                            after == original || after == done,
                            "{cell}: the target is neither the original nor the result"
                        );
                    }
                    _ => panic!("{cell}: exit status {st:?}, expected {}", 128 + num),
                }
                assert!(leftovers(&d).is_empty(), "{cell}: temp files left: {:?}", leftovers(&d));
                fs::remove_dir_all(&d).unwrap();
            }
        }
    }
    eprintln!("signal matrix: {runs} runs ({} commands × {} signals × 3 moments), {interrupted} interrupted mid-way", cases.len(), SIGNALS.len());
    // How many runs a signal catches mid-way depends on the machine's load
    // (the moments are fractions of one timed run): some must be.
    assert!(interrupted > 0, "no run was interrupted mid-way (of {runs}): inputs too small?");
}

/// `log append` reading a slow stdin: a signal exits 128 + sig, leaves no
/// temp file in the log directory, and the log opens with a prefix of what
/// was sent.
#[test]
fn signal_matrix_log_append() {
    let root = tempdir();
    let mut runs = 0;
    for (sig, num) in SIGNALS {
        for k in 0..2 {
            let dir = root.path().join(format!("wal-{sig}-{k}"));
            let st = mmapkit()
                .args(["log", "init"])
                .arg(&dir)
                .args(["--segment-size", "64K"])
                .status()
                .unwrap();
            assert!(st.success());
            let mut child = mmapkit()
                .args(["log", "append"])
                .arg(&dir)
                .args(["--batch", "1"])
                .stdin(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap();
            let mut stdin = child.stdin.take().unwrap();
            // Slow input: lines over ~150 ms, crossing segment boundaries.
            for j in 0..(30 + 20 * k) {
                let _ = stdin.write_all(format!("{}\n", "x".repeat(2000 + j)).as_bytes());
                let _ = stdin.flush();
                std::thread::sleep(Duration::from_millis(5));
            }
            handlers_installed(&child, &[num]);
            signal(&child, sig);
            let st = wait(child);
            drop(stdin);
            runs += 1;
            let cell = format!("log append × SIG{sig} (run {k})");
            assert_eq!(st.code(), Some(128 + num), "{cell}: {st:?}");
            assert!(leftovers(&dir).is_empty(), "{cell}: temp files left: {:?}", leftovers(&dir));
            let out = mmapkit().args(["log", "read"]).arg(&dir).output().unwrap();
            assert!(out.status.success(), "{cell}: {}", String::from_utf8_lossy(&out.stderr));
            for (j, line) in out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).enumerate()
            {
                assert_eq!(line.len(), 2000 + j, "{cell}: entry {j} is not what was sent");
            }
        }
    }
    eprintln!("signal matrix (log append from a slow stdin): {runs} runs");
}

/// Entries of the log in `dir` (`mmapkit log read`, a reader beside the writer).
fn log_lines(dir: &Path) -> Vec<Vec<u8>> {
    let out = mmapkit().args(["log", "read"]).arg(dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    out.stdout.split(|&b| b == b'\n').filter(|l| !l.is_empty()).map(<[u8]>::to_vec).collect()
}

/// Feeds `line` to a running `log append --batch 1` and waits (up to 60 s)
/// until the log holds it as entry `n`: the writer read and appended it.
/// Fails at once if the writer exits first.
fn appended(child: &mut Child, stdin: &mut impl Write, dir: &Path, line: &str, n: usize) {
    // A writer that died closed the pipe: its exit status is the report.
    let _ = stdin.write_all(format!("{line}\n").as_bytes()).and_then(|()| stdin.flush());
    let t0 = Instant::now();
    while log_lines(dir).len() < n {
        if let Some(st) = child.try_wait().unwrap() {
            panic!("the writer exited ({st:?}) before appending {line:?}");
        }
        assert!(t0.elapsed() < Duration::from_secs(60), "{line:?} not appended within 60 s");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(log_lines(dir)[n - 1], line.as_bytes());
}

/// Signals ignored when the CLI starts (`nohup`, background jobs of
/// scripts) stay ignored: SIGHUP and SIGINT do not stop `log append`; SIGTERM,
/// left at its default, still does, with 128 + 15. After each ignored
/// signal the writer appends one more line (it went on working, checked by
/// what it did, not by a delay), and the exit status says SIGTERM, not a
/// handler of SIGHUP or SIGINT, ended it.
#[test]
fn signals_ignored_at_start_stay_ignored() {
    let root = tempdir();
    let dir = root.path().join("wal");
    assert!(mmapkit().args(["log", "init"]).arg(&dir).status().unwrap().success());
    let mut cmd = with_signals_ignored(mmapkit(), &[libc::SIGHUP, libc::SIGINT]);
    let mut child = cmd
        .args(["log", "append", "--batch", "1"])
        .arg(&dir)
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    appended(&mut child, &mut stdin, &dir, "one", 1);
    for (n, sig) in [(2, "HUP"), (3, "INT")] {
        signal(&child, sig);
        appended(&mut child, &mut stdin, &dir, &format!("after SIG{sig}"), n);
        assert!(
            child.try_wait().unwrap().is_none(),
            "SIG{sig} was ignored at start: it must not stop the run"
        );
    }
    handlers_installed(&child, &[libc::SIGTERM]);
    signal(&child, "TERM");
    let st = wait(child);
    drop(stdin);
    assert_eq!(st.code(), Some(128 + 15), "{st:?}");
}

fn temp_of(d: &Path, target: &str) -> Vec<PathBuf> {
    fs::read_dir(d)
        .unwrap()
        .flatten()
        .filter(|e| {
            let n = e.file_name().to_string_lossy().into_owned();
            n.starts_with(&format!(".{target}.mmapkit-")) && n.ends_with(".tmp")
        })
        .map(|e| e.path())
        .collect()
}

/// `kmers /dev/stdin -o out.csv` in `d`, reading a pipe the caller feeds.
fn kmers_from_stdin(d: &Path) -> Child {
    mmapkit()
        .current_dir(d)
        .args(["kmers", "/dev/stdin", "-o", "out.csv"])
        .stdin(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// SIGKILL cannot be caught: its temp file stays; the next run against the
/// same target removes it, while a temp file of a live process (a `kmers`
/// blocked reading an empty pipe) is left alone.
#[test]
fn sigkill_leftovers_are_removed_by_the_next_run_but_not_live_ones() {
    let root = tempdir();
    let d = root.path();
    big_fasta(&d.join("in.fa"));

    // A live writer of out.csv, blocked on its (empty, open) stdin.
    let mut live = kmers_from_stdin(d);
    let t0 = Instant::now();
    while temp_of(d, "out.csv").is_empty() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "the live writer never created its temp file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let live_tmp = temp_of(d, "out.csv");
    assert_eq!(live_tmp.len(), 1);

    // SIGKILL mid-run: kmers, then replace. The kmers runs read a pipe that
    // is fed part of the input and kept open, so each is surely mid-run
    // (with its temp file) when killed, however fast the build is.
    let mut kills = 0;
    let fasta = fs::read(d.join("in.fa")).unwrap();
    for _ in 0..2 {
        let mut c = kmers_from_stdin(d);
        let mut feed = c.stdin.take().unwrap();
        feed.write_all(&fasta[..1 << 20]).unwrap();
        let t0 = Instant::now();
        // Its own temp file (the run also removes the one the last kill left).
        let own = format!(".out.csv.mmapkit-{}-", c.id());
        while !temp_of(d, "out.csv")
            .iter()
            .any(|p| p.file_name().unwrap().to_string_lossy().starts_with(&own))
        {
            assert!(
                t0.elapsed() < Duration::from_secs(20),
                "the killed writer never created its temp file"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
        signal(&c, "KILL");
        let st = wait(c);
        drop(feed);
        assert_eq!(st.signal(), Some(9));
        kills += 1;
    }
    let left = temp_of(d, "out.csv").len();
    assert!(
        left >= 2,
        "SIGKILL mid-run should have left a temp file (found {left} with the live one)"
    );
    // A stale temp of a process that is surely gone (a reaped child).
    let mut gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    gone.wait().unwrap();
    let planted = d.join(format!(".out.csv.mmapkit-{gone_pid}-0.tmp"));
    fs::write(&planted, b"partial").unwrap();

    let st = mmapkit().current_dir(d).args(["kmers", "in.fa", "-o", "out.csv"]).status().unwrap();
    assert!(st.success());
    assert_eq!(temp_of(d, "out.csv"), live_tmp, "stale temp files removed, the live one kept");

    // replace: the same for its rewrite temp file.
    fs::write(d.join("data.txt"), b"alpha beta gamma\n".repeat(2_000_000)).unwrap();
    let c = mmapkit()
        .current_dir(d)
        .args(["replace", "-F", "alpha", "ALPHA!", "data.txt", "-j1"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while temp_of(d, "data.txt").is_empty() && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(2));
    }
    signal(&c, "KILL");
    wait(c);
    kills += 1;
    let st = mmapkit()
        .current_dir(d)
        .args(["replace", "-F", "beta", "BETA", "data.txt"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(st.success());
    assert!(temp_of(d, "data.txt").is_empty(), "the next replace removes the stale temp file");

    // Log segments: a stale segment temp file is removed by the next writer.
    let wal = d.join("wal");
    assert!(mmapkit().args(["log", "init"]).arg(&wal).status().unwrap().success());
    let seg_tmp = wal.join(format!(".00000000000000000009-00000001.seg.mmapkit-{gone_pid}-3.tmp"));
    fs::write(&seg_tmp, b"partial").unwrap();
    let mut a = mmapkit()
        .args(["log", "append"])
        .arg(&wal)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    a.stdin.take().unwrap().write_all(b"one\n").unwrap();
    assert!(a.wait().unwrap().success());
    assert!(!seg_tmp.exists(), "the stale segment temp file is removed");

    // The live writer still holds its temp; SIGTERM removes it. Its stdin
    // stays open until it has exited: `Child::wait` closes a stdin it still
    // holds first, and a writer that saw the end of its input before the
    // signal finished with 0 (seen under load on a clean clone).
    assert_eq!(temp_of(d, "out.csv"), live_tmp);
    let keep_open = live.stdin.take();
    signal(&live, "TERM");
    let st = live.wait().unwrap();
    drop(keep_open);
    assert_eq!(st.code(), Some(143));
    assert!(temp_of(d, "out.csv").is_empty());
    eprintln!(
        "SIGKILL: {kills} kills, 1 planted stale file, 1 planted stale segment, 1 live writer kept"
    );
}

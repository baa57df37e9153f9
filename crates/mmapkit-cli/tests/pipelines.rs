//! grep and count where they meet other programs: a live pipe's lines are searched and printed as they arrive, and a
//! failed write to standard output is an error (a closed pipe ends the
//! process by SIGPIPE, as GNU grep's does), never a success.
//!
//! The live-input tests keep the writer open and wait for a condition
//! (a line read, the process gone) with a generous deadline: a loaded
//! machine makes them slower, never wrong. Before the fix no output came
//! until the writer closed, so they time out.

#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::process::ExitStatusExt;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

mod common;
use common::*;

/// Far longer than any loaded machine needs; the writer stays open longer.
const DEADLINE: Duration = Duration::from_secs(30);

fn live(args: &[&str]) -> Child {
    mmapkit()
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The first `n` lines the child prints, read on a thread; `None` if they
/// have not all come within [`DEADLINE`].
fn lines_within(child: &mut Child, n: usize) -> Option<Vec<String>> {
    let out = child.stdout.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let lines: Vec<String> = BufReader::new(out).lines().take(n).map(Result::unwrap).collect();
        let _ = tx.send(lines);
    });
    rx.recv_timeout(DEADLINE).ok().filter(|l| l.len() == n)
}

/// The child's exit status if it ends within [`DEADLINE`] (killed if not).
fn exits_within(child: &mut Child) -> Option<ExitStatus> {
    let t0 = Instant::now();
    while t0.elapsed() < DEADLINE {
        if let Some(s) = child.try_wait().unwrap() {
            return Some(s);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    None
}

#[test]
fn a_live_pipes_line_is_printed_while_the_writer_is_still_open() {
    let mut child = live(&["grep", "--line-buffered", "ERR", "-"]);
    let mut stdin = child.stdin.take().unwrap();
    stdin.write_all(b"ok\nERR1\n").unwrap();
    stdin.flush().unwrap();
    let got = lines_within(&mut child, 1);
    drop(stdin);
    let _ = child.wait();
    assert_eq!(got, Some(vec!["ERR1".to_owned()]), "the line did not come while the pipe was open");
}

#[test]
fn thousands_of_lines_then_an_idle_writer_all_come_out() {
    // 5,000 matching lines (68 KiB: more than a pipe holds, less than
    // GNU grep's 96 KiB buffer), then the writer waits.
    let mut child = live(&["grep", "--line-buffered", "-n", "ERR", "-"]);
    let mut stdin = child.stdin.take().unwrap();
    let data: String = (0..5000).map(|i| format!("ERR line {i:05}\n")).collect();
    let writer = std::thread::spawn(move || {
        stdin.write_all(data.as_bytes()).unwrap();
        stdin.flush().unwrap();
        stdin // kept open until the test is done
    });
    let got = lines_within(&mut child, 5000);
    drop(writer.join().unwrap());
    let _ = child.wait();
    let got = got.expect("not all 5,000 lines came out while the writer was idle");
    assert_eq!(got[4999], "5000:ERR line 04999");
}

#[test]
fn q_and_m1_and_l_stop_at_the_first_match_of_a_live_pipe() {
    for (args, want_out) in [
        (&["grep", "-q", "ERR", "-"][..], ""),
        (&["grep", "-m1", "ERR", "-"][..], "ERR1\n"),
        (&["grep", "-l", "ERR", "-"][..], "(standard input)\n"),
        (&["grep", "-c", "-m1", "ERR", "-"][..], "1\n"),
    ] {
        let mut child = live(args);
        let mut stdin = child.stdin.take().unwrap();
        stdin.write_all(b"ERR1\n").unwrap();
        stdin.flush().unwrap();
        let status = exits_within(&mut child);
        drop(stdin);
        assert_eq!(status.and_then(|s| s.code()), Some(0), "{args:?} did not end at the match");
        let mut out = String::new();
        child.stdout.take().unwrap().read_to_string(&mut out).unwrap();
        assert_eq!(out, want_out, "{args:?}");
    }
}

#[test]
fn a_fifo_operand_is_searched_as_its_lines_arrive() {
    let dir = tempdir();
    let fifo = dir.path().join("fifo");
    let status = Command::new("mkfifo").arg(&fifo).status().unwrap();
    assert!(status.success());
    let mut child = mmapkit()
        .args(["grep", "--line-buffered", "-H", "ERR", s(&fifo)])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    // Opening for writing waits for the reader: the child has it open.
    let mut w = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    w.write_all(b"ERR2\n").unwrap();
    let got = lines_within(&mut child, 1);
    drop(w);
    let _ = child.wait();
    assert_eq!(got, Some(vec![format!("{}:ERR2", s(&fifo))]));
}

/// Runs `sh -c SCRIPT` with the binary as `$0`.
fn sh(script: &str) -> std::process::Output {
    Command::new("sh").args(["-c", script, &bin()]).stdin(Stdio::null()).output().unwrap()
}

#[test]
fn a_closed_stdout_is_a_write_error_not_a_success() {
    let dir = tempdir();
    let f = file_in(dir.path(), "f", "a root line\n");
    for cmd in [format!("grep root {}", s(&f)), format!("count root {}", s(&f))] {
        let out = sh(&format!("exec \"$0\" {cmd} >&-"));
        assert_eq!(out.status.code(), Some(2), "{cmd}: {out:?}");
        assert_eq!(
            stderr(&out),
            "mmapkit: write error on standard output: Bad file descriptor\n",
            "{cmd}"
        );
    }
    // Nothing to write: nothing failed (as GNU grep).
    let out = sh(&format!("exec \"$0\" grep nothing-like-this {} >&-", s(&f)));
    assert_eq!((out.status.code(), stderr(&out)), (Some(1), String::new()));
}

#[test]
fn a_full_stdout_names_standard_output() {
    let dir = tempdir();
    let f = file_in(dir.path(), "f", "a root line\n");
    for cmd in [format!("grep root {}", s(&f)), format!("count --lines {}", s(&f))] {
        let out = sh(&format!("exec \"$0\" {cmd} > /dev/full"));
        assert_eq!(out.status.code(), Some(2), "{cmd}");
        assert_eq!(
            stderr(&out),
            "mmapkit: write error on standard output: No space left on device\n",
            "{cmd}"
        );
    }
}

/// `mmapkit grep ... | head -1`: the reader closes the pipe early.
fn reader_goes_away(cmd: &mut Command) -> std::process::Output {
    let dir = tempdir();
    let lines: String = (0..200_000).map(|i| format!("y {i}\n")).collect();
    let f = file_in(dir.path(), "many", lines);
    let mut child = cmd
        .args(["grep", "y", s(&f)])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
    assert_eq!(first, "y 0\n");
    child.wait_with_output().unwrap()
}

#[test]
fn a_reader_that_goes_away_ends_grep_by_sigpipe() {
    let out = reader_goes_away(&mut mmapkit());
    assert_eq!(out.status.signal(), Some(libc::SIGPIPE), "{out:?}"); // 141 in a shell
    assert_eq!(stderr(&out), "");
}

#[test]
fn with_sigpipe_ignored_a_closed_pipe_is_a_write_error() {
    // GNU grep's behaviour when its caller ignores SIGPIPE (Python's
    // subprocess with restore_signals=False, some daemons).
    let out = reader_goes_away(&mut with_signals_ignored(mmapkit(), &[libc::SIGPIPE]));
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(stderr(&out), "mmapkit: write error on standard output: Broken pipe\n");
}

/// `-m` on standard input redirected from a file leaves it just after the
/// last selected line (trailing context or not), as GNU grep does, so a
/// script's next reader resumes there; `-l` and a cap not reached read
/// to the end. Before, mmapkit left it wherever its reads had ended.
#[test]
fn max_count_leaves_a_redirected_stdin_after_the_last_selected_line() {
    let dir = tempdir();
    let f = file_in(dir.path(), "m.txt", "a1\nb\na2\nc\na3\n");
    let g = file_in(dir.path(), "nonl.txt", "a1\nb\na2\nc\na3");
    let resumed = |file: &std::path::Path, opts: &str| {
        let script = format!("({} grep {opts} >/dev/null; echo rest:; cat) < '{}'", bin(), s(file));
        ok(&output(Command::new("sh").args(["-c", &script]), None)).replace('\n', " ")
    };
    for file in [&f, &g] {
        assert_eq!(resumed(file, "-m1 a").trim_end(), "rest: b a2 c a3", "{file:?}");
        assert_eq!(resumed(file, "-m1 -A1 a").trim_end(), "rest: b a2 c a3");
        assert_eq!(resumed(file, "-c -m2 a").trim_end(), "rest: c a3");
        assert_eq!(resumed(file, "-m1 -v a").trim_end(), "rest: a2 c a3");
        assert_eq!(resumed(file, "-m3 a").trim_end(), "rest:");
        assert_eq!(resumed(file, "-m5 a").trim_end(), "rest:");
        assert_eq!(resumed(file, "-m1 -l a").trim_end(), "rest:");
    }
    // Two `-` operands: the second search starts where the first stopped.
    let script = format!("{} grep -m1 a - - < '{}'", bin(), s(&f));
    let out = ok(&output(Command::new("sh").args(["-c", &script]), None));
    assert_eq!(out, "(standard input):a1\n(standard input):a2\n");
}

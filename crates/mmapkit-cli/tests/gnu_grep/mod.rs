//! What the grep tests share to compare `mmapkit grep` with GNU grep.

use std::path::Path;
use std::process::{Command, Output, Stdio};

/// GNU grep is on the PATH (else the comparisons are skipped, saying so).
pub fn available() -> bool {
    let ok = Command::new("grep")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success() && o.stdout.starts_with(b"grep (GNU grep)"));
    if !ok {
        eprintln!("GNU grep not found: skipping the comparison");
    }
    ok
}

/// Output for a failure message, cut when long.
pub fn show(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if s.len() > 3000 {
        format!("{}... ({} bytes)", &s[..3000], s.len())
    } else {
        s.into_owned()
    }
}

/// Same stdout and exit status; `what` names the run.
#[track_caller]
#[allow(dead_code)]
pub fn assert_same(what: &str, got: &Output, want: &Output) {
    assert!(
        got.stdout == want.stdout,
        "mmapkit grep {what}\n--- mmapkit:\n{}\n--- grep:\n{}\n--- mmapkit stderr: {}",
        show(&got.stdout),
        show(&want.stdout),
        show(&got.stderr)
    );
    assert_eq!(
        got.status.code(),
        want.status.code(),
        "exit status of {what}: {}",
        show(&got.stderr)
    );
}

/// Deterministic pseudo-random numbers (the random tests' cases are the
/// same every run, replayed from the seed they print).
#[allow(dead_code)]
pub struct Lcg(pub u64);

#[allow(dead_code)]
impl Lcg {
    /// A number below `n` (> 0).
    pub fn next(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) % n as u64) as usize
    }
}

/// Runs `cmd` in `dir` with stdin empty, capturing its output.
#[allow(dead_code)] // not every grep test file uses each helper
pub fn run(cmd: &mut Command, dir: &Path) -> Output {
    run_with_stdin(cmd, dir, Stdio::null())
}

/// Runs `cmd` in `dir` with `stdin`, capturing its output; killed after
/// two minutes (its status then says so), so that a runaway run fails its
/// comparison instead of hanging the suite.
#[allow(dead_code)]
pub fn run_with_stdin(cmd: &mut Command, dir: &Path, stdin: Stdio) -> Output {
    let child = cmd
        .current_dir(dir)
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("cannot run the command");
    let pid = child.id().to_string();
    let (done, wait) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if wait.recv_timeout(std::time::Duration::from_secs(120)).is_err() {
            let _ = Command::new("kill").args(["-KILL", &pid]).status();
        }
    });
    let out = child.wait_with_output().expect("cannot wait for the command");
    let _ = done.send(());
    watchdog.join().unwrap();
    out
}

/// `mmapkit grep ARGS` run in `dir`.
#[allow(dead_code)]
pub fn mmapkit(args: &[&str], dir: &Path) -> Output {
    run(super::common::mmapkit().arg("grep").args(args), dir)
}

/// GNU grep (`LC_ALL=C`, `-E` unless `-F`, `-G` or `-P`) with ARGS, run
/// in `dir`.
#[allow(dead_code)]
pub fn gnu(args: &[&str], dir: &Path) -> Output {
    // The matchers conflict in GNU grep; without one, -E is our syntax's kin.
    let chosen = args.iter().any(|a| matches!(*a, "-F" | "-G" | "-P"));
    let syntax: &[&str] = if chosen { &[] } else { &["-E"] };
    run(gnu_command().args(syntax).args(args), dir)
}

/// GNU grep as compared: `LC_ALL=C`, GREP_COLORS at its default.
#[allow(dead_code)]
pub fn gnu_command() -> Command {
    let mut cmd = Command::new("grep");
    cmd.env("LC_ALL", "C").env_remove("GREP_COLORS");
    cmd
}

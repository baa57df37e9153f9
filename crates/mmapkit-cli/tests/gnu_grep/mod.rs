//! What the grep tests share to compare `mmapkit grep` with GNU grep.

use std::process::{Command, Output};

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

//! `crashfs-mount BACKING`: a crash file system over `BACKING` for a test
//! harness in another language (the Jepsen test's leader power loss).
//! Prints `mounted MOUNTPOINT`, then obeys one command per stdin line,
//! answering each on stdout:
//!
//! * `freeze`: the power goes off: every later request of a process
//!   using the mount hangs (kill it next); answers `frozen`.
//! * `crash SEED`: a power loss: what a seeded random subset of the
//!   pending writes leaves (`Mode::KeepRandom`, torn and reordered
//!   sectors) is written to `BACKING`; answers `crashed` and exits.
//! * `unmount`, or the end of stdin (the harness died): a clean unmount
//!   (everything written to `BACKING`); answers `unmounted` and exits.
#![forbid(unsafe_code)]

use std::io::{BufRead, Write};

use mmapkit_crashfs::{CrashFs, Mode};

fn say(line: &str) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn main() {
    let Some(backing) = std::env::args().nth(1) else {
        eprintln!("usage: crashfs-mount BACKING");
        std::process::exit(2);
    };
    if let Some(why) = mmapkit_crashfs::unavailable() {
        eprintln!("crashfs-mount: FUSE is unavailable: {why}");
        std::process::exit(2);
    }
    let mount = match CrashFs::mount(&backing) {
        Ok(m) => m,
        Err(e) => {
            eprintln!("crashfs-mount: {backing}: {e}");
            std::process::exit(2);
        }
    };
    say(&format!("mounted {}", mount.path().display()));
    let result = (|| -> std::io::Result<&'static str> {
        for line in std::io::stdin().lock().lines() {
            let line = line?;
            let mut words = line.split_whitespace();
            match (words.next(), words.next()) {
                (Some("freeze"), None) => {
                    mount.freeze();
                    say("frozen");
                }
                (Some("crash"), Some(seed)) => {
                    let seed = seed.parse().map_err(|_| {
                        std::io::Error::other(format!("crash: {seed:?} is not a seed"))
                    })?;
                    mount.crash(Mode::KeepRandom { seed })?;
                    return Ok("crashed");
                }
                (Some("unmount"), None) => break,
                _ => return Err(std::io::Error::other(format!("unknown command {line:?}"))),
            }
        }
        mount.unmount()?;
        Ok("unmounted")
    })();
    match result {
        Ok(done) => say(done),
        Err(e) => {
            eprintln!("crashfs-mount: {backing}: {e}");
            std::process::exit(1);
        }
    }
}

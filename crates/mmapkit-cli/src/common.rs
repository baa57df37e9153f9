//! Options and helpers shared by the whole-file commands.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use clap::Args;
use mmapkit::scan::{ScanOptions, Strategy};

/// Files over this size get a progress bar (on a terminal).
const PROGRESS_MIN: u64 = 1 << 30;

/// `--strategy`, `--threads`, `--json`: on every whole-file command.
#[derive(Args, Debug, Clone)]
pub struct ScanArgs {
    /// How to read the file: mmap, read (pread into a reusable buffer),
    /// stream (read front to back, one thread) or auto (read below 256 KiB,
    /// mmap above: measured crossover). Stdin, pipes, FIFOs and /proc or
    /// /sys files are always streamed.
    #[arg(long, default_value = "auto", value_parser = parse_strategy)]
    pub strategy: Strategy,
    /// Worker threads (default: all cores).
    #[arg(long, short = 'j', default_value_t = 0, hide_default_value = true)]
    pub threads: usize,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Window size in bytes (testing aid: tiny windows force boundary cases).
    #[arg(long, hide = true, default_value_t = 0)]
    pub chunk: usize,
}

fn parse_strategy(s: &str) -> Result<Strategy, String> {
    s.parse().map_err(|e: mmapkit::Error| e.to_string())
}

impl ScanArgs {
    pub fn options(&self) -> ScanOptions {
        ScanOptions { strategy: self.strategy, threads: self.threads, chunk: self.chunk, progress: None }
    }
}

/// A progress bar on stderr for big files on a terminal (nothing when
/// piped); reads the byte counter the core updates per window.
pub struct Progress {
    done: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Attaches a bar to `opts` when `path` is large and stderr a terminal.
    pub fn attach(opts: &mut ScanOptions, path: &Path, what: &str) -> Progress {
        let none = Progress::none();
        let total = match std::fs::metadata(path) {
            Ok(m) if m.len() >= PROGRESS_MIN && std::io::stderr().is_terminal() => m.len(),
            _ => return none,
        };
        let counter = Arc::new(AtomicU64::new(0));
        opts.progress = Some(counter.clone());
        Progress::bar(counter, total, format!("{what} {}", path.display()))
    }

    /// A bar on stderr following `counter` up to `total` bytes (the caller
    /// decides whether one is wanted).
    pub fn bar(counter: Arc<AtomicU64>, total: u64, label: String) -> Progress {
        let done = Arc::new(AtomicBool::new(false));
        let stop = done.clone();
        let thread = std::thread::spawn(move || {
            let bar = indicatif::ProgressBar::new(total);
            bar.set_style(
                indicatif::ProgressStyle::with_template("{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}")
                    .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
            );
            bar.set_message(label);
            while !stop.load(Ordering::Relaxed) {
                bar.set_position(counter.load(Ordering::Relaxed).min(total));
                std::thread::sleep(Duration::from_millis(100));
            }
            bar.finish_and_clear();
        });
        Progress { done, thread: Some(thread) }
    }

    /// No bar.
    pub fn none() -> Progress {
        Progress { done: Arc::new(AtomicBool::new(true)), thread: None }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.done.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Turns a pattern given on the command line into bytes: `\n`, `\t`,
/// `\r`, `\\`, `\0` and `\xHH` escapes are understood (a literal
/// newline is hard to type). Any other escape (`\q`, `\xZZ`, a trailing
/// `\`) is an error naming it, rather than a silent literal.
pub fn unescape(s: &str) -> anyhow::Result<Vec<u8>> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] != b'\\' {
            out.push(b[i]);
            i += 1;
            continue;
        }
        let (byte, used) = match b.get(i + 1) {
            Some(b'n') => (b'\n', 2),
            Some(b't') => (b'\t', 2),
            Some(b'r') => (b'\r', 2),
            Some(b'0') => (0, 2),
            Some(b'\\') => (b'\\', 2),
            Some(b'x') => {
                let hex = b.get(i + 2..i + 4).and_then(|h| std::str::from_utf8(h).ok());
                match hex.filter(|h| h.bytes().all(|c| c.is_ascii_hexdigit())) {
                    Some(h) => (u8::from_str_radix(h, 16)?, 4),
                    None => {
                        let shown: String = s[i..].chars().take(4).collect();
                        anyhow::bail!("invalid escape '{shown}' in '{s}': \\x needs two hex digits (\\x41)")
                    }
                }
            }
            None => anyhow::bail!("trailing backslash in '{s}' (write \\\\ for a backslash)"),
            Some(_) => {
                let shown: String = s[i..].chars().take(2).collect();
                anyhow::bail!("unknown escape '{shown}' in '{s}' (supported: \\n \\t \\r \\0 \\\\ \\xHH)")
            }
        };
        out.push(byte);
        i += used;
    }
    Ok(out)
}

/// Prints an error line the coreutils way, after flushing `out` and
/// stdout, so that it never overtakes earlier output in a shared pipe.
pub fn error_to_stderr(out: &mut dyn Write, msg: impl std::fmt::Display) {
    let _ = out.flush();
    let _ = std::io::stdout().flush();
    eprintln!("mmapkit: {msg}");
}

/// On SIGINT, SIGTERM or SIGHUP: remove this process's temporary files
/// (waiting for a commit or an in-place edit in progress to end) and exit
/// with 128 + the signal, like coreutils. A dedicated thread waits for the
/// signals (signal-hook's self-pipe), so the cleanup runs as ordinary code,
/// not in a signal handler. Signals ignored at start (`nohup`, background
/// jobs of scripts) stay ignored.
pub fn clean_up_on_signals() {
    use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
    let wanted: Vec<i32> = [SIGINT, SIGTERM, SIGHUP].into_iter().filter(|&s| !mmapkit::map::signal_ignored(s)).collect();
    let Ok(mut signals) = signal_hook::iterator::Signals::new(&wanted) else { return };
    std::thread::spawn(move || {
        let mut sigs = signals.forever();
        if let Some(sig) = sigs.next() {
            // A command that stops cleanly on its own (serve, follow) gets
            // the first signal; a second one exits as below.
            if let Some(stop) = STOP_ON_SIGNAL.get() {
                stop();
                if sigs.next().is_none() {
                    return;
                }
            }
            mmapkit::fs::remove_live_temp_files();
            std::process::exit(128 + sig);
        }
    });
}

static STOP_ON_SIGNAL: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>> = std::sync::OnceLock::new();

/// Makes the first SIGINT/SIGTERM/SIGHUP call `stop` instead of exiting
/// (for commands that run until stopped and then exit 0).
pub fn stop_on_signal(stop: impl Fn() + Send + Sync + 'static) {
    let _ = STOP_ON_SIGNAL.set(Box::new(stop));
}

/// Exit codes like coreutils/grep.
pub const EXIT_OK: u8 = 0;
pub const EXIT_NO_MATCH: u8 = 1;
pub const EXIT_ERROR: u8 = 2;

#[cfg(test)]
mod tests {
    #[test]
    fn unescapes() {
        assert_eq!(super::unescape(r"a\nb\t\\\x41\r\0").unwrap(), b"a\nb\t\\A\r\0");
        assert_eq!(super::unescape("plain é").unwrap(), "plain é".as_bytes());
    }

    #[test]
    fn unknown_escapes_are_errors() {
        for (bad, names) in [(r"a\q", r"'\q'"), (r"\xZZ", r"'\xZZ'"), (r"\x4", r"'\x4'"), ("end\\", "trailing backslash"), (r"\é", r"'\é'")] {
            let e = super::unescape(bad).unwrap_err().to_string();
            assert!(e.contains(names), "{bad:?}: {e}");
        }
    }
}

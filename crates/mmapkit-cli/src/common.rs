//! Options and helpers shared by the whole-file commands.

use std::io::IsTerminal;
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
    /// How to read the file: mmap, read (pread into a reusable buffer) or
    /// auto (read below 256 KiB, mmap above: measured crossover).
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
/// newline is hard to type).
pub fn unescape(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 1 < b.len() {
            let (byte, used) = match b[i + 1] {
                b'n' => (Some(b'\n'), 2),
                b't' => (Some(b'\t'), 2),
                b'r' => (Some(b'\r'), 2),
                b'0' => (Some(0), 2),
                b'\\' => (Some(b'\\'), 2),
                b'x' if i + 4 <= b.len() => {
                    (std::str::from_utf8(&b[i + 2..i + 4]).ok().and_then(|h| u8::from_str_radix(h, 16).ok()), 4)
                }
                _ => (None, 1),
            };
            if let Some(byte) = byte {
                out.push(byte);
                i += used;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    out
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
        if let Some(sig) = signals.forever().next() {
            mmapkit::fs::remove_live_temp_files();
            std::process::exit(128 + sig);
        }
    });
}

/// Exit codes like coreutils/grep.
pub const EXIT_OK: u8 = 0;
pub const EXIT_NO_MATCH: u8 = 1;
pub const EXIT_ERROR: u8 = 2;

#[cfg(test)]
mod tests {
    #[test]
    fn unescapes() {
        assert_eq!(super::unescape(r"a\nb\t\\\x41\q"), b"a\nb\t\\A\\q");
        assert_eq!(super::unescape(r"\x4"), b"\\x4");
    }
}

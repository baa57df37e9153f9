//! Options and helpers shared by the whole-file commands.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use clap::Args;
use mmapkit::exec::Threads;
use mmapkit::scan::{ScanOptions, Strategy};

/// Work on at least this many bytes gets a progress bar (on a terminal,
/// once it has lasted a poll interval), in every command.
pub const PROGRESS_MIN: u64 = 64 << 20;

/// How often the bar reads the core's counters.
const PROGRESS_POLL: Duration = Duration::from_millis(100);

/// `-j/--threads`: the same flag, with the same meaning, on every command
/// that works in parallel.
#[derive(Args, Debug, Clone, Copy)]
pub struct ThreadsArg {
    /// Worker threads: auto or 0 = one per core (the default), 1 =
    /// sequential, N = N workers.
    #[arg(long, short = 'j', value_name = "N", default_value = "auto", value_parser = parse_threads)]
    pub threads: Threads,
}

fn parse_threads(s: &str) -> Result<Threads, String> {
    s.parse().map_err(|e: mmapkit::Error| e.to_string())
}

/// `--strategy`, `--threads`, `--json`: on every whole-file command.
#[derive(Args, Debug, Clone)]
pub struct ScanArgs {
    /// How to read the file: mmap, read (pread into a reusable buffer),
    /// stream (read front to back, one thread) or auto (read below 256 KiB,
    /// mmap above: measured crossover). Stdin, pipes, FIFOs and /proc or
    /// /sys files are always streamed.
    #[arg(long, default_value = "auto")]
    pub strategy: Strategy,
    #[command(flatten)]
    pub exec: ThreadsArg,
    /// Print the result as JSON.
    #[arg(long)]
    pub json: bool,
    /// Window size in bytes (testing aid: tiny windows force boundary cases).
    #[arg(long, hide = true, default_value_t = 0)]
    pub chunk: usize,
}

impl ScanArgs {
    pub fn options(&self) -> ScanOptions {
        ScanOptions::default().strategy(self.strategy).threads(self.exec.threads).chunk(self.chunk)
    }
}

/// The one progress bar: on stderr, only when it is a terminal, only for
/// work of at least [`PROGRESS_MIN`] bytes; it follows the counters the
/// core updates (see `mmapkit::exec::Progress`).
pub struct Progress {
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Progress {
    /// Attaches a bar labelled `what path` to a scan's options (the core
    /// sets the total from the file it opened).
    pub fn attach(opts: &mut ScanOptions, path: &Path, what: &str) -> Progress {
        let (progress, bar) = Progress::start(format!("{what} {}", path.display()));
        opts.progress = progress;
        bar
    }

    /// A counter for the core to update, and the bar following it (or an
    /// unwatched counter and no bar when stderr is not a terminal).
    pub fn start(label: String) -> (mmapkit::exec::Progress, Progress) {
        Progress::start_on(std::io::stderr().is_terminal(), label)
    }

    fn start_on(terminal: bool, label: String) -> (mmapkit::exec::Progress, Progress) {
        if !terminal {
            return (
                mmapkit::exec::Progress::none(),
                Progress { stop: Arc::new(AtomicBool::new(true)), thread: None },
            );
        }
        let progress = mmapkit::exec::Progress::watched();
        let watched = progress.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut bar = None;
            loop {
                // Work that ends within one interval never shows a bar.
                std::thread::park_timeout(PROGRESS_POLL);
                if stopped.load(Ordering::Relaxed) {
                    break;
                }
                let total = watched.total();
                if bar.is_none() && total >= PROGRESS_MIN {
                    let b = indicatif::ProgressBar::new(total);
                    b.set_style(
                        indicatif::ProgressStyle::with_template(
                            "{msg} {wide_bar} {bytes}/{total_bytes} {bytes_per_sec} eta {eta}",
                        )
                        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
                    );
                    b.set_message(label.clone());
                    bar = Some(b);
                }
                if let Some(b) = &bar {
                    b.set_position(watched.done().min(total));
                }
            }
            if let Some(b) = bar {
                b.finish_and_clear();
            }
        });
        (progress, Progress { stop, thread: Some(thread) })
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            t.thread().unpark();
            let _ = t.join();
        }
    }
}

/// Per-file results the way count, replace and keep-lines report them: `N`
/// for one file, `PATH:N` for several, or one JSON array at the end; exit
/// status 2 if a file failed, else 0 if something was found, 1 if not.
pub struct PerFile {
    json: Option<Vec<serde_json::Value>>,
    many: bool,
    failed: bool,
    any: bool,
}

impl PerFile {
    pub fn new(json: bool, files: usize) -> PerFile {
        PerFile { json: json.then(Vec::new), many: files > 1, failed: false, any: false }
    }

    /// A file's result: `n` printed (unless JSON), `json` collected.
    pub fn ok(
        &mut self,
        out: &mut dyn Write,
        path: &Path,
        n: u64,
        json: serde_json::Value,
    ) -> std::io::Result<()> {
        self.any |= n > 0;
        match &mut self.json {
            Some(v) => v.push(json),
            None if self.many => writeln!(out, "{}:{n}", path.display())?,
            None => writeln!(out, "{n}")?,
        }
        Ok(())
    }

    /// A result that prints nothing but its JSON and counts as found (so
    /// the status is 0 unless a file failed).
    pub fn done(&mut self, json: serde_json::Value) {
        self.any = true;
        if let Some(v) = &mut self.json {
            v.push(json);
        }
    }

    /// A file that failed: its error on stderr, the others go on.
    pub fn err(&mut self, out: &mut dyn Write, e: impl std::fmt::Display) {
        error_to_stderr(out, e);
        self.failed = true;
    }

    /// Prints the JSON array (with --json); the exit status.
    pub fn finish(self, out: &mut dyn Write) -> anyhow::Result<u8> {
        if let Some(v) = &self.json {
            serde_json::to_writer(&mut *out, v)?;
            writeln!(out)?;
        }
        out.flush()?; // a lost line is an error, not a dropped BufWriter's silence
        Ok(if self.failed {
            EXIT_ERROR
        } else if self.any {
            EXIT_OK
        } else {
            EXIT_NO_MATCH
        })
    }
}

/// Turns a pattern given on the command line into bytes: `\n`, `\t`,
/// `\r`, `\\`, `\0` and `\xHH` escapes are understood (a literal
/// newline is hard to type). Any other escape (`\q`, `\xZZ`, a trailing
/// `\`) is an error naming it, rather than a silent literal.
pub fn unescape(arg: impl AsRef<std::ffi::OsStr>) -> anyhow::Result<Vec<u8>> {
    // Bytes: the argument need not be UTF-8.
    let b = arg.as_ref().as_encoded_bytes();
    let lossy = String::from_utf8_lossy(b);
    let s: &str = &lossy;
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
                        let shown = String::from_utf8_lossy(&b[i..(i + 4).min(b.len())]);
                        anyhow::bail!(
                            "invalid escape '{shown}' in '{s}': \\x needs two hex digits (\\x41)"
                        )
                    }
                }
            }
            None => anyhow::bail!("trailing backslash in '{s}' (write \\\\ for a backslash)"),
            Some(_) => {
                let shown = String::from_utf8_lossy(&b[i..(i + 2).min(b.len())]);
                anyhow::bail!(
                    "unknown escape '{shown}' in '{s}' (supported: \\n \\t \\r \\0 \\\\ \\xHH)"
                )
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
    let wanted: Vec<i32> = [SIGINT, SIGTERM, SIGHUP]
        .into_iter()
        .filter(|&s| !mmapkit::map::signal_ignored(s))
        .collect();
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

static STOP_ON_SIGNAL: std::sync::OnceLock<Box<dyn Fn() + Send + Sync>> =
    std::sync::OnceLock::new();

/// Makes the first SIGINT/SIGTERM/SIGHUP call `stop` instead of exiting
/// (for commands that run until stopped and then exit 0).
pub fn stop_on_signal(stop: impl Fn() + Send + Sync + 'static) {
    let _ = STOP_ON_SIGNAL.set(Box::new(stop));
}

/// Exit codes like coreutils/grep.
pub const EXIT_OK: u8 = 0;
pub const EXIT_NO_MATCH: u8 = 1;
pub const EXIT_ERROR: u8 = 2;

/// The exit status of a command over several inputs: an error wins, then
/// whether anything was found.
pub fn exit_status(failed: bool, found: bool) -> u8 {
    if failed {
        EXIT_ERROR
    } else if found {
        EXIT_OK
    } else {
        EXIT_NO_MATCH
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_bar_and_no_counting_off_a_terminal() {
        let (p, bar) = super::Progress::start_on(false, "x".into());
        assert!(!p.is_watched() && bar.thread.is_none());
        let (p, bar) = super::Progress::start_on(true, "x".into());
        assert!(p.is_watched() && bar.thread.is_some());
    }

    #[test]
    fn bad_names_get_the_cores_error() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cmd {
            #[command(flatten)]
            scan: super::ScanArgs,
        }
        let core = "bogus".parse::<mmapkit::scan::Strategy>().unwrap_err().to_string();
        let e = Cmd::try_parse_from(["t", "--strategy", "bogus"])
            .err()
            .expect("bogus refused")
            .to_string();
        assert!(e.contains(&core), "{e}");
        let ok = Cmd::try_parse_from(["t", "--strategy", "stream"]).map(|c| c.scan.strategy);
        assert_eq!(ok.ok(), Some(mmapkit::scan::Strategy::Stream));
    }

    #[test]
    fn unescapes() {
        assert_eq!(super::unescape(r"a\nb\t\\\x41\r\0").unwrap(), b"a\nb\t\\A\r\0");
        assert_eq!(super::unescape("plain é").unwrap(), "plain é".as_bytes());
    }

    #[test]
    fn unknown_escapes_are_errors() {
        for (bad, names) in [
            (r"a\q", r"'\q'"),
            (r"\xZZ", r"'\xZZ'"),
            (r"\x4", r"'\x4'"),
            ("end\\", "trailing backslash"),
            (r"\é", r"'\é'"),
        ] {
            let e = super::unescape(bad).unwrap_err().to_string();
            assert!(e.contains(names), "{bad:?}: {e}");
        }
    }
}

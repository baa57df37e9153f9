//! `mmapkit`: the command-line face of the mmapkit core. Thin by design:
//! parse the arguments, call the core, print.
#![forbid(unsafe_code)]

use std::io::{self, Write};
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use mmapkit::info::FileInfo;

mod common;
mod count;
mod grep;
mod kmers;
mod log;
mod replace;
mod replicate;
mod stdout;

/// The top-level help: commands grouped by capability, one example each
/// (clap lists subcommands flat, so the list is written here; a test
/// checks that it names every subcommand).
const HELP_TEMPLATE: &str = "\
{about}

{usage-heading} {usage}

Whole-file tools (parallel inside one file; mmap or read() by measurement):
  count       Count a byte string, or lines
                mmapkit count --lines big.csv            like wc -l, on every core
  find        Offset of the first, last or every occurrence
                mmapkit find --all 'ERROR' app.log
  grep        Lines matching a regex, like GNU grep
                mmapkit grep -n -C 2 'ERR[0-9]+' app.log
  replace     Replace a pattern: in place when lengths match, else atomically
                mmapkit replace -F ',' ';' big.csv
  keep-lines  Keep the first N lines, truncating in place (no rewrite)
                mmapkit keep-lines 1 big.csv
  head        head --in-place -n N FILE: the same as keep-lines
                mmapkit head --in-place -n 1 big.csv

Commit log (segmented, checksummed, crash-safe):
  log         init, append, read, stat, verify, truncate, purge, serve, follow
                mmapkit log append wal < cmds.txt

Parallel writers:
  kmers       Canonical k-mer frequency vectors of FASTA/FASTQ reads
                mmapkit kmers reads.fq.gz -o vectors.npy

Page cache:
  info        Size, allocated space and page-cache residency of files
                mmapkit info --json big.db
  evict       Drop files' pages from the page cache (cold-start benchmarks)
                mmapkit evict big.db && mmapkit info big.db

Options:
{options}

`mmapkit help COMMAND` (or `mmapkit COMMAND --help`) gives its options and
more examples. For each path that cannot be handled, a message naming it is
printed to stderr and the remaining paths are still processed; the exit
status is then 2.
";

const INFO_AFTER_HELP: &str = "\
Columns:
  SIZE        logical file size
  ALLOCATED   disk space actually used (smaller than SIZE for sparse files)
  RESIDENT    bytes of the file currently in the page cache
  RESIDENT%   RESIDENT as a share of the file's pages

Examples:
  mmapkit info data.bin logs/*.log
  mmapkit info --bytes data.bin
  mmapkit info --json data.bin | jq '.[0].resident'

Reading residency does not read the files or bring them into the cache.";

const EVICT_AFTER_HELP: &str = "\
Dirty pages are written back first, then the kernel is advised to drop the
file's pages. Pages that another process holds locked may stay resident.

Example:
  mmapkit evict data.bin && mmapkit info data.bin";

/// Memory-mapped I/O toolkit: whole-file tools on every core, and control
/// over how files sit in memory.
#[derive(Parser, Debug)]
#[command(name = "mmapkit", version, help_template = HELP_TEMPLATE)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Show size, allocated space and page-cache residency of files.
    #[command(after_help = INFO_AFTER_HELP)]
    Info {
        /// Files to inspect.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
        /// Print exact byte counts instead of human-readable sizes.
        #[arg(long)]
        bytes: bool,
        /// Print a JSON array of objects (path, size, allocated, resident,
        /// pages, resident_pages; all sizes in bytes).
        #[arg(long)]
        json: bool,
    },
    /// Drop files' pages from the page cache; prints nothing on success.
    #[command(after_help = EVICT_AFTER_HELP)]
    Evict {
        /// Files to evict.
        #[arg(required = true, value_name = "PATH")]
        paths: Vec<PathBuf>,
    },
    /// Count occurrences of a byte string, or lines (--lines), in parallel.
    #[command(after_help = count::COUNT_HELP)]
    Count(count::CountArgs),
    /// Print the offset of the first, last (--last) or every (--all) occurrence.
    #[command(after_help = count::FIND_HELP)]
    Find(count::FindArgs),
    /// Print or count lines matching a regex, like GNU grep, in parallel.
    #[command(after_help = grep::GREP_HELP)]
    Grep(Box<grep::GrepArgs>),
    /// Replace a pattern in files: in place when lengths match, else atomically.
    #[command(after_help = replace::REPLACE_HELP)]
    Replace(replace::ReplaceArgs),
    /// Keep the first N lines of a file, truncating it in place (no rewrite).
    #[command(name = "keep-lines", after_help = replace::KEEP_HELP)]
    KeepLines(replace::KeepArgs),
    /// A crash-safe write-ahead log: init, append, read, stat, verify, truncate, purge, serve, follow.
    #[command(after_help = log::LOG_HELP)]
    Log(log::LogArgs),
    /// `head --in-place -n N FILE`: the same as keep-lines.
    #[command(after_help = replace::KEEP_HELP)]
    Head(replace::HeadArgs),
    /// Canonical k-mer frequency vectors of FASTA/FASTQ reads (csv, tsv, npy).
    #[command(after_help = kmers::KMERS_HELP)]
    Kmers(kmers::KmersArgs),
}

/// Exit status when at least one path failed (like `ls`/`du` on trouble).
const EXIT_PATH_FAILED: u8 = 2;

fn main() -> ExitCode {
    let cli = Cli::parse_from(grep::gnu_args(std::env::args_os()));
    mmapkit::log_warnings_to_stderr();
    common::clean_up_on_signals();
    let result = match cli.command {
        Command::Info { paths, bytes, json } => info(&paths, bytes, json),
        Command::Evict { paths } => {
            let mut failed = false;
            for p in &paths {
                report(mmapkit::info::evict(p), &mut failed);
            }
            Ok(if failed { EXIT_PATH_FAILED } else { 0 })
        }
        Command::Count(a) => count::count(a),
        Command::Find(a) => count::find(a),
        Command::Grep(a) => grep::grep(*a),
        Command::Replace(a) => replace::replace(a),
        Command::KeepLines(a) => replace::keep_lines(a),
        Command::Head(a) => replace::head(a),
        Command::Kmers(a) => kmers::kmers(a),
        Command::Log(a) => log::run(a),
    };
    match result {
        Ok(code) => ExitCode::from(code),
        Err(e) => match stdout::WriteError::find(&e) {
            // `mmapkit ... | head -1`: ends as GNU's tools do, by SIGPIPE.
            // (Where the caller ignored SIGPIPE, GNU's say "write error".)
            Some(w) if w.is_broken_pipe() && !mmapkit::map::sigpipe_ignored_at_start() => {
                stdout::die_of_sigpipe()
            }
            Some(w) => {
                common::error_to_stderr(&mut io::sink(), w);
                ExitCode::from(common::EXIT_ERROR)
            }
            None => {
                common::error_to_stderr(&mut io::sink(), error_line(&e));
                ExitCode::from(common::EXIT_ERROR)
            }
        },
    }
}

/// The error and its causes on one line, like `{:#}`, but ending at a core
/// error: its message already names the file and includes the OS text, so
/// its `io::Error` source would otherwise be printed twice.
fn error_line(e: &anyhow::Error) -> String {
    let mut line = String::new();
    for (i, cause) in e.chain().enumerate() {
        if i > 0 {
            line.push_str(": ");
        }
        match cause.downcast_ref::<io::Error>() {
            Some(io) if i > 0 => line.push_str(&mmapkit::os_message(io)),
            _ => line.push_str(&cause.to_string()),
        }
        // A core error's text is complete (it names the file and the OS
        // error); replication wraps it transparently, so its chain would
        // repeat the OS error.
        let complete = cause.is::<mmapkit::Error>()
            || matches!(cause.downcast_ref(), Some(mmapkit_replicate::ReplicateError::Log(_)));
        if complete {
            break;
        }
    }
    line
}

fn info(paths: &[PathBuf], bytes: bool, json: bool) -> anyhow::Result<u8> {
    let mut failed = false;
    let infos: Vec<FileInfo> =
        paths.iter().filter_map(|p| report(mmapkit::info::file_info(p), &mut failed)).collect();
    if json {
        print_json(&infos)?;
    } else {
        print_table(&infos, bytes)?;
    }
    Ok(if failed { EXIT_PATH_FAILED } else { 0 })
}

/// Prints a per-path error the coreutils way; core errors already name
/// their path.
fn report<T>(result: mmapkit::Result<T>, failed: &mut bool) -> Option<T> {
    match result {
        Ok(v) => Some(v),
        Err(e) => {
            common::error_to_stderr(&mut io::stdout(), e);
            *failed = true;
            None
        }
    }
}

#[derive(serde::Serialize)]
struct JsonInfo<'a> {
    path: std::borrow::Cow<'a, str>,
    size: u64,
    allocated: u64,
    resident: u64,
    pages: u64,
    resident_pages: u64,
}

fn print_json(infos: &[FileInfo]) -> anyhow::Result<()> {
    let rows: Vec<JsonInfo<'_>> = infos
        .iter()
        .map(|i| JsonInfo {
            path: i.path.to_string_lossy(),
            size: i.size,
            allocated: i.allocated,
            resident: i.resident,
            pages: i.pages,
            resident_pages: i.resident_pages,
        })
        .collect();
    let mut out = io::BufWriter::new(stdout::stdout());
    serde_json::to_writer_pretty(&mut out, &rows).map_err(io::Error::from)?;
    writeln!(out)?;
    out.flush()?;
    Ok(())
}

fn print_table(infos: &[FileInfo], exact: bool) -> anyhow::Result<()> {
    if infos.is_empty() {
        return Ok(());
    }
    let size = |n: u64| if exact { n.to_string() } else { human_size(n) };
    let header = ["PATH", "SIZE", "ALLOCATED", "RESIDENT", "RESIDENT%"].map(String::from);
    let rows: Vec<[String; 5]> = infos
        .iter()
        .map(|i| {
            [
                i.path.display().to_string(),
                size(i.size),
                size(i.allocated),
                size(i.resident),
                percent(i),
            ]
        })
        .collect();

    let mut widths = [0usize; 5];
    for row in std::iter::once(&header).chain(&rows) {
        for (w, cell) in widths.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let mut out = io::BufWriter::new(stdout::stdout());
    for row in std::iter::once(&header).chain(&rows) {
        let mut line = String::new();
        for (col, (cell, w)) in row.iter().zip(widths).enumerate() {
            if col == 0 {
                // Path column left-aligned; numbers right-aligned.
                line.push_str(cell);
                line.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
            } else {
                line.push_str("  ");
                line.extend(std::iter::repeat_n(' ', w - cell.chars().count()));
                line.push_str(cell);
            }
        }
        writeln!(out, "{line}")?;
    }
    out.flush()?;
    Ok(())
}

fn percent(info: &FileInfo) -> String {
    if info.pages == 0 {
        "-".to_owned()
    } else {
        format!("{:.1}%", info.resident_fraction() * 100.0)
    }
}

/// `1536` -> `1.5 KiB`; plain bytes below 1 KiB.
fn human_size(n: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    // Move up a unit when the value would print as 1024.0 or more.
    while value >= 1023.95 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// The hand-written grouped list names every subcommand, and only those.
    #[test]
    fn top_level_help_lists_every_command_once() {
        let listed: Vec<&str> = HELP_TEMPLATE
            .lines()
            .filter_map(|l| l.strip_prefix("  ").filter(|r| !r.starts_with(' ')))
            .filter_map(|l| l.split_whitespace().next())
            .collect();
        let mut want: Vec<String> =
            Cli::command().get_subcommands().map(|c| c.get_name().to_owned()).collect();
        want.sort();
        let mut got: Vec<String> = listed.iter().map(|s| s.to_string()).collect();
        got.sort();
        assert_eq!(got, want);
    }

    #[test]
    fn cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn human_sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(1023), "1023 B");
        assert_eq!(human_size(1024), "1.0 KiB");
        assert_eq!(human_size(1536), "1.5 KiB");
        assert_eq!(human_size(10 << 20), "10.0 MiB");
        assert_eq!(human_size(3 << 29), "1.5 GiB");
        assert_eq!(human_size((1 << 20) - 1), "1.0 MiB");
        assert_eq!(human_size(u64::MAX), "16.0 EiB");
    }

    #[test]
    fn percent_of_empty_and_partial_files() {
        let mut info = FileInfo {
            path: "x".into(),
            size: 0,
            allocated: 0,
            resident: 0,
            pages: 0,
            resident_pages: 0,
        };
        assert_eq!(percent(&info), "-");
        info.pages = 4;
        info.resident_pages = 1;
        assert_eq!(percent(&info), "25.0%");
    }
}

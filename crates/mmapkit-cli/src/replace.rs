//! `mmapkit replace`, `mmapkit keep-lines` and `mmapkit head --in-place`.

use std::ffi::OsString;
use std::path::PathBuf;

use clap::Args;
use mmapkit::scan::{self, ReplaceOptions};

use crate::common::{error_to_stderr, unescape, PerFile, Progress, ScanArgs, EXIT_ERROR};

pub const REPLACE_HELP: &str = "\
PATTERN is a regex (Rust regex syntax, like grep -E) matched line by line as
in LC_ALL=C sed 's/PATTERN/REPLACEMENT/g', under grep's byte rule ('.' is one
byte, \\w, \\b and classes are ASCII; (?u) turns Unicode on; see grep
--help): a match never spans lines, ^ and $ match
at line start and end, and REPLACEMENT may use $1, ${name} and $$. With -F
PATTERN is a literal byte string. Escapes \\n \\t \\r \\0 \\\\ \\xHH are understood
in REPLACEMENT, and in PATTERN with -F (regexes have their own). Matches are
leftmost and non-overlapping.

A literal pattern (-F, or a regex without metacharacters when REPLACEMENT
has no $; the result is the same) replaced by one of the same length is
edited IN PLACE: only the pages holding a match are written, the file keeps
its inode and hard links, and an interrupted run leaves some matches
replaced (use --backup if that matters). Otherwise the new content is
written to a temporary file beside FILE, which then replaces it atomically
(a crash leaves the old or the new file, never a mix; like sed -i, the file
gets a new inode, with the same permission bits). A file without a match is
never written. With --strategy auto, in-place edits use read (pread/pwrite,
measured faster than writing through a mapping at every size).

A read-only FILE (mode 0444) is rewritten like sed -i does it: the new file
is created in FILE's directory and renamed over it, so the directory's
permission decides, and FILE keeps its mode (it stays read-only). Such a
file is never edited in place. If the directory is not writable either,
FILE is left alone with \"FILE: open: Permission denied\" (exit status 2).

Prints the number of replacements (\"path:N\" for several files). Exit
status: 0 if something was replaced, 1 if nothing matched, 2 on error (the
other files are still processed).

Examples:
  mmapkit replace -F , ';' big.csv              in place, on every core
  mmapkit replace -F , ', ' big.csv             atomic rewrite
  mmapkit replace --dry-run 'ERR(\\d+)' 'E$1' app.log
  mmapkit replace -F '\\r\\n' '\\n' --backup .orig notes.txt
  mmapkit replace --json '^(\\w+),(\\w+)' '$2,$1' a.csv b.csv";

pub const KEEP_HELP: &str = "\
Truncates each FILE right after its N-th newline: nothing is rewritten, so
this is instant even for huge files. A FILE with N lines or fewer is left
alone; N = 0 empties it. Prints nothing unless --json.

Examples:
  mmapkit keep-lines 1 big.csv                  keep only the header
  mmapkit head --in-place -n 1000 big.log       the same, spelled like head
  mmapkit keep-lines --json 10 a.txt b.txt";

/// Arguments of `mmapkit replace`.
#[derive(Args, Debug)]
pub struct ReplaceArgs {
    /// PATTERN is a literal string (with escapes), not a regex.
    #[arg(long, short = 'F')]
    fixed_strings: bool,
    /// Count the replacements, change nothing.
    #[arg(long)]
    dry_run: bool,
    /// Keep the original as FILE + SUFFIX (e.g. --backup .bak).
    #[arg(long, value_name = "SUFFIX")]
    backup: Option<String>,
    /// Wait until in-place changes are on disk before exiting (rewrites
    /// always are).
    #[arg(long)]
    sync: bool,
    /// What to look for (a regex unless -F; bytes, need not be UTF-8).
    #[arg(value_name = "PATTERN")]
    pattern: OsString,
    /// What to put instead.
    #[arg(value_name = "REPLACEMENT")]
    replacement: OsString,
    /// Files to edit.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    scan: ScanArgs,
}

pub fn replace(a: ReplaceArgs) -> anyhow::Result<u8> {
    let replacement = unescape(&a.replacement)?;
    let pattern =
        if a.fixed_strings { unescape(&a.pattern)? } else { a.pattern.as_encoded_bytes().to_vec() };
    let ropts = ReplaceOptions::for_pattern(&pattern, &replacement, a.fixed_strings)
        .dry_run(a.dry_run)
        .backup(a.backup.clone())
        .sync(a.sync);
    let mut out = std::io::BufWriter::new(crate::stdout::stdout());
    let mut report = PerFile::new(a.scan.json, a.files.len());
    for path in &a.files {
        let mut opts = a.scan.options();
        let _bar = Progress::attach(&mut opts, path, "replace");
        match scan::replace(path, &pattern, &replacement, &ropts, &opts) {
            Ok(r) => {
                let json = serde_json::json!({
                    "path": path.to_string_lossy(),
                    "replacements": r.replacements,
                    "in_place": r.in_place,
                    "bytes_written": r.bytes_written,
                });
                report.ok(&mut out, path, r.replacements, json)?;
            }
            Err(e) if e.path().is_none() => {
                // Not about a file (a bad pattern or suffix): the same for
                // every file, so say it once.
                error_to_stderr(&mut out, format_args!("replace: {e}"));
                return Ok(EXIT_ERROR);
            }
            Err(e) => report.err(&mut out, e),
        }
    }
    report.finish(&mut out)
}

/// Arguments of `mmapkit keep-lines`.
#[derive(Args, Debug)]
pub struct KeepArgs {
    /// Lines to keep.
    #[arg(value_name = "N")]
    n: u64,
    /// Files to truncate.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    scan: ScanArgs,
}

/// Arguments of `mmapkit head` (only `--in-place` is supported).
#[derive(Args, Debug)]
pub struct HeadArgs {
    /// Truncate each FILE after its first N lines (required: printing is
    /// head(1)'s job).
    #[arg(long)]
    in_place: bool,
    /// Lines to keep.
    #[arg(long = "lines", short = 'n', value_name = "N", required = true)]
    lines: u64,
    /// Files to truncate.
    #[arg(required = true, value_name = "FILE")]
    files: Vec<PathBuf>,
    #[command(flatten)]
    scan: ScanArgs,
}

pub fn keep_lines(a: KeepArgs) -> anyhow::Result<u8> {
    keep(a.n, &a.files, &a.scan)
}

pub fn head(a: HeadArgs) -> anyhow::Result<u8> {
    if !a.in_place {
        anyhow::bail!(
            "head: only --in-place is supported (it truncates each FILE after N lines, like keep-lines); \
             to print the first lines, use head(1)"
        );
    }
    keep(a.lines, &a.files, &a.scan)
}

fn keep(n: u64, files: &[PathBuf], scan_args: &ScanArgs) -> anyhow::Result<u8> {
    let mut report = PerFile::new(scan_args.json, files.len());
    for path in files {
        let mut opts = scan_args.options();
        let _bar = Progress::attach(&mut opts, path, "keep-lines");
        match scan::keep_lines(path, n, &opts) {
            Ok(r) => report.done(serde_json::json!({
                "path": path,
                "old_len": r.old_len,
                "new_len": r.new_len,
                "truncated": r.truncated,
            })),
            Err(e) => report.err(&mut std::io::stdout(), e),
        }
    }
    report.finish(&mut std::io::BufWriter::new(crate::stdout::stdout()))
}

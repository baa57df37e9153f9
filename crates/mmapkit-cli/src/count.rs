//! `mmapkit count` and `mmapkit find`.

use std::ffi::OsString;
use std::io::Write;
use std::path::PathBuf;

use clap::Args;

use crate::common::{
    error_to_stderr, unescape, PerFile, Progress, ScanArgs, EXIT_ERROR, EXIT_NO_MATCH, EXIT_OK,
};

pub const COUNT_HELP: &str = "\
Counts are of leftmost, non-overlapping occurrences (in 'aaaa', 'aa' occurs
twice), the same whatever the strategy or number of threads. Escapes \\n \\t
\\r \\0 \\\\ \\xHH are understood in PATTERN. Exit status: 0 if something was
counted, 1 if the count is 0 everywhere, 2 on error.

FILE - (or /dev/stdin) reads standard input; it, pipes, FIFOs and files
whose size reads as 0 (/proc, /sys) are read as streams (sequentially, in
bounded memory), with the same results.

Examples:
  mmapkit count --lines big.csv              like wc -l, on every core
  zcat log.gz | mmapkit count --lines -
  mmapkit count ',' big.csv                  commas
  mmapkit count --json 'ERROR' a.log b.log";

/// Arguments of `mmapkit count`.
#[derive(Args, Debug)]
pub struct CountArgs {
    /// Count lines (newline bytes), like `wc -l`.
    #[arg(long, short = 'l')]
    lines: bool,
    /// PATTERN (the byte string to count; omitted with --lines), then the files.
    #[arg(required = true, value_name = "[PATTERN] FILE")]
    args: Vec<OsString>,
    #[command(flatten)]
    scan: ScanArgs,
}

pub fn count(a: CountArgs) -> anyhow::Result<u8> {
    let (needle, files) = if a.lines {
        (b"\n".to_vec(), &a.args[..])
    } else if a.args.len() >= 2 {
        (unescape(&a.args[0])?, &a.args[1..])
    } else {
        anyhow::bail!("count needs a PATTERN and at least one FILE (or --lines FILE...)");
    };
    let files: Vec<PathBuf> = files.iter().map(PathBuf::from).collect();
    let mut out = std::io::BufWriter::new(crate::stdout::stdout());
    let mut report = PerFile::new(a.scan.json, files.len());
    for path in &files {
        let mut opts = a.scan.options();
        let _bar = Progress::attach(&mut opts, path, "count");
        // `-`, pipes, FIFOs and /proc files are streamed by the core.
        match mmapkit::scan::count(path, &needle, &opts) {
            Ok(n) => report.ok(
                &mut out,
                path,
                n,
                serde_json::json!({"path": path.to_string_lossy(), "count": n}),
            )?,
            Err(e) => report.err(&mut out, e),
        }
    }
    report.finish(&mut out)
}

pub const FIND_HELP: &str = "\
Prints byte offsets (0-based). A match near the start returns at once, even
in a huge file. Exit status: 0 if found, 1 if not, 2 on error.

Examples:
  mmapkit find 'needle' big.bin              first offset
  mmapkit find --last '\\n' big.log           offset of the last newline
  mmapkit find --all --max 10 ',' data.csv   the first ten commas
  mmapkit find --all --json 'x' f.bin";

/// Arguments of `mmapkit find`.
#[derive(Args, Debug)]
pub struct FindArgs {
    /// The byte string to look for.
    #[arg(value_name = "PATTERN")]
    pattern: OsString,
    /// The file to search.
    #[arg(value_name = "FILE")]
    file: PathBuf,
    /// The last occurrence instead of the first.
    #[arg(long, conflicts_with = "all")]
    last: bool,
    /// Every (non-overlapping) occurrence.
    #[arg(long)]
    all: bool,
    /// With --all: stop after N offsets.
    #[arg(long, short = 'm', value_name = "N")]
    max: Option<usize>,
    #[command(flatten)]
    scan: ScanArgs,
}

pub fn find(a: FindArgs) -> anyhow::Result<u8> {
    let needle = unescape(&a.pattern)?;
    let mut opts = a.scan.options();
    let _bar = Progress::attach(&mut opts, &a.file, "find");
    let found: mmapkit::Result<Vec<u64>> = if a.all || a.max.is_some() {
        mmapkit::scan::find_all(&a.file, &needle, a.max, &opts)
    } else if a.last {
        mmapkit::scan::rfind(&a.file, &needle, &opts).map(|o| o.into_iter().collect())
    } else {
        mmapkit::scan::find(&a.file, &needle, &opts).map(|o| o.into_iter().collect())
    };
    let offsets = match found {
        Ok(v) => v,
        Err(e) => {
            error_to_stderr(&mut std::io::stdout(), e);
            return Ok(EXIT_ERROR);
        }
    };
    let mut out = std::io::BufWriter::new(crate::stdout::stdout());
    if a.scan.json {
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({"path": a.file.to_string_lossy(), "offsets": offsets}),
        )?;
        writeln!(out)?;
    } else {
        for o in &offsets {
            writeln!(out, "{o}")?;
        }
    }
    out.flush()?;
    Ok(if offsets.is_empty() { EXIT_NO_MATCH } else { EXIT_OK })
}

//! `mmapkit grep`: GNU grep's output for the options both have, searched
//! in parallel inside each file.

use std::borrow::Cow;
use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use clap::{ArgAction, Args};
use mmapkit::scan::{Grep, GrepLine, GrepOptions, ScanOptions};

use crate::common::{error_to_stderr, Progress, ScanArgs, EXIT_ERROR, EXIT_NO_MATCH, EXIT_OK};

pub const GREP_HELP: &str = "\
Output is GNU grep's, byte for byte, for these options: 'path:' when
several files are searched (or -H), then 'N:' with -n, 'offset:' with -b
(of the line, or of the match with -o), then the line; -c prints one count
per file. Files are searched in parallel inside, in line-aligned ranges;
output stays in file order.

Patterns use the Rust regex crate's syntax, close to grep -E and ripgrep
(Unicode-aware; (?-u) for plain bytes): -E is implied. A match never spans
lines; -o prints leftmost-first matches (for 'a|ab', 'a' where GNU grep
prints 'ab'). Files are treated as text, like grep -a: there is no
binary-file detection. FILE '-' (or no FILE) reads standard input as a
stream.

With --json, each selected line (each match with -o) is a JSON object on
its own line: {\"path\", \"line\", \"offset\", \"text\"} (text as lossy UTF-8);
with -c, one {\"path\", \"count\"} per file.

Exit status: 0 if a line was selected, 1 if none, 2 on any error (an
invalid regex, or a file that cannot be read; other files are still
searched).

Examples:
  mmapkit grep -c 'ERR[0-9]+' app.log        count matching lines, all cores
  mmapkit grep -n -i 'timeout' a.log b.log   a.log:12:... b.log:7:...
  mmapkit grep -o -b '[0-9]{4}-[0-9]{2}' f   each match with its byte offset
  mmapkit grep -v -c '^#' config.txt         lines that are not comments
  mmapkit grep -F -m 10 'a.b[1]' data.txt    a literal, first 10 lines
  zcat big.gz | mmapkit grep 'needle' -      a stream, sequentially
  mmapkit grep --json -e foo -e bar f | jq .line";

/// Arguments of `mmapkit grep`.
#[derive(Args, Debug)]
#[command(disable_help_flag = true)]
pub struct GrepArgs {
    /// Print only the number of selected lines per file.
    #[arg(short = 'c', long)]
    count: bool,
    /// Prefix each line with its 1-based line number.
    #[arg(short = 'n', long = "line-number")]
    line_number: bool,
    /// Prefix each line with its byte offset (of the match with -o).
    #[arg(short = 'b', long = "byte-offset")]
    byte_offset: bool,
    /// Print only the (non-empty) matches, one per line.
    #[arg(short = 'o', long = "only-matching")]
    only_matching: bool,
    /// Ignore case.
    #[arg(short = 'i', long = "ignore-case")]
    ignore_case: bool,
    /// Select the lines that do not match.
    #[arg(short = 'v', long = "invert-match")]
    invert: bool,
    /// Patterns are literal strings, not regexes.
    #[arg(short = 'F', long = "fixed-strings")]
    fixed: bool,
    /// Accepted for compatibility: patterns are always extended regexes.
    #[arg(short = 'E', long = "extended-regexp")]
    extended: bool,
    /// Accepted for compatibility: files are always treated as text.
    #[arg(short = 'a', long = "text")]
    text: bool,
    /// Prefix each line with the file name (default with several files).
    #[arg(short = 'H', long = "with-filename", overrides_with = "no_filename")]
    with_filename: bool,
    /// Never prefix lines with the file name.
    #[arg(short = 'h', long = "no-filename", overrides_with = "with_filename")]
    no_filename: bool,
    /// Stop after N selected lines per file.
    #[arg(short = 'm', long = "max-count", value_name = "N")]
    max_count: Option<u64>,
    /// A pattern (repeatable: lines matching any are selected).
    #[arg(short = 'e', long = "regexp", value_name = "PATTERN", allow_hyphen_values = true)]
    patterns: Vec<String>,
    /// PATTERN (unless given with -e), then the files ('-' or none: stdin).
    #[arg(value_name = "[PATTERN] FILE")]
    args: Vec<OsString>,
    #[command(flatten)]
    scan: ScanArgs,
    /// Print help (-h means --no-filename, as in grep).
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,
}

pub fn grep(a: GrepArgs) -> anyhow::Result<u8> {
    let mut args = a.args.into_iter();
    let patterns = if a.patterns.is_empty() {
        match args.next() {
            Some(p) => vec![p.into_string().map_err(|_| anyhow::anyhow!("the pattern is not valid UTF-8"))?],
            None => anyhow::bail!("grep needs a PATTERN (or -e PATTERN)"),
        }
    } else {
        a.patterns
    };
    let mut files: Vec<OsString> = args.collect();
    if files.is_empty() {
        files.push("-".into());
    }
    let opts = GrepOptions {
        patterns,
        fixed: a.fixed,
        ignore_case: a.ignore_case,
        invert: a.invert,
        line_numbers: a.line_number,
        byte_offset: a.byte_offset,
        only_matching: a.only_matching,
        count: a.count,
        with_filename: Some(if a.no_filename {
            false
        } else {
            a.with_filename || files.len() > 1
        }),
        max_count: a.max_count,
    };
    let grep = match Grep::new(&opts) {
        Ok(g) => g,
        Err(e) => {
            error_to_stderr(&mut io::stdout(), e);
            return Ok(EXIT_ERROR);
        }
    };
    if opts.max_count == Some(0) {
        return Ok(EXIT_NO_MATCH); // like grep: stop before reading anything
    }
    let mut out = Output { inner: BufWriter::with_capacity(256 << 10, io::stdout().lock()), error: None };
    let (mut failed, mut any) = (false, false);
    for file in &files {
        let mut scan = a.scan.options();
        let stdin = file == "-";
        let _bar = (!stdin).then(|| Progress::attach(&mut scan, Path::new(file), "grep"));
        match search(&grep, file, stdin, &scan, a.scan.json, &mut out) {
            Ok(n) => any |= n > 0,
            Err(e) => {
                if let Some(err) = out.error.take() {
                    return Err(err.into()); // stdout is gone (a closed pipe ends quietly)
                }
                // Earlier files' lines first: the error must not overtake them.
                error_to_stderr(&mut out.inner, e);
                failed = true;
            }
        }
    }
    out.inner.flush()?;
    Ok(if failed {
        EXIT_ERROR
    } else if any {
        EXIT_OK
    } else {
        EXIT_NO_MATCH
    })
}

/// Searches one file (or stdin) and prints its results; returns the
/// number of selected lines.
fn search(grep: &Grep, file: &OsString, stdin: bool, scan: &ScanOptions, json: bool, out: &mut Output<impl Write>) -> mmapkit::Result<u64> {
    let opts = grep.options();
    let path = Path::new(file);
    // The name grep prints for stdin; JSON keeps the argument.
    let name = if stdin { Path::new("(standard input)") } else { path };
    let write_err = |e: io::Error| mmapkit::Error::Io { path: "<stdout>".into(), op: "write", source: e };
    if opts.count {
        let n = if stdin { grep.count_reader(&mut io::stdin().lock(), name, scan)? } else { grep.count(path, scan)? };
        if json {
            serde_json::to_writer(&mut *out, &JsonCount { path: path.to_string_lossy(), count: n })
                .map_err(|e| write_err(e.into()))?;
            out.write_all(b"\n").map_err(write_err)?;
        } else {
            if opts.with_filename == Some(true) {
                out.write_all(name.as_os_str().as_bytes()).map_err(write_err)?;
                out.write_all(b":").map_err(write_err)?;
            }
            writeln!(out, "{n}").map_err(write_err)?;
        }
        return Ok(n);
    }
    if json {
        let label = path.to_string_lossy();
        let mut each = |l: GrepLine<'_>| -> mmapkit::Result<ControlFlow<()>> {
            let v = JsonLine { path: &label, line: l.line, offset: l.offset, text: String::from_utf8_lossy(l.text) };
            serde_json::to_writer(&mut *out, &v).map_err(|e| write_err(e.into()))?;
            out.write_all(b"\n").map_err(write_err)?;
            Ok(ControlFlow::Continue(()))
        };
        return if stdin { grep.for_each_reader(&mut io::stdin().lock(), name, scan, &mut each) } else { grep.for_each(path, scan, &mut each) };
    }
    if stdin {
        grep.write_reader(&mut io::stdin().lock(), name, scan, out)
    } else {
        grep.write(path, scan, out)
    }
}

#[derive(serde::Serialize)]
struct JsonLine<'a> {
    path: &'a str,
    line: u64,
    offset: u64,
    text: Cow<'a, str>,
}

#[derive(serde::Serialize)]
struct JsonCount<'a> {
    path: Cow<'a, str>,
    count: u64,
}

/// Stdout, remembering the first write error so that a failed write is
/// told apart from a failed input file (and a closed pipe ends quietly).
struct Output<W: Write> {
    inner: W,
    error: Option<io::Error>,
}

impl<W: Write> Output<W> {
    fn fail(&mut self, e: io::Error) -> io::Error {
        let copy = io::Error::new(e.kind(), e.to_string());
        self.error.get_or_insert(e);
        copy
    }
}

impl<W: Write> Write for Output<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf).map_err(|e| self.fail(e))
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.fail(e))
    }
}

//! `mmapkit grep`: parse, pick a printer, search each file; the search and
//! the printers are the core's (`mmapkit::scan::grep`).

use std::ffi::OsString;
use std::io::{self, BufWriter, IsTerminal, Write};
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStringExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use clap::{ArgAction, Args, ValueEnum};
use mmapkit::scan::{
    walk, Devices, GnuPrinter, Grep, GrepOptions, JsonPrinter, NameFilter, PrintOptions, Report,
    Sink, Visit, WalkOptions,
};

use crate::common::{
    error_to_stderr, exit_status, Progress, ScanArgs, EXIT_ERROR, EXIT_NO_MATCH, EXIT_OK,
};

pub const GREP_HELP: &str = "\
Output is GNU grep's (LC_ALL=C), byte for byte, for these options:
'path:' when several files are searched (or -H, or files found by -r),
then 'N:' with -n, 'offset:' with -b (of the line, or of the match with
-o), then the line; context lines (-A/-B/-C) use '-' for ':' and groups
are separated by '--'; -c prints one count per file, -l/-L file names.
--color uses GNU grep's default GREP_COLORS. Files are searched in
parallel inside, in line-aligned ranges (on one thread per file with
context); output stays in file order.

Patterns use the Rust regex crate's syntax, close to grep -E and ripgrep:
-E is implied. One byte rule, GNU grep's under LC_ALL=C: '.', \\w, \\b and
[[:alpha:]]-style classes are ASCII, -i folds ASCII letters only, a
non-ASCII literal matches its UTF-8 bytes ((?u) turns Unicode classes on).
A match never spans lines; -o and --color show leftmost-first matches
(for 'a|ab', 'a' where GNU grep shows 'ab').

Binary files: a file with a NUL byte in its first 32 KiB (or a selected
line holding one) prints no lines; 'FILE: binary file matches' goes to
standard error instead, as with GNU grep. -a prints them as text.
-r searches the files under directories, on every core: each file is
searched whole on the thread that found it (files of 4 MiB and more are
split across cores) and its output printed whole, files in the order
they are done; --sort=path prints them in name order (one walking
thread), -j 1 in GNU grep's order (depth first, directory order). As with
GNU grep: -r follows symlinks given as FILE and skips those met in the
walk, -R follows all (a directory loop is skipped with a warning);
devices, FIFOs and sockets met in the walk are skipped (-D read reads
them, -D skip skips them as FILE too); --include/--exclude GLOB
(repeatable: the last one matching a file's base name decides; if none
matches, the file is skipped when the first one given is --include)
and --exclude-dir GLOB filter the walk and FILE names; a directory or
file that cannot be read is reported and makes the exit status 2. -d
read (the default without -r) reports a directory FILE as an error, -d
skip skips it, -d recurse is -r. Without FILE, -r searches '.', naming
files without './'; 'd//' is named 'd/' (files 'd/x').
FILE '-' (or no FILE without -r) reads standard input as a stream.

With --json, each selected line (each match with -o) is a JSON object on
its own line: {\"path\", \"line\", \"offset\", \"text\"} (text as lossy UTF-8);
with -c, one {\"path\", \"count\"} per file; with -l/-L, one {\"path\"}.

Exit status: 0 if a line was selected, 1 if none, 2 on any error (an
invalid regex, or a file that cannot be read; other files are still
searched; with -q a selected line wins).

Examples:
  mmapkit grep -c 'ERR[0-9]+' app.log        count matching lines, all cores
  mmapkit grep -n -i 'timeout' a.log b.log   a.log:12:... b.log:7:...
  mmapkit grep -o -b '[0-9]{4}-[0-9]{2}' f   each match with its byte offset
  mmapkit grep -v -c '^#' config.txt         lines that are not comments
  mmapkit grep -F -m 10 'a.b[1]' data.txt    a literal, first 10 lines
  mmapkit grep -rlw 'TODO' src               files with the word TODO
  mmapkit grep -C 2 --color=auto panic log   two lines around each match
  zcat big.gz | mmapkit grep 'needle' -      a stream, sequentially
  mmapkit grep --json -e foo -e bar f | jq .line";

/// `--color=WHEN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ColorWhen {
    Never,
    Always,
    Auto,
}

/// Arguments of `mmapkit grep`.
#[derive(Args, Debug)]
#[command(disable_help_flag = true, args_override_self = true)]
pub struct GrepArgs {
    /// Print only the number of selected lines per file.
    #[arg(short = 'c', long)]
    count: bool,
    /// Print only the names of files with a selected line.
    #[arg(short = 'l', long = "files-with-matches", overrides_with = "files_without_match")]
    files_with_matches: bool,
    /// Print only the names of files without a selected line.
    #[arg(short = 'L', long = "files-without-match", overrides_with = "files_with_matches")]
    files_without_match: bool,
    /// Print nothing; exit 0 at the first selected line.
    #[arg(short = 'q', long, visible_alias = "silent")]
    quiet: bool,
    /// Suppress messages about files that cannot be read.
    #[arg(short = 's', long = "no-messages")]
    no_messages: bool,
    /// Prefix each line with its 1-based line number.
    #[arg(short = 'n', long = "line-number")]
    line_number: bool,
    /// Prefix each line with its byte offset (of the match with -o).
    #[arg(short = 'b', long = "byte-offset")]
    byte_offset: bool,
    /// Print only the (non-empty) matches, one per line.
    #[arg(short = 'o', long = "only-matching")]
    only_matching: bool,
    /// Ignore (ASCII) case.
    #[arg(short = 'i', long = "ignore-case")]
    ignore_case: bool,
    /// Select the lines that do not match.
    #[arg(short = 'v', long = "invert-match")]
    invert: bool,
    /// Only whole-word matches count (no [0-9A-Za-z_] byte around them).
    #[arg(short = 'w', long = "word-regexp")]
    word: bool,
    /// Only matches of the whole line count.
    #[arg(short = 'x', long = "line-regexp")]
    line: bool,
    /// Patterns are literal strings, not regexes.
    #[arg(short = 'F', long = "fixed-strings")]
    fixed: bool,
    /// Accepted for compatibility: patterns are always extended regexes.
    #[arg(short = 'E', long = "extended-regexp")]
    extended: bool,
    /// Print binary files' lines as text.
    #[arg(short = 'a', long = "text")]
    text: bool,
    /// Prefix each line with the file name (default with several files).
    #[arg(short = 'H', long = "with-filename", overrides_with = "no_filename")]
    with_filename: bool,
    /// Never prefix lines with the file name.
    #[arg(short = 'h', long = "no-filename", overrides_with = "with_filename")]
    no_filename: bool,
    /// Print NUM lines of context after each selected line.
    #[arg(short = 'A', long = "after-context", value_name = "NUM")]
    after: Option<usize>,
    /// Print NUM lines of context before each selected line.
    #[arg(short = 'B', long = "before-context", value_name = "NUM")]
    before: Option<usize>,
    /// Print NUM lines of context around each selected line.
    #[arg(short = 'C', long = "context", value_name = "NUM")]
    context: Option<usize>,
    /// Printed between groups of context lines (default '--').
    #[arg(long = "group-separator", value_name = "SEP", overrides_with = "no_group_separator")]
    group_separator: Option<String>,
    /// Print nothing between groups of context lines.
    #[arg(long = "no-group-separator", overrides_with = "group_separator")]
    no_group_separator: bool,
    /// Color matches, names, numbers and separators: never, always, or
    /// auto (when standard output is a terminal); --color alone is auto.
    #[arg(long, visible_alias = "colour", value_name = "WHEN", num_args = 0..=1, require_equals = true,
          default_value = "never", default_missing_value = "auto")]
    color: ColorWhen,
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
    walk: WalkArgs,
    #[command(flatten)]
    scan: ScanArgs,
    /// Print help (-h means --no-filename, as in grep).
    #[arg(long, action = ArgAction::Help)]
    help: Option<bool>,
}

/// `-d ACTION`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum DirAction {
    Read,
    Skip,
    Recurse,
}

/// `--sort KEY`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum SortKey {
    /// As the files are done (GNU grep's order with -j 1).
    None,
    /// By path, depth first, on one walking thread.
    Path,
}

/// The directory-walk options (`-r`, `-R`, `-d`, `-D`, `--include`,
/// `--exclude`, `--exclude-dir`, `--sort`); the last of -r, -R and -d wins.
#[derive(Args, Debug)]
struct WalkArgs {
    /// Search the files under directories (see below).
    #[arg(short = 'r', long, overrides_with_all = ["deref", "directories"])]
    recursive: bool,
    /// Like -r, following every symbolic link.
    #[arg(short = 'R', long = "dereference-recursive", overrides_with_all = ["recursive", "directories"])]
    deref: bool,
    /// What to do with a directory FILE: read (an error), skip, recurse.
    #[arg(short = 'd', long, value_name = "ACTION", overrides_with_all = ["recursive", "deref"])]
    directories: Option<DirAction>,
    /// What to do with devices, FIFOs and sockets: read or skip.
    #[arg(short = 'D', long, value_name = "ACTION")]
    devices: Option<Devices>,
    /// Search only files whose base name matches GLOB.
    #[arg(long, value_name = "GLOB", value_parser = in_order())]
    include: Vec<(usize, OsString)>,
    /// Skip files whose base name matches GLOB.
    #[arg(long, value_name = "GLOB", value_parser = in_order())]
    exclude: Vec<(usize, OsString)>,
    /// Skip directories whose base name matches GLOB.
    #[arg(long = "exclude-dir", value_name = "GLOB")]
    exclude_dir: Vec<OsString>,
    /// Output order of the files found by -r: none (as done) or path.
    #[arg(long, value_name = "KEY")]
    sort: Option<SortKey>,
}

/// --include and --exclude values with their place on the command line
/// (clap parses values in order; the later matching filter wins, so their
/// relative order matters and clap keeps it only per option).
fn in_order() -> impl clap::builder::TypedValueParser<Value = (usize, OsString)> {
    use clap::builder::TypedValueParser;
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    clap::builder::OsStringValueParser::new().map(|s| (NEXT.fetch_add(1, Ordering::Relaxed), s))
}

impl WalkArgs {
    fn recurse(&self) -> bool {
        self.recursive || self.deref || self.directories == Some(DirAction::Recurse)
    }

    fn options(&self, bare_dot: bool) -> WalkOptions {
        let mut filters: Vec<(usize, NameFilter)> = self
            .include
            .iter()
            .map(|(i, g)| (*i, NameFilter::Include(g.clone().into_vec())))
            .chain(
                self.exclude.iter().map(|(i, g)| (*i, NameFilter::Exclude(g.clone().into_vec()))),
            )
            .collect();
        filters.sort_by_key(|f| f.0);
        WalkOptions::default()
            .follow_links(self.deref)
            .name_filters(filters.into_iter().map(|f| f.1).collect())
            .exclude_dirs(self.exclude_dir.iter().map(|g| g.clone().into_vec()).collect())
            .devices(self.devices)
            .sort(self.sort == Some(SortKey::Path))
            .bare_dot(bare_dot)
    }
}

impl GrepArgs {
    /// A printer of these options writing to `out`.
    fn printer<W: Write>(&self, out: W, with_filename: bool) -> Printer<W> {
        if self.scan.json {
            Printer::Json(JsonPrinter::new(out, self.report(), self.only_matching))
        } else {
            Printer::Gnu(GnuPrinter::new(out, self.print_options().with_filename(with_filename)))
        }
    }

    fn report(&self) -> Report {
        if self.quiet {
            Report::Quiet
        } else if self.files_with_matches {
            Report::FilesWithMatches
        } else if self.files_without_match {
            Report::FilesWithoutMatch
        } else if self.count {
            Report::Count
        } else {
            Report::Lines
        }
    }

    fn print_options(&self) -> PrintOptions {
        let color = match self.color {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                io::stdout().is_terminal() && std::env::var_os("TERM").is_some_and(|t| t != "dumb")
            }
        };
        PrintOptions::default()
            .report(self.report())
            .with_filename(false)
            .line_numbers(self.line_number)
            .byte_offset(self.byte_offset)
            .only_matching(self.only_matching)
            .before(self.before.or(self.context))
            .after(self.after.or(self.context))
            .group_separator(if self.no_group_separator {
                None
            } else {
                Some(self.group_separator.as_deref().unwrap_or("--").as_bytes().to_vec())
            })
            .color(color)
            .text(self.text)
    }
}

pub fn grep(mut a: GrepArgs) -> anyhow::Result<u8> {
    let mut args = std::mem::take(&mut a.args).into_iter();
    let patterns = if a.patterns.is_empty() {
        match args.next() {
            Some(p) => vec![p
                .into_string()
                .map_err(|_| anyhow::anyhow!("the pattern is not valid UTF-8"))?],
            None => anyhow::bail!("grep needs a PATTERN (or -e PATTERN)"),
        }
    } else {
        std::mem::take(&mut a.patterns)
    };
    let mut files: Vec<OsString> = args.collect();
    let recurse = a.walk.recurse();
    // `grep -r PATTERN` searches '.', naming files without the './'.
    let bare_dot = files.is_empty() && recurse;
    if files.is_empty() {
        files.push(if recurse { "." } else { "-" }.into());
    }
    let walk_opts = a.walk.options(bare_dot);
    let opts = GrepOptions::default()
        .patterns(patterns)
        .fixed(a.fixed)
        .ignore_case(a.ignore_case)
        .invert(a.invert)
        .word(a.word)
        .line(a.line)
        .max_count(a.max_count);
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
    let out = Output { inner: BufWriter::with_capacity(256 << 10, io::stdout()), error: None };
    let mut printer = a.printer(out, false);
    let named =
        |found_in_dir: bool| !a.no_filename && (a.with_filename || files.len() > 1 || found_in_dir);
    let mut run = Run { failed: false, any: false, quiet: a.quiet, no_messages: a.no_messages };
    for file in &files {
        let path = Path::new(file);
        let operand = file != "-";
        if operand && walk_opts.skips_operand(path) {
            continue;
        }
        if operand && path.is_dir() && recurse {
            printer.set_with_filename(named(true));
            run.tree(&grep, path, &walk_opts, &a, &mut printer, named(true))?;
        } else if operand && a.walk.directories == Some(DirAction::Skip) && path.is_dir() {
            continue;
        } else {
            printer.set_with_filename(named(false));
            run.file(&grep, Ok(path.to_path_buf()), &a.scan, &mut printer)?;
        }
        if run.quiet && run.any {
            break; // like grep -q: the first selected line decides
        }
    }
    printer.out().inner.flush()?;
    Ok(if run.quiet && run.any { EXIT_OK } else { exit_status(run.failed, run.any) })
}

/// What the files searched so far came to.
struct Run {
    failed: bool,
    any: bool,
    quiet: bool,
    no_messages: bool,
}

impl Run {
    /// Searches one file (or stdin, `-`) and prints its results; an error
    /// with the file is reported and the run goes on, one writing to
    /// stdout ends it (a closed pipe quietly).
    fn file(
        &mut self,
        grep: &Grep,
        path: mmapkit::Result<PathBuf>,
        scan_args: &ScanArgs,
        printer: &mut Printer<Out>,
    ) -> anyhow::Result<()> {
        let result = path.map(|path| {
            let mut scan = scan_args.options();
            let _bar = (path != Path::new("-")).then(|| Progress::attach(&mut scan, &path, "grep"));
            let n = grep.search(&path, &scan, printer.sink());
            (path, n)
        });
        match result {
            Ok((path, n)) => self.done(&path, n, printer),
            Err(e) => self.done(Path::new(""), Err(e), printer),
        }
    }

    /// The directory `root` (-r): files found are searched on the walking
    /// threads, each into its own printer, then joined whole to `printer`.
    fn tree(
        &mut self,
        grep: &Grep,
        root: &Path,
        walk_opts: &WalkOptions,
        a: &GrepArgs,
        printer: &mut Printer<Out>,
        with_filename: bool,
    ) -> anyhow::Result<()> {
        let scan = a.scan.options();
        let threads = scan.threads;
        let shared = Mutex::new((&mut *self, &mut *printer, None::<anyhow::Error>));
        let search = |file: &mut Printer<Vec<u8>>, found: Visit<'_>| -> ControlFlow<()> {
            let searched = match found {
                Visit::File(path) => Some((path, grep.search(path, &scan, file.sink()))),
                _ => None,
            };
            let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
            let (run, printer, stop) = &mut *guard;
            let done = match (found, searched) {
                (_, Some((path, n))) => match printer.join_file(file) {
                    Ok(()) => run.done(path, n, printer),
                    Err(e) => run.done(path, Err(e), printer),
                },
                (Visit::Error(e), _) => run.done(Path::new(""), Err(e), printer),
                (Visit::Loop(path), _) => {
                    if !run.no_messages {
                        let msg =
                            format_args!("{}: warning: recursive directory loop", path.display());
                        error_to_stderr(&mut printer.out().inner, msg);
                    }
                    Ok(())
                }
                (Visit::File(_), None) => Ok(()),
            };
            if let Err(e) = done {
                *stop = Some(e);
                return ControlFlow::Break(());
            }
            if run.quiet && run.any {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        walk(root, walk_opts, threads, &|| a.printer(Vec::new(), with_filename), &search);
        let (_, _, stop) = shared.into_inner().unwrap_or_else(|e| e.into_inner());
        stop.map_or(Ok(()), Err)
    }

    /// What searching `path` came to, its output already given to
    /// `printer`: the binary-file note, or the error.
    fn done(
        &mut self,
        path: &Path,
        result: mmapkit::Result<u64>,
        printer: &mut Printer<Out>,
    ) -> anyhow::Result<()> {
        if result.is_ok() && printer.binary_matched() {
            error_to_stderr(
                &mut printer.out().inner,
                format_args!("{}: binary file matches", path.display()),
            );
        }
        match result {
            Ok(n) => self.any |= n > 0,
            Err(e) => {
                if let Some(err) = printer.out().error.take() {
                    return Err(err.into()); // stdout is gone (a closed pipe ends quietly)
                }
                if !self.no_messages {
                    // Earlier files' lines first: the error must not overtake them.
                    error_to_stderr(&mut printer.out().inner, e);
                }
                self.failed = true;
            }
        }
        Ok(())
    }
}

/// Stdout, buffered (not locked: walking threads join their files' output).
type Out = Output<BufWriter<io::Stdout>>;

/// The printer the options asked for.
enum Printer<W: Write> {
    Gnu(GnuPrinter<W>),
    Json(JsonPrinter<W>),
}

impl Printer<Out> {
    /// Writes what `file` printed for the file it just searched.
    fn join_file(&mut self, file: &mut Printer<Vec<u8>>) -> mmapkit::Result<()> {
        match (self, file) {
            (Printer::Gnu(p), Printer::Gnu(f)) => p.join_file(f),
            (Printer::Json(p), Printer::Json(f)) => p.join_file(f),
            _ => Ok(()), // both come from one GrepArgs::printer
        }
    }
}

impl<W: Write> Printer<W> {
    fn sink(&mut self) -> &mut dyn Sink {
        match self {
            Printer::Gnu(p) => p,
            Printer::Json(p) => p,
        }
    }

    fn out(&mut self) -> &mut W {
        match self {
            Printer::Gnu(p) => p.get_mut(),
            Printer::Json(p) => p.get_mut(),
        }
    }

    fn set_with_filename(&mut self, on: bool) {
        if let Printer::Gnu(p) = self {
            p.set_with_filename(on);
        }
    }

    fn binary_matched(&self) -> bool {
        matches!(self, Printer::Gnu(p) if p.binary_matched())
    }
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

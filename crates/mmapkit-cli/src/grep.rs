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
    walk, BinaryFiles, Colors, Devices, FileInfo, GnuPrinter, Grep, GrepOptions, JsonPrinter,
    NameFilter, PrintOptions, Report, Sink, Visit, WalkOptions,
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
-E is implied (GNU grep's default is -G, basic regexes: give -G for them;
-F for literals; two of -E, -F, -G are \"conflicting matchers\"). Where
the two meet, GNU grep's reading wins: '{' is a literal where no interval
starts, x{,3} is x{0,3}, bracket expressions take only POSIX class names
([[.c.]] and [[=c=]] are c), and a bad one is GNU's error. Patterns
are bytes (they need not be UTF-8). One byte rule, GNU grep's under
LC_ALL=C, shared with 'mmapkit replace': '.', \\w, \\b and [[:alpha:]]-style
classes are ASCII, -i folds ASCII letters only, a non-ASCII literal matches
its bytes ((?u) turns Unicode classes on). A match never spans lines; -o
and --color show GNU grep's matches: POSIX leftmost-longest over all the
patterns (for 'a|ab', 'ab'). -f FILE reads one pattern per line (an empty FILE matches
nothing); -NUM is -C NUM; -y is -i.

-P: the pattern is a Perl-compatible regex (PCRE2, with its JIT), as GNU
grep -P: lookarounds, \\K, back-references, lazy and possessive
quantifiers. Each line is matched alone (lookbehinds, ^, $, \\A and \\z see
only it). The same byte rule: UTF mode is off, '.', \\w, \\d, \\b and -i are
ASCII and bytes; (?u) is not PCRE2 syntax (an error), (*UTF) or (*UCP) at
the start of the pattern turns UTF-8 on, and a line that is not UTF-8 is
then an error. One pattern only: -e a -e b, a pattern with a newline or a
pattern file of several lines exit 2 ('the -P option only supports a
single pattern'), as GNU grep does. -w is (?<!\\w)(?:P)(?!\\w), -x
^(?:P)\\z. A pattern PCRE2 refuses exits 2 naming it; a match that hits
PCRE2's limits (catastrophic backtracking) is an error of that file (exit
2), never a silent non-match. With -z, $ also matches before a record's
final newline (GNU grep sets PCRE2_DOLLAR_ENDONLY; use \\z).

Binary files, as GNU grep 3.8 decides: the file is read in 96 KiB buffers
and is binary from the buffer holding its first NUL byte on (a file with
holes, from the start). From there a NUL byte ends lines, and no selected
line is printed: the search stops at the first and 'FILE: binary file
matches' goes to standard error (stdin is '(standard input)'). Lines of
earlier buffers print as usual; -c, -l, -L and -q count the NUL-ended
lines. -a (--binary-files=text) treats NUL as data, -I
(--binary-files=without-match) counts a binary file as not matching; the
last of these given wins. -U is accepted (no effect). -z: lines end in NUL
on input and output (no binary rule); -Z: a NUL after file names.
-T aligns output with a tab (numbers padded as GNU grep pads them).
-r searches the files under directories on several walking threads (-j
N: N; auto: one per core, at least 8, which keep disk reads in flight
when the tree is not cached): each file is
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
  mmapkit grep -2 -n -f words.txt notes.txt  patterns from a file, -NUM context
  mmapkit grep -G 'a\\(b\\|c\\)\\{2\\}' f         a basic regex, as GNU grep's default
  mmapkit grep -oP 'id=\\K\\d+(?=;)' f         PCRE2: \\K and a lookahead
  mmapkit grep -c '' /usr/bin/sed            NUL-ended lines of a binary file
  find . -print0 | mmapkit grep -z '[.]rs$'  NUL-separated records
  mmapkit grep -lZ TODO a b | xargs -0 ls    NUL after each file name
  tail -f log | mmapkit grep --line-buffered --label=log -H ERR -
  zcat big.gz | mmapkit grep 'needle' -      a stream, sequentially
  mmapkit grep --json -e foo -e bar f | jq .line";

/// `--color=WHEN`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ColorWhen {
    #[value(alias = "no", alias = "none")]
    Never,
    #[value(alias = "yes", alias = "force")]
    Always,
    #[value(alias = "tty", alias = "if-tty")]
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
    #[arg(short = 'i', long = "ignore-case", overrides_with = "no_ignore_case")]
    ignore_case: bool,
    /// Do not ignore case (undoes an earlier -i or -y; the default).
    #[arg(long = "no-ignore-case", overrides_with_all = ["ignore_case", "ignore_case_y"])]
    no_ignore_case: bool,
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
    /// Patterns are extended regexes (the default here; see below).
    #[arg(short = 'E', long = "extended-regexp")]
    extended: bool,
    /// Binary files are text (--binary-files=text).
    #[arg(short = 'a', long = "text", overrides_with_all = ["without_match", "binary_files"])]
    text: bool,
    /// Prefix each line with the file name (default with several files).
    #[arg(short = 'H', long = "with-filename", overrides_with = "no_filename")]
    with_filename: bool,
    /// Never prefix lines with the file name.
    #[arg(short = 'h', long = "no-filename", overrides_with = "with_filename")]
    no_filename: bool,
    /// Print NUM lines of context after each selected line.
    #[arg(short = 'A', long = "after-context", value_name = "NUM", value_parser = context_len)]
    after: Option<usize>,
    /// Print NUM lines of context before each selected line.
    #[arg(short = 'B', long = "before-context", value_name = "NUM", value_parser = context_len)]
    before: Option<usize>,
    /// Print NUM lines of context around each selected line (-NUM too).
    #[arg(short = 'C', long = "context", value_name = "NUM", value_parser = context_len)]
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
    /// Stop after N selected lines per file (a negative N: no limit).
    #[arg(short = 'm', long = "max-count", value_name = "N", allow_hyphen_values = true,
          value_parser = max_count)]
    max_count: Option<MaxCount>,
    /// A pattern (repeatable: lines matching any are selected).
    #[arg(short = 'e', long = "regexp", value_name = "PATTERN", allow_hyphen_values = true)]
    patterns: Vec<OsString>,
    #[command(flatten)]
    gnu: GnuArgs,
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
    /// Skip files whose base name matches any glob in FILE (one a line).
    #[arg(long = "exclude-from", value_name = "FILE", value_parser = in_order())]
    exclude_from: Vec<(usize, OsString)>,
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

    fn options(&self, bare_dot: bool) -> mmapkit::Result<WalkOptions> {
        let mut filters: Vec<(usize, NameFilter)> = self
            .include
            .iter()
            .map(|(i, g)| (*i, NameFilter::Include(g.clone().into_vec())))
            .chain(
                self.exclude.iter().map(|(i, g)| (*i, NameFilter::Exclude(g.clone().into_vec()))),
            )
            .collect();
        for (i, file) in &self.exclude_from {
            // GNU grep: each line a glob, as if given with --exclude there.
            let globs = mmapkit::scan::read_input(Path::new(file))?;
            for g in globs.split(|&b| b == b'\n').filter(|g| !g.is_empty()) {
                filters.push((*i, NameFilter::Exclude(g.to_vec())));
            }
        }
        filters.sort_by_key(|f| f.0); // stable: a file's globs keep their order
        Ok(WalkOptions::default()
            .follow_links(self.deref)
            .name_filters(filters.into_iter().map(|f| f.1).collect())
            .exclude_dirs(self.exclude_dir.iter().map(|g| g.clone().into_vec()).collect())
            .devices(self.devices)
            .sort(self.sort == Some(SortKey::Path))
            .bare_dot(bare_dot))
    }
}

/// GNU grep's matcher, pattern-file, binary-file and output options.
#[derive(Args, Debug)]
struct GnuArgs {
    /// Patterns are POSIX basic regexes (GNU grep's default dialect,
    /// translated; no back-references).
    #[arg(short = 'G', long = "basic-regexp")]
    basic: bool,
    /// The pattern is a Perl-compatible regex (PCRE2; one pattern only;
    /// see below).
    #[arg(short = 'P', long = "perl-regexp")]
    perl: bool,
    /// Read patterns from FILE, one per line ('-': standard input; an
    /// empty FILE has no pattern, so matches nothing).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pattern_files: Vec<OsString>,
    /// The same as -i.
    #[arg(short = 'y', overrides_with = "no_ignore_case")]
    ignore_case_y: bool,
    /// binary (the default: GNU grep's rules, see below), text (as -a) or
    /// without-match (as -I).
    #[arg(long = "binary-files", value_name = "TYPE", value_parser = binary_files,
          overrides_with_all = ["text", "without_match"])]
    binary_files: Option<BinaryFiles>,
    /// Binary files have no match (--binary-files=without-match).
    #[arg(short = 'I', overrides_with_all = ["text", "binary_files"])]
    without_match: bool,
    /// Accepted for compatibility (no effect on POSIX systems).
    #[arg(short = 'U', long = "binary")]
    binary: bool,
    /// Lines end in NUL bytes, in the input and the output.
    #[arg(short = 'z', long = "null-data")]
    null_data: bool,
    /// A NUL byte after each file name (instead of ':' or a newline).
    #[arg(short = 'Z', long = "null")]
    null: bool,
    /// A tab after the prefixes, numbers padded, so lines align.
    #[arg(short = 'T', long = "initial-tab")]
    initial_tab: bool,
    /// Flush the output after each line.
    #[arg(long = "line-buffered")]
    line_buffered: bool,
    /// Name standard input LABEL in the output.
    #[arg(long, value_name = "LABEL")]
    label: Option<OsString>,
    /// Obsolete (GNU grep warns and goes on; so does this).
    #[arg(short = 'u', long = "unix-byte-offsets")]
    unix_byte_offsets: bool,
    /// Print the version and exit.
    #[arg(short = 'V', long)]
    version: bool,
}

/// `-m N`: GNU grep takes any integer; a negative one is no limit, and
/// one past the range is capped.
#[derive(Clone, Copy, Debug)]
struct MaxCount(Option<u64>);

fn max_count(s: &str) -> Result<MaxCount, String> {
    let t = s.trim_start();
    let (neg, digits) = match t.as_bytes().first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err("invalid max count".into());
    }
    Ok(MaxCount(if neg { None } else { Some(digits.parse().unwrap_or(i64::MAX as u64)) }))
}

/// `-A`/`-B`/`-C`/`-NUM`: a non-negative integer, capped (like GNU grep).
fn context_len(s: &str) -> Result<usize, String> {
    let t = s.trim_start();
    let digits = t.strip_prefix('+').unwrap_or(t);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("{s}: invalid context length argument"));
    }
    Ok(digits.parse().unwrap_or(i64::MAX as usize))
}

fn binary_files(s: &str) -> Result<BinaryFiles, String> {
    s.parse().map_err(|_| "unknown binary-files type".to_string())
}

/// grep's long option names and aliases, each with its option's name
/// (built once: clap's command is not cheap to build per argument).
fn long_names() -> &'static [(String, String)] {
    static NAMES: std::sync::OnceLock<Vec<(String, String)>> = std::sync::OnceLock::new();
    NAMES.get_or_init(|| {
        use clap::Args;
        let cmd = GrepArgs::augment_args(clap::Command::new("grep"));
        let mut names = Vec::new();
        for arg in cmd.get_arguments() {
            let Some(long) = arg.get_long() else { continue };
            for n in std::iter::once(long).chain(arg.get_all_aliases().into_iter().flatten()) {
                names.push((n.to_owned(), long.to_owned()));
            }
        }
        names
    })
}

/// `--PREFIX[=VALUE]` as GNU's getopt_long takes it: a prefix of one long
/// option only (`--coun`, `--after=1`) is that option; anything else is
/// left for clap (an ambiguous prefix is its error).
fn unabbreviated(a: OsString) -> OsString {
    let b = a.as_encoded_bytes();
    let Some(rest) = b.strip_prefix(b"--").filter(|r| !r.is_empty()) else { return a };
    let (name, value) = match rest.iter().position(|&c| c == b'=') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, &b""[..]),
    };
    let mut full: Option<&String> = None;
    for (n, long) in long_names() {
        if n.as_bytes() == name {
            return a; // exact
        }
        if n.as_bytes().starts_with(name) {
            if full.is_some_and(|f| f != long) {
                return a; // ambiguous
            }
            full = Some(long);
        }
    }
    let Some(full) = full else { return a };
    let mut out = format!("--{full}").into_bytes();
    out.extend_from_slice(value);
    OsString::from_vec(out)
}

/// GNU grep's `-NUM` (context NUM): rewritten to `--context=NUM` before
/// clap sees the arguments of `grep` (not after `--`, nor as the value of
/// an option that takes one).
pub fn gnu_args(args: impl IntoIterator<Item = OsString>) -> Vec<OsString> {
    let mut out: Vec<OsString> = Vec::new();
    let mut in_grep = false;
    let mut value_next = false;
    for a in args {
        let b = a.as_encoded_bytes();
        if !in_grep {
            in_grep = out.len() == 1 && b == b"grep";
            out.push(a);
            continue;
        }
        let a = if value_next { a } else { unabbreviated(a) };
        let b = a.as_encoded_bytes();
        if value_next {
            value_next = false;
        } else if b == b"--" {
            in_grep = false; // the rest is operands
        } else if b.len() > 1 && b[0] == b'-' && b[1] != b'-' {
            // A bundle: its digits (before any letter that takes a value,
            // which takes the rest) are -NUM; the next argument is a value
            // when the first letter taking one is the bundle's last.
            let takes = |c: &u8| b"efmABCdDj".contains(c);
            let end = b[1..].iter().position(takes).map_or(b.len(), |i| i + 1);
            let digits: Vec<u8> = b[1..end].iter().copied().filter(u8::is_ascii_digit).collect();
            value_next = end == b.len() - 1;
            if !digits.is_empty() {
                // (-NUM first: a letter left last may take the next argument)
                out.push(OsString::from(format!("--context={}", String::from_utf8_lossy(&digits))));
                let mut rest = b"-".to_vec();
                rest.extend(
                    b[1..]
                        .iter()
                        .enumerate()
                        .filter(|&(i, c)| i + 1 >= end || !c.is_ascii_digit())
                        .map(|(_, c)| *c),
                );
                if rest.len() > 1 {
                    out.push(OsString::from_vec(rest));
                }
                continue;
            }
        } else if b.starts_with(b"--") && !b.contains(&b'=') {
            value_next = matches!(
                b,
                b"--regexp"
                    | b"--file"
                    | b"--max-count"
                    | b"--after-context"
                    | b"--before-context"
                    | b"--context"
                    | b"--label"
                    | b"--group-separator"
                    | b"--binary-files"
                    | b"--threads"
                    | b"--strategy"
                    | b"--chunk"
                    | b"--directories"
                    | b"--devices"
                    | b"--include"
                    | b"--exclude"
                    | b"--exclude-dir"
            );
        }
        out.push(a);
    }
    out
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

    fn color(&self) -> bool {
        match self.color {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                io::stdout().is_terminal() && std::env::var_os("TERM").is_some_and(|t| t != "dumb")
            }
        }
    }

    /// `GREP_COLORS` and `GREP_COLOR`, and GNU grep's warning about the latter.
    fn colors(&self) -> (Colors, Option<String>) {
        let var = |name| std::env::var_os(name).map(OsString::into_encoded_bytes);
        Colors::from_env(var("GREP_COLORS").as_deref(), var("GREP_COLOR").as_deref(), self.invert)
    }

    fn print_options(&self) -> PrintOptions {
        let color = self.color();
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
            .colors(Box::new(if color { self.colors().0 } else { Colors::default() }))
            .initial_tab(self.gnu.initial_tab)
            .null_after_name(self.gnu.null)
            .null_data(self.gnu.null_data)
            .label(self.gnu.label.as_ref().map(|l| l.as_encoded_bytes().to_vec()))
            .line_buffered(self.gnu.line_buffered)
    }

    /// `-a`, `-I`, `--binary-files` (the last given wins, as in GNU grep:
    /// clap keeps only it). JSON output has no binary rule unless asked:
    /// its text is escaped.
    fn binary_files(&self) -> BinaryFiles {
        if self.text {
            BinaryFiles::Text
        } else if self.gnu.without_match {
            BinaryFiles::WithoutMatch
        } else {
            self.gnu.binary_files.unwrap_or(if self.scan.json {
                BinaryFiles::Text
            } else {
                BinaryFiles::Binary
            })
        }
    }
}

pub fn grep(mut a: GrepArgs) -> anyhow::Result<u8> {
    if a.gnu.version {
        let mut out = crate::stdout::stdout();
        writeln!(out, "mmapkit grep {}", env!("CARGO_PKG_VERSION"))?;
        return Ok(EXIT_OK);
    }
    if let (true, (_, Some(warning))) = (a.color(), a.colors()) {
        eprintln!("mmapkit: {warning}");
    }
    if a.gnu.unix_byte_offsets {
        eprintln!("mmapkit: warning: --unix-byte-offsets (-u) is obsolete");
    }
    let matchers = [a.extended, a.fixed, a.gnu.basic, a.gnu.perl];
    if matchers.iter().filter(|&&m| m).count() > 1 {
        error_to_stderr(&mut io::stdout(), "conflicting matchers specified");
        return Ok(EXIT_ERROR);
    }
    let mut args = std::mem::take(&mut a.args).into_iter();
    // Patterns are bytes: a pattern need not be UTF-8 (`grep $'caf\xe9'`).
    let mut patterns: Vec<Vec<u8>> =
        std::mem::take(&mut a.patterns).into_iter().map(OsString::into_encoded_bytes).collect();
    for f in &a.gnu.pattern_files {
        match mmapkit::scan::read_input(Path::new(f)) {
            Ok(mut text) => {
                // One pattern per line; the last newline ends the last one.
                if text.last() == Some(&b'\n') {
                    text.pop();
                    patterns.push(text);
                } else if !text.is_empty() {
                    patterns.push(text);
                }
            }
            Err(e) => {
                error_to_stderr(&mut io::stdout(), e);
                return Ok(EXIT_ERROR);
            }
        }
    }
    if patterns.is_empty() && a.gnu.pattern_files.is_empty() {
        match args.next() {
            Some(p) => patterns.push(p.into_encoded_bytes()),
            None => anyhow::bail!("grep needs a PATTERN (or -e PATTERN)"),
        }
    }
    let mut files: Vec<OsString> = args.collect();
    let recurse = a.walk.recurse();
    // `grep -r PATTERN` searches '.', naming files without the './'.
    let bare_dot = files.is_empty() && recurse;
    if files.is_empty() {
        files.push(if recurse { "." } else { "-" }.into());
    }
    let walk_opts = match a.walk.options(bare_dot) {
        Ok(w) => w,
        Err(e) => {
            error_to_stderr(&mut io::stdout(), e);
            return Ok(EXIT_ERROR);
        }
    };
    let max_count = a.max_count.and_then(|m| m.0);
    let opts = GrepOptions::default()
        .patterns(patterns)
        .fixed(a.fixed)
        .basic(a.gnu.basic)
        .perl(a.gnu.perl)
        .ignore_case(a.ignore_case || a.gnu.ignore_case_y)
        .invert(a.invert)
        .word(a.word)
        .line(a.line)
        .max_count(max_count)
        .binary_files(a.binary_files())
        .null_data(a.gnu.null_data);
    if opts.selects_nothing() && !a.files_without_match {
        // GNU's shortcut (-m0, -f /dev/null, -v ''): exit 1 before the
        // pattern is compiled or a file opened (-L still lists the files).
        return Ok(EXIT_NO_MATCH);
    }
    let grep = match Grep::new(&opts) {
        Ok(g) => g,
        Err(e) => {
            error_to_stderr(&mut io::stdout(), e);
            return Ok(EXIT_ERROR);
        }
    };
    let out = Output {
        inner: BufWriter::with_capacity(256 << 10, crate::stdout::stdout()),
        error: None,
        line_buffered: a.gnu.line_buffered,
    };
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
            Ok((path, Err(e))) if e.errno() == Some(libc::EISDIR) => {
                // GNU grep reads a directory operand (without -r) as a file
                // with no lines, after saying so: `-c` prints `d:0`, `-L`
                // lists it (`grep -c pat *` in a folder with subfolders).
                self.done(b"", Err(e), printer)?;
                let sink = printer.sink();
                let empty =
                    sink.begin(&FileInfo { path: &path, size: None }).and_then(|()| sink.finish(0));
                self.done(b"", empty.map(|()| 0), printer)
            }
            Ok((_, n)) => {
                let name = printer.name();
                self.done(&name, n, printer)
            }
            Err(e) => self.done(b"", Err(e), printer),
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
        // Under -q the walk's messages wait for its end: a match ends the
        // run quietly (GNU stops at its first match; on several threads the
        // entries "before" it are not defined), no match prints them all.
        let mut held: Vec<Held> = Vec::new();
        // Whether a thread may hold its files' output back and join many
        // files at once (see `Printer::can_hold`); never under -q, where
        // the first match ends the walk, or --line-buffered.
        let hold = !self.quiet && !a.gnu.line_buffered;
        let shared: Walked<'_> =
            Mutex::new((&mut *self, &mut *printer, None::<anyhow::Error>, &mut held));
        let search = |t: &mut Thread<'_, '_>, found: Visit<'_>| -> ControlFlow<()> {
            let file = &mut t.file;
            let searched = match found {
                Visit::File(path) => Some((path, grep.search(path, &scan, file.sink()))),
                _ => None,
            };
            match &searched {
                Some((_, Ok(0))) if file.is_empty() => return ControlFlow::Continue(()), // no lock
                Some((_, Ok(n))) if hold && file.can_hold() && file.held() < HOLD_BYTES => {
                    t.any |= *n > 0;
                    return ControlFlow::Continue(());
                }
                _ => {}
            }
            let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
            let (run, printer, stop, held) = &mut *guard;
            run.any |= std::mem::take(&mut t.any);
            if searched.is_none() && !file.is_empty() {
                // The files held back first: a message must not overtake them.
                let joined = printer.join_file(file).map(|()| 0);
                if let Err(e) = run.done(b"", joined, printer) {
                    *stop = Some(e);
                    return ControlFlow::Break(());
                }
            }
            let done = match (found, searched) {
                (_, Some((_, n))) => {
                    let name = file.name();
                    let n = printer.join_file(file).and(n);
                    match n {
                        Err(e) if run.quiet => {
                            held.push(Held::Failed(name, e));
                            Ok(())
                        }
                        n => run.done(&name, n, printer),
                    }
                }
                (Visit::Error(e), _) if run.quiet => {
                    held.push(Held::Failed(Vec::new(), e));
                    Ok(())
                }
                (Visit::Error(e), _) => run.done(b"", Err(e), printer),
                (Visit::Loop(path), _) if run.quiet => {
                    held.push(Held::Loop(path.into()));
                    Ok(())
                }
                (Visit::Loop(path), _) => {
                    run.loop_warning(path, printer);
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
        let thread =
            || Thread { file: a.printer(Vec::new(), with_filename), any: false, shared: &shared };
        walk(root, walk_opts, threads, &thread, &search);
        let (_, _, stop, _) = shared.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = stop {
            return Err(e);
        }
        if self.any {
            return Ok(());
        }
        for h in held {
            match h {
                Held::Failed(name, e) => self.done(&name, Err(e), printer)?,
                Held::Loop(path) => self.loop_warning(&path, printer),
            }
        }
        Ok(())
    }

    /// GNU grep's warning for a directory that is its own ancestor (not a
    /// failure).
    fn loop_warning(&self, path: &Path, printer: &mut Printer<Out>) {
        if !self.no_messages {
            let msg = format_args!("{}: warning: recursive directory loop", path.display());
            error_to_stderr(&mut printer.out().inner, msg);
        }
    }

    /// What searching `path` came to, its output already given to
    /// `printer`: the binary-file note, or the error.
    fn done(
        &mut self,
        name: &[u8],
        result: mmapkit::Result<u64>,
        printer: &mut Printer<Out>,
    ) -> anyhow::Result<()> {
        if result.is_ok() && printer.binary_matched() {
            // The name as bytes: a file name need not be UTF-8.
            let mut msg = b"mmapkit: ".to_vec();
            msg.extend_from_slice(name);
            msg.extend_from_slice(b": binary file matches\n");
            let _ = printer.out().inner.flush();
            let _ = io::stderr().write_all(&msg);
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

/// A message of the walk held under -q (see [`Run::tree`]).
enum Held {
    Failed(Vec<u8>, mmapkit::Error),
    Loop(std::path::PathBuf),
}

/// What the walking threads of [`Run::tree`] share.
type Walked<'a> =
    Mutex<(&'a mut Run, &'a mut Printer<Out>, Option<anyhow::Error>, &'a mut Vec<Held>)>;

/// Output a walking thread holds back before it joins it: one lock per
/// this much, not per file (`-r -c` prints a line for every file).
const HOLD_BYTES: usize = 32 << 10;

/// A walking thread's printer and what it holds back, joined when the
/// thread ends.
struct Thread<'s, 'a> {
    file: Printer<Vec<u8>>,
    /// A file held back had a selected line.
    any: bool,
    shared: &'s Walked<'a>,
}

impl Drop for Thread<'_, '_> {
    fn drop(&mut self) {
        if self.file.is_empty() && !self.any {
            return;
        }
        let mut guard = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let (run, printer, stop, _) = &mut *guard;
        run.any |= self.any;
        if stop.is_none() {
            let joined = printer.join_file(&mut self.file).map(|()| 0);
            if let Err(e) = run.done(b"", joined, printer) {
                *stop = Some(e);
            }
        }
    }
}

/// Stdout, buffered (not locked: walking threads join their files' output).
type Out = Output<BufWriter<crate::stdout::Stdout>>;

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

impl Printer<Vec<u8>> {
    /// Nothing to join (see [`GnuPrinter::is_empty`]).
    fn is_empty(&self) -> bool {
        match self {
            Printer::Gnu(p) => p.is_empty(),
            Printer::Json(p) => p.is_empty(),
        }
    }

    /// Bytes held since the last join.
    fn held(&self) -> usize {
        match self {
            Printer::Gnu(p) => p.held(),
            Printer::Json(p) => p.held(),
        }
    }

    /// Joining later would write the same (see [`GnuPrinter::can_hold`]).
    fn can_hold(&self) -> bool {
        match self {
            Printer::Gnu(p) => p.can_hold(),
            Printer::Json(_) => true,
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

    /// The last file searched was binary and had a selected line.
    fn binary_matched(&self) -> bool {
        matches!(self, Printer::Gnu(p) if p.binary_matched())
    }

    /// The name printed for the last file begun (bytes; none for JSON).
    fn name(&self) -> Vec<u8> {
        match self {
            Printer::Gnu(p) => p.name().to_vec(),
            Printer::Json(_) => Vec::new(),
        }
    }
}

/// Stdout, remembering the first write error so that a failed write is
/// told apart from a failed input file (and a closed pipe ends quietly).
struct Output<W: Write> {
    inner: W,
    error: Option<io::Error>,
    /// `--line-buffered`: flush each write (the printer writes each line).
    line_buffered: bool,
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
        let n = self.inner.write(buf).map_err(|e| self.fail(e))?;
        if self.line_buffered {
            self.inner.flush().map_err(|e| self.fail(e))?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.fail(e))
    }
}

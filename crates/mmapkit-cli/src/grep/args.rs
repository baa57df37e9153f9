//! `mmapkit grep`'s arguments: clap's options, GNU grep's spellings of
//! them (`-NUM`, abbreviated long options), and what they ask of the core.

use std::ffi::OsString;
use std::io::{self, IsTerminal, Write};
use std::os::unix::ffi::OsStringExt;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use clap::{ArgAction, Args, ValueEnum};
use mmapkit::scan::{
    BinaryFiles, Colors, Devices, GnuPrinter, JsonPrinter, NameFilter, PrintOptions, Report,
    WalkOptions,
};

use super::printer::Printer;
use crate::common::ScanArgs;

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
    pub(super) count: bool,
    /// Print only the names of files with a selected line.
    #[arg(short = 'l', long = "files-with-matches", overrides_with = "files_without_match")]
    pub(super) files_with_matches: bool,
    /// Print only the names of files without a selected line.
    #[arg(short = 'L', long = "files-without-match", overrides_with = "files_with_matches")]
    pub(super) files_without_match: bool,
    /// Print nothing; exit 0 at the first selected line.
    #[arg(short = 'q', long, visible_alias = "silent")]
    pub(super) quiet: bool,
    /// Suppress messages about files that cannot be read.
    #[arg(short = 's', long = "no-messages")]
    pub(super) no_messages: bool,
    /// Prefix each line with its 1-based line number.
    #[arg(short = 'n', long = "line-number")]
    pub(super) line_number: bool,
    /// Prefix each line with its byte offset (of the match with -o).
    #[arg(short = 'b', long = "byte-offset")]
    pub(super) byte_offset: bool,
    /// Print only the (non-empty) matches, one per line.
    #[arg(short = 'o', long = "only-matching")]
    pub(super) only_matching: bool,
    /// Ignore (ASCII) case.
    #[arg(short = 'i', long = "ignore-case", overrides_with = "no_ignore_case")]
    pub(super) ignore_case: bool,
    /// Do not ignore case (undoes an earlier -i or -y; the default).
    #[arg(long = "no-ignore-case", overrides_with_all = ["ignore_case", "ignore_case_y"])]
    pub(super) no_ignore_case: bool,
    /// Select the lines that do not match.
    #[arg(short = 'v', long = "invert-match")]
    pub(super) invert: bool,
    /// Only whole-word matches count (no [0-9A-Za-z_] byte around them).
    #[arg(short = 'w', long = "word-regexp")]
    pub(super) word: bool,
    /// Only matches of the whole line count.
    #[arg(short = 'x', long = "line-regexp")]
    pub(super) line: bool,
    /// Patterns are literal strings, not regexes.
    #[arg(short = 'F', long = "fixed-strings")]
    pub(super) fixed: bool,
    /// Patterns are extended regexes (the default here; see below).
    #[arg(short = 'E', long = "extended-regexp")]
    pub(super) extended: bool,
    /// Binary files are text (--binary-files=text).
    #[arg(short = 'a', long = "text", overrides_with_all = ["without_match", "binary_files"])]
    pub(super) text: bool,
    /// Prefix each line with the file name (default with several files).
    #[arg(short = 'H', long = "with-filename", overrides_with = "no_filename")]
    pub(super) with_filename: bool,
    /// Never prefix lines with the file name.
    #[arg(short = 'h', long = "no-filename", overrides_with = "with_filename")]
    pub(super) no_filename: bool,
    /// Print NUM lines of context after each selected line.
    #[arg(short = 'A', long = "after-context", value_name = "NUM", value_parser = context_len)]
    pub(super) after: Option<usize>,
    /// Print NUM lines of context before each selected line.
    #[arg(short = 'B', long = "before-context", value_name = "NUM", value_parser = context_len)]
    pub(super) before: Option<usize>,
    /// Print NUM lines of context around each selected line (-NUM too).
    #[arg(short = 'C', long = "context", value_name = "NUM", value_parser = context_len)]
    pub(super) context: Option<usize>,
    /// Printed between groups of context lines (default '--').
    #[arg(long = "group-separator", value_name = "SEP", overrides_with = "no_group_separator")]
    pub(super) group_separator: Option<String>,
    /// Print nothing between groups of context lines.
    #[arg(long = "no-group-separator", overrides_with = "group_separator")]
    pub(super) no_group_separator: bool,
    /// Color matches, names, numbers and separators: never, always, or
    /// auto (when standard output is a terminal); --color alone is auto.
    #[arg(long, visible_alias = "colour", value_name = "WHEN", num_args = 0..=1, require_equals = true,
          default_value = "never", default_missing_value = "auto")]
    color: ColorWhen,
    /// Stop after N selected lines per file (a negative N: no limit).
    #[arg(short = 'm', long = "max-count", value_name = "N", allow_hyphen_values = true,
          value_parser = max_count)]
    pub(super) max_count: Option<MaxCount>,
    /// A pattern (repeatable: lines matching any are selected).
    #[arg(short = 'e', long = "regexp", value_name = "PATTERN", allow_hyphen_values = true)]
    pub(super) patterns: Vec<OsString>,
    #[command(flatten)]
    pub(super) gnu: GnuArgs,
    /// PATTERN (unless given with -e), then the files ('-' or none: stdin).
    #[arg(value_name = "[PATTERN] FILE")]
    pub(super) args: Vec<OsString>,
    #[command(flatten)]
    pub(super) walk: WalkArgs,
    #[command(flatten)]
    pub(super) scan: ScanArgs,
    /// Print help (-h means --no-filename, as in grep).
    #[arg(long, action = ArgAction::Help)]
    pub(super) help: Option<bool>,
}

/// `-d ACTION`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub(super) enum DirAction {
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
pub(super) struct WalkArgs {
    /// Search the files under directories (see below).
    #[arg(short = 'r', long, overrides_with_all = ["deref", "directories"])]
    pub(super) recursive: bool,
    /// Like -r, following every symbolic link.
    #[arg(short = 'R', long = "dereference-recursive", overrides_with_all = ["recursive", "directories"])]
    pub(super) deref: bool,
    /// What to do with a directory FILE: read (an error), skip, recurse.
    #[arg(short = 'd', long, value_name = "ACTION", overrides_with_all = ["recursive", "deref"])]
    pub(super) directories: Option<DirAction>,
    /// What to do with devices, FIFOs and sockets: read or skip.
    #[arg(short = 'D', long, value_name = "ACTION")]
    pub(super) devices: Option<Devices>,
    /// Search only files whose base name matches GLOB.
    #[arg(long, value_name = "GLOB", value_parser = in_order())]
    pub(super) include: Vec<(usize, OsString)>,
    /// Skip files whose base name matches GLOB.
    #[arg(long, value_name = "GLOB", value_parser = in_order())]
    pub(super) exclude: Vec<(usize, OsString)>,
    /// Skip files whose base name matches any glob in FILE (one a line).
    #[arg(long = "exclude-from", value_name = "FILE", value_parser = in_order())]
    pub(super) exclude_from: Vec<(usize, OsString)>,
    /// Skip directories whose base name matches GLOB.
    #[arg(long = "exclude-dir", value_name = "GLOB")]
    pub(super) exclude_dir: Vec<OsString>,
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
    pub(super) fn recurse(&self) -> bool {
        self.recursive || self.deref || self.directories == Some(DirAction::Recurse)
    }

    pub(super) fn options(&self, bare_dot: bool) -> mmapkit::Result<WalkOptions> {
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
pub(super) struct GnuArgs {
    /// Patterns are POSIX basic regexes (GNU grep's default dialect,
    /// translated; no back-references).
    #[arg(short = 'G', long = "basic-regexp")]
    pub(super) basic: bool,
    /// The pattern is a Perl-compatible regex (PCRE2; one pattern only;
    /// see below).
    #[arg(short = 'P', long = "perl-regexp")]
    pub(super) perl: bool,
    /// Read patterns from FILE, one per line ('-': standard input; an
    /// empty FILE has no pattern, so matches nothing).
    #[arg(short = 'f', long = "file", value_name = "FILE")]
    pub(super) pattern_files: Vec<OsString>,
    /// The same as -i.
    #[arg(short = 'y', overrides_with = "no_ignore_case")]
    pub(super) ignore_case_y: bool,
    /// binary (the default: GNU grep's rules, see below), text (as -a) or
    /// without-match (as -I).
    #[arg(long = "binary-files", value_name = "TYPE", value_parser = binary_files,
          overrides_with_all = ["text", "without_match"])]
    pub(super) binary_files: Option<BinaryFiles>,
    /// Binary files have no match (--binary-files=without-match).
    #[arg(short = 'I', overrides_with_all = ["text", "binary_files"])]
    pub(super) without_match: bool,
    /// Accepted for compatibility (no effect on POSIX systems).
    #[arg(short = 'U', long = "binary")]
    pub(super) binary: bool,
    /// Lines end in NUL bytes, in the input and the output.
    #[arg(short = 'z', long = "null-data")]
    pub(super) null_data: bool,
    /// A NUL byte after each file name (instead of ':' or a newline).
    #[arg(short = 'Z', long = "null")]
    pub(super) null: bool,
    /// A tab after the prefixes, numbers padded, so lines align.
    #[arg(short = 'T', long = "initial-tab")]
    pub(super) initial_tab: bool,
    /// Flush the output after each line.
    #[arg(long = "line-buffered")]
    pub(super) line_buffered: bool,
    /// Name standard input LABEL in the output.
    #[arg(long, value_name = "LABEL")]
    pub(super) label: Option<OsString>,
    /// Obsolete (GNU grep warns and goes on; so does this).
    #[arg(short = 'u', long = "unix-byte-offsets")]
    pub(super) unix_byte_offsets: bool,
    /// Print the version and exit.
    #[arg(short = 'V', long)]
    pub(super) version: bool,
}

/// `-m N`: GNU grep takes any integer; a negative one is no limit, and
/// one past the range is capped.
#[derive(Clone, Copy, Debug)]
pub(super) struct MaxCount(pub(super) Option<u64>);

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
    pub(super) fn printer<W: Write>(&self, out: W, with_filename: bool) -> Printer<W> {
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

    pub(super) fn color(&self) -> bool {
        match self.color {
            ColorWhen::Always => true,
            ColorWhen::Never => false,
            ColorWhen::Auto => {
                io::stdout().is_terminal() && std::env::var_os("TERM").is_some_and(|t| t != "dumb")
            }
        }
    }

    /// `GREP_COLORS` and `GREP_COLOR`, and GNU grep's warning about the latter.
    pub(super) fn colors(&self) -> (Colors, Option<String>) {
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
    pub(super) fn binary_files(&self) -> BinaryFiles {
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

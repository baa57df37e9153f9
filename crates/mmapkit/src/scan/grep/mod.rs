//! `grep`: the lines of a file that match a regex, with GNU grep's line
//! semantics, searched in parallel over line-aligned ranges.
//!
//! The search ([`Grep`], `search.rs`) only finds lines: it reports each
//! selected line (number, offset, bytes, match spans), context lines and
//! context breaks, and per-file begin and end to a [`Sink`]. It never
//! formats anything. Printers are sinks: [`GnuPrinter`] prints GNU grep's
//! text output, [`JsonPrinter`] JSON lines, and [`Collect`] gathers lines
//! for bindings. [`walk`] visits the files `grep -r` searches, on several
//! threads, each file searched whole on the thread that found it. On several
//! threads the printers fork ([`Sink::fork`]): each range's lines are
//! formatted on its search thread and the bytes joined in file order.
//!
//! # Semantics
//!
//! * A line is the bytes up to (excluding) a `\n`; the last line may lack
//!   its newline (printed output adds one, like grep). `\r` is an ordinary
//!   byte, so in CRLF files `$` matches after it, not before.
//! * A line is selected when the regex matches somewhere **inside** it
//!   (a match never spans lines, even for patterns like `a\sb` or
//!   `[^x]*`); with `invert`, when it does not. `word` (`-w`) wants a match
//!   with no word byte (`[0-9A-Za-z_]`) right before or after it, `line`
//!   (`-x`) one that is the whole line.
//! * Patterns use the [`regex`] crate's syntax (close to `grep -E` and
//!   ripgrep); several patterns are alternatives, and a pattern containing
//!   a newline is several patterns, as in grep. `^` and `$` match at line
//!   starts and ends.
//! * **One byte rule (GNU grep under `LC_ALL=C`, `scan/byte_regex.rs`,
//!   shared with `replace`):** patterns are bytes and match bytes,
//!   not characters: `.` is any byte but `\n`, `\w`, `\d`, `\s`, `\b` and
//!   `[[:alpha:]]`-style classes are ASCII, and `-i` folds ASCII letters
//!   only. A non-ASCII literal (`é`) matches its UTF-8 bytes. `(?u)`
//!   turns Unicode classes on inside a pattern.
//! * `max_count` stops after that many selected lines.
//! * Binary files ([`GrepOptions::binary_files`], [`BinaryFiles`]): with
//!   GNU grep 3.8's rules, a file is binary from the 96 KiB buffer holding
//!   its first NUL byte on (a file with holes from the start); there NUL
//!   ends lines too (such files, and `-z` ones, are searched front to
//!   back), and the sink is told ([`Sink::binary`]): [`GnuPrinter`] prints
//!   none of the selected lines from there, stopping at the first and
//!   noting that the file matched. `-w` (`word`) asserts the bytes around
//!   a match, so word matches may be adjacent.
//!
//! Results are the same for every strategy, thread count and window size.

mod pattern;
mod print;
mod search;
mod sink;
mod walk;

use std::path::Path;
use std::sync::atomic::AtomicUsize;

use regex::bytes::Regex;
use regex_automata::meta;

use super::byte_regex;
use super::engine::ScanOptions;
use crate::{Error, Result};

pub(crate) use pattern::whole_haystack_assertions;
pub use print::{GnuPrinter, JsonPrinter, PrintOptions, Report};
pub use sink::{Collect, FileInfo, Forked, Formatted, Needs, Sink, SinkLine};
pub use walk::{walk, walk_files, Devices, NameFilter, Visit, WalkOptions};

crate::options! {
    /// What selects a line (the subset of GNU grep's matching options that
    /// makes sense for one regex over files). How lines are shown is the
    /// printer's business ([`PrintOptions`]).
    ///
    /// Built from `default()` and one setter per field (every options struct
    /// of the crate is built this way; see [`crate::options!`]):
    ///
    /// ```
    /// use mmapkit::scan::grep::GrepOptions;
    /// let o = GrepOptions::default().patterns(vec!["err".into()]).ignore_case(true);
    /// assert!(o.ignore_case && !o.invert);
    /// ```
    ///
    /// ```compile_fail,E0639
    /// // Not as a struct literal outside the crate (`#[non_exhaustive]`:
    /// // adding a field must not break callers).
    /// use mmapkit::scan::grep::GrepOptions;
    /// let o = GrepOptions { ignore_case: true, ..GrepOptions::default() };
    /// ```
    #[derive(Clone, Debug, Default)]
    pub struct GrepOptions {
        /// The patterns (`-e`), tried as alternatives: bytes, so a pattern
        /// need not be UTF-8 (see [`crate::scan`]'s byte rule). A pattern
        /// containing newlines is one pattern per line, as in grep.
        pub patterns: Vec<Vec<u8>>,
        /// `-F`: the patterns are literal strings, not regexes.
        pub fixed: bool,
        /// `-G`: the patterns are POSIX basic regexes (GNU grep's dialect),
        /// translated to the extended syntax (no back-references).
        pub basic: bool,
        /// `-i`: ignore (ASCII) case.
        pub ignore_case: bool,
        /// `-v`: select the lines that do **not** match.
        pub invert: bool,
        /// `-w`: only matches that are whole words count.
        pub word: bool,
        /// `-x`: only matches of the whole line count (wins over `word`).
        pub line: bool,
        /// `-m`: stop after this many selected lines (per file).
        pub max_count: Option<u64>,
        /// Binary files (`--binary-files`): [`BinaryFiles::Text`] (the
        /// default here: every line is data) or GNU grep's rules.
        pub binary_files: BinaryFiles,
        /// `-z`: lines end in NUL bytes, not newlines.
        pub null_data: bool,
    }
}

/// What to do with a binary file (GNU grep's `--binary-files=TYPE`). A
/// file is binary, as GNU grep 3.8 decides, from the 96 KiB read buffer
/// holding its first NUL byte on (the line carried into that buffer
/// included; a file with holes from the start). From there NUL bytes end
/// lines too, and a printer shows none of the selected lines (GNU grep:
/// "binary file matches").
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BinaryFiles {
    /// GNU grep's default: detect, NUL ends lines, lines not printed.
    Binary,
    /// `-a`: no detection, a NUL byte is data.
    #[default]
    Text,
    /// `-I`: a binary file has no match (from the point it is found
    /// binary; lines printed before stay).
    WithoutMatch,
}

crate::named_enum!(BinaryFiles, "binary-files type", {
    Binary => "binary",
    Text => "text",
    WithoutMatch => "without-match",
});

/// A compiled search: build once, run over any number of files.
#[derive(Debug)]
pub struct Grep {
    opts: GrepOptions,
    re: Regex,
    /// The line end: `\n`, or NUL with `null_data`.
    eol: u8,
    /// Unique per compiled regex: keys the per-thread clones.
    id: u64,
    /// The pattern uses assertions about the whole haystack (`\A`, `\z`,
    /// `(?-m)`): match line by line instead of whole windows.
    per_line: bool,
    /// No match can contain a newline: the end of the first match found
    /// in a window (an earliest-match search, the cheapest kind) tells the
    /// first matching line, with no confirmation.
    line_bounded: bool,
    /// The same regex as `re` for finding matching lines, as two engines:
    /// [`FINDER_PREFILTER`] (regex-automata's meta regex with its literal
    /// prefilters, as `regex` has it) and [`FINDER_DFA`] (no prefilter: the
    /// lazy DFA reads every byte). The prefilters pick their literals by
    /// byte frequencies of ordinary text: on data where those literals are
    /// everywhere (digits, commas in a CSV) every candidate costs a
    /// verification, and the plain DFA is several times faster.
    finders: [meta::Regex; 2],
    /// The finder chosen for the current search (see `search.rs`,
    /// `choose_finder`); only speed depends on it, never the answer.
    finder: AtomicUsize,
    /// Always this finder, no timing (tests: each finder must give the
    /// same answers).
    forced: Option<usize>,
}

/// [`Grep::finders`]: with the literal prefilter.
pub(crate) const FINDER_PREFILTER: usize = 0;
/// [`Grep::finders`]: the lazy DFA alone.
pub(crate) const FINDER_DFA: usize = 1;

impl Grep {
    /// Compiles the options' patterns; an invalid regex is
    /// [`Error::InvalidArgument`] with the regex error's text.
    pub fn new(opts: &GrepOptions) -> Result<Grep> {
        let mut parts: Vec<String> = opts
            .patterns
            .iter()
            .flat_map(|p| p.split(|&b| b == b'\n'))
            .map(|p| byte_regex::source(p, opts.fixed))
            .collect();
        if opts.basic && !opts.fixed {
            for p in &mut parts {
                *p = pattern::basic_to_extended(p)
                    .map_err(|e| Error::InvalidArgument(format!("invalid regex: {e}")))?;
            }
        }
        if parts.is_empty() {
            // No pattern at all (`grep -f /dev/null`): nothing matches.
            parts.push("[a&&b]".into());
        }
        let eol = if opts.null_data { 0 } else { b'\n' };
        let build = |p: &str| byte_regex::build_eol(p, true, opts.ignore_case, eol);
        let joined = if parts.len() == 1 {
            build(&parts[0])?;
            parts[0].clone()
        } else {
            // Each alternative must be valid on its own (`a)|(b` is not two
            // valid patterns even though `(?:a)|(b)` parses).
            for p in &parts {
                build(p)?;
            }
            parts.iter().map(|p| format!("(?:{p})")).collect::<Vec<_>>().join("|")
        };
        let pattern = if opts.line {
            format!("^(?:{joined})$")
        } else if opts.word {
            // GNU grep's rule: no word byte right before or after the match.
            // Asserted, not consumed, so word matches may be adjacent (`.`
            // in "a ... b" three times); a leftmost-first search still
            // finds a word match when a shorter or longer alternative at
            // the same start is not one.
            format!(r"\b{{start-half}}(?:{joined})\b{{end-half}}")
        } else {
            joined
        };
        let re = build(&pattern)?;
        // The finders: `re`'s syntax and match semantics (a bytes regex:
        // empty matches may split UTF-8).
        let finder = |prefilter: bool| {
            meta::Builder::new()
                .syntax(byte_regex::syntax(opts.ignore_case).line_terminator(eol))
                .configure(meta::Config::new().utf8_empty(false).auto_prefilter(prefilter))
                .build(&pattern)
                .map_err(|e| Error::InvalidArgument(format!("invalid regex: {e}")))
        };
        let finders = [finder(true)?, finder(false)?];
        let per_line = !opts.fixed && parts.iter().any(|p| whole_haystack_assertions(p));
        // (With -z any pattern may match a newline, and is then checked.)
        let line_bounded = !opts.null_data
            && (opts.fixed || parts.iter().all(|p| pattern::cannot_match_newline(p)));
        Ok(Grep {
            opts: opts.clone(),
            re,
            eol,
            id: super::local::next_id(),
            per_line,
            line_bounded,
            finders,
            finder: AtomicUsize::new(FINDER_PREFILTER),
            forced: None,
        })
    }

    /// Searches with the finder `which` ([`FINDER_PREFILTER`] or
    /// [`FINDER_DFA`]) on every file, instead of timing both on large
    /// ones (for the equivalence tests and the fuzz harness,
    /// `crates/mmapkit-fuzz`, whose inputs are too small to time: 0 or 1).
    #[doc(hidden)]
    pub fn force_finder(&mut self, which: usize) {
        self.forced = Some(which);
        self.finder.store(which, std::sync::atomic::Ordering::Relaxed);
    }

    /// The options this search was built with.
    pub fn options(&self) -> &GrepOptions {
        &self.opts
    }

    /// Number of selected lines (capped by `max_count`).
    pub fn count(&self, path: impl AsRef<Path>, opts: &ScanOptions) -> Result<u64> {
        self.search(path, opts, &mut sink::Counter)
    }

    /// [`Grep::count`] over a stream, read sequentially in bounded memory
    /// (`opts.chunk` bytes at a time). `name` labels errors.
    pub fn count_reader(
        &self,
        input: &mut dyn std::io::Read,
        name: &Path,
        opts: &ScanOptions,
    ) -> Result<u64> {
        self.search_reader(input, name, opts, &mut sink::Counter)
    }

    /// The matches inside one line, empty ones included.
    pub(crate) fn spans(&self, re: &Regex, line: &[u8], out: &mut Vec<(usize, usize)>) {
        out.clear();
        out.extend(re.find_iter(line).map(|m| (m.start(), m.end())));
    }
}

/// Number of selected lines: matching ones, or non-matching ones with
/// `invert`, capped by `max_count`.
pub fn grep_count(path: impl AsRef<Path>, grep: &GrepOptions, opts: &ScanOptions) -> Result<u64> {
    Grep::new(grep)?.count(path, opts)
}

/// Writes the selected lines of one file to `out` exactly as GNU grep
/// prints them with `print`'s options; returns the number of selected
/// lines.
///
/// ```no_run
/// use mmapkit::scan::{self, GrepOptions, PrintOptions, ScanOptions};
/// let g = GrepOptions::default().patterns(vec!["ERR[0-9]+".into()]);
/// let p = PrintOptions::default().line_numbers(true);
/// let n = scan::grep("app.log", &g, &p, &ScanOptions::default(), &mut std::io::stdout().lock())?;
/// # Ok::<(), mmapkit::Error>(())
/// ```
pub fn grep(
    path: impl AsRef<Path>,
    grep: &GrepOptions,
    print: &PrintOptions,
    opts: &ScanOptions,
    out: &mut dyn std::io::Write,
) -> Result<u64> {
    let mut printer = GnuPrinter::new(out, print.clone());
    Grep::new(grep)?.search(path, opts, &mut printer)
}

/// The selected lines as `(line number, offset, line without newline)`
/// (with `only_matching`, one entry per non-empty match: its offset and
/// bytes), at most `limit` entries.
pub fn grep_lines(
    path: impl AsRef<Path>,
    grep: &GrepOptions,
    only_matching: bool,
    opts: &ScanOptions,
    limit: Option<usize>,
) -> Result<Vec<(u64, u64, Vec<u8>)>> {
    let g = Grep::new(grep)?;
    let mut sink = Collect::new(only_matching, limit);
    if limit != Some(0) {
        g.search(path, opts, &mut sink)?;
    }
    Ok(sink.found)
}

#[cfg(test)]
mod tests;

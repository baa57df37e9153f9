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
//! * With [`GrepOptions::perl`] (`-P`) the pattern is PCRE2's, matched
//!   one line at a time as GNU grep does (`pcre.rs`: one pattern only,
//!   lookarounds, `\K`, back-references); the search around it, the
//!   printers and every option are the same (`matcher.rs`'s `LineMatcher`
//!   is all the search knows of an engine).
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

mod colors;
mod inner;
mod matcher;
mod pattern;
mod pcre;
mod print;
mod search;
mod sink;
mod spans;
mod walk;

use std::path::Path;

use super::engine::ScanOptions;
use crate::Result;
use matcher::Matcher;
#[cfg(test)]
use matcher::{FINDER_DFA, FINDER_PREFILTER};

pub use colors::Colors;
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
        /// containing newlines is one pattern per line, as in grep. The
        /// regex crate's syntax, read as GNU grep reads an extended regex
        /// where they differ (intervals, bracket expressions); an invalid
        /// one is GNU grep's error.
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
        /// `-P`: the pattern is a Perl-compatible regex, matched by PCRE2
        /// line by line (one pattern only; with `fixed` or `basic`, an
        /// error: "conflicting matchers specified"). See `pcre.rs`.
        pub perl: bool,
    }
}

impl GrepOptions {
    /// GNU grep's "cannot match" shortcut: options under which no line is
    /// ever selected, seen before a pattern is compiled or a file opened,
    /// so grep exits 1 at once (quietly, even for missing files; a caller
    /// listing files without a match, `-L`, still reads them): `-m 0`, no
    /// pattern at all (`-f /dev/null`, whatever `-x`/`-w` say), or only
    /// empty patterns inverted (`-v ''`) without `-x` or `-w`.
    pub fn selects_nothing(&self) -> bool {
        let mut parts = self.patterns.iter().flat_map(|p| p.split(|&b| b == b'\n'));
        let only_empty = parts.all(|p| p.is_empty());
        self.max_count == Some(0)
            || (self.patterns.is_empty() && !self.invert)
            || (!self.patterns.is_empty() && only_empty && self.invert && !self.line && !self.word)
    }
}

/// The regex crate text an extended pattern compiles to, as GNU grep
/// reads it (intervals, class checks; see `pattern.rs`): for the fuzz
/// harness's reference, which matches the same regex line by line.
#[doc(hidden)]
pub fn extended_source(p: &str) -> Result<String> {
    pattern::gnu_extended(p)
        .map_err(|e| crate::Error::InvalidArgument(format!("invalid regex: {e}")))
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
    /// The engine: the regex crate's, or PCRE2 with `perl`.
    matcher: Matcher,
    /// The line end: `\n`, or NUL with `null_data`.
    eol: u8,
    /// Unique per compiled search: keys the per-thread matchers.
    id: u64,
}

impl Grep {
    /// Compiles the options' patterns; an invalid pattern is
    /// [`crate::Error::InvalidArgument`] with the engine's error text.
    pub fn new(opts: &GrepOptions) -> Result<Grep> {
        Ok(Grep {
            opts: opts.clone(),
            matcher: Matcher::new(opts)?,
            eol: if opts.null_data { 0 } else { b'\n' },
            id: super::local::next_id(),
        })
    }

    /// Searches with the regex engine's line finder `which` (0: with the
    /// literal prefilter, 1: the lazy DFA alone) on every file, instead of timing both on large
    /// ones (for the equivalence tests and the fuzz harness,
    /// `crates/mmapkit-fuzz`, whose inputs are too small to time: 0 or 1).
    /// No effect with `perl` (PCRE2 has one engine).
    #[doc(hidden)]
    pub fn force_finder(&mut self, which: usize) {
        if let Matcher::Regex(m) = &self.matcher {
            m.force_finder(which);
        }
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

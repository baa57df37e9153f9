//! `-P`: Perl-compatible regexes through PCRE2 (its JIT where the platform
//! has one), matched as GNU grep 3.8 matches them: one line at a time (the
//! line is the subject, so `^`, `$`, `\A`, `\z` and lookbehinds see only
//! it), `-w` as `(?<!\w)(?:P)(?!\w)`, `-x` as `^(?:P)\z`, and one pattern
//! only (`-e a -e b`, a pattern with a newline and a pattern file of two
//! lines are refused, as GNU grep refuses them, once repeated patterns
//! are dropped; no pattern at all, as from `-f /dev/null`, matches
//! nothing).
//!
//! The byte rule (`scan/byte_regex.rs`) holds here too: UTF mode is off,
//! so a pattern and a line are bytes, `.` is one byte, `\w`, `\d`, `\b`
//! and POSIX classes are ASCII (PCRE2's C-locale tables) and `-i` folds
//! ASCII letters; a pattern byte that is not UTF-8 is written `\xHH`, which
//! matches that byte. `(?u)` is the regex crate's flag, not PCRE2's (an
//! error, as in GNU grep); PCRE2's own `(*UTF)` / `(*UCP)` at the start of
//! a pattern turn UTF-8 and Unicode properties on, and a line that is not
//! valid UTF-8 is then a matching error, as in GNU grep under `LC_ALL=C`.
//!
//! A matching error (the match limit of a catastrophically backtracking
//! pattern, the JIT stack, invalid UTF-8 under `(*UTF)`) is an error of
//! the file searched, never a silent non-match.

use std::cell::RefCell;
use std::ops::ControlFlow;

use memchr::memchr;
use pcre2::bytes::{Regex, RegexBuilder};

use super::matcher::LineMatcher;
use super::GrepOptions;
use crate::scan::byte_regex;
use crate::{Error, Result};

/// The largest JIT stack a match may grow (PCRE2's default is 32 KiB,
/// which deeply nested patterns exhaust; ripgrep allows 10 MiB too).
const JIT_STACK_MAX: usize = 10 << 20;

/// A compiled `-P` pattern.
#[derive(Debug)]
pub(super) struct PcreMatcher {
    re: Regex,
    /// The line end: `\n`, or NUL with `null_data`.
    eol: u8,
}

impl PcreMatcher {
    pub(super) fn new(opts: &GrepOptions) -> Result<PcreMatcher> {
        if opts.fixed || opts.basic {
            return Err(Error::InvalidArgument("conflicting matchers specified".into()));
        }
        // (GNU grep drops repeated patterns first: `-e a -e a` is one.)
        let mut parts = opts.patterns.iter().flat_map(|p| p.split(|&b| b == b'\n'));
        let first = parts.next();
        if parts.any(|p| Some(p) != first) {
            return Err(Error::InvalidArgument(
                "the -P option only supports a single pattern".into(),
            ));
        }
        let build = |source: &str| {
            RegexBuilder::new()
                .caseless(opts.ignore_case)
                .jit_if_available(true)
                .max_jit_stack_size(Some(JIT_STACK_MAX))
                .build(source)
        };
        let source = match first {
            Some(p) => byte_regex::source(p, false),
            None => "(*FAIL)".into(), // no pattern: nothing matches
        };
        // As GNU grep compiles it: -w wraps the pattern's text (so `a)|(b`
        // is a pattern with -w), -x is PCRE2's whole-line option, which
        // takes only a pattern valid on its own. An error is told for the
        // pattern alone when it has one (its offset is then the pattern's).
        let inner = if opts.word { format!(r"(?<!\w)(?:{source})(?!\w)") } else { source.clone() };
        let failed = |e: pcre2::Error| {
            let e = if inner == source { e } else { build(&source).err().unwrap_or(e) };
            let shown = String::from_utf8_lossy(first.unwrap_or_default());
            Error::InvalidArgument(format!("invalid -P pattern '{shown}': {e}"))
        };
        let mut re = build(&inner).map_err(failed)?;
        if opts.line {
            re = build(&format!(r"^(?:{inner})\z")).map_err(failed)?;
        }
        Ok(PcreMatcher { re, eol: if opts.null_data { 0 } else { b'\n' } })
    }

    /// A matcher for this thread: its own copy of the regex (its own pool
    /// of match data, so threads never contend for one).
    pub(super) fn local(&self) -> PcreLocal {
        PcreLocal { re: self.re.clone(), eol: self.eol, error: RefCell::new(None) }
    }
}

/// One thread's `-P` matcher.
pub(super) struct PcreLocal {
    re: Regex,
    eol: u8,
    /// The first matching error since [`LineMatcher::take_error`].
    error: RefCell<Option<String>>,
}

impl PcreLocal {
    fn fail(&self, e: &pcre2::Error) {
        self.error.borrow_mut().get_or_insert_with(|| e.to_string());
    }
}

impl LineMatcher for PcreLocal {
    fn matching_lines(
        &self,
        w: &[u8],
        mut f: impl FnMut(usize, usize) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let n = w.len();
        let mut pos = 0;
        while pos < n {
            let le = memchr(self.eol, &w[pos..]).map_or(n, |i| pos + i);
            match self.re.is_match(&w[pos..le]) {
                Ok(true) => f(pos, le)?,
                Ok(false) => {}
                Err(e) => {
                    self.fail(&e);
                    return ControlFlow::Break(());
                }
            }
            pos = le + 1;
        }
        ControlFlow::Continue(())
    }

    /// GNU grep's iteration: each search starts where the last match
    /// ended (lookbehinds see the line before it), one byte further after
    /// an empty match.
    fn spans(&self, line: &[u8], out: &mut Vec<(usize, usize)>) {
        out.clear();
        let mut at = 0;
        while at <= line.len() {
            match self.re.find_at(line, at) {
                Ok(Some(m)) => {
                    let (s, e) = (m.start(), m.end().max(m.start()));
                    out.push((s, e));
                    at = if e > s { e } else { s + 1 };
                }
                Ok(None) => break,
                Err(e) => {
                    self.fail(&e);
                    break;
                }
            }
        }
    }

    fn take_error(&self) -> Option<String> {
        self.error.borrow_mut().take()
    }
}

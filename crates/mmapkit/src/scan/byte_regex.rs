//! The one byte rule of every pattern tool (`grep`, `replace`): a pattern
//! is bytes and matches bytes, as GNU grep and sed do under `LC_ALL=C`.
//! `.` is any byte but `\n`, `\w`, `\d`, `\s`, `\b` and `[[:alpha:]]`-style
//! classes are ASCII, case folding is ASCII, and a non-ASCII literal
//! matches its bytes (UTF-8 text as its UTF-8 bytes, other bytes as
//! themselves); `(?u)` turns Unicode classes on inside a pattern. Both
//! tools build their regexes here, so they cannot drift apart. `grep -P`
//! (PCRE2, `grep/pcre.rs`) keeps the same rule with UTF mode off (there
//! `(*UTF)`/`(*UCP)` opt into Unicode, `(?u)` being no PCRE2 syntax) and
//! writes its pattern bytes with [`source`] too.

use regex::bytes::{Regex, RegexBuilder};
use regex_automata::util::syntax;

use crate::{Error, Result};

/// The regex source for a pattern given as bytes: valid UTF-8 stays as it
/// is, any other byte becomes `\xHH` (which, with Unicode off, matches
/// that byte). With `fixed`, the pattern is a literal: every
/// metacharacter is escaped.
pub(crate) fn source(pattern: &[u8], fixed: bool) -> String {
    let mut out = String::with_capacity(pattern.len());
    for chunk in pattern.utf8_chunks() {
        let valid = chunk.valid();
        if fixed {
            out.push_str(&regex::escape(valid));
        } else {
            out.push_str(valid);
        }
        for b in chunk.invalid() {
            out.push_str(&format!("\\x{b:02X}"));
        }
    }
    out
}

/// Compiles `source` under the byte rule (`multi_line`: `^`/`$` at line
/// starts and ends); an invalid regex is [`Error::InvalidArgument`].
pub(crate) fn build(source: &str, multi_line: bool, ignore_case: bool) -> Result<Regex> {
    build_eol(source, multi_line, ignore_case, b'\n')
}

/// [`build`] with lines ending in `eol` (`grep -z`: NUL).
pub(crate) fn build_eol(
    source: &str,
    multi_line: bool,
    ignore_case: bool,
    eol: u8,
) -> Result<Regex> {
    RegexBuilder::new(source)
        .multi_line(multi_line)
        .line_terminator(eol)
        .unicode(false)
        .case_insensitive(ignore_case)
        .build()
        .map_err(|e| Error::InvalidArgument(format!("invalid regex: {e}")))
}

/// The same rule as regex-automata syntax (for engines built from it).
pub(crate) fn syntax(ignore_case: bool) -> syntax::Config {
    syntax::Config::new().multi_line(true).unicode(false).utf8(false).case_insensitive(ignore_case)
}

#[cfg(test)]
mod tests;

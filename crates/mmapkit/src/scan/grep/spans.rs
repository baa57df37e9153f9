//! The match spans GNU grep shows in a line (`-o`, `--color`, `-b -o`),
//! found its way: POSIX leftmost-longest over all the patterns at once
//! (several `-e` patterns are one alternation, and among the matches at
//! the leftmost start the longest wins, whichever pattern it comes from),
//! each search starting where the last match ended, one byte further
//! after an empty one. The regex crate is leftmost-first (`x*|[0-9]+`
//! matches empty before `123`), so two engines of the same regex are
//! combined: a leftmost-first search gives the leftmost start (the same
//! start for both semantics) and an anchored search with
//! [`MatchKind::All`] from there the longest end.

use regex_automata::{meta, Anchored, Input, MatchKind};

use super::GrepOptions;
use crate::scan::byte_regex;
use crate::{Error, Result};

/// The two engines of one pattern, shared by every thread.
#[derive(Debug)]
pub(super) struct Spans {
    /// Leftmost-first, unanchored: where the leftmost match starts.
    first: meta::Regex,
    /// Every match state kept: anchored, the longest match's end.
    longest: meta::Regex,
    /// `-w` without `-x`: GNU grep's word loop ([`Spans::word_match`]).
    word: bool,
}

/// One thread's caches for [`Spans`].
pub(super) struct SpansCache {
    first: meta::Cache,
    longest: meta::Cache,
}

impl Spans {
    /// The engines for `pattern`: the patterns joined (and with `-x`
    /// anchored to the line), never with `-w`'s assertions, which GNU
    /// grep checks around each match instead.
    pub(super) fn new(pattern: &str, opts: &GrepOptions, eol: u8) -> Result<Spans> {
        let build = |kind: MatchKind| {
            meta::Builder::new()
                .syntax(byte_regex::syntax(opts.ignore_case).line_terminator(eol))
                // The syntax's line terminator shapes the pattern; the
                // engine's decides where (?m)^ and $ match (NUL with -z).
                .configure(
                    meta::Config::new().utf8_empty(false).match_kind(kind).line_terminator(eol),
                )
                .build(pattern)
                .map_err(|e| Error::InvalidArgument(format!("invalid regex: {e}")))
        };
        Ok(Spans {
            first: build(MatchKind::LeftmostFirst)?,
            longest: build(MatchKind::All)?,
            word: opts.word && !opts.line,
        })
    }

    pub(super) fn cache(&self) -> SpansCache {
        SpansCache { first: self.first.create_cache(), longest: self.longest.create_cache() }
    }

    /// The matches GNU grep shows in `line` (no line end inside), in
    /// order; empty ones are not reported.
    pub(super) fn find(&self, c: &mut SpansCache, line: &[u8], out: &mut Vec<(usize, usize)>) {
        out.clear();
        let mut cur = 0;
        while cur < line.len() {
            let found = if self.word {
                self.word_match(c, line, cur)
            } else {
                self.leftmost_longest(c, line, cur)
            };
            let Some((s, e)) = found else { break };
            if e > s {
                out.push((s, e));
                cur = e;
            } else {
                cur = s + 1;
            }
        }
    }

    /// The leftmost-longest match starting at or after `from` (the bytes
    /// before it are context for `^` and `\b`).
    fn leftmost_longest(
        &self,
        c: &mut SpansCache,
        line: &[u8],
        from: usize,
    ) -> Option<(usize, usize)> {
        let s = self.first.search_with(&mut c.first, &Input::new(line).range(from..))?.start();
        let e = self.longest_at(c, line, s, line.len())?;
        Some((s, e))
    }

    /// The end of the longest match starting at `s` and ending by `lim`;
    /// `$` does not match at `lim` unless it is the line's end.
    fn longest_at(&self, c: &mut SpansCache, line: &[u8], s: usize, lim: usize) -> Option<usize> {
        let input = Input::new(line).span(s..lim).anchored(Anchored::Yes);
        self.longest.search_half_with(&mut c.longest, &input).map(|m| m.offset())
    }

    /// GNU grep 3.8's `-w` search from `ptr` (`EGexecute` with a start
    /// pointer): the leftmost-longest match; when a word byte touches it,
    /// the longest shorter match at the same start (repeatedly), then the
    /// leftmost-longest one a byte further on. GNU limits the shorter
    /// match to the first `start + len - ptr` bytes of the line where
    /// `start + len` was meant, so after the line's first match a shorter
    /// one is rarely found; that is kept, since it decides what GNU prints
    /// (`""|[[:punct:]]` on `.""r` shows only `.`).
    fn word_match(&self, c: &mut SpansCache, line: &[u8], ptr: usize) -> Option<(usize, usize)> {
        // (`usize::MAX` for the byte before the line: none)
        let word = |i: usize| line.get(i).is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_');
        let (mut m, e) = self.leftmost_longest(c, line, ptr)?;
        let mut len = e - m;
        loop {
            if !word(m.wrapping_sub(1)) && !word(m + len) {
                return Some((m, m + len));
            }
            let mut shorter = None;
            if len > 0 {
                len -= 1;
                let lim = (m + len).checked_sub(ptr).filter(|&lim| lim >= m);
                shorter = lim.and_then(|lim| self.longest_at(c, line, m, lim)).filter(|&e| e > m);
            }
            match shorter {
                Some(e) => len = e - m,
                None => {
                    if m >= line.len() {
                        return None;
                    }
                    let (s, e) = self.leftmost_longest(c, line, m + 1)?;
                    (m, len) = (s, e - s);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spans(pattern: &str, line: &[u8]) -> Vec<(usize, usize)> {
        let s = Spans::new(pattern, &GrepOptions::default(), b'\n').unwrap();
        let mut out = Vec::new();
        s.find(&mut s.cache(), line, &mut out);
        out
    }

    /// With -z a newline is data: `^` matches at the record's start only.
    #[test]
    fn anchors_follow_the_line_end_byte() {
        let s = Spans::new("(?:^later)|(?:or)", &GrepOptions::default(), 0).unwrap();
        let mut out = Vec::new();
        s.find(&mut s.cache(), b"x\nlater or", &mut out);
        assert_eq!(out, vec![(8, 10)]);
    }

    #[test]
    fn end_of_text_after_an_empty_alternative() {
        assert_eq!(spans(r"(?:^$|)|(?:ax|y\z)", b"a\x0c\0\0\x14\0\0\x08\0y"), vec![(9, 10)]);
    }
}

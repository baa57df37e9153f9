//! The matchers under the search. The search (`search.rs`) finds lines and
//! the printers show match spans only through [`LineMatcher`], so the
//! engine is a choice made once per [`super::Grep`]: the regex crate's
//! ([`RegexMatcher`], the default: whole windows of lines searched at once,
//! literal prefilters, a choice of line finders) or PCRE2 (`pcre.rs`, `-P`:
//! line by line, as GNU grep does). Dispatch is one `match` per window or
//! line ([`Local`]), never per byte, so the regex fast paths cost the same
//! as before the abstraction.

use std::cell::RefCell;
use std::ops::ControlFlow;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use memchr::{memchr, memrchr};
use regex::bytes::Regex;
use regex_automata::util::prefilter::Prefilter;
use regex_automata::{meta, Input, Span};

use super::pcre::{PcreLocal, PcreMatcher};
use super::spans::{Spans, SpansCache};
use super::{pattern, GrepOptions};
use crate::scan::{byte_regex, local};
use crate::{Error, Result};

/// What the search asks of one thread's matcher.
pub(super) trait LineMatcher {
    /// Calls `f(start, end)` for every line of `w` (whole lines, the last
    /// one may lack its end; `end` excludes the line end) that holds a
    /// match, in order, until `f` breaks. A matcher that fails (PCRE2's
    /// limits) breaks and keeps the error for [`LineMatcher::take_error`].
    fn matching_lines(
        &self,
        w: &[u8],
        f: impl FnMut(usize, usize) -> ControlFlow<()>,
    ) -> ControlFlow<()>;

    /// The matches inside one line, in order, as GNU grep finds them for
    /// `-o` and `--color` (empty ones may be included: the printers skip
    /// them).
    fn spans(&self, line: &[u8], out: &mut Vec<(usize, usize)>);

    /// The error that stopped this thread's matcher since the last call
    /// (a message; the search names the file).
    fn take_error(&self) -> Option<String>;
}

/// A compiled matcher, shared by every thread of a search.
#[derive(Debug)]
pub(super) enum Matcher {
    Regex(Arc<RegexMatcher>),
    Pcre(Arc<PcreMatcher>),
}

impl Matcher {
    /// Compiles the options' patterns with the engine they ask for.
    pub(super) fn new(opts: &GrepOptions) -> Result<Matcher> {
        Ok(if opts.perl {
            Matcher::Pcre(Arc::new(PcreMatcher::new(opts)?))
        } else {
            Matcher::Regex(Arc::new(RegexMatcher::new(opts)?))
        })
    }

    /// This thread's matcher (its own regex copy and caches), kept per
    /// thread under `id` (see [`crate::scan::local`]).
    pub(super) fn local(&self, id: u64) -> Rc<Local> {
        local::per_thread(id, || match self {
            Matcher::Regex(m) => Local::Regex(RegexLocal::new(m)),
            Matcher::Pcre(m) => Local::Pcre(m.local()),
        })
    }
}

/// One thread's matcher.
#[allow(
    clippy::large_enum_variant,
    reason = "one per thread, already behind an Rc: a box would only add an indirection per window"
)]
pub(super) enum Local {
    Regex(RegexLocal),
    Pcre(PcreLocal),
}

impl LineMatcher for Local {
    fn matching_lines(
        &self,
        w: &[u8],
        f: impl FnMut(usize, usize) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        match self {
            Local::Regex(m) => m.matching_lines(w, f),
            Local::Pcre(m) => m.matching_lines(w, f),
        }
    }

    fn spans(&self, line: &[u8], out: &mut Vec<(usize, usize)>) {
        match self {
            Local::Regex(m) => m.spans(line, out),
            Local::Pcre(m) => m.spans(line, out),
        }
    }

    fn take_error(&self) -> Option<String> {
        match self {
            Local::Regex(_) => None,
            Local::Pcre(m) => m.take_error(),
        }
    }
}

/// [`RegexMatcher::finders`]: with the literal prefilter.
pub(crate) const FINDER_PREFILTER: usize = 0;
/// [`RegexMatcher::finders`]: the lazy DFA alone.
pub(crate) const FINDER_DFA: usize = 1;

/// The regex crate's engines, under the byte rule (`scan/byte_regex.rs`).
#[derive(Debug)]
pub(super) struct RegexMatcher {
    re: Regex,
    /// The line end: `\n`, or NUL with `null_data`.
    eol: u8,
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
    /// Literals one of which every match contains, where the pattern's
    /// prefix has no good ones (see `inner.rs`): [`FINDER_PREFILTER`]
    /// then searches for them and runs the regex only on the lines they
    /// are in (line-bounded patterns only).
    inner: Option<Prefilter>,
    /// The finder chosen for the current search (see
    /// [`RegexLocal::choose_finder`]); only speed depends on it, never the
    /// answer.
    finder: AtomicUsize,
    /// Always the finder in `finder`, no timing (tests: each finder must
    /// give the same answers).
    forced: AtomicBool,
    /// The spans of a line as GNU grep shows them (leftmost-longest).
    spans: Spans,
}

impl RegexMatcher {
    fn new(opts: &GrepOptions) -> Result<RegexMatcher> {
        let mut parts: Vec<String> = opts
            .patterns
            .iter()
            .flat_map(|p| p.split(|&b| b == b'\n'))
            .map(|p| byte_regex::source(p, opts.fixed))
            .collect();
        if !opts.fixed {
            let gnu = if opts.basic { pattern::basic_to_extended } else { pattern::gnu_extended };
            for p in &mut parts {
                *p = gnu(p).map_err(|e| Error::InvalidArgument(format!("invalid regex: {e}")))?;
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
            joined.clone()
        };
        let re = build(&pattern)?;
        // The finders: `re`'s syntax and match semantics (a bytes regex:
        // empty matches may split UTF-8).
        let finder = |prefilter: bool| {
            meta::Builder::new()
                .syntax(byte_regex::syntax(opts.ignore_case).line_terminator(eol))
                .configure(
                    meta::Config::new()
                        .utf8_empty(false)
                        .auto_prefilter(prefilter)
                        .line_terminator(eol),
                )
                .build(&pattern)
                .map_err(|e| Error::InvalidArgument(format!("invalid regex: {e}")))
        };
        let finders = [finder(true)?, finder(false)?];
        // `-w` is checked around each span, GNU grep's way, not asserted.
        let spans =
            Spans::new(if opts.word && !opts.line { &joined } else { &pattern }, opts, eol)?;
        let per_line = !opts.fixed && parts.iter().any(|p| pattern::whole_haystack_assertions(p));
        // (With -z any pattern may match a newline, and is then checked.)
        let line_bounded = !opts.null_data
            && (opts.fixed || parts.iter().all(|p| pattern::cannot_match_newline(p)));
        let inner = if line_bounded && !per_line {
            let syntax = byte_regex::syntax(opts.ignore_case).line_terminator(eol);
            regex_automata::util::syntax::parse_with(&pattern, &syntax)
                .ok()
                .and_then(|hir| super::inner::prefilter(&hir))
        } else {
            None
        };
        Ok(RegexMatcher {
            re,
            eol,
            per_line,
            line_bounded,
            finders,
            inner,
            finder: AtomicUsize::new(FINDER_PREFILTER),
            forced: AtomicBool::new(false),
            spans,
        })
    }

    /// See [`super::Grep::force_finder`].
    pub(super) fn force_finder(&self, which: usize) {
        self.forced.store(true, Ordering::Relaxed);
        self.finder.store(which, Ordering::Relaxed);
    }
}

/// One thread's regex (a clone has its own cache pool, so threads never
/// contend for the shared one) and caches for the finders.
pub(super) struct RegexLocal {
    m: Arc<RegexMatcher>,
    re: Regex,
    caches: [RefCell<meta::Cache>; 2],
    spans: RefCell<SpansCache>,
}

impl RegexLocal {
    fn new(m: &Arc<RegexMatcher>) -> RegexLocal {
        RegexLocal {
            m: m.clone(),
            re: m.re.clone(),
            caches: [
                RefCell::new(m.finders[0].create_cache()),
                RefCell::new(m.finders[1].create_cache()),
            ],
            spans: RefCell::new(m.spans.cache()),
        }
    }

    /// [`choose_finder`](Self::choose_finder)'s rule for a small file: the
    /// prefilter (stored only when it changes: the threads searching many
    /// small files share this word, and a store per file would bounce its
    /// cache line between them).
    pub(super) fn prefer_prefilter(&self) {
        let m = &self.m;
        if !m.forced.load(Ordering::Relaxed) && m.finder.load(Ordering::Relaxed) != FINDER_PREFILTER
        {
            m.finder.store(FINDER_PREFILTER, Ordering::Relaxed);
        }
    }

    /// Picks the faster finder for a file of `len` bytes: on a large file,
    /// both count the matching lines of a sample at its start (`sample(n)`
    /// calls its argument with the file's first `n` bytes), twice each
    /// (alternately; the best time of each counts). Only speed depends on
    /// the choice: both finders are the same regex.
    pub(super) fn choose_finder(
        &self,
        len: u64,
        sample: impl FnOnce(u64, &mut dyn FnMut(&[u8])) -> Result<()>,
    ) -> Result<()> {
        /// Files at least this long choose their line finder by timing
        /// both on a sample (smaller ones take the prefilter, as `regex`
        /// would).
        const CHOOSE_MIN: u64 = 4 << 20;
        /// The sample: the whole lines in the first 1/32 of the file, at
        /// most this many bytes (timing both finders twice costs at most
        /// ~1/8 of what searching the file with the slower one does).
        const CHOOSE_SAMPLE: u64 = 1 << 20;
        let m = &self.m;
        if m.forced.load(Ordering::Relaxed) {
            return Ok(());
        }
        if len < CHOOSE_MIN || !m.line_bounded || m.per_line {
            self.prefer_prefilter();
            return Ok(());
        }
        let mut best = [Duration::MAX; 2];
        sample(CHOOSE_SAMPLE.min(len / 32), &mut |w| {
            let w = &w[..memrchr(b'\n', w).map_or(w.len(), |i| i + 1)];
            for _ in 0..2 {
                for (which, b) in best.iter_mut().enumerate() {
                    let t = Instant::now();
                    let mut n = 0u64;
                    let _ = self.lines_with(which, w, |_, _| {
                        n += 1;
                        ControlFlow::Continue(())
                    });
                    *b = (*b).min(t.elapsed());
                    std::hint::black_box(n);
                }
            }
        })?;
        let which =
            if best[FINDER_DFA] < best[FINDER_PREFILTER] { FINDER_DFA } else { FINDER_PREFILTER };
        m.finder.store(which, Ordering::Relaxed);
        Ok(())
    }

    /// [`LineMatcher::matching_lines`] with the finder `which` (for
    /// line-bounded patterns; the others use `re`).
    ///
    /// The regex (in multi-line mode) searches whole windows of lines, so
    /// its literal optimisations skip most bytes; only around a candidate
    /// match are line boundaries looked up (`memrchr`/`memchr`). When the
    /// pattern cannot match a newline, an earliest-match search finds the
    /// end of a match and its line is selected. Otherwise a leftmost match
    /// is found: one that ends inside its line selects the line at once;
    /// one that runs past the line end is confirmed by matching the line
    /// alone (and a window where that keeps happening, as with `[^x]*y`, is
    /// finished line by line, so the work stays linear). Patterns with
    /// `\A`, `\z` or `(?-m)` are matched line by line.
    fn lines_with(
        &self,
        which: usize,
        w: &[u8],
        mut f: impl FnMut(usize, usize) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let (m, re, eol) = (&*self.m, &self.re, self.m.eol);
        let n = w.len();
        let mut pos = 0;
        let mut per_line = m.per_line;
        // Bytes that candidates spanning lines ran past their line: when a
        // pattern keeps doing that (`[^x]*y`), whole-window search would
        // rescan the same bytes; line by line is linear.
        let mut spill = 0usize;
        if m.line_bounded && !per_line {
            // Every match lies inside one line, and the first one reported
            // lies in the first line that has one: the line around its end
            // is selected. (An empty match right after the window's final
            // newline belongs to no line.)
            let finder = &m.finders[which];
            let mut cache = self.caches[which].borrow_mut();
            if let Some(inner) = m.inner.as_ref().filter(|_| which == FINDER_PREFILTER) {
                // Only a line holding one of the literals can match: each
                // such line is searched alone (the whole line, so the next
                // search starts after it).
                while pos < n {
                    let Some(at) = inner.find(w, Span::from(pos..n)).map(|s| s.start) else {
                        break;
                    };
                    let ls = memrchr(eol, &w[pos..at]).map_or(pos, |i| pos + i + 1);
                    let le = memchr(eol, &w[at..]).map_or(n, |i| at + i);
                    let input = Input::new(w).range(ls..le).earliest(true);
                    if finder.search_half_with(&mut cache, &input).is_some() {
                        f(ls, le)?;
                    }
                    pos = le + 1;
                }
                return ControlFlow::Continue(());
            }
            while pos < n {
                let input = Input::new(w).range(pos..).earliest(true);
                let Some(e) = finder.search_half_with(&mut cache, &input).map(|m| m.offset())
                else {
                    break;
                };
                if e == n && w[n - 1] == eol {
                    break;
                }
                let ls = memrchr(eol, &w[pos..e]).map_or(pos, |i| pos + i + 1);
                let le = memchr(eol, &w[e..]).map_or(n, |i| e + i);
                f(ls, le)?;
                pos = le + 1;
            }
            return ControlFlow::Continue(());
        }
        while pos < n {
            if per_line {
                let le = memchr(eol, &w[pos..]).map_or(n, |i| pos + i);
                if re.is_match(&w[pos..le]) {
                    f(pos, le)?;
                }
                pos = le + 1;
                continue;
            }
            let Some(found) = re.find_at(w, pos) else { break };
            let s = found.start();
            if s == n && w[n - 1] == eol {
                break; // an empty match after the last newline: no line there
            }
            let le = memchr(eol, &w[s..]).map_or(n, |i| s + i);
            let ls = memrchr(eol, &w[pos..s]).map_or(pos, |i| pos + i + 1);
            let hit = found.end() <= le || {
                spill += found.end() - le;
                per_line = spill > n;
                re.is_match(&w[ls..le])
            };
            if hit {
                f(ls, le)?;
            }
            pos = le + 1;
        }
        ControlFlow::Continue(())
    }
}

impl LineMatcher for RegexLocal {
    fn matching_lines(
        &self,
        w: &[u8],
        f: impl FnMut(usize, usize) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        self.lines_with(self.m.finder.load(Ordering::Relaxed), w, f)
    }

    fn spans(&self, line: &[u8], out: &mut Vec<(usize, usize)>) {
        self.m.spans.find(&mut self.spans.borrow_mut(), line, out);
    }

    fn take_error(&self) -> Option<String> {
        None
    }
}

//! `grep`: the lines of a file that match a regex, with GNU grep's line
//! semantics, searched in parallel over line-aligned ranges.
//!
//! # Semantics
//!
//! * A line is the bytes up to (excluding) a `\n`; the last line may lack
//!   its newline (printed output adds one, like grep). `\r` is an ordinary
//!   byte, so in CRLF files `$` matches after it, not before.
//! * A line is selected when the regex matches somewhere **inside** it
//!   (a match never spans lines, even for patterns like `a\sb` or
//!   `[^x]*`); with `invert`, when it does not.
//! * Patterns use the [`regex`] crate's syntax (close to `grep -E` and
//!   ripgrep; Unicode-aware, `(?-u)` for byte semantics); several patterns
//!   are alternatives, and a pattern containing a newline is several
//!   patterns, as in grep. `^` and `$` match at line starts and ends.
//! * Files are text (like `grep -a`): there is no binary-file detection.
//! * `only_matching` prints each non-empty match of a selected line
//!   (nothing with `invert`); matches are leftmost-first like ripgrep and
//!   Perl, so an alternation such as `a|ab` prints `a` where GNU grep
//!   (leftmost-longest) prints `ab`.
//! * `max_count` stops after that many selected lines.
//!
//! Results are the same for every strategy, thread count and window size.
//!
//! # How
//!
//! The regex (in multi-line mode) searches whole windows of lines, so its
//! literal optimisations skip most bytes; only around a candidate match are
//! line boundaries looked up (`memrchr`/`memchr`). When the pattern cannot
//! match a newline (judged conservatively from its text), an earliest-match
//! search finds the end of a match and its line is selected. Otherwise a
//! leftmost match is found: one that ends inside its line selects the line
//! at once; one that runs past the line end is confirmed by matching the
//! line alone (and a window where that keeps happening, as with `[^x]*y`,
//! is finished line by line, so the work stays linear). Patterns with
//! `\A`, `\z` or `(?-m)` are matched line by line. Counting never
//! materialises lines; `invert` counts lines minus matching lines. Printing searches ranges of at most a few MiB in
//! batches of a few per thread, each range's output buffered and written
//! in file order while the next batch is searched; line numbers come from
//! a parallel newline count per range and prefix sums.

use std::cell::RefCell;
use std::io::{Read, Write};
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use memchr::{memchr, memrchr};
use regex::bytes::{Regex, RegexBuilder};

use super::engine::{Job, Scan, ScanOptions};
use super::source::label;
use crate::{Error, Result};

/// What to select and how to report it (the subset of GNU grep's options
/// that makes sense for one regex over files).
#[derive(Clone, Debug, Default)]
pub struct GrepOptions {
    /// The patterns (`-e`), tried as alternatives. A pattern containing
    /// newlines is one pattern per line, as in grep.
    pub patterns: Vec<String>,
    /// `-F`: the patterns are literal strings, not regexes.
    pub fixed: bool,
    /// `-i`: ignore case.
    pub ignore_case: bool,
    /// `-v`: select the lines that do **not** match.
    pub invert: bool,
    /// `-n`: prefix output lines with their 1-based line number.
    pub line_numbers: bool,
    /// `-b`: prefix output lines with the byte offset of the line (of the
    /// match, with `only_matching`).
    pub byte_offset: bool,
    /// `-o`: print each non-empty match of a selected line instead of the line.
    pub only_matching: bool,
    /// `-c`: count selected lines instead of printing them (used by
    /// front ends; the core has [`grep_count`] for that).
    pub count: bool,
    /// `-H` (`Some(true)`) / `-h` (`Some(false)`): prefix output with the
    /// file name. Front ends default it to "several files"; the core prints
    /// the prefix only for `Some(true)`.
    pub with_filename: Option<bool>,
    /// `-m`: stop after this many selected lines (per file).
    pub max_count: Option<u64>,
}

/// One selected line (or, with `only_matching`, one match), as given to
/// [`Grep::for_each`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GrepLine<'a> {
    /// 1-based line number.
    pub line: u64,
    /// Byte offset of the line start (of the match, with `only_matching`).
    pub offset: u64,
    /// The line without its newline (the match, with `only_matching`).
    pub text: &'a [u8],
}

/// Ranges searched by the printing modes are at most this long, so the
/// output buffered per range stays small.
const RANGE_MAX: u64 = 2 << 20;
/// Ranges per thread in one batch of the printing modes.
const BATCH_PER_THREAD: usize = 4;
/// Read size when streaming (stdin) with the default window.
const STREAM_CHUNK: usize = 1 << 20;

/// A compiled search: build once, run over any number of files.
#[derive(Debug)]
pub struct Grep {
    opts: GrepOptions,
    re: Regex,
    /// Unique per compiled regex: keys the per-thread clones.
    id: u64,
    /// The pattern uses assertions about the whole haystack (`\A`, `\z`,
    /// `(?-m)`): match line by line instead of whole windows.
    per_line: bool,
    /// No match can contain a newline: the end of the first match found
    /// in a window (an earliest-match search, the cheapest kind) tells the
    /// first matching line, with no confirmation.
    line_bounded: bool,
}

thread_local! {
    /// This thread's clone of the last regex it ran. A clone has its own
    /// cache pool, so threads never contend for the shared one.
    static LOCAL_RE: RefCell<Option<(u64, Rc<Regex>)>> = const { RefCell::new(None) };
}

impl Grep {
    /// Compiles the options' patterns; an invalid regex is
    /// [`Error::InvalidArgument`] with the regex error's text.
    pub fn new(opts: &GrepOptions) -> Result<Grep> {
        static NEXT_ID: AtomicU64 = AtomicU64::new(0);
        if opts.patterns.is_empty() {
            return Err(Error::InvalidArgument("grep: no pattern given".into()));
        }
        let parts: Vec<String> = opts
            .patterns
            .iter()
            .flat_map(|p| p.split('\n'))
            .map(|p| if opts.fixed { regex::escape(p) } else { p.to_owned() })
            .collect();
        let build = |p: &str| {
            RegexBuilder::new(p)
                .multi_line(true)
                .case_insensitive(opts.ignore_case)
                .build()
                .map_err(|e| Error::InvalidArgument(format!("invalid regex: {e}")))
        };
        let re = if parts.len() == 1 {
            build(&parts[0])?
        } else {
            // Each alternative must be valid on its own (`a)|(b` is not two
            // valid patterns even though `(?:a)|(b)` parses).
            for p in &parts {
                build(p)?;
            }
            let joined: Vec<String> = parts.iter().map(|p| format!("(?:{p})")).collect();
            build(&joined.join("|"))?
        };
        let per_line = !opts.fixed && parts.iter().any(|p| whole_haystack_assertions(p));
        let line_bounded = opts.fixed || parts.iter().all(|p| cannot_match_newline(p));
        Ok(Grep { opts: opts.clone(), re, id: NEXT_ID.fetch_add(1, Ordering::Relaxed), per_line, line_bounded })
    }

    /// The options this search was built with.
    pub fn options(&self) -> &GrepOptions {
        &self.opts
    }

    /// Number of selected lines (capped by `max_count`).
    pub fn count(&self, path: impl AsRef<Path>, opts: &ScanOptions) -> Result<u64> {
        self.run_path(path.as_ref(), opts, &Fmt::Count, &mut Sink::Nothing)
    }

    /// Writes the selected lines to `out` formatted like GNU grep
    /// (`[path:][line:][offset:]text`, the path when `with_filename` is
    /// `Some(true)`), in file order. Returns the number of selected lines.
    /// Errors writing to `out` are returned as [`Error::Io`] on `<output>`.
    pub fn write(&self, path: impl AsRef<Path>, opts: &ScanOptions, out: &mut dyn Write) -> Result<u64> {
        let path = path.as_ref();
        let fmt = self.gnu(label(path).as_os_str().as_bytes());
        self.run_path(path, opts, &fmt, &mut Sink::Write(out))
    }

    /// Calls `f` for every selected line (every match, with
    /// `only_matching`) in file order; `f` may stop the search. Returns the
    /// number of selected lines.
    pub fn for_each(
        &self,
        path: impl AsRef<Path>,
        opts: &ScanOptions,
        f: &mut dyn FnMut(GrepLine<'_>) -> Result<ControlFlow<()>>,
    ) -> Result<u64> {
        self.run_path(path.as_ref(), opts, &Fmt::Records, &mut Sink::Each(f))
    }

    /// [`Grep::count`] over a stream, read sequentially in bounded memory
    /// (`opts.chunk` bytes at a time; only strategy-independent options
    /// apply). `name` labels errors.
    pub fn count_reader(&self, input: &mut dyn Read, name: &Path, opts: &ScanOptions) -> Result<u64> {
        self.run_stream(input, name, opts, &Fmt::Count, &mut Sink::Nothing)
    }

    /// [`Grep::write`] over a stream; `name` is the file-name prefix (grep
    /// uses `(standard input)`) and labels errors.
    pub fn write_reader(&self, input: &mut dyn Read, name: &Path, opts: &ScanOptions, out: &mut dyn Write) -> Result<u64> {
        let fmt = self.gnu(name.as_os_str().as_bytes());
        self.run_stream(input, name, opts, &fmt, &mut Sink::Write(out))
    }

    /// [`Grep::for_each`] over a stream.
    pub fn for_each_reader(
        &self,
        input: &mut dyn Read,
        name: &Path,
        opts: &ScanOptions,
        f: &mut dyn FnMut(GrepLine<'_>) -> Result<ControlFlow<()>>,
    ) -> Result<u64> {
        self.run_stream(input, name, opts, &Fmt::Records, &mut Sink::Each(f))
    }

    fn gnu(&self, label: &[u8]) -> Fmt {
        Fmt::Gnu {
            label: (self.opts.with_filename == Some(true)).then(|| label.to_vec()),
            line: self.opts.line_numbers,
            byte: self.opts.byte_offset,
        }
    }

    fn cap(&self) -> u64 {
        self.opts.max_count.unwrap_or(u64::MAX)
    }

    /// This thread's own clone of the regex (see [`LOCAL_RE`]).
    fn local_re(&self) -> Rc<Regex> {
        LOCAL_RE.with(|cell| {
            let mut slot = cell.borrow_mut();
            match &*slot {
                Some((id, re)) if *id == self.id => re.clone(),
                _ => {
                    let re = Rc::new(self.re.clone());
                    *slot = Some((self.id, re.clone()));
                    re
                }
            }
        })
    }

    // ---- matching inside one window of whole lines ----

    /// Calls `f(start, end)` for every line of `w` (whole lines; `end`
    /// excludes the newline) that contains a match, in order.
    fn matching_lines(&self, re: &Regex, w: &[u8], mut f: impl FnMut(usize, usize) -> ControlFlow<()>) -> ControlFlow<()> {
        let n = w.len();
        let mut pos = 0;
        let mut per_line = self.per_line;
        // Bytes that candidates spanning lines ran past their line: when a
        // pattern keeps doing that (`[^x]*y`), whole-window search would
        // rescan the same bytes; line by line is linear.
        let mut spill = 0usize;
        if self.line_bounded && !per_line {
            // Every match lies inside one line, and the first one reported
            // lies in the first line that has one: the line around its end
            // is selected. (An empty match right after the window's final
            // newline belongs to no line.)
            while pos < n {
                let Some(e) = re.shortest_match_at(w, pos) else { break };
                if e == n && w[n - 1] == b'\n' {
                    break;
                }
                let ls = memrchr(b'\n', &w[pos..e]).map_or(pos, |i| pos + i + 1);
                let le = memchr(b'\n', &w[e..]).map_or(n, |i| e + i);
                f(ls, le)?;
                pos = le + 1;
            }
            return ControlFlow::Continue(());
        }
        while pos < n {
            if per_line {
                let le = memchr(b'\n', &w[pos..]).map_or(n, |i| pos + i);
                if re.is_match(&w[pos..le]) {
                    f(pos, le)?;
                }
                pos = le + 1;
                continue;
            }
            let Some(m) = re.find_at(w, pos) else { break };
            let s = m.start();
            if s == n && w[n - 1] == b'\n' {
                break; // an empty match after the last newline: no line there
            }
            let le = memchr(b'\n', &w[s..]).map_or(n, |i| s + i);
            let ls = memrchr(b'\n', &w[pos..s]).map_or(pos, |i| pos + i + 1);
            let hit = m.end() <= le || {
                spill += m.end() - le;
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

    /// Calls `f(start, end)` for every selected line of `w`, in order.
    fn selected_lines(&self, re: &Regex, w: &[u8], mut f: impl FnMut(usize, usize) -> ControlFlow<()>) -> ControlFlow<()> {
        if !self.opts.invert {
            return self.matching_lines(re, w, f);
        }
        let mut prev = 0;
        self.matching_lines(re, w, |ls, le| {
            each_line(w, prev, ls, &mut f)?;
            prev = le + 1;
            ControlFlow::Continue(())
        })?;
        each_line(w, prev, w.len(), &mut f)
    }

    /// Processes one window of whole lines starting at file offset `off`.
    fn window(&self, re: &Regex, off: u64, w: &[u8], st: &mut State, fmt: &Fmt) -> ControlFlow<()> {
        if st.selected >= st.cap {
            return ControlFlow::Break(());
        }
        if let Fmt::Count = fmt {
            let flow = if self.opts.invert {
                let mut m = 0u64;
                let _ = self.matching_lines(re, w, |_, _| {
                    m += 1;
                    ControlFlow::Continue(())
                });
                st.selected += lines_in(w) - m;
                ControlFlow::Continue(())
            } else {
                let (sel, cap) = (&mut st.selected, st.cap);
                self.matching_lines(re, w, |_, _| {
                    *sel += 1;
                    if *sel >= cap { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
                })
            };
            if st.selected >= st.cap {
                st.selected = st.cap;
                return ControlFlow::Break(());
            }
            return flow;
        }
        let o = &self.opts;
        let flow = self.selected_lines(re, w, |ls, le| {
            let no = st.cursor.as_mut().map_or(0, |c| c.line_at(w, off, ls));
            let line = &w[ls..le];
            if !o.only_matching {
                fmt.put(&mut st.out, no, off + ls as u64, line);
            } else if !o.invert {
                for m in re.find_iter(line) {
                    if !m.is_empty() {
                        fmt.put(&mut st.out, no, off + (ls + m.start()) as u64, m.as_bytes());
                    }
                }
            }
            st.selected += 1;
            if let Some(marks) = &mut st.marks {
                marks.push(st.out.len());
            }
            if st.selected >= st.cap { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }
        });
        if let Some(c) = &mut st.cursor {
            c.finish(w, off);
        }
        flow
    }

    // ---- drivers ----

    fn run_path(&self, path: &Path, opts: &ScanOptions, fmt: &Fmt, sink: &mut Sink<'_>) -> Result<u64> {
        let cap = self.cap();
        if cap == 0 {
            return Ok(0); // like grep -m 0: not even opened
        }
        let job = match Scan::open(path, opts)? {
            Scan::Job(job) => job,
            Scan::Stream(mut r) => return self.run_stream(&mut r, label(path), opts, fmt, sink),
        };
        if let (Fmt::Count, u64::MAX) = (fmt, cap) {
            return self.count_all(&job);
        }
        if job.threads <= 1 {
            self.run_sequential(&job, fmt, sink)
        } else {
            self.run_parallel(&job, fmt, sink)
        }
    }

    /// Counting without a cap: every range at once.
    fn count_all(&self, job: &Job<'_>) -> Result<u64> {
        let ranges = job.line_ranges()?;
        let invert = self.opts.invert;
        let parts = job.par_map(&ranges, |&(s, e)| {
            let re = self.local_re();
            let (mut matching, mut lines) = (0u64, 0u64);
            job.for_each_lines(s, e, |_, w| {
                let _ = self.matching_lines(&re, w, |_, _| {
                    matching += 1;
                    ControlFlow::Continue(())
                });
                if invert {
                    lines += lines_in(w);
                }
                Ok(ControlFlow::Continue(()))
            })?;
            Ok(if invert { lines - matching } else { matching })
        })?;
        Ok(parts.iter().sum())
    }

    /// One thread: the whole file window by window, output written after
    /// each window.
    fn run_sequential(&self, job: &Job<'_>, fmt: &Fmt, sink: &mut Sink<'_>) -> Result<u64> {
        let re = self.local_re();
        let mut st = State::new(self.cap(), fmt, 0, false);
        job.for_each_lines(0, job.src.len(), |off, w| {
            let flow = self.window(&re, off, w, &mut st, fmt);
            let emitted = sink.emit(&st.out)?;
            st.out.clear();
            Ok(if emitted.is_break() { emitted } else { flow })
        })?;
        Ok(st.selected)
    }

    /// Several threads: batches of bounded ranges; each batch is searched
    /// in parallel while the previous one's output is written.
    fn run_parallel(&self, job: &Job<'_>, fmt: &Fmt, sink: &mut Sink<'_>) -> Result<u64> {
        let len = job.src.len();
        let size = len.div_ceil(job.threads as u64 * 8).clamp(1, RANGE_MAX);
        let raw: Vec<(u64, u64)> = (0..len).step_by(size as usize).map(|s| (s, (s + size).min(len))).collect();
        let ranges = job.lines_aligned(&raw)?;
        let cap = self.cap();
        let stop = AtomicBool::new(false);
        // Searches one batch whose first line is number `base`; returns the
        // per-range results and the number of the line after the batch.
        let search = |batch: &[(u64, u64)], base: u64| -> Result<(Vec<State>, u64)> {
            let mut work = Vec::with_capacity(batch.len());
            let mut next = base;
            if fmt.needs_lines() {
                let counts = job.par_map(batch, |&(s, e)| newlines(job, s, e))?;
                for (&r, n) in batch.iter().zip(counts) {
                    work.push((r, next));
                    next += n;
                }
            } else {
                work.extend(batch.iter().map(|&r| (r, 0)));
            }
            let states = job.par_map(&work, |&((s, e), line)| {
                let mut st = State::new(cap, fmt, line, cap != u64::MAX);
                if let Some(c) = &mut st.cursor {
                    c.pos = s;
                }
                let re = self.local_re();
                job.for_each_lines(s, e, |off, w| {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(ControlFlow::Break(()));
                    }
                    Ok(self.window(&re, off, w, &mut st, fmt))
                })?;
                Ok(st)
            })?;
            Ok((states, next))
        };
        let mut batches = ranges.chunks(job.threads * BATCH_PER_THREAD);
        let mut pending: Option<Vec<State>> = None;
        let mut base = 1;
        let mut total = 0u64;
        loop {
            let batch = batches.next();
            if batch.is_none() && pending.is_none() {
                break;
            }
            let (searched, emitted) = std::thread::scope(|scope| {
                let handle = batch.map(|b| scope.spawn(|| search(b, base)));
                let emitted = match pending.take() {
                    Some(states) => emit_batch(states, sink, &mut total, cap),
                    None => Ok(ControlFlow::Continue(())),
                };
                if !matches!(emitted, Ok(ControlFlow::Continue(()))) {
                    stop.store(true, Ordering::Relaxed); // the batch being searched is not needed
                }
                let searched = handle.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                (searched, emitted)
            });
            if emitted?.is_break() {
                break;
            }
            match searched {
                Some(r) => {
                    let (states, next) = r?;
                    pending = Some(states);
                    base = next;
                }
                None => pending = None,
            }
        }
        Ok(total)
    }

    /// A stream: read chunks, search up to the last newline, carry the rest.
    fn run_stream(&self, input: &mut dyn Read, name: &Path, opts: &ScanOptions, fmt: &Fmt, sink: &mut Sink<'_>) -> Result<u64> {
        let cap = self.cap();
        if cap == 0 {
            return Ok(0);
        }
        let chunk = if opts.chunk == 0 { STREAM_CHUNK } else { opts.chunk };
        let re = self.local_re();
        let mut st = State::new(cap, fmt, 0, false);
        let mut buf = vec![0u8; chunk];
        let mut filled = 0; // bytes of `buf` holding data
        let mut off = 0u64; // file offset of buf[0]
        loop {
            if filled == buf.len() {
                buf.resize(2 * buf.len(), 0); // one line longer than the buffer
            }
            let got = loop {
                match input.read(&mut buf[filled..]) {
                    Ok(k) => break k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => return Err(Error::io(name, "read", e)),
                }
            };
            let old = filled;
            filled += got;
            let eof = got == 0;
            let cut = if eof {
                filled
            } else {
                match memrchr(b'\n', &buf[old..filled]) {
                    Some(i) => old + i + 1,
                    None => continue, // no complete line yet: read more
                }
            };
            if cut > 0 {
                let flow = self.window(&re, off, &buf[..cut], &mut st, fmt);
                opts.advance(cut as u64);
                let emitted = sink.emit(&st.out)?;
                st.out.clear();
                if flow.is_break() || emitted.is_break() {
                    break;
                }
            }
            buf.copy_within(cut..filled, 0);
            filled -= cut;
            off += cut as u64;
            if eof {
                break;
            }
        }
        Ok(st.selected)
    }
}

/// Writes one batch's outputs in order, stopping at `cap` selected lines.
fn emit_batch(states: Vec<State>, sink: &mut Sink<'_>, total: &mut u64, cap: u64) -> Result<ControlFlow<()>> {
    for st in states {
        let room = cap - *total;
        if st.selected >= room {
            // `marks` holds the output length after each selected line
            // (empty when counting, where there is no output).
            let cut = st.marks.as_ref().and_then(|m| m.get(room as usize - 1).copied()).unwrap_or(st.out.len());
            *total = cap;
            let _ = sink.emit(&st.out[..cut])?; // stopping anyway
            return Ok(ControlFlow::Break(()));
        }
        *total += st.selected;
        if sink.emit(&st.out)?.is_break() {
            return Ok(ControlFlow::Break(()));
        }
    }
    Ok(ControlFlow::Continue(()))
}

/// Calls `f` for each line starting in `[from, to)` of `w` (`from` a line
/// start; `to` a line start or `w.len()`).
fn each_line(w: &[u8], from: usize, to: usize, f: &mut impl FnMut(usize, usize) -> ControlFlow<()>) -> ControlFlow<()> {
    let mut p = from;
    while p < to {
        let le = memchr(b'\n', &w[p..to]).map_or(to, |i| p + i);
        f(p, le)?;
        p = le + 1;
    }
    ControlFlow::Continue(())
}

/// Lines in a window of whole lines (the last may lack its newline).
fn lines_in(w: &[u8]) -> u64 {
    bytecount::count(w, b'\n') as u64 + u64::from(w.last().is_some_and(|&b| b != b'\n'))
}

/// Newlines in `[s, e)` of the file.
fn newlines(job: &Job<'_>, s: u64, e: u64) -> Result<u64> {
    let mut n = 0;
    let mut pos = s;
    while pos < e {
        let end = (pos + job.window).min(e);
        n += job.src.with_window(pos, end, |w| bytecount::count(w, b'\n') as u64)?;
        pos = end;
    }
    Ok(n)
}

/// True when a pattern may assert something about the whole haystack
/// (`\A`, `\z`, or multi-line mode turned off by `(?-m)`), which searching
/// a window of many lines would get wrong. Errs on the side of true.
pub(crate) fn whole_haystack_assertions(p: &str) -> bool {
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                if matches!(b.get(i + 1), Some(b'A' | b'z')) {
                    return true;
                }
                i += 2;
                continue;
            }
            b'(' if b.get(i + 1) == Some(&b'?') => {
                let mut negated = false;
                for &c in b[i + 2..].iter().take_while(|&&c| c != b':' && c != b')') {
                    match c {
                        b'-' => negated = true,
                        b'm' if negated => return true,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// True when no match of the pattern can contain a newline, judged from
/// its text (conservative: false when unsure). Rejected: negated classes,
/// `\s`-like and numeric escapes, Unicode classes, POSIX classes other than
/// the printable ones, the `s` flag, and control characters (so class
/// ranges start above `\n`).
fn cannot_match_newline(p: &str) -> bool {
    const SAFE_POSIX: [&[u8]; 11] =
        [b"alnum", b"alpha", b"blank", b"digit", b"graph", b"lower", b"print", b"punct", b"upper", b"word", b"xdigit"];
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                match b.get(i + 1) {
                    Some(b'd' | b'w' | b'b' | b'B') => {}
                    Some(c) if c.is_ascii_punctuation() => {}
                    _ => return false,
                }
                i += 2;
                continue;
            }
            b'[' => match b.get(i + 1) {
                Some(b'^') => return false,
                Some(b':') => {
                    let rest = &b[i + 2..];
                    match rest.windows(2).position(|w| w == b":]") {
                        Some(k) if SAFE_POSIX.contains(&&rest[..k]) => {
                            i += k + 4;
                            continue;
                        }
                        _ => return false,
                    }
                }
                _ => {}
            },
            // flags: `s` lets `.` match a newline
            b'(' if b.get(i + 1) == Some(&b'?')
                && b[i + 2..].iter().take_while(|&&c| c != b':' && c != b')').any(|&c| c == b's') =>
            {
                return false;
            }
            c if c < 0x20 || c == 0x7f => return false,
            _ => {}
        }
        i += 1;
    }
    true
}

/// Line numbers for the lines of a range: `line` is the number of the line
/// starting at file offset `pos`.
struct Cursor {
    line: u64,
    pos: u64,
}

impl Cursor {
    /// The number of the line starting at `w[ls]` (`w` starts at `off`).
    fn line_at(&mut self, w: &[u8], off: u64, ls: usize) -> u64 {
        let from = (self.pos - off) as usize;
        self.line += bytecount::count(&w[from..ls], b'\n') as u64;
        self.pos = off + ls as u64;
        self.line
    }

    /// Moves to the end of the window.
    fn finish(&mut self, w: &[u8], off: u64) {
        let from = (self.pos - off) as usize;
        self.line += bytecount::count(&w[from..], b'\n') as u64;
        self.pos = off + w.len() as u64;
    }
}

/// The state of one range (or the whole file) being searched.
struct State {
    cap: u64,
    selected: u64,
    cursor: Option<Cursor>,
    out: Vec<u8>,
    /// `out.len()` after each selected line, to cut at `max_count`.
    marks: Option<Vec<usize>>,
}

impl State {
    /// `line`: the number of the first line (0: the file's first line).
    fn new(cap: u64, fmt: &Fmt, line: u64, marks: bool) -> State {
        State {
            cap,
            selected: 0,
            cursor: fmt.needs_lines().then_some(Cursor { line: line.max(1), pos: 0 }),
            out: Vec::new(),
            marks: (marks && !matches!(fmt, Fmt::Count)).then(Vec::new),
        }
    }
}

/// How selected lines are recorded in a range's buffer.
enum Fmt {
    /// Not at all (counting).
    Count,
    /// GNU grep's output lines.
    Gnu { label: Option<Vec<u8>>, line: bool, byte: bool },
    /// Records for [`GrepLine`]: line, offset, length (u64 each), text.
    Records,
}

impl Fmt {
    fn needs_lines(&self) -> bool {
        matches!(self, Fmt::Records | Fmt::Gnu { line: true, .. })
    }

    fn put(&self, out: &mut Vec<u8>, line: u64, offset: u64, text: &[u8]) {
        match self {
            Fmt::Count => {}
            Fmt::Gnu { label, line: with_line, byte } => {
                if let Some(l) = label {
                    out.extend_from_slice(l);
                    out.push(b':');
                }
                if *with_line {
                    push_decimal(out, line);
                    out.push(b':');
                }
                if *byte {
                    push_decimal(out, offset);
                    out.push(b':');
                }
                out.extend_from_slice(text);
                out.push(b'\n');
            }
            Fmt::Records => {
                out.extend_from_slice(&line.to_le_bytes());
                out.extend_from_slice(&offset.to_le_bytes());
                out.extend_from_slice(&(text.len() as u64).to_le_bytes());
                out.extend_from_slice(text);
            }
        }
    }
}

fn push_decimal(out: &mut Vec<u8>, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    out.extend_from_slice(&digits[i..]);
}

/// Where formatted output goes, in file order.
enum Sink<'a> {
    Nothing,
    Write(&'a mut dyn Write),
    Each(&'a mut dyn FnMut(GrepLine<'_>) -> Result<ControlFlow<()>>),
}

impl Sink<'_> {
    fn emit(&mut self, buf: &[u8]) -> Result<ControlFlow<()>> {
        match self {
            Sink::Nothing => {}
            Sink::Write(w) => {
                if !buf.is_empty() {
                    w.write_all(buf).map_err(|e| Error::io(Path::new("<output>"), "write", e))?;
                }
            }
            Sink::Each(f) => {
                let mut rest = buf;
                while !rest.is_empty() {
                    let word = |i: usize| u64::from_le_bytes(rest[i * 8..i * 8 + 8].try_into().expect("8 bytes"));
                    let (line, offset, n) = (word(0), word(1), word(2) as usize);
                    let text = &rest[24..24 + n];
                    if f(GrepLine { line, offset, text })?.is_break() {
                        return Ok(ControlFlow::Break(()));
                    }
                    rest = &rest[24 + n..];
                }
            }
        }
        Ok(ControlFlow::Continue(()))
    }
}

/// Number of selected lines: matching ones, or non-matching ones with
/// `invert`, capped by `max_count`.
pub fn grep_count(path: impl AsRef<Path>, grep: &GrepOptions, opts: &ScanOptions) -> Result<u64> {
    Grep::new(grep)?.count(path, opts)
}

/// Writes the selected lines to `out` exactly as GNU grep prints them
/// (see [`Grep::write`]); returns the number of selected lines.
///
/// ```no_run
/// use mmapkit::scan::{self, GrepOptions, ScanOptions};
/// let g = GrepOptions { patterns: vec!["ERR[0-9]+".into()], line_numbers: true, ..Default::default() };
/// let n = scan::grep("app.log", &g, &ScanOptions::default(), &mut std::io::stdout().lock())?;
/// # Ok::<(), mmapkit::Error>(())
/// ```
pub fn grep(path: impl AsRef<Path>, grep: &GrepOptions, opts: &ScanOptions, out: &mut dyn Write) -> Result<u64> {
    Grep::new(grep)?.write(path, opts, out)
}

/// The selected lines as `(line number, offset, line without newline)`
/// (with `only_matching`, one entry per match: its offset and bytes), at
/// most `limit` entries.
pub fn grep_lines(
    path: impl AsRef<Path>,
    grep: &GrepOptions,
    opts: &ScanOptions,
    limit: Option<usize>,
) -> Result<Vec<(u64, u64, Vec<u8>)>> {
    let g = Grep::new(grep)?;
    let limit = limit.unwrap_or(usize::MAX);
    let mut found = Vec::new();
    if limit == 0 {
        return Ok(found);
    }
    g.for_each(path, opts, &mut |l| {
        found.push((l.line, l.offset, l.text.to_vec()));
        Ok(if found.len() >= limit { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
    })?;
    Ok(found)
}

#[cfg(test)]
#[path = "grep_tests.rs"]
mod tests;

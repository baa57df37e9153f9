//! The search: finds the selected lines of a file and reports them, in
//! file order, to a [`Sink`]; it never formats anything.
//!
//! # How
//!
//! Windows of whole lines go to the matcher (`matcher.rs`: the regex
//! engine searches a whole window at once, PCRE2 each line), which calls
//! back with the lines holding a match; only the lines reported are cut
//! out, and their match spans asked for. Counting never materialises
//! lines; `invert` counts lines minus matching lines. A matcher's error
//! (PCRE2's match limit) ends the file's search with an error naming it.
//!
//! Reporting lines on several threads searches ranges of at most a few MiB
//! in batches of a few per thread. Without a cap, a sink that can fork
//! (the printers) gets a fork per range that formats the range's lines on
//! its search thread; their bytes are joined to the sink in file order
//! while the next batch is searched. Otherwise each range's lines are
//! recorded and replayed to the sink in file order. Line numbers come
//! from a parallel newline count per range and prefix sums. One thread,
//! files under [`PARALLEL_MIN`], streams and context (which needs the
//! lines around a match) report straight from the window, with no copy.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{Read, Seek, SeekFrom};
use std::ops::ControlFlow;
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use memchr::{memchr, memrchr};

use super::matcher::{LineMatcher, Local};
use super::sink::{FileInfo, Forked, Needs, Sink, SinkLine};
use super::{BinaryFiles, Grep};
use crate::scan::engine::{Job, Scan, ScanOptions};
use crate::scan::source::{
    label, peek_whole, stdin_file, Peeked, Strategy, AUTO_MMAP_MIN, RELEASE_MIN,
};
use crate::{Error, Result};

/// Ranges searched on several threads are at most this long, so the
/// lines recorded per range stay few.
const RANGE_MAX: u64 = 2 << 20;
/// Ranges per thread in one batch.
const BATCH_PER_THREAD: usize = 4;
/// Read size when streaming (stdin) with the default window.
const STREAM_CHUNK: usize = 1 << 20;
/// Files shorter than this are searched on the calling thread, whatever
/// the thread count: splitting them costs more (threads started, ranges
/// joined) than it saves, and `grep -r` searches thousands of them, each
/// on the walking thread that found it.
const PARALLEL_MIN: u64 = 4 << 20;
/// GNU grep 3.8's read buffer (`INITIAL_BUFSIZE`): it looks for NUL
/// bytes one buffer at a time, so whether a line before the first NUL is
/// printed depends on the buffer holding it.
const GNU_BUFFER: usize = 96 << 10;

impl Grep {
    /// Searches the file at `path` (`-`: standard input, streamed), reports
    /// to `sink` and returns the number of selected lines.
    pub fn search(
        &self,
        path: impl AsRef<Path>,
        opts: &ScanOptions,
        sink: &mut dyn Sink,
    ) -> Result<u64> {
        let path = path.as_ref();
        let needs = sink.needs();
        let cap = self.cap(&needs);
        if cap == 0 {
            // -m 0: nothing is read, but the file is opened (an error is
            // one) and has its (empty) report, as `grep -L -m 0` lists it.
            drop(Scan::open(path, opts)?);
            sink.begin(&FileInfo { path, size: None })?;
            sink.finish(0)?;
            return Ok(0);
        }
        let scan = if path.as_os_str() != "-" && opts.strategy == Strategy::Auto && opts.chunk == 0
        {
            // Small files (most of a tree) are read whole at once: what the
            // windowed drivers below would do with them, one system call
            // sooner (see `peek_whole`).
            let whole = |file: &std::fs::File, data: &[u8]| {
                let len = data.len() as u64;
                opts.progress.set_total(len);
                self.search_whole(data, path, opts, sink, self.has_hole(file, len))
            };
            match peek_whole(path, AUTO_MMAP_MIN as usize, opts.strategy, whole)? {
                Peeked::Whole(n) => return n,
                Peeked::Larger(input) => Scan::from_input(input, opts),
            }
        } else {
            Scan::open(path, opts)?
        };
        let job = match scan {
            Scan::Job(job) => job,
            Scan::Stream(mut r, size) => {
                // -m on standard input redirected from a file: GNU grep
                // leaves it just after the last selected line, so the
                // caller's next reader resumes there (`(grep -m1 k; cat) < f`).
                let resume = path.as_os_str() == "-"
                    && size.is_some()
                    && cap != u64::MAX
                    && !needs.first_only;
                let start = if resume { stdin_position(path)? } else { None };
                let n = self.run_stream(&mut r, path, size, opts, sink, false)?;
                if let Some(start) = start.filter(|_| n >= cap) {
                    self.resume_stdin(path, start, size, opts)?;
                }
                return Ok(n);
            }
        };
        let len = job.src.len();
        // Binary files (as GNU grep decides: a NUL byte, or a hole) and
        // -z are searched front to back, in GNU grep's buffers.
        let hole = self.has_hole(job.src.file(), len);
        if job.whole() {
            // A small file: one read into this thread's buffer, searched
            // (and checked for NUL bytes) there.
            return job
                .src
                .with_window(0, len, |data| self.search_whole(data, path, opts, sink, hole))?;
        }
        if self.opts.null_data || hole || (self.detects_binary() && self.has_nul(&job)?) {
            let mut r = JobReader { job: &job, pos: 0, released: 0 };
            return self.run_stream(&mut r, path, Some(len), opts, sink, hole);
        }
        sink.begin(&FileInfo { path, size: Some(len) })?;
        self.choose_finder(&job)?;
        let selected = if !needs.lines && cap == u64::MAX {
            self.count_all(&job)?
        } else if job.threads <= 1
            || len < PARALLEL_MIN
            || needs.before.is_some()
            || needs.after.is_some()
        {
            self.run_sequential(&job, &needs, cap, sink)?
        } else {
            self.run_parallel(&job, &needs, cap, sink)?
        };
        sink.finish(selected)?;
        Ok(selected)
    }

    /// Whether `file` (`len` bytes) is binary by a hole, as GNU grep
    /// decides. A file that fits GNU grep's first buffer needs no check:
    /// a hole reads as NUL bytes there, binary from the start all the same
    /// (GNU grep looks for holes only past its first read).
    fn has_hole(&self, file: &std::fs::File, len: u64) -> bool {
        self.detects_binary()
            && len > GNU_BUFFER as u64
            && crate::map::seek_hole(file, 0).is_some_and(|h| h < len)
    }

    /// [`Grep::search`] over a whole file held in memory (`data`: a small
    /// file, read at once): what the windowed drivers do with a file of
    /// one window, without reading it twice.
    fn search_whole(
        &self,
        data: &[u8],
        path: &Path,
        opts: &ScanOptions,
        sink: &mut dyn Sink,
        hole: bool,
    ) -> Result<u64> {
        let len = data.len() as u64;
        if self.opts.null_data || hole || (self.detects_binary() && memchr(0, data).is_some()) {
            return self.run_stream(&mut &data[..], path, Some(len), opts, sink, hole);
        }
        let needs = sink.needs();
        sink.begin(&FileInfo { path, size: Some(len) })?;
        let re = self.local_re();
        if let Local::Regex(r) = &*re {
            r.prefer_prefilter(); // choose_finder's rule for a small file
        }
        let mut st = State::new(self.cap(&needs), &needs, 0, self.eol);
        if !data.is_empty() {
            let _ = self.window(&re, 0, data, &mut st, sink);
            matcher_error(&re, path)?;
            if let Some(e) = st.err.take() {
                return Err(e);
            }
            opts.advance(len);
        }
        sink.finish(st.selected)?;
        Ok(st.selected)
    }

    /// [`Grep::search`] over a stream, read sequentially in bounded memory
    /// (`opts.chunk` bytes at a time); `name` is the path given to the sink
    /// (`-` for standard input) and labels errors.
    pub fn search_reader(
        &self,
        input: &mut dyn Read,
        name: &Path,
        opts: &ScanOptions,
        sink: &mut dyn Sink,
    ) -> Result<u64> {
        if self.cap(&sink.needs()) == 0 {
            return Ok(0);
        }
        self.run_stream(input, name, None, opts, sink, false)
    }

    fn cap(&self, needs: &Needs) -> u64 {
        let cap = self.opts.max_count.unwrap_or(u64::MAX);
        if needs.first_only {
            cap.min(1)
        } else {
            cap
        }
    }

    /// Seeks standard input, where a search from `start` stopped at its
    /// cap, to just after the last selected line: found by searching
    /// again from `start` for the lines alone (no context), the one case
    /// where a selected line's end must be known.
    fn resume_stdin(
        &self,
        path: &Path,
        start: u64,
        size: Option<u64>,
        opts: &ScanOptions,
    ) -> Result<()> {
        let mut stdin = stdin_file()?;
        let seek = |f: &mut std::fs::File, to: u64| {
            f.seek(SeekFrom::Start(to)).map(drop).map_err(|e| Error::io(label(path), "seek", e))
        };
        seek(&mut stdin, start)?;
        let mut last = LastLineEnd(0);
        let quiet = ScanOptions { progress: Default::default(), ..opts.clone() };
        self.run_stream(&mut stdin, path, size, &quiet, &mut last, false)?;
        // (A last line without its end: no further than the file's end.)
        seek(&mut stdin, (start + last.0).min(size.unwrap_or(u64::MAX)))
    }

    /// The file holds a NUL byte (searched in parallel, window by window).
    fn has_nul(&self, job: &Job<'_>) -> Result<bool> {
        let found = AtomicBool::new(false);
        job.par_map(&job.ranges(), |&(s, e)| {
            let mut pos = s;
            while pos < e && !found.load(Ordering::Relaxed) {
                let end = (pos + job.window).min(e);
                if job.src.with_window(pos, end, |w| memchr(0, w).is_some())? {
                    found.store(true, Ordering::Relaxed);
                }
                pos = end;
            }
            Ok(())
        })?;
        Ok(found.into_inner())
    }

    /// This thread's matcher (its own regex copy and caches, so threads
    /// never contend for shared ones).
    fn local_re(&self) -> Rc<Local> {
        self.matcher.local(self.id)
    }

    /// Lets the regex engine pick its faster line finder for this file
    /// (only speed depends on it).
    fn choose_finder(&self, job: &Job<'_>) -> Result<()> {
        match &*self.local_re() {
            Local::Regex(re) => {
                re.choose_finder(job.src.len(), |n, f| job.src.with_window(0, n, f))
            }
            Local::Pcre(_) => Ok(()),
        }
    }

    /// Calls `f(start, end)` for every selected line of `w`, in order.
    fn selected_lines(
        &self,
        re: &Local,
        w: &[u8],
        mut f: impl FnMut(usize, usize) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        if !self.opts.invert {
            return re.matching_lines(w, f);
        }
        let mut prev = 0;
        re.matching_lines(w, |ls, le| {
            each_line(w, self.eol, prev, ls, &mut f)?;
            prev = le + 1;
            ControlFlow::Continue(())
        })?;
        each_line(w, self.eol, prev, w.len(), &mut f)
    }

    /// Processes one window of whole lines starting at file offset `off`.
    fn window(
        &self,
        re: &Local,
        off: u64,
        w: &[u8],
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> ControlFlow<()> {
        if st.needs.lines {
            self.report_window(re, off, w, st, sink)
        } else {
            self.count_window(re, w, st)
        }
    }

    /// Counting (capped): no line is materialised.
    fn count_window(&self, re: &Local, w: &[u8], st: &mut State) -> ControlFlow<()> {
        if st.selected >= st.cap {
            return ControlFlow::Break(());
        }
        let flow = if self.opts.invert {
            let mut m = 0u64;
            let _ = re.matching_lines(w, |_, _| {
                m += 1;
                ControlFlow::Continue(())
            });
            st.selected += lines_in(w, self.eol) - m;
            ControlFlow::Continue(())
        } else {
            let (sel, cap) = (&mut st.selected, st.cap);
            re.matching_lines(w, |_, _| {
                *sel += 1;
                if *sel >= cap {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            })
        };
        if st.selected >= st.cap {
            st.selected = st.cap;
            return ControlFlow::Break(());
        }
        flow
    }

    /// Reports the selected lines of a window, with their context when
    /// asked (after the cap, only the trailing context is left, printed
    /// whether those lines match or not, as GNU grep does).
    fn report_window(
        &self,
        re: &Local,
        off: u64,
        w: &[u8],
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> ControlFlow<()> {
        let mut next = 0usize; // lines before it are reported (or never will be)
        if st.selected < st.cap {
            let _ = self.selected_lines(re, w, |ls, le| {
                if st.ctx.is_some() {
                    self.before_match(re, off, w, &mut next, ls, st, sink)?;
                }
                st.selected += 1; // even when the sink stops here
                self.emit(re, off, w, ls, le, true, st, sink)?;
                next = (le + 1).min(w.len());
                if let Some(c) = &mut st.ctx {
                    c.after_left = c.after;
                }
                if st.selected >= st.cap {
                    ControlFlow::Break(())
                } else {
                    ControlFlow::Continue(())
                }
            });
            if st.stopped {
                return ControlFlow::Break(());
            }
        }
        if st.ctx.is_some() {
            if self.after_context(re, off, w, &mut next, w.len(), st, sink).is_break() {
                return ControlFlow::Break(());
            }
            self.keep_before(off, w, next, st);
        }
        if let Some(c) = &mut st.cursor {
            c.finish(w, off);
        }
        let trailing = st.ctx.as_ref().is_some_and(|c| c.after_left > 0);
        if st.selected >= st.cap && !trailing {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        }
    }

    /// Reports the line `w[ls..le]`, selected or context.
    #[allow(clippy::too_many_arguments)]
    fn emit(
        &self,
        re: &Local,
        off: u64,
        w: &[u8],
        ls: usize,
        le: usize,
        selected: bool,
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> ControlFlow<()> {
        let line = st.cursor.as_mut().map_or(0, |c| c.line_at(w, off, ls));
        self.emit_line(re, line, off + ls as u64, &w[ls..le], selected, st, sink)
    }

    #[allow(clippy::too_many_arguments)]
    fn emit_line(
        &self,
        re: &Local,
        line: u64,
        offset: u64,
        bytes: &[u8],
        selected: bool,
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> ControlFlow<()> {
        let mut spans = std::mem::take(&mut st.spans);
        spans.clear();
        // Like GNU grep: the matches of selected lines, or of context lines
        // under -v (not those of trailing context that matches after -m).
        if st.needs.spans && selected != self.opts.invert {
            re.spans(bytes, &mut spans);
        }
        let l = SinkLine { line, offset, bytes, spans: &spans };
        let r = if selected { sink.matched(&l) } else { sink.context(&l) };
        st.spans = spans;
        if let Some(c) = &mut st.ctx {
            c.printed_end = Some(offset + bytes.len() as u64 + 1);
            c.ring.clear();
        }
        st.flow(r)
    }

    /// Before a selected line at `ls`: the previous one's after-context,
    /// a break if lines were skipped, then this one's before-context.
    #[allow(clippy::too_many_arguments)]
    fn before_match(
        &self,
        re: &Local,
        off: u64,
        w: &[u8],
        next: &mut usize,
        ls: usize,
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> ControlFlow<()> {
        self.after_context(re, off, w, next, ls, st, sink)?;
        if st.binary {
            return ControlFlow::Continue(());
        }
        let Some(c) = &mut st.ctx else { return ControlFlow::Continue(()) };
        let starts = last_lines(w, self.eol, *next, ls, c.before);
        // Lines kept from earlier windows, when none of this one is reported yet.
        let reach_back = *next == 0 && starts.first().copied().unwrap_or(ls) == 0;
        let k = if reach_back { c.ring.len().min(c.before - starts.len()) } else { 0 };
        let earlier: Vec<(u64, u64, Vec<u8>)> = c.ring.drain(c.ring.len() - k..).collect();
        let first = earlier
            .first()
            .map(|e| e.1)
            .or(starts.first().map(|&s| off + s as u64))
            .unwrap_or(off + ls as u64);
        if c.printed_end.is_some_and(|end| end != first) {
            let r = sink.context_break().map(|()| ControlFlow::Continue(()));
            st.flow(r)?;
        }
        for (line, offset, bytes) in &earlier {
            self.emit_line(re, *line, *offset, bytes, false, st, sink)?;
        }
        for s in starts {
            let le = memchr(self.eol, &w[s..ls]).map_or(ls, |i| s + i);
            self.emit(re, off, w, s, le, false, st, sink)?;
        }
        *next = ls;
        ControlFlow::Continue(())
    }

    /// After-context lines from `next` up to `limit` (a line start or the
    /// end of the window).
    #[allow(clippy::too_many_arguments)]
    fn after_context(
        &self,
        re: &Local,
        off: u64,
        w: &[u8],
        next: &mut usize,
        limit: usize,
        st: &mut State,
        sink: &mut dyn Sink,
    ) -> ControlFlow<()> {
        while *next < limit && st.ctx.as_ref().is_some_and(|c| c.after_left > 0) {
            let le = memchr(self.eol, &w[*next..limit]).map_or(limit, |i| *next + i);
            if let Some(c) = &mut st.ctx {
                c.after_left -= 1;
            }
            self.emit(re, off, w, *next, le, false, st, sink)?;
            *next = (le + 1).min(w.len());
        }
        ControlFlow::Continue(())
    }

    /// Keeps the window's last unreported lines for the before-context of a
    /// selected line in a later window.
    fn keep_before(&self, off: u64, w: &[u8], next: usize, st: &mut State) {
        let Some(c) = &mut st.ctx else { return };
        if c.before == 0 {
            return;
        }
        for s in last_lines(w, self.eol, next, w.len(), c.before) {
            let le = memchr(self.eol, &w[s..]).map_or(w.len(), |i| s + i);
            let line = st.cursor.as_mut().map_or(0, |cur| cur.line_at(w, off, s));
            c.ring.push_back((line, off + s as u64, w[s..le].to_vec()));
            if c.ring.len() > c.before {
                c.ring.pop_front();
            }
        }
    }

    // ---- drivers ----

    /// Counting without a cap: every range at once.
    fn count_all(&self, job: &Job<'_>) -> Result<u64> {
        let ranges = job.line_ranges()?;
        let invert = self.opts.invert;
        let parts = job.par_map(&ranges, |&(s, e)| {
            let re = self.local_re();
            let (mut matching, mut lines) = (0u64, 0u64);
            job.for_each_lines(s, e, |_, w| {
                let _ = re.matching_lines(w, |_, _| {
                    matching += 1;
                    ControlFlow::Continue(())
                });
                matcher_error(&re, job.src.path())?;
                if invert {
                    lines += lines_in(w, self.eol);
                }
                Ok(ControlFlow::Continue(()))
            })?;
            Ok(if invert { lines - matching } else { matching })
        })?;
        Ok(parts.iter().sum())
    }

    /// One thread: the whole file window by window, reported straight
    /// from the window.
    fn run_sequential(
        &self,
        job: &Job<'_>,
        needs: &Needs,
        cap: u64,
        sink: &mut dyn Sink,
    ) -> Result<u64> {
        let re = self.local_re();
        let mut st = State::new(cap, needs, 0, self.eol);
        job.for_each_lines(0, job.src.len(), |off, w| {
            let flow = self.window(&re, off, w, &mut st, sink);
            matcher_error(&re, job.src.path())?;
            st.err.take().map_or(Ok(flow), Err)
        })?;
        Ok(st.selected)
    }

    /// Several threads: batches of bounded ranges; each batch is searched
    /// in parallel (its lines formatted by forks of the sink, or recorded,
    /// or counted up to the cap) while the previous one's output is joined
    /// or replayed to the sink.
    fn run_parallel(
        &self,
        job: &Job<'_>,
        needs: &Needs,
        cap: u64,
        sink: &mut dyn Sink,
    ) -> Result<u64> {
        let len = job.src.len();
        let size = len.div_ceil(job.threads as u64 * 8).clamp(1, RANGE_MAX);
        let raw: Vec<(u64, u64)> =
            (0..len).step_by(size as usize).map(|s| (s, (s + size).min(len))).collect();
        let ranges = job.lines_aligned(&raw)?;
        let stop = AtomicBool::new(false);
        // Forks format lines only when every selected line is reported.
        let forking = needs.lines && cap == u64::MAX;
        // Searches one batch whose first line is number `base`, into the
        // forks given (one per range) or recorders; returns the per-range
        // output and the number of the line after the batch.
        let search = |batch: &[(u64, u64)],
                      forks: Option<Vec<Box<dyn Forked>>>,
                      base: u64|
         -> Result<(Vec<Done>, u64)> {
            let mut work = Vec::with_capacity(batch.len());
            let mut next = base;
            if needs.line_numbers {
                let counts = job.par_map(batch, |&(s, e)| newlines(job, s, e))?;
                for (&r, n) in batch.iter().zip(counts) {
                    work.push((r, next));
                    next += n;
                }
            } else {
                work.extend(batch.iter().map(|&r| (r, 0)));
            }
            // A fork moves to the thread that searches its range.
            let mut forks =
                forks.map(|f| f.into_iter().map(|f| Mutex::new(Some(f)))).into_iter().flatten();
            let work: Vec<_> = work.into_iter().map(|w| (w, forks.next())).collect();
            let done = job.par_map(&work, |(((s, e), line), fork)| {
                let (s, e) = (*s, *e);
                let mut st = State::new(cap, needs, *line, self.eol);
                if let Some(c) = &mut st.cursor {
                    c.pos = s;
                }
                let fork =
                    fork.as_ref().and_then(|f| f.lock().unwrap_or_else(|p| p.into_inner()).take());
                let mut out = match fork {
                    Some(f) => Done::Formatted(f, 0),
                    None => Done::Recorded(Recorder { needs: *needs, ..Recorder::default() }),
                };
                let sink: &mut dyn Sink = match &mut out {
                    Done::Formatted(f, _) => &mut **f,
                    Done::Recorded(r) => r,
                };
                let re = self.local_re();
                job.for_each_lines(s, e, |off, w| {
                    if stop.load(Ordering::Relaxed) {
                        return Ok(ControlFlow::Break(()));
                    }
                    let flow = self.window(&re, off, w, &mut st, sink);
                    matcher_error(&re, job.src.path())?;
                    st.err.take().map_or(Ok(flow), Err)
                })?;
                match &mut out {
                    Done::Formatted(_, n) => *n = st.selected,
                    Done::Recorded(r) if !needs.lines => r.counted = st.selected,
                    Done::Recorded(_) => {}
                }
                Ok(out)
            })?;
            Ok((done, next))
        };
        let mut batches = ranges.chunks(job.threads * BATCH_PER_THREAD);
        let mut pending: Option<Vec<Done>> = None;
        let mut base = 1;
        let mut total = 0u64;
        loop {
            let batch = batches.next();
            if batch.is_none() && pending.is_none() {
                break;
            }
            // Forked here: the sink is the joining thread's below.
            let forks = batch
                .filter(|_| forking)
                .and_then(|b| b.iter().map(|_| sink.fork()).collect::<Option<Vec<_>>>());
            let (searched, emitted) = std::thread::scope(|scope| {
                let handle = batch.map(|b| scope.spawn(|| search(b, forks, base)));
                let emitted = match pending.take() {
                    Some(records) => replay(records, sink, &mut total, cap),
                    None => Ok(ControlFlow::Continue(())),
                };
                if !matches!(emitted, Ok(ControlFlow::Continue(()))) {
                    stop.store(true, Ordering::Relaxed); // the batch being searched is not needed
                }
                let searched =
                    handle.map(|h| h.join().unwrap_or_else(|p| std::panic::resume_unwind(p)));
                (searched, emitted)
            });
            if emitted?.is_break() {
                break;
            }
            match searched {
                Some(r) => {
                    let (records, next) = r?;
                    pending = Some(records);
                    base = next;
                }
                None => pending = None,
            }
        }
        Ok(total)
    }

    /// A stream (or a file read front to back): read chunks, search up to
    /// the last line end, carry the rest.
    ///
    /// With binary detection ([`BinaryFiles::Binary`], `WithoutMatch`),
    /// the input is read in GNU grep's buffers (96 KiB, at offsets that
    /// are multiples of it, plus the partial line carried over), each
    /// checked for a NUL byte (`binary_at_start`: a file with holes is
    /// binary from its first buffer, as GNU grep decides with
    /// `SEEK_HOLE`). From the buffer holding the first NUL on (the line
    /// carried into it included), NUL bytes end lines (GNU grep's
    /// `zap_nuls`) and the sink is told ([`Sink::binary`]); with
    /// `WithoutMatch` the file counts as not matching at that point.
    fn run_stream(
        &self,
        input: &mut dyn Read,
        path: &Path,
        size: Option<u64>,
        opts: &ScanOptions,
        sink: &mut dyn Sink,
        binary_at_start: bool,
    ) -> Result<u64> {
        let needs = sink.needs();
        let cap = self.cap(&needs);
        let detect = self.detects_binary();
        let chunk = if opts.chunk == 0 { STREAM_CHUNK } else { opts.chunk };
        let re = self.local_re();
        let mut st = State::new(cap, &needs, 0, self.eol);
        // This thread's buffer, `buf_len` bytes of it in use (`grep -r` reads
        // every binary file through here: no allocation, no zeroing per
        // file).
        let mut buf = StreamBuffer::take();
        let mut buf_len = if detect { GNU_BUFFER } else { chunk };
        buf.grow(buf_len);
        let mut filled = 0; // bytes of `buf` holding data
        let mut off = 0u64; // file offset of buf[0]
        let mut binary = false;
        let live = size.is_none();
        sink.begin(&FileInfo { path, size })?;
        loop {
            if !detect && filled == buf_len {
                buf_len *= 2; // one line longer than the buffer
                buf.grow(buf_len);
            }
            let old = filled;
            // One read, or with detection reads (of at most `chunk`) up to
            // the next buffer boundary.
            let until =
                (off + filled as u64) / GNU_BUFFER as u64 * GNU_BUFFER as u64 + GNU_BUFFER as u64;
            let mut eof = false;
            loop {
                let room = if detect {
                    ((until - off) as usize - filled).min(chunk)
                } else {
                    buf_len - filled
                };
                if buf_len < filled + room {
                    buf_len = filled + room;
                    buf.grow(buf_len);
                }
                let got = crate::map::retry_eintr(|| input.read(&mut buf[filled..filled + room]))
                    .map_err(|e| Error::io(label(path), "read", e))?;
                filled += got;
                if got == 0 {
                    eof = true;
                    break;
                }
                // A pipe, FIFO or terminal answers with what has arrived
                // (a short read): search it now, as GNU grep does (a live
                // `tail -f |` must not wait for a buffer's worth). A read
                // that filled what was asked reached the buffer's end
                // (unless `chunk` is below it): the file's buffers.
                if !detect || (live && got < room) || off + filled as u64 == until {
                    break;
                }
            }
            let mut from = old; // bytes before it hold no line end
            let first = off == 0 && old == 0;
            if detect
                && !binary
                && (memchr(0, &buf[old..filled]).is_some() || (binary_at_start && first))
            {
                binary = true;
                if self.opts.binary_files == BinaryFiles::WithoutMatch {
                    sink.finish(0)?;
                    return Ok(0);
                }
                sink.binary()?;
                st.binary = true;
                from = 0;
            }
            if binary {
                zap_nuls(&mut buf[from..filled], self.eol);
            }
            let cut = if eof {
                filled
            } else {
                match memrchr(self.eol, &buf[from..filled]) {
                    Some(i) => from + i + 1,
                    None => continue, // no complete line yet: read more
                }
            };
            if cut > 0 {
                let w = &buf[..cut];
                if binary && st.ctx.as_ref().is_some_and(|c| c.after_left > 0) {
                    // GNU grep prints the trailing context owed into a
                    // binary buffer only when the buffer selects nothing.
                    let mut any = false;
                    let _ = self.selected_lines(&re, w, |_, _| {
                        any = true;
                        ControlFlow::Break(())
                    });
                    if any {
                        if let Some(c) = &mut st.ctx {
                            c.after_left = 0;
                        }
                    }
                }
                let flow = self.window(&re, off, w, &mut st, sink);
                matcher_error(&re, path)?;
                if let Some(e) = st.err.take() {
                    return Err(e);
                }
                opts.advance(cut as u64);
                if flow.is_break() {
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
        sink.finish(st.selected)?;
        Ok(st.selected)
    }

    /// Binary files are detected (and NUL bytes end their lines): not
    /// with `--binary-files=text`, nor with `-z`, where NUL ends every
    /// line anyway.
    fn detects_binary(&self) -> bool {
        self.opts.binary_files != BinaryFiles::Text && !self.opts.null_data
    }
}

/// The error that stopped `re`'s last search, as an error of the file at
/// `path`.
fn matcher_error(re: &Local, path: &Path) -> Result<()> {
    re.take_error().map_or(Ok(()), |e| Err(Error::invalid(label(path), e)))
}

/// [`Grep::run_stream`]'s buffer: taken from the thread's spare one and
/// given back when done (unless a long line made it huge). Its bytes past
/// what a search has read are stale, never looked at.
struct StreamBuffer(Vec<u8>);

/// A larger stream buffer is freed, not kept for the next search.
const STREAM_KEEP: usize = 4 << 20;

thread_local! {
    static SPARE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl StreamBuffer {
    fn take() -> StreamBuffer {
        StreamBuffer(SPARE.with(|s| std::mem::take(&mut *s.borrow_mut())))
    }

    /// At least `n` bytes long (new bytes zeroed once, when first grown).
    fn grow(&mut self, n: usize) {
        if self.0.len() < n {
            self.0.resize(n, 0);
        }
    }
}

impl std::ops::Deref for StreamBuffer {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.0
    }
}

impl std::ops::DerefMut for StreamBuffer {
    fn deref_mut(&mut self) -> &mut [u8] {
        &mut self.0
    }
}

impl Drop for StreamBuffer {
    fn drop(&mut self) {
        if self.0.len() <= STREAM_KEEP {
            let buf = std::mem::take(&mut self.0);
            // (During thread exit the spare may be gone: then it is freed.)
            let _ = SPARE.try_with(|s| *s.borrow_mut() = buf);
        }
    }
}

/// GNU grep's `zap_nuls`: NUL bytes become line ends. Every byte stored
/// (a select, not a branch), so the compiler vectorises the loop: binary
/// files (`.pyc`, objects) hold NUL bytes every few bytes, where a
/// `memchr` per NUL, or a store per NUL, cost more than the search.
fn zap_nuls(w: &mut [u8], eol: u8) {
    for b in w {
        *b = if *b == 0 { eol } else { *b };
    }
}

/// Reads a file front to back through its [`Job`] source (mapped or
/// `pread`), for the searches that read it as a stream.
struct JobReader<'j, 'a> {
    job: &'j Job<'a>,
    pos: u64,
    /// Read up to here and given back (see [`Source::release`](crate::scan::source::Source::release)): the
    /// reads are GNU-sized, below the window that releases by itself.
    released: u64,
}

impl Read for JobReader<'_, '_> {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        let end = (self.pos + out.len() as u64).min(self.job.src.len());
        if end <= self.pos {
            return Ok(0);
        }
        let n = (end - self.pos) as usize;
        self.job
            .src
            .with_window(self.pos, end, |w| out[..n].copy_from_slice(w))
            .map_err(std::io::Error::other)?;
        self.pos = end;
        if end - self.released >= RELEASE_MIN {
            self.job.src.release(self.released, end);
            self.released = end;
        }
        Ok(n)
    }
}

/// Joins or replays one batch's output (or counts) in order, stopping at
/// `cap` selected lines.
fn replay(
    done: Vec<Done>,
    sink: &mut dyn Sink,
    total: &mut u64,
    cap: u64,
) -> Result<ControlFlow<()>> {
    for d in done {
        let rec = match d {
            Done::Recorded(rec) => rec,
            Done::Formatted(fork, selected) => {
                // No cap here: the range's lines are all there (up to the
                // one its fork stopped at).
                *total = (*total + selected).min(cap);
                if sink.join(fork.done())?.is_break() {
                    return Ok(ControlFlow::Break(()));
                }
                continue;
            }
        };
        *total = (*total + rec.counted).min(cap);
        for r in &rec.lines {
            if *total >= cap {
                return Ok(ControlFlow::Break(()));
            }
            *total += 1;
            let l = SinkLine {
                line: r.line,
                offset: r.offset,
                bytes: &rec.bytes[r.bytes.0..r.bytes.1],
                spans: &rec.spans[r.spans.0..r.spans.1],
            };
            if sink.matched(&l)?.is_break() {
                return Ok(ControlFlow::Break(()));
            }
        }
    }
    Ok(if *total >= cap { ControlFlow::Break(()) } else { ControlFlow::Continue(()) })
}

/// The offset just past the last selected line (its line end included,
/// when it has one): [`Grep::resume_stdin`]'s sink.
struct LastLineEnd(u64);

impl Sink for LastLineEnd {
    fn needs(&self) -> Needs {
        Needs { lines: true, ..Needs::default() }
    }

    fn matched(&mut self, l: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        self.0 = l.offset + l.bytes.len() as u64 + 1;
        Ok(ControlFlow::Continue(()))
    }
}

/// Where standard input stands (`None` if it cannot seek).
fn stdin_position(path: &Path) -> Result<Option<u64>> {
    Ok(stdin_file()?.stream_position().ok().filter(|_| path.as_os_str() == "-"))
}

/// What searching one range on several threads left to report.
enum Done {
    /// Formatted by a fork of the sink; the range's selected lines.
    Formatted(Box<dyn Forked>, u64),
    /// Recorded (or counted).
    Recorded(Recorder),
}

/// A range's selected lines, kept until they can be reported in order.
#[derive(Default)]
struct Recorder {
    needs: Needs,
    bytes: Vec<u8>,
    spans: Vec<(usize, usize)>,
    lines: Vec<Recorded>,
    /// Selected lines when only counting (no lines recorded).
    counted: u64,
}

struct Recorded {
    line: u64,
    offset: u64,
    bytes: (usize, usize),
    spans: (usize, usize),
}

impl Sink for Recorder {
    fn needs(&self) -> Needs {
        self.needs
    }

    fn matched(&mut self, l: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        let (b, s) = (self.bytes.len(), self.spans.len());
        self.bytes.extend_from_slice(l.bytes);
        self.spans.extend_from_slice(l.spans);
        self.lines.push(Recorded {
            line: l.line,
            offset: l.offset,
            bytes: (b, self.bytes.len()),
            spans: (s, self.spans.len()),
        });
        Ok(ControlFlow::Continue(()))
    }
}

/// Starts of the last `k` lines in `[from, to)` of `w` (`to` a line start
/// or `w.len()`), in order.
fn last_lines(w: &[u8], eol: u8, from: usize, to: usize, k: usize) -> Vec<usize> {
    let mut starts = Vec::new();
    let mut p = to;
    while starts.len() < k && p > from {
        let end = if w[p - 1] == eol { p - 1 } else { p };
        let s = memrchr(eol, &w[from..end]).map_or(from, |i| from + i + 1);
        starts.push(s);
        p = s;
    }
    starts.reverse();
    starts
}

/// Calls `f` for each line starting in `[from, to)` of `w` (`from` a line
/// start; `to` a line start or `w.len()`).
fn each_line(
    w: &[u8],
    eol: u8,
    from: usize,
    to: usize,
    f: &mut impl FnMut(usize, usize) -> ControlFlow<()>,
) -> ControlFlow<()> {
    let mut p = from;
    while p < to {
        let le = memchr(eol, &w[p..to]).map_or(to, |i| p + i);
        f(p, le)?;
        p = le + 1;
    }
    ControlFlow::Continue(())
}

/// Lines in a window of whole lines (the last may lack its newline).
fn lines_in(w: &[u8], eol: u8) -> u64 {
    bytecount::count(w, eol) as u64 + u64::from(w.last().is_some_and(|&b| b != eol))
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

/// Line numbers for the lines of a range: `line` is the number of the line
/// starting at file offset `pos`.
struct Cursor {
    line: u64,
    pos: u64,
    eol: u8,
}

impl Cursor {
    /// The number of the line starting at `w[ls]` (`w` starts at `off`).
    fn line_at(&mut self, w: &[u8], off: u64, ls: usize) -> u64 {
        let from = (self.pos - off) as usize;
        self.line += bytecount::count(&w[from..ls], self.eol) as u64;
        self.pos = off + ls as u64;
        self.line
    }

    /// Moves to the end of the window.
    fn finish(&mut self, w: &[u8], off: u64) {
        let from = (self.pos - off) as usize;
        self.line += bytecount::count(&w[from..], self.eol) as u64;
        self.pos = off + w.len() as u64;
    }
}

/// The state of one range (or the whole file) being searched.
struct State {
    needs: Needs,
    cap: u64,
    selected: u64,
    cursor: Option<Cursor>,
    /// Reused for the spans of each reported line.
    spans: Vec<(usize, usize)>,
    /// The sink failed (returned by the driver) or asked to stop.
    err: Option<Error>,
    stopped: bool,
    ctx: Option<Context>,
    /// In a binary file's part where NUL ends lines: selected lines get
    /// no leading context (GNU grep prints nothing for them).
    binary: bool,
}

/// Context lines: what is owed after the last selected line, and the
/// unreported lines that ended the previous window.
struct Context {
    before: usize,
    after: usize,
    after_left: usize,
    /// Offset just past the last reported line.
    printed_end: Option<u64>,
    /// `(line number, offset, bytes)`.
    ring: VecDeque<(u64, u64, Vec<u8>)>,
}

impl State {
    /// `line`: the number of the first line (0: the file's first line).
    fn new(cap: u64, needs: &Needs, line: u64, eol: u8) -> State {
        let context = needs.lines && (needs.before.is_some() || needs.after.is_some());
        State {
            needs: *needs,
            cap,
            selected: 0,
            cursor: (needs.lines && needs.line_numbers).then_some(Cursor {
                line: line.max(1),
                pos: 0,
                eol,
            }),
            spans: Vec::new(),
            err: None,
            stopped: false,
            binary: false,
            ctx: context.then(|| Context {
                before: needs.before.unwrap_or(0),
                after: needs.after.unwrap_or(0),
                after_left: 0,
                printed_end: None,
                ring: VecDeque::new(),
            }),
        }
    }

    /// A sink's answer as the flow of the search.
    fn flow(&mut self, r: Result<ControlFlow<()>>) -> ControlFlow<()> {
        match r {
            Ok(ControlFlow::Continue(())) => ControlFlow::Continue(()),
            Ok(ControlFlow::Break(())) => {
                self.stopped = true;
                ControlFlow::Break(())
            }
            Err(e) => {
                self.err = Some(e);
                self.stopped = true;
                ControlFlow::Break(())
            }
        }
    }
}

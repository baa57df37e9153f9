//! One window of whole lines: the matcher's selected lines reported to
//! the sink, with their context, or counted; and the per-range state.

use std::collections::VecDeque;
use std::ops::ControlFlow;

use memchr::{memchr, memrchr};

use crate::scan::engine::Job;
use crate::scan::grep::matcher::{LineMatcher, Local};
use crate::scan::grep::sink::{Needs, Sink, SinkLine};
use crate::scan::grep::Grep;
use crate::{Error, Result};

impl Grep {
    /// Calls `f(start, end)` for every selected line of `w`, in order.
    pub(super) fn selected_lines(
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
    pub(super) fn window(
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
    pub(super) fn count_window(&self, re: &Local, w: &[u8], st: &mut State) -> ControlFlow<()> {
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
    pub(super) fn report_window(
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
    pub(super) fn emit(
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
    pub(super) fn emit_line(
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
    pub(super) fn before_match(
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
    pub(super) fn after_context(
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
    pub(super) fn keep_before(&self, off: u64, w: &[u8], next: usize, st: &mut State) {
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
}

/// Starts of the last `k` lines in `[from, to)` of `w` (`to` a line start
/// or `w.len()`), in order.
pub(super) fn last_lines(w: &[u8], eol: u8, from: usize, to: usize, k: usize) -> Vec<usize> {
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
pub(super) fn each_line(
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
pub(super) fn lines_in(w: &[u8], eol: u8) -> u64 {
    bytecount::count(w, eol) as u64 + u64::from(w.last().is_some_and(|&b| b != eol))
}

/// Newlines in `[s, e)` of the file.
pub(super) fn newlines(job: &Job<'_>, s: u64, e: u64) -> Result<u64> {
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
pub(super) struct Cursor {
    pub(super) line: u64,
    pub(super) pos: u64,
    pub(super) eol: u8,
}

impl Cursor {
    /// The number of the line starting at `w[ls]` (`w` starts at `off`).
    pub(super) fn line_at(&mut self, w: &[u8], off: u64, ls: usize) -> u64 {
        let from = (self.pos - off) as usize;
        self.line += bytecount::count(&w[from..ls], self.eol) as u64;
        self.pos = off + ls as u64;
        self.line
    }

    /// Moves to the end of the window.
    pub(super) fn finish(&mut self, w: &[u8], off: u64) {
        let from = (self.pos - off) as usize;
        self.line += bytecount::count(&w[from..], self.eol) as u64;
        self.pos = off + w.len() as u64;
    }
}

/// The state of one range (or the whole file) being searched.
pub(super) struct State {
    pub(super) needs: Needs,
    pub(super) cap: u64,
    pub(super) selected: u64,
    pub(super) cursor: Option<Cursor>,
    /// Reused for the spans of each reported line.
    pub(super) spans: Vec<(usize, usize)>,
    /// The sink failed (returned by the driver) or asked to stop.
    pub(super) err: Option<Error>,
    pub(super) stopped: bool,
    pub(super) ctx: Option<Context>,
    /// In a binary file's part where NUL ends lines: selected lines get
    /// no leading context (GNU grep prints nothing for them).
    pub(super) binary: bool,
}

/// Context lines: what is owed after the last selected line, and the
/// unreported lines that ended the previous window.
pub(super) struct Context {
    pub(super) before: usize,
    pub(super) after: usize,
    pub(super) after_left: usize,
    /// Offset just past the last reported line.
    pub(super) printed_end: Option<u64>,
    /// `(line number, offset, bytes)`.
    pub(super) ring: VecDeque<(u64, u64, Vec<u8>)>,
}

impl State {
    /// `line`: the number of the first line (0: the file's first line).
    pub(super) fn new(cap: u64, needs: &Needs, line: u64, eol: u8) -> State {
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
    pub(super) fn flow(&mut self, r: Result<ControlFlow<()>>) -> ControlFlow<()> {
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

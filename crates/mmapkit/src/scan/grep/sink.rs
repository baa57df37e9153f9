//! What the search reports to, and the sinks that only collect.

use std::ops::ControlFlow;
use std::path::Path;

use crate::Result;

/// What a sink wants the search to work out (each costs time).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Needs {
    /// Each selected line (false: only the per-file count given to
    /// [`Sink::finish`], the cheapest search).
    pub lines: bool,
    /// 1-based line numbers (a newline count ahead of each range).
    pub line_numbers: bool,
    /// The match spans inside each reported line.
    pub spans: bool,
    /// Context lines before each selected line; `Some` (even `Some(0)`)
    /// turns on context breaks. Context is searched on one thread per
    /// file, so that groups come out whole.
    pub before: Option<usize>,
    /// Context lines after each selected line (as `before`).
    pub after: Option<usize>,
    /// Stop at the first selected line (`-l`, `-L`, `-q`).
    pub first_only: bool,
}

/// The file being searched, given to [`Sink::begin`].
#[derive(Clone, Copy, Debug)]
pub struct FileInfo<'a> {
    /// The path as given (`-` for standard input).
    pub path: &'a Path,
    /// Its size, when it has one (not a stream).
    pub size: Option<u64>,
}

/// One reported line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinkLine<'a> {
    /// 1-based line number (0 unless [`Needs::line_numbers`]).
    pub line: u64,
    /// Byte offset of the line start.
    pub offset: u64,
    /// The line without its newline.
    pub bytes: &'a [u8],
    /// `(start, end)` of each match inside `bytes`, empty ones included
    /// (empty unless [`Needs::spans`]): those of selected lines, or under
    /// `invert` those of context lines (GNU grep's rule for `-o` and color;
    /// context lines after the `max_count`-th selected line have none).
    pub spans: &'a [(usize, usize)],
}

/// Receives what a search finds, in file order. Returning
/// `ControlFlow::Break` stops the search of this file; an error stops it
/// and is returned by the search.
pub trait Sink {
    /// What the search must work out for this sink.
    fn needs(&self) -> Needs;
    /// The file is open; nothing was reported yet.
    fn begin(&mut self, _file: &FileInfo<'_>) -> Result<()> {
        Ok(())
    }
    /// The file is binary from here on (see [`super::BinaryFiles`]): the
    /// lines reported after this call come from the part where NUL bytes
    /// end lines. GNU grep prints none of its selected lines (a printer
    /// stops at the first one and says that the binary file matches) but
    /// still the trailing context owed to an earlier line.
    fn binary(&mut self) -> Result<()> {
        Ok(())
    }
    /// A selected line.
    fn matched(&mut self, line: &SinkLine<'_>) -> Result<ControlFlow<()>>;
    /// A context line (only with [`Needs::before`] or [`Needs::after`]).
    fn context(&mut self, _line: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        Ok(ControlFlow::Continue(()))
    }
    /// Lines were skipped between two groups of reported lines.
    fn context_break(&mut self) -> Result<()> {
        Ok(())
    }
    /// The search of the file ended with `selected` lines selected.
    fn finish(&mut self, _selected: u64) -> Result<()> {
        Ok(())
    }
    /// For a search on several threads (no context, no cap): a copy of
    /// this sink that formats one range's selected lines into bytes on a
    /// search thread; what it formatted comes back to [`Sink::join`] in
    /// file order (a sink may hand the joined buffers to its next forks).
    /// Asked after [`Sink::begin`], once per range. `None`
    /// (the default): the range's lines are recorded and reported to this
    /// sink, on one thread.
    fn fork(&mut self) -> Option<Box<dyn Forked>> {
        None
    }
    /// What a fork of this sink formatted for one range, in file order
    /// (after the lines reported for earlier ranges).
    fn join(&mut self, _part: Formatted) -> Result<ControlFlow<()>> {
        Ok(ControlFlow::Continue(()))
    }
}

/// A sink made by [`Sink::fork`]: it gets one range's selected lines (with
/// their line numbers, offsets and spans) on a search thread.
pub trait Forked: Sink + Send {
    /// What it formatted, for [`Sink::join`].
    fn done(self: Box<Self>) -> Formatted;
}

/// One range's output, formatted by a [`Forked`] sink.
#[derive(Debug, Default)]
pub struct Formatted {
    /// The bytes to write, in order.
    pub bytes: Vec<u8>,
    /// The fork stopped the range at its last reported line (its sink
    /// decides what that means; the search stops there).
    pub stopped: bool,
}

impl<S: Sink + ?Sized> Sink for &mut S {
    fn needs(&self) -> Needs {
        (**self).needs()
    }
    fn begin(&mut self, file: &FileInfo<'_>) -> Result<()> {
        (**self).begin(file)
    }
    fn binary(&mut self) -> Result<()> {
        (**self).binary()
    }
    fn matched(&mut self, line: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        (**self).matched(line)
    }
    fn context(&mut self, line: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        (**self).context(line)
    }
    fn context_break(&mut self) -> Result<()> {
        (**self).context_break()
    }
    fn finish(&mut self, selected: u64) -> Result<()> {
        (**self).finish(selected)
    }
    fn fork(&mut self) -> Option<Box<dyn Forked>> {
        (**self).fork()
    }
    fn join(&mut self, part: Formatted) -> Result<ControlFlow<()>> {
        (**self).join(part)
    }
}

/// Counts only.
pub(super) struct Counter;

impl Sink for Counter {
    fn needs(&self) -> Needs {
        Needs::default()
    }
    fn matched(&mut self, _: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        Ok(ControlFlow::Continue(()))
    }
}

/// Collects `(line number, offset, bytes)` per selected line, or per
/// non-empty match with `only_matching`, up to a limit (for bindings).
#[derive(Debug, Default)]
pub struct Collect {
    only_matching: bool,
    limit: usize,
    /// What was collected.
    pub found: Vec<(u64, u64, Vec<u8>)>,
}

impl Collect {
    /// Collects at most `limit` entries.
    pub fn new(only_matching: bool, limit: Option<usize>) -> Collect {
        Collect { only_matching, limit: limit.unwrap_or(usize::MAX), found: Vec::new() }
    }
}

impl Sink for Collect {
    fn needs(&self) -> Needs {
        Needs { lines: true, line_numbers: true, spans: self.only_matching, ..Needs::default() }
    }

    fn matched(&mut self, l: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        if !self.only_matching {
            self.found.push((l.line, l.offset, l.bytes.to_vec()));
        } else {
            for &(s, e) in l.spans.iter().filter(|(s, e)| e > s) {
                if self.found.len() >= self.limit {
                    break;
                }
                self.found.push((l.line, l.offset + s as u64, l.bytes[s..e].to_vec()));
            }
        }
        Ok(if self.found.len() >= self.limit {
            ControlFlow::Break(())
        } else {
            ControlFlow::Continue(())
        })
    }
}

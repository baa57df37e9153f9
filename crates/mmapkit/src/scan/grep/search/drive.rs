//! The drivers: a file searched on one thread, on several (ranges in
//! batches, forked or recorded sinks joined in file order), or as a
//! stream; and what they need (the stream buffer, recorded lines).

use std::cell::RefCell;
use std::io::{Read, Seek};
use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use memchr::{memchr, memrchr};

use crate::scan::engine::{Job, ScanOptions};
use crate::scan::grep::matcher::LineMatcher;
use crate::scan::grep::sink::{FileInfo, Forked, Needs, Sink, SinkLine};
use crate::scan::grep::{BinaryFiles, Grep};
use crate::scan::source::{label, stdin_file, RELEASE_MIN};
use crate::{Error, Result};

use super::*;

impl Grep {
    // ---- drivers ----

    /// Counting without a cap: every range at once.
    pub(super) fn count_all(&self, job: &Job<'_>) -> Result<u64> {
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
    pub(super) fn run_sequential(
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
    pub(super) fn run_parallel(
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
    pub(super) fn run_stream(
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
}

/// [`Grep::run_stream`]'s buffer: taken from the thread's spare one and
/// given back when done (unless a long line made it huge). Its bytes past
/// what a search has read are stale, never looked at.
pub(super) struct StreamBuffer(pub(super) Vec<u8>);

/// A larger stream buffer is freed, not kept for the next search.
pub(super) const STREAM_KEEP: usize = 4 << 20;

thread_local! {
    static SPARE: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl StreamBuffer {
    pub(super) fn take() -> StreamBuffer {
        StreamBuffer(SPARE.with(|s| std::mem::take(&mut *s.borrow_mut())))
    }

    /// At least `n` bytes long (new bytes zeroed once, when first grown).
    pub(super) fn grow(&mut self, n: usize) {
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
pub(super) fn zap_nuls(w: &mut [u8], eol: u8) {
    for b in w {
        *b = if *b == 0 { eol } else { *b };
    }
}

/// Reads a file front to back through its [`Job`] source (mapped or
/// `pread`), for the searches that read it as a stream.
pub(super) struct JobReader<'j, 'a> {
    pub(super) job: &'j Job<'a>,
    pub(super) pos: u64,
    /// Read up to here and given back (see [`Source::release`](crate::scan::source::Source::release)): the
    /// reads are GNU-sized, below the window that releases by itself.
    pub(super) released: u64,
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
pub(super) fn replay(
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
pub(super) struct LastLineEnd(pub(super) u64);

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
pub(super) fn stdin_position(path: &Path) -> Result<Option<u64>> {
    Ok(stdin_file()?.stream_position().ok().filter(|_| path.as_os_str() == "-"))
}

/// What searching one range on several threads left to report.
pub(super) enum Done {
    /// Formatted by a fork of the sink; the range's selected lines.
    Formatted(Box<dyn Forked>, u64),
    /// Recorded (or counted).
    Recorded(Recorder),
}

/// A range's selected lines, kept until they can be reported in order.
#[derive(Default)]
pub(super) struct Recorder {
    pub(super) needs: Needs,
    pub(super) bytes: Vec<u8>,
    pub(super) spans: Vec<(usize, usize)>,
    pub(super) lines: Vec<Recorded>,
    /// Selected lines when only counting (no lines recorded).
    pub(super) counted: u64,
}

pub(super) struct Recorded {
    pub(super) line: u64,
    pub(super) offset: u64,
    pub(super) bytes: (usize, usize),
    pub(super) spans: (usize, usize),
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

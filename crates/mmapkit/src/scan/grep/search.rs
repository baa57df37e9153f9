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

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};

use memchr::memchr;

use super::matcher::{LineMatcher, Local};
use super::sink::{FileInfo, Needs, Sink};
use super::{BinaryFiles, Grep};
use crate::scan::engine::{Job, Scan, ScanOptions};
use crate::scan::source::{label, peek_whole, stdin_file, Peeked, Strategy, AUTO_MMAP_MIN};
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

mod drive;
mod window;

use drive::*;
use window::*;

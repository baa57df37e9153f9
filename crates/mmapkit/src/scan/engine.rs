//! The parallel driver: split a file into ranges, scan ranges on a thread
//! pool, window by window, and stitch the results.
//!
//! # Matches across boundaries
//!
//! Matches are leftmost and non-overlapping over the **whole file**. A
//! window carries `needle.len() - 1` bytes past its core so a match that
//! starts in the core and ends past it is seen whole; inside a range the
//! scan resumes after the last match. Across ranges, only needles with a
//! border (a prefix that is also a suffix, like `aa`) can be affected by
//! where the previous range's last match ended; for those, a first pass
//! records each range's first matches and last match end, and a short
//! sequential pass moves each range's entry point past the previous match
//! (re-synchronising as soon as a rescanned match coincides with a recorded
//! one). All other needles start every range at its first byte.

use std::ops::ControlFlow;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};

use memchr::memmem::Finder;
use rayon::prelude::*;

use super::source::{label, Input, Source, Strategy};
use crate::bytes;
use crate::exec::{Progress, Threads};
use crate::{Error, Result};

crate::options! {
    /// Options shared by every whole-file operation.
    #[derive(Clone, Debug, Default)]
    pub struct ScanOptions {
        /// I/O strategy.
        pub strategy: Strategy,
        /// Worker threads (see [`Threads`]; default: one per core).
        pub threads: Threads,
        /// Window size in bytes (0: the default, 1 MiB for read and 8 MiB for
        /// mmap). Tiny values force every boundary case in tests.
        pub chunk: usize,
        /// Bytes processed (updated per window; the total is the file's size,
        /// unknown for streams).
        pub progress: Progress,
    }
}

impl ScanOptions {
    /// Options with a strategy and thread count (a [`Threads`], or a
    /// `usize` with 0 for auto).
    pub fn new(strategy: Strategy, threads: impl Into<Threads>) -> Self {
        ScanOptions { strategy, threads: threads.into(), ..Default::default() }
    }

    pub(crate) fn window(&self, src: &Source) -> u64 {
        match (self.chunk, src) {
            (0, Source::Mapped(_)) => 8 << 20,
            (0, Source::Read { .. }) => 1 << 20,
            (c, _) => c as u64,
        }
    }

    pub(crate) fn advance(&self, n: u64) {
        self.progress.advance(n);
    }
}

/// Splits `[0, len)` into ranges: 8 per thread (load balance), each at
/// least one window, so tiny windows give many ranges.
pub(crate) fn split(len: u64, threads: usize, window: u64) -> Vec<(u64, u64)> {
    if len == 0 {
        return vec![];
    }
    let n = if threads <= 1 { 1 } else { threads as u64 * 8 };
    let size = len.div_ceil(n).max(window).max(1);
    (0..len).step_by(size as usize).map(|s| (s, (s + size).min(len))).collect()
}

/// An open file plus everything an operation needs to scan it.
pub(crate) struct Job<'a> {
    pub src: Source,
    pub opts: &'a ScanOptions,
    pub window: u64,
    pub threads: usize,
}

/// What a scan reads: a file at offsets, or a stream front to back.
pub(crate) enum Scan<'a> {
    Job(Job<'a>),
    /// With the size when it has one (see [`Input::Stream`]).
    Stream(Box<dyn std::io::Read + Send>, Option<u64>),
}

impl<'a> Scan<'a> {
    /// Opens `path` for a read-only scan ([`Input::open`] decides).
    pub(crate) fn open(path: &Path, opts: &'a ScanOptions) -> Result<Self> {
        Ok(Scan::from_input(Input::open(path, opts.strategy)?, opts))
    }

    /// [`Scan::open`] for an input already opened (see
    /// [`crate::scan::source::peek_whole`]).
    pub(crate) fn from_input(input: Input, opts: &'a ScanOptions) -> Self {
        match input {
            Input::Random(src) => Scan::Job(Job::new(src, opts)),
            Input::Stream(r, size) => Scan::Stream(r, size),
        }
    }
}

impl<'a> Job<'a> {
    /// Opens `path` for access at offsets (a stream is an error).
    pub(crate) fn open(path: &Path, opts: &'a ScanOptions) -> Result<Self> {
        Ok(Job::new(Source::open(path, opts.strategy)?, opts))
    }

    pub(crate) fn new(src: Source, opts: &'a ScanOptions) -> Self {
        let window = opts.window(&src);
        opts.progress.set_total(src.len());
        Job { src, opts, window, threads: opts.threads.get() }
    }

    /// The file is read whole in one window (the read strategy, no
    /// longer than a window): small files, searched from one read.
    pub(crate) fn whole(&self) -> bool {
        matches!(self.src, Source::Read { .. }) && self.src.len() <= self.window
    }

    pub(crate) fn ranges(&self) -> Vec<(u64, u64)> {
        split(self.src.len(), self.threads, self.window)
    }

    /// Runs `f` over `items` on the pool (in order of results), or inline
    /// for a single thread.
    pub(crate) fn par_map<T: Sync, R: Send>(
        &self,
        items: &[T],
        f: impl Fn(&T) -> Result<R> + Sync,
    ) -> Result<Vec<R>> {
        if self.threads <= 1 || items.len() <= 1 {
            return items.iter().map(f).collect();
        }
        self.opts.threads.install(|| items.par_iter().map(&f).collect())?
    }

    /// Leftmost non-overlapping matches of `finder` starting in
    /// `[entry, end)`, window by window; `on_match` may stop the scan.
    /// Returns the end of the last match (if any) and whether it stopped.
    pub(crate) fn scan_range(
        &self,
        finder: &Finder<'_>,
        entry: u64,
        end: u64,
        mut on_match: impl FnMut(u64) -> ControlFlow<()>,
    ) -> Result<(Option<u64>, bool)> {
        let n = finder.needle().len() as u64;
        let len = self.src.len();
        let mut pos = entry;
        let mut last_end = None;
        while pos < end {
            let core_end = (pos + self.window).min(end);
            let win_end = (core_end + n - 1).min(len);
            let mut stopped = false;
            let next = self.src.with_window(pos, win_end, |w| {
                let core = (core_end - pos) as usize;
                let mut i = 0usize;
                while let Some(m) = finder.find(&w[i..]) {
                    let at = i + m;
                    if at >= core {
                        break;
                    }
                    i = at + n as usize;
                    last_end = Some(pos + i as u64);
                    if on_match(pos + at as u64).is_break() {
                        stopped = true;
                        break;
                    }
                }
                core_end.max(pos + i as u64)
            })?;
            self.opts.advance(core_end - pos);
            if stopped {
                return Ok((last_end, true));
            }
            pos = next;
        }
        Ok((last_end, false))
    }

    /// Where each range's scan must start so that matches are the whole
    /// file's leftmost non-overlapping ones (see the module docs).
    pub(crate) fn entries(&self, finder: &Finder<'_>, ranges: &[(u64, u64)]) -> Result<Vec<u64>> {
        self.entries_after(finder, ranges, 0)
    }

    /// [`Job::entries`] for ranges that continue a scan whose last match
    /// ended at `carry` (anything `<= ranges[0].0` when no match reaches
    /// into them): lets a caller process a file batch of ranges by batch
    /// (the rewrite of `replace`).
    pub(crate) fn entries_after(
        &self,
        finder: &Finder<'_>,
        ranges: &[(u64, u64)],
        carry: u64,
    ) -> Result<Vec<u64>> {
        let starts: Vec<u64> = ranges.iter().map(|r| r.0).collect();
        let reaches_in = ranges.first().is_some_and(|r| carry > r.0);
        if (ranges.len() <= 1 && !reaches_in) || !bytes::has_border(finder.needle()) {
            return Ok(starts);
        }
        const KEEP: usize = 64;
        // Pass 1 (parallel): each range scanned from its own start.
        let first: Vec<(Vec<u64>, Option<u64>)> = self.par_map(ranges, |&(s, e)| {
            let mut seen = Vec::new();
            let (last, _) = self.scan_range(finder, s, e, |q| {
                if seen.len() < KEEP {
                    seen.push(q);
                }
                ControlFlow::Continue(())
            })?;
            Ok((seen, last))
        })?;
        // Pass 2 (sequential, short): carry the previous range's last match.
        let mut entries = starts;
        let mut carry = carry;
        for i in 0..ranges.len() {
            let (s, e) = ranges[i];
            let (seen, last) = &first[i];
            if carry <= s {
                carry = last.unwrap_or(carry);
                continue;
            }
            entries[i] = carry.min(e);
            let mut synced = false;
            let mut new_last = None;
            self.scan_range(finder, entries[i], e, |q| {
                if seen.binary_search(&q).is_ok() {
                    synced = true;
                    return ControlFlow::Break(());
                }
                new_last = Some(q + finder.needle().len() as u64);
                ControlFlow::Continue(())
            })?;
            carry = if synced { last.unwrap_or(carry) } else { new_last.unwrap_or(carry) };
        }
        Ok(entries)
    }
}

fn finder(needle: &[u8]) -> Result<Finder<'static>> {
    if needle.is_empty() {
        return Err(Error::InvalidArgument("the pattern is empty".into()));
    }
    Ok(Finder::new(needle).into_owned())
}

/// Occurrences of `needle` in the file (leftmost, non-overlapping).
pub fn count(path: impl AsRef<Path>, needle: &[u8], opts: &ScanOptions) -> Result<u64> {
    let path = path.as_ref();
    let job = match Scan::open(path, opts)? {
        Scan::Job(job) => job,
        Scan::Stream(mut r, _) => {
            let mut n = 0;
            stream_matches(&mut r, needle, opts, label(path), |_| {
                n += 1;
                ControlFlow::Continue(())
            })?;
            return Ok(n);
        }
    };
    let ranges = job.ranges();
    if needle.len() == 1 {
        // Dense single bytes (newlines, commas): SIMD counting per window.
        let b = needle[0];
        let counts = job.par_map(&ranges, |&(s, e)| {
            let mut total = 0;
            let mut pos = s;
            while pos < e {
                let end = (pos + job.window).min(e);
                total += job.src.with_window(pos, end, |w| bytecount::count(w, b) as u64)?;
                opts.advance(end - pos);
                pos = end;
            }
            Ok(total)
        })?;
        return Ok(counts.iter().sum());
    }
    let finder = finder(needle)?;
    let entries = job.entries(&finder, &ranges)?;
    let work: Vec<(u64, u64)> = entries.iter().zip(&ranges).map(|(&a, &(_, e))| (a, e)).collect();
    let counts = job.par_map(&work, |&(a, e)| {
        let mut c = 0u64;
        job.scan_range(&finder, a, e, |_| {
            c += 1;
            ControlFlow::Continue(())
        })?;
        Ok(c)
    })?;
    Ok(counts.iter().sum())
}

/// Lines in the file, like `wc -l` (the number of `\n` bytes).
pub fn count_lines(path: impl AsRef<Path>, opts: &ScanOptions) -> Result<u64> {
    count(path, b"\n", opts)
}

/// Offsets of the leftmost non-overlapping occurrences, at most `limit`.
pub fn find_all(
    path: impl AsRef<Path>,
    needle: &[u8],
    limit: Option<usize>,
    opts: &ScanOptions,
) -> Result<Vec<u64>> {
    let path = path.as_ref();
    let cap = limit.unwrap_or(usize::MAX);
    let job = match Scan::open(path, opts)? {
        Scan::Job(job) => job,
        Scan::Stream(mut r, _) => {
            let mut all = Vec::new();
            if cap > 0 {
                stream_matches(&mut r, needle, opts, label(path), |q| {
                    all.push(q);
                    if all.len() >= cap {
                        ControlFlow::Break(())
                    } else {
                        ControlFlow::Continue(())
                    }
                })?;
            } else {
                finder(needle)?;
            }
            return Ok(all);
        }
    };
    let finder = finder(needle)?;
    let ranges = job.ranges();
    let entries = job.entries(&finder, &ranges)?;
    let work: Vec<(u64, u64)> = entries.iter().zip(&ranges).map(|(&a, &(_, e))| (a, e)).collect();
    // Ranges before the one that fills `limit` are all that is needed:
    // later ranges stop as soon as earlier ones have found enough.
    let found = AtomicUsize::new(usize::MAX); // lowest range index known to complete `limit` on its own
    let parts = job.par_map(&work.iter().enumerate().collect::<Vec<_>>(), |&(i, &(a, e))| {
        let mut out = Vec::new();
        if i > found.load(Ordering::Relaxed) {
            return Ok(out);
        }
        job.scan_range(&finder, a, e, |q| {
            out.push(q);
            if out.len() >= cap {
                found.fetch_min(i, Ordering::Relaxed);
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        })?;
        Ok(out)
    })?;
    let mut all: Vec<u64> = parts.into_iter().flatten().collect();
    all.truncate(cap);
    Ok(all)
}

/// Offset of the first occurrence, stopping as soon as it is known: a
/// match in the first window returns without starting any thread.
pub fn find(path: impl AsRef<Path>, needle: &[u8], opts: &ScanOptions) -> Result<Option<u64>> {
    let path = path.as_ref();
    let job = match Scan::open(path, opts)? {
        Scan::Job(job) => job,
        Scan::Stream(mut r, _) => {
            let mut at = None;
            stream_matches(&mut r, needle, opts, label(path), |q| {
                at = Some(q);
                ControlFlow::Break(())
            })?;
            return Ok(at);
        }
    };
    let finder = finder(needle)?;
    let len = job.src.len();
    let head = job.window.min(len);
    // Fast path: the first window, on this thread.
    let (mut hit, _) = job.scan_range(&finder, 0, head, |_| ControlFlow::Break(()))?;
    if let Some(end) = hit {
        return Ok(Some(end - needle.len() as u64));
    }
    let ranges: Vec<(usize, (u64, u64))> = split(len - head, job.threads, job.window)
        .into_iter()
        .map(|(s, e)| (s + head, e + head))
        .enumerate()
        .collect();
    let best = AtomicUsize::new(usize::MAX); // lowest range index with a match
    let results = job.par_map(&ranges, |&(i, (s, e))| {
        if i > best.load(Ordering::Relaxed) {
            return Ok(None);
        }
        let mut at = None;
        // Scan window by window, giving up once an earlier range has a match.
        let mut pos = s;
        while pos < e && at.is_none() {
            if i > best.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let end = (pos + job.window).min(e);
            job.scan_range(&finder, pos, end, |q| {
                at = Some(q);
                ControlFlow::Break(())
            })?;
            pos = end;
        }
        if at.is_some() {
            best.fetch_min(i, Ordering::Relaxed);
        }
        Ok(at)
    })?;
    hit = results.into_iter().flatten().next();
    Ok(hit)
}

/// Offset of the last occurrence (any occurrence, overlapping or not),
/// scanning from the end with early exit.
pub fn rfind(path: impl AsRef<Path>, needle: &[u8], opts: &ScanOptions) -> Result<Option<u64>> {
    let path = path.as_ref();
    let job = match Scan::open(path, opts)? {
        Scan::Job(job) => job,
        Scan::Stream(mut r, _) => return stream_rfind(&mut r, needle, opts, label(path)),
    };
    finder(needle)?;
    let n = needle.len() as u64;
    let len = job.src.len();
    let ranges: Vec<(usize, (u64, u64))> =
        split(len, job.threads, job.window).into_iter().rev().enumerate().collect();
    let best = AtomicUsize::new(usize::MAX); // lowest index (from the end) with a match
    let results = job.par_map(&ranges, |&(i, (s, e))| {
        // Occurrences *starting* in [s, e); windows walk backwards.
        let mut hi = e;
        while hi > s {
            if i > best.load(Ordering::Relaxed) {
                return Ok(None);
            }
            let lo = hi.saturating_sub(job.window).max(s);
            let win_end = (hi + n - 1).min(len);
            let hit = job.src.with_window(lo, win_end, |w| {
                let core = (hi - lo) as usize;
                // rightmost occurrence starting before `core`
                let limit = (core + n as usize - 1).min(w.len());
                bytes::rfind(&w[..limit], needle).map(|o| lo + o as u64)
            })?;
            job.opts.advance(hi - lo);
            if let Some(at) = hit {
                best.fetch_min(i, Ordering::Relaxed);
                return Ok(Some(at));
            }
            hi = lo;
        }
        Ok(None)
    })?;
    Ok(results.into_iter().flatten().next())
}

impl Job<'_> {
    /// The ranges moved so each starts at a line start (holds whole lines).
    pub(crate) fn line_ranges(&self) -> Result<Vec<(u64, u64)>> {
        self.lines_aligned(&self.ranges())
    }

    /// `ranges` (consecutive, covering the file, as from [`split`]) with
    /// each start moved to the next line start (empty ranges dropped).
    pub(crate) fn lines_aligned(&self, ranges: &[(u64, u64)]) -> Result<Vec<(u64, u64)>> {
        let len = self.src.len();
        let mut cuts = vec![0u64];
        for &(s, _) in ranges.iter().skip(1) {
            let prev = *cuts.last().unwrap_or(&0);
            if s <= prev {
                continue;
            }
            // first '\n' at or after s - 1: the line containing s ends there
            let mut pos = s - 1;
            let cut = loop {
                if pos >= len {
                    break len;
                }
                let end = (pos + self.window).min(len);
                if let Some(i) = self.src.with_window(pos, end, |w| memchr::memchr(b'\n', w))? {
                    break pos + i as u64 + 1;
                }
                pos = end;
            };
            if cut > prev && cut < len {
                cuts.push(cut);
            }
        }
        cuts.push(len);
        cuts.dedup();
        Ok(cuts.windows(2).map(|w| (w[0], w[1])).collect())
    }

    /// Calls `f(offset, bytes)` over `[start, end)` in windows of whole
    /// lines (`end` must be a line start or the end of the file). A line
    /// longer than the window is delivered whole: the window grows.
    pub(crate) fn for_each_lines<F>(&self, start: u64, end: u64, mut f: F) -> Result<()>
    where
        F: FnMut(u64, &[u8]) -> Result<ControlFlow<()>>,
    {
        let mut pos = start;
        while pos < end {
            let mut want = (pos + self.window).min(end);
            loop {
                let last = want == end;
                let step = self.src.with_window(pos, want, |w| {
                    let cut =
                        if last { Some(w.len()) } else { memchr::memrchr(b'\n', w).map(|i| i + 1) };
                    cut.map(|c| (c as u64, f(pos, &w[..c])))
                })?;
                match step {
                    Some((cut, flow)) => {
                        self.opts.advance(cut);
                        pos += cut;
                        if flow?.is_break() {
                            return Ok(());
                        }
                        break;
                    }
                    None => want = (pos + 2 * (want - pos)).min(end), // one long line: grow
                }
            }
        }
        Ok(())
    }
}

/// Counts occurrences in a stream (stdin, a pipe), sequentially, in
/// bounded memory, with the same leftmost non-overlapping rule as the file
/// functions: `needle.len() - 1` bytes are carried between reads.
pub fn count_stream(mut r: impl std::io::Read, needle: &[u8], label: &Path) -> Result<u64> {
    let mut n = 0;
    stream_matches(&mut r, needle, &ScanOptions::default(), label, |_| {
        n += 1;
        ControlFlow::Continue(())
    })?;
    Ok(n)
}

/// Bytes read at a time from a stream: the window size (`opts.chunk`, 1 MiB by default).
pub(crate) fn stream_chunk(opts: &ScanOptions) -> usize {
    if opts.chunk == 0 {
        1 << 20
    } else {
        opts.chunk
    }
}

/// One `read`, retried on EINTR; errors name `label`.
pub(crate) fn read_some(r: &mut dyn std::io::Read, buf: &mut [u8], label: &Path) -> Result<usize> {
    crate::map::retry_eintr(|| r.read(buf)).map_err(|e| Error::io(label, "read", e))
}

/// Calls `on_match` with the offset of each leftmost non-overlapping
/// occurrence in a stream, in order, until it breaks. Reads `opts.chunk`
/// bytes at a time into one buffer, carrying `needle.len() - 1` bytes.
pub(crate) fn stream_matches(
    r: &mut dyn std::io::Read,
    needle: &[u8],
    opts: &ScanOptions,
    label: &Path,
    mut on_match: impl FnMut(u64) -> ControlFlow<()>,
) -> Result<()> {
    let finder = finder(needle)?;
    let n = needle.len();
    let mut buf = vec![0u8; stream_chunk(opts) + n];
    let mut have = 0; // bytes in buf (carry + new)
    let mut skip = 0; // bytes at the start already covered by a match
    let mut base = 0u64; // stream offset of buf[0]
    loop {
        let got = read_some(r, &mut buf[have..], label)?;
        opts.advance(got as u64);
        have += got;
        let eof = got == 0;
        // Matches must start before `limit` unless this is the end.
        let limit = if eof { have } else { have.saturating_sub(n - 1) };
        let mut i = skip;
        while let Some(m) = finder.find(&buf[i..have]) {
            if i + m >= limit {
                break;
            }
            if on_match(base + (i + m) as u64).is_break() {
                return Ok(());
            }
            i += m + n;
        }
        if eof {
            return Ok(());
        }
        let keep_from = limit.max(skip.min(have));
        skip = i.saturating_sub(keep_from);
        buf.copy_within(keep_from..have, 0);
        have -= keep_from;
        base += keep_from as u64;
    }
}

/// The last occurrence (overlapping allowed, as [`rfind`]) in a stream.
fn stream_rfind(
    r: &mut dyn std::io::Read,
    needle: &[u8],
    opts: &ScanOptions,
    label: &Path,
) -> Result<Option<u64>> {
    finder(needle)?;
    let n = needle.len();
    let mut buf = vec![0u8; stream_chunk(opts) + n];
    let (mut have, mut base, mut last) = (0usize, 0u64, None);
    loop {
        let got = read_some(r, &mut buf[have..], label)?;
        opts.advance(got as u64);
        if got == 0 {
            return Ok(last);
        }
        have += got;
        if let Some(o) = bytes::rfind(&buf[..have], needle) {
            last = Some(base + o as u64);
        }
        // Keep the bytes a match could still start in.
        let keep_from = have.saturating_sub(n - 1);
        buf.copy_within(keep_from..have, 0);
        have -= keep_from;
        base += keep_from as u64;
    }
}

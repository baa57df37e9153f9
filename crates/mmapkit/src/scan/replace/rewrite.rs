//! Rewrites (different lengths, regex mode): batches of ranges built in
//! parallel, written in file order into a temp file beside the original.

use super::*;
use crate::scan::{byte_regex, local};

pub(super) enum Edit<'a> {
    Literal { needle: Box<Needle>, repl: &'a [u8] },
    Regex(RegexEdit<'a>),
}

pub(super) struct RegexEdit<'a> {
    /// Matched against single lines (without their `\n`).
    line: Regex,
    /// The same in multi-line mode, searched over whole windows of lines
    /// to skip lines that cannot match; None when the pattern has
    /// whole-haystack assertions (`\A`, `\z`, `(?-m)`), where it would not
    /// be equivalent.
    window: Option<Regex>,
    repl: &'a [u8],
    /// The replacement refers to groups (`$`): use `Captures::expand`.
    expand: bool,
    /// Unique per compiled edit: keys the per-thread clones.
    id: u64,
}

/// A thread's copies of a [`RegexEdit`]'s line and window regexes.
type LocalRes = (Regex, Option<Regex>);

impl<'a> RegexEdit<'a> {
    pub(super) fn new(line: Regex, repl: &'a [u8]) -> Result<Self> {
        let p = line.as_str();
        let window = if whole_haystack_assertions(p) {
            None
        } else {
            Some(byte_regex::build(p, true, false)?)
        };
        Ok(RegexEdit { line, window, repl, expand: repl.contains(&b'$'), id: local::next_id() })
    }

    /// This thread's copies of the regexes: a copy has its own match
    /// caches, so threads never contend for the shared ones, and keeping it
    /// keeps the caches warm from range to range.
    pub(super) fn local(&self) -> Rc<LocalRes> {
        // Compiled afresh rather than cloned: clones share reference-counted
        // internals, and the count bumped for every match (`Captures`) would
        // bounce between cores.
        let fresh = |re: &Regex, multi_line: bool| {
            byte_regex::build(re.as_str(), multi_line, false).unwrap_or_else(|_| re.clone())
        };
        local::per_thread(self.id, || {
            (fresh(&self.line, false), self.window.as_ref().map(|w| fresh(w, true)))
        })
    }

    /// Replaces in one line (without `\n`), appending to `out` (None: count only).
    pub(super) fn line(&self, re: &Regex, body: &[u8], out: Option<&mut Vec<u8>>) -> u64 {
        let Some(out) = out else {
            return re.find_iter(body).count() as u64;
        };
        let mut count = 0;
        let mut last = 0;
        if self.expand {
            for caps in re.captures_iter(body) {
                let m = caps.get(0).expect("group 0 always matches");
                out.extend_from_slice(&body[last..m.start()]);
                caps.expand(self.repl, out);
                last = m.end();
                count += 1;
            }
        } else {
            for m in re.find_iter(body) {
                out.extend_from_slice(&body[last..m.start()]);
                out.extend_from_slice(self.repl);
                last = m.end();
                count += 1;
            }
        }
        out.extend_from_slice(&body[last..]);
        count
    }

    /// Replaces in a window of whole lines, appending to `out` (None:
    /// count only).
    pub(super) fn chunk(
        &self,
        line_re: &Regex,
        win_re: Option<&Regex>,
        w: &[u8],
        mut out: Option<&mut Vec<u8>>,
    ) -> u64 {
        let mut count = 0;
        let mut pos = 0;
        while pos < w.len() {
            // Lines before the window regex's leftmost match cannot match
            // alone (a per-line match is also a multi-line one).
            let ls = match win_re {
                Some(re) => match re.find_at(w, pos) {
                    Some(m) => {
                        pos + memchr::memrchr(b'\n', &w[pos..m.start()]).map_or(0, |i| i + 1)
                    }
                    None => w.len(),
                },
                None => pos,
            };
            if let Some(o) = out.as_deref_mut() {
                o.extend_from_slice(&w[pos..ls]);
            }
            if ls >= w.len() {
                break;
            }
            let le = memchr::memchr(b'\n', &w[ls..]).map_or(w.len(), |i| ls + i);
            count += self.line(line_re, &w[ls..le], out.as_deref_mut());
            if le < w.len() {
                if let Some(o) = out.as_deref_mut() {
                    o.push(b'\n');
                }
            }
            pos = le + 1;
        }
        count
    }
}

/// Input bytes per group of ranges built in parallel (two groups alive).
pub(super) const GROUP_BYTES: u64 = 8 << 20;
pub(super) const BATCH_MAX: u64 = 4 << 20;
pub(super) const BATCH_MIN: u64 = 16 << 10;

/// The output of one range of the input.
pub(super) struct Piece {
    /// Where the range's output starts in the input.
    a: u64,
    /// Input covered: `[a, in_end)` (past the range's end when its last
    /// match straddles it).
    in_end: u64,
    /// The new bytes for `[a, in_end)`; None when unchanged.
    data: Option<Vec<u8>>,
    count: u64,
    /// First match offset (checks).
    first: Option<u64>,
    /// Leading input bytes already covered by the previous range's output
    /// (set in file order; those bytes are unchanged here).
    skip: u64,
}

pub(super) fn rewrite(
    path: &Path,
    meta: &Metadata,
    edit: &Edit<'_>,
    ropts: &ReplaceOptions,
    opts: &ScanOptions,
) -> Result<ReplaceReport> {
    if let (Edit::Literal { needle, .. }, true) = (edit, ropts.dry_run) {
        let n = crate::scan::engine::count(path, needle.finder.needle(), opts)?;
        return Ok(ReplaceReport { replacements: n, in_place: false, bytes_written: 0 });
    }
    let sopts =
        ScanOptions { strategy: resolve_rewrite(opts.strategy, meta.len()), ..opts.clone() };
    let job = Job::open(path, &sopts)?;
    let len = job.src.len();
    let factor = match edit {
        Edit::Literal { needle, repl } => repl.len().div_ceil(needle.len()).max(1),
        Edit::Regex(r) => r.repl.len().clamp(1, 256),
    } as u64;
    let per_group = job.threads.max(1) * 3;
    let batch = if opts.chunk > 0 {
        opts.chunk as u64 * 3
    } else {
        (GROUP_BYTES / per_group as u64 / factor).clamp(BATCH_MIN, BATCH_MAX)
    };
    let dry = ropts.dry_run;

    let real = real_path(path)?;
    let orig = crate::fs::open_regular(path, "a rewrite reads a file")?;
    let pool = Buffers::default();
    let (count, out) = std::thread::scope(|s| -> Result<(u64, Option<(TempFile, u64)>)> {
        let (tx, rx) = mpsc::sync_channel::<Vec<Piece>>(0);
        let writer = (!dry).then(|| {
            let (real, pool) = (real.as_path(), &pool);
            s.spawn(move || write_pieces(rx, orig, real, pool))
        });
        let produced = (|| -> Result<u64> {
            let mut g = 0u64; // start of the next group
            let mut covered = 0u64; // input bytes whose output is decided
            let mut total = 0u64;
            let mut swept = 0u64; // mapped input released up to here
            while g < len {
                let mut pieces = match edit {
                    Edit::Literal { needle, repl } => {
                        let ranges: Vec<(u64, u64)> = (0..per_group as u64)
                            .map(|k| g + k * batch)
                            .take_while(|&s| s < len)
                            .map(|s| (s, (s + batch).min(len)))
                            .collect();
                        g = ranges.last().map_or(len, |r| r.1);
                        let entries = job.entries_after(&needle.finder, &ranges, covered)?;
                        let work: Vec<(u64, u64)> =
                            entries.iter().zip(&ranges).map(|(&a, &(_, e))| (a, e)).collect();
                        job.par_map(&work, |&(a, e)| {
                            literal_piece(&job, needle, repl, a, e, dry, &pool)
                        })?
                    }
                    Edit::Regex(r) => {
                        let ranges = line_batches(&job, g, batch, per_group)?;
                        g = ranges.last().map_or(len, |r| r.1);
                        job.par_map(&ranges, |&(a, e)| regex_piece(&job, r, a, e, dry, &pool))?
                    }
                };
                // Pages that a thread's faults mapped around its range
                // after the neighbouring range was released (large folios).
                release(&job, swept.saturating_sub(SWEEP_BACK), g);
                swept = g;
                for p in &mut pieces {
                    p.skip = covered.saturating_sub(p.a).min(p.in_end - p.a);
                    debug_assert!(
                        p.first.is_none_or(|f| f >= covered),
                        "a match inside the previous range's output"
                    );
                    covered = covered.max(p.in_end);
                    total += p.count;
                }
                if !dry && tx.send(pieces).is_err() {
                    break; // the writer stopped: its error is reported below
                }
            }
            Ok(total)
        })();
        drop(tx);
        let written = match writer {
            Some(h) => h.join().map_err(|p| Error::panicked("replace: the writer thread", &*p))?,
            None => Ok(None),
        };
        let total = produced?;
        Ok((total, written?))
    })?;
    let Some((tmp, bytes)) = out else {
        return Ok(ReplaceReport { replacements: count, in_place: false, bytes_written: 0 });
    };
    commit(path, &real, meta, tmp, ropts)?;
    Ok(ReplaceReport { replacements: count, in_place: false, bytes_written: bytes })
}

/// The concrete strategy for reading the input of a rewrite: the same rule
/// as scans ([`Strategy::resolve`]). Measured (2-core VM, whole process,
/// `,` → `, `, fsync included), the two tie within noise because writing
/// the new file dominates: 1 GiB CSV read 2.26 s / mmap 2.29 s (min of 4;
/// another series 3.69 / 3.07 s), 200 KB 2.5 / 2.4 ms (min of 20). Mapped
/// input pages are dropped once used, so both keep RSS at ~20 MiB.
pub fn resolve_rewrite(strategy: Strategy, len: u64) -> Strategy {
    strategy.resolve(len)
}

/// Literal matches in `[a, e)` (from entry `a`) and the range's new bytes.
pub(super) fn literal_piece(
    job: &Job<'_>,
    needle: &Needle,
    repl: &[u8],
    a: u64,
    e: u64,
    dry: bool,
    pool: &Buffers,
) -> Result<Piece> {
    let n = needle.len();
    let len = job.src.len();
    let mut out = if dry { Vec::new() } else { pool.take() };
    if !dry {
        // The worst case (every input byte in a match) at once: growing the
        // Vec would copy it again.
        let factor = repl.len().div_ceil(n).max(1);
        out.reserve((e.saturating_sub(a) as usize).saturating_mul(factor).saturating_add(64));
    }
    let mut count = 0u64;
    let mut first = None;
    let mut pos = a;
    while pos < e {
        let core_end = (pos + job.window).min(e);
        let win_end = (core_end + n as u64 - 1).min(len);
        let i = job.src.with_window(pos, win_end, |w| {
            let core = (core_end - pos) as usize;
            if let (Some(b), false) = (needle.byte, dry) {
                // One byte: no match runs past the core, and matches are
                // dense in the common cases (`,` in a CSV), so a block
                // kernel beats a call per match.
                let here = crate::sys::simd::replace_byte(&w[..core], b, repl, &mut out);
                if here > 0 && first.is_none() {
                    first = memchr::memchr(b, &w[..core]).map(|at| pos + at as u64);
                }
                count += here;
                return 0;
            }
            let mut last = 0;
            let i = needle.matches(w, core, |at| {
                count += 1;
                first.get_or_insert(pos + at as u64);
                if !dry {
                    out.extend_from_slice(&w[last..at]);
                    out.extend_from_slice(repl);
                }
                last = at + n;
            });
            if !dry && last < core {
                out.extend_from_slice(&w[last..core]);
            }
            i
        })?;
        job.opts.advance(core_end - pos);
        pos = core_end.max(pos + i as u64);
    }
    let in_end = pos.max(a);
    release(job, a, in_end);
    Ok(Piece { a, in_end, data: pool.keep_if(count > 0 && !dry, out), count, first, skip: 0 })
}

/// Regex matches in the lines of `[a, e)` and the range's new bytes.
pub(super) fn regex_piece(
    job: &Job<'_>,
    r: &RegexEdit<'_>,
    a: u64,
    e: u64,
    dry: bool,
    pool: &Buffers,
) -> Result<Piece> {
    let local = r.local();
    let (line_re, win_re) = &*local;
    let mut out = if dry { Vec::new() } else { pool.take() };
    if !dry {
        out.reserve((e - a) as usize + 64);
    }
    let mut count = 0;
    job.for_each_lines(a, e, |_, w| {
        count += r.chunk(line_re, win_re.as_ref(), w, (!dry).then_some(&mut out));
        Ok(ControlFlow::Continue(()))
    })?;
    release(job, a, e);
    Ok(Piece {
        a,
        in_end: e,
        data: pool.keep_if(count > 0 && !dry, out),
        count,
        first: None,
        skip: 0,
    })
}

/// Bytes written between two write-back starts of the new file.
pub(super) const WRITE_BEHIND: u64 = 8 << 20;

/// Output buffers handed back by the writer, so pieces reuse memory that is
/// already mapped instead of faulting in (and zeroing) fresh pages for
/// every piece. At most the pieces of two groups are alive, so this holds
/// no more than they did.
#[derive(Default)]
pub(super) struct Buffers(std::sync::Mutex<Vec<Vec<u8>>>);

impl Buffers {
    /// An empty buffer, with the capacity of a returned one if any.
    pub(super) fn take(&self) -> Vec<u8> {
        let mut b = self.0.lock().unwrap_or_else(|e| e.into_inner()).pop().unwrap_or_default();
        b.clear();
        b
    }

    pub(super) fn give(&self, b: Vec<u8>) {
        if b.capacity() > 0 {
            self.0.lock().unwrap_or_else(|e| e.into_inner()).push(b);
        }
    }

    /// `Some(b)` when `keep`, else `b` goes back to the pool.
    pub(super) fn keep_if(&self, keep: bool, b: Vec<u8>) -> Option<Vec<u8>> {
        if keep {
            Some(b)
        } else {
            self.give(b);
            None
        }
    }
}

/// How far back of a group's start to release mapped pages again.
pub(super) const SWEEP_BACK: u64 = 4 << 20;

/// Drops a mapped input's pages once used, so RSS stays bounded (they stay
/// in the page cache).
pub(super) fn release(job: &Job<'_>, a: u64, e: u64) {
    if let Source::Mapped(m) = &job.src {
        if e > a {
            let _ = m.advise(Advice::DontNeed, a as usize, Some((e - a) as usize));
        }
    }
}

/// Up to `per_group` line-aligned ranges of about `batch` bytes from `g`
/// (a line start); a line longer than `batch` makes its range longer.
pub(super) fn line_batches(
    job: &Job<'_>,
    g: u64,
    batch: u64,
    per_group: usize,
) -> Result<Vec<(u64, u64)>> {
    let len = job.src.len();
    let mut out = Vec::with_capacity(per_group);
    let mut start = g;
    while out.len() < per_group && start < len {
        let end = next_line_start(job, start + batch)?;
        out.push((start, end));
        start = end;
    }
    Ok(out)
}

/// The first line start at or after `c`.
pub(super) fn next_line_start(job: &Job<'_>, c: u64) -> Result<u64> {
    let len = job.src.len();
    if c >= len {
        return Ok(len);
    }
    let mut pos = c - 1; // c > 0: ranges are never empty
    while pos < len {
        let end = (pos + job.window).min(len);
        if let Some(i) = job.src.with_window(pos, end, |w| memchr::memchr(b'\n', w))? {
            return Ok(pos + i as u64 + 1);
        }
        pos = end;
    }
    Ok(len)
}

/// The writer thread: writes the pieces in order into a temporary file
/// created at the first change (the unchanged prefix is copied then).
pub(super) fn write_pieces(
    rx: mpsc::Receiver<Vec<Piece>>,
    orig: File,
    real: &Path,
    pool: &Buffers,
) -> Result<Option<(TempFile, u64)>> {
    let mut tmp: Option<TempFile> = None;
    let mut written = 0u64;
    let mut flushed = 0u64; // write-back started below this offset
    for pieces in rx {
        for p in pieces {
            let start = p.a + p.skip;
            if start >= p.in_end {
                continue;
            }
            let Some(data) = p.data else {
                // Unchanged: copied once something has changed before it.
                if let Some(t) = tmp.as_mut() {
                    copy_range(&orig, start, p.in_end, t, real)?;
                    written += p.in_end - start;
                }
                continue;
            };
            if tmp.is_none() {
                let mut t = TempFile::beside(real)?;
                copy_range(&orig, 0, start, &mut t, real)?;
                written += start;
                tmp = Some(t);
            }
            let t = tmp.as_mut().expect("created above");
            let d = &data[p.skip as usize..];
            t.file_mut().write_all(d).map_err(|e| Error::io(t.path(), "write", e))?;
            written += d.len() as u64;
            pool.give(data);
        }
        // Write-behind: the disk writes the new file while the rest is
        // built, so the final fsync only waits for the tail (on a 1 GiB
        // rewrite it took 0.36 s, most of a plain copy's time). A hint:
        // durability still comes from that fsync, before the rename.
        if let Some(t) = &tmp {
            if written >= flushed + WRITE_BEHIND {
                let _ = crate::map::start_writeback(t.file(), flushed, written - flushed);
                flushed = written;
            }
        }
    }
    Ok(tmp.map(|t| (t, written)))
}

/// Appends the original's bytes `[from, to)` to the temporary file
/// (`copy_file_range` under `std::io::copy`: no copy through user space).
pub(super) fn copy_range(
    orig: &File,
    from: u64,
    to: u64,
    t: &mut TempFile,
    real: &Path,
) -> Result<()> {
    if to <= from {
        return Ok(());
    }
    let mut src = orig;
    src.seek(SeekFrom::Start(from)).map_err(|e| Error::io(real, "seek", e))?;
    let got = io::copy(&mut src.take(to - from), t.file_mut())
        .map_err(|e| Error::io(t.path(), "write", e))?;
    if got < to - from {
        return Err(Error::Truncated {
            path: real.to_owned(),
            during: "being rewritten; it was not replaced",
        });
    }
    Ok(())
}

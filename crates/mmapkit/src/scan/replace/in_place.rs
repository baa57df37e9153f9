//! In-place edits (same-length literal replacements): parallel scan, only
//! pages with a match written, stopping at the first sign of a truncation.

use super::*;

/// The concrete strategy for an in-place edit of `len` bytes: `Auto` is
/// always `read` (`pread` a window, `pwrite` the changed stretches).
///
/// Measured in-process on a 2-core VM (ext4, file in the page cache,
/// min of several runs, whole edit including page-cache writes):
///
/// | file, edit                                     | read     | mmap     |
/// |------------------------------------------------|----------|----------|
/// | 1 GiB CSV, `,` → `;` (106 M matches)            | 0.61 s   | 2.55 s   |
/// | 1 GiB CSV, `2024-0` → `2O24-0` (16 M)           | 1.25 s   | 2.85 s   |
/// | 1 GiB CSV, `99999,` → `9999Z,` (212)            | 0.29 s   | 0.27 s   |
/// | 200 KB CSV, `,` → `;` (20 k matches)            | 47 µs    | 109 µs   |
/// | 200 KB CSV, `2024-0` → `2O24-0`                 | 114 µs   | 169 µs   |
/// | 200 KB CSV, 7 matches                           | 32 µs    | 48 µs    |
///
/// Writing through a shared mapping costs a write fault per page
/// (`page_mkwrite`: block and dirty tracking) on top of the copy, which
/// `pwrite` does without faults; reads cost about the same either way, so
/// the mapping only ties when almost nothing is written.
pub fn resolve_in_place(strategy: Strategy, _len: u64) -> Strategy {
    match strategy {
        Strategy::Auto => Strategy::Read,
        s => s,
    }
}

/// The call named by a failed `--sync` of in-place edits, with the state
/// it leaves.
const IN_PLACE_SYNC_FAILED: &str = "sync of the in-place edits (they were made and readers see them, but the file on disk \
     may hold any mix of old and new pages, and may lose them in a power loss: restore it from a copy or backup)";

/// Matches closer than this are written as one stretch (the bytes between
/// them rewritten unchanged); a page without a match is never written.
pub(super) const GAP: u64 = 4096;

pub(super) struct InPlace<'a, 'o> {
    job: &'a Job<'o>,
    /// Where writes go when the file is mapped (see [`InPlace::write`]).
    out: Option<&'a SharedMap>,
    path: &'a Path,
    /// Set once the file is seen shorter than at the start (or any write
    /// fails): from then on nothing more is written by any thread.
    stop: AtomicBool,
    needle: &'a Needle,
    repl: &'a [u8],
    /// Starts of ranges 1.. : the `needle.len() - 1` bytes from each are
    /// read by two threads, so matches touching them are written last.
    bounds: Vec<u64>,
}

/// [`InPlace::plan`] for one byte replaced by another (dense matches
/// such as CSV commas): every file page of the window holding the byte is
/// copied and rewritten with a vectorised loop instead of match by match.
pub(super) fn plan_bytes(w: &[u8], pos: u64, core: usize, b: u8, c: u8, plan: &mut Plan) {
    let page = crate::map::page_size() as u64;
    let mut open = false;
    let mut i = 0;
    while i < core {
        let at = pos + i as u64;
        let end = (((at / page) + 1) * page - pos).min(core as u64) as usize;
        let block = &w[i..end];
        let k = bytecount::count(block, b) as u64;
        if k > 0 {
            let start = plan.scratch.len();
            plan.scratch.extend_from_slice(block);
            for x in &mut plan.scratch[start..] {
                *x = if *x == b { c } else { *x };
            }
            plan.count += k;
            match plan.spans.last_mut() {
                Some((_, _, len)) if open => *len += block.len(),
                _ => plan.spans.push((at, start, block.len())),
            }
            open = true;
        } else {
            open = false;
        }
        i = end;
    }
}

/// Whether `[lo, hi)` touches a zone `[b, b + n - 1)` for a `b` in the
/// sorted `bounds`: the bytes past a range's end that the previous
/// range's last window also reads.
pub(super) fn touches_zone(bounds: &[u64], n: u64, lo: u64, hi: u64) -> bool {
    if n <= 1 || lo >= hi {
        return false;
    }
    // b < hi and lo < b + n - 1, i.e. b >= lo + 2 - n
    let from = (lo + 2).saturating_sub(n);
    let i = bounds.partition_point(|&b| b < from);
    bounds.get(i).is_some_and(|&b| b < hi)
}

/// The edits of one window: patched stretches (`(file offset, start in
/// scratch, len)`) and matches left for the sequential pass.
#[derive(Default)]
pub(super) struct Plan {
    scratch: Vec<u8>,
    spans: Vec<(u64, usize, usize)>,
    deferred: Vec<u64>,
    count: u64,
}

impl InPlace<'_, '_> {
    pub(super) fn touches_zone(&self, lo: u64, hi: u64) -> bool {
        touches_zone(&self.bounds, self.needle.len() as u64, lo, hi)
    }

    /// Plans the edits for the matches of window `w` (file offset `pos`)
    /// starting before `core`; returns the index past the last match.
    pub(super) fn plan(&self, w: &[u8], pos: u64, core: usize, plan: &mut Plan) -> usize {
        if let (Some(b), &[c]) = (self.needle.byte, self.repl) {
            plan_bytes(w, pos, core, b, c, plan);
            return 0; // single bytes never straddle windows
        }
        let n = self.needle.len();
        let mut open = false; // whether the last span may be extended
        self.needle.matches(w, core, |at| {
            let q = pos + at as u64;
            plan.count += 1;
            if self.touches_zone(q, q + n as u64) {
                plan.deferred.push(q);
                open = false;
                return;
            }
            if open {
                let (off, _, len) = plan.spans.last_mut().expect("an open span");
                let end = *off + *len as u64;
                if q - end < GAP && !self.touches_zone(end, q) {
                    plan.scratch.extend_from_slice(&w[(end - pos) as usize..at]);
                    plan.scratch.extend_from_slice(self.repl);
                    *len += (q - end) as usize + n;
                    return;
                }
            }
            plan.spans.push((q, plan.scratch.len(), n));
            plan.scratch.extend_from_slice(self.repl);
            open = true;
        })
    }

    pub(super) fn truncated(&self) -> Error {
        self.stop.store(true, Ordering::Relaxed);
        Error::Truncated {
            path: self.path.to_owned(),
            during: "being edited in place; stopped, the file is left at its new size",
        }
    }

    /// Before writing anything below `end`: stops (for good) if the file
    /// is now shorter than when the edit started, or shorter than `end`.
    /// A `pwrite` past the end would extend the file again (zeros and
    /// rewritten stretches where the truncating process removed data), so
    /// the size is checked right before each window's writes.
    pub(super) fn check_size(&self, end: u64) -> Result<()> {
        if self.stop.load(Ordering::Relaxed) {
            return Err(self.truncated());
        }
        let now =
            self.job.src.file().metadata().map_err(|e| Error::io(self.path, "stat", e))?.len();
        if now < self.job.src.len() || now < end {
            return Err(self.truncated());
        }
        Ok(())
    }

    pub(super) fn write(&self, off: u64, data: &[u8]) -> Result<()> {
        let r = match (&self.job.src, self.out) {
            // Through a (second, writable) mapping: a store past the end
            // faults (SIGBUS guard) and can never extend the file. Not
            // through the reading map, whose slices the workers hold.
            (_, Some(out)) => out.write_at(off as usize, data),
            (Source::Mapped(m), None) => {
                m.file().write_all_at(data, off).map_err(|e| Error::io(m.path(), "write", e))
            }
            (Source::Read { file, path, .. }, None) => {
                file.write_all_at(data, off).map_err(|e| Error::io(path, "write", e))
            }
        };
        if r.is_err() {
            self.stop.store(true, Ordering::Relaxed);
        }
        r
    }

    /// Edits the matches starting in `[a, e)` (scanning from entry `a`);
    /// returns the count and the deferred matches.
    pub(super) fn range(&self, a: u64, e: u64) -> Result<(u64, Vec<u64>)> {
        let job = self.job;
        let n = self.needle.len() as u64;
        let len = job.src.len();
        let mut plan = Plan::default();
        let mut pos = a;
        while pos < e {
            let core_end = (pos + job.window).min(e);
            let win_end = (core_end + n - 1).min(len);
            plan.scratch.clear();
            plan.spans.clear();
            if self.stop.load(Ordering::Relaxed) {
                return Err(self.truncated());
            }
            let i = job
                .src
                .with_window(pos, win_end, |w| {
                    self.plan(w, pos, (core_end - pos) as usize, &mut plan)
                })
                .inspect_err(|_| self.stop.store(true, Ordering::Relaxed))?;
            if let Some(end) = plan.spans.last().map(|&(off, _, l)| off + l as u64) {
                self.check_size(end)?;
            }
            for &(off, s, l) in &plan.spans {
                self.write(off, &plan.scratch[s..s + l])?;
            }
            if let Source::Mapped(m) = &job.src {
                // Done with these pages: drop them from the process (they
                // stay in the page cache, dirty ones included), so RSS
                // stays small.
                let _ = m.advise(Advice::DontNeed, pos as usize, Some((core_end - pos) as usize));
            }
            job.opts.advance(core_end - pos);
            pos = core_end.max(pos + i as u64);
        }
        Ok((plan.count, plan.deferred))
    }
}

pub(super) fn replace_in_place(
    path: &Path,
    file: File,
    pattern: &[u8],
    repl: &[u8],
    ropts: &ReplaceOptions,
    opts: &ScanOptions,
) -> Result<ReplaceReport> {
    if let Some(sfx) = &ropts.backup {
        // The backup is only worth making if something will change.
        if crate::scan::engine::find(path, pattern, opts)?.is_none() {
            return Ok(ReplaceReport { replacements: 0, in_place: true, bytes_written: 0 });
        }
        copy_backup(&real_path(path)?, sfx)?;
    }
    let len = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
    let (src, out) = match resolve_in_place(opts.strategy, len) {
        Strategy::Mmap => {
            let dup = file.try_clone().map_err(|e| Error::io(path, "dup", e))?;
            let out = Map::options().mode(Mode::ReadWrite).map(dup, path)?.into_shared();
            let map = Map::options().mode(Mode::Read).map(file, path)?;
            map.advise(Advice::Sequential, 0, None)?;
            (Source::Mapped(map), Some(out))
        }
        _ => (Source::Read { file, len, path: path.to_owned() }, None),
    };
    let job = Job::new(src, opts);
    let needle = Needle::new(pattern);
    let ranges = job.ranges();
    let entries = job.entries(&needle.finder, &ranges)?;
    let work: Vec<(u64, u64)> = entries.iter().zip(&ranges).map(|(&a, &(_, e))| (a, e)).collect();
    let edit = InPlace {
        job: &job,
        out: out.as_ref(),
        path,
        stop: AtomicBool::new(false),
        needle: &needle,
        repl,
        bounds: ranges.iter().skip(1).map(|r| r.0).collect(),
    };
    let parts = job.par_map(&work, |&(a, e)| edit.range(a, e))?;
    let mut count = 0;
    for (c, deferred) in &parts {
        count += c;
        for &q in deferred {
            edit.check_size(q + repl.len() as u64)?;
            edit.write(q, repl)?;
        }
    }
    if count > 0 && ropts.sync {
        let synced = match &job.src {
            Source::Mapped(m) => out.as_ref().map_or_else(|| m.flush(), |o| o.flush()),
            Source::Read { file, .. } => {
                file.sync_data().map_err(|e| Error::io(path, "fdatasync", e))
            }
        };
        // The edits are in the page cache, so a rerun finds nothing to
        // replace, but the failed sync may have dropped them from the disk
        // (marked clean, never written again): the error must say so.
        synced.map_err(|e| match e {
            Error::Io { source, .. } => Error::io(path, IN_PLACE_SYNC_FAILED, source),
            e => e,
        })?;
    }
    Ok(ReplaceReport {
        replacements: count,
        in_place: true,
        bytes_written: count * repl.len() as u64,
    })
}

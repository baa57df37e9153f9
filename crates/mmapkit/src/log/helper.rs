//! The log's helper thread: write-behind and populate-ahead, off the
//! appending thread.

use std::sync::{Arc, Condvar, Mutex};

use super::lock;
use super::segment::SegFile;
use crate::map::Advice;

/// The tail's helper thread (spawned on first use), for what the append
/// path must not wait for:
///
/// * **write-behind**: starts writeback of appended ranges:
///   `sync_file_range(WRITE)` blocks while the device's queue is full,
///   which on a busy disk cost the appender more than the writeback it
///   starts (bench `log`, 100 K x 4 KiB: ~0.1 s of 0.44 s);
/// * **populate-ahead**: faults the tail's pages in for writing
///   (`MADV_POPULATE_WRITE`) ahead of the appends, so that stores through
///   the mapping find them mapped and writable: a first-touch write fault
///   on a shared file mapping (page-cache fill, then `page_mkwrite`) was
///   ~40 % of appending 100 K x 50 B (perf, `log-mmapkit`);
///
/// Requests are coalesced: only the latest range of each kind waits. Both
/// are advisory (the roll-over and explicit syncs still write and wait for
/// every byte; a page not populated faults as before, and the fault-in
/// writes no byte), so a request dropped or late changes nothing but
/// timing.
#[derive(Default)]
pub(super) struct WriteBehind {
    job: Arc<(Mutex<WbJob>, Condvar)>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
}

/// A range of a segment, `[from, to)`.
type SegRange = (Arc<SegFile>, u64, u64);

#[derive(Default)]
struct WbJob {
    /// The next range to start writeback of.
    next: Option<SegRange>,
    /// The next range to populate for writing.
    populate: Option<SegRange>,
    stop: bool,
}

/// `slot`'s range widened to `[from, to)` of `seg` (replaced by it for
/// another segment).
fn coalesce(slot: &mut Option<SegRange>, seg: &Arc<SegFile>, from: u64, to: u64) {
    *slot = Some(match slot.take() {
        Some((s, f, t)) if Arc::ptr_eq(&s, seg) => (s, f.min(from), t.max(to)),
        _ => (seg.clone(), from, to),
    });
}

impl WriteBehind {
    /// Asks for writeback of `[from, to)` of `seg` to be started.
    pub(super) fn post(&self, seg: &Arc<SegFile>, from: u64, to: u64) {
        if !self.start() {
            // No thread: start it inline, as before.
            let _ = crate::map::start_writeback(seg.map.file(), from, to - from);
            return;
        }
        let (m, cv) = &*self.job;
        coalesce(&mut lock(m).next, seg, from, to);
        cv.notify_one();
    }

    /// Asks for `[from, to)` of `seg` to be faulted in for writing.
    pub(super) fn populate(&self, seg: &Arc<SegFile>, from: u64, to: u64) {
        if self.start() {
            let (m, cv) = &*self.job;
            coalesce(&mut lock(m).populate, seg, from, to);
            cv.notify_one();
        }
    }

    /// Whether the thread was started.
    #[cfg(test)]
    pub(super) fn started(&self) -> bool {
        lock(&self.thread).is_some()
    }

    /// Starts the thread unless it runs; false if it cannot be spawned.
    fn start(&self) -> bool {
        let mut t = lock(&self.thread);
        if t.is_none() {
            let job = self.job.clone();
            match std::thread::Builder::new()
                .name("mmapkit-log-wb".into())
                .spawn(move || Self::run(&job))
            {
                Ok(h) => *t = Some(h),
                Err(_) => return false,
            }
        }
        true
    }

    fn run(job: &(Mutex<WbJob>, Condvar)) {
        let (m, cv) = job;
        let mut j = lock(m);
        loop {
            if j.stop {
                return;
            }
            // Populating first: the appender is about to store there.
            if let Some((seg, from, to)) = j.populate.take() {
                drop(j);
                let at = |s: &SegFile| s.map.sealed();
                populate_range(&seg, from as usize, to as usize, Advice::PopulateWrite, at);
                drop(seg);
                j = lock(m);
            } else if let Some((seg, from, to)) = j.next.take() {
                drop(j);
                let len = to.saturating_sub(from);
                // Unmapped first, in one call (one TLB flush): writeback
                // of pages mapped writable write-protects each one, with a
                // TLB shootdown per page that interrupts the appender
                // (perf, 1 M x 50 B: a third of the time). The appender is
                // past them; a reader refaults them from the page cache.
                let _ = seg.map.advise(Advice::DontNeed, from as usize, Some(len as usize));
                let _ = crate::map::start_writeback(seg.map.file(), from, len);
                drop(seg);
                j = lock(m);
            } else {
                j = cv.wait(j).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Stops the thread (pending requests are dropped: advisory).
    pub(super) fn stop(&self) {
        let h = lock(&self.thread).take();
        if let Some(h) = h {
            let (m, cv) = &*self.job;
            lock(m).stop = true;
            cv.notify_one();
            let _ = h.join();
        }
    }
}

/// Faults `[from, to)` of `seg` in with `advice`, a chunk at a time, each
/// from past the page that `at` says its user (the appender, the reader)
/// is in: requests are coalesced, and a range the user has overtaken (its
/// pages faulted by its own accesses) is skipped, never worked through
/// behind it.
fn populate_range(
    seg: &SegFile,
    mut from: usize,
    to: usize,
    advice: Advice,
    at: impl Fn(&SegFile) -> usize,
) {
    const CHUNK: usize = 256 << 10;
    let page = crate::map::page_size();
    while from < to {
        let start = from.max((at(seg) / page + 1) * page);
        if start >= to {
            return;
        }
        let n = (to - start).min(CHUNK);
        if seg.map.advise(advice, start, Some(n)).is_err() {
            return; // advisory: the accesses fault instead
        }
        from = start + n;
    }
}

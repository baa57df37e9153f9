//! Appending: framing a batch into the tail segment, rolling over, and
//! group commit (syncs shared by the appenders that wait for them).

use super::*;

impl CommitLog {
    // ----- appending ----------------------------------------------------

    /// Appends `entries` (term, bytes) as one batch and returns the index
    /// of the first; they are readable (and, with [`SyncMode::Batch`],
    /// durable) when this returns. An empty batch writes nothing and
    /// returns the next index.
    pub fn append<B: AsRef<[u8]>>(&self, entries: &[(u64, B)]) -> Result<u64> {
        self.append_inner(entries, None)
    }

    /// [`append`](Self::append) at index `first`, which must be the next
    /// index (else nothing is written and it is an error), of entries whose
    /// CRCs the caller already computed or checked: `crcs[k]` must be
    /// [`super::entry_crc`]`(first + k, term, bytes)` of entry
    /// `k` (a follower verifies each received entry against the CRC its
    /// leader stored, which is this). The log stores them instead of
    /// computing them again; a wrong one makes the entry fail its checks
    /// when read (never silently accepted), and is caught on append in
    /// debug builds.
    pub fn append_with_crcs<B: AsRef<[u8]>>(
        &self,
        first: u64,
        entries: &[(u64, B)],
        crcs: &[u32],
    ) -> Result<u64> {
        if crcs.len() != entries.len() {
            return Err(Error::invalid(
                &self.dir,
                format!("{} entries but {} CRCs", entries.len(), crcs.len()),
            ));
        }
        self.append_inner(entries, Some((first, crcs)))
    }

    /// Appends a batch framed outside the log's lock (see [`Framed`]): its
    /// first index must be the next index (else nothing is written and it
    /// is an error). Its records are written as they are, with the batch's
    /// commit record; `batch` keeps its entries (reset it to reuse its
    /// buffer). Returns the batch's first index.
    pub fn append_framed(&self, batch: &mut Framed) -> Result<u64> {
        self.check_writable()?;
        let mut w = lock(&self.writer);
        let next = self.read_state().last + 1;
        if batch.first != next {
            return Err(self.not_next(batch.first, next));
        }
        if batch.is_empty() {
            return Ok(next);
        }
        let r = self.write_batch(&mut w, batch);
        drop(w);
        self.appended(r?)
    }

    fn not_next(&self, want: u64, next: u64) -> Error {
        Error::invalid(
            &self.dir,
            format!(
                "expected to append entry {want} but the next index is {next} \
                 (was the log changed by another writer?)"
            ),
        )
    }

    fn append_inner<B: AsRef<[u8]>>(
        &self,
        entries: &[(u64, B)],
        given: Option<(u64, &[u32])>,
    ) -> Result<u64> {
        self.check_writable()?;
        for (_, b) in entries {
            check_entry_len(&self.dir, b.as_ref().len())?;
        }
        let mut w = lock(&self.writer);
        let first = self.read_state().last + 1;
        if let Some((want, _)) = given {
            if want != first {
                return Err(self.not_next(want, first));
            }
        }
        if entries.is_empty() {
            return Ok(first);
        }
        // The batch is framed in a reused buffer and copied into the map
        // in one write: no per-entry allocation or bounds checks.
        let mut batch = std::mem::take(&mut w.batch);
        batch.reset(first);
        for (k, (term, b)) in entries.iter().enumerate() {
            match given {
                None => batch.push(*term, b.as_ref()),
                Some((_, c)) => {
                    debug_assert_eq!(
                        c[k],
                        format::entry_crc(first + k as u64, *term, b.as_ref()),
                        "append_with_crcs: wrong CRC for entry {}",
                        first + k as u64
                    );
                    batch.push_with_crc(*term, b.as_ref(), c[k]);
                }
            }
        }
        let r = self.write_batch(&mut w, &mut batch);
        w.batch = batch;
        drop(w);
        self.appended(r?)
    }

    /// Writes a framed batch (not empty, starting at the next index) into
    /// the tail with its commit record, under the writer lock; returns its
    /// first and last index.
    fn write_batch(&self, w: &mut Writer, batch: &mut Framed) -> Result<(u64, u64)> {
        let first = batch.first;
        let need = batch.buf.len() + format::COMMIT_WM;
        let (mut tail, mut pos) = {
            let s = self.read_state();
            (s.segs.last().expect("one segment").file.clone(), s.tail_end)
        };
        // The index after the batch must exist (found by the raft_decode
        // fuzz target: a log started near u64::MAX overflowed here).
        if first.checked_add(batch.len() as u64).is_none() {
            return Err(Error::invalid(
                &self.dir,
                format!("{} entries from index {first} run past the largest index", batch.len()),
            ));
        }
        if pos + need > tail.map.len() {
            tail = self.roll_over(w, &tail, pos, first, need)?;
            pos = HEADER_LEN;
        }
        let epoch = tail.gen();
        let ahead = self.zero_ahead.load(Ordering::Relaxed);
        if ahead > 0 {
            // `need` counts the commit record; the zero record follows it.
            self.zero_ahead(&tail, pos, pos + need + REC, ahead)?;
        }
        let entries_len = batch.buf.len();
        // Only what a returned sync covered: a power loss may tear anything
        // later, in any order, and recovery must know (format::classify_tail).
        let watermark = self.durable.load(Ordering::Acquire).min(first - 1);
        format::encode_commit(&mut batch.buf, first, epoch, watermark, &batch.crcs);
        // A zero record after every batch: the clean end is explicit, so
        // anything else found there on recovery is a torn batch.
        let zero_fits = pos + batch.buf.len() + REC <= tail.map.len();
        if zero_fits {
            batch.buf.extend_from_slice(&[0u8; REC]);
        }
        // Small batches are stored through the mapping (a memcpy; a
        // pwrite per batch measured 1.5x slower at 100 K and 1 M x 50 B,
        // 10 per batch);
        // large ones with one pwrite into the same page cache (readers see
        // it through the map once published below): stores would take a
        // write fault per fresh page (bench `log`, 10 x 4 KiB batches).
        let stored = batch.buf.len() < PWRITE_MIN;
        let written = if !stored {
            tail.map
                .file()
                .write_all_at(&batch.buf, pos as u64)
                .map_err(|e| Error::io(tail.map.path(), "pwrite", e))
        } else {
            tail.map.append_at(pos, &batch.buf)
        };
        let end = pos + batch.buf.len() - if zero_fits { REC } else { 0 };
        // The batch keeps its entries only (it may be appended again
        // elsewhere, or reset).
        batch.buf.truncate(entries_len);
        written?;
        tail.map.seal(end)?;
        if !matches!(self.opts.sync, SyncMode::Batch) {
            write_behind(&self.behind, &mut w.wb, &tail, end);
            if stored {
                populate_ahead(&self.behind, &tail, end);
            }
        }
        let last = first + batch.len() as u64 - 1;
        let mut s = self.write_state();
        let offsets = s.segs.last_mut().expect("one segment").offsets.get_or_insert_with(Vec::new);
        offsets.extend(batch.offs.iter().map(|&o| pos as u64 + o));
        s.last = last;
        s.tail_end = end;
        Ok((first, last))
    }

    /// After a batch up to `last` was written and the writer lock released:
    /// wakes readers and syncs as the mode says; returns the batch's first
    /// index.
    fn appended(&self, (first, last): (u64, u64)) -> Result<u64> {
        self.wake_waiters();
        match self.opts.sync {
            SyncMode::Never => {}
            SyncMode::Batch => self.sync_upto(last)?,
            SyncMode::Interval(d) => {
                if lock(&self.sync).last.elapsed() >= d {
                    self.sync_upto(last)?;
                }
            }
        }
        Ok(first)
    }

    /// Seals the tail (synced whole, so a crash can never leave a gap
    /// before the new segment) and starts a new segment at `first`.
    pub(super) fn roll_over(
        &self,
        w: &mut Writer,
        old: &Arc<SegFile>,
        end: usize,
        first: u64,
        need: usize,
    ) -> Result<Arc<SegFile>> {
        let page = crate::map::page_size() as u64;
        let size = self.seg_size.max(((HEADER_LEN + need) as u64).div_ceil(page) * page);
        if first == old.first {
            // The tail holds no entry: a second segment starting at the
            // same index would make the log unopenable. Replace it by a
            // larger one under the same name (one atomic rename: a crash
            // leaves one or the other, both empty).
            let seg = Arc::new(SegFile::create(&self.dir, first, old.gen(), size, self.seg_size)?);
            let mut s = self.write_state();
            let t = s.segs.last_mut().expect("one segment");
            t.file = seg.clone();
            t.offsets = Some(Vec::new());
            s.tail_end = HEADER_LEN;
            let mut st = lock(&self.sync);
            st.synced = (first, HEADER_LEN);
            return Ok(seg);
        }
        // The sealed segment is durable before the next one exists: a power
        // loss in between must never leave a segment short of entries the
        // next one's first index says were there (found by crashfs).
        old.map
            .flush_range(0, end, true)
            .map_err(|e| self.fail("the sync of a sealed segment", e))?;
        self.syncs.fetch_add(1, Ordering::Relaxed);
        // Synced, so its pages are clean page cache: out of this process's
        // resident set, or a long log would count whole in its RSS (a
        // reader refaults them from the cache). The whole mapping: pages
        // past `end` may be populated ahead (`populate_ahead`). Advice
        // only: a failure changes no byte.
        let _ = old.map.advise(crate::map::Advice::DontNeed, 0, None);
        let seg = Arc::new(SegFile::create(&self.dir, first, w.next_gen, size, self.seg_size)?);
        w.next_gen += 1;
        let mut s = self.write_state();
        s.segs.push(Seg { file: seg.clone(), offsets: Some(Vec::new()) });
        s.tail_end = HEADER_LEN;
        let mut st = lock(&self.sync);
        let v = st.durable.max(first - 1);
        self.set_durable(&mut st, v);
        st.synced = (first, HEADER_LEN);
        Ok(seg)
    }

    /// Zeroes and syncs `[max(zeroed, pos), end + ahead)` (end rounded up to a page)
    /// of the tail (capped at its length) when the batch `[pos, end)` goes
    /// past what is zeroed; see [`CommitLog::set_zero_ahead`]. Only bytes
    /// past the tail's end are written (the caller holds the writer lock):
    /// no entry, and nothing a reader or recovery could see as one.
    fn zero_ahead(&self, tail: &SegFile, pos: usize, end: usize, ahead: usize) -> Result<()> {
        static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
        let page = crate::map::page_size();
        let len = tail.map.len();
        let done = tail.zeroed.load(Ordering::Relaxed);
        if end <= done || done >= len {
            return Ok(());
        }
        let from = done.max(pos);
        let to = (end.div_ceil(page) * page).saturating_add(ahead.div_ceil(page) * page).min(len);
        let mut off = from;
        while off < to {
            let n = (to - off).min(ZEROS.len());
            tail.map
                .file()
                .write_all_at(&ZEROS[..n], off as u64)
                .map_err(|e| Error::io(tail.map.path(), "pwrite", e))?;
            off += n;
        }
        if to > from {
            // Synced now, so the extents are converted before entries land.
            tail.map
                .flush_range(from, to - from, true)
                .map_err(|e| self.fail("a sync of zeros ahead of the tail", e))?;
        }
        tail.zeroed.store(to, Ordering::Relaxed);
        Ok(())
    }

    /// Makes every entry up to `target` durable, sharing syncs between
    /// threads (group commit).
    pub(super) fn sync_upto(&self, target: u64) -> Result<()> {
        let mut st = lock(&self.sync);
        loop {
            if st.durable >= target {
                return Ok(());
            }
            // After a failed sync nothing more becomes durable.
            self.check_failed()?;
            if !st.running {
                st.running = true;
                drop(st);
                let (tail, end, upto) = {
                    let s = self.read_state();
                    (s.segs.last().expect("one segment").file.clone(), s.tail_end, s.last)
                };
                let (from, cuts) = {
                    let st = lock(&self.sync);
                    let from = if st.synced.0 == tail.first { st.synced.1.min(end) } else { 0 };
                    (from, st.cuts)
                };
                // Earlier segments were synced when they were sealed.
                let r = tail.map.flush_range(from, end - from, true);
                self.syncs.fetch_add(1, Ordering::Relaxed);
                st = lock(&self.sync);
                st.running = false;
                st.last = Instant::now();
                if r.is_ok() && st.cuts == cuts {
                    let v = st.durable.max(upto);
                    self.set_durable(&mut st, v);
                    st.synced = (tail.first, end);
                }
                if let Err(e) = r {
                    drop(st);
                    return Err(self.fail("a sync of the log", e));
                }
                self.synced.notify_all();
            } else {
                st = self.synced.wait(st).unwrap_or_else(|e| e.into_inner());
            }
        }
    }

    /// Wakes the threads in [`wait_past`](Self::wait_past) (the new last
    /// index is already published).
    pub(super) fn wake_waiters(&self) {
        // Pairs with the fence in wait_past: either the waiter sees the new
        // last index, or this sees its registration and notifies under the
        // lock it holds while checking.
        std::sync::atomic::fence(Ordering::SeqCst);
        if self.appended.waiters.load(Ordering::SeqCst) > 0 {
            let _g = lock(&self.appended.m);
            self.appended.cv.notify_all();
        }
    }

    /// Waits until the log holds an entry past `index` (its last index is
    /// greater) or `timeout` passed, and returns the last index then. No
    /// polling for a writable log: appends through this handle wake the
    /// waiters (and cost nothing extra while nobody waits). A read-only log
    /// has no such signal from the writing process: it is
    /// [`refresh`](Self::refresh)ed every 20 ms meanwhile. Followers and log
    /// servers use it for long polls.
    pub fn wait_past(&self, index: u64, timeout: Duration) -> Result<u64> {
        self.wait_until_past(index, timeout, |log| log.last_index())
    }

    /// [`wait_past`](Self::wait_past) for the durable mark: waits until
    /// [`durable_mark`](Self::durable_mark) is past `index` (syncs wake
    /// it) or `timeout` passed, and returns it then (0 without a mark).
    pub fn wait_durable_past(&self, index: u64, timeout: Duration) -> Result<u64> {
        self.wait_until_past(index, timeout, |log| log.durable_mark().map_or(0, |m| m.durable))
    }

    fn wait_until_past(
        &self,
        index: u64,
        timeout: Duration,
        value: impl Fn(&Self) -> u64,
    ) -> Result<u64> {
        let deadline = Instant::now() + timeout;
        if self.opts.read_only {
            loop {
                let last = value(self);
                let now = Instant::now();
                if last > index || now >= deadline {
                    return Ok(last);
                }
                std::thread::sleep((deadline - now).min(Duration::from_millis(20)));
                self.refresh()?;
            }
        }
        let a = &self.appended;
        let mut g = lock(&a.m);
        a.waiters.fetch_add(1, Ordering::SeqCst);
        std::sync::atomic::fence(Ordering::SeqCst);
        let last = loop {
            let last = value(self);
            let now = Instant::now();
            if last > index || now >= deadline {
                break last;
            }
            g = a.cv.wait_timeout(g, deadline - now).unwrap_or_else(|e| e.into_inner()).0;
        };
        a.waiters.fetch_sub(1, Ordering::SeqCst);
        Ok(last)
    }

    /// Makes everything appended so far durable.
    pub fn sync(&self) -> Result<()> {
        if self.opts.read_only {
            return Ok(());
        }
        self.check_failed()?;
        let last = self.last_index();
        self.sync_upto(last)
    }
}

/// Starts (does not wait for) writeback of the tail's whole pages written
/// since the last call, once [`WRITE_BEHIND`] bytes have piled up. Every
/// byte of a sealed segment is synced at roll-over anyway (`roll_over`);
/// started early, that sync mostly finds the pages clean instead of
/// writing the whole segment while the appender waits (measured: ~30 ms
/// per 64 MiB segment, a third of a follower's catch-up). Only pages below
/// the last one touched are submitted, so the next batch never writes
/// into a page under writeback. Advisory: an error here is left to the
/// sync that must succeed. Submitted from the log's write-behind thread
/// ([`WriteBehind`]), so a congested device queue never stalls the append.
fn write_behind(behind: &WriteBehind, wb: &mut (u64, usize), tail: &Arc<SegFile>, pos: usize) {
    if wb.0 != tail.first || pos < wb.1 {
        // A new segment, or a truncation moved the end back.
        *wb = (tail.first, 0);
    }
    let page = crate::map::page_size();
    let end = pos / page * page;
    if end < wb.1 + WRITE_BEHIND {
        return;
    }
    behind.post(tail, wb.1 as u64, end as u64);
    wb.1 = end;
}

/// Asks the helper thread to fault the tail's pages in for writing up to
/// [`POPULATE_AHEAD`] past `end` (the end of what was just stored through
/// the mapping), once less than half of that is left: the next batches
/// then store into mapped, writable pages instead of taking a write fault
/// each per fresh page. Not with [`SyncMode::Batch`]: its syncs clean the
/// pages, so the next store faults again anyway, and zero-ahead writes
/// those pages itself. Advisory (see [`WriteBehind`]).
fn populate_ahead(behind: &WriteBehind, tail: &Arc<SegFile>, end: usize) {
    let page = crate::map::page_size();
    let done = tail.populated.load(Ordering::Relaxed);
    let len = tail.map.len();
    if done >= len || end + POPULATE_AHEAD / 2 <= done {
        return;
    }
    // From the page after the one being written: that one is mapped.
    let from = done.max(end.div_ceil(page) * page).min(len);
    let to = (end + POPULATE_AHEAD).div_ceil(page).saturating_mul(page).min(len);
    tail.populated.store(to, Ordering::Relaxed);
    if from < to {
        behind.populate(tail, from as u64, to as u64);
    }
}

/// Refuses a payload longer than an entry may be.
fn check_entry_len(dir: &Path, n: usize) -> Result<()> {
    if n > format::MAX_ENTRY {
        return Err(Error::invalid(
            dir,
            format!("entry of {n} bytes is larger than the maximum of {} bytes", format::MAX_ENTRY),
        ));
    }
    Ok(())
}

/// A batch of entries framed in the log's record format outside its lock,
/// for [`CommitLog::append_framed`]: a follower copies each received entry
/// into it as it arrives (while the bytes are in cache) and checks the
/// entry's CRC over the framed record, so the log writes the checked bytes
/// as they are. The buffer is reused across [`reset`](Self::reset)s.
#[derive(Debug, Default)]
pub struct Framed {
    first: u64,
    /// The entries' records, back to back.
    buf: Vec<u8>,
    /// Each record's offset in `buf`.
    offs: Vec<u64>,
    crcs: Vec<u32>,
    /// Payload bytes.
    bytes: usize,
}

impl Framed {
    /// An empty batch whose first entry will be `first`.
    pub fn new(first: u64) -> Framed {
        Framed { first, ..Framed::default() }
    }
    /// Empties the batch (keeping its buffers); its first entry will be `first`.
    pub fn reset(&mut self, first: u64) {
        self.first = first;
        self.buf.clear();
        self.offs.clear();
        self.crcs.clear();
        self.bytes = 0;
    }
    /// Index of its first entry.
    pub fn first(&self) -> u64 {
        self.first
    }
    /// Index the next entry pushed gets.
    pub fn next_index(&self) -> u64 {
        self.first + self.offs.len() as u64
    }
    /// Entries in it.
    pub fn len(&self) -> usize {
        self.offs.len()
    }
    /// Whether it holds no entry.
    pub fn is_empty(&self) -> bool {
        self.offs.is_empty()
    }
    /// Payload bytes in it.
    pub fn payload_bytes(&self) -> usize {
        self.bytes
    }
    /// Bytes of its framed records (what the log writes, less the commit
    /// record).
    pub fn framed_bytes(&self) -> usize {
        self.buf.len()
    }
    /// Bytes of records its buffer has room for.
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }
    /// Makes room for `bytes` of records in all (growing the buffer now,
    /// not entry by entry).
    pub fn reserve(&mut self, bytes: usize) {
        self.buf.reserve(bytes.saturating_sub(self.buf.len()));
    }
    /// Adds the next entry if `crc` is its CRC ([`entry_crc`](super::entry_crc)
    /// at [`next_index`](Self::next_index), the CRC its leader stored), computed
    /// over the framed copy; else (or if the payload is longer than an entry
    /// may be) adds nothing and returns false.
    pub fn push_checked(&mut self, term: u64, payload: &[u8], crc: u32) -> bool {
        if payload.len() > format::MAX_ENTRY {
            return false;
        }
        let (start, index) = (self.buf.len(), self.next_index());
        let got = format::encode_entry(&mut self.buf, index, term, payload);
        if got != crc {
            self.buf.truncate(start);
            return false;
        }
        self.added(start, crc, payload.len());
        true
    }
    /// Adds the next entry, computing its CRC (the caller checked its length).
    fn push(&mut self, term: u64, payload: &[u8]) {
        let (start, index) = (self.buf.len(), self.next_index());
        let crc = format::encode_entry(&mut self.buf, index, term, payload);
        self.added(start, crc, payload.len());
    }
    /// Adds the next entry with its CRC as given (the caller checked it).
    fn push_with_crc(&mut self, term: u64, payload: &[u8], crc: u32) {
        let start = self.buf.len();
        format::encode_entry_with_crc(&mut self.buf, crc, term, payload);
        self.added(start, crc, payload.len());
    }
    fn added(&mut self, start: usize, crc: u32, len: usize) {
        self.offs.push(start as u64);
        self.crcs.push(crc);
        self.bytes += len;
    }
}

//! Reading: indexing sealed segments on first use, and zero-copy entries
//! that keep their segment mapped.

use smallvec::SmallVec;

use super::*;

impl CommitLog {
    // ----- reading ------------------------------------------------------

    /// Builds the entry index of sealed segment `k` (verifying its
    /// records) if it has not been read yet.
    pub(super) fn ensure_index(&self, k: usize) -> Result<()> {
        let (file, want) = {
            let s = self.read_state();
            if k >= s.segs.len() || s.segs[k].offsets.is_some() {
                return Ok(());
            }
            (s.segs[k].file.clone(), s.count(k))
        };
        // Scanned without the lock, so appends and reads go on meanwhile.
        let offsets = index_sealed(&file, want)?;
        let mut s = self.write_state();
        if let Some(seg) = s.segs.get_mut(k) {
            if seg.offsets.is_none() && Arc::ptr_eq(&seg.file, &file) {
                seg.offsets = Some(offsets);
            }
        }
        Ok(())
    }
}

/// Entry offsets of a sealed segment holding `want` entries, every
/// record verified on the way.
pub(super) fn index_sealed(f: &SegFile, want: u64) -> Result<Vec<u64>> {
    {
        let sc = format::scan(f.data(), f.first, f.gen(), Some(want), false);
        if (sc.offsets.len() as u64) < want {
            let at = f.first + sc.offsets.len() as u64;
            let why = match sc.stop {
                format::Stop::BadEntry(i, pos) => {
                    format!("entry {i} (byte {pos}) fails its checksum")
                }
                format::Stop::BadRecord(pos) => {
                    format!("batch from entry {at}: broken record at byte {pos}")
                }
                _ => format!("entry {at} is missing: the segment ends early"),
            };
            return Err(f.corrupt(format!(
                "segment should hold entries {}..={}: {why}",
                f.first,
                f.first + want - 1
            )));
        }
        Ok(sc.offsets)
    }
}

impl CommitLog {
    pub(super) fn range_check(&self, s: &State, lo: u64, hi: u64) -> Result<()> {
        // After a failed sync, what was not durable may be gone from disk
        // (still in this process's page cache): never handed out.
        if hi > lo && hi - 1 > self.durable.load(Ordering::Acquire) {
            self.check_failed()?;
        }
        if lo > hi || lo < s.first() || hi > s.last + 1 {
            return Err(Error::invalid(
                &self.dir,
                format!(
                    "entries {lo}..{hi} are not in the log (it holds {}..{})",
                    s.first(),
                    s.last + 1
                ),
            ));
        }
        Ok(())
    }

    /// Entries `lo..hi` (half-open, like a Python range). With `max_bytes`,
    /// as many whole entries from `lo` as fit in that many payload bytes,
    /// but at least one. The data are zero-copy slices of the mapping;
    /// entries were checksum-verified when their segment was first
    /// indexed (and on every read with [`LogOptions::verify_reads`]).
    pub fn read(&self, lo: u64, hi: u64, max_bytes: Option<usize>) -> Result<Entries> {
        let mut out = Entries { segs: SmallVec::new(), items: SmallVec::new(), epoch: u64::MAX };
        if hi.saturating_sub(lo) > INLINE as u64 {
            out.items.reserve((hi - lo).min(1 << 16) as usize);
        }
        let mut budget = max_bytes.unwrap_or(usize::MAX);
        let mut i = lo;
        loop {
            let s = self.read_state();
            self.range_check(&s, lo, hi)?;
            // The lowest tag of every view the read used (see `identity`).
            out.epoch = out.epoch.min(s.cuts.completed);
            if i >= hi {
                break;
            }
            let k = s.seg_of(i);
            if s.segs[k].offsets.is_none() {
                drop(s);
                self.ensure_index(k)?;
                continue;
            }
            let seg = &s.segs[k];
            let offs = seg.offsets.as_deref().expect("indexed");
            let d = seg.file.data();
            let stop = hi.min(seg.file.first + offs.len() as u64);
            if stop <= i {
                return Err(seg.file.corrupt(format!("entry {i} is missing from its segment")));
            }
            let segno = out.segs.len() as u32;
            let mut used = false;
            while i < stop {
                let pos = offs[(i - seg.file.first) as usize] as usize;
                // The frame must lie inside the mapping: a read-only view's
                // index can be stale when another process rewrote the file.
                let len = match pos.checked_add(REC).filter(|&e| e <= d.len()) {
                    Some(_) => format::len_at(d, pos),
                    None => usize::MAX,
                };
                if pos + REC > d.len() || len > d.len() - pos - REC {
                    return Err(seg.file.corrupt(format!(
                        "entry {i} (byte {pos}) runs past the end of its segment"
                    )));
                }
                if len > budget && !out.items.is_empty() {
                    i = hi;
                    break;
                }
                budget = budget.saturating_sub(len);
                let term = u64_at(d, pos + 8);
                if self.opts.verify_reads && !format::frame_ok(d, pos, i) {
                    return Err(seg
                        .file
                        .corrupt(format!("entry {i} (byte {pos}) fails its checksum")));
                }
                out.items.push(Item { index: i, term, seg: segno, pos: pos + REC, len });
                used = true;
                i += 1;
            }
            if used {
                out.segs.push(seg.file.clone());
            }
        }
        // The frames' headers were just read: a segment another process
        // truncated under them faulted into zero pages (the payloads are
        // checked by whoever copies them: `Entries::check`).
        out.check()?;
        Ok(out)
    }

    /// Entry `index`.
    pub fn get(&self, index: u64) -> Result<LogEntry> {
        let mut e = self.read(index, index + 1, None)?;
        let item = e.items.pop().expect("one entry");
        Ok(LogEntry { seg: e.segs.pop().expect("one segment"), item })
    }

    /// Term of entry `index` (no payload check beyond the entry's CRC).
    pub fn term(&self, index: u64) -> Result<u64> {
        Ok(self.get(index)?.term())
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) struct Item {
    index: u64,
    term: u64,
    seg: u32,
    pos: usize,
    len: usize,
}

/// Entries a read holds without allocating (a reader's usual batch; a
/// follower's or a server's larger reads allocate once).
const INLINE: usize = 16;

/// Entries returned by [`CommitLog::read`]: they keep their segments
/// mapped, so the slices stay valid whatever happens to the log.
#[derive(Default)]
pub struct Entries {
    /// Almost always one: a read spans a roll-over rarely.
    segs: SmallVec<[Arc<SegFile>; 2]>,
    items: SmallVec<[Item; INLINE]>,
    epoch: u64,
}

/// One entry of [`Entries`].
#[derive(Clone, Copy, Debug)]
pub struct Entry<'a> {
    index: u64,
    term: u64,
    crc: u32,
    data: &'a [u8],
}

impl<'a> Entry<'a> {
    /// Its index.
    pub fn index(&self) -> u64 {
        self.index
    }
    /// Its term.
    pub fn term(&self) -> u64 {
        self.term
    }
    /// Its bytes (a slice of the mapping).
    pub fn data(&self) -> &'a [u8] {
        self.data
    }
    /// The CRC32C stored with it (see [`entry_crc`](super::entry_crc)),
    /// as on disk: it was verified when its segment was indexed, so it
    /// can be shipped with the bytes for the receiver to check.
    pub fn crc(&self) -> u32 {
        self.crc
    }
}

impl Entries {
    /// Err([`Error::FileTruncated`]) if another process truncated one of
    /// the entries' segment files under a page that was read (the guard's
    /// record: one atomic load a segment). A caller that copies the
    /// payloads out calls it after the copy.
    pub fn check(&self) -> Result<()> {
        self.segs.iter().try_for_each(|s| s.map.check())
    }

    /// The read's tag: truncations completed when it read (the lowest, if
    /// a refresh happened meanwhile). Entries that are not in the log as
    /// of this tag were dropped by a truncation numbered at or after it:
    /// a copy made from them is checked with
    /// [`CommitLog::cut_since`]`(tag)` (see `identity`).
    pub fn epoch(&self) -> u64 {
        self.epoch
    }
    /// Number of entries.
    pub fn len(&self) -> usize {
        self.items.len()
    }
    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }
    /// The `k`-th entry returned.
    pub fn get(&self, k: usize) -> Option<Entry<'_>> {
        self.items.get(k).map(|it| self.entry(it))
    }
    pub(super) fn entry(&self, it: &Item) -> Entry<'_> {
        let d = self.segs[it.seg as usize].data();
        Entry {
            index: it.index,
            term: it.term,
            crc: u32_at(d, it.pos - REC),
            data: &d[it.pos..it.pos + it.len],
        }
    }
    /// The entries in index order.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = Entry<'_>> + ExactSizeIterator + '_ {
        self.items.iter().map(|it| self.entry(it))
    }
    /// Total payload bytes.
    pub fn total_bytes(&self) -> usize {
        self.items.iter().map(|it| it.len).sum()
    }
}

impl std::fmt::Debug for Entries {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<'a> IntoIterator for &'a Entries {
    type Item = Entry<'a>;
    type IntoIter = Box<dyn ExactSizeIterator<Item = Entry<'a>> + 'a>;
    fn into_iter(self) -> Self::IntoIter {
        Box::new(self.iter())
    }
}

/// One entry from [`CommitLog::get`], owning a reference to its segment.
pub struct LogEntry {
    seg: Arc<SegFile>,
    item: Item,
}

impl LogEntry {
    /// Its index.
    pub fn index(&self) -> u64 {
        self.item.index
    }
    /// Its term.
    pub fn term(&self) -> u64 {
        self.item.term
    }
    /// Its bytes (a slice of the mapping).
    pub fn data(&self) -> &[u8] {
        &self.seg.data()[self.item.pos..self.item.pos + self.item.len]
    }
    /// The CRC32C stored with it (see [`Entry::crc`]).
    pub fn crc(&self) -> u32 {
        u32_at(self.seg.data(), self.item.pos - REC)
    }
}

impl std::fmt::Debug for LogEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LogEntry")
            .field("index", &self.index())
            .field("term", &self.term())
            .field("data", &self.data())
            .finish()
    }
}

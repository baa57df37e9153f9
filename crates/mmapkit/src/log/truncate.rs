//! Truncation (Raft conflicts) and purging (compaction), crash-safe at every step.

use super::*;

impl CommitLog {
    // ----- truncation ---------------------------------------------------

    /// Drops every entry after `index` (a Raft conflict); the next append
    /// gets `index + 1`. `index` may be `first_index() - 1` (drop all) and
    /// anything ≥ `last_index()` is a no-op. Crash-safe; durable on return.
    pub fn truncate_after(&self, index: u64) -> Result<()> {
        self.check_writable()?;
        let mut w = lock(&self.writer);
        {
            let s = self.read_state();
            if index >= s.last {
                return Ok(());
            }
            if index + 1 < s.first() {
                return Err(Error::invalid(
                    &self.dir,
                    format!(
                        "cannot truncate after {index}: entries before {} were purged",
                        s.first()
                    ),
                ));
            }
        }
        // The segment that becomes the tail is indexed (verified) first,
        // so a corrupt one fails the call before anything is deleted.
        let k = self.read_state().seg_of(index);
        self.ensure_index(k)?;
        // Recorded before anything changes (see `identity`): a reader that
        // saw the dropped entries learns that they were dropped.
        self.cut_started(&mut w, index)?;
        let r = self.truncate_locked(&mut w, index, k).and_then(|()| self.cut_done(&mut w, index));
        // Part of the cut may be on disk: refuse to write on a guess.
        r.map_err(|e| self.fail("a truncation", e))
    }

    /// Records, durably, that a truncation after `after` starts.
    pub(super) fn cut_started(&self, w: &mut Writer, after: u64) -> Result<()> {
        if self.read_state().cuts.pending().is_some() {
            // Only after a failed truncation, which poisons the handle.
            return Err(Error::invalid(
                &self.dir,
                "a truncation is still in progress; reopen the log",
            ));
        }
        if let Some(f) = w.cuts.as_mut() {
            f.intent(after)?;
        }
        Arc::make_mut(&mut self.write_state().cuts).after.push(after);
        Ok(())
    }

    /// Records, durably, that it is done.
    pub(super) fn cut_done(&self, w: &mut Writer, after: u64) -> Result<()> {
        if let Some(f) = w.cuts.as_mut() {
            f.done(after)?;
        }
        Arc::make_mut(&mut self.write_state().cuts).completed += 1;
        Ok(())
    }

    pub(super) fn truncate_locked(&self, w: &mut Writer, index: u64, k: usize) -> Result<()> {
        // Whole segments after `index`, from the far end inwards: a crash
        // in between leaves a prefix of the old log.
        loop {
            let victim = {
                let mut s = self.write_state();
                let tail = s.segs.last().expect("one segment");
                if s.segs.len() == 1 || tail.file.first <= index {
                    break;
                }
                let v = s.segs.pop().expect("tail").file;
                s.last = v.first - 1;
                v
            };
            let p = victim.path();
            crate::fs::remove_file(&p)?;
            sync_dir(&self.dir)?;
        }
        // Inside the (possibly new) tail.
        debug_assert_eq!(k, self.read_state().segs.len() - 1);
        let (tail_first, keep, count, end) = {
            let s = self.read_state();
            let t = &s.segs[k];
            let offs = t.offsets.as_deref().expect("indexed");
            let end = if offs.is_empty() {
                HEADER_LEN
            } else {
                let d = t.file.data();
                let e = format::entry_end(d, offs, offs.len() - 1);
                e + format::commit_len(d, e).unwrap_or(REC)
            };
            (t.file.first, (index + 1 - t.file.first) as usize, offs.len(), end)
        };
        let end = if keep < count {
            self.cut_entries(w, keep)?
        } else {
            // A segment mapped sealed whole (a non-tail one when the log
            // was opened) is the tail now: appends go right after `end`.
            if self.tail().map.sealed() > end {
                self.with_tail_to_itself(|seg| seg.unseal_from(end))?;
            }
            end
        };
        let mut s = self.write_state();
        s.segs[k].offsets.as_mut().expect("indexed").truncate(keep);
        s.last = index;
        s.tail_end = end;
        let mut st = lock(&self.sync);
        let v = st.durable.min(index);
        self.set_durable(&mut st, v);
        st.cuts += 1;
        if st.synced.0 == tail_first {
            st.synced.1 = st.synced.1.min(end);
        } else {
            st.synced = (tail_first, 0);
        }
        Ok(())
    }

    /// Cuts the tail segment after its first `keep` entries; returns the
    /// new end position.
    pub(super) fn cut_entries(&self, w: &mut Writer, keep: usize) -> Result<usize> {
        let seg = self.tail();
        let d = seg.data();
        let (end, commit, old_end) = {
            let s = self.read_state();
            let offs = s.segs.last().expect("tail").offsets.as_deref().expect("indexed");
            // After the last batch's commit record (the tail may be a
            // sealed segment that whole segments were cut from).
            let e = format::entry_end(d, offs, offs.len() - 1);
            let old_end = e + format::commit_len(d, e).unwrap_or(REC);
            if keep == 0 {
                (HEADER_LEN, None, old_end)
            } else {
                let e = format::entry_end(d, offs, keep - 1);
                if let Some(clen) = format::commit_len(d, e) {
                    (e + clen, None, old_end)
                } else {
                    // Mid-batch: the kept part of the batch gets a commit record
                    // of its own, a 16-byte one (no watermark) so that its
                    // rewrite stays one sector-atomic record.
                    let b = format::batch_start(d, offs, keep - 1);
                    (e, Some((seg.first + b as u64, offs[b..keep].to_vec())), old_end)
                }
            }
        };
        self.bump(w, &seg)?;
        // The dropped batches are zeroed (far end first): recovery relies on
        // nothing but zeros after the last batch, so a later torn batch is
        // never mistaken for corruption. A kill meanwhile leaves a longer
        // prefix of the old log (the truncation was not acknowledged).
        let rec = commit.map(|(bfirst, offs)| format::commit_for(d, bfirst, &offs, seg.gen()));
        drop(seg); // the rewrites below need the tail to themselves
        match rec {
            None => {
                self.zero_range(end + REC, old_end + REC)?;
                self.zero_at(end)?;
                Ok(end)
            }
            Some(rec) => {
                // The kept part's commit record first: zeroing the rest of
                // its batch before would tear the kept entries.
                self.rewrite_tail(end, &rec)?;
                self.zero_range(end + REC, old_end + REC)?;
                // The new commit record is committed data: sealed, so reads
                // (and indexing once the segment is sealed) see it.
                self.tail().map.seal(end + REC)?;
                Ok(end + REC)
            }
        }
    }

    pub(super) fn tail(&self) -> Arc<SegFile> {
        self.read_state().segs.last().expect("one segment").file.clone()
    }

    pub(super) fn bump(&self, w: &mut Writer, seg: &SegFile) -> Result<()> {
        seg.bump_gen(&self.dir, w.next_gen)?;
        w.next_gen += 1;
        Ok(())
    }

    /// Zeros bytes `from..to` of the tail (clamped to the file) from the
    /// far end down, then syncs them: a kill part-way leaves the low part,
    /// so recovery sees at most a shorter torn area, never data after a hole.
    pub(super) fn zero_range(&self, from: usize, to: usize) -> Result<()> {
        const CHUNK: usize = 1 << 16;
        self.with_tail_to_itself(|seg| {
            let to = to.min(seg.map.len());
            if from >= to {
                return Ok(());
            }
            seg.unseal_from(from)?;
            let zeros = vec![0u8; CHUNK.min(to - from)];
            let mut hi = to;
            while hi > from {
                let lo = hi.saturating_sub(CHUNK).max(from);
                seg.map.get_mut().write_at(lo, &zeros[..hi - lo])?;
                hi = lo;
            }
            seg.map.flush_range(from, to - from, true)?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    pub(super) fn zero_at(&self, pos: usize) -> Result<()> {
        if pos + REC <= self.tail().map.len() {
            self.rewrite_tail(pos, &[0u8; REC])?;
        }
        Ok(())
    }

    /// Writes `bytes` at `pos` of the tail segment, below its seal, and
    /// syncs them.
    pub(super) fn rewrite_tail(&self, pos: usize, bytes: &[u8]) -> Result<()> {
        self.with_tail_to_itself(|seg| {
            seg.rewrite(pos, bytes)?;
            self.syncs.fetch_add(1, Ordering::Relaxed);
            Ok(())
        })
    }

    /// Runs `f` with the tail segment to itself, for writes below its
    /// seal. Entries handed out earlier must never change, so when readers
    /// still hold the tail's mapping, the tail is first replaced by a copy
    /// of its file renamed over it (they keep the old file's pages).
    pub(super) fn with_tail_to_itself<R>(
        &self,
        f: impl FnOnce(&mut SegFile) -> Result<R>,
    ) -> Result<R> {
        let mut s = self.write_state();
        let seg = &mut s.segs.last_mut().expect("one segment").file;
        if Arc::get_mut(seg).is_none() {
            *seg = Arc::new(seg.copy_for_rewrite()?);
        }
        f(Arc::get_mut(seg).expect("exclusive"))
    }

    /// Drops whole segments whose entries are all below `index`
    /// (compaction); entries from `index` on stay, and so may some
    /// before it (segment granularity). The tail segment is never dropped.
    /// Appends wait only while the segments are taken out of the log, not
    /// for their files' removal and the directory's sync (a purge of 3 GB
    /// of segments, one unlink and one directory fsync each under the
    /// writer's lock, held appends for 2 s). A crash before the removal is
    /// durable leaves segments that a later purge drops again.
    pub fn purge_before(&self, index: u64) -> Result<()> {
        self.check_writable()?;
        let victims = {
            let _w = lock(&self.writer);
            let mut s = self.write_state();
            let mut out = Vec::new();
            while s.segs.len() >= 2 && s.segs[1].file.first <= index {
                out.push(s.segs.remove(0).file);
            }
            out
        };
        if victims.is_empty() {
            return Ok(());
        }
        for victim in &victims {
            crate::fs::remove_file(&victim.path())?;
        }
        sync_dir(&self.dir)
    }
}

//! The writer's side: room, appends, truncation, publishing the row
//! count, flushes (fail-stop) and closing.

use std::os::unix::fs::FileExt;
use std::sync::atomic::Ordering;

use super::*;
use crate::{Error, Result};

impl ArrayStore {
    pub(super) fn need_writer(&self) -> Result<()> {
        if !self.writable {
            return Err(Error::ReadOnly { path: self.path.clone() });
        }
        if self.owner != std::process::id() {
            return Err(Error::invalid(&self.path, "this writer was inherited from the parent process (fork), which still owns it; open the store again"));
        }
        self.check_failed()
    }

    /// The fail-stop error once a flush's sync failed (see the module docs).
    pub(super) fn check_failed(&self) -> Result<()> {
        match self.failure.get() {
            Some(why) => Err(Error::Failed {
                path: self.path.clone(),
                detail: format!(
                    "{why}; the store refuses appends, flushes, resizes and reads past row {} (the rows last flushed) \
                     until it is reopened (reopening reads what is really on disk)",
                    self.durable_rows.load(Ordering::Acquire)
                ),
            }),
            None => Ok(()),
        }
    }

    /// Fail-stop: after a failed sync the kernel may have dropped the dirty
    /// pages and marked them clean, so no later sync may count them as
    /// durable. Returns the error to report.
    pub(super) fn fail(&self, what: &str, e: Error) -> Error {
        let _ = self.failure.set(format!("{what} failed ({e})"));
        e
    }

    /// Makes room for `extra` more rows past [`len`](Self::len) (allocating
    /// file blocks: a full disk fails here). Growth never moves the data.
    pub fn reserve_rows(&mut self, extra: u64) -> Result<()> {
        self.need_writer()?;
        let want = self.len().checked_add(extra).filter(|_| extra > 0);
        let Some(want) = want else { return Ok(()) };
        if want <= self.capacity() {
            return Ok(());
        }
        let rb = self.row_bytes as u64;
        let cap = self.capacity();
        let grown = cap + (cap / 2).max(self.chunk_bytes.div_ceil(rb));
        let rows = want.max(grown);
        let bytes = rows
            .checked_mul(rb)
            .and_then(|b| b.checked_add(self.data_off as u64))
            .and_then(|b| usize::try_from(b).ok())
            .ok_or_else(|| Error::invalid(&self.path, format!("{rows} rows are too many")))?;
        self.map.grow(bytes)
    }

    /// Appends whole rows (`bytes.len()` must be a multiple of
    /// [`row_bytes`](Self::row_bytes)) and publishes them. Returns the new
    /// row count.
    pub fn append(&mut self, bytes: &[u8]) -> Result<u64> {
        self.need_writer()?;
        let n = self.whole_rows(bytes.len())?;
        if n == 0 {
            return Ok(self.len());
        }
        self.reserve_rows(n)?;
        let at = self.data_off + self.len() as usize * self.row_bytes;
        self.map.write_at(at, bytes)?;
        self.publish(self.len() + n)?;
        Ok(self.len())
    }

    /// The number of rows in `bytes` bytes, or an error unless it is a
    /// whole number of them (what [`append`](Self::append) accepts; a
    /// binding that fills rows through [`append_with`](Self::append_with)
    /// checks its input with it).
    pub fn whole_rows(&self, bytes: usize) -> Result<u64> {
        if !bytes.is_multiple_of(self.row_bytes) {
            return Err(Error::invalid(
                &self.path,
                format!("{bytes} bytes are not a whole number of {}-byte rows", self.row_bytes),
            ));
        }
        Ok((bytes / self.row_bytes) as u64)
    }

    /// Appends `n` rows written in place by `fill`, which gets the rows'
    /// bytes (zeroed or stale: unpublished capacity) to fill; they are
    /// published only after it returns Ok. No rows: `fill` is not called.
    pub fn append_with<E>(
        &mut self,
        n: u64,
        fill: impl FnOnce(&mut [u8]) -> std::result::Result<(), E>,
    ) -> Result<std::result::Result<u64, E>> {
        self.need_writer()?;
        if n == 0 {
            return Ok(Ok(self.len()));
        }
        self.reserve_rows(n)?;
        let at = self.data_off + self.len() as usize * self.row_bytes;
        let len = n as usize * self.row_bytes;
        let slice = self.map.as_mut_slice()?;
        if let Err(e) = fill(&mut slice[at..at + len]) {
            return Ok(Err(e));
        }
        self.map.check()?;
        self.publish(self.len() + n)?;
        Ok(Ok(self.len()))
    }

    /// Writers: cuts the published row count back to `rows` (at most
    /// [`len`](Self::len)) and flushes, for a caller whose own commit
    /// record (e.g. a feature store's metadata) counts fewer rows than a
    /// writer that died left published. The cut rows become capacity that
    /// the next append overwrites. Readers that already saw them get a
    /// [`Error::Format`] from [`refresh`](Self::refresh) ("the row count
    /// went down") and must open the store again.
    pub fn truncate_rows(&mut self, rows: u64) -> Result<()> {
        self.need_writer()?;
        if rows > self.len() {
            return Err(Error::invalid(
                &self.path,
                format!("cannot truncate to {rows} rows: the store has {}", self.len()),
            ));
        }
        if rows == self.len() {
            return Ok(());
        }
        self.publish(rows)?;
        self.flush()
    }

    /// Rewrites the header's row count in place. The low 8 bytes of the
    /// count field go first, with one atomic store; the digits above them
    /// change only when the count crosses a multiple of 10^8, and are
    /// written after, so a reader racing with that rare update sees a
    /// count no larger than the new one (or, numpy, for an instant, a
    /// header it cannot parse), never rows that were not written.
    pub(super) fn publish(&mut self, rows: u64) -> Result<()> {
        let mut h = self.header.clone();
        h.shape[0] = rows;
        let (bytes, field) = h.encode_growable(self.data_off)?;
        debug_assert_eq!(field, self.field);
        if self.header_dirty {
            // Readers may see this whole-header write torn for an instant;
            // it happens once per handle, on the first append.
            self.map
                .file()
                .write_all_at(&bytes, 0)
                .map_err(|e| Error::io(&self.path, "write", e))?;
            self.header_dirty = false;
            self.header = h;
            return Ok(());
        }
        let word = field.end - 8;
        let mut w = [0u8; 8];
        w.copy_from_slice(&bytes[word..field.end]);
        self.map.store_word(word, w)?;
        let high = field.start..word;
        if self.map.as_slice()[high.clone()] != bytes[high.clone()] {
            self.map.write_at(high.start, &bytes[high])?;
        }
        self.header = h;
        Ok(())
    }

    /// Makes everything published so far durable: syncs the data pages
    /// past the header's page first, then the header's page (which also
    /// holds the first rows), then records the count in the durable-rows
    /// record. Between flushes the header's new count is in the page cache
    /// (other processes must see it) and may reach the disk before the
    /// rows; after a power loss the record limits the store to the rows
    /// flushed (see the module docs).
    pub fn flush(&self) -> Result<()> {
        if !self.writable {
            return Ok(());
        }
        self.check_failed()?;
        let rows = self.len();
        let end = self.data_off + rows as usize * self.row_bytes;
        let page = crate::map::page_size().max(self.data_off);
        if end > page {
            self.map
                .flush_range(page, end - page, true)
                .map_err(|e| self.fail("flush (msync of the data)", e))?;
        }
        self.map
            .flush_range(0, end.min(page), true)
            .map_err(|e| self.fail("flush (msync of the header)", e))?;
        if let Some(d) = &self.durable {
            let fp = self.fingerprint(rows)?;
            d.update(rows, fp)
                .map_err(|e| self.fail("flush (sync of the durable-rows record)", e))?;
        }
        self.durable_rows.store(rows, Ordering::Release);
        Ok(())
    }

    /// Makes everything published so far durable, for a caller that keeps
    /// its own commit record ([`StoreOptions::durable_record`] off): one
    /// `msync(MS_SYNC)` over the header and the rows, in any order, since
    /// the caller commits only after it returns. With the record kept,
    /// this is [`flush`](Self::flush). Fail-stop as `flush`.
    pub fn sync(&self) -> Result<()> {
        if self.durable.is_some() || !self.writable {
            return self.flush();
        }
        self.check_failed()?;
        let rows = self.len();
        let end = self.data_off + rows as usize * self.row_bytes;
        self.map.flush_range(0, end, true).map_err(|e| self.fail("sync (msync)", e))?;
        self.durable_rows.store(rows, Ordering::Release);
        Ok(())
    }

    pub(super) fn fingerprint(&self, rows: u64) -> Result<u32> {
        durable::fingerprint(
            self.map.file(),
            &self.path,
            &self.header,
            self.data_off,
            self.row_bytes,
            rows,
        )
    }

    /// Writers, on open: a header counting rows past the durable-rows
    /// record of an earlier boot is cut back to the record (a power loss
    /// may have lost them; see `durable`); rows a writer that died in this
    /// boot left are made durable; then the record is (re)created.
    pub(super) fn start_durable(&mut self, existing: bool) -> Result<()> {
        let rec = durable::path_of(&self.path);
        if !self.use_record {
            // Left by a writer that kept one: it would hold readers that
            // consult it to its count.
            crate::fs::remove_file_durably(&rec)?;
            return Ok(());
        }
        if existing {
            if let Some(r) = durable::read(&rec)? {
                if !r.this_boot
                    && r.rows < self.len()
                    && r.fingerprint == self.fingerprint(r.rows)?
                {
                    self.publish(r.rows)?;
                }
                self.flush()?;
            }
        }
        self.durable = Durable::create(&rec, self.len(), self.fingerprint(self.len())?)?;
        Ok(())
    }

    /// Gives the reserved capacity back to the file system (the file ends
    /// right after the last row, as `np.save` would write it, or where it
    /// ended when opened if that is further: bytes that were there before
    /// are not ours to drop). The store stays usable; the next append
    /// reserves again.
    pub fn trim(&mut self) -> Result<()> {
        self.need_writer()?;
        let end = (self.data_off + self.len() as usize * self.row_bytes).max(self.keep_len);
        if self.map.len() > end {
            self.map.resize(end)?;
        }
        Ok(())
    }

    /// Ends writing: trims ([`trim`](Self::trim)) and flushes, then the
    /// handle is read-only (its data stays mapped for existing views).
    /// Readers and a forked child's inherited copy of a writer: nothing
    /// to do. After a failed flush: [`Error::Failed`], nothing written.
    ///
    /// The writer lock goes with it, even while views keep the data mapped,
    /// so the store can be opened for writing again at once.
    pub fn release(&mut self) -> Result<()> {
        if !(self.writable && self.owner == std::process::id()) {
            self.writable = false;
            return Ok(());
        }
        let r = if self.failure.get().is_some() {
            // No trim, no flush, and the durable-rows record stays: it is
            // what a later boot may trust.
            self.durable = None;
            self.check_failed()
        } else {
            self.trim().and_then(|()| self.flush()).and_then(|()| match self.durable.take() {
                Some(d) => d.remove(),
                None => Ok(()),
            })
        };
        if r.is_err() && self.failure.get().is_none() {
            return r; // still the writer: the caller may retry
        }
        self.writable = false;
        if let Some(id) = file_id(self.map.file()) {
            held_here().retain(|h| *h != id);
        }
        self.map.file().unlock().map_err(|e| Error::io(&self.path, "unlock", e))?;
        r
    }

    /// [`release`](Self::release)s and closes.
    pub fn close(mut self) -> Result<()> {
        self.release()
    }
}

//! Inspection: full verification and stat.

use rayon::prelude::*;

use super::read::index_sealed;
use super::*;
use crate::exec::{Progress, Threads};

impl CommitLog {
    // ----- inspection ---------------------------------------------------

    /// Checks every entry's CRC and every batch commit of every segment
    /// (segments in parallel, one worker per core).
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_with(Threads::AUTO, &Progress::none())
    }

    /// [`CommitLog::verify`] on `threads` workers, adding each segment's
    /// size to `progress` once it is checked (the total: all segments).
    /// Appends and reads go on meanwhile; the segments checked are those of
    /// the moment it started. A corrupt log reports its first bad segment,
    /// whatever the thread count.
    pub fn verify_with(&self, threads: Threads, progress: &Progress) -> Result<VerifyReport> {
        let segs: Vec<(Arc<SegFile>, u64)> = {
            let s = self.read_state();
            (0..s.segs.len()).map(|k| (s.segs[k].file.clone(), s.count(k))).collect()
        };
        progress.set_total(segs.iter().map(|(f, _)| f.map.len() as u64).sum());
        let checked: Vec<Result<(u64, u64)>> = threads.install(|| {
            segs.par_iter()
                .map(|(f, want)| {
                    let offs = index_sealed(f, *want)?;
                    let bytes = offs
                        .iter()
                        .map(|&o| format::len_at(f.data(), o as usize) as u64)
                        .sum::<u64>();
                    progress.advance(f.map.len() as u64);
                    Ok((offs.len() as u64, bytes))
                })
                .collect()
        })?;
        // What the open found past the tail's last batch (a read-only open
        // leaves it there; see VerifyReport::unreadable_tail).
        let r = &self.recovery;
        let unreadable_tail =
            (self.opts.read_only && r.dropped_bytes > 0).then(|| UnreadableTail {
                first_index: self.read_state().last + 1,
                entries: r.dropped_entries,
                bytes: r.dropped_bytes,
            });
        let mut rep = VerifyReport { segments: segs.len(), entries: 0, bytes: 0, unreadable_tail };
        for r in checked {
            let (entries, bytes) = r?;
            rep.entries += entries;
            rep.bytes += bytes;
        }
        Ok(rep)
    }

    /// Segments and counts.
    pub fn stat(&self) -> Result<LogStat> {
        let s = self.read_state();
        let segments = (0..s.segs.len())
            .map(|k| {
                let f = &s.segs[k].file;
                Ok(SegmentInfo {
                    path: f.path(),
                    first_index: f.first,
                    entries: s.count(k),
                    generation: f.gen(),
                    size: f.map.len() as u64,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(LogStat {
            dir: self.dir.clone(),
            first_index: s.first(),
            last_index: s.last,
            entries: s.last + 1 - s.first(),
            tail_used: s.tail_end as u64,
            segments,
            sync_count: self.sync_count(),
        })
    }
}

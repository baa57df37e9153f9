//! Inspection: full verification and stat.

use super::read::index_sealed;
use super::*;

impl CommitLog {
    // ----- inspection ---------------------------------------------------

    /// Checks every entry's CRC and every batch commit of every segment.
    pub fn verify(&self) -> Result<VerifyReport> {
        self.verify_progress(&AtomicU64::new(0))
    }

    /// [`CommitLog::verify`], adding each segment's size to `done` once it
    /// is checked (for progress bars). Appends and reads go on meanwhile;
    /// the segments checked are those of the moment it started.
    pub fn verify_progress(&self, done: &AtomicU64) -> Result<VerifyReport> {
        let segs: Vec<(Arc<SegFile>, u64)> = {
            let s = self.read_state();
            (0..s.segs.len())
                .map(|k| (s.segs[k].file.clone(), s.count(k)))
                .collect()
        };
        let mut rep = VerifyReport {
            segments: segs.len(),
            entries: 0,
            bytes: 0,
        };
        for (f, want) in &segs {
            let offs = index_sealed(f, *want)?;
            rep.entries += offs.len() as u64;
            rep.bytes += offs
                .iter()
                .map(|&o| format::len_at(f.data(), o as usize) as u64)
                .sum::<u64>();
            done.fetch_add(f.map.len() as u64, Ordering::Relaxed);
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

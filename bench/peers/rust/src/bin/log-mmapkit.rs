//! `log` suite driver for mmapkit's commit log through its Rust API
//! (`mmapkit::log::CommitLog`, path dependency on this repository's crate): one
//! `append` of a slice of (term, data) per batch, `SyncMode::Batch` or `Never`,
//! concurrent appenders share the `&self` log (group commit), reads with
//! `read(lo, hi, None)` (zero-copy slices of the mapping, copied into the sink).
//! The log's defaults otherwise; `MMAPKIT_ZERO_AHEAD=N` (bytes; 0: off) overrides
//! `CommitLog::set_zero_ahead` for A/B runs by hand (the suite never sets it).
use mmapkit::log::{CommitLog, LogOptions, SyncMode};

use log_bench_drivers::{appenders, main as run, Args, Driver, Sink, TERM};

struct Mk {
    log: CommitLog,
}

impl Driver for Mk {
    const NAME: &'static str = "mmapkit";
    type Input = Vec<u8>;

    fn open(a: &Args, _create: bool) -> Result<Self, String> {
        let opts = LogOptions::default().segment_size(64 << 20).first_index(1).sync(if a.sync {
            SyncMode::Batch
        } else {
            SyncMode::Never
        });
        let log = CommitLog::open(&a.dir, opts).map_err(|e| e.to_string())?;
        if let Some(n) = std::env::var("MMAPKIT_ZERO_AHEAD").ok().and_then(|v| v.parse().ok()) {
            log.set_zero_ahead(n);
        }
        Ok(Mk { log })
    }

    fn append_all(&self, a: &Args, data: &Vec<u8>) -> Result<u64, String> {
        let before = self.log.sync_count();
        appenders(a, |t| {
            let mut batch: Vec<(u64, &[u8])> = Vec::with_capacity(a.batch);
            for b in a.batches_of(t) {
                batch.clear();
                batch.extend(
                    (b * a.batch..(b + 1) * a.batch)
                        .map(|i| (TERM, &data[i * a.size..(i + 1) * a.size])),
                );
                self.log.append(&batch).map_err(|e| e.to_string())?;
            }
            Ok(0)
        })?;
        Ok(self.log.sync_count() - before)
    }

    fn read_range(&mut self, lo: u64, hi: u64, sink: &mut Sink) -> Result<(), String> {
        let entries = self.log.read(lo + 1, hi + 1, None).map_err(|e| e.to_string())?;
        for e in entries.iter() {
            sink.push(e.data());
        }
        Ok(())
    }
}

fn main() {
    run::<Mk>();
}

//! `log` suite driver for tikv's raft-engine (crates.io `raft-engine` 0.4): the
//! entries are `raft::eraftpb::Entry` protobufs (built before the clock starts: a
//! Raft node has them already), one `LogBatch` per batch (reused), `Engine::write`
//! with `sync` = the sync mode (raft-engine does group commit across concurrent
//! writers), reads with `fetch_entries_to`. Batch compression off (the data is
//! random); everything else default. One Raft group per appender: a group's entries
//! must be appended in index order, so concurrent appenders are several groups (its
//! multi-Raft design); batch j of the run is group j % K's batch j / K. Syncs are
//! counted from raft-engine's own sync-duration histogram.
use raft_engine::{Config, Engine, LogBatch, MessageExt, ReadableSize};
use raft_proto::eraftpb::Entry;

use log_bench_drivers::{appenders, main as run, Args, Driver, Prepare, Sink, TERM};

#[derive(Clone)]
struct M;

impl MessageExt for M {
    type Entry = Entry;
    fn index(e: &Entry) -> u64 {
        e.index
    }
}

struct RaftEngine {
    engine: Engine,
    appenders: u64,
    batch: u64,
    buf: Vec<Entry>,
}

fn syncs() -> u64 {
    prometheus::gather()
        .iter()
        .filter(|f| f.get_name() == "raft_engine_sync_log_duration_seconds")
        .flat_map(|f| {
            f.get_metric()
                .iter()
                .map(|m| m.get_histogram().get_sample_count())
        })
        .sum()
}

impl RaftEngine {
    /// (group, index) of the entry at 0-based position `pos` of the run.
    fn locate(&self, pos: u64) -> (u64, u64) {
        let b = pos / self.batch;
        let group = b % self.appenders;
        let index = (b / self.appenders) * self.batch + pos % self.batch + 1;
        (group + 1, index)
    }
}

/// The entries as protobufs (a Raft node has them already).
struct Entries(Vec<Entry>);

impl Prepare for Entries {
    fn prepare(a: &Args, data: Vec<u8>) -> Entries {
        // entry i gets the index it will have in its group
        Entries(
            (0..a.entries)
                .map(|i| {
                    let b = i / a.batch;
                    let mut e = Entry::default();
                    e.set_term(TERM);
                    e.set_index(((b / a.appenders) * a.batch + i % a.batch + 1) as u64);
                    e.set_data(data[i * a.size..(i + 1) * a.size].to_vec().into());
                    e
                })
                .collect(),
        )
    }
}

impl Driver for RaftEngine {
    const NAME: &'static str = "raft-engine";
    type Input = Entries;

    fn open(a: &Args, _create: bool) -> Result<Self, String> {
        let cfg = Config {
            dir: a.dir.to_string_lossy().into_owned(),
            batch_compression_threshold: ReadableSize(0),
            ..Default::default()
        };
        let engine = Engine::open(cfg).map_err(|e| e.to_string())?;
        Ok(RaftEngine {
            engine,
            appenders: a.appenders as u64,
            batch: a.batch as u64,
            buf: Vec::new(),
        })
    }

    fn append_all(&self, a: &Args, input: &Entries) -> Result<u64, String> {
        let before = syncs();
        appenders(a, |t| {
            let mut lb = LogBatch::with_capacity(a.batch);
            for b in a.batches_of(t) {
                lb.add_entries::<M>(t as u64 + 1, &input.0[b * a.batch..(b + 1) * a.batch])
                    .map_err(|e| e.to_string())?;
                self.engine
                    .write(&mut lb, a.sync)
                    .map_err(|e| e.to_string())?;
            }
            Ok(0)
        })?;
        Ok(syncs() - before)
    }

    fn read_range(&mut self, lo: u64, hi: u64, sink: &mut Sink) -> Result<(), String> {
        // [lo, hi) is one batch: one group, consecutive indexes
        let (group, first) = self.locate(lo);
        self.buf.clear();
        self.engine
            .fetch_entries_to::<M>(group, first, first + (hi - lo), None, &mut self.buf)
            .map_err(|e| e.to_string())?;
        for e in &self.buf {
            sink.push(e.get_data());
        }
        Ok(())
    }
}

fn main() {
    run::<RaftEngine>();
}

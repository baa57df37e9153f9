//! `log` suite driver for the `commitlog` crate (crates.io, 0.2): Kafka-style
//! segmented log with an offset index. One `append` of a `MessageBuf` per batch
//! (reused buffer); in sync mode `flush()` per batch, which msyncs the index but
//! does not make the segment durable (it calls `File::flush`, a no-op for a std
//! `File`), so the driver also `fdatasync`s the segment file through its own
//! descriptor (the runs stay within the first 1 GiB segment); reads with `read(offset, ReadLimit::max_bytes(...))` sized for the batch.
//! `&mut self` API: concurrent appenders share it through a mutex. Offsets start at
//! 0; defaults otherwise (1 GiB segments), except an index sized for the run (see
//! `open`).
use std::sync::Mutex;

use commitlog::message::{MessageBuf, MessageSet};
use commitlog::{CommitLog, LogOptions, ReadLimit};

use log_bench_drivers::{appenders, main as run, Args, Driver, Sink};

const HEADER: usize = 20;

struct Clog {
    log: Mutex<CommitLog>,
    segment: Option<std::fs::File>,
    size: usize,
    syncs: Mutex<u64>,
}

impl Driver for Clog {
    const NAME: &'static str = "commitlog";
    type Input = Vec<u8>;

    fn open(a: &Args, _create: bool) -> Result<Self, String> {
        let mut opts = LogOptions::new(&a.dir);
        // commitlog 0.2 fails ("IO Error") reading the last entry of a segment whose
        // index is full (default 100,000 entries): size the index for the whole run
        opts.index_max_items(a.entries + 1);
        let log = CommitLog::new(opts).map_err(|e| format!("{e:?}"))?;
        let segment = if a.sync {
            let path = a.dir.join(format!("{:020}.log", 0));
            Some(std::fs::File::open(&path).map_err(|e| format!("{}: {e}", path.display()))?)
        } else {
            None
        };
        Ok(Clog {
            log: Mutex::new(log),
            segment,
            size: a.size,
            syncs: Mutex::new(0),
        })
    }

    fn append_all(&self, a: &Args, data: &Vec<u8>) -> Result<u64, String> {
        appenders(a, |t| {
            let mut buf = MessageBuf::default();
            let mut n = 0;
            for b in a.batches_of(t) {
                buf.clear();
                for i in b * a.batch..(b + 1) * a.batch {
                    buf.push(&data[i * a.size..(i + 1) * a.size])
                        .map_err(|e| format!("{e:?}"))?;
                }
                let mut log = self.log.lock().unwrap();
                log.append(&mut buf).map_err(|e| format!("{e:?}"))?;
                if a.sync {
                    log.flush().map_err(|e| format!("{e:?}"))?;
                    if let Some(f) = &self.segment {
                        f.sync_data().map_err(|e| e.to_string())?;
                    }
                    n += 1;
                }
            }
            *self.syncs.lock().unwrap() += n;
            Ok(0)
        })?;
        let n = *self.syncs.lock().unwrap();
        Ok(n)
    }

    fn read_range(&mut self, lo: u64, hi: u64, sink: &mut Sink) -> Result<(), String> {
        let log = self.log.get_mut().unwrap();
        let mut next = lo;
        // a read stops at the end of a segment: read on until the batch is complete
        while next < hi {
            let want = (hi - next) as usize;
            let msgs = log
                .read(
                    next,
                    ReadLimit::max_bytes((want + 1) * (HEADER + self.size)),
                )
                .map_err(|e| format!("{e:?}"))?;
            let before = next;
            for m in msgs.iter().take(want) {
                sink.push(m.payload());
                next += 1;
            }
            if next == before {
                return Err(format!("no entry at offset {next}"));
            }
        }
        Ok(())
    }
}

fn main() {
    run::<Clog>();
}

//! The `log` suite's measure of the drivers' own cost: the loop of the mmapkit
//! driver (bench/peers/rust/src/bin/log-mmapkit.rs), with the same batches built
//! the same way (a reused Vec of (term, slice) per batch, from `appenders`), handed
//! to `std::hint::black_box` instead of a log. Nothing is written; the data is
//! generated before the clock starts, as in every driver. What it prints as
//! `append_s` is what the harness itself costs inside an append time: the suite
//! reports it as its own row and the append times net of it.
//!
//! `log-null append --dir D --entries N --size S --batch B [...]` (the common
//! protocol; `--dir` is created and left empty, `read` is refused). Output: the
//! usual JSON with `driver: "null"`, `entries` = the entries handed over (counted
//! after the clock stops) and no checksums (there is no log to read back).
use std::time::Instant;

use log_bench_drivers::{appenders, die, generate, Args, Phase, Report, TERM};

fn main() {
    let a = Args::parse();
    if a.phase != Phase::Append {
        die("null", "read", "there is no log to read: only `append` is measured");
    }
    if let Err(e) = std::fs::create_dir_all(&a.dir) {
        die("null", &a.dir.display().to_string(), e);
    }
    let data = generate(a.seed, a.entries * a.size);
    let t = Instant::now();
    let seen = appenders(&a, |t| {
        let mut batch: Vec<(u64, &[u8])> = Vec::with_capacity(a.batch);
        let mut n = 0u64;
        for b in a.batches_of(t) {
            batch.clear();
            batch.extend(
                (b * a.batch..(b + 1) * a.batch).map(|i| (TERM, &data[i * a.size..(i + 1) * a.size])),
            );
            // What `log.append(&batch)` receives; the call itself is the log's cost.
            std::hint::black_box(&batch);
            n += batch.len() as u64;
        }
        Ok(n)
    })
    .unwrap_or_else(|e| die("null", "append", e));
    let rep = Report {
        append_s: t.elapsed().as_secs_f64(),
        batches: a.batches() as u64,
        entries: seen,
        ..Default::default()
    };
    rep.print("null");
}

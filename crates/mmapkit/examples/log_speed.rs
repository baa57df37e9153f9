//! Quick check of the commit log's speed targets (not a benchmark; the
//! `log` suite in `bench/` is): 100 K entries of 50 random bytes appended
//! 10 per batch without sync, read back 10 at a time, and with sync per
//! batch. `cargo run --release --example log_speed [DIR]` (DIR: a
//! directory on the disk to test; default a temporary one). `LOG_SPEED_REPS=5`
//! repeats the no-sync run (the machine may be busy: take the best).
#![allow(clippy::disallowed_methods, reason = "examples write their demo files directly")]

use std::time::Instant;

use mmapkit::log::{CommitLog, LogOptions, SyncMode};

fn main() -> mmapkit::Result<()> {
    let base = std::env::args().nth(1).map(std::path::PathBuf::from);
    let tmp = tempfile_dir(base.as_deref());
    let n = 100_000u64;
    let data: Vec<[u8; 50]> = (0..n).map(|i| [(i * 31 % 251) as u8; 50]).collect();
    let reps: usize =
        std::env::var("LOG_SPEED_REPS").ok().and_then(|s| s.parse().ok()).unwrap_or(1);
    let mut runs = vec![("no sync", SyncMode::Never, n); reps];
    runs.push(("sync per batch", SyncMode::Batch, 2_000));
    for (name, sync, count) in runs {
        let dir = tmp.join(name.replace(' ', "_"));
        let log = CommitLog::open(&dir, LogOptions::default().sync(sync))?;
        let t = Instant::now();
        for chunk in data[..count as usize].chunks(10) {
            let batch: Vec<(u64, &[u8])> = chunk.iter().map(|d| (1, d.as_slice())).collect();
            log.append(&batch)?;
        }
        let append = t.elapsed();
        let t = Instant::now();
        let mut bytes = 0;
        for lo in (1..=count).step_by(10) {
            for e in log.read(lo, (lo + 10).min(count + 1), None)?.iter() {
                bytes += e.data().len();
            }
        }
        let read = t.elapsed();
        assert_eq!(bytes as u64, count * 50);
        println!(
            "{name:>15}: {count} appends in {:.2} ms ({:.1} M entries/s, {} syncs), reads in {:.2} ms ({:.1} M entries/s)",
            append.as_secs_f64() * 1e3,
            count as f64 / append.as_secs_f64() / 1e6,
            log.sync_count(),
            read.as_secs_f64() * 1e3,
            count as f64 / read.as_secs_f64() / 1e6
        );
        drop(log);
        std::fs::remove_dir_all(&dir).ok();
    }
    std::fs::remove_dir_all(&tmp).ok();
    Ok(())
}

fn tempfile_dir(base: Option<&std::path::Path>) -> std::path::PathBuf {
    let base = base.map(|b| b.to_owned()).unwrap_or_else(std::env::temp_dir);
    let d = base.join(format!("mmapkit-log-speed-{}", std::process::id()));
    std::fs::create_dir_all(&d).expect("temp dir");
    d
}

//! Workloads the power-loss matrices run on a crash file system (one per
//! process). Each prints, on stdout, what it is about to do and what the
//! code under test acknowledged, flushing every line before going on:
//!
//! `log DIR SYNC SEGMENT_SIZE BATCHES BATCH_LEN THREADS EXTRA [FIRST_THREAD]`
//!   (`EXTRA`: `truncate`, `purge`, anything else: neither) prints `TRY t s n` before and
//!   `ACK t s first` after each append of batch `s` of thread `t`,
//!   `TRYTRUNC x` before and `TRUNC x` after truncate_after(x), `TRYPURGE x`
//!   before and `PURGE x` after purge_before(x), `END` when the appenders
//!   are done and `CLOSED` once the log is dropped.
//!   Entry `k` of batch (t, s) holds `payload::entry(t, s, k)`.
//! `writer PATH N WIDTH [nosync]`: a RecordWriter with sync (or without:
//!   a negative control); `FINISHED` after finish.
//! `array PATH APPENDS ROWS`: appends to an existing ArrayStore of u64 rows
//!   (row i holds i), flushing after each; `FLUSHED n` after each flush.
//! `array-create PATH`: ArrayStore::create over an existing store, then
//!   appends and flushes rows 0..3; `CREATED`, `FLUSHED 3`.
#![forbid(unsafe_code)]
#![allow(
    clippy::disallowed_methods,
    reason = "crashfs is dev-only: a FUSE test harness that writes its fixtures directly"
)]

use std::io::Write;
use std::sync::Arc;

use mmapkit::log::{CommitLog, LogOptions};
use mmapkit_crashfs::payload::{entry, record};

fn say(line: String) {
    let mut o = std::io::stdout().lock();
    let _ = writeln!(o, "{line}");
    let _ = o.flush();
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    let r = match a.first().map(String::as_str) {
        Some("log") => log(&a[1..]),
        Some("writer") => writer(&a[1..]),
        Some("array") => array(&a[1..]),
        Some("array-create") => array_create(&a[1..]),
        _ => Err("usage: crashfs-workload log|writer|array ...".into()),
    };
    if let Err(e) = r {
        eprintln!("workload: {e}");
        std::process::exit(2);
    }
}

type R = Result<(), Box<dyn std::error::Error>>;

fn log(a: &[String]) -> R {
    let dir = a[0].clone();
    let opts = LogOptions::default().sync(a[1].parse()?).segment_size(a[2].parse()?);
    let (batches, batch_len, threads): (u64, u64, u64) =
        (a[3].parse()?, a[4].parse()?, a[5].parse()?);
    let extra = a[6].clone();
    // Thread numbers start here (a second run on the same log uses new ones).
    let tbase: u64 = a.get(7).map_or(Ok(0), |v| v.parse())?;
    // Give an interval sync something to do during the run.
    let pause = matches!(opts.sync, mmapkit::log::SyncMode::Interval(_));
    let log = Arc::new(CommitLog::open(&dir, opts)?);
    let mut hs = Vec::new();
    for t in tbase..tbase + threads {
        let log = log.clone();
        let extra = extra.clone();
        hs.push(std::thread::spawn(move || -> Result<(), String> {
            for s in 0..batches {
                // Batch sizes 1..=batch_len, varying.
                let n = 1 + (s * 5 + t) % batch_len;
                let es: Vec<(u64, Vec<u8>)> = (0..n).map(|k| (1 + t, entry(t, s, k))).collect();
                say(format!("TRY {t} {s} {n}"));
                let first = log.append(&es).map_err(|e| e.to_string())?;
                say(format!("ACK {t} {s} {first}"));
                if pause {
                    std::thread::sleep(std::time::Duration::from_micros(300));
                }
                if t == tbase && s % 7 == 6 {
                    let last = first + n - 1;
                    match extra.as_str() {
                        "truncate" => {
                            let x = last.saturating_sub(3).max(log.first_index() - 1);
                            say(format!("TRYTRUNC {x}"));
                            log.truncate_after(x).map_err(|e| e.to_string())?;
                            say(format!("TRUNC {x}"));
                        }
                        "purge" => {
                            let x = last.saturating_sub(8).max(1);
                            say(format!("TRYPURGE {x}"));
                            log.purge_before(x).map_err(|e| e.to_string())?;
                            say(format!("PURGE {x}"));
                        }
                        _ => {}
                    }
                }
            }
            Ok(())
        }));
    }
    for h in hs {
        h.join().map_err(|_| "thread panicked")??;
    }
    say("END".into());
    drop(Arc::into_inner(log));
    say("CLOSED".into());
    Ok(())
}

fn writer(a: &[String]) -> R {
    let (path, n, width): (&str, u64, usize) = (&a[0], a[1].parse()?, a[2].parse()?);
    let opts = mmapkit::writer::WriterOptions::default()
        .sync(a.get(3).map(String::as_str) != Some("nosync"));
    let w = mmapkit::writer::RecordWriter::create(path, width, Some(n), &opts)?;
    for i in 0..n {
        w.write(i, &record(i, width))?;
    }
    w.finish()?;
    say("FINISHED".into());
    Ok(())
}

fn array(a: &[String]) -> R {
    let (path, appends, rows): (&str, u64, u64) = (&a[0], a[1].parse()?, a[2].parse()?);
    let mut st = mmapkit::store::ArrayStore::open(path, true, None)?;
    for _ in 0..appends {
        let at = st.len();
        let bytes: Vec<u8> = (at..at + rows).flat_map(|i| i.to_le_bytes()).collect();
        st.append(&bytes)?;
        st.flush()?;
        say(format!("FLUSHED {}", st.len()));
    }
    st.close()?;
    say("CLOSED".into());
    Ok(())
}

fn array_create(a: &[String]) -> R {
    let opts = mmapkit::store::StoreOptions::default();
    let mut st = mmapkit::store::ArrayStore::create(&a[0], "'<u8'", 8, &[], &opts)?;
    say("CREATED".into());
    let bytes: Vec<u8> = (0..3u64).flat_map(|i| i.to_le_bytes()).collect();
    st.append(&bytes)?;
    st.flush()?;
    say("FLUSHED 3".into());
    st.close()?;
    Ok(())
}

//! Benchmark `replication` (catch-up part): how fast a follower that is far
//! behind catches up, against the article's design (one entry per request)
//! and the loopback limit measured in the same run (the same bytes fetched
//! as one static HTTP body over the same stack).
//!
//! ```text
//! cargo run --release -p mmapkit-replicate --example catchup -- [--quick] [--out bench/results/replication-catchup.md]
//! ```
//!
//! Workloads: 1 M entries of 50 B and 100 K entries of 4 KiB (`--quick`:
//! 100 K and 20 K). The one-entry design is timed on the first 20 K (50 B)
//! / 5 K (4 KiB) entries (its rate is flat; the whole run would take
//! minutes). The follower appends with `sync=never` (the page cache), like
//! the loopback fetch that writes nothing: the comparison is the
//! transfer, not the disk.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit_replicate::{follow, serve, FollowOptions, ServeOptions};

struct Row {
    workload: String,
    contender: &'static str,
    entries: u64,
    bytes: u64,
    secs: f64,
}

fn build(dir: &std::path::Path, n: u64, size: usize) -> Arc<CommitLog> {
    let log = CommitLog::open(
        dir,
        LogOptions {
            sync: SyncMode::Never,
            ..Default::default()
        },
    )
    .unwrap();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    let mut i = 0;
    let mut payload = vec![0u8; size];
    while i < n {
        let k = (n - i).min(1000);
        let batch: Vec<(u64, Vec<u8>)> = (0..k)
            .map(|_| {
                for b in payload.iter_mut() {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    *b = x as u8;
                }
                (1, payload.clone())
            })
            .collect();
        log.append(&batch).unwrap();
        i += k;
    }
    Arc::new(log)
}

fn follower(page_count: u64) -> FollowOptions {
    FollowOptions {
        once: true,
        sync: SyncMode::Never,
        page_count,
        ..Default::default()
    }
}

/// Best of `runs` timings of a fresh follower.
fn time_follow(url: &str, opts: &FollowOptions, runs: usize, want: u64) -> f64 {
    let mut best = f64::MAX;
    for _ in 0..runs {
        let d = tempfile::tempdir().unwrap();
        let t = Instant::now();
        let r = follow(url, d.path(), opts.clone()).unwrap();
        let s = t.elapsed().as_secs_f64();
        assert_eq!(r.last_index, want);
        best = best.min(s);
    }
    best
}

/// The loopback limit: `len` bytes as one static body, fetched and dropped.
fn time_static(len: usize, runs: usize) -> f64 {
    let body = bytes::Bytes::from(vec![0x5au8; len]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async move {
        let b2 = body.clone();
        let app = axum::Router::new().route(
            "/blob",
            axum::routing::get(move || {
                let b = b2.clone();
                async move { b }
            }),
        );
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(l, app).await.unwrap() });
        let client = reqwest::Client::new();
        let mut best = f64::MAX;
        for _ in 0..runs {
            let t = Instant::now();
            let mut r = client
                .get(format!("http://{addr}/blob"))
                .send()
                .await
                .unwrap();
            let mut got = 0;
            while let Some(c) = r.chunk().await.unwrap() {
                got += c.len();
            }
            assert_eq!(got, len);
            best = best.min(t.elapsed().as_secs_f64());
        }
        best
    })
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let quick = args.iter().any(|a| a == "--quick");
    let out = args
        .iter()
        .position(|a| a == "--out")
        .and_then(|k| args.get(k + 1))
        .cloned();
    let workloads: &[(u64, usize, u64)] = if quick {
        &[(100_000, 50, 20_000), (20_000, 4096, 5_000)]
    } else {
        &[(1_000_000, 50, 20_000), (100_000, 4096, 5_000)]
    };
    let mut rows = Vec::new();
    for &(n, size, n_one) in workloads {
        let label = format!("{} x {} B", n, size);
        eprintln!("{label}: building the leader's log");
        let d = tempfile::tempdir().unwrap();
        let log = build(d.path(), n, size);
        let srv = serve(log.clone(), ServeOptions::default()).unwrap();
        let payload = n * size as u64;
        let framed = n * (size as u64 + mmapkit_replicate::wire::HEADER as u64);

        let s = time_follow(srv.url(), &follower(16384), 3, n);
        eprintln!("  mmapkit follower: {s:.3} s");
        rows.push(Row {
            workload: label.clone(),
            contender: "mmapkit follower (pages, pipelined)",
            entries: n,
            bytes: payload,
            secs: s,
        });

        // One entry per request, on a prefix of the log.
        let d1 = tempfile::tempdir().unwrap();
        let small = build(d1.path(), n_one, size);
        drop(small);
        let srv1 = mmapkit_replicate::serve_dir(d1.path(), ServeOptions::default()).unwrap();
        let s1 = time_follow(srv1.url(), &follower(1), 1, n_one);
        eprintln!("  one entry per request ({n_one} entries): {s1:.3} s");
        rows.push(Row {
            workload: label.clone(),
            contender: "one entry per request (article)",
            entries: n_one,
            bytes: n_one * size as u64,
            secs: s1,
        });

        let sl = time_static(framed as usize, 3);
        eprintln!("  loopback limit (one static body of {framed} B): {sl:.3} s");
        rows.push(Row {
            workload: label.clone(),
            contender: "loopback limit (one static body)",
            entries: n,
            bytes: payload,
            secs: sl,
        });
        drop(srv);
        drop(srv1);
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut md = String::new();
    md.push_str("# Benchmark `replication`: catch-up\n\n");
    md.push_str(&format!(
        "Generated by `cargo run --release -p mmapkit-replicate --example catchup --{}` on {} ({} CPUs). \
         A follower far behind catches up over HTTP on loopback (server and follower in one process, \
         follower appends with sync=never); best of 3 runs (one-entry design: 1 run over a prefix). \
         MB/s counts payload bytes; the loopback limit moves the same framed bytes as one static body.\n\n",
        if quick { " --quick" } else { "" },
        std::env::consts::OS,
        std::thread::available_parallelism().map_or(1, |n| n.get()),
    ));
    md.push_str("| workload | contender | entries timed | seconds | entries/s | MB/s |\n|---|---|---:|---:|---:|---:|\n");
    for r in &rows {
        md.push_str(&format!(
            "| {} | {} | {} | {:.3} | {:.0} | {:.1} |\n",
            r.workload,
            r.contender,
            r.entries,
            r.secs,
            r.entries as f64 / r.secs,
            r.bytes as f64 / r.secs / 1e6
        ));
    }
    md.push_str("\n## Goals\n\n");
    for w in rows.chunks(3) {
        let (m, one, lim) = (&w[0], &w[1], &w[2]);
        let vs_one = (m.entries as f64 / m.secs) / (one.entries as f64 / one.secs);
        let vs_lim = lim.secs / m.secs;
        md.push_str(&format!(
            "* {}: {:.0}x the one-entry design (goal >= 100x: {}), {:.2}x the loopback limit{}\n",
            m.workload,
            vs_one,
            if vs_one >= 100.0 { "met" } else { "missed" },
            vs_lim,
            if m.workload.ends_with("4096 B") {
                format!(
                    " (goal >= 0.7x: {})",
                    if vs_lim >= 0.7 { "met" } else { "missed" }
                )
            } else {
                String::new()
            }
        ));
    }
    print!("{md}");
    if let Some(p) = out {
        std::fs::write(&p, &md).unwrap();
        eprintln!("wrote {p}");
    }
}

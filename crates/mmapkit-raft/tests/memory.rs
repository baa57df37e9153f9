//! Issue 37, defect 6: a node's memory is bounded by its configuration,
//! not by its data. One `mmapkit-kv` node takes 200 MB of values while it
//! builds snapshots; its anonymous memory (heap: what a state machine held
//! in RAM grows) stays far below the data. The log and the state machine's
//! file pages are the kernel's page cache (the log is mapped, so its pages
//! show in `RssFile`): reclaimable, and not what grows a heap.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use mmapkit_raft::kv::Request;
use mmapkit_raft::node::KvClient;

/// `/proc/PID/status` fields in KiB.
fn status_kib(pid: u32, field: &str) -> u64 {
    let s = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = s.lines().find(|l| l.starts_with(field)).unwrap_or_else(|| panic!("no {field}"));
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

const VALUE: usize = 256 << 10;
const VALUES: usize = 800;
const WRITERS: usize = 4;
/// The bound on the node's anonymous memory: the 64 MiB page cache plus
/// the runtime, HTTP buffers of the writes in flight and openraft's
/// queues, well below the 200 MiB of data.
const BOUND_KIB: u64 = 160 << 10;

#[test]
fn a_node_holding_200_mb_stays_within_its_memory_bound() {
    let tmp = tempfile::tempdir().unwrap();
    let mut node = common::Proc {
        id: 1,
        addr: "127.0.0.1:0".into(),
        dir: tmp.path().join("n1"),
        // Snapshots (of up to all the data) are built while writes go on.
        args: ["--snapshot-every", "200", "--keep", "50"].map(String::from).to_vec(),
        child: None,
        nofile: None,
    };
    node.spawn(); // the binary sets its own allocator limits (bin/kv.rs)
    let pid = node.child.as_ref().unwrap().id();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = KvClient::new([node.addr.clone()]).unwrap();
    rt.block_on(client.init(&node.addr, &BTreeMap::from([(1, node.addr.clone())]))).unwrap();
    let peak_anon = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
    let started = Instant::now();
    let max_latency = rt.block_on(async {
        let sampler = {
            let peak = peak_anon.clone();
            tokio::spawn(async move {
                loop {
                    let anon = status_kib(pid, "RssAnon:");
                    peak.fetch_max(anon, std::sync::atomic::Ordering::Relaxed);
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
        };
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let client = client.clone();
                tokio::spawn(async move {
                    let mut worst = Duration::ZERO;
                    for i in (w..VALUES).step_by(WRITERS) {
                        let value = format!("{i:06}{}", "x".repeat(VALUE - 6));
                        let req = Request::Set { key: format!("k{i:06}"), value };
                        let t = Instant::now();
                        client.write(&req, Duration::from_secs(60)).await.expect("write");
                        worst = worst.max(t.elapsed());
                    }
                    worst
                })
            })
            .collect();
        let mut worst = Duration::ZERO;
        for w in writers {
            worst = worst.max(w.await.unwrap());
        }
        sampler.abort();
        worst
    });
    let data_mib = (VALUE * VALUES) >> 20;
    let anon = status_kib(pid, "RssAnon:");
    let hwm = status_kib(pid, "VmHWM:");
    let peak = peak_anon.load(std::sync::atomic::Ordering::Relaxed).max(anon);
    eprintln!(
        "{data_mib} MiB written in {:.1} s: node RssAnon {} MiB now, {} MiB at most (sampled), \
         VmHWM {} MiB (with the mapped log), slowest write {} ms",
        started.elapsed().as_secs_f64(),
        anon >> 10,
        peak >> 10,
        hwm >> 10,
        max_latency.as_millis()
    );
    // Every value is there (a read through the state machine's tables).
    let (key, want) = (format!("k{:06}", VALUES - 1), format!("{:06}", VALUES - 1));
    let got = rt.block_on(client.get(&key, Duration::from_secs(30))).unwrap().unwrap();
    assert!(got.starts_with(&want) && got.len() == VALUE);
    assert!(
        peak < BOUND_KIB,
        "the node's anonymous memory reached {} MiB for {data_mib} MiB of data (bound {} MiB)",
        peak >> 10,
        BOUND_KIB >> 10
    );
}

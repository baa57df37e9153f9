//! `mmapkit-kv`: a replicated key-value service on openraft with mmapkit's
//! log as its storage; also its cluster set-up and a load generator.

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use mmapkit_raft::kv::Request;
use mmapkit_raft::node::{KvClient, Node, NodeOptions, StoreKind};

#[derive(Parser)]
#[command(name = "mmapkit-kv", version, about = "A replicated key-value service on openraft and mmapkit's commit log",
    after_help = "Example (three nodes on loopback, then 1000 writes from 16 clients):\n  \
    mmapkit-kv serve --id 1 --dir n1 --bind 127.0.0.1:7001 &\n  \
    mmapkit-kv serve --id 2 --dir n2 --bind 127.0.0.1:7002 &\n  \
    mmapkit-kv serve --id 3 --dir n3 --bind 127.0.0.1:7003 &\n  \
    mmapkit-kv init --nodes 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003\n  \
    mmapkit-kv load --nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 --clients 16 --writes 1000")]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Runs one node until SIGINT/SIGTERM.
    Serve {
        #[arg(long)]
        id: u64,
        /// Directory of this node's log, vote and snapshots.
        #[arg(long)]
        dir: PathBuf,
        /// Address to serve on (port 0: any free port; the line printed says which).
        #[arg(long, default_value = "127.0.0.1:0")]
        bind: SocketAddr,
        /// Log store: mmapkit, memory (no durability) or rocksdb (needs the `rocksdb` feature).
        #[arg(long, default_value = "mmapkit")]
        store: StoreKind,
        /// Build a snapshot every N applied entries.
        #[arg(long, default_value_t = 10_000)]
        snapshot_every: u64,
        /// Entries kept in the log behind a snapshot.
        #[arg(long, default_value_t = 1_000)]
        keep: u64,
    },
    /// Initializes a cluster of the given nodes (`ID=HOST:PORT,...`).
    Init {
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
    },
    /// Writes from concurrent clients and prints writes/s and latency percentiles.
    Load {
        /// Node addresses (`HOST:PORT,...`).
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        #[arg(long, default_value_t = 1)]
        clients: usize,
        /// Writes in all.
        #[arg(long, default_value_t = 1000)]
        writes: usize,
        /// Bytes per value.
        #[arg(long, default_value_t = 100)]
        value_size: usize,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
}

fn main() {
    let cli = Cli::parse();
    let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
    let r = rt.block_on(run(cli.cmd));
    if let Err(e) = r {
        eprintln!("mmapkit-kv: {e}");
        std::process::exit(2);
    }
}

async fn run(cmd: Cmd) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    match cmd {
        Cmd::Serve { id, dir, bind, store, snapshot_every, keep } => {
            let node = Node::start(NodeOptions {
                id,
                dir: dir.clone(),
                bind,
                store,
                snapshot_every,
                keep_behind_snapshot: keep,
            })
            .await
            .map_err(|e| format!("{}: {e}", dir.display()))?;
            println!("mmapkit-kv: node {id} listening on {}", node.addr);
            std::io::stdout().flush()?;
            let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            node.stop().await;
            Ok(())
        }
        Cmd::Init { nodes } => {
            let mut members = BTreeMap::new();
            for n in &nodes {
                let (id, addr) = n.split_once('=').ok_or_else(|| format!("{n:?}: expected ID=HOST:PORT"))?;
                members.insert(id.parse::<u64>().map_err(|e| format!("{id:?}: {e}"))?, addr.to_owned());
            }
            let first = members.values().next().ok_or("no nodes given")?.clone();
            KvClient::new(members.values().cloned()).init(&first, &members).await?;
            Ok(())
        }
        Cmd::Load { nodes, clients, writes, value_size, json } => {
            let report = load(KvClient::new(nodes), clients.max(1), writes, value_size).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!(
                    "{} writes from {} clients in {:.3} s: {:.0} writes/s, p50 {:.3} ms, p99 {:.3} ms",
                    report.writes, report.clients, report.seconds, report.writes_per_s, report.p50_ms, report.p99_ms
                );
            }
            Ok(())
        }
    }
}

#[derive(serde::Serialize)]
struct LoadReport {
    clients: usize,
    writes: usize,
    seconds: f64,
    writes_per_s: f64,
    p50_ms: f64,
    p99_ms: f64,
}

/// `writes` writes shared by `clients` concurrent clients, each waiting
/// for its write to be committed before sending the next.
async fn load(client: KvClient, clients: usize, writes: usize, value_size: usize) -> Result<LoadReport, String> {
    let value = "v".repeat(value_size);
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (client, next, value) = (client.clone(), next.clone(), value.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                if i >= writes {
                    return Ok::<_, String>(lat);
                }
                let req = Request::Set { key: format!("k{c}-{i}"), value: value.clone() };
                let t = Instant::now();
                client.write(&req, Duration::from_secs(30)).await.map_err(|e| e.to_string())?;
                lat.push(t.elapsed().as_secs_f64());
            }
        }));
    }
    let mut lat = Vec::with_capacity(writes);
    for t in tasks {
        lat.extend(t.await.map_err(|e| e.to_string())??);
    }
    let seconds = t0.elapsed().as_secs_f64();
    lat.sort_by(|a, b| a.total_cmp(b));
    let pct = |p: f64| lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0) * 1e3;
    Ok(LoadReport {
        clients,
        writes: lat.len(),
        seconds,
        writes_per_s: lat.len() as f64 / seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
    })
}

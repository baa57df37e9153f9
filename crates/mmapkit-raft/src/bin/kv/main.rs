//! `mmapkit-kv`: a replicated key-value service on openraft with mmapkit's
//! log as its storage; also its cluster set-up and a load generator.
#![forbid(unsafe_code)]

use std::collections::BTreeMap;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::{Args, Parser, Subcommand};
use mmapkit_raft::kv::Request;
use mmapkit_raft::node::{KvClient, Node, NodeOptions, StoreKind, DEFAULT_MAX_VALUE_BYTES};

// Each subcommand with more than a few lines has a file of its own.
mod load;
mod member;
mod restore;
mod watch;

use load::load;
use member::member;
use restore::restore;
use watch::watch;

const TOKEN_ENV: &str = "MMAPKIT_KV_TOKEN";

#[derive(Parser)]
#[command(
    name = "mmapkit-kv",
    version,
    about = "A replicated key-value service on openraft and mmapkit's commit log",
    after_help = "Example (three nodes on loopback, then 1000 writes from 16 clients):\n  \
    mmapkit-kv serve --id 1 --dir n1 --bind 127.0.0.1:7001 &\n  \
    mmapkit-kv serve --id 2 --dir n2 --bind 127.0.0.1:7002 &\n  \
    mmapkit-kv serve --id 3 --dir n3 --bind 127.0.0.1:7003 &\n  \
    mmapkit-kv init --nodes 1=127.0.0.1:7001,2=127.0.0.1:7002,3=127.0.0.1:7003\n  \
    mmapkit-kv load --nodes 127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003 --clients 16 --writes 1000\n  \
    mmapkit-kv put --nodes 127.0.0.1:7001 greeting hello\n  \
    mmapkit-kv get --nodes 127.0.0.1:7002 greeting\n\n\
    Off loopback every node needs a bearer token (--token or $MMAPKIT_KV_TOKEN), which peers and \
    clients send; `init`, `load`, `get`, `put` and `cas` take the same flag and variable."
)]
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
        /// A second address for the other nodes (raft, forwarded requests), like etcd's peer
        /// port; recorded when the node is added. Default: peers use --bind.
        #[arg(long)]
        peer_bind: Option<SocketAddr>,
        /// Log store: mmapkit, memory (no durability) or rocksdb (needs the `rocksdb` feature).
        #[arg(long, default_value = "mmapkit")]
        store: StoreKind,
        /// Build a snapshot every N applied entries.
        #[arg(long, default_value_t = 10_000)]
        snapshot_every: u64,
        /// Entries kept in the log behind a snapshot.
        #[arg(long, default_value_t = 1_000)]
        keep: u64,
        /// Bearer token every request must carry (default: $MMAPKIT_KV_TOKEN); required off loopback.
        #[arg(long)]
        token: Option<String>,
        /// Largest value a client may write, in bytes (larger writes get HTTP 413).
        #[arg(long, default_value_t = DEFAULT_MAX_VALUE_BYTES)]
        max_value_bytes: usize,
        /// Connections open at once; keep it below the fd limit. With a token, the oldest
        /// connection that has not sent it is closed to make room for one that may.
        #[arg(long, default_value_t = 512)]
        max_connections: usize,
        /// Seconds a request head may take.
        #[arg(long, default_value_t = 10)]
        header_timeout: u64,
        /// Seconds a connection may stay open with nothing in flight.
        #[arg(long, default_value_t = 60)]
        idle_timeout: u64,
        /// Seconds a request body may go without a byte (then HTTP 408).
        #[arg(long, default_value_t = 10)]
        body_timeout: u64,
    },
    /// Initializes a cluster of the given nodes (`ID=HOST:PORT,...`; the
    /// addresses peers use, e.g. proxies in front of the nodes).
    Init {
        #[arg(long, value_delimiter = ',')]
        nodes: Vec<String>,
        /// Bearer token (default: $MMAPKIT_KV_TOKEN).
        #[arg(long)]
        token: Option<String>,
    },
    /// Reads a key (linearizable; prints the value, exits 1 when absent).
    #[command(after_help = "Examples:\n  \
        mmapkit-kv get --nodes 127.0.0.1:7001,127.0.0.1:7002 greeting\n  \
        mmapkit-kv get --nodes 127.0.0.1:7002 --stale greeting   # this node's copy, unchecked")]
    Get {
        /// Node addresses (`HOST:PORT,...`); any node answers (followers ask the leader).
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<String>,
        /// Bearer token (default: $MMAPKIT_KV_TOKEN).
        #[arg(long)]
        token: Option<String>,
        /// Read the first node's applied state without checking it is current.
        #[arg(long)]
        stale: bool,
        key: String,
    },
    /// Sets a key (prints the previous value, if any).
    #[command(
        after_help = "Example:\n  mmapkit-kv put --nodes 127.0.0.1:7001,127.0.0.1:7002 greeting hello"
    )]
    Put {
        /// Node addresses (`HOST:PORT,...`).
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<String>,
        /// Bearer token (default: $MMAPKIT_KV_TOKEN).
        #[arg(long)]
        token: Option<String>,
        key: String,
        value: String,
    },
    /// Compare-and-set: sets KEY to --value only if it currently holds
    /// --expected (exits 0 when it did, 1 when the value differed).
    #[command(after_help = "Examples:\n  \
        mmapkit-kv cas --nodes 127.0.0.1:7001 greeting --expected hello --value bye   # hello -> bye\n  \
        mmapkit-kv cas --nodes 127.0.0.1:7001 lock --value me                          # only if absent\n  \
        mmapkit-kv cas --nodes 127.0.0.1:7001 lock --expected me                       # delete if still mine")]
    Cas {
        /// Node addresses (`HOST:PORT,...`).
        #[arg(long, value_delimiter = ',', required = true)]
        nodes: Vec<String>,
        /// Bearer token (default: $MMAPKIT_KV_TOKEN).
        #[arg(long)]
        token: Option<String>,
        key: String,
        /// The value KEY must hold (omitted: KEY must be absent).
        #[arg(long)]
        expected: Option<String>,
        /// The new value (omitted: delete KEY).
        #[arg(long)]
        value: Option<String>,
    },
    /// Lists the keys with a prefix (or in a range), linearizable, one `KEY=VALUE` per line
    /// (--json: one object per key with its mod_revision).
    #[command(after_help = "Examples:\n  \
        mmapkit-kv range --nodes 127.0.0.1:7001 --prefix users/\n  \
        mmapkit-kv range --nodes 127.0.0.1:7001 --start a --end m --json")]
    Range {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        keys: KeyRange,
        /// Print one JSON object per key.
        #[arg(long)]
        json: bool,
    },
    /// Deletes every key with a prefix (or in a range); prints how many.
    #[command(
        after_help = "Example:\n  mmapkit-kv delete-range --nodes 127.0.0.1:7001 --prefix tmp/"
    )]
    DeleteRange {
        #[command(flatten)]
        conn: Conn,
        #[command(flatten)]
        keys: KeyRange,
    },
    /// Prints each change to keys with a prefix (or in a range) as a JSON line, from a revision,
    /// until interrupted (or --count changes); resumes across nodes and disconnects.
    #[command(after_help = "Example (changes from revision 1, the first 10):\n  \
        mmapkit-kv watch --nodes 127.0.0.1:7001,127.0.0.1:7002 --prefix users/ --from 1 --count 10")]
    Watch {
        #[command(flatten)]
        conn: Conn,
        /// Watch the keys starting with this.
        #[arg(long)]
        prefix: String,
        /// The first revision of interest (default: the next one).
        #[arg(long)]
        from: Option<u64>,
        /// Stop after this many changes.
        #[arg(long)]
        count: Option<usize>,
    },
    /// Writes every key (one consistent, linearizable cut) to FILE as lines of JSON, durably.
    #[command(
        after_help = "Example:\n  mmapkit-kv backup --nodes 127.0.0.1:7001 kv-backup.ndjson"
    )]
    Backup {
        #[command(flatten)]
        conn: Conn,
        file: PathBuf,
    },
    /// Writes every key of a backup into an empty cluster (revisions are the new cluster's).
    #[command(
        after_help = "Example:\n  mmapkit-kv restore --nodes 127.0.0.1:7009 kv-backup.ndjson"
    )]
    Restore {
        #[command(flatten)]
        conn: Conn,
        file: PathBuf,
    },
    /// Lists, adds, promotes and removes members (through any node; changes go to the leader).
    #[command(
        after_help = "Examples (grow to 4 nodes: start node 4 on an empty directory, then):\n  \
        mmapkit-kv serve --id 4 --dir n4 --bind 127.0.0.1:7004 &\n  \
        mmapkit-kv member add --nodes 127.0.0.1:7001 4 127.0.0.1:7004      # a learner first\n  \
        mmapkit-kv member promote --nodes 127.0.0.1:7001 4                 # a voter once caught up\n  \
        mmapkit-kv member list --nodes 127.0.0.1:7001\n  \
        mmapkit-kv member remove --nodes 127.0.0.1:7001 2                  # shrink, or drop a lost disk\n\n\
        A node whose data directory was lost is a new member: remove the old one, start the node on an \
        empty directory, add and promote it (see docs/guide/kv-operators.md)."
    )]
    Member {
        #[command(subcommand)]
        cmd: MemberCmd,
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
        /// Bearer token (default: $MMAPKIT_KV_TOKEN).
        #[arg(long)]
        token: Option<String>,
    },
}

/// Where an admin command connects.
#[derive(Args)]
struct Conn {
    /// Node addresses (`HOST:PORT,...`); any node answers.
    #[arg(long, value_delimiter = ',', required = true)]
    nodes: Vec<String>,
    /// Bearer token (default: $MMAPKIT_KV_TOKEN).
    #[arg(long)]
    token: Option<String>,
}

/// Which keys: a prefix, or `[start, end)`.
#[derive(Args)]
struct KeyRange {
    /// The keys starting with this.
    #[arg(long, conflicts_with_all = ["start", "end"], required_unless_present = "start")]
    prefix: Option<String>,
    /// The first key (inclusive).
    #[arg(long)]
    start: Option<String>,
    /// The end of the range (exclusive; default: no end).
    #[arg(long, requires = "start")]
    end: Option<String>,
}

impl KeyRange {
    fn bounds(self) -> (String, Option<String>) {
        match self.prefix {
            Some(p) => {
                let end = mmapkit_raft::query::prefix_end(&p);
                (p, end)
            }
            None => (self.start.unwrap_or_default(), self.end),
        }
    }
}

#[derive(Subcommand)]
enum MemberCmd {
    /// Lists the members: id, address, voter or learner, entries each holds (the leader's view).
    List {
        #[command(flatten)]
        conn: Conn,
        /// Print one JSON object.
        #[arg(long)]
        json: bool,
    },
    /// Adds node ID, serving at ADDR on an empty directory, as a learner.
    Add {
        #[command(flatten)]
        conn: Conn,
        id: u64,
        /// The address peers and clients reach it at.
        addr: String,
    },
    /// Makes learner ID a voter once it has caught up (waits up to 30 s).
    Promote {
        #[command(flatten)]
        conn: Conn,
        id: u64,
    },
    /// Removes member ID (voter or learner).
    Remove {
        #[command(flatten)]
        conn: Conn,
        id: u64,
    },
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Exit status after a fatal error inside the node (a panic anywhere, or
/// the raft core stopping on a storage failure): 70, `EX_SOFTWARE`.
const FATAL_EXIT: i32 = 70;

fn main() {
    // Freed value buffers go back to the system (see the function's docs).
    mmapkit::map::bound_malloc_retention();
    let cli = Cli::parse();
    // A panic on any thread (openraft's core runs on a task of its own) is
    // fatal: the process ends with the message instead of serving on with
    // a dead raft core.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        eprintln!("mmapkit-kv: a panic is fatal (fail-stop); exiting");
        std::process::exit(FATAL_EXIT);
    }));
    let r = match tokio::runtime::Runtime::new() {
        Ok(rt) => rt.block_on(run(cli.cmd)),
        Err(e) => Err(format!("tokio runtime: {e}").into()),
    };
    match r {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("mmapkit-kv: {e}");
            std::process::exit(2);
        }
    }
}

/// `--token`, else the environment.
fn token(flag: Option<String>) -> Option<String> {
    flag.or_else(|| std::env::var(TOKEN_ENV).ok().filter(|t| !t.is_empty()))
}

fn client(nodes: Vec<String>, tok: Option<String>) -> Result<KvClient, BoxError> {
    let c = KvClient::new(nodes).map_err(|e| format!("{e}: give --nodes HOST:PORT,..."))?;
    Ok(c.with_token(token(tok).as_deref())?)
}

/// Runs a command; the exit status on success (1: `get` found nothing,
/// `cas` did not match).
async fn run(cmd: Cmd) -> Result<i32, BoxError> {
    let patience = Duration::from_secs(30);
    match cmd {
        Cmd::Serve {
            id,
            dir,
            bind,
            peer_bind,
            store,
            snapshot_every,
            keep,
            token: tok,
            max_value_bytes,
            max_connections,
            header_timeout,
            idle_timeout,
            body_timeout,
        } => {
            let node = Node::start(
                NodeOptions::new(id, dir.clone())
                    .bind(bind)
                    .peer_bind(peer_bind)
                    .store(store)
                    .snapshot_every(snapshot_every)
                    .keep_behind_snapshot(keep)
                    .token(token(tok))
                    .max_value_bytes(max_value_bytes)
                    .max_connections(max_connections)
                    .header_timeout(Duration::from_secs(header_timeout))
                    .idle_timeout(Duration::from_secs(idle_timeout))
                    .body_timeout(Duration::from_secs(body_timeout)),
            )
            .await
            .map_err(|e| format!("{}: {e}", dir.display()))?;
            // One line, the address last (scripts read it); a closed
            // stdout (the reader went away) must not stop the node.
            let peers = node.peer_addr.map_or(String::new(), |p| format!(" (peers on {p})"));
            let mut out = std::io::stdout();
            let _ = writeln!(out, "mmapkit-kv: node {id}{peers} listening on {}", node.addr);
            let _ = out.flush();
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
                why = node.fatal() => {
                    // Fail-stop: never a zombie that still answers reads.
                    eprintln!("mmapkit-kv: node {id}: {why}; exiting");
                    std::process::exit(FATAL_EXIT);
                }
            }
            node.stop().await;
            Ok(0)
        }
        Cmd::Init { nodes, token: tok } => {
            let mut members = BTreeMap::new();
            for n in &nodes {
                let (id, addr) =
                    n.split_once('=').ok_or_else(|| format!("{n:?}: expected ID=HOST:PORT"))?;
                members.insert(
                    id.parse::<u64>().map_err(|e| format!("{id:?}: {e}"))?,
                    addr.to_owned(),
                );
            }
            let first = members
                .values()
                .next()
                .ok_or("no nodes given: give --nodes ID=HOST:PORT,...")?
                .clone();
            client(members.values().cloned().collect(), tok)?.init(&first, &members).await?;
            Ok(0)
        }
        Cmd::Get { nodes, token: tok, stale, key } => {
            let c = client(nodes.clone(), tok)?;
            let v = if stale {
                c.get_stale(&nodes[0], &key).await?
            } else {
                c.get(&key, patience).await?
            };
            match v {
                Some(v) => {
                    println!("{v}");
                    Ok(0)
                }
                None => {
                    eprintln!("mmapkit-kv: {key:?}: absent");
                    Ok(1)
                }
            }
        }
        Cmd::Put { nodes, token: tok, key, value } => {
            let (id, r) = client(nodes, tok)?.write(&Request::Set { key, value }, patience).await?;
            match r.previous {
                Some(p) => println!("ok (log index {}), previous value: {p}", id.index),
                None => println!("ok (log index {}), no previous value", id.index),
            }
            Ok(0)
        }
        Cmd::Cas { nodes, token: tok, key, expected, value } => {
            let req = Request::Cas { key: key.clone(), expected, value };
            let (id, r) = client(nodes, tok)?.write(&req, patience).await?;
            let now =
                |v: &Option<String>| v.as_deref().map_or("absent".to_owned(), |v| format!("{v:?}"));
            if r.ok {
                println!("ok (log index {}), was {}", id.index, now(&r.previous));
                Ok(0)
            } else {
                println!("not set: {key:?} is {}", now(&r.previous));
                Ok(1)
            }
        }
        Cmd::Member { cmd } => member(cmd, patience).await,
        Cmd::Backup { conn, file } => {
            let c = client(conn.nodes, conn.token)?;
            // Written as it arrives into a temp file beside FILE, renamed
            // over it only once the end line checked: a failed backup
            // leaves no FILE (or the old one), never a truncated one.
            let mut f = mmapkit::fs::AtomicFile::create(&file, &[])?;
            let s = {
                let mut w = std::io::BufWriter::with_capacity(1 << 20, f.file_mut());
                let s = c.backup_to(&mut w, patience).await?;
                w.flush().map_err(|e| format!("{}: {e}", file.display()))?;
                s
            };
            f.commit(true)?;
            println!("backed up {} keys at revision {}", s.count, s.revision);
            Ok(0)
        }
        Cmd::Restore { conn, file } => restore(conn, &file, patience).await,
        Cmd::Range { conn, keys, json } => {
            let c = client(conn.nodes, conn.token)?;
            let (mut start, end) = keys.bounds();
            let mut out = std::io::stdout().lock();
            loop {
                let page = c.range(&start, end.as_deref(), 1000, patience).await?;
                for kv in &page.kvs {
                    if json {
                        writeln!(out, "{}", serde_json::to_string(kv)?)?;
                    } else {
                        writeln!(out, "{}={}", kv.key, kv.value)?;
                    }
                }
                match page.next {
                    Some(n) => start = n,
                    None => return Ok(0),
                }
            }
        }
        Cmd::DeleteRange { conn, keys } => {
            let (start, end) = keys.bounds();
            let req = Request::DeleteRange { start, end };
            let (id, r) = client(conn.nodes, conn.token)?.write(&req, patience).await?;
            println!("deleted {} keys (revision {})", r.deleted, id.index);
            Ok(0)
        }
        Cmd::Watch { conn, prefix, from, count } => {
            watch(conn, prefix, from, count, patience).await
        }
        Cmd::Load { nodes, clients, writes, value_size, json, token: tok } => {
            let report = load(client(nodes, tok)?, clients.max(1), writes, value_size).await?;
            if json {
                println!("{}", serde_json::to_string(&report)?);
            } else {
                println!(
                    "{} writes from {} clients in {:.3} s: {:.0} writes/s, p50 {:.3} ms, p99 {:.3} ms, max {:.3} ms",
                    report.writes, report.clients, report.seconds, report.writes_per_s, report.p50_ms, report.p99_ms, report.max_ms
                );
            }
            Ok(0)
        }
    }
}

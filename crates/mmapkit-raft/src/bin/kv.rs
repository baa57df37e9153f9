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

/// Sets every key of the backup in `file`, 16 at a time, into a cluster
/// that holds none. The file is read line by line twice: once to check it
/// whole (a backup cut short is refused before anything is written), then
/// to write its keys. A backup in the older format (one JSON object,
/// `{"kvs":[...]}`, which older servers answered whole) is still read, whole.
async fn restore(conn: Conn, file: &std::path::Path, patience: Duration) -> Result<i32, BoxError> {
    let path = file.to_owned();
    let legacy = tokio::task::spawn_blocking(move || read_legacy(&path)).await??;
    let (n, revision) = match &legacy {
        Some(b) => (b.kvs.len() as u64, b.revision),
        None => {
            let path = file.to_owned();
            let s = tokio::task::spawn_blocking(move || each_line(&path, |_| true)).await??;
            (s.count, s.revision)
        }
    };
    let c = client(conn.nodes, conn.token)?;
    if !c.range("", None, 1, patience).await?.kvs.is_empty() {
        return Err("the cluster holds keys: restore into an empty one".into());
    }
    // Keys flow from a reading thread through a small channel to 16 writers.
    let (tx, rx) = tokio::sync::mpsc::channel::<mmapkit_raft::kv::KeyValue>(256);
    let path = file.to_owned();
    let reader = tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
        match legacy {
            Some(b) => {
                for kv in b.kvs {
                    if tx.blocking_send(kv).is_err() {
                        break;
                    }
                }
            }
            None => drop(each_line(&path, |kv| tx.blocking_send(kv).is_ok())?),
        }
        Ok(())
    });
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (c, rx) = (c.clone(), rx.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(kv) = rx.lock().await.recv().await else {
                    return Ok::<_, String>(());
                };
                let req = Request::Set { key: kv.key, value: kv.value };
                c.write(&req, patience).await.map_err(|e| e.to_string())?;
            }
        }));
    }
    let mut failed = None;
    for t in tasks {
        if let Err(e) = t.await.map_err(|e| e.to_string()).and_then(|r| r) {
            // The others stop once the channel closes.
            rx.lock().await.close();
            failed.get_or_insert(e);
        }
    }
    // A writer's error first: the reader stopped early because of it.
    let read = reader.await;
    if let Some(e) = failed {
        return Err(e.into());
    }
    read??;
    println!("restored {n} keys (from revision {revision})");
    Ok(0)
}

/// The backup in `file` if it is in the older whole-JSON format (which
/// always starts `{"kvs":`; read whole, through a mapping); `None` for
/// anything else, read as the line format.
fn read_legacy(
    file: &std::path::Path,
) -> Result<Option<mmapkit_raft::query::RangeAnswer>, BoxError> {
    const LEGACY: &[u8] = br#"{"kvs":"#;
    let f = mmapkit::fs::open_in_place(file, mmapkit::fs::InPlace::Read)?;
    let mut head = Vec::with_capacity(LEGACY.len());
    std::io::Read::read_to_end(&mut std::io::Read::take(f, LEGACY.len() as u64), &mut head)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if head != LEGACY {
        return Ok(None);
    }
    let map = mmapkit::map::Map::open(file, mmapkit::map::Mode::Read)?;
    let b = map
        .read_with(|bytes| serde_json::from_slice(bytes))?
        .map_err(|e| format!("{}: not a backup: {e}", file.display()))?;
    Ok(Some(b))
}

/// Reads the line-format backup in `file`, one line at a time, handing
/// each key to `each` (which returns `false` to stop early); the summary
/// once the end line was read, else the error of a file cut short or
/// damaged (naming the file).
fn each_line(
    file: &std::path::Path,
    mut each: impl FnMut(mmapkit_raft::kv::KeyValue) -> bool,
) -> Result<mmapkit_raft::backup::Summary, BoxError> {
    use mmapkit_raft::backup::{BackupReader, LINE_MAX};
    use std::io::{BufRead, Read};
    let bad = |e: String| format!("{}: not a complete backup: {e}", file.display());
    let f = mmapkit::fs::open_in_place(file, mmapkit::fs::InPlace::Read)?;
    let mut r = std::io::BufReader::with_capacity(1 << 20, f);
    let (mut reader, mut line) = (BackupReader::new(), Vec::new());
    loop {
        line.clear();
        let got = (&mut r).take(LINE_MAX as u64 + 1).read_until(b'\n', &mut line);
        if got.map_err(|e| format!("{}: {e}", file.display()))? == 0 {
            break;
        }
        if line.pop() != Some(b'\n') {
            let why = if line.len() >= LINE_MAX {
                "a line is too long"
            } else {
                "cut short inside a line"
            };
            return Err(bad(why.into()).into());
        }
        if let Some(kv) = reader.line(&line).map_err(bad)? {
            if !each(kv) {
                break;
            }
        }
    }
    Ok(reader.finish().map_err(bad)?)
}

/// Long-polls the nodes in turn (the next after an error), printing each
/// change once.
async fn watch(
    conn: Conn,
    prefix: String,
    from: Option<u64>,
    count: Option<usize>,
    patience: Duration,
) -> Result<i32, BoxError> {
    let nodes = conn.nodes.clone();
    let c = client(conn.nodes, conn.token)?;
    let mut from = match from {
        Some(f) => f,
        None => c.range(&prefix, None, 1, patience).await?.revision + 1,
    };
    let (mut printed, mut k, mut failures) = (0usize, 0usize, 0u32);
    let mut out = std::io::stdout().lock();
    while count.is_none_or(|n| printed < n) {
        match c.watch(&nodes[k % nodes.len()], &prefix, from, Duration::from_secs(30)).await {
            Ok(Ok(a)) => {
                failures = 0;
                for e in a.events.iter().take(count.map_or(usize::MAX, |n| n - printed)) {
                    writeln!(out, "{}", serde_json::to_string(e)?)?;
                    printed += 1;
                }
                out.flush()?;
                from = a.next;
            }
            Ok(Err(gone)) => {
                return Err(format!(
                    "revision {from} is compacted away (the oldest held is {}): read the range again and watch from its revision + 1",
                    gone.oldest
                )
                .into())
            }
            Err(e) => {
                failures += 1;
                if failures as usize > 3 * nodes.len() {
                    return Err(e.into());
                }
                k += 1;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
    Ok(0)
}

async fn member(cmd: MemberCmd, patience: Duration) -> Result<i32, BoxError> {
    match cmd {
        MemberCmd::List { conn, json } => {
            let l = client(conn.nodes, conn.token)?.members(patience).await?;
            if json {
                println!("{}", serde_json::to_string(&l)?);
                return Ok(0);
            }
            let shown = |v: Option<u64>| v.map_or("-".to_owned(), |v| v.to_string());
            println!(
                "cluster {}, leader {}, last log index {} (as node {} sees it)",
                l.cluster.as_deref().unwrap_or("(none)"),
                shown(l.leader),
                shown(l.last_log_index),
                l.answered_by
            );
            println!("{:>6}  {:<22}  {:<7}  {:>10}  incarnation", "id", "addr", "role", "holds");
            for m in &l.members {
                let role = if m.voter { "voter" } else { "learner" };
                println!(
                    "{:>6}  {:<22}  {role:<7}  {:>10}  {:016x}",
                    m.id,
                    m.addr,
                    shown(m.matched),
                    m.incarnation
                );
            }
            Ok(0)
        }
        MemberCmd::Add { conn, id, addr } => {
            client(conn.nodes, conn.token)?.member_add(id, &addr, patience).await?;
            println!(
                "added node {id} ({addr}) as a learner; promote it: mmapkit-kv member promote {id}"
            );
            Ok(0)
        }
        MemberCmd::Promote { conn, id } => {
            client(conn.nodes, conn.token)?.member_promote(id, patience).await?;
            println!("node {id} is a voter");
            Ok(0)
        }
        MemberCmd::Remove { conn, id } => {
            client(conn.nodes, conn.token)?.member_remove(id, patience).await?;
            println!("removed node {id}");
            Ok(0)
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
    /// The slowest write: what a stall (a snapshot, a sync) cost a client.
    max_ms: f64,
}

/// `writes` writes shared by `clients` concurrent clients, each waiting
/// for its write to be committed before sending the next.
async fn load(
    client: KvClient,
    clients: usize,
    writes: usize,
    value_size: usize,
) -> Result<LoadReport, String> {
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
    let pct = |p: f64| {
        lat.get(((lat.len() as f64 - 1.0) * p).round() as usize).copied().unwrap_or(0.0) * 1e3
    };
    Ok(LoadReport {
        clients,
        writes: lat.len(),
        seconds,
        writes_per_s: lat.len() as f64 / seconds,
        p50_ms: pct(0.50),
        p99_ms: pct(0.99),
        max_ms: pct(1.0),
    })
}

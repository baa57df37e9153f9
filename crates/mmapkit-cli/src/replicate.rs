//! `mmapkit log serve DIR` and `mmapkit log follow URL DIR`: thin fronts
//! over `mmapkit_replicate`.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use clap::Args;
use mmapkit::log::SyncMode;
use mmapkit_replicate::{FollowOptions, Follower, ServeOptions};

use crate::common::EXIT_OK;

pub const SERVE_HELP: &str = "\
Examples:
  mmapkit log serve wal                          loopback, a free port
  mmapkit log serve wal --bind 127.0.0.1:7070
  mmapkit log serve wal --bind 0.0.0.0:7070 --token \"$TOKEN\"

Prints the URL it listens on (one line, on stdout) and serves until SIGINT
or SIGTERM, then exits 0. The log is opened read-only: another process may
append to it meanwhile (new entries reach followers within ~100 ms of
being synced). Only entries the writer has synced are served, so a power
loss of this machine never takes back what a follower holds; a writer
with --sync never gets its entries served as segments fill (or at its
syncs). --serve-unsynced serves entries as soon as they are appended:
followers then record which entries were not yet synced, and drop and
copy them again after the writer reopens the log. Binding
anything but a loopback address requires --token (followers send it as a
bearer token); bound to all interfaces (0.0.0.0, [::]), the printed URL
names loopback and a note on stderr says so. Past --max-connections, the
oldest connection that has not sent the --token is closed to make room,
else new connections get 503 and are closed; a connection that does not finish a
request head within --header-timeout, or idles --idle-timeout between
requests, is closed. Endpoints: GET /v1/state, /v1/term/INDEX,
/v1/entries?from=I[&max_count=N&max_bytes=B&prev_term=T&wait_ms=W]
(pages larger than --max-page-bytes / --max-page-count are clamped).";

pub const FOLLOW_HELP: &str = "\
Examples:
  mmapkit log follow http://127.0.0.1:7070 copy --once     catch up and exit
  mmapkit log follow http://10.0.0.5:7070 copy --token \"$TOKEN\" --sync interval:50ms

Copies the leader's log into DIR (created if missing), resuming from DIR's
last entry. DIR records which log it copies (the leader's log id) and
refuses any other (a replaced or re-created leader directory, an empty
leader, a wrong URL) unless --reset, which discards DIR's entries and says
how many (also when DIR differs from the leader's own log). DIR's entries are truncated only where the leader's own history
says it truncated its log since they were copied, or where entries were
copied before the leader synced them and its writer has reopened the log
since (a power loss may have taken them); any other difference is reported
(exit 2, naming the last entry both logs agree on) and DIR is kept. Every entry's CRC32C is checked before
it is appended; a damaged one is refused. Without --once it keeps following (long polls) until SIGINT or
SIGTERM, then exits 0; dropped connections and leader restarts are retried.
Exit status 2 on errors, e.g. \"snapshot required\" when the leader purged
entries DIR needs. Prints what it did on stderr (--json: on stdout).";

#[derive(Args, Debug)]
pub struct ServeArgs {
    /// The log directory.
    dir: PathBuf,
    /// Address to listen on (port 0: pick a free one).
    #[arg(long, default_value = "127.0.0.1:0")]
    bind: String,
    /// Bearer token followers must send (required off loopback).
    #[arg(long)]
    token: Option<String>,
    /// Largest page in payload bytes (larger requests are clamped).
    #[arg(long, default_value_t = 16 << 20)]
    max_page_bytes: usize,
    /// Largest page in entries (larger requests are clamped).
    #[arg(long, default_value_t = 16384)]
    max_page_count: u64,
    /// Pages sent at once; more requests wait (then 503).
    #[arg(long, default_value_t = 32)]
    max_concurrent_pages: usize,
    /// Connections open at once; more are answered 503 and closed.
    #[arg(long, value_name = "N", default_value_t = 512)]
    max_connections: usize,
    /// Seconds a request head (line and headers) may take to arrive.
    #[arg(long, value_name = "SECS", default_value_t = 10)]
    header_timeout: u64,
    /// Seconds a connection may idle between requests before it is closed.
    #[arg(long, value_name = "SECS", default_value_t = 30)]
    idle_timeout: u64,
    /// Serve entries the writer has not synced yet (see below).
    #[arg(long)]
    serve_unsynced: bool,
}

#[derive(Args, Debug)]
pub struct FollowArgs {
    /// The leader's URL (what `log serve` printed).
    url: String,
    /// The follower's log directory.
    dir: PathBuf,
    /// Durability of appends: never, batch or interval:<N>ms.
    #[arg(long, default_value = "batch")]
    sync: SyncMode,
    /// Bearer token for the leader.
    #[arg(long)]
    token: Option<String>,
    /// Catch up, then exit.
    #[arg(long)]
    once: bool,
    /// Bytes received but not yet appended, at most.
    #[arg(long, default_value_t = 64 << 20)]
    max_in_flight: usize,
    /// Follow the served log even though DIR holds entries of another
    /// log (or of none recorded), or differs from it: they are discarded
    /// first.
    #[arg(long)]
    reset: bool,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    json: bool,
}

pub fn serve(a: ServeArgs) -> anyhow::Result<u8> {
    let srv = mmapkit_replicate::serve_dir(
        &a.dir,
        ServeOptions::default()
            .bind(a.bind)
            .token(a.token)
            .max_page_bytes(a.max_page_bytes)
            .max_page_count(a.max_page_count)
            .max_concurrent_pages(a.max_concurrent_pages)
            .max_connections(a.max_connections)
            .header_timeout(Duration::from_secs(a.header_timeout))
            .idle_timeout(Duration::from_secs(a.idle_timeout))
            .serve_unsynced(a.serve_unsynced),
    )?;
    if srv.local_addr().ip().is_unspecified() {
        eprintln!(
            "note: listening on all interfaces ({}); the URL printed names loopback",
            srv.local_addr()
        );
    }
    let stop = srv.stopper();
    crate::common::stop_on_signal(move || stop.stop());
    println!("{}", srv.url());
    use std::io::Write;
    std::io::stdout().flush()?;
    srv.wait();
    Ok(EXIT_OK)
}

pub fn follow(a: FollowArgs) -> anyhow::Result<u8> {
    let f = Follower::spawn(
        &a.url,
        &a.dir,
        FollowOptions::default()
            .sync(a.sync)
            .token(a.token)
            .once(a.once)
            .max_in_flight(a.max_in_flight.max(1))
            .reset(a.reset),
    )?;
    let stop = f.stop_handle();
    let stopped = Arc::new(AtomicBool::new(false));
    let s2 = stopped.clone();
    crate::common::stop_on_signal(move || {
        s2.store(true, Ordering::Release);
        stop.stop();
    });
    while !f.is_finished() {
        std::thread::sleep(Duration::from_millis(20));
    }
    let r = f.join()?;
    if a.json {
        println!(
            "{}",
            serde_json::json!({
                "appended": r.appended, "bytes": r.bytes, "truncated": r.truncated,
                "retries": r.retries, "first_index": r.first_index, "last_index": r.last_index,
                "stopped": stopped.load(Ordering::Acquire),
            })
        );
    } else {
        eprintln!(
            "{}: {} entries appended ({} bytes), {} truncated, {} retries; holds {}..={}",
            a.dir.display(),
            r.appended,
            r.bytes,
            r.truncated,
            r.retries,
            r.first_index,
            r.last_index
        );
    }
    Ok(EXIT_OK)
}

//! `mmapkit log init|append|read|stat|verify|truncate|purge|serve|follow DIR ...`: the
//! commit log (`mmapkit::log`) from the shell.

use std::io::{self, BufWriter, Write};
use std::path::{Path, PathBuf};

use clap::{Args, Subcommand, ValueEnum};
use mmapkit::log::{CommitLog, LogOptions, RecordFormat, RecordReader, SyncMode};

use crate::common::{Progress, ThreadsArg, EXIT_NO_MATCH, EXIT_OK};

pub const LOG_HELP: &str = "\
Examples:
  mmapkit log init wal --segment-size 16M
  printf 'set x=1\\nset y=2\\n' | mmapkit log append wal --term 1
  mmapkit log read wal                 every entry, one per line
  mmapkit log read wal 5 10 --json     entries 5..9 with index and term
  mmapkit log stat wal
  mmapkit log verify wal               exit 1 if a checksum fails
  mmapkit log truncate wal 3           drop everything after entry 3
  mmapkit log purge wal 100            drop whole segments below entry 100
  mmapkit log serve wal --bind 127.0.0.1:7070     serve it over HTTP
  mmapkit log follow http://127.0.0.1:7070 copy   copy it and keep following

A log is a directory of segment files; one process may write it at a time,
any number may read it (read, stat and verify open it read-only). The
segment size is chosen by `log init` and kept for the life of the log.";

/// Subcommands of `mmapkit log`.
#[derive(Args, Debug)]
pub struct LogArgs {
    #[command(subcommand)]
    cmd: LogCmd,
}

#[derive(Subcommand, Debug)]
enum LogCmd {
    /// Create an empty log in DIR (nothing happens if one exists).
    #[command(after_help = "Example:\n  mmapkit log init wal --segment-size 64M --first-index 1")]
    Init {
        dir: PathBuf,
        /// Bytes per segment file (suffixes K, M, G; rounded up to 4K), kept
        /// for the life of the log (ignored if DIR already holds a log).
        #[arg(long, default_value = "64M", value_parser = parse_size)]
        segment_size: u64,
        /// Index of the first entry.
        #[arg(long, default_value_t = 1)]
        first_index: u64,
    },
    /// Append entries read from stdin: one per line, or length-prefixed records.
    #[command(after_help = "\
Examples:
  printf 'a\\nb\\n' | mmapkit log append wal --term 2
  mmapkit log read wal --records | mmapkit log append copy --records

--records reads [u32 little-endian length][bytes] records (what
`log read --records` writes), for entries that contain newlines. Input is
appended in batches of --batch entries, each only once it was read whole:
input that ends inside a record is an error (exit 2), the batch holding it
is not appended, and the message says which entries the earlier batches
appended. The log must exist (create it with `log init`).
Prints the first and last index appended (--json: an object).")]
    Append {
        dir: PathBuf,
        /// Term stored with every entry.
        #[arg(long, default_value_t = 0)]
        term: u64,
        /// Length-prefixed records instead of lines.
        #[arg(long)]
        records: bool,
        /// Entries per batch (each batch is committed, and synced, as one).
        #[arg(long, default_value_t = 1000)]
        batch: usize,
        /// never, batch or interval:<N>ms.
        #[arg(long, default_value = "batch")]
        sync: SyncMode,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Print entries LO..HI-1 (default: all), one per line.
    #[command(after_help = "\
Examples:
  mmapkit log read wal
  mmapkit log read wal 10 20 --json | jq '.[].term'
  mmapkit log read wal 10 --max-bytes 4096

--json prints [{\"index\", \"term\", \"data\"}], data as a string when it is
UTF-8, else \"data_hex\". --records writes length-prefixed records.")]
    Read {
        dir: PathBuf,
        /// First index (default: the log's first).
        lo: Option<u64>,
        /// One past the last index (default: after the log's last).
        hi: Option<u64>,
        /// At most this many payload bytes (but at least one entry).
        #[arg(long)]
        max_bytes: Option<usize>,
        /// Output format.
        #[arg(long, value_enum, default_value = "lines", conflicts_with_all = ["json", "records"])]
        format: Format,
        /// Same as --format json.
        #[arg(long)]
        json: bool,
        /// Same as --format records.
        #[arg(long)]
        records: bool,
    },
    /// Show first/last index, entry count and segments.
    #[command(
        after_help = "Examples:\n  mmapkit log stat wal\n  mmapkit log stat wal --json | jq .entries"
    )]
    Stat {
        dir: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
    },
    /// Check every entry's checksum and batch commit.
    #[command(after_help = "\
Example:
  mmapkit log verify wal && echo intact

  mmapkit log verify wal --repair      keep the valid prefix of a damaged tail

Damage to a batch that a later batch records as synced is corruption. The
last batch has no later one: if it does not read back, it is a torn write
(a crash before it was synced) or damage after its sync, which cannot be
told apart; verify reports it (exit 1) and the next writable open moves it
to DIR/quarantine. Exit status: 0 intact, 1 corrupt or an unreadable last
batch (the message names the entry and segment), 2 other errors. With --repair (opens the log for writing): a damaged tail
segment is cut after its last valid batch, and the bytes cut are moved to
DIR/quarantine/<segment>.<byte offset>.bad (never deleted); exit 0 when the
repaired log verifies.")]
    Verify {
        dir: PathBuf,
        /// Print the result as JSON.
        #[arg(long)]
        json: bool,
        /// Repair a damaged tail (see below) before verifying.
        #[arg(long)]
        repair: bool,
        #[command(flatten)]
        exec: ThreadsArg,
    },
    /// Drop every entry after INDEX (the next append gets INDEX+1).
    #[command(after_help = "Example:\n  mmapkit log truncate wal 41    keep entries up to 41")]
    Truncate { dir: PathBuf, index: u64 },
    /// Drop whole segments whose entries are all below INDEX.
    #[command(after_help = "Example:\n  mmapkit log purge wal 1000    entries from 1000 on stay")]
    Purge { dir: PathBuf, index: u64 },
    /// Serve the log over HTTP to followers (until SIGINT/SIGTERM).
    #[command(after_help = crate::replicate::SERVE_HELP)]
    Serve(crate::replicate::ServeArgs),
    /// Copy a served log into DIR and keep following it.
    #[command(after_help = crate::replicate::FOLLOW_HELP)]
    Follow(crate::replicate::FollowArgs),
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Format {
    Lines,
    Json,
    Records,
}

fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let (num, mul) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => {
            let m = match c.to_ascii_uppercase() {
                'K' => 1u64 << 10,
                'M' => 1 << 20,
                'G' => 1 << 30,
                _ => return Err(format!("unknown size suffix in {s:?} (use K, M or G)")),
            };
            (&t[..i], m)
        }
        _ => (t, 1),
    };
    num.parse::<u64>()
        .ok()
        .and_then(|n| n.checked_mul(mul))
        .ok_or_else(|| format!("invalid size {s:?}"))
}

fn open_ro(dir: &Path) -> mmapkit::Result<CommitLog> {
    CommitLog::open(dir, LogOptions::default().read_only(true))
}

/// Opens the existing log in `dir` for writing (never creates one).
fn open_rw(dir: &Path, sync: SyncMode, repair: bool) -> mmapkit::Result<CommitLog> {
    if !mmapkit::log::is_log_dir(dir) {
        return Err(mmapkit::Error::invalid(
            dir,
            "no log here (create it with `mmapkit log init`)",
        ));
    }
    CommitLog::open(dir, LogOptions::default().sync(sync).repair(repair))
}

pub fn run(a: LogArgs) -> anyhow::Result<u8> {
    match a.cmd {
        LogCmd::Init { dir, segment_size, first_index } => {
            let log = CommitLog::open(
                &dir,
                LogOptions::default().segment_size(segment_size).first_index(first_index),
            )?;
            report_recovery(&log);
            Ok(EXIT_OK)
        }
        LogCmd::Append { dir, term, records, batch, sync, json } => {
            let log = open_rw(&dir, sync, false)?;
            report_recovery(&log);
            append(&log, term, records, batch.max(1), json)
        }
        LogCmd::Read { dir, lo, hi, max_bytes, format, json, records } => {
            let format = if json {
                Format::Json
            } else if records {
                Format::Records
            } else {
                format
            };
            let log = open_ro(&dir)?;
            let lo = lo.unwrap_or_else(|| log.first_index());
            let hi = hi.unwrap_or_else(|| log.last_index() + 1);
            read(&log, lo, hi, max_bytes, format)
        }
        LogCmd::Stat { dir, json } => stat(&open_ro(&dir)?, json),
        LogCmd::Verify { dir, json, repair, exec } => {
            // Corruption found on open (the tail) is a verify result too.
            let r = if repair {
                open_rw(&dir, SyncMode::Batch, true).inspect(report_recovery)
            } else {
                open_ro(&dir)
            }
            .and_then(|log| {
                let (progress, _bar) = Progress::start("verify".into());
                log.verify_with(exec.threads, &progress)
            });
            match r {
                Ok(r) if r.unreadable_tail.is_some() => {
                    // Issue 23, item 6: never "ok" over a last batch that
                    // does not read back.
                    let t = r.unreadable_tail.expect("checked");
                    let what = format!(
                        "the last batch is unreadable ({} bytes after entry {}{}): a torn write of a \
                         batch never synced, or damage to one after it was synced (they cannot be \
                         told apart); the next writable open moves it to {}",
                        t.bytes,
                        t.first_index - 1,
                        if t.entries > 0 { format!(", {} entries", t.entries) } else { String::new() },
                        mmapkit::log::quarantine_dir(&dir).display()
                    );
                    if json {
                        writeln!(
                            crate::stdout::stdout(),
                            "{}",
                            serde_json::json!({"ok": false, "segments": r.segments, "entries": r.entries,
                                "bytes": r.bytes, "unreadable_tail": {"first_index": t.first_index,
                                "entries": t.entries, "bytes": t.bytes}, "error": what})
                        )?;
                    }
                    eprintln!("mmapkit: {}: {what}", dir.display());
                    Ok(EXIT_NO_MATCH)
                }
                Ok(r) => {
                    let mut out = crate::stdout::stdout();
                    if json {
                        writeln!(
                            out,
                            "{}",
                            serde_json::json!({"ok": true, "segments": r.segments, "entries": r.entries, "bytes": r.bytes})
                        )?;
                    } else {
                        writeln!(
                            out,
                            "{}: ok: {} entries, {} bytes in {} segments",
                            dir.display(),
                            r.entries,
                            r.bytes,
                            r.segments
                        )?;
                    }
                    Ok(EXIT_OK)
                }
                Err(e) if e.kind() == mmapkit::ErrorKind::Corrupt => {
                    if json {
                        writeln!(
                            crate::stdout::stdout(),
                            "{}",
                            serde_json::json!({"ok": false, "error": e.to_string()})
                        )?;
                    }
                    eprintln!("mmapkit: {e}");
                    Ok(EXIT_NO_MATCH)
                }
                Err(e) => Err(e.into()),
            }
        }
        LogCmd::Truncate { dir, index } => {
            open_rw(&dir, SyncMode::Batch, false)?.truncate_after(index)?;
            Ok(EXIT_OK)
        }
        LogCmd::Purge { dir, index } => {
            open_rw(&dir, SyncMode::Batch, false)?.purge_before(index)?;
            Ok(EXIT_OK)
        }
        LogCmd::Serve(a) => crate::replicate::serve(a),
        LogCmd::Follow(a) => crate::replicate::follow(a),
    }
}

fn report_recovery(log: &CommitLog) {
    let r = log.recovery();
    if r.dropped_bytes > 0 {
        let moved = match &r.quarantine {
            Some(q) => format!("; moved to {}", q.display()),
            None => String::new(),
        };
        eprintln!(
            "mmapkit: {}: recovery dropped {} entries ({} bytes) after the last valid batch{moved}",
            r.tail_segment.display(),
            r.dropped_entries,
            r.dropped_bytes
        );
    }
}

fn append(
    log: &CommitLog,
    term: u64,
    records: bool,
    batch: usize,
    json: bool,
) -> anyhow::Result<u8> {
    let format = if records { RecordFormat::LengthPrefixed } else { RecordFormat::Lines };
    let mut input = RecordReader::open(Path::new("-"), format)?;
    let mut buf: Vec<(u64, Vec<u8>)> = Vec::with_capacity(batch);
    let (mut first, mut count) = (None, 0u64);
    let failed = loop {
        let (end, failed) = match input.next_record() {
            Ok(Some(entry)) => {
                buf.push((term, entry));
                (false, None)
            }
            Ok(None) => (true, None),
            Err(e) => (true, Some(e)),
        };
        // Whole batches only: the batch holding a bad record is not appended.
        if buf.len() >= batch || (end && failed.is_none() && !buf.is_empty()) {
            first.get_or_insert(log.append(&buf)?);
            count += buf.len() as u64;
            buf.clear();
        }
        if end {
            break failed;
        }
    };
    if let Some(e) = failed {
        let appended = match first {
            Some(f) => {
                format!(
                    "entries {f}..{} were appended, the batch holding it was not",
                    f + count - 1
                )
            }
            None => "nothing was appended".to_owned(),
        };
        anyhow::bail!("{e}; {appended}");
    }
    let first = first.unwrap_or(log.last_index() + 1);
    let last = first + count - 1;
    if json {
        writeln!(
            crate::stdout::stdout(),
            "{}",
            serde_json::json!({"first_index": first, "last_index": last, "appended": count})
        )?;
    } else if count > 0 {
        writeln!(crate::stdout::stdout(), "{first} {last}")?;
    }
    Ok(EXIT_OK)
}

fn read(
    log: &CommitLog,
    lo: u64,
    hi: u64,
    max_bytes: Option<usize>,
    format: Format,
) -> anyhow::Result<u8> {
    let mut out = BufWriter::with_capacity(1 << 16, crate::stdout::stdout());
    let mut budget = max_bytes;
    let mut i = lo;
    let mut first = true;
    if format == Format::Json {
        out.write_all(b"[")?;
    }
    // In chunks, so a huge log is never held in memory at once.
    while i < hi {
        let chunk_hi = hi.min(i + 4096);
        let es = log.read(i, chunk_hi, budget)?;
        for e in es.iter() {
            match format {
                Format::Lines => {
                    out.write_all(e.data())?;
                    out.write_all(b"\n")?;
                }
                Format::Records => {
                    out.write_all(&(e.data().len() as u32).to_le_bytes())?;
                    out.write_all(e.data())?;
                }
                Format::Json => {
                    let v = match std::str::from_utf8(e.data()) {
                        Ok(s) => {
                            serde_json::json!({"index": e.index(), "term": e.term(), "data": s})
                        }
                        Err(_) => {
                            serde_json::json!({"index": e.index(), "term": e.term(), "data_hex": hex(e.data())})
                        }
                    };
                    out.write_all(if first { b"\n  " } else { b",\n  " })?;
                    serde_json::to_writer(&mut out, &v)?;
                    first = false;
                }
            }
        }
        let got = es.len() as u64;
        if let Some(b) = budget.as_mut() {
            *b = b.saturating_sub(es.total_bytes());
            if got < chunk_hi - i || *b == 0 {
                break;
            }
        }
        i += got;
    }
    if format == Format::Json {
        out.write_all(if first { b"]\n" } else { b"\n]\n" })?;
    }
    out.flush()?;
    Ok(EXIT_OK)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn stat(log: &CommitLog, json: bool) -> anyhow::Result<u8> {
    let s = log.stat()?;
    let mut out = io::BufWriter::new(crate::stdout::stdout());
    if json {
        let segs: Vec<_> = s
            .segments
            .iter()
            .map(|g| {
                serde_json::json!({
                    "path": g.path.to_string_lossy(), "first_index": g.first_index,
                    "entries": g.entries, "generation": g.generation, "size": g.size,
                })
            })
            .collect();
        let v = serde_json::json!({
            "path": s.dir.to_string_lossy(), "first_index": s.first_index, "last_index": s.last_index,
            "entries": s.entries, "segments": segs,
        });
        serde_json::to_writer_pretty(&mut out, &v)?;
        writeln!(out)?;
    } else {
        writeln!(out, "log:          {}", s.dir.display())?;
        writeln!(out, "entries:      {} ({}..={})", s.entries, s.first_index, s.last_index)?;
        writeln!(out, "segments:     {}", s.segments.len())?;
        for g in &s.segments {
            let name =
                g.path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
            writeln!(
                out,
                "  {name}  first {}  {} entries  {} bytes",
                g.first_index, g.entries, g.size
            )?;
        }
    }
    out.flush()?;
    Ok(EXIT_OK)
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::parse_size("4096"), Ok(4096));
        assert_eq!(super::parse_size("16M"), Ok(16 << 20));
        assert_eq!(super::parse_size("1g"), Ok(1 << 30));
        assert!(super::parse_size("1T").is_err());
        assert!(super::parse_size("x").is_err());
    }
}

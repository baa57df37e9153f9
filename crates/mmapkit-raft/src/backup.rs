//! The backup format (`GET /kv/backup`, `mmapkit-kv backup FILE`): NDJSON,
//! one JSON object a line, streamed from one read transaction.
//!
//! ```text
//! {"mmapkit_kv_backup":1,"revision":42}
//! {"key":"a","value":"1","mod_revision":7}
//! {"key":"b","value":"2","mod_revision":42}
//! {"end":true,"count":2}
//! ```
//!
//! The header names the format and the revision of the cut; one line per
//! key follows, in strictly increasing key order; the end line gives the
//! number of keys. A stream or file cut short anywhere lacks a matching end
//! line, so [`BackupReader`] refuses it: a truncated backup is an error,
//! never a smaller backup. Readers hold one line at a time (at most
//! [`LINE_MAX`] bytes), writers one chunk ([`CHUNK`]).

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::kv::{BackupCut, KeyValue};

/// The version [`Header::mmapkit_kv_backup`] carries.
pub const FORMAT: u32 = 1;
/// What a backup file in this format starts with (older backups were one
/// whole-JSON [`crate::query::RangeAnswer`], starting `{"kvs":`).
pub const MAGIC: &[u8] = br#"{"mmapkit_kv_backup":"#;
/// Bytes the server gathers into one body chunk before it sends it.
pub const CHUNK: usize = 64 << 10;
/// Chunks in flight between the producing thread and the connection: with
/// [`CHUNK`], what a backup holds in memory on the server (plus one line).
pub const CHUNKS: usize = 4;
/// A backup whose next chunk is not taken (server: the connection does not
/// drain; relaying follower and client: none arrives) for this long ends,
/// and the server drops its read transaction.
pub const STALL: Duration = Duration::from_secs(60);
/// The longest line a reader accepts (a 4 MiB value escaped `\u` by `\u`
/// is 24 MiB).
pub const LINE_MAX: usize = 64 << 20;

/// Counters of the backups a node streams.
#[derive(Debug, Default)]
pub struct BackupStats {
    /// Chunks made so far (by every backup).
    pub chunks: std::sync::atomic::AtomicU64,
    /// Backups whose producing thread (and read transaction) is alive.
    pub running: std::sync::atomic::AtomicU64,
}

/// A backup's first line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Header {
    /// The format version ([`FORMAT`]).
    pub mmapkit_kv_backup: u32,
    /// The revision of the cut (the last applied index).
    pub revision: u64,
}

/// A backup's last line.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct End {
    /// Always `true`.
    pub end: bool,
    /// The number of key lines before it.
    pub count: u64,
}

impl BackupCut {
    /// Writes the backup (header, keys, end line) in chunks of about
    /// `chunk` bytes (at least one line each), each handed to `send`; stops
    /// when `send` refuses one (the reader is gone): `Ok(None)`. Holds one
    /// chunk at a time, whatever the state's size; `Ok(Some(count))` once
    /// the end line was sent.
    pub fn write(
        self,
        chunk: usize,
        mut send: impl FnMut(Vec<u8>) -> bool,
    ) -> crate::Result<Option<u64>> {
        #[derive(Serialize)]
        struct Line<'a> {
            key: &'a str,
            value: &'a str,
            mod_revision: u64,
        }
        let mut buf = Vec::with_capacity(chunk + 4096);
        push_line(&mut buf, &Header { mmapkit_kv_backup: FORMAT, revision: self.revision() });
        let mut count = 0u64;
        let all = self.each_key(|key, value, mod_revision| {
            push_line(&mut buf, &Line { key, value, mod_revision });
            count += 1;
            buf.len() < chunk || send(std::mem::replace(&mut buf, Vec::with_capacity(chunk + 4096)))
        })?;
        if !all {
            return Ok(None);
        }
        push_line(&mut buf, &End { end: true, count });
        Ok(send(buf).then_some(count))
    }
}

/// What a complete backup held.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Summary {
    /// The revision of the cut.
    pub revision: u64,
    /// The number of keys.
    pub count: u64,
}

/// Checks a backup line by line: the header, keys in strictly increasing
/// order, then an end line whose count matches and nothing after it.
#[derive(Debug, Default)]
pub struct BackupReader {
    revision: Option<u64>,
    count: u64,
    last: Option<String>,
    end: bool,
}

impl BackupReader {
    /// A reader before the header.
    pub fn new() -> BackupReader {
        BackupReader::default()
    }

    /// Reads one line (without its `\n`): the key it holds, if any.
    pub fn line(&mut self, line: &[u8]) -> Result<Option<KeyValue>, String> {
        let n = self.count + u64::from(self.revision.is_some()) + 1;
        if self.end {
            return Err(format!("line {n}: data after the end line"));
        }
        let Some(_) = self.revision else {
            let h: Header = serde_json::from_slice(line)
                .map_err(|e| format!("line 1: not a backup header: {e}"))?;
            if h.mmapkit_kv_backup != FORMAT {
                return Err(format!(
                    "backup format {} (this version reads {FORMAT})",
                    h.mmapkit_kv_backup
                ));
            }
            self.revision = Some(h.revision);
            return Ok(None);
        };
        match serde_json::from_slice::<KeyValue>(line) {
            Ok(kv) => {
                if self.last.as_ref().is_some_and(|l| *l >= kv.key) {
                    return Err(format!("line {n}: key {:?} out of order", kv.key));
                }
                self.last = Some(kv.key.clone());
                self.count += 1;
                Ok(Some(kv))
            }
            Err(kv_err) => match serde_json::from_slice::<End>(line) {
                Ok(End { end: true, count }) if count == self.count => {
                    self.end = true;
                    Ok(None)
                }
                Ok(e) => Err(format!(
                    "line {n}: the end line says {} keys, the backup holds {}",
                    e.count, self.count
                )),
                Err(_) => Err(format!("line {n}: not a key line: {kv_err}")),
            },
        }
    }

    /// The backup's summary once its end line was read; else the error
    /// of a backup cut short.
    pub fn finish(&self) -> Result<Summary, String> {
        match self.revision {
            Some(revision) if self.end => Ok(Summary { revision, count: self.count }),
            Some(_) => Err(format!(
                "cut short: no end line after {} keys (an incomplete backup)",
                self.count
            )),
            None => Err("empty: no backup header".into()),
        }
    }
}

/// Cuts bytes arriving in chunks into lines, holding only the unfinished one.
#[derive(Debug, Default)]
pub struct Lines {
    partial: Vec<u8>,
}

impl Lines {
    /// Splitting nothing yet.
    pub fn new() -> Lines {
        Lines::default()
    }

    /// Calls `each` with every line `chunk` completes (without its `\n`).
    pub fn feed(
        &mut self,
        mut chunk: &[u8],
        mut each: impl FnMut(&[u8]) -> Result<(), String>,
    ) -> Result<(), String> {
        while let Some(i) = chunk.iter().position(|&b| b == b'\n') {
            if self.partial.is_empty() {
                each(&chunk[..i])?;
            } else {
                self.partial.extend_from_slice(&chunk[..i]);
                each(&self.partial)?;
                self.partial.clear();
            }
            chunk = &chunk[i + 1..];
        }
        if self.partial.len() + chunk.len() > LINE_MAX {
            return Err(format!("a line longer than {LINE_MAX} bytes"));
        }
        self.partial.extend_from_slice(chunk);
        Ok(())
    }

    /// Whether bytes after the last `\n` are waiting (a cut line at the end).
    pub fn pending(&self) -> bool {
        !self.partial.is_empty()
    }
}

/// Reads a whole backup given as `chunks` (cut anywhere): its keys and
/// summary, or why it is not one (a cut line at the end included).
pub fn read_chunks<'a>(
    chunks: impl IntoIterator<Item = &'a [u8]>,
) -> Result<(Vec<KeyValue>, Summary), String> {
    let (mut r, mut lines, mut kvs) = (BackupReader::new(), Lines::new(), Vec::new());
    for piece in chunks {
        lines.feed(piece, |l| {
            kvs.extend(r.line(l)?);
            Ok(())
        })?;
    }
    if lines.pending() {
        return Err("cut line".into());
    }
    Ok((kvs, r.finish()?))
}

/// Appends `v`'s JSON and a `\n` to `out`.
pub(crate) fn push_line(out: &mut Vec<u8>, v: &impl Serialize) {
    // Serializing these plain structs into a Vec cannot fail.
    if serde_json::to_writer(&mut *out, v).is_ok() {
        out.push(b'\n');
    }
}

#[cfg(test)]
mod tests;

//! The KV state machine's snapshot file: a length-prefixed binary stream,
//! written and read in bounded memory (a state of any size never passes
//! through one buffer).
//!
//! ```text
//! file    = header record* end
//! header  = "MMKVSNP1" meta_len:u32 meta        (meta: openraft's SnapshotMeta as JSON)
//! record  = key_len:u32 value_len:u32 mod_revision:u64 key value   (UTF-8, in key order)
//! end     = 0xFFFF_FFFF:u32 count:u64 crc32c:u32
//! ```
//!
//! Little-endian. The CRC covers every byte before it; `count` is the
//! number of records. A key is never 4 GiB long, so an all-ones length
//! marks the end. A reader checks both and that nothing follows, so a cut
//! or damaged file (or a snapshot transfer that lost a chunk) is an error,
//! never a smaller state.

use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use openraft::storage::SnapshotMeta;

use crate::member::{Member, NodeId};
use crate::{Error, Result};

/// The first bytes of a snapshot file in this format (a JSON snapshot, the
/// format before it, starts with `{`).
pub(crate) const MAGIC: &[u8; 8] = b"MMKVSNP1";

const END: u32 = u32::MAX;

/// The longest metadata record read (a membership of thousands of nodes
/// fits many times over).
const MAX_META: u64 = 16 << 20;

/// The longest key or value read. Lengths come from the file: this caps
/// what a damaged one could make us allocate, and buffers grow only as
/// bytes actually arrive (`Read::take`).
const MAX_FIELD: u64 = 1 << 30;

/// The meta type of a snapshot.
pub(crate) type Meta = SnapshotMeta<NodeId, Member>;

/// Bytes written to a snapshot file between two starts of its writeback.
const WRITEBACK_EVERY: u64 = 8 << 20;

/// Starts a file's writeback every [`WRITEBACK_EVERY`] bytes written to
/// it front to back, so its final `fsync` has little left to write: a
/// whole snapshot (gigabytes) reaching the disk's queue at once would
/// stall the log's per-append syncs behind it.
#[derive(Default)]
pub(crate) struct Pacer {
    written: u64,
    started: u64,
}

impl Pacer {
    /// Counts `n` more bytes written to `file`.
    pub(crate) fn wrote(&mut self, file: &File, n: usize) {
        self.written += n as u64;
        if self.written - self.started >= WRITEBACK_EVERY {
            mmapkit::fs::start_writeback(file, self.started, self.written - self.started);
            self.started = self.written;
        }
    }
}

/// A file written front to back through a [`Pacer`].
pub(crate) struct Paced<'a> {
    file: &'a File,
    pacer: Pacer,
}

impl<'a> Paced<'a> {
    /// Writes `file` from its current offset, counted from 0.
    pub(crate) fn new(file: &'a File) -> Paced<'a> {
        Paced { file, pacer: Pacer::default() }
    }
}

impl Write for Paced<'_> {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        let n = (&mut &*self.file).write(b)?;
        self.pacer.wrote(self.file, n);
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Writes a snapshot: the header at [`Writer::new`], then each pair in key
/// order, then the end record at [`Writer::finish`].
pub(crate) struct Writer<W: Write> {
    w: W,
    crc: u32,
    count: u64,
    path: PathBuf,
}

impl<W: Write> Writer<W> {
    /// Starts a snapshot of `meta` on `w` (`path` names it in errors).
    pub(crate) fn new(w: W, meta: &Meta, path: &Path) -> Result<Writer<W>> {
        let json = serde_json::to_vec(meta).map_err(|e| Error::Encode(e.to_string()))?;
        let mut me = Writer { w, crc: 0, count: 0, path: path.to_owned() };
        me.put(MAGIC)?;
        me.put(&(json.len() as u32).to_le_bytes())?;
        me.put(&json)?;
        Ok(me)
    }

    fn put(&mut self, b: &[u8]) -> Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, b);
        self.w.write_all(b).map_err(|e| Error::Io(self.path.clone(), "write", e))
    }

    /// Appends one key (the caller gives keys in order).
    pub(crate) fn push(&mut self, key: &str, value: &str, mod_revision: u64) -> Result<()> {
        let mut head = [0u8; 16];
        head[..4].copy_from_slice(&(key.len() as u32).to_le_bytes());
        head[4..8].copy_from_slice(&(value.len() as u32).to_le_bytes());
        head[8..].copy_from_slice(&mod_revision.to_le_bytes());
        self.put(&head)?;
        self.put(key.as_bytes())?;
        self.put(value.as_bytes())?;
        self.count += 1;
        Ok(())
    }

    /// Writes the end record and flushes; gives the writer back.
    pub(crate) fn finish(mut self) -> Result<W> {
        let mut end = [0u8; 12];
        end[..4].copy_from_slice(&END.to_le_bytes());
        end[4..].copy_from_slice(&self.count.to_le_bytes());
        self.put(&end)?;
        let crc = self.crc.to_le_bytes();
        self.w.write_all(&crc).map_err(|e| Error::Io(self.path.clone(), "write", e))?;
        self.w.flush().map_err(|e| Error::Io(self.path.clone(), "write", e))?;
        Ok(self.w)
    }
}

/// Reads a snapshot record by record, checking the end record and the CRC.
pub(crate) struct Reader<R: Read> {
    r: R,
    crc: u32,
    count: u64,
    path: PathBuf,
    done: bool,
}

/// One key of a snapshot.
pub(crate) struct Record {
    pub key: String,
    pub value: String,
    pub mod_revision: u64,
}

impl<R: Read> Reader<R> {
    /// Reads the header of the snapshot on `r` (`path` names it in errors).
    pub(crate) fn new(r: R, path: &Path) -> Result<(Meta, Reader<R>)> {
        let mut me = Reader { r, crc: 0, count: 0, path: path.to_owned(), done: false };
        let mut magic = [0u8; 8];
        me.exact(&mut magic)?;
        if &magic != MAGIC {
            return Err(me.corrupt("not a snapshot (bad magic)".into()));
        }
        let len = me.u32()? as u64;
        if len > MAX_META {
            return Err(me.corrupt(format!("metadata of {len} bytes")));
        }
        let json = me.bytes(len)?;
        let meta = serde_json::from_slice(&json)
            .map_err(|e| me.corrupt(format!("metadata does not decode: {e}")))?;
        Ok((meta, me))
    }

    fn corrupt(&self, why: String) -> Error {
        Error::Corrupt(self.path.clone(), format!("snapshot: {why}"))
    }

    fn exact(&mut self, b: &mut [u8]) -> Result<()> {
        self.r.read_exact(b).map_err(|e| match e.kind() {
            std::io::ErrorKind::UnexpectedEof => self.corrupt("cut short".into()),
            _ => Error::Io(self.path.clone(), "read", e),
        })?;
        self.crc = crc32c::crc32c_append(self.crc, b);
        Ok(())
    }

    fn u32(&mut self) -> Result<u32> {
        let mut b = [0u8; 4];
        self.exact(&mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    fn u64(&mut self) -> Result<u64> {
        let mut b = [0u8; 8];
        self.exact(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    fn bytes(&mut self, len: u64) -> Result<Vec<u8>> {
        let mut v = Vec::new();
        (&mut self.r)
            .take(len)
            .read_to_end(&mut v)
            .map_err(|e| Error::Io(self.path.clone(), "read", e))?;
        if v.len() as u64 != len {
            return Err(self.corrupt("cut short".into()));
        }
        self.crc = crc32c::crc32c_append(self.crc, &v);
        Ok(v)
    }

    fn string(&mut self, len: u64) -> Result<String> {
        let b = self.bytes(len)?;
        String::from_utf8(b).map_err(|_| self.corrupt("a key or value is not UTF-8".into()))
    }

    /// The next key, `None` after the last (the end record, count and CRC
    /// checked, and nothing after them).
    pub(crate) fn next_record(&mut self) -> Result<Option<Record>> {
        if self.done {
            return Ok(None);
        }
        let klen = self.u32()?;
        if klen == END {
            let count = self.u64()?;
            let want = self.crc;
            let mut b = [0u8; 4];
            self.exact(&mut b)?;
            if u32::from_le_bytes(b) != want {
                return Err(self.corrupt("CRC mismatch".into()));
            }
            if count != self.count {
                return Err(self.corrupt(format!("{} records, the end says {count}", self.count)));
            }
            let mut extra = [0u8; 1];
            if self.r.read(&mut extra).map_err(|e| Error::Io(self.path.clone(), "read", e))? != 0 {
                return Err(self.corrupt("bytes after the end".into()));
            }
            self.done = true;
            return Ok(None);
        }
        let vlen = self.u32()?;
        if klen as u64 > MAX_FIELD || vlen as u64 > MAX_FIELD {
            return Err(self.corrupt(format!("a record of {klen} + {vlen} bytes")));
        }
        let mod_revision = self.u64()?;
        let key = self.string(klen as u64)?;
        let value = self.string(vlen as u64)?;
        self.count += 1;
        Ok(Some(Record { key, value, mod_revision }))
    }
}

#[cfg(test)]
mod tests;

//! A replicated key-value state machine: openraft's `RaftStateMachine`
//! over an on-disk B-tree (redb); a snapshot is a consistent read
//! transaction, written as a binary file only when a follower needs it.
//!
//! ```text
//! DIR/state.redb   tables `data` (key -> mod_revision, value) and `meta`
//!                  (last applied log id, last membership), one write
//!                  transaction per `apply` call
//! DIR/snapshot     the last snapshot installed from a leader (see the
//!                  private `snapshot` module): the commit point of an
//!                  install, put in place atomically and durably
//! ```
//!
//! Memory does not grow with the data: redb's page cache (reads and the
//! write buffer together) is [`CACHE_BYTES`], reads go through read
//! transactions, and snapshots are sent, received and installed as
//! files, record by record. Building one copies nothing: it makes the
//! tables durable and keeps a read transaction (see
//! [`crate::snapshot_file`]), so a large state is not rewritten every
//! few thousand entries, its writes queued ahead of the log's syncs.
//! The tables' own writes go to disk a little at a time (writeback
//! started every tick) for the same reason. Only the watch window of
//! recent changes (`crate::watch`) is held in memory.
//!
//! # Durability
//!
//! The last applied log id is written in the same transaction as the data
//! it covers, so the tables are always a state the log produced: never an
//! entry half applied, never a `Cas` applied again after a restart.
//! Applies commit without an fsync (redb's `Durability::None`: a crash
//! returns the tables to the last durable commit, data and last applied
//! together), and openraft re-applies the committed entries after what
//! [`RaftStateMachine::applied_state`] reports, which is what the tables
//! hold. That is sound as long as the log still holds those entries, and
//! openraft purges the log only up to a snapshot: so a snapshot is built
//! only from a cut that was first made durable. A background thread also
//! commits durably every [`DURABLE_EVERY`] (so a restart replays little),
//! and an install commits durably. Each durable commit beside the applies
//! first flushes the file's dirty pages through a descriptor of its own,
//! without redb's write lock, so the commit's own fsync has little left to
//! write while applies wait for it. An install writes the received file into place before it
//! commits the tables: a crash between the two finds the snapshot file
//! ahead of the tables at open, and loads it again.
//!
//! A directory with a JSON snapshot (the format before this one, when the
//! state was held in memory) is migrated at open: the JSON is loaded into
//! the tables and rewritten in the binary format.

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom};
use std::ops::Bound;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use mmapkit::fs::TempFile;
use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, StorageError, StorageIOError, StoredMembership,
};
use redb::{ReadableDatabase, ReadableTable};
use serde::{Deserialize, Serialize};

use crate::member::Member;
use crate::snapshot::{self, Meta};
use crate::snapshot_file::{self, SnapshotFile};
use crate::watch::{Compacted, Event, History, HISTORY_MAX, HISTORY_MAX_BYTES};
use crate::{Error, Result};

#[cfg(test)]
pub(crate) use command::apply_command;
use command::{apply_changes, Data};
pub use command::{Request, Response};

openraft::declare_raft_types!(
    /// The KV service's openraft types (node ids `u64`, nodes with an
    /// address, snapshots as files: openraft's chunked transfer reads and
    /// writes them through `AsyncRead`/`AsyncWrite`/`AsyncSeek`).
    pub KvConfig:
        D = Request,
        R = Response,
        Node = Member,
        SnapshotData = SnapshotFile,
);

// Defined with the node's identity (`member` sits below `kv`); kept here
// too, where openraft's types are declared.
pub use crate::member::NodeId;

/// redb's page cache: the reads' cache and the write buffer together
/// (redb keeps the write buffer under half of it and spills to the file
/// past that, so a large transaction, an install, stays within it too).
/// With it the state machine's memory is bounded whatever the data size;
/// 64 MiB keeps the B-tree's inner pages of a few GB of data cached.
pub const CACHE_BYTES: usize = 64 << 20;

/// How often the tables are committed durably in the background: about
/// what a restart after a crash re-applies from the log.
pub const DURABLE_EVERY: Duration = Duration::from_secs(5);

/// The database file in the state machine's directory.
const DB_FILE: &str = "state.redb";

/// Key -> (mod_revision, value).
const DATA: redb::TableDefinition<&str, (u64, &str)> = redb::TableDefinition::new("data");
/// `last_applied`, `membership` -> JSON.
const META: redb::TableDefinition<&str, &[u8]> = redb::TableDefinition::new("meta");
const LAST_APPLIED: &str = "last_applied";
const MEMBERSHIP: &str = "membership";

/// A snapshot in the JSON format before the binary one (state in memory):
/// read once, to migrate a directory.
#[derive(Deserialize)]
struct LegacySnapshot {
    meta: Meta,
    data: BTreeMap<String, String>,
    #[serde(default)]
    revisions: BTreeMap<String, u64>,
}

/// What the state's lock guards: a copy of the tables' meta (for
/// `applied_state` and watchers) and the watch window.
struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
    /// Recent changes (`GET /kv/watch`).
    history: History,
}

struct Shared {
    dir: PathBuf,
    db_path: PathBuf,
    db: redb::Database,
    state: Mutex<State>,
    /// The meta of `DIR/snapshot`; held while that file is replaced.
    snapshot: Mutex<Option<Meta>>,
    /// The file a snapshot is being received into.
    receiving: Mutex<Option<TempFile>>,
    /// The database file again, to flush its pages outside redb's lock.
    db_file: File,
    /// Why the background durable commit failed, if it did (every apply
    /// then fails: fail-stop).
    failed: Mutex<Option<String>>,
    /// The last applied index, for watchers waiting on new changes.
    applied: tokio::sync::watch::Sender<u64>,
}

/// The state machine; clones share it (a clone is the snapshot builder).
#[derive(Clone)]
pub struct KvStateMachine {
    inner: Arc<Shared>,
}

pub use read::{BackupCut, KeyValue};

fn sm_err(e: Error) -> StorageError<NodeId> {
    StorageError::IO { source: StorageIOError::write_state_machine(AnyError::new(&e)) }
}

fn snap_err(e: Error) -> StorageError<NodeId> {
    StorageError::IO { source: StorageIOError::write_snapshot(None, AnyError::new(&e)) }
}

/// redb's errors as the crate's, naming the database file.
trait Db<T> {
    fn db(self, path: &Path) -> Result<T>;
}

impl<T, E: Into<redb::Error>> Db<T> for std::result::Result<T, E> {
    fn db(self, path: &Path) -> Result<T> {
        self.map_err(|e| Error::Db(path.to_owned(), e.into().to_string()))
    }
}

/// A write transaction's data table.
struct Table<'t>(redb::Table<'t, &'static str, (u64, &'static str)>, &'t Path);

impl Data for Table<'_> {
    fn get(&mut self, key: &str) -> Result<Option<String>> {
        Ok(self.0.get(key).db(self.1)?.map(|g| g.value().1.to_owned()))
    }

    fn set(&mut self, key: &str, value: &str, revision: u64) -> Result<Option<String>> {
        Ok(self.0.insert(key, (revision, value)).db(self.1)?.map(|g| g.value().1.to_owned()))
    }

    fn remove(&mut self, key: &str) -> Result<Option<String>> {
        Ok(self.0.remove(key).db(self.1)?.map(|g| g.value().1.to_owned()))
    }

    fn remove_range(&mut self, start: &str, end: Option<&str>) -> Result<Vec<String>> {
        let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut keys = Vec::new();
        for item in self.0.range::<&str>((Bound::Included(start), hi)).db(self.1)? {
            keys.push(item.db(self.1)?.0.value().to_owned());
        }
        for k in &keys {
            self.0.remove(k.as_str()).db(self.1)?;
        }
        Ok(keys)
    }
}

fn decode<T: serde::de::DeserializeOwned>(path: &Path, what: &str, b: &[u8]) -> Result<T> {
    serde_json::from_slice(b)
        .map_err(|e| Error::Corrupt(path.to_owned(), format!("{what} does not decode: {e}")))
}

fn encode<T: Serialize>(v: &T) -> Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(|e| Error::Encode(e.to_string()))
}

type AppliedState = (Option<LogId<NodeId>>, StoredMembership<NodeId, Member>);

impl KvStateMachine {
    /// Opens the state machine in `dir` (created if missing): its tables,
    /// the last snapshot's meta, and the migration of a JSON snapshot.
    pub fn open(dir: impl AsRef<Path>) -> Result<KvStateMachine> {
        let dir = dir.as_ref().to_owned();
        mmapkit::fs::create_dir_durably(&dir)?;
        let db_path = dir.join(DB_FILE);
        let file = mmapkit::fs::open_in_place(&db_path, mmapkit::fs::InPlace::Create)?;
        let backend = redb::backends::FileBackend::new(file).db(&db_path)?;
        let db = redb::Builder::new()
            .set_cache_size(CACHE_BYTES)
            .create_with_backend(backend)
            .db(&db_path)?;
        mmapkit::fs::sync_dir(&dir)?;
        let db_path2 = db_path.clone();
        let (tx, _) = tokio::sync::watch::channel(0);
        let sm = KvStateMachine {
            inner: Arc::new(Shared {
                dir,
                db_path,
                db,
                state: Mutex::new(State {
                    last_applied: None,
                    membership: StoredMembership::default(),
                    history: History::new(1, HISTORY_MAX, HISTORY_MAX_BYTES),
                }),
                snapshot: Mutex::new(None),
                receiving: Mutex::new(None),
                db_file: mmapkit::fs::open_in_place(&db_path2, mmapkit::fs::InPlace::Read)?,
                failed: Mutex::new(None),
                applied: tx,
            }),
        };
        // The tables exist from here on (read transactions need them).
        let txn = sm.write_txn(true)?;
        txn.open_table(DATA).db(&sm.inner.db_path)?;
        txn.open_table(META).db(&sm.inner.db_path)?;
        txn.commit().db(&sm.inner.db_path)?;
        let (mut applied, mut membership) = sm.read_meta()?;
        let path = sm.snapshot_path();
        if path.exists() {
            let mut head = [0u8; 1];
            let mut f = mmapkit::fs::open_in_place(&path, mmapkit::fs::InPlace::Read)?;
            let n = f.read(&mut head).map_err(|e| Error::Io(path.clone(), "read", e))?;
            let meta = if n == 1 && head[0] == b'{' {
                sm.migrate(&path, applied)?
            } else {
                f.seek(SeekFrom::Start(0)).map_err(|e| Error::Io(path.clone(), "seek", e))?;
                let (meta, mut reader) = snapshot::Reader::new(BufReader::new(f), &path)?;
                // Ahead of the tables only after a crash inside an install.
                if meta.last_log_id > applied {
                    let txn = sm.write_txn(true)?;
                    sm.fill(&txn, &mut reader, &meta)?;
                    txn.commit().db(&sm.inner.db_path)?;
                }
                meta
            };
            if meta.last_log_id > applied {
                (applied, membership) = (meta.last_log_id, meta.last_membership.clone());
            }
            *sm.inner.snapshot.lock().unwrap_or_else(|e| e.into_inner()) = Some(meta);
        }
        let index = applied.map_or(0, |l| l.index);
        {
            let mut st = sm.lock();
            st.last_applied = applied;
            st.membership = membership;
            st.history.reset(index + 1);
        }
        sm.inner.applied.send_replace(index);
        let weak = Arc::downgrade(&sm.inner);
        std::thread::Builder::new()
            .name("kv-durable".into())
            .spawn(move || durable_loop(weak))
            .map_err(|e| Error::Io(sm.inner.db_path.clone(), "spawn a thread", e))?;
        Ok(sm)
    }

    /// Makes every commit so far durable: the dirty pages are flushed
    /// first without redb's write lock (applies go on meanwhile), then one
    /// durable commit writes what is left and the header.
    fn commit_durably(&self) -> Result<()> {
        let p = &self.inner.db_path;
        self.inner.db_file.sync_data().map_err(|e| Error::Io(p.clone(), "fdatasync", e))?;
        self.write_txn(true)?.commit().db(p)
    }

    /// Loads the JSON snapshot at `path` into the tables (unless they are
    /// past it) and rewrites it in the binary format; its meta.
    fn migrate(&self, path: &Path, applied: Option<LogId<NodeId>>) -> Result<Meta> {
        let old: LegacySnapshot = {
            let map = mmapkit::map::Map::open(path, mmapkit::map::Mode::Read)?;
            map.read_with(|b| decode(path, "JSON snapshot", b))??
        };
        let tmp = TempFile::beside(path)?;
        {
            let w = BufWriter::with_capacity(1 << 20, snapshot::Paced::new(tmp.file()));
            let mut w = snapshot::Writer::new(w, &old.meta, path)?;
            for (k, v) in &old.data {
                w.push(k, v, old.revisions.get(k).copied().unwrap_or(0))?;
            }
            w.finish()?;
        }
        if old.meta.last_log_id > applied {
            let f = tmp.file().try_clone().map_err(|e| Error::Io(path.to_owned(), "dup", e))?;
            let mut f = BufReader::new(f);
            f.seek(SeekFrom::Start(0)).map_err(|e| Error::Io(path.to_owned(), "seek", e))?;
            let (meta, mut reader) = snapshot::Reader::new(f, tmp.path())?;
            let txn = self.write_txn(true)?;
            self.fill(&txn, &mut reader, &meta)?;
            txn.commit().db(&self.inner.db_path)?;
        }
        // The tables first: a crash before this rename migrates again.
        tmp.rename_to(path, true)?;
        Ok(old.meta)
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.inner.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn snapshot_path(&self) -> PathBuf {
        self.inner.dir.join("snapshot")
    }

    /// A write transaction: durable (fsync, and redb's quick repair so a
    /// crash later reopens without a scan of the file) or not.
    fn write_txn(&self, durable: bool) -> Result<redb::WriteTransaction> {
        let p = &self.inner.db_path;
        let mut txn = self.inner.db.begin_write().db(p)?;
        if durable {
            txn.set_quick_repair(true);
        } else {
            txn.set_durability(redb::Durability::None).db(p)?;
        }
        Ok(txn)
    }

    /// The last applied log id and membership the tables hold.
    fn read_meta(&self) -> Result<AppliedState> {
        let rtx = self.inner.db.begin_read().db(&self.inner.db_path)?;
        self.meta_of(&rtx)
    }

    fn meta_of(&self, rtx: &redb::ReadTransaction) -> Result<AppliedState> {
        let p = &self.inner.db_path;
        let t = rtx.open_table(META).db(p)?;
        let applied = match t.get(LAST_APPLIED).db(p)? {
            Some(g) => decode(p, "last applied", g.value())?,
            None => None,
        };
        let membership = match t.get(MEMBERSHIP).db(p)? {
            Some(g) => decode(p, "membership", g.value())?,
            None => StoredMembership::default(),
        };
        Ok((applied, membership))
    }

    fn put_meta(
        &self,
        txn: &redb::WriteTransaction,
        applied: &Option<LogId<NodeId>>,
        membership: Option<&StoredMembership<NodeId, Member>>,
    ) -> Result<()> {
        let p = &self.inner.db_path;
        let mut t = txn.open_table(META).db(p)?;
        t.insert(LAST_APPLIED, encode(applied)?.as_slice()).db(p)?;
        if let Some(m) = membership {
            t.insert(MEMBERSHIP, encode(m)?.as_slice()).db(p)?;
        }
        Ok(())
    }

    /// Replaces the tables' contents, in `txn`, with the snapshot `reader`
    /// reads (its meta `meta`), record by record; every record and the
    /// end's CRC are checked before the caller commits.
    fn fill(
        &self,
        txn: &redb::WriteTransaction,
        reader: &mut snapshot::Reader<impl Read>,
        meta: &Meta,
    ) -> Result<()> {
        let p = &self.inner.db_path;
        txn.delete_table(DATA).db(p)?;
        {
            let mut t = txn.open_table(DATA).db(p)?;
            while let Some(r) = reader.next_record()? {
                t.insert(r.key.as_str(), (r.mod_revision, r.value.as_str())).db(p)?;
            }
        }
        self.put_meta(txn, &meta.last_log_id, Some(&meta.last_membership))
    }

    /// Applies `entries` in one write transaction (not durable: see the
    /// module's doc), then publishes their changes to watchers.
    fn apply_blocking(
        &self,
        entries: impl IntoIterator<Item = Entry<KvConfig>>,
    ) -> Result<Vec<Response>> {
        let p = &self.inner.db_path;
        if let Some(why) = &*self.inner.failed.lock().unwrap_or_else(|e| e.into_inner()) {
            return Err(Error::Db(p.clone(), format!("a durable commit failed: {why}")));
        }
        let txn = self.write_txn(false)?;
        let (mut last, mut membership) = {
            let st = self.lock();
            (st.last_applied, st.membership.clone())
        };
        let mut membership_changed = false;
        let mut events = Vec::new();
        let mut out = Vec::new();
        {
            let mut table = Table(txn.open_table(DATA).db(p)?, p);
            for e in entries {
                last = Some(e.log_id);
                out.push(match e.payload {
                    EntryPayload::Blank => Response::default(),
                    EntryPayload::Normal(req) => {
                        let rev = e.log_id.index;
                        apply_changes(&mut table, req, rev, &mut |k, v| {
                            events.push(Event {
                                revision: rev,
                                key: k.to_owned(),
                                value: v.map(Into::into),
                            });
                        })?
                    }
                    EntryPayload::Membership(m) => {
                        membership = StoredMembership::new(Some(e.log_id), m);
                        membership_changed = true;
                        Response::default()
                    }
                });
            }
        }
        // In the data's transaction: the tables never hold an entry's
        // effect without knowing it was applied (a restart re-applies
        // exactly the entries after it).
        self.put_meta(&txn, &last, membership_changed.then_some(&membership))?;
        txn.commit().db(p)?;
        let applied = last.map_or(0, |l| l.index);
        {
            let mut st = self.lock();
            st.last_applied = last;
            st.membership = membership;
            for ev in events {
                st.history.push(ev);
            }
        }
        self.inner.applied.send_replace(applied);
        Ok(out)
    }

    /// A consistent cut of the tables (one read transaction, no lock
    /// held): its meta and the writer of its snapshot file (before any
    /// apply, the empty state). `durable`: every commit so far is made
    /// durable first (a built snapshot lets openraft purge the log up to
    /// it: a crash must not bring the tables back to before the cut, the
    /// entries that would re-apply gone).
    fn cut(&self, durable: bool) -> Result<(Meta, snapshot_file::Writer)> {
        let p = &self.inner.db_path;
        let rtx = self.inner.db.begin_read().db(p)?;
        let (last_log_id, last_membership) = self.meta_of(&rtx)?;
        if durable {
            self.commit_durably()?;
        }
        // The same cut, the same id: a state machine's state at an index
        // is one state (a transfer cut off resumes with the same id).
        let snapshot_id = match &last_log_id {
            Some(l) => format!("{}-{}", l.leader_id, l.index),
            // Before any apply: openraft's default meta, the state it
            // assumes without a snapshot.
            None => String::new(),
        };
        let meta = Meta { last_log_id, last_membership, snapshot_id };
        let write = cut_writer(rtx, meta.clone(), &self.inner);
        Ok((meta, write))
    }

    /// Installs the snapshot in `data` (its meta `meta`): the file is
    /// checked and loaded into one transaction, put in place durably, and
    /// then the transaction is committed durably.
    fn install_blocking(&self, meta: &Meta, mut data: File) -> Result<()> {
        use std::os::unix::fs::MetadataExt;
        let path = self.snapshot_path();
        let p = &path;
        let io = |what: &'static str| move |e: std::io::Error| Error::Io(p.clone(), what, e);
        let received = self.inner.receiving.lock().unwrap_or_else(|e| e.into_inner()).take();
        let ino = |f: &File| f.metadata().map(|m| (m.dev(), m.ino()));
        let tmp = match received {
            Some(t) if ino(t.file()).map_err(io("stat"))? == ino(&data).map_err(io("stat"))? => t,
            // Not the file `begin_receiving_snapshot` gave out (openraft's
            // test suite hands over another node's): copied, to own one.
            _ => {
                let mut t = TempFile::beside(&path)?;
                data.seek(SeekFrom::Start(0)).map_err(io("seek"))?;
                std::io::copy(&mut data, t.file_mut()).map_err(io("copy"))?;
                t
            }
        };
        drop(data);
        let mut f = tmp.file().try_clone().map_err(io("dup"))?;
        f.seek(SeekFrom::Start(0)).map_err(io("seek"))?;
        let (file_meta, mut reader) =
            snapshot::Reader::new(BufReader::with_capacity(1 << 20, f), &path)?;
        if file_meta != *meta {
            return Err(Error::Corrupt(
                path.clone(),
                format!("received snapshot is {file_meta:?}, its transfer said {meta:?}"),
            ));
        }
        let txn = self.write_txn(true)?;
        self.fill(&txn, &mut reader, meta)?;
        tmp.file().sync_all().map_err(io("fsync"))?;
        {
            // The commit point: from here a crash loads this file at open.
            let mut cur = self.inner.snapshot.lock().unwrap_or_else(|e| e.into_inner());
            tmp.rename_to(&path, false)?;
            *cur = Some(meta.clone());
        }
        mmapkit::fs::sync_dir(&self.inner.dir)?;
        txn.commit().db(&self.inner.db_path)?;
        let applied = meta.last_log_id.map_or(0, |l| l.index);
        {
            let mut st = self.lock();
            st.last_applied = meta.last_log_id;
            st.membership = meta.last_membership.clone();
            // The changes up to the snapshot were never seen here.
            st.history.reset(applied + 1);
        }
        self.inner.applied.send_replace(applied);
        Ok(())
    }
}

/// Commits durably every [`DURABLE_EVERY`] until the state machine is dropped.
fn durable_loop(weak: std::sync::Weak<Shared>) {
    let tick = Duration::from_millis(100);
    let mut since = Instant::now();
    loop {
        std::thread::sleep(tick);
        if weak.strong_count() == 0 {
            return;
        }
        // Held only for a tick: never the last owner but by a hair.
        let Some(inner) = weak.upgrade() else { return };
        if since.elapsed() < DURABLE_EVERY {
            // The tables' dirty pages go to disk a tick's worth at a time:
            // left to pile up, the durable commit's flush puts seconds of
            // writes in the disk's queue at once, ahead of the log's
            // per-append sync (writes stalled for up to a second with 1 GB
            // of 64 KiB values).
            mmapkit::fs::start_writeback(&inner.db_file, 0, 0);
            continue;
        }
        since = Instant::now();
        let sm = KvStateMachine { inner };
        if let Err(e) = sm.commit_durably() {
            *sm.inner.failed.lock().unwrap_or_else(|e| e.into_inner()) = Some(e.to_string());
            return;
        }
    }
}

/// Writes the snapshot file of the cut `rtx` of the tables in `db_path`
/// (its meta `meta`) into an unnamed file in `dir`, open at its start:
/// only sent, never the commit point of anything, so not synced. Holds no
/// state machine: a transfer in flight never keeps a stopped node's
/// tables open (only the read transaction, until it ends).
fn write_cut(rtx: redb::ReadTransaction, meta: &Meta, dir: &Path, db_path: &Path) -> Result<File> {
    let p = &db_path.to_owned();
    let path = dir.join("snapshot.send");
    let tmp = TempFile::beside(&path)?;
    {
        let w = BufWriter::with_capacity(1 << 20, snapshot::Paced::new(tmp.file()));
        let mut w = snapshot::Writer::new(w, meta, &path)?;
        let t = rtx.open_table(DATA).db(p)?;
        for item in t.iter().db(p)? {
            let (k, v) = item.db(p)?;
            let (rev, value) = v.value();
            w.push(k.value(), value, rev)?;
        }
        w.finish()?;
    }
    drop(rtx);
    let p = &path;
    let io = |what: &'static str| move |e: std::io::Error| Error::Io(p.clone(), what, e);
    let mut file = tmp.file().try_clone().map_err(io("dup"))?;
    file.seek(SeekFrom::Start(0)).map_err(io("seek"))?;
    // The name goes with `tmp`; the descriptor keeps the data.
    Ok(file)
}

/// The writer of the snapshot file of the cut `rtx` (see [`write_cut`]).
fn cut_writer(rtx: redb::ReadTransaction, meta: Meta, inner: &Shared) -> snapshot_file::Writer {
    let (dir, db_path) = (inner.dir.clone(), inner.db_path.clone());
    Box::new(move || write_cut(rtx, &meta, &dir, &db_path).map_err(std::io::Error::other))
}

impl RaftSnapshotBuilder<KvConfig> for KvStateMachine {
    async fn build_snapshot(
        &mut self,
    ) -> std::result::Result<Snapshot<KvConfig>, StorageError<NodeId>> {
        let sm = self.clone();
        let (meta, write) = crate::off_worker(move || sm.cut(true)).await.map_err(snap_err)?;
        Ok(Snapshot { meta, snapshot: Box::new(SnapshotFile::pending(write)) })
    }
}

impl RaftStateMachine<KvConfig> for KvStateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(&mut self) -> std::result::Result<AppliedState, StorageError<NodeId>> {
        let st = self.lock();
        Ok((st.last_applied, st.membership.clone()))
    }

    async fn apply<I>(
        &mut self,
        entries: I,
    ) -> std::result::Result<Vec<Response>, StorageError<NodeId>>
    where
        I: IntoIterator<Item = Entry<KvConfig>> + openraft::OptionalSend,
        I::IntoIter: openraft::OptionalSend,
    {
        // Inline (block_in_place): the write is mostly page-cache work,
        // and every client write waits for it.
        crate::blocking(|| self.apply_blocking(entries)).map_err(sm_err)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> std::result::Result<Box<SnapshotFile>, StorageError<NodeId>> {
        let path = self.snapshot_path();
        let tmp = TempFile::beside(&path).map_err(|e| sm_err(e.into()))?;
        let file = tmp
            .file()
            .try_clone()
            .and_then(SnapshotFile::receiving)
            .map_err(|e| sm_err(Error::Io(tmp.path().to_owned(), "dup", e)))?;
        // An unfinished earlier one is dropped (and its temp file removed).
        *self.inner.receiving.lock().unwrap_or_else(|e| e.into_inner()) = Some(tmp);
        Ok(Box::new(file))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<SnapshotFile>,
    ) -> std::result::Result<(), StorageError<NodeId>> {
        let path = self.snapshot_path();
        let data = snapshot
            .into_std()
            .await
            .map_err(|e| sm_err(Error::Io(path, "write the snapshot to install", e)))?;
        let (sm, meta) = (self.clone(), meta.clone());
        crate::off_worker(move || sm.install_blocking(&meta, data)).await.map_err(sm_err)
    }

    /// A cut of the tables as they are now (a state of every applied
    /// entry is a snapshot of a committed prefix; `None` before any
    /// apply): its file is written only if the data is read, by a
    /// follower's transfer.
    async fn get_current_snapshot(
        &mut self,
    ) -> std::result::Result<Option<Snapshot<KvConfig>>, StorageError<NodeId>> {
        let sm = self.clone();
        let (meta, write) = crate::off_worker(move || sm.cut(false)).await.map_err(snap_err)?;
        // Nothing applied: no snapshot (openraft's conformance suite).
        if meta.last_log_id.is_none() {
            return Ok(None);
        }
        Ok(Some(Snapshot { meta, snapshot: Box::new(SnapshotFile::pending(write)) }))
    }
}

mod command;
mod read;

#[cfg(test)]
mod tests;

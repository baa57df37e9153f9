//! A replicated key-value state machine: openraft's `RaftStateMachine`
//! over an in-memory map, snapshotted to a file that is read back through
//! a mapping.
//!
//! The map lives in memory; on restart it is rebuilt from the last
//! snapshot (`DIR/snapshot`, replaced atomically and durably) and openraft
//! re-applies the committed log entries after it. Snapshots are built and
//! installed through openraft's snapshot API (`build_snapshot`,
//! `begin_receiving_snapshot`/`install_snapshot`, `get_current_snapshot`).

use std::collections::BTreeMap;
use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{RaftSnapshotBuilder, RaftStateMachine, Snapshot, SnapshotMeta};
use openraft::{
    AnyError, Entry, EntryPayload, LogId, StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::member::Member;
use crate::watch::{Compacted, Event, History, HISTORY_MAX};
use crate::{Error, Result};

/// A client command.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Sets `key` to `value`.
    Set {
        /// The key written.
        key: String,
        /// Its new value.
        value: String,
    },
    /// Removes `key`.
    Delete {
        /// The key removed.
        key: String,
    },
    /// Compare-and-set: sets `key` to `value` (removes it when `value` is
    /// `None`) only if its current value equals `expected` (`None`: the
    /// key is absent).
    Cas {
        /// The key compared and set.
        key: String,
        /// The value it must have now (`None`: absent).
        expected: Option<String>,
        /// Its new value (`None`: remove it).
        value: Option<String>,
    },
    /// Removes every key in `[start, end)` (`end` `None`: to the last key).
    DeleteRange {
        /// The first key removed (inclusive).
        start: String,
        /// The end of the range (exclusive; `None`: no end).
        end: Option<String>,
    },
    /// Several clients' commands in one raft entry, applied in order and
    /// atomically (one `apply`, under the state's lock). Formed by the
    /// node's proposer (the private `batch` module), never sent by clients: openraft
    /// 0.9 has no batched client-write API, and one entry per command
    /// costs one log sync each. Entries written before batches existed
    /// hold one plain command and still apply.
    Batch(Vec<Request>),
}

/// What a command returns: the key's value before the command, and
/// whether it took effect (always for `Set`/`Delete`; for `Cas`, whether
/// `expected` matched).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// The key's value before the command (`None`: absent).
    pub previous: Option<String>,
    /// Absent in entries written before `Cas` existed: those took effect.
    #[serde(default = "yes")]
    pub ok: bool,
    /// For a `Batch`: each command's own response, in order (the fields
    /// above are then the defaults). Empty (and not serialized) otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub batch: Vec<Response>,
    /// For a `DeleteRange`: the keys it removed (0, not serialized, otherwise).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub deleted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

fn yes() -> bool {
    true
}

impl Default for Response {
    fn default() -> Self {
        Response { previous: None, ok: true, batch: Vec::new(), deleted: 0 }
    }
}

/// Applies one command to `data`.
#[cfg_attr(not(test), allow(dead_code, reason = "the batch module's tests apply through it"))]
pub(crate) fn apply_command(data: &mut BTreeMap<String, String>, req: Request) -> Response {
    apply_changes(data, req, &mut |_, _| {})
}

/// Applies one command to `data`, telling `changed` each key it sets
/// (`Some(value)`) or removes (`None`), in order.
fn apply_changes(
    data: &mut BTreeMap<String, String>,
    req: Request,
    changed: &mut dyn FnMut(&str, Option<&str>),
) -> Response {
    match req {
        Request::Set { key, value } => {
            changed(&key, Some(&value));
            Response { previous: data.insert(key, value), ..Response::default() }
        }
        Request::Delete { key } => {
            let previous = data.remove(&key);
            if previous.is_some() {
                changed(&key, None);
            }
            Response { previous, ..Response::default() }
        }
        Request::Cas { key, expected, value } => {
            let previous = data.get(&key).cloned();
            let ok = previous == expected;
            if ok {
                changed(&key, value.as_deref());
                match value {
                    Some(v) => data.insert(key, v),
                    None => data.remove(&key),
                };
            }
            Response { previous, ok, ..Response::default() }
        }
        Request::DeleteRange { start, end } => {
            let keys: Vec<String> = match &end {
                Some(e) if *e <= start => Vec::new(),
                Some(e) => data.range(start.clone()..e.clone()).map(|(k, _)| k.clone()).collect(),
                None => data.range(start.clone()..).map(|(k, _)| k.clone()).collect(),
            };
            for k in &keys {
                data.remove(k);
                changed(k, None);
            }
            Response { deleted: keys.len() as u64, ..Response::default() }
        }
        Request::Batch(reqs) => Response {
            batch: reqs.into_iter().map(|r| apply_changes(data, r, changed)).collect(),
            ..Response::default()
        },
    }
}

openraft::declare_raft_types!(
    /// The KV service's openraft types (node ids `u64`, nodes with an address).
    pub KvConfig:
        D = Request,
        R = Response,
        Node = Member,
);

/// A node id.
pub type NodeId = u64;

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<NodeId, Member>,
    data: BTreeMap<String, String>,
    /// Each key's revision (absent in snapshots from before revisions: 0).
    #[serde(default)]
    revisions: BTreeMap<String, u64>,
}

struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, Member>,
    data: BTreeMap<String, String>,
    /// Each key's revision: the log index of the entry that last set it.
    revisions: BTreeMap<String, u64>,
    /// Recent changes (`GET /kv/watch`).
    history: History,
    /// Metadata of the snapshot file, if one exists.
    snapshot: Option<SnapshotMeta<NodeId, Member>>,
    snapshots_built: u64,
}

/// The state machine; clones share it (a clone is the snapshot builder).
#[derive(Clone)]
pub struct KvStateMachine {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
    /// The last applied index, for watchers waiting on new changes.
    applied: Arc<tokio::sync::watch::Sender<u64>>,
}

/// One key as a range read returns it.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct KeyValue {
    /// The key.
    pub key: String,
    /// Its value.
    pub value: String,
    /// The revision of its last write (the log index of its entry).
    pub mod_revision: u64,
}

fn sm_err(e: Error) -> StorageError<NodeId> {
    StorageError::IO { source: StorageIOError::write_state_machine(AnyError::new(&e)) }
}

fn snap_err(e: Error) -> StorageError<NodeId> {
    StorageError::IO { source: StorageIOError::write_snapshot(None, AnyError::new(&e)) }
}

impl KvStateMachine {
    /// Opens the state machine in `dir` (created if missing), restoring
    /// the last snapshot.
    pub fn open(dir: impl AsRef<Path>) -> Result<KvStateMachine> {
        let dir = dir.as_ref().to_owned();
        mmapkit::fs::create_dir_durably(&dir)?;
        let mut st = State {
            last_applied: None,
            membership: StoredMembership::default(),
            data: BTreeMap::new(),
            revisions: BTreeMap::new(),
            history: History::new(1, HISTORY_MAX),
            snapshot: None,
            snapshots_built: 0,
        };
        let path = dir.join("snapshot");
        if path.exists() {
            let file = read_snapshot(&path)?;
            st.last_applied = file.meta.last_log_id;
            st.membership = file.meta.last_membership.clone();
            st.data = file.data;
            st.revisions = file.revisions;
            st.snapshot = Some(file.meta);
        }
        let applied = st.last_applied.map_or(0, |l| l.index);
        st.history.reset(applied + 1);
        let (tx, _) = tokio::sync::watch::channel(applied);
        Ok(KvStateMachine { dir, state: Arc::new(Mutex::new(st)), applied: Arc::new(tx) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `key` (a local read: linearizable only on a leader
    /// that checked its leadership, see `Raft::ensure_linearizable`).
    pub fn get(&self, key: &str) -> Option<String> {
        self.lock().data.get(key).cloned()
    }

    /// The value of `key` and its revision.
    pub fn get_with_revision(&self, key: &str) -> Option<(String, u64)> {
        let st = self.lock();
        let v = st.data.get(key)?.clone();
        Some((v, st.revisions.get(key).copied().unwrap_or(0)))
    }

    /// Keys in `[start, end)` (`end` `None`: no end), at most `limit`, and
    /// the key to continue from when more remain; with the last applied
    /// index (the revision the answer is at).
    pub fn range(
        &self,
        start: &str,
        end: Option<&str>,
        limit: usize,
    ) -> (Vec<KeyValue>, Option<String>, u64) {
        use std::ops::Bound;
        let st = self.lock();
        let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
        if end.is_some_and(|e| e <= start) {
            return (Vec::new(), None, st.last_applied.map_or(0, |l| l.index));
        }
        let mut it = st.data.range::<str, _>((Bound::Included(start), hi));
        let kvs: Vec<KeyValue> = it
            .by_ref()
            .take(limit)
            .map(|(k, v)| KeyValue {
                key: k.clone(),
                value: v.clone(),
                mod_revision: st.revisions.get(k).copied().unwrap_or(0),
            })
            .collect();
        let next = it.next().map(|(k, _)| k.clone());
        (kvs, next, st.last_applied.map_or(0, |l| l.index))
    }

    /// Changes of revision `from` or later whose key `matches` (see the
    /// `watch` module), and the revision to ask from next.
    pub fn changes(
        &self,
        from: u64,
        matches: impl Fn(&str) -> bool,
        max: usize,
    ) -> std::result::Result<(Vec<Event>, u64), Compacted> {
        let st = self.lock();
        st.history.since(from, matches, max, st.last_applied.map_or(0, |l| l.index))
    }

    /// Watches the last applied index.
    pub fn applied_index(&self) -> tokio::sync::watch::Receiver<u64> {
        self.applied.subscribe()
    }

    /// A copy of the whole map (for tests and checks).
    pub fn dump(&self) -> BTreeMap<String, String> {
        self.lock().data.clone()
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId<NodeId>> {
        self.lock().last_applied
    }

    fn snapshot_path(&self) -> PathBuf {
        self.dir.join("snapshot")
    }
}

/// Reads a snapshot file through a read-only mapping (no copy into a buffer).
fn read_snapshot(path: &Path) -> Result<SnapshotFile> {
    let map = mmapkit::map::Map::open(path, mmapkit::map::Mode::Read)?;
    map.read_with(|bytes| serde_json::from_slice::<SnapshotFile>(bytes))?
        .map_err(|e| Error::Corrupt(path.to_owned(), format!("snapshot does not decode: {e}")))
}

fn write_snapshot(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let mut f = mmapkit::fs::AtomicFile::create(path, &[])?;
    f.file_mut().write_all(bytes).map_err(|e| Error::Io(path.to_owned(), "write", e))?;
    f.commit(true)?;
    Ok(())
}

impl RaftSnapshotBuilder<KvConfig> for KvStateMachine {
    async fn build_snapshot(
        &mut self,
    ) -> std::result::Result<Snapshot<KvConfig>, StorageError<NodeId>> {
        // Serialized under the lock (a consistent cut), written outside it.
        let (meta, bytes) = {
            let mut st = self.lock();
            st.snapshots_built += 1;
            let id = match &st.last_applied {
                Some(l) => format!("{}-{}-{}", l.leader_id, l.index, st.snapshots_built),
                None => format!("--{}", st.snapshots_built),
            };
            let meta = SnapshotMeta {
                last_log_id: st.last_applied,
                last_membership: st.membership.clone(),
                snapshot_id: id,
            };
            let file =
                SnapshotFile { meta, data: st.data.clone(), revisions: st.revisions.clone() };
            let bytes =
                serde_json::to_vec(&file).map_err(|e| snap_err(Error::Encode(e.to_string())))?;
            (file.meta, bytes)
        };
        // fsync and rename off the async workers.
        let path = self.snapshot_path();
        let bytes = crate::off_worker(move || write_snapshot(&path, &bytes).map(|()| bytes))
            .await
            .map_err(snap_err)?;
        self.lock().snapshot = Some(meta.clone());
        Ok(Snapshot { meta, snapshot: Box::new(Cursor::new(bytes)) })
    }
}

impl RaftStateMachine<KvConfig> for KvStateMachine {
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> std::result::Result<
        (Option<LogId<NodeId>>, StoredMembership<NodeId, Member>),
        StorageError<NodeId>,
    > {
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
        let mut st = self.lock();
        let mut out = Vec::new();
        for e in entries {
            st.last_applied = Some(e.log_id);
            out.push(match e.payload {
                EntryPayload::Blank => Response::default(),
                EntryPayload::Normal(req) => {
                    let rev = e.log_id.index;
                    let State { data, revisions, history, .. } = &mut *st;
                    apply_changes(data, req, &mut |k, v| {
                        match v {
                            Some(_) => revisions.insert(k.to_owned(), rev),
                            None => revisions.remove(k),
                        };
                        history.push(Event {
                            revision: rev,
                            key: k.to_owned(),
                            value: v.map(Into::into),
                        });
                    })
                }
                EntryPayload::Membership(m) => {
                    st.membership = StoredMembership::new(Some(e.log_id), m);
                    Response::default()
                }
            });
        }
        let applied = st.last_applied.map_or(0, |l| l.index);
        drop(st);
        self.applied.send_replace(applied);
        Ok(out)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn begin_receiving_snapshot(
        &mut self,
    ) -> std::result::Result<Box<Cursor<Vec<u8>>>, StorageError<NodeId>> {
        Ok(Box::new(Cursor::new(Vec::new())))
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMeta<NodeId, Member>,
        snapshot: Box<Cursor<Vec<u8>>>,
    ) -> std::result::Result<(), StorageError<NodeId>> {
        let bytes = snapshot.into_inner();
        let path = self.snapshot_path();
        let file: SnapshotFile = serde_json::from_slice(&bytes).map_err(|e| {
            snap_err(Error::Corrupt(path.clone(), format!("received snapshot: {e}")))
        })?;
        // Durable before the state changes: a crash keeps old or new
        // (written off the async workers).
        crate::off_worker(move || write_snapshot(&path, &bytes)).await.map_err(sm_err)?;
        let mut st = self.lock();
        st.data = file.data;
        st.revisions = file.revisions;
        st.last_applied = meta.last_log_id;
        st.membership = meta.last_membership.clone();
        st.snapshot = Some(meta.clone());
        // The changes up to the snapshot were never seen here.
        let applied = st.last_applied.map_or(0, |l| l.index);
        st.history.reset(applied + 1);
        drop(st);
        self.applied.send_replace(applied);
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> std::result::Result<Option<Snapshot<KvConfig>>, StorageError<NodeId>> {
        if self.lock().snapshot.is_none() {
            return Ok(None);
        }
        let path = self.snapshot_path();
        let p = path.clone();
        let bytes = crate::off_worker(move || {
            let map = mmapkit::map::Map::open(&p, mmapkit::map::Mode::Read)?;
            Ok(map.read_with(|b| b.to_vec())?)
        })
        .await
        .map_err(snap_err)?;
        let file: SnapshotFile = serde_json::from_slice(&bytes).map_err(|e| {
            snap_err(Error::Corrupt(path.clone(), format!("snapshot does not decode: {e}")))
        })?;
        Ok(Some(Snapshot { meta: file.meta, snapshot: Box::new(Cursor::new(bytes)) }))
    }
}

#[cfg(test)]
mod tests {
    use openraft::{CommittedLeaderId, LogId};

    use super::*;

    fn entry(index: u64, req: Request) -> Entry<KvConfig> {
        Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), index),
            payload: EntryPayload::Normal(req),
        }
    }

    /// Entries as logs written before batches hold them (one plain command
    /// each) still decode and apply, and a single command is still stored
    /// in that form; a batch entry applies its commands in order, each with
    /// its own response (CAS results per command).
    #[test]
    fn old_single_entries_and_batch_entries_apply() {
        let dir = tempfile::tempdir().unwrap();
        let mut sm = KvStateMachine::open(dir.path()).unwrap();
        let old = [
            r#"{"log_id":{"leader_id":{"term":1,"node_id":1},"index":1},"payload":{"Normal":{"Set":{"key":"a","value":"1"}}}}"#,
            r#"{"log_id":{"leader_id":{"term":1,"node_id":1},"index":2},"payload":{"Normal":{"Cas":{"key":"a","expected":"1","value":"2"}}}}"#,
        ];
        let old: Vec<Entry<KvConfig>> =
            old.iter().map(|j| serde_json::from_str(j).unwrap()).collect();
        assert_eq!(
            serde_json::to_string(&old[0]).unwrap(),
            r#"{"log_id":{"leader_id":{"term":1,"node_id":1},"index":1},"payload":{"Normal":{"Set":{"key":"a","value":"1"}}}}"#
        );
        let cas = |exp: Option<&str>, v: Option<&str>| Request::Cas {
            key: "a".into(),
            expected: exp.map(Into::into),
            value: v.map(Into::into),
        };
        let batch = Request::Batch(vec![
            cas(Some("1"), Some("x")),
            cas(Some("2"), Some("3")),
            Request::Set { key: "b".into(), value: "v".into() },
            Request::Delete { key: "b".into() },
            cas(Some("3"), None),
        ]);
        // Through the log's encoding, as a follower or a restart reads it.
        let batch: Entry<KvConfig> =
            serde_json::from_slice(&serde_json::to_vec(&entry(3, batch)).unwrap()).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread().build().unwrap();
        let out = rt.block_on(sm.apply(old.into_iter().chain([batch]))).unwrap();
        let r = |previous: Option<&str>, ok: bool| Response {
            previous: previous.map(Into::into),
            ok,
            ..Response::default()
        };
        assert_eq!(out[0], r(None, true));
        assert_eq!(out[1], r(Some("1"), true));
        assert_eq!(
            out[2].batch,
            [
                r(Some("2"), false),
                r(Some("2"), true),
                r(None, true),
                r(Some("v"), true),
                r(Some("3"), true)
            ]
        );
        assert!(sm.dump().is_empty());
        assert_eq!(sm.last_applied().unwrap().index, 3);
        // A response to a single command serializes as before.
        assert_eq!(serde_json::to_string(&out[1]).unwrap(), r#"{"previous":"1","ok":true}"#);
    }
}

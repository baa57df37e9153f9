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
    AnyError, BasicNode, Entry, EntryPayload, LogId, StorageError, StorageIOError, StoredMembership,
};
use serde::{Deserialize, Serialize};

use crate::{Error, Result};

/// A client command.
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// Sets `key` to `value`.
    Set { key: String, value: String },
    /// Removes `key`.
    Delete { key: String },
    /// Compare-and-set: sets `key` to `value` (removes it when `value` is
    /// `None`) only if its current value equals `expected` (`None`: the
    /// key is absent).
    Cas { key: String, expected: Option<String>, value: Option<String> },
}

/// What a command returns: the key's value before the command, and
/// whether it took effect (always for `Set`/`Delete`; for `Cas`, whether
/// `expected` matched).
#[derive(Serialize, Deserialize, Debug, Clone, PartialEq, Eq)]
pub struct Response {
    pub previous: Option<String>,
    /// Absent in entries written before `Cas` existed: those took effect.
    #[serde(default = "yes")]
    pub ok: bool,
}

fn yes() -> bool {
    true
}

impl Default for Response {
    fn default() -> Self {
        Response { previous: None, ok: true }
    }
}

openraft::declare_raft_types!(
    /// The KV service's openraft types (node ids `u64`, nodes with an address).
    pub KvConfig:
        D = Request,
        R = Response,
);

/// A node id.
pub type NodeId = u64;

#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMeta<NodeId, BasicNode>,
    data: BTreeMap<String, String>,
}

#[derive(Default)]
struct State {
    last_applied: Option<LogId<NodeId>>,
    membership: StoredMembership<NodeId, BasicNode>,
    data: BTreeMap<String, String>,
    /// Metadata of the snapshot file, if one exists.
    snapshot: Option<SnapshotMeta<NodeId, BasicNode>>,
    snapshots_built: u64,
}

/// The state machine; clones share it (a clone is the snapshot builder).
#[derive(Clone)]
pub struct KvStateMachine {
    dir: PathBuf,
    state: Arc<Mutex<State>>,
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
        let mut st = State::default();
        let path = dir.join("snapshot");
        if path.exists() {
            let file = read_snapshot(&path)?;
            st.last_applied = file.meta.last_log_id;
            st.membership = file.meta.last_membership.clone();
            st.data = file.data;
            st.snapshot = Some(file.meta);
        }
        Ok(KvStateMachine { dir, state: Arc::new(Mutex::new(st)) })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The value of `key` (a local read: linearizable only on a leader
    /// that checked its leadership, see `Raft::ensure_linearizable`).
    pub fn get(&self, key: &str) -> Option<String> {
        self.lock().data.get(key).cloned()
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
            let file = SnapshotFile { meta, data: st.data.clone() };
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
        (Option<LogId<NodeId>>, StoredMembership<NodeId, BasicNode>),
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
                EntryPayload::Normal(Request::Set { key, value }) => {
                    Response { previous: st.data.insert(key, value), ok: true }
                }
                EntryPayload::Normal(Request::Delete { key }) => {
                    Response { previous: st.data.remove(&key), ok: true }
                }
                EntryPayload::Normal(Request::Cas { key, expected, value }) => {
                    let previous = st.data.get(&key).cloned();
                    let ok = previous == expected;
                    if ok {
                        match value {
                            Some(v) => st.data.insert(key, v),
                            None => st.data.remove(&key),
                        };
                    }
                    Response { previous, ok }
                }
                EntryPayload::Membership(m) => {
                    st.membership = StoredMembership::new(Some(e.log_id), m);
                    Response::default()
                }
            });
        }
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
        meta: &SnapshotMeta<NodeId, BasicNode>,
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
        st.last_applied = meta.last_log_id;
        st.membership = meta.last_membership.clone();
        st.snapshot = Some(meta.clone());
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

//! [`RocksLogStore`]: the benchmark's peer, a log store on RocksDB at
//! durability equal to [`crate::LogStore`]'s: every append is one
//! `WriteBatch` written with `sync = true` (RocksDB's WAL fsynced) before
//! openraft's flush callback fires. Entries are keyed by big-endian
//! index in the default column family, metadata (vote, committed, purge
//! point) in a `meta` column family. The same serde_json encoding of
//! entries as the mmapkit store.
//!
//! Our own, on the `rocksdb` crate: `openraft-rocksstore` 0.9 is fixed to
//! its own type config and state machine, so it cannot carry the KV
//! service's entries.

use std::fmt::Debug;
use std::marker::PhantomData;
use std::ops::{Bound, RangeBounds};
use std::path::Path;
use std::sync::Arc;

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{
    AnyError, LogId, OptionalSend, RaftLogId, RaftTypeConfig, StorageError, StorageIOError, Vote,
};
use rocksdb::{
    ColumnFamilyDescriptor, Direction, IteratorMode, Options, WriteBatch, WriteOptions, DB,
};
use serde::de::DeserializeOwned;
use serde::Serialize;

/// A RocksDB-backed log store; clones share the database.
pub struct RocksLogStore<C: RaftTypeConfig> {
    db: Arc<DB>,
    _c: PhantomData<C>,
}

impl<C: RaftTypeConfig> Clone for RocksLogStore<C> {
    fn clone(&self) -> Self {
        RocksLogStore { db: self.db.clone(), _c: PhantomData }
    }
}

fn err<NID: openraft::NodeId>(e: impl std::error::Error + 'static) -> StorageError<NID> {
    StorageError::IO { source: StorageIOError::write_logs(AnyError::new(&e)) }
}

impl<C: RaftTypeConfig> RocksLogStore<C>
where
    C::Entry: Serialize + DeserializeOwned,
{
    /// Opens (creating) the database in `dir`.
    pub fn open(dir: impl AsRef<Path>) -> Result<Self, rocksdb::Error> {
        let mut opts = Options::default();
        opts.create_if_missing(true);
        opts.create_missing_column_families(true);
        let cfs = vec![ColumnFamilyDescriptor::new("meta", Options::default())];
        let db = DB::open_cf_descriptors(&opts, dir, cfs)?;
        Ok(RocksLogStore { db: Arc::new(db), _c: PhantomData })
    }

    fn synced() -> WriteOptions {
        let mut w = WriteOptions::default();
        w.set_sync(true);
        w
    }

    fn get_meta<T: DeserializeOwned>(
        &self,
        key: &str,
    ) -> Result<Option<T>, StorageError<C::NodeId>> {
        let cf = self.db.cf_handle("meta").expect("meta column family");
        match self.db.get_cf(cf, key).map_err(err)? {
            Some(b) => Ok(Some(serde_json::from_slice(&b).map_err(err)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: Serialize>(
        &self,
        key: &str,
        v: &T,
        sync: bool,
    ) -> Result<(), StorageError<C::NodeId>> {
        let cf = self.db.cf_handle("meta").expect("meta column family");
        let b = serde_json::to_vec(v).map_err(err)?;
        let w = if sync { Self::synced() } else { WriteOptions::default() };
        self.db.put_cf_opt(cf, key, b, &w).map_err(err)
    }

    fn last_entry(&self) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        match self.db.iterator(IteratorMode::End).next() {
            Some(kv) => {
                let (_, v) = kv.map_err(err)?;
                let e: C::Entry = serde_json::from_slice(&v).map_err(err)?;
                Ok(Some(e.get_log_id().clone()))
            }
            None => Ok(None),
        }
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for RocksLogStore<C>
where
    C::Entry: Serialize + DeserializeOwned,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        let lo = match range.start_bound() {
            Bound::Included(&x) => x,
            Bound::Excluded(&x) => x + 1,
            Bound::Unbounded => 0,
        };
        let mut out = Vec::new();
        for kv in self.db.iterator(IteratorMode::From(&lo.to_be_bytes(), Direction::Forward)) {
            let (k, v) = kv.map_err(err)?;
            let idx = u64::from_be_bytes(k[..8].try_into().expect("8-byte key"));
            if !range.contains(&idx) {
                break;
            }
            out.push(serde_json::from_slice(&v).map_err(err)?);
        }
        Ok(out)
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for RocksLogStore<C>
where
    C::Entry: Serialize + DeserializeOwned,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let purged: Option<LogId<C::NodeId>> = self.get_meta("purged")?;
        let last = self.last_entry()?.or_else(|| purged.clone());
        Ok(LogState { last_purged_log_id: purged, last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.put_meta("vote", vote, true)
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        self.get_meta("vote")
    }

    async fn save_committed(
        &mut self,
        c: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        self.put_meta("committed", &c, false)
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.get_meta::<Option<LogId<C::NodeId>>>("committed")?.flatten())
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<C>,
    ) -> Result<(), StorageError<C::NodeId>>
    where
        I: IntoIterator<Item = C::Entry> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let mut batch = WriteBatch::default();
        for e in entries {
            batch.put(e.get_log_id().index.to_be_bytes(), serde_json::to_vec(&e).map_err(err)?);
        }
        // Synced: durable before the callback, as the mmapkit store.
        let r = crate::blocking(|| self.db.write_opt(batch, &Self::synced()));
        callback.log_io_completed(
            r.as_ref().map(|_| ()).map_err(|e| std::io::Error::other(e.to_string())),
        );
        r.map_err(err)
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.db
            .delete_range_cf_opt(
                self.db.cf_handle("default").expect("default"),
                log_id.index.to_be_bytes(),
                u64::MAX.to_be_bytes(),
                &Self::synced(),
            )
            .map_err(err)
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.put_meta("purged", &log_id, true)?;
        self.db
            .delete_range_cf_opt(
                self.db.cf_handle("default").expect("default"),
                0u64.to_be_bytes(),
                (log_id.index + 1).to_be_bytes(),
                &Self::synced(),
            )
            .map_err(err)
    }
}

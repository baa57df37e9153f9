//! [`MemLogStore`]: a log store in memory (no durability): the upper
//! bound the benchmark compares against.
//!
//! openraft's own `openraft-memstore` crate is fixed to its own type
//! config and state machine (and the v1 `RaftStorage` API), so it cannot
//! carry the KV service's entries; this is the same design (a `BTreeMap`
//! of entries behind a lock, the flush callback fired at once), generic
//! over the type config.

use std::collections::BTreeMap;
use std::fmt::Debug;
use std::ops::RangeBounds;
use std::sync::{Arc, Mutex, MutexGuard};

use openraft::storage::{LogFlushed, LogState, RaftLogReader, RaftLogStorage};
use openraft::{LogId, OptionalSend, RaftLogId, RaftTypeConfig, StorageError, Vote};

struct Inner<C: RaftTypeConfig> {
    vote: Option<Vote<C::NodeId>>,
    committed: Option<LogId<C::NodeId>>,
    purged: Option<LogId<C::NodeId>>,
    log: BTreeMap<u64, C::Entry>,
}

/// An in-memory log store; clones share it.
pub struct MemLogStore<C: RaftTypeConfig> {
    inner: Arc<Mutex<Inner<C>>>,
}

impl<C: RaftTypeConfig> Clone for MemLogStore<C> {
    fn clone(&self) -> Self {
        MemLogStore { inner: self.inner.clone() }
    }
}

impl<C: RaftTypeConfig> Default for MemLogStore<C> {
    fn default() -> Self {
        MemLogStore {
            inner: Arc::new(Mutex::new(Inner {
                vote: None,
                committed: None,
                purged: None,
                log: BTreeMap::new(),
            })),
        }
    }
}

impl<C: RaftTypeConfig> MemLogStore<C> {
    fn lock(&self) -> MutexGuard<'_, Inner<C>> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<C: RaftTypeConfig> RaftLogReader<C> for MemLogStore<C>
where
    C::Entry: Clone,
{
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<C::Entry>, StorageError<C::NodeId>> {
        Ok(self.lock().log.range(range).map(|(_, e)| e.clone()).collect())
    }
}

impl<C: RaftTypeConfig> RaftLogStorage<C> for MemLogStore<C>
where
    C::Entry: Clone,
{
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<C>, StorageError<C::NodeId>> {
        let g = self.lock();
        let last =
            g.log.values().next_back().map(|e| e.get_log_id().clone()).or_else(|| g.purged.clone());
        Ok(LogState { last_purged_log_id: g.purged.clone(), last_log_id: last })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.lock().vote = Some(vote.clone());
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.lock().vote.clone())
    }

    async fn save_committed(
        &mut self,
        c: Option<LogId<C::NodeId>>,
    ) -> Result<(), StorageError<C::NodeId>> {
        self.lock().committed = c;
        Ok(())
    }

    async fn read_committed(
        &mut self,
    ) -> Result<Option<LogId<C::NodeId>>, StorageError<C::NodeId>> {
        Ok(self.lock().committed.clone())
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
        {
            let mut g = self.lock();
            for e in entries {
                g.log.insert(e.get_log_id().index, e);
            }
        }
        callback.log_io_completed(Ok(()));
        Ok(())
    }

    async fn truncate(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        self.lock().log.split_off(&log_id.index);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId<C::NodeId>) -> Result<(), StorageError<C::NodeId>> {
        let mut g = self.lock();
        let keep = g.log.split_off(&(log_id.index + 1));
        g.log = keep;
        g.purged = Some(log_id);
        Ok(())
    }
}

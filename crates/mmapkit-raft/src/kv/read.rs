//! Reads of the state machine: keys, ranges, the watch window, and the
//! read transaction a backup is written from.

use super::*;

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

/// One read transaction of the state machine, to be written as a backup
/// ([`crate::backup`]); dropping it ends the transaction.
pub struct BackupCut {
    rtx: redb::ReadTransaction,
    revision: u64,
    path: PathBuf,
}

impl BackupCut {
    /// The revision of the cut.
    pub fn revision(&self) -> u64 {
        self.revision
    }

    /// Hands `key` every key of the cut in order (key, value, revision of
    /// its last write) until it returns `false`; whether it saw them all.
    /// The backup format's writer (`BackupCut::write`, in [`crate::backup`])
    /// reads the cut through it.
    pub(crate) fn each_key(&self, mut key: impl FnMut(&str, &str, u64) -> bool) -> Result<bool> {
        let p = &self.path;
        let t = self.rtx.open_table(DATA).db(p)?;
        for item in t.iter().db(p)? {
            let (k, v) = item.db(p)?;
            let (mod_revision, value) = v.value();
            if !key(k.value(), value, mod_revision) {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

impl KvStateMachine {
    /// The value of `key` (a local read: linearizable only on a leader
    /// that checked its leadership, see `Raft::ensure_linearizable`).
    pub fn get(&self, key: &str) -> Result<Option<String>> {
        Ok(self.get_with_revision(key)?.map(|(v, _)| v))
    }

    /// The value of `key` and its revision.
    pub fn get_with_revision(&self, key: &str) -> Result<Option<(String, u64)>> {
        let p = &self.inner.db_path;
        let rtx = self.inner.db.begin_read().db(p)?;
        let t = rtx.open_table(DATA).db(p)?;
        let got = t.get(key).db(p)?;
        Ok(got.map(|g| {
            let (rev, v) = g.value();
            (v.to_owned(), rev)
        }))
    }

    /// Keys in `[start, end)` (`end` `None`: no end), at most `limit`, and
    /// the key to continue from when more remain; with the last applied
    /// index (the revision the answer is at). One read transaction: a
    /// consistent cut.
    pub fn range(
        &self,
        start: &str,
        end: Option<&str>,
        limit: usize,
    ) -> Result<(Vec<KeyValue>, Option<String>, u64)> {
        let p = &self.inner.db_path;
        let rtx = self.inner.db.begin_read().db(p)?;
        let revision = self.meta_of(&rtx)?.0.map_or(0, |l| l.index);
        if end.is_some_and(|e| e <= start) {
            return Ok((Vec::new(), None, revision));
        }
        let t = rtx.open_table(DATA).db(p)?;
        let hi = end.map_or(Bound::Unbounded, Bound::Excluded);
        let mut kvs = Vec::new();
        for item in t.range::<&str>((Bound::Included(start), hi)).db(p)? {
            let (k, v) = item.db(p)?;
            if kvs.len() == limit {
                return Ok((kvs, Some(k.value().to_owned()), revision));
            }
            let (mod_revision, value) = v.value();
            kvs.push(KeyValue { key: k.value().to_owned(), value: value.to_owned(), mod_revision });
        }
        Ok((kvs, None, revision))
    }

    /// A consistent cut of every key for a backup: one read transaction,
    /// opened now (its revision fixed), written later by
    /// [`BackupCut::write`].
    pub fn backup_cut(&self) -> Result<BackupCut> {
        let path = self.inner.db_path.clone();
        let rtx = self.inner.db.begin_read().db(&path)?;
        let revision = self.meta_of(&rtx)?.0.map_or(0, |l| l.index);
        Ok(BackupCut { rtx, revision, path })
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
        self.inner.applied.subscribe()
    }

    /// A copy of the whole map (for tests and checks: it is all in memory).
    pub fn dump(&self) -> Result<BTreeMap<String, String>> {
        let (kvs, _, _) = self.range("", None, usize::MAX)?;
        Ok(kvs.into_iter().map(|kv| (kv.key, kv.value)).collect())
    }

    /// The last applied log id.
    pub fn last_applied(&self) -> Option<LogId<NodeId>> {
        self.lock().last_applied
    }
}

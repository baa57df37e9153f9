//! openraft's own conformance suite on mmapkit's log store and the KV
//! state machine, each test in a fresh temp directory.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use mmapkit_raft::kv::{KvConfig, KvStateMachine};
use mmapkit_raft::{LogStore, StoreOptions};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct Builder {
    segment_size: u64,
}

impl StoreBuilder<KvConfig, LogStore<KvConfig>, KvStateMachine, tempfile::TempDir> for Builder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore<KvConfig>, KvStateMachine), StorageError<u64>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let opts = StoreOptions::default().segment_size(self.segment_size);
        let log = LogStore::open(dir.path().join("log"), opts).expect("open log store");
        let sm = KvStateMachine::open(dir.path().join("sm")).expect("open state machine");
        Ok((dir, log, sm))
    }
}

#[test]
fn openraft_conformance_suite() {
    Suite::test_all(Builder { segment_size: 64 << 20 }).expect("conformance suite");
}

/// The same with 4 KiB segments: purges drop real segments and appends
/// roll over while the suite runs.
#[test]
fn openraft_conformance_suite_small_segments() {
    Suite::test_all(Builder { segment_size: 4096 }).expect("conformance suite");
}

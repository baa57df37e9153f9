//! openraft storage on mmapkit's commit log, and a replicated key-value
//! service built on it.
//!
//! * [`LogStore`]: openraft 0.9's `RaftLogStorage` + `RaftLogReader`
//!   (`storage-v2`) on [`mmapkit::log::CommitLog`], for any
//!   `RaftTypeConfig` whose entries serialize with serde. Vote and purge
//!   point are persisted atomically and durably; openraft's `LogFlushed`
//!   callback fires only after the entries are durable; reads check
//!   contiguity; purge and truncate are safe against concurrent readers.
//!   See [`log_store`] for the on-disk layout and every promise.
//! * [`kv`]: a key-value state machine on disk (redb) with streamed binary
//!   snapshots, and
//!   [`node`]: one KV node (openraft over HTTP on axum + reqwest), used by
//!   the `mmapkit-kv` binary, the cluster tests and the benchmark.
//!
//! It passes openraft's own conformance suite
//! (`openraft::testing::Suite::test_all`, see `tests/suite.rs`).
//!
//! ```no_run
//! use mmapkit_raft::{kv::{KvConfig, KvStateMachine}, LogStore, StoreOptions};
//! let log = LogStore::<KvConfig>::open("node1/log", StoreOptions::default())?;
//! let sm = KvStateMachine::open("node1/sm")?;
//! // openraft::Raft::new(1, config, network, log, sm).await
//! # Ok::<(), mmapkit_raft::Error>(())
//! ```
#![forbid(unsafe_code)]
#![warn(missing_docs)]
#![cfg_attr(test, allow(clippy::disallowed_methods, reason = "test fixtures are written directly"))]

pub mod backup;
mod batch;
mod chunk;
pub mod kv;
pub mod log_store;
pub mod mem;
pub mod member;
mod meta;
pub mod node;
#[cfg(feature = "rocksdb")]
pub mod rocks;
mod snapshot;
pub mod snapshot_file;
pub mod watch;

pub use log_store::{LogStore, StoreOptions};
pub use node::{cluster, query};

use std::path::PathBuf;

/// Errors of the storage layer (turned into openraft's `StorageError`
/// at the trait boundary).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the commit log or the atomic-output layer.
    #[error(transparent)]
    Log(#[from] mmapkit::Error),
    /// An I/O call on a path failed.
    #[error("{}: {}: {}", .0.display(), .1, .2)]
    Io(PathBuf, &'static str, #[source] std::io::Error),
    /// A metadata or snapshot file is damaged.
    #[error("{}: {}", .0.display(), .1)]
    Corrupt(PathBuf, String),
    /// Entries are not contiguous or do not carry the index they are
    /// stored at.
    #[error("raft log contiguity: {0}")]
    Gap(String),
    /// The state machine's database (redb) failed: the file and why.
    #[error("{}: {}", .0.display(), .1)]
    Db(PathBuf, String),
    /// A value did not serialize.
    #[error("encode: {0}")]
    Encode(String),
    /// A blocking storage call was cancelled (the runtime is shutting down).
    #[error("storage call cancelled: {0}")]
    Cancelled(String),
}

/// Runs `f`, a call that blocks on disk I/O (a write and its sync), from
/// async storage code: on a multi-threaded tokio runtime through
/// `block_in_place`, so the worker's other tasks (the HTTP server, the
/// replication streams) move to another thread instead of waiting behind
/// the sync; elsewhere (a current-thread runtime, no runtime) directly.
pub(crate) fn blocking<R>(f: impl FnOnce() -> R) -> R {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => f(),
    }
}

/// Runs `f`, storage work that blocks on disk I/O (fsync, rename,
/// directory removal), on tokio's blocking pool and awaits it: the async
/// workers stay free for heartbeats and HTTP however slow the disk is
/// (even on a current-thread runtime). A panic in `f` is resumed here.
pub(crate) async fn off_worker<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
        Err(e) => Err(Error::Cancelled(e.to_string())),
    }
}

/// [`off_worker`] for the hot path (every client write's append): on a
/// multi-threaded runtime through `block_in_place`, which hands the
/// worker's other tasks to another thread and runs `f` here, without the
/// two thread hand-offs of the blocking pool (3 nodes, 16 clients: ~20 %
/// more writes/s than `spawn_blocking`); elsewhere as [`off_worker`].
pub(crate) async fn off_worker_inline<T: Send + 'static>(
    f: impl FnOnce() -> Result<T> + Send + 'static,
) -> Result<T> {
    use tokio::runtime::{Handle, RuntimeFlavor};
    match Handle::try_current() {
        Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => tokio::task::block_in_place(f),
        _ => off_worker(f).await,
    }
}

/// The result of this crate's calls.
pub type Result<T, E = Error> = std::result::Result<T, E>;

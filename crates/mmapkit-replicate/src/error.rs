//! The crate's error: wraps the log's [`mmapkit::Error`] and says which
//! URL or directory an HTTP failure concerns.

use std::path::PathBuf;

/// What went wrong serving or following.
#[derive(Debug, thiserror::Error)]
pub enum ReplicateError {
    /// The local log (the served one, or the follower's) failed.
    #[error(transparent)]
    Log(#[from] mmapkit::Error),
    /// The leader no longer has entries the follower needs.
    #[error(
        "{url}: snapshot required: {dir} needs entry {need}, but the leader's log starts \
         at {leader_first} (it purged the entries before it); rebuild the follower from a \
         snapshot or a copy of the leader"
    )]
    SnapshotRequired {
        /// The leader.
        url: String,
        /// The follower's log.
        dir: PathBuf,
        /// First index the follower needs.
        need: u64,
        /// The leader's first index.
        leader_first: u64,
    },
    /// An entry arrived with a CRC that does not match; nothing from it on
    /// was appended.
    #[error(
        "{url}: entry {index} arrived damaged (its CRC32C does not match its bytes); refused \
         it: {dir} holds entries up to {kept}"
    )]
    Corrupt {
        /// The leader.
        url: String,
        /// The follower's log.
        dir: PathBuf,
        /// The damaged entry.
        index: u64,
        /// The follower's last index.
        kept: u64,
    },
    /// The leader's log is not (or no longer) the one this follower
    /// copies, or differs from it in a way the leader's truncation history
    /// does not explain. Nothing was truncated; following again with
    /// `reset` discards the follower's entries.
    #[error("{url}: {dir}: {detail}")]
    Diverged {
        /// The leader.
        url: String,
        /// The follower's log.
        dir: PathBuf,
        /// What differs.
        detail: String,
    },
    /// The server refused the token (or none was given).
    #[error("{url}: 401 Unauthorized: {detail}")]
    Unauthorized {
        /// The leader.
        url: String,
        /// The server's message.
        detail: String,
    },
    /// An HTTP failure: connection refused or dropped, an unexpected
    /// status, a malformed answer. `transient` ones are retried by the
    /// follower.
    #[error("{url}: {detail}")]
    Http {
        /// The request.
        url: String,
        /// HTTP status, if one came.
        status: Option<u16>,
        /// What happened.
        detail: String,
        /// Whether retrying may help (connection errors, 5xx, truncated bodies).
        transient: bool,
    },
    /// Bad options (bind address, URL, ...).
    #[error("{0}")]
    InvalidArgument(String),
    /// A thread or task of the server or follower panicked (a bug), not
    /// a problem with the options.
    #[error("{0}")]
    Panicked(String),
    /// The server could not bind or run.
    #[error("{addr}: {detail}")]
    Server {
        /// The address.
        addr: String,
        /// What happened.
        detail: String,
    },
}

impl ReplicateError {
    /// [`ReplicateError::Http`]: what happened asking `url`, with the
    /// status if one came; `transient` ones are retried.
    pub(crate) fn http(
        url: impl Into<String>,
        status: Option<u16>,
        detail: impl Into<String>,
        transient: bool,
    ) -> ReplicateError {
        ReplicateError::Http { url: url.into(), status, detail: detail.into(), transient }
    }

    /// Whether the follower retries after it (with backoff).
    pub fn is_transient(&self) -> bool {
        matches!(self, ReplicateError::Http { transient: true, .. })
    }
}

//! What a server hands out: the last index a follower may read, the
//! same for the watcher of a writable log, the poller of a read-only
//! one (`wake`) and each response's header, so none of them reach into
//! another for it.

use mmapkit::log::{CommitLog, DurableMark};

/// The last index a server hands out: the log's last entry, or by
/// default the last durable one (see [`crate::server::ServeOptions::serve_unsynced`]).
/// A log last written by a version that published no durable mark is
/// served whole, as before.
pub(crate) fn servable(log: &CommitLog, unsynced: bool) -> u64 {
    served_last(log.first_index(), log.last_index(), log.durable_mark(), unsynced)
}

/// [`servable`] of one view: its first and last index and the mark.
pub(crate) fn served_last(first: u64, last: u64, mark: Option<DurableMark>, unsynced: bool) -> u64 {
    match mark {
        Some(m) if !unsynced => last.min(m.durable.max(first - 1)),
        _ => last,
    }
}

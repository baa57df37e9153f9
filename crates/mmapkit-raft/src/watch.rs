//! Recent changes, for `GET /kv/watch`: every key written or deleted, in
//! apply order, tagged with its revision (the raft log index of the entry
//! that made it, so revisions agree on every node). A bounded window: a
//! watcher asking for revisions older than it holds is told so
//! ([`Compacted`], `410`) and re-reads the range, like etcd's compaction.

use std::collections::VecDeque;

use serde::{Deserialize, Serialize};

/// One change.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Event {
    /// The revision of the write (its entry's raft log index).
    pub revision: u64,
    /// The key changed.
    pub key: String,
    /// Its new value (`None`: deleted).
    pub value: Option<String>,
}

/// Changes kept at most (older ones are compacted away whole revisions at
/// a time).
pub const HISTORY_MAX: usize = 100_000;

/// Bytes of keys and values kept at most: the window's memory is bounded
/// by this, not by the size of the values written (100 000 changes of
/// 4 MiB values would be 400 GB).
pub const HISTORY_MAX_BYTES: usize = 32 << 20;

/// What one change counts against [`HISTORY_MAX_BYTES`].
fn size(e: &Event) -> usize {
    e.key.len() + e.value.as_ref().map_or(0, String::len) + std::mem::size_of::<Event>()
}

/// The revisions asked for are older than the window.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Compacted {
    /// The oldest revision still held.
    pub oldest: u64,
}

/// The window of recent changes.
#[derive(Debug)]
pub(crate) struct History {
    events: VecDeque<Event>,
    /// Every change of revision `oldest` or later is held.
    oldest: u64,
    cap: usize,
    bytes: usize,
    max_bytes: usize,
}

impl History {
    /// An empty window whose first revision is `next`, holding at most
    /// `cap` changes and `max_bytes` of them (see [`size`]).
    pub(crate) fn new(next: u64, cap: usize, max_bytes: usize) -> History {
        History { events: VecDeque::new(), oldest: next, cap: cap.max(1), bytes: 0, max_bytes }
    }

    /// Forgets everything: the next change is of revision `next` or later
    /// (after a restart or an installed snapshot).
    pub(crate) fn reset(&mut self, next: u64) {
        self.events.clear();
        self.bytes = 0;
        self.oldest = next;
    }

    pub(crate) fn push(&mut self, e: Event) {
        self.bytes += size(&e);
        self.events.push_back(e);
        while !self.events.is_empty()
            && (self.events.len() > self.cap || self.bytes > self.max_bytes)
        {
            // Whole revisions only: a watcher never gets half of one.
            let drop_rev = self.events[0].revision;
            while let Some(f) = self.events.front().filter(|f| f.revision == drop_rev) {
                self.bytes -= size(f);
                self.events.pop_front();
            }
            self.oldest = drop_rev + 1;
        }
    }

    /// Changes of revision `from` or later whose key `matches`, at most
    /// about `max` (whole revisions), and the revision to ask from next;
    /// `applied` is the last applied index (the window reaches it).
    pub(crate) fn since(
        &self,
        from: u64,
        matches: impl Fn(&str) -> bool,
        max: usize,
        applied: u64,
    ) -> Result<(Vec<Event>, u64), Compacted> {
        if from < self.oldest {
            return Err(Compacted { oldest: self.oldest });
        }
        let start = self.events.partition_point(|e| e.revision < from);
        let mut out: Vec<Event> = Vec::new();
        for e in self.events.range(start..) {
            if out.len() >= max && out.last().is_some_and(|l| l.revision != e.revision) {
                return Ok((out, e.revision));
            }
            if matches(&e.key) {
                out.push(e.clone());
            }
        }
        Ok((out, from.max(applied + 1)))
    }
}

#[cfg(test)]
mod tests;

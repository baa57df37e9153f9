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
}

impl History {
    /// An empty window whose first revision is `next`.
    pub(crate) fn new(next: u64, cap: usize) -> History {
        History { events: VecDeque::new(), oldest: next, cap: cap.max(1) }
    }

    /// Forgets everything: the next change is of revision `next` or later
    /// (after a restart or an installed snapshot).
    pub(crate) fn reset(&mut self, next: u64) {
        self.events.clear();
        self.oldest = next;
    }

    pub(crate) fn push(&mut self, e: Event) {
        self.events.push_back(e);
        if self.events.len() > self.cap {
            // Whole revisions only: a watcher never gets half of one.
            let drop_rev = self.events[0].revision;
            while self.events.front().is_some_and(|f| f.revision == drop_rev) {
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
mod tests {
    use super::*;

    fn ev(revision: u64, key: &str) -> Event {
        Event { revision, key: key.into(), value: Some("v".into()) }
    }

    #[test]
    fn whole_revisions_are_compacted_and_never_split() {
        let mut h = History::new(1, 3);
        for e in [ev(1, "a"), ev(2, "a"), ev(2, "b"), ev(3, "c")] {
            h.push(e);
        }
        assert_eq!(h.since(1, |_| true, 10, 3), Err(Compacted { oldest: 2 }));
        let (got, next) = h.since(2, |_| true, 1, 3).unwrap();
        assert_eq!(got, [ev(2, "a"), ev(2, "b")], "revision 2 whole though max is 1");
        assert_eq!(next, 3);
        let (got, next) = h.since(next, |k| k != "x", 10, 3).unwrap();
        assert_eq!((got, next), (vec![ev(3, "c")], 4));
        let (got, next) = h.since(4, |_| true, 10, 7).unwrap();
        assert_eq!((got, next), (vec![], 8), "revisions 4-7 changed nothing");
        h.reset(9);
        assert_eq!(h.since(8, |_| true, 10, 8), Err(Compacted { oldest: 9 }));
    }
}

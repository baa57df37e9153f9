//! Reconciling (step 2 of the algorithm): the follower's log brought in
//! line with the leader's by its truncation history, the follower record
//! (`DIR/follows`) kept, and divergences the history does not explain
//! reported with where both logs still agree.

use super::{save_followed, Ctx, Followed, LeaderState, TermAnswer};
use crate::{ReplicateError, Result};

impl Ctx {
    pub(super) fn snapshot_required(&self, need: u64, leader_first: u64) -> ReplicateError {
        ReplicateError::SnapshotRequired {
            url: self.base.clone(),
            dir: self.dir.clone(),
            need,
            leader_first,
        }
    }

    pub(super) fn diverged(&self, detail: String) -> ReplicateError {
        ReplicateError::Diverged { url: self.base.clone(), dir: self.dir.clone(), detail }
    }

    /// A difference from the leader that the state `st` does not explain:
    /// [`ReplicateError::Diverged`], unless a truncation started on the
    /// leader since `st` was read (or the view it came from had read the
    /// history just before a truncation began): the difference may be
    /// that truncation's, so the round is retried (transient) and the next
    /// one reconciles with the history that records it.
    async fn unexplained(&self, st: &LeaderState, detail: String) -> ReplicateError {
        let path = format!("/v1/state?since={}", self.followed.as_ref().map_or(0, |f| f.epoch));
        let why = match self.get_json::<LeaderState>(&path).await {
            Ok((200, Some(now))) if now.log_id == st.log_id && now.epoch == st.epoch => {
                let at = self.agreement(now.last_index).await;
                return self.diverged(format!("{detail}{at}"));
            }
            Ok((200, Some(now))) => format!(
                "the leader's log changed while this follower reconciled (epoch {} -> {})",
                st.epoch, now.epoch
            ),
            Ok((s, _)) => format!("{s} while checking the leader's state again"),
            Err(e) => format!("checking the leader's state again: {e}"),
        };
        // Not confirmed: the next round looks again.
        ReplicateError::http(self.url(&path), Some(200), format!("{why}; reconciling again"), true)
    }

    /// Truncates the follower's log after `index` (clamped to its range)
    /// on a blocking thread; counts what it dropped.
    async fn truncate_to(&mut self, index: u64) -> Result<()> {
        let log = self.log.clone();
        let (ff, fl) = (log.first_index(), log.last_index());
        let to = index.max(ff - 1);
        if to >= fl {
            return Ok(());
        }
        tokio::task::spawn_blocking(move || log.truncate_after(to))
            .await
            .map_err(|e| ReplicateError::Panicked(format!("the truncation failed: {e}")))??;
        self.report.truncated += fl - to;
        Ok(())
    }

    pub(super) async fn record(&mut self, f: Followed) -> Result<()> {
        if self.followed.as_ref() != Some(&f) {
            let dir = self.dir.clone();
            let g = f.clone();
            tokio::task::spawn_blocking(move || save_followed(&dir, &g)).await.map_err(|e| {
                ReplicateError::Panicked(format!("saving the record failed: {e}"))
            })??;
            self.followed = Some(f);
        }
        Ok(())
    }

    /// Brings the follower's log in line with the leader's (step 2).
    pub(super) async fn reconcile(&mut self, st: &LeaderState) -> Result<()> {
        let Some(id) = st.log_id.clone() else {
            return Err(self.diverged(
                "the leader's log has no id (an older version made it): open it for writing once \
                 on the leader, then follow it"
                    .into(),
            ));
        };
        let held = self.log.len();
        let same = self.followed.as_ref().is_some_and(|f| f.log_id == id);
        if !same {
            if held > 0 && !self.opts.reset {
                return Err(self.diverged(match &self.followed {
                    Some(f) => format!(
                        "the leader serves log {id}, but this follower copies log {} (was the \
                         leader's directory replaced?); follow with reset to discard its {held} \
                         entries and copy the new log",
                        f.log_id
                    ),
                    None => format!(
                        "this directory holds {held} entries but records no leader (a copy of \
                         another log?); follow with reset to discard them and copy log {id}"
                    ),
                }));
            }
            if held > 0 {
                let first = self.log.first_index();
                self.truncate_to(first - 1).await?;
            }
            // A new copy: only truncations from now on can cut it.
            self.record(Followed { log_id: id, epoch: st.epoch, tentative: None }).await?;
            self.opts.reset = false;
        } else {
            let r = self.followed.as_ref().expect("same").epoch;
            if st.epoch < r {
                return Err(self.diverged(format!(
                    "the leader's log {id} is at truncation epoch {}, behind the {r} this \
                     follower saw (was it restored from a backup?)",
                    st.epoch
                )));
            }
            if st.epoch > r {
                // The positive evidence: the leader's own record of what
                // its truncations since `r` cut.
                if let Some(cut) = st.cut_since {
                    self.truncate_to(cut).await?;
                }
                let tentative = self.followed.as_ref().and_then(|f| f.tentative);
                self.record(Followed { log_id: id, epoch: st.epoch, tentative }).await?;
            }
            self.settle_tentative(st.incarnation()).await?;
        }

        let log = self.log.clone();
        let (ff, fl) = (log.first_index(), log.last_index());
        if fl + 1 < st.first_index {
            return Err(self.snapshot_required(fl + 1, st.first_index));
        }
        if fl < ff || fl < st.first_index {
            return Ok(()); // empty, or its last entry was purged (committed) there
        }
        if fl > st.last_index && st.appended_index.is_some_and(|a| fl <= a) {
            // Entries the leader holds but has not synced (copied from it
            // while it served unsynced entries): not served until they
            // are durable there, when the checks below can be made.
            return Err(ReplicateError::http(
                self.url("/v1/state"),
                Some(200),
                format!(
                    "this follower holds entries up to {fl}, past the leader's last durable \
                     entry {}: waiting for the leader to sync them",
                    st.last_index
                ),
                true,
            ));
        }
        if fl > st.last_index {
            return Err(self
                .unexplained(
                    st,
                    format!(
                "the leader's log ends at entry {} but this follower holds entries up to {fl}, \
                 and the leader recorded no truncation of them: it lost entries it had served \
                 (a power loss before they were synced?); the follower's log was kept",
                st.last_index
            ),
                )
                .await);
        }
        let e = log.get(fl).map_err(ReplicateError::from)?;
        let (term, crc) = (e.term(), e.crc());
        let path = format!("/v1/term/{fl}");
        match self.get_json::<TermAnswer>(&path).await? {
            (200, Some(t)) if t.term == term && t.crc == crc => Ok(()),
            (200, Some(t)) => Err(self
                .unexplained(
                    st,
                    format!(
                "entry {fl} has term {} and CRC {:#010x} on the leader but term {term} and CRC \
                 {crc:#010x} here, and the leader recorded no truncation of it; the follower's \
                 log was kept",
                t.term, t.crc
            ),
                )
                .await),
            // Purged there meanwhile: it was committed.
            (410, _) => Ok(()),
            (s, _) => Err(ReplicateError::http(
                self.url(&path),
                Some(s),
                format!("{s} while checking entry {fl}; retrying"),
                true,
            )),
        }
    }

    /// Entries copied past the leader's durable mark (see [`Tentative`]):
    /// dropped if the leader's writer has reopened the log since (they
    /// may be gone there), else kept; the record is cleared once nothing
    /// tentative is left.
    async fn settle_tentative(&mut self, leader_incarnation: Option<u64>) -> Result<()> {
        let Some(f) = self.followed.clone() else { return Ok(()) };
        let Some(t) = f.tentative else { return Ok(()) };
        if leader_incarnation == Some(t.incarnation) && t.from <= self.log.last_index() {
            return Ok(());
        }
        if leader_incarnation != Some(t.incarnation) {
            self.truncate_to(t.from - 1).await?;
        }
        self.record(Followed { tentative: None, ..f }).await
    }

    /// Discards every entry this follower holds (`reset` of a diverged
    /// copy): the next reconcile copies the log afresh.
    pub(super) async fn discard(&mut self) -> Result<()> {
        let first = self.log.first_index();
        self.truncate_to(first - 1).await?;
        self.followed = None;
        Ok(())
    }

    /// Where this copy and the leader still agree, for a divergence's
    /// message: entries `upto`, `upto - 2`, `upto - 6`, `upto - 14`, ...
    /// are compared (term and CRC) until one matches, then the gap to the
    /// mismatch above it is halved: the answer is an entry that matches
    /// with the next one not matching.
    async fn agreement(&self, upto: u64) -> String {
        let first = self.log.first_index().max(1);
        let (mut hi, mut step) = (upto.min(self.log.last_index()) + 1, 1u64);
        let mut lo = None;
        while hi > first {
            let i = hi.saturating_sub(step).max(first);
            match self.same_entry(i).await {
                Some(true) => {
                    lo = Some(i);
                    break;
                }
                Some(false) => hi = i,
                None => break,
            }
            step *= 2;
        }
        let Some(mut lo) = lo else {
            return "; no entry checked is the same on both: follow with reset to copy the log \
                    again"
                .into();
        };
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            match self.same_entry(mid).await {
                Some(true) => lo = mid,
                Some(false) => hi = mid,
                None => break,
            }
        }
        format!(
            "; entry {lo} is the same on both (term and CRC), entry {} is not: keep the copy up \
             to it with `mmapkit log truncate {} {lo}`, or follow with reset to copy the log \
             again",
            lo + 1,
            self.dir.display()
        )
    }

    /// Whether entry `i` has the same term and CRC here and on the leader
    /// (`None`: not known, e.g. the leader did not answer).
    async fn same_entry(&self, i: u64) -> Option<bool> {
        let e = self.log.get(i).ok()?;
        match self.get_json::<TermAnswer>(&format!("/v1/term/{i}")).await {
            Ok((200, Some(t))) => Some(t.term == e.term() && t.crc == e.crc()),
            Ok((410 | 416, _)) => Some(false),
            _ => None,
        }
    }
}

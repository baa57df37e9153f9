//! A round of the follower (steps 3 and 4 of the algorithm): the
//! appender thread and the pipelined fetch loop, each page requested,
//! its head checked and its frames copied into batches.

use std::sync::{Arc, Mutex};

use mmapkit::log::Framed;
use tokio::sync::{mpsc, OwnedSemaphorePermit, Semaphore};

use super::request::{chain, header_u64};
use super::{Ctx, Fail, Followed, Tentative};
use crate::wire::Decoder;
use crate::{http, ReplicateError, Result};

/// Received entries on their way to the appender: framed in the log's
/// record format as they arrived, each CRC checked over the framed copy.
struct Batch {
    framed: Framed,
    _permit: Option<OwnedSemaphorePermit>,
}

/// Batch buffers handed back by the appender for reuse: warm memory, so
/// neither side takes page faults on fresh buffers, and the received
/// chunks are released as soon as their entries are copied (the HTTP
/// client reuses its read buffer).
#[derive(Clone, Default)]
struct Pool(Arc<Mutex<Vec<Framed>>>);

impl Pool {
    /// An empty batch from `first`, with room for `bytes` of records.
    fn take(&self, first: u64, bytes: usize) -> Framed {
        let mut f = lock(&self.0).pop().unwrap_or_default();
        f.reset(first);
        f.reserve(bytes + (64 << 10));
        f
    }
    /// Keeps `f` for reuse unless a large entry made it much larger than a batch.
    fn give(&self, f: Framed, bytes: usize) {
        if f.capacity() <= 4 * bytes + (64 << 10) {
            lock(&self.0).push(f);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// A page request sent before the page it follows has arrived (see the
/// fetch loop); dropping it aborts the request.
struct Ahead {
    from: u64,
    task: tokio::task::JoinHandle<Result<reqwest::Response>>,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The appender's end of a round: the batch being filled, the channel
/// to the appender, the budget of bytes received but not yet appended,
/// and the buffers handed back.
struct Outbox<'p> {
    tx: mpsc::UnboundedSender<Batch>,
    budget: Arc<Semaphore>,
    batch: Framed,
    pool: &'p Pool,
}

/// Where the copy stands: the next index it needs, and the term and CRC
/// of the entry before it (`None`: there is none here).
#[derive(Clone, Copy)]
struct Cursor {
    next: u64,
    prev: Option<(u64, u32)>,
}

/// A page's answer (a 200), the URL it was asked for at, and whether it
/// was asked for ahead (then its head must name the entry before it).
struct Page {
    resp: reqwest::Response,
    url: String,
    pipelined: bool,
}

/// What a checked page head says: entries in the page, and the last
/// index the leader serves.
struct PageHead {
    count: u64,
    leader_last: u64,
}

impl Ctx {
    pub(super) async fn round(&mut self) -> std::result::Result<(), Fail> {
        let st = match self.leader_state().await {
            Err(ReplicateError::Diverged { .. }) if self.opts.reset => {
                self.discard().await?;
                self.leader_state().await?
            }
            r => r?,
        };
        match self.reconcile(&st).await {
            // With reset, a copy that differs from its own log is copied
            // again, as one of another log is.
            Err(ReplicateError::Diverged { .. }) if self.opts.reset => {
                self.discard().await?;
                self.reconcile(&st).await?;
            }
            r => r?,
        }

        // The appender: appends batches in order on a blocking thread and
        // hands their buffers back for reuse.
        let (tx, mut rx) = mpsc::unbounded_channel::<Batch>();
        let log = self.log.clone();
        let pool = Pool::default();
        let (back, batch_bytes) = (pool.clone(), self.opts.batch_bytes);
        let appender = tokio::task::spawn_blocking(move || {
            let (mut n, mut bytes) = (0u64, 0u64);
            while let Some(mut b) = rx.blocking_recv() {
                // The batch's first index must be the log's next (else
                // nothing is written: another writer changed the log).
                if let Err(e) = log.append_framed(&mut b.framed) {
                    return (n, bytes, Err(e.into()));
                }
                n += b.framed.len() as u64;
                bytes += b.framed.payload_bytes() as u64;
                back.give(b.framed, batch_bytes);
            }
            (n, bytes, Ok(()))
        });
        let fetched = self.fetch(tx, &pool).await;
        let (n, bytes, appended) = appender.await.unwrap_or((
            0,
            0,
            Err(ReplicateError::Panicked("the appender panicked".into())),
        ));
        self.report.appended += n;
        self.report.bytes += bytes;
        appended?;
        fetched
    }

    /// `/v1/entries` from `from`: a long poll when following and `wait`.
    fn page_path(&self, from: u64, wait: bool, prev: Option<(u64, u32)>) -> String {
        let wait = if wait && !self.opts.once { self.opts.long_poll.as_millis() as u64 } else { 0 };
        let mut path = format!(
            "/v1/entries?from={from}&max_count={}&max_bytes={}&wait_ms={wait}",
            self.opts.page_count, self.opts.page_bytes
        );
        if let Some((t, c)) = prev {
            path.push_str(&format!("&prev_term={t}&prev_crc={c}"));
        }
        path
    }

    /// The fetch loop of a round (step 3); batches go to `tx`.
    ///
    /// Two pages are in flight: once a page's head says how many entries
    /// it holds and the leader has more, the next page is asked for on a
    /// second connection, so the leader reads it and starts sending while
    /// this one streams in and is appended. That request cannot carry the
    /// entry before it (not received yet): the server names it instead
    /// (`x-mmapkit-prev-term`/`-crc`, read in the same version of the log
    /// as the page), and the page is taken only if that is the entry this
    /// follower received last, the check the server makes for a request
    /// that carries it.
    ///
    /// Each page: [`request_page`](Ctx::request_page) (the request and its
    /// status), [`check_head`](Ctx::check_head) (its headers, before any of
    /// it is taken), then [`copy_frames`](Ctx::copy_frames) (its body).
    async fn fetch(
        &mut self,
        tx: mpsc::UnboundedSender<Batch>,
        pool: &Pool,
    ) -> std::result::Result<(), Fail> {
        let budget = Arc::new(Semaphore::new(self.opts.max_in_flight.min(Semaphore::MAX_PERMITS)));
        let next = self.log.last_index() + 1;
        let prev = if next > self.log.first_index() {
            let e = self.log.get(next - 1).map_err(ReplicateError::from)?;
            Some((e.term(), e.crc()))
        } else {
            None
        };
        let mut at = Cursor { next, prev };
        // A frame's length comes from the network: nothing larger than the
        // in-flight budget is accepted (or allocated for).
        let max_frame = self.opts.max_in_flight.min(u32::MAX as usize);
        let batch = pool.take(next, self.opts.batch_bytes);
        let mut out = Outbox { tx, budget, batch, pool };
        let mut ahead: Option<Ahead> = None;
        loop {
            // A stopped appender (its append failed: a full disk) ends the
            // round at once, which reports its error; a continuous
            // follower must not go on fetching what it cannot keep.
            if self.stop.is_stopped() || out.tx.is_closed() {
                return Ok(());
            }
            let Some(page) = self.request_page(&mut ahead, at, &out.tx).await? else {
                return Ok(());
            };
            let Some(head) = self.check_head(&page, at, &mut out).await? else {
                continue;
            };
            // The leader has entries past this page: ask for the next one now.
            let after = at.next.saturating_add(head.count);
            if self.pipeline && head.count > 0 && after <= head.leader_last {
                let path = self.page_path(after, false, None);
                ahead = Some(Ahead { from: after, task: tokio::spawn(self.get(&path)) });
            }
            self.copy_frames(page, &mut at, head.count, max_frame, &mut out).await?;
            if self.opts.once && at.next > head.leader_last {
                // Done only if no truncation started since what was
                // copied was read; else the next round reconciles.
                drop(out);
                let st = self.leader_state().await?;
                let f = self.followed.as_ref().expect("recorded in reconcile");
                if st.log_id.as_deref() == Some(f.log_id.as_str()) && st.epoch == f.epoch {
                    return Ok(());
                }
                return Err(page_refused(
                    self.url("/v1/state"),
                    "the leader's log was truncated while it was copied; reconciling",
                ));
            }
        }
    }

    /// The page from `at.next`: the one asked for ahead if it starts
    /// there, else a request that carries the entry before it; only a
    /// 200 is returned (`None`: stopped, or the appender stopped).
    async fn request_page(
        &self,
        ahead: &mut Option<Ahead>,
        at: Cursor,
        tx: &mpsc::UnboundedSender<Batch>,
    ) -> std::result::Result<Option<Page>, Fail> {
        let next = at.next;
        let page = match ahead.take() {
            Some(mut a) if a.from == next => {
                let url = self.url(&self.page_path(next, false, None));
                let resp = tokio::select! {
                    r = &mut a.task => r.map_err(|e| {
                        ReplicateError::Panicked(format!("a page request failed: {e}"))
                    })??,
                    _ = self.stop.stopped() => return Ok(None),
                    _ = tx.closed() => return Ok(None),
                };
                Page { resp, url, pipelined: true }
            }
            _ => {
                let path = self.page_path(next, true, at.prev);
                let resp = tokio::select! {
                    r = self.get(&path) => r?,
                    _ = self.stop.stopped() => return Ok(None),
                    _ = tx.closed() => return Ok(None),
                };
                Page { resp, url: self.url(&path), pipelined: false }
            }
        };
        match page.resp.status().as_u16() {
            200 => Ok(Some(page)),
            410 => {
                let first = header_u64(&page.resp, http::X_FIRST_INDEX).unwrap_or(next + 1);
                Err(self.snapshot_required(next, first).into())
            }
            s => {
                // 409 (log mismatch) or 416 (the leader's log is
                // shorter): the leader changed; reconcile in a new round.
                let text = page.resp.text().await.unwrap_or_default();
                Err(ReplicateError::http(page.url, Some(s), format!("{s}: {}", text.trim()), true)
                    .into())
            }
        }
    }

    /// Checks a page's headers before any of its entries is taken: that
    /// a page asked for ahead follows the entry received last, that it
    /// comes from the log followed, its read's tag (which lowers the
    /// recorded epoch, durably) and the leader's durable mark (entries
    /// past it are recorded as tentative first). `None`: the leader does
    /// not name the entry before the page, so pages are asked for one at
    /// a time from now on and this one again.
    async fn check_head(
        &mut self,
        page: &Page,
        at: Cursor,
        out: &mut Outbox<'_>,
    ) -> std::result::Result<Option<PageHead>, Fail> {
        let (resp, url, next, prev) = (&page.resp, &page.url, at.next, at.prev);
        if page.pipelined {
            let named = (header_u64(resp, http::X_PREV_TERM), header_u64(resp, http::X_PREV_CRC));
            let first = header_u64(resp, http::X_FIRST_INDEX);
            match (named, prev) {
                ((Some(t), Some(c)), Some((pt, pc))) if t == pt && c == u64::from(pc) => {}
                ((Some(t), Some(c)), _) => {
                    // What a server that checks prev_term/prev_crc answers 409 to.
                    let detail = format!(
                        "log mismatch: entry {} has term {t} and CRC {c:#010x} on the leader, not \
                         the {prev:?} received; reconciling",
                        next - 1
                    );
                    return Err(ReplicateError::http(url, Some(409), detail, true).into());
                }
                // The entry before the page was purged there (committed).
                ((None, None), _) if first.is_some_and(|f| f >= next) => {}
                _ => {
                    // A server that does not name it: ask again, one
                    // page at a time, with the entry before each page.
                    self.pipeline = false;
                    return Ok(None);
                }
            }
        }
        let leader_last = header_u64(resp, http::X_LAST_INDEX).unwrap_or(0);
        // The page must come from the log followed; its read's tag
        // lowers the recorded epoch (durably, before any of its
        // entries is appended) so a truncation racing the read is
        // caught by the next state check.
        let page_id = resp.headers().get(http::X_LOG_ID).and_then(|v| v.to_str().ok());
        if page_id != self.followed.as_ref().map(|f| f.log_id.as_str()) {
            return Err(page_refused(
                url,
                "the page came from another log; checking the leader again",
            ));
        }
        let Some(tag) = header_u64(resp, http::X_EPOCH) else {
            let detail = "the page has no x-mmapkit-epoch (an older server?)";
            return Err(ReplicateError::http(url, Some(200), detail, false).into());
        };
        if let Some(f) = self.followed.clone() {
            if tag > f.epoch {
                // Read after a truncation this follower has not
                // accounted for completed: what it holds may be cut
                // (a continuous follower asks no state while its pages
                // chain on), so reconcile before appending anything.
                self.send(out, next).await?;
                return Err(page_refused(url, "the leader truncated its log; reconciling"));
            }
            if tag < f.epoch {
                self.record(Followed { epoch: tag, ..f }).await?;
            }
        }
        let count = header_u64(resp, http::X_COUNT).unwrap_or(0);
        let mark = (header_u64(resp, http::X_DURABLE), header_u64(resp, http::X_INCARNATION));
        if let (Some(f), (Some(durable), Some(inc))) = (self.followed.clone(), mark) {
            let page_last = (next + count).saturating_sub(1);
            match f.tentative {
                // Past the leader's durable mark: recorded (durably)
                // before any of it is appended.
                None if count > 0 && page_last > durable => {
                    let from = next.max(durable + 1);
                    let tentative = Some(Tentative { incarnation: inc, from });
                    self.record(Followed { tentative, ..f }).await?;
                }
                Some(t) if t.incarnation != inc => {
                    self.send(out, next).await?;
                    return Err(page_refused(
                        url,
                        "the leader's writer reopened its log; checking the entries copied \
                         before it synced them",
                    ));
                }
                // Everything held and this page are durable there now.
                Some(_) if page_last <= durable => {
                    self.record(Followed { tentative: None, ..f }).await?;
                }
                _ => {}
            }
        }
        Ok(Some(PageHead { count, leader_last }))
    }

    /// Decodes the page's body as it streams in and copies each frame
    /// into the batch (its index must be `at.next`; its CRC is checked
    /// over the copy), handing full batches to the appender; `count`
    /// entries must arrive, and nothing after them.
    async fn copy_frames(
        &self,
        page: Page,
        at: &mut Cursor,
        count: u64,
        max_frame: usize,
        out: &mut Outbox<'_>,
    ) -> std::result::Result<(), Fail> {
        let Page { mut resp, url, .. } = page;
        let mut dec = Decoder::default();
        let mut got = 0u64;
        loop {
            let chunk = match resp.chunk().await {
                Ok(Some(c)) => c,
                Ok(None) => break,
                Err(e) => {
                    self.send(out, at.next).await?;
                    return Err(page_refused(
                        url,
                        format!("connection lost after entry {}: {}", at.next - 1, chain(&e)),
                    ));
                }
            };
            dec.push(chunk);
            loop {
                let f = match dec.next_frame(max_frame) {
                    Ok(Some(f)) => f,
                    Ok(None) => break,
                    Err(_) => {
                        self.send(out, at.next).await?;
                        return Err(Fail::Corrupt(at.next));
                    }
                };
                // Copied into the batch as it is framed in the log; the
                // CRC is checked over that copy.
                if f.index != at.next || !out.batch.push_checked(f.term, &f.payload, f.crc) {
                    self.send(out, at.next).await?;
                    return Err(Fail::Corrupt(at.next));
                }
                at.prev = Some((f.term, f.crc));
                at.next += 1;
                got += 1;
                if out.batch.framed_bytes() >= self.opts.batch_bytes {
                    self.send(out, at.next).await?;
                }
            }
        }
        self.send(out, at.next).await?;
        if got != count || dec.pending() != 0 {
            let detail = format!("the page ended early: {got} of {count} entries arrived");
            return Err(page_refused(url, detail));
        }
        Ok(())
    }

    /// Hands the batch (if any) to the appender once the in-flight budget
    /// allows; the next batch starts at `next`.
    async fn send(&self, out: &mut Outbox<'_>, next: u64) -> Result<()> {
        if out.batch.is_empty() {
            out.batch.reset(next);
            return Ok(());
        }
        let want =
            out.batch.framed_bytes().clamp(1, self.opts.max_in_flight.min(Semaphore::MAX_PERMITS));
        let permit = out.budget.clone().acquire_many_owned(want as u32).await.ok();
        let framed = std::mem::replace(&mut out.batch, out.pool.take(next, self.opts.batch_bytes));
        // A closed channel: the appender stopped, and the round reports its error.
        let _ = out.tx.send(Batch { framed, _permit: permit });
        Ok(())
    }
}

/// A page not taken (a 200 whose head or body says the leader changed, or
/// that it broke off): retried after a fresh look at the leader's state.
fn page_refused(url: impl Into<String>, detail: impl Into<String>) -> Fail {
    ReplicateError::http(url, Some(200), detail, true).into()
}

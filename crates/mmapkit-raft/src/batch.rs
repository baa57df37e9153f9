//! Batched proposals: client writes that arrive while proposals are in
//! flight wait and go into the next one, as one raft entry
//! ([`Request::Batch`]).
//!
//! openraft 0.9 has no batched client-write API: each `client_write` is
//! one entry, appended and synced on its own (3,000 writes, 3,000 log
//! syncs), and 0.10, which batches, is not released. So the node batches
//! above it: one proposer task per node takes the writes queued by the
//! HTTP handlers, proposes them as one entry (a single write as the plain
//! command, as before batches existed) and answers each write with its own
//! command's [`Response`] once the entry is committed and applied; an
//! error (not the leader, stopping) goes to every write of that proposal,
//! each handler dealing with it on its own (forwarding its own body).
//!
//! At most [`Limits::in_flight`] proposals run at once: the first write
//! after an idle spell is proposed at once (no added latency for a lone
//! client), and writes arriving meanwhile fill the next proposal. A
//! proposal holds at most [`Limits::commands`] commands and
//! [`Limits::bytes`] bytes of their JSON, so it stays under the ~1 MiB
//! append split and the `/raft/append` body limit; a single larger
//! command goes alone. A write whose handler gave up (timeout, client
//! gone) before it was proposed is dropped, not proposed.

use std::future::Future;
use std::sync::Arc;

use openraft::error::{ClientWriteError, RaftError};
use openraft::raft::ClientWriteResponse;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::kv::{KvConfig, NodeId, Request};
use crate::member::Member;

/// What `POST /kv/write` answers with `200`: a proposal's outcome, as
/// openraft's `client_write` gives it.
pub type WriteResult =
    Result<ClientWriteResponse<KvConfig>, RaftError<NodeId, ClientWriteError<NodeId, Member>>>;

/// Bounds of the batching.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Commands per proposal at most.
    pub commands: usize,
    /// JSON bytes of the commands per proposal at most (a single larger
    /// command goes alone).
    pub bytes: usize,
    /// Proposals in flight at most.
    pub in_flight: usize,
}

/// The node's limits: 1,024 commands, 512 KiB (half of
/// [`crate::node::APPEND_BUDGET`], so an append call still carries at
/// least one whole batch), two proposals in flight (one being synced or
/// replicated while the next one fills; with one, the clients answered by
/// a proposal all land in the proposal after next).
pub const LIMITS: Limits = Limits { commands: 1024, bytes: 512 << 10, in_flight: 2 };

struct Pending {
    req: Request,
    bytes: usize,
    reply: oneshot::Sender<WriteResult>,
}

/// The handle the HTTP handlers queue writes on (clones share the task).
#[derive(Clone)]
pub struct Proposer {
    tx: mpsc::UnboundedSender<Pending>,
}

/// The write was neither answered nor refused: the proposer stopped (the
/// node is shutting down) after it may have proposed it.
#[derive(Debug, thiserror::Error)]
#[error("the proposer stopped before the write was answered")]
pub struct Lost;

impl Proposer {
    /// Starts the proposer task; `propose` submits one entry's command
    /// (`Raft::client_write`). The task ends when every handle is dropped.
    pub fn spawn<P, F>(propose: P, limits: Limits) -> Proposer
    where
        P: Fn(Request) -> F + Send + 'static,
        F: Future<Output = WriteResult> + Send + 'static,
    {
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(run(rx, propose, limits));
        Proposer { tx }
    }

    /// Queues `req` (`bytes`: its JSON size) now, in call order; the
    /// future gives its own outcome: committed and applied with its
    /// command's response, or the proposal's error. Dropping the future
    /// before the write is proposed withdraws it.
    pub fn write(
        &self,
        req: Request,
        bytes: usize,
    ) -> impl Future<Output = Result<WriteResult, Lost>> + Send + 'static {
        let (reply, answer) = oneshot::channel();
        let queued = self.tx.send(Pending { req, bytes, reply }).is_ok();
        async move {
            if !queued {
                return Err(Lost);
            }
            answer.await.map_err(|_| Lost)
        }
    }
}

async fn run<P, F>(mut rx: mpsc::UnboundedReceiver<Pending>, propose: P, limits: Limits)
where
    P: Fn(Request) -> F,
    F: Future<Output = WriteResult> + Send + 'static,
{
    let slots = Arc::new(Semaphore::new(limits.in_flight.max(1)));
    // A write that did not fit the previous proposal: it opens the next.
    let mut carried: Option<Pending> = None;
    loop {
        let Ok(slot) = slots.clone().acquire_owned().await else { return };
        let first = match carried.take() {
            Some(p) => p,
            None => match rx.recv().await {
                Some(p) => p,
                None => return,
            },
        };
        let mut bytes = first.bytes;
        let mut batch = vec![first];
        while batch.len() < limits.commands {
            let Ok(p) = rx.try_recv() else { break };
            if bytes + p.bytes > limits.bytes {
                carried = Some(p);
                break;
            }
            bytes += p.bytes;
            batch.push(p);
        }
        batch.retain(|p| !p.reply.is_closed());
        if batch.is_empty() {
            continue;
        }
        let (mut reqs, replies): (Vec<_>, Vec<_>) =
            batch.into_iter().map(|p| (p.req, p.reply)).unzip();
        let req = match reqs.len() {
            1 => reqs.pop().expect("one command"),
            _ => Request::Batch(reqs),
        };
        let outcome = propose(req);
        tokio::spawn(async move {
            answer(replies, outcome.await);
            drop(slot);
        });
    }
}

/// Sends each write its own outcome. A batch's response without one
/// response per command cannot happen (the state machine answers each);
/// were it to, those writes' senders are dropped: "outcome unknown".
fn answer(replies: Vec<oneshot::Sender<WriteResult>>, outcome: WriteResult) {
    let r = match outcome {
        Err(e) => {
            for reply in replies {
                let _ = reply.send(Err(e.clone()));
            }
            return;
        }
        // A single write was proposed as the plain command.
        Ok(r) if replies.len() == 1 => {
            if let Some(reply) = replies.into_iter().next() {
                let _ = reply.send(Ok(r));
            }
            return;
        }
        Ok(r) => r,
    };
    for (reply, data) in replies.into_iter().zip(r.data.batch) {
        let one = ClientWriteResponse::<KvConfig> { log_id: r.log_id, data, membership: None };
        let _ = reply.send(Ok(one));
    }
}

#[cfg(test)]
mod tests;

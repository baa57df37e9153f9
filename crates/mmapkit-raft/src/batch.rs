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

use openraft::raft::ClientWriteResponse;
use tokio::sync::{mpsc, oneshot, Semaphore};

use crate::kv::{KvConfig, Request};
use crate::node::WriteResult;

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
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Mutex;
    use std::time::Duration;

    use openraft::error::{ClientWriteError, ForwardToLeader, RaftError};
    use openraft::{CommittedLeaderId, LogId};

    use super::*;
    use crate::kv::Response;

    /// A fake raft: records each proposed command, applies it to a map
    /// after `delay` (or refuses it when `refuse` is set).
    #[derive(Clone, Default)]
    struct Fake {
        proposed: Arc<Mutex<Vec<Request>>>,
        data: Arc<Mutex<BTreeMap<String, String>>>,
        refuse: bool,
    }

    impl Fake {
        fn proposer(&self, limits: Limits, delay: Duration) -> Proposer {
            let me = self.clone();
            Proposer::spawn(
                move |req: Request| {
                    let me = me.clone();
                    async move {
                        let index = {
                            let mut p = me.proposed.lock().unwrap();
                            p.push(req.clone());
                            p.len() as u64
                        };
                        tokio::time::sleep(delay).await;
                        if me.refuse {
                            let e = ForwardToLeader { leader_id: None, leader_node: None };
                            return Err(RaftError::APIError(ClientWriteError::ForwardToLeader(e)));
                        }
                        let data = apply(&mut me.data.lock().unwrap(), req);
                        let log_id = LogId::new(CommittedLeaderId::new(1, 1), index);
                        Ok(ClientWriteResponse { log_id, data, membership: None })
                    }
                },
                limits,
            )
        }

        fn sizes(&self) -> Vec<usize> {
            let p = self.proposed.lock().unwrap();
            p.iter().map(|r| if let Request::Batch(b) = r { b.len() } else { 1 }).collect()
        }
    }

    /// The state machine's semantics, through its own apply.
    fn apply(data: &mut BTreeMap<String, String>, req: Request) -> Response {
        crate::kv::apply_command(data, req)
    }

    fn set(k: &str, v: &str) -> Request {
        Request::Set { key: k.into(), value: v.into() }
    }

    /// One thread, its clock paused: sleeps and timeouts advance only
    /// when every task waits, so events happen in the order the delays
    /// below say, however loaded the machine (real sleeps on two worker
    /// threads decided which writes shared a proposal: issue 27).
    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .unwrap()
    }

    /// Writes sent while a proposal is in flight share the next one, and
    /// each gets its own command's response (a CAS that lost its race
    /// says so; the one that won says so) under the batch's log id.
    #[test]
    fn concurrent_writes_share_a_proposal_and_get_their_own_results() {
        rt().block_on(async {
            let fake = Fake::default();
            let limits = Limits { commands: 100, bytes: 1 << 20, in_flight: 1 };
            let p = fake.proposer(limits, Duration::from_millis(100));
            // Occupies the one slot.
            let first = tokio::spawn(p.write(set("a", "0"), 10));
            tokio::time::sleep(Duration::from_millis(20)).await;
            let cas = |exp: &str, v: &str| Request::Cas {
                key: "a".into(),
                expected: Some(exp.into()),
                value: Some(v.into()),
            };
            let reqs =
                [set("b", "1"), cas("0", "x"), cas("0", "y"), Request::Delete { key: "b".into() }];
            let mut tasks = Vec::new();
            for r in reqs {
                tasks.push(tokio::spawn(p.write(r, 10)));
            }
            let first = first.await.unwrap().unwrap().unwrap();
            assert_eq!(first.log_id.index, 1);
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.unwrap().unwrap().unwrap());
            }
            assert_eq!(fake.sizes(), [1, 4], "the four queued writes went as one entry");
            assert!(answers.iter().all(|a| a.log_id.index == 2));
            let data: Vec<_> =
                answers.iter().map(|a| (a.data.previous.clone(), a.data.ok)).collect();
            assert_eq!(
                data,
                [
                    (None, true),
                    (Some("0".into()), true),
                    (Some("x".into()), false),
                    (Some("1".into()), true)
                ]
            );
            assert_eq!(
                fake.data.lock().unwrap().clone(),
                BTreeMap::from([("a".into(), "x".into())])
            );
        });
    }

    /// A proposal holds at most `commands` commands and `bytes` bytes; a
    /// command larger than `bytes` goes alone, as the plain command.
    #[test]
    fn proposals_are_bounded_in_count_and_bytes() {
        rt().block_on(async {
            let fake = Fake::default();
            let limits = Limits { commands: 3, bytes: 100, in_flight: 1 };
            let p = fake.proposer(limits, Duration::from_millis(50));
            let blocker = tokio::spawn(p.write(set("first", "v"), 1));
            tokio::time::sleep(Duration::from_millis(10)).await;
            // Queued while `first` is in flight: three by count, three more
            // by count (80 bytes), k6 alone (k7 would pass the bytes), k7
            // alone (larger than any batch), k8.
            let sizes = [10, 10, 10, 10, 10, 60, 60, 500, 10];
            let mut tasks = Vec::new();
            for (i, n) in sizes.into_iter().enumerate() {
                tasks.push(tokio::spawn(p.write(set(&format!("k{i}"), "v"), n)));
            }
            blocker.await.unwrap().unwrap().unwrap();
            for t in tasks {
                t.await.unwrap().unwrap().unwrap();
            }
            assert_eq!(fake.sizes(), [1, 3, 3, 1, 1, 1]);
            let proposed = fake.proposed.lock().unwrap();
            assert_eq!(
                proposed[2],
                Request::Batch(vec![set("k3", "v"), set("k4", "v"), set("k5", "v")])
            );
            assert_eq!(proposed[4], set("k7", "v"), "the large one alone, unwrapped");
            assert_eq!(fake.data.lock().unwrap().len(), 10);
        });
    }

    /// A refusal (not the leader) reaches every write of the proposal,
    /// each on its own; nothing is applied.
    #[test]
    fn an_error_reaches_every_write_of_the_proposal() {
        rt().block_on(async {
            let fake = Fake { refuse: true, ..Fake::default() };
            let limits = Limits { commands: 10, bytes: 1 << 20, in_flight: 1 };
            let p = fake.proposer(limits, Duration::from_millis(30));
            let mut tasks = Vec::new();
            for i in 0..5 {
                tasks.push(tokio::spawn(p.write(set(&format!("k{i}"), "v"), 5)));
            }
            for t in tasks {
                let e = t.await.unwrap().unwrap().unwrap_err();
                assert!(e.forward_to_leader().is_some(), "{e}");
            }
            assert!(fake.data.lock().unwrap().is_empty());
        });
    }

    /// A write whose handler gave up before it was proposed is not
    /// proposed at all.
    #[test]
    fn a_write_abandoned_while_queued_is_not_proposed() {
        rt().block_on(async {
            let fake = Fake::default();
            let limits = Limits { commands: 10, bytes: 1 << 20, in_flight: 1 };
            let p = fake.proposer(limits, Duration::from_millis(100));
            let blocker = tokio::spawn(p.write(set("a", "1"), 1));
            tokio::time::sleep(Duration::from_millis(10)).await;
            let gave_up =
                tokio::time::timeout(Duration::from_millis(20), p.write(set("gone", "1"), 1));
            assert!(gave_up.await.is_err());
            let kept = p.write(set("kept", "1"), 1).await.unwrap().unwrap();
            blocker.await.unwrap().unwrap().unwrap();
            assert_eq!(kept.data, Response::default());
            assert_eq!(fake.sizes(), [1, 1]);
            assert!(!fake.data.lock().unwrap().contains_key("gone"));
        });
    }

    /// With every handle dropped, the task ends; a queued write whose
    /// proposer is gone reports `Lost`.
    #[test]
    fn writes_after_the_proposer_stopped_are_lost_not_answered() {
        rt().block_on(async {
            let (tx, rx) = mpsc::unbounded_channel::<Pending>();
            drop(rx);
            let p = Proposer { tx };
            assert!(matches!(p.write(set("a", "1"), 1).await, Err(Lost)));
        });
    }
}

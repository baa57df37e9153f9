use std::collections::BTreeMap;
use std::sync::Mutex;
use std::time::Duration;

use openraft::error::ForwardToLeader;
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
    tokio::runtime::Builder::new_current_thread().enable_all().start_paused(true).build().unwrap()
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
        let data: Vec<_> = answers.iter().map(|a| (a.data.previous.clone(), a.data.ok)).collect();
        assert_eq!(
            data,
            [
                (None, true),
                (Some("0".into()), true),
                (Some("x".into()), false),
                (Some("1".into()), true)
            ]
        );
        assert_eq!(fake.data.lock().unwrap().clone(), BTreeMap::from([("a".into(), "x".into())]));
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
        let gave_up = tokio::time::timeout(Duration::from_millis(20), p.write(set("gone", "1"), 1));
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

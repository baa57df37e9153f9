//! Membership the etcd way (issue 37, defects 1-3): a node whose data
//! directory was wiped never votes as the member it was; it is removed and
//! added anew, rebuilt by snapshot once the leader purged its log; the
//! cluster grows and shrinks under writes without losing one.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::time::{Duration, Instant};

use common::{raw, Cluster};

const PATIENCE: Duration = Duration::from_secs(60);

impl Cluster {
    /// Every running node that answers `/metrics` says no node leads.
    fn no_leader_now(&self) -> bool {
        self.nodes.iter().filter(|n| n.child.is_some()).all(|n| {
            self.block(self.client.metrics(&n.addr))
                .map_or(true, |m| m.current_leader != Some(m.id))
        })
    }

    fn voters(&self) -> Vec<u64> {
        let l = self.block(self.client.members(PATIENCE)).expect("member list");
        l.members.iter().filter(|m| m.voter).map(|m| m.id).collect()
    }
}

/// A wiped node cannot vote (one once voted a leader lacking 50
/// acknowledged writes into office: 50 of 110 lost), and is replaced as a
/// new member rebuilt by a snapshot (it was once never rebuilt, and nothing
/// said so).
#[test]
fn a_wiped_node_cannot_vote_and_is_replaced_as_a_new_member_rebuilt_by_snapshot() {
    let mut c = Cluster::start(&["--snapshot-every", "20", "--keep", "5"]);
    c.write(0..10, "a");
    let l = c.leader();
    let f: Vec<u64> = (1..=3).filter(|&i| i != l).collect();
    let (f1, f2) = (f[0], f[1]);
    c.node(f2).kill();
    c.write(10..60, "b"); // acknowledged by the leader and f1 only
    c.node(l).kill();
    c.node(f1).kill();
    std::fs::remove_dir_all(&c.node(f1).dir).unwrap();
    c.node(f1).spawn();
    c.node(f2).spawn();
    // f2 lacks 50 acknowledged writes: the wiped f1 must not elect it.
    // (Elections time out after 2-3 s: 8 s is several rounds.)
    let until = Instant::now() + Duration::from_secs(8);
    while Instant::now() < until {
        assert!(c.no_leader_now(), "a leader was elected with the wiped node's vote");
        std::thread::sleep(Duration::from_millis(200));
    }
    let f1_addr = c.node(f1).addr.clone();
    let who = c.block(c.client.identity(&f1_addr)).unwrap();
    let why = who.refused.expect("the wiped node says why it takes no part");
    assert!(why.contains("wiped or replaced") && why.contains("member remove"), "{why}");
    assert_eq!(who.cluster, None, "it joined nothing");

    c.node(l).spawn();
    c.write(60..100, "c");
    let list = c.block(c.client.members(PATIENCE)).unwrap();
    let old = list.members.iter().find(|m| m.id == f1).unwrap();
    assert_ne!(old.incarnation, who.incarnation, "the membership still names the lost disk");

    // The operator's replacement: remove the lost member, add the new
    // directory (same id here) as a learner, promote it.
    c.block(c.client.member_remove(f1, PATIENCE)).unwrap();
    assert!(!c.voters().contains(&f1));
    c.write(100..140, "d"); // the leader purges what a new member needs
    c.wait_purged_past(60);
    c.block(c.client.member_add(f1, &f1_addr, PATIENCE)).unwrap();
    c.block(c.client.member_promote(f1, PATIENCE)).unwrap();
    let mut voters = c.voters();
    voters.sort();
    assert_eq!(voters, vec![1, 2, 3]);
    c.write(140..160, "e");
    c.converged(false);
    let m = c.block(c.client.metrics(&f1_addr)).unwrap();
    assert!(
        m.snapshot.is_some_and(|s| s.index > 60),
        "rebuilt without a snapshot: {:?}",
        m.snapshot
    );
    let who = c.block(c.client.identity(&f1_addr)).unwrap();
    assert_eq!(who.cluster, list.cluster, "the new member joined the cluster");
}

/// The cluster grows 3 → 5 and shrinks back to 3 under writes, the leader
/// itself among those removed.
#[test]
fn the_cluster_grows_to_five_and_shrinks_back_to_three_under_writes() {
    let mut c = Cluster::start(&[]);
    c.write(0..50, "a");
    for id in [4, 5] {
        c.spawn_new(id);
        let addr = c.node(id).addr.clone();
        c.block(c.client.member_add(id, &addr, PATIENCE)).unwrap();
        let l = c.block(c.client.members(PATIENCE)).unwrap();
        assert!(l.members.iter().any(|m| m.id == id && !m.voter), "a learner first: {l:?}");
        c.write(50 * id as usize..50 * id as usize + 25, "b");
        c.block(c.client.member_promote(id, PATIENCE)).unwrap();
    }
    assert_eq!(c.voters(), vec![1, 2, 3, 4, 5]);
    c.write(300..350, "c");
    c.converged(true);
    let leader = c.leader();
    let other = (1..=3).find(|&i| i != leader).unwrap();
    for id in [leader, other] {
        c.block(c.client.member_remove(id, PATIENCE)).unwrap();
        c.write(400 + 50 * id as usize..425 + 50 * id as usize, "d");
        c.node(id).kill();
    }
    assert_eq!(c.voters().len(), 3);
    assert!(!c.voters().contains(&leader) && !c.voters().contains(&other));
    c.write(700..750, "e");
    c.converged(true);
}

/// Membership changes refused with a clear status, and raft RPCs from or
/// for the wrong member refused (409), never acted on.
#[test]
fn membership_mistakes_and_foreign_rpcs_are_refused() {
    let mut c = Cluster::start(&[]);
    c.write(0..5, "a");
    let a1 = c.addr(1);
    let add_existing = c.block(c.client.member_add(2, &c.addr(2), PATIENCE)).unwrap_err();
    assert!(
        add_existing.to_string().contains("409")
            && add_existing.to_string().contains("already a member"),
        "{add_existing}"
    );
    let e = c.block(c.client.member_promote(9, PATIENCE)).unwrap_err().to_string();
    assert!(e.contains("404") && e.contains("not a member"), "{e}");
    let e = c.block(c.client.member_remove(9, PATIENCE)).unwrap_err().to_string();
    assert!(e.contains("404"), "{e}");
    // A node of another cluster cannot be added; the id must match.
    c.spawn_new(4);
    let a4 = c.addr(4);
    let e = c.block(c.client.member_add(5, &a4, PATIENCE)).unwrap_err().to_string();
    assert!(e.contains("400") && e.contains("is node 4, not node 5"), "{e}");
    let (status, text) = raw(
        &c.rt,
        "POST",
        &format!("http://{a4}/cluster/init"),
        None,
        Some(&format!(r#"{{"4":{{"addr":"{a4}"}},"1":{{"addr":"{a1}"}}}}"#)),
    );
    assert_eq!(status, 409, "init naming a member of another cluster: {text}");
    assert!(text.contains("already belongs to cluster"), "{text}");
    let (status, text) = raw(
        &c.rt,
        "POST",
        &format!("http://{a4}/cluster/init"),
        None,
        Some(&format!(r#"{{"4":{{"addr":"{a4}"}}}}"#)),
    );
    assert_eq!(status, 200, "{text}");
    let e = c.block(c.client.member_add(4, &a4, PATIENCE)).unwrap_err().to_string();
    assert!(e.contains("409") && e.contains("belongs to cluster"), "{e}");
    // Raft RPCs without identity, for another incarnation, or from a stranger.
    let vote =
        r#"{"vote":{"leader_id":{"term":99,"node_id":7},"committed":false},"last_log_id":null}"#;
    let url = format!("http://{a1}/raft/vote");
    let (status, text) = raw(&c.rt, "POST", &url, None, Some(vote));
    assert_eq!(status, 409, "{text}");
    let who = c.block(c.client.identity(&a1)).unwrap();
    let cluster = who.cluster.clone().unwrap();
    for (to, from, want) in [
        (format!("1/{:016x}", who.incarnation ^ 1), "2", "wiped or replaced"),
        (format!("1/{:016x}", who.incarnation), "7", "not a member"),
    ] {
        let r = c.block(async {
            reqwest::Client::new()
                .post(&url)
                .header("content-type", "application/json")
                .header("x-mmapkit-to", to)
                .header("x-mmapkit-from", from)
                .header("x-mmapkit-cluster", &cluster)
                .body(vote)
                .send()
                .await
                .unwrap()
        });
        assert_eq!(r.status().as_u16(), 409);
        let text = c.block(r.text()).unwrap();
        assert!(text.contains(want), "{text}");
    }
    let m = c.block(c.client.metrics(&a1)).unwrap();
    assert!(m.current_term < 99, "a refused vote request moved the term: {}", m.current_term);
}

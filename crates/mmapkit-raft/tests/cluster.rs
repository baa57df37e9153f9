//! Three `mmapkit-kv` processes on loopback (ports chosen free at run
//! time), killed with SIGKILL and restarted on the same directories:
//! no acknowledged write is ever lost, and the nodes end with identical
//! logs and identical state.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mmapkit_raft::kv::Request;
use mmapkit_raft::node::KvClient;

struct Proc {
    id: u64,
    addr: String,
    dir: PathBuf,
    args: Vec<String>,
    child: Option<Child>,
}

impl Proc {
    fn spawn(&mut self) {
        let mut child = Command::new(env!("CARGO_BIN_EXE_mmapkit-kv"))
            .args(["serve", "--id", &self.id.to_string(), "--bind", &self.addr])
            .arg("--dir")
            .arg(&self.dir)
            .args(&self.args)
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn mmapkit-kv");
        let mut line = String::new();
        BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line).expect("read");
        assert!(line.contains("listening on"), "node {} said {line:?}", self.id);
        self.child = Some(child);
    }

    fn kill(&mut self) {
        let mut c = self.child.take().expect("running");
        c.kill().expect("SIGKILL");
        c.wait().expect("reap");
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Cluster {
    _tmp: tempfile::TempDir,
    nodes: Vec<Proc>,
    client: KvClient,
    rt: tokio::runtime::Runtime,
    /// Every acknowledged write: key → value.
    acked: BTreeMap<String, String>,
}

impl Cluster {
    fn start(extra: &[&str]) -> Cluster {
        let tmp = tempfile::tempdir().unwrap();
        let mut nodes: Vec<Proc> = (1..=3)
            .map(|id| Proc {
                id,
                addr: format!("127.0.0.1:{}", free_port()),
                dir: tmp.path().join(format!("n{id}")),
                args: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
            })
            .collect();
        for n in &mut nodes {
            n.spawn();
        }
        let client = KvClient::new(nodes.iter().map(|n| n.addr.clone()));
        let rt = tokio::runtime::Runtime::new().unwrap();
        let members: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
        rt.block_on(client.init(&nodes[0].addr, &members)).expect("init");
        let c = Cluster { _tmp: tmp, nodes, client, rt, acked: BTreeMap::new() };
        c.leader();
        c
    }

    /// The current leader's id (waits for one).
    fn leader(&self) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            for n in self.nodes.iter().filter(|n| n.child.is_some()) {
                if let Ok(m) = self.rt.block_on(self.client.metrics(&n.addr)) {
                    if m.current_leader == Some(m.id) {
                        return m.id;
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        panic!("no leader within 30 s");
    }

    fn node(&mut self, id: u64) -> &mut Proc {
        self.nodes.iter_mut().find(|n| n.id == id).unwrap()
    }

    fn write(&mut self, range: std::ops::Range<usize>, tag: &str) {
        for i in range {
            let (key, value) = (format!("key{i:05}"), format!("{tag}-{i}"));
            let req = Request::Set { key: key.clone(), value: value.clone() };
            self.rt
                .block_on(self.client.write(&req, Duration::from_secs(30)))
                .unwrap_or_else(|e| panic!("write {key}: {e}"));
            self.acked.insert(key, value);
        }
    }

    /// Waits until every running node applied the same last log id, then
    /// checks identical state holding every acknowledged write, and (with
    /// `same_logs`) identical logs.
    fn converged(&self, same_logs: bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let running: Vec<&Proc> = self.nodes.iter().filter(|n| n.child.is_some()).collect();
        let states = loop {
            let states: Vec<_> = running.iter().map(|n| self.rt.block_on(self.client.state(&n.addr))).collect();
            if let Ok(states) = states.into_iter().collect::<Result<Vec<_>, _>>() {
                if states.windows(2).all(|w| w[0].last_applied == w[1].last_applied && w[0].data == w[1].data)
                    && states[0].data.len() >= self.acked.len()
                {
                    break states;
                }
            }
            assert!(Instant::now() < deadline, "nodes did not converge within 60 s");
            std::thread::sleep(Duration::from_millis(100));
        };
        for s in &states {
            for (k, v) in &self.acked {
                assert_eq!(s.data.get(k), Some(v), "node {} lost acknowledged {k}", s.id);
            }
            assert_eq!(s.data.len(), self.acked.len(), "node {} holds writes nobody acknowledged", s.id);
        }
        if same_logs {
            // Logs agree on every index present on both (purge points may differ).
            let logs: Vec<_> = running.iter().map(|n| self.rt.block_on(self.client.log_ids(&n.addr)).unwrap()).collect();
            let last: Vec<_> = logs.iter().map(|l| l.entries.last().copied()).collect();
            assert!(last.windows(2).all(|w| w[0] == w[1]), "different last log ids: {last:?}");
            for l in &logs[1..] {
                let common: Vec<_> = l.entries.iter().filter(|e| logs[0].entries.contains(e)).collect();
                let lo = l.entries.first().map_or(0, |e| e.index).max(logs[0].entries.first().map_or(0, |e| e.index));
                let expected: Vec<_> = logs[0].entries.iter().filter(|e| e.index >= lo).collect();
                assert_eq!(common, expected, "logs differ");
            }
        }
    }
}

#[test]
fn a_killed_follower_restarts_and_catches_up() {
    let mut c = Cluster::start(&[]);
    c.write(0..100, "a");
    let leader = c.leader();
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    c.node(follower).kill();
    c.write(100..250, "b");
    c.node(follower).spawn();
    c.write(250..300, "c");
    c.converged(true);
}

#[test]
fn a_killed_leader_is_replaced_loses_nothing_and_rejoins_as_follower() {
    let mut c = Cluster::start(&[]);
    c.write(0..150, "a");
    let old = c.leader();
    c.node(old).kill();
    // The client fails over: writes go on under a new leader.
    c.write(150..300, "b");
    let new = c.leader();
    assert_ne!(new, old, "a killed node cannot lead");
    c.node(old).spawn();
    c.write(300..350, "c");
    c.converged(true);
    let addr = c.node(old).addr.clone();
    let m = c.rt.block_on(c.client.metrics(&addr)).unwrap();
    assert_ne!(m.current_leader, Some(old), "the old leader rejoined as a follower");
    assert_eq!(m.current_leader, Some(c.leader()));
}

#[test]
fn a_follower_far_behind_a_purge_catches_up_by_snapshot() {
    // A snapshot every 50 entries, nothing kept behind it: the leader
    // purges what the stopped follower still needs.
    let mut c = Cluster::start(&["--snapshot-every", "50", "--keep", "0"]);
    c.write(0..20, "a");
    let leader = c.leader();
    let follower = (1..=3).find(|&i| i != leader).unwrap();
    c.node(follower).kill();
    c.write(20..300, "b");
    let laddr = c.node(leader).addr.clone();
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let ids = c.rt.block_on(c.client.log_ids(&laddr)).unwrap();
        if ids.purged.is_some_and(|p| p.index > 30) {
            break;
        }
        assert!(Instant::now() < deadline, "the leader never purged: {:?}", ids.purged);
        std::thread::sleep(Duration::from_millis(100));
    }
    c.node(follower).spawn();
    c.converged(false);
    let faddr = c.node(follower).addr.clone();
    let m = c.rt.block_on(c.client.metrics(&faddr)).unwrap();
    assert!(m.snapshot.is_some_and(|s| s.index > 20), "follower caught up without a snapshot: {:?}", m.snapshot);
    let ids = c.rt.block_on(c.client.log_ids(&faddr)).unwrap();
    assert!(ids.purged.is_some(), "the installed snapshot purges the follower's log");
}

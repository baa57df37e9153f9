//! The cluster tests' harness: three (or more) `mmapkit-kv` processes on
//! loopback, killed with SIGKILL and restarted on the same directories,
//! and a client that records every acknowledged write.
#![allow(dead_code, reason = "each test binary uses part of the harness")]

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use mmapkit_raft::kv::Request;
use mmapkit_raft::node::KvClient;

pub struct Proc {
    pub id: u64,
    pub addr: String,
    pub dir: PathBuf,
    pub args: Vec<String>,
    pub child: Option<Child>,
    /// The process's fd limit (`ulimit -n`), when not inherited.
    pub nofile: Option<u32>,
}

impl Proc {
    pub fn spawn(&mut self) {
        let mut cmd = Command::new("bash");
        let limit = self.nofile.map_or(String::new(), |n| format!("ulimit -n {n} && "));
        cmd.args(["-c", &format!("{limit}exec \"$0\" \"$@\""), env!("CARGO_BIN_EXE_mmapkit-kv")]);
        let mut child = cmd
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
        // First start on port 0: the node says which port it got (no race
        // for a port picked beforehand); restarts reuse it.
        self.addr = line.trim().rsplit(' ').next().unwrap().to_owned();
        self.child = Some(child);
    }

    pub fn kill(&mut self) {
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

pub struct Cluster {
    pub tmp: tempfile::TempDir,
    pub nodes: Vec<Proc>,
    pub client: KvClient,
    pub rt: tokio::runtime::Runtime,
    /// Every acknowledged write: key → value.
    pub acked: BTreeMap<String, String>,
}

impl Cluster {
    pub fn start(extra: &[&str]) -> Cluster {
        Cluster::start_with(extra, None)
    }

    /// Nodes started with `--token` when `token` is given (the client sends it).
    pub fn start_with(extra: &[&str], token: Option<&str>) -> Cluster {
        Cluster::launch(extra, token, None)
    }

    /// [`Cluster::start_with`], each node's fd limit `nofile` when given.
    pub fn launch(extra: &[&str], token: Option<&str>, nofile: Option<u32>) -> Cluster {
        let mut extra: Vec<&str> = extra.to_vec();
        if let Some(t) = token {
            extra.extend(["--token", t]);
        }
        let tmp = tempfile::tempdir().unwrap();
        let mut nodes: Vec<Proc> = (1..=3)
            .map(|id| Proc {
                id,
                addr: "127.0.0.1:0".into(),
                dir: tmp.path().join(format!("n{id}")),
                args: extra.iter().map(|s| s.to_string()).collect(),
                child: None,
                nofile,
            })
            .collect();
        for n in &mut nodes {
            n.spawn();
        }
        let client =
            KvClient::new(nodes.iter().map(|n| n.addr.clone())).unwrap().with_token(token).unwrap();
        let rt = tokio::runtime::Runtime::new().unwrap();
        let members: BTreeMap<u64, String> = nodes.iter().map(|n| (n.id, n.addr.clone())).collect();
        rt.block_on(client.init(&nodes[0].addr, &members)).expect("init");
        let c = Cluster { tmp, nodes, client, rt, acked: BTreeMap::new() };
        c.leader();
        c
    }

    /// The current leader's id (waits for one).
    pub fn leader(&self) -> u64 {
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

    pub fn node(&mut self, id: u64) -> &mut Proc {
        self.nodes.iter_mut().find(|n| n.id == id).unwrap()
    }

    pub fn write(&mut self, range: std::ops::Range<usize>, tag: &str) {
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
    pub fn converged(&self, same_logs: bool) {
        let deadline = Instant::now() + Duration::from_secs(60);
        let running: Vec<&Proc> = self.nodes.iter().filter(|n| n.child.is_some()).collect();
        let states = loop {
            let states: Vec<_> =
                running.iter().map(|n| self.rt.block_on(self.client.state(&n.addr))).collect();
            if let Ok(states) = states.into_iter().collect::<Result<Vec<_>, _>>() {
                if states
                    .windows(2)
                    .all(|w| w[0].last_applied == w[1].last_applied && w[0].data == w[1].data)
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
            assert_eq!(
                s.data.len(),
                self.acked.len(),
                "node {} holds writes nobody acknowledged",
                s.id
            );
        }
        if same_logs {
            // Logs agree on every index present on both (purge points may differ).
            let logs: Vec<_> = running
                .iter()
                .map(|n| self.rt.block_on(self.client.log_ids(&n.addr)).unwrap())
                .collect();
            let last: Vec<_> = logs.iter().map(|l| l.entries.last().copied()).collect();
            assert!(last.windows(2).all(|w| w[0] == w[1]), "different last log ids: {last:?}");
            for l in &logs[1..] {
                let common: Vec<_> =
                    l.entries.iter().filter(|e| logs[0].entries.contains(e)).collect();
                let lo = l
                    .entries
                    .first()
                    .map_or(0, |e| e.index)
                    .max(logs[0].entries.first().map_or(0, |e| e.index));
                let expected: Vec<_> = logs[0].entries.iter().filter(|e| e.index >= lo).collect();
                assert_eq!(common, expected, "logs differ");
            }
        }
    }
}

impl Cluster {
    pub fn follower(&self) -> u64 {
        let leader = self.leader();
        (1..=3).find(|&i| i != leader).unwrap()
    }

    pub fn addr(&self, id: u64) -> String {
        self.nodes.iter().find(|n| n.id == id).unwrap().addr.clone()
    }

    /// Writes `n` values of `size` bytes under keys `{tag}{i}`.
    pub fn write_large(&mut self, tag: &str, n: usize, size: usize) {
        for i in 0..n {
            let (key, value) = (format!("{tag}{i:03}"), format!("{i:03}{}", "x".repeat(size - 3)));
            let req = Request::Set { key: key.clone(), value: value.clone() };
            self.rt
                .block_on(self.client.write(&req, Duration::from_secs(60)))
                .unwrap_or_else(|e| panic!("write {key}: {e}"));
            self.acked.insert(key, value);
        }
    }

    /// Waits until the leader's log is purged past `index`.
    pub fn wait_purged_past(&self, index: u64) {
        let laddr = self.addr(self.leader());
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let ids = self.rt.block_on(self.client.log_ids_page(&laddr, 0, 1)).unwrap();
            if ids.purged.is_some_and(|p| p.index > index) {
                return;
            }
            assert!(Instant::now() < deadline, "the leader never purged: {:?}", ids.purged);
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

/// A plain HTTP client (no token unless given).
pub fn raw(
    rt: &tokio::runtime::Runtime,
    method: &str,
    url: &str,
    auth: Option<&str>,
    body: Option<&str>,
) -> (u16, String) {
    let http = reqwest::Client::new();
    let mut r = http.request(method.parse().unwrap(), url).timeout(Duration::from_secs(30));
    if let Some(a) = auth {
        r = r.header("authorization", a);
    }
    if let Some(b) = body {
        r = r.header("content-type", "application/json").body(b.to_owned());
    }
    rt.block_on(async {
        let resp = r.send().await.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
        let status = resp.status().as_u16();
        (status, resp.text().await.unwrap_or_default())
    })
}

impl Cluster {
    /// Starts node `id` on a new, empty directory (not yet a member).
    pub fn spawn_new(&mut self, id: u64) {
        let args = self.nodes[0].args.clone();
        let mut p = Proc {
            id,
            addr: "127.0.0.1:0".into(),
            dir: self.tmp.path().join(format!("n{id}")),
            args,
            child: None,
            nofile: None,
        };
        p.spawn();
        self.nodes.retain(|n| n.id != id);
        self.nodes.push(p);
    }

    /// Blocks on `f` (a client call).
    pub fn block<T>(&self, f: impl std::future::Future<Output = T>) -> T {
        self.rt.block_on(f)
    }
}

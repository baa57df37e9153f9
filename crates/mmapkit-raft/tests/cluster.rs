//! Three `mmapkit-kv` processes on loopback (ports chosen free at run
//! time), killed with SIGKILL and restarted on the same directories:
//! no acknowledged write is ever lost, and the nodes end with identical
//! logs and identical state. Also: large values and snapshots, the
//! token, paged log listing, a leader without quorum, linearizable reads,
//! compare-and-set, forwarding, and peers' source addresses.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::collections::BTreeMap;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{raw, Cluster, Proc};
use mmapkit_raft::kv::Request;
use mmapkit_raft::node::{ClientError, KvClient};

/// A `GET /kv/get` answer's key and value (it also carries the revision).
fn got(body: &str) -> (String, Option<String>) {
    let a: mmapkit_raft::node::GetAnswer =
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert!(a.value.is_none() || a.mod_revision.is_some(), "{body}");
    (a.key, a.value)
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
    assert!(
        m.snapshot.is_some_and(|s| s.index > 20),
        "follower caught up without a snapshot: {:?}",
        m.snapshot
    );
    let ids = c.rt.block_on(c.client.log_ids(&faddr)).unwrap();
    assert!(ids.purged.is_some(), "the installed snapshot purges the follower's log");
}

// Defect 9: bodies over axum's default 2 MB.

#[test]
fn large_values_reach_a_follower_that_was_killed_and_restarted() {
    // 40 values of 100 KB written while the follower is down: catching up
    // takes several appends of ~1 MiB, never one 4 MB body.
    let mut c = Cluster::start(&[]);
    c.write(0..10, "a");
    let follower = c.follower();
    c.node(follower).kill();
    c.write_large("big", 40, 100_000);
    c.node(follower).spawn();
    c.write(10..20, "b");
    c.converged(true);
}

#[test]
fn a_snapshot_larger_than_two_megabytes_installs_on_a_lagging_follower() {
    // 2.4 MB of values (~8 MB as JSON numbers): sent in chunks.
    let mut c = Cluster::start(&["--snapshot-every", "20", "--keep", "0"]);
    c.write(0..5, "a");
    let follower = c.follower();
    c.node(follower).kill();
    c.write_large("big", 40, 60_000);
    c.wait_purged_past(10);
    c.node(follower).spawn();
    c.converged(false);
    let faddr = c.addr(follower);
    let m = c.rt.block_on(c.client.metrics(&faddr)).unwrap();
    assert!(
        m.snapshot.is_some_and(|s| s.index > 10),
        "follower caught up without a snapshot: {:?}",
        m.snapshot
    );
}

#[test]
fn a_3_mb_value_is_written_and_an_oversized_one_gets_a_clear_413() {
    let mut c = Cluster::start(&[]);
    c.write_large("three-mb", 1, 3_000_000);
    let req = Request::Set { key: "huge".into(), value: "y".repeat(5_000_000) };
    match c.rt.block_on(c.client.write(&req, Duration::from_secs(30))) {
        Err(ClientError::TooLarge(msg)) => {
            // Names the size and the limit.
            assert!(msg.contains("5000") && msg.contains(&(4u64 << 20).to_string()), "{msg}");
        }
        other => panic!("expected TooLarge, got {other:?}"),
    }
    c.converged(true);
    // A smaller configured limit.
    let c2 = Cluster::start(&["--max-value-bytes", "1000"]);
    let req = Request::Set { key: "k".into(), value: "z".repeat(100_000) };
    let r = c2.rt.block_on(c2.client.write(&req, Duration::from_secs(30)));
    assert!(
        matches!(&r, Err(ClientError::TooLarge(m)) if m.contains("--max-value-bytes 1000")),
        "{r:?}"
    );
}

// Defect 10: authentication, bounded listings, bad arguments, no quorum.

#[test]
fn every_endpoint_requires_the_token() {
    let mut c = Cluster::start_with(&[], Some("s3cret-T0ken"));
    c.write(0..5, "a");
    let a = c.addr(c.leader());
    let endpoints = [
        ("POST", "raft/append", "{}"),
        ("POST", "raft/vote", "{}"),
        ("POST", "raft/snapshot", "{}"),
        ("POST", "cluster/init", "{}"),
        ("POST", "admin/snapshot", ""),
        ("POST", "kv/write", r#"{"Set":{"key":"evil","value":"x"}}"#),
        ("GET", "kv/get?key=key00001", ""),
        ("GET", "kv/get?key=key00001&stale=true", ""),
        ("GET", "kv/state", ""),
        ("GET", "log/ids", ""),
        ("GET", "metrics", ""),
    ];
    for (m, route, body) in endpoints {
        let url = format!("http://{a}/{route}");
        for auth in
            [None, Some("Bearer wrong"), Some("Basic s3cret-T0ken"), Some("Bearer s3cret-T0ke")]
        {
            let (status, text) = raw(&c.rt, m, &url, auth, Some(body));
            assert_eq!(status, 401, "{m} /{route} with {auth:?}: {text}");
        }
    }
    // The scheme in any case.
    let (status, text) = raw(
        &c.rt,
        "GET",
        &format!("http://{a}/kv/get?key=key00001"),
        Some("bEaReR s3cret-T0ken"),
        None,
    );
    assert_eq!((status, got(&text)), (200, ("key00001".into(), Some("a-1".into()))), "{text}");
    // Clients without it or with a wrong one are told so.
    let anon = KvClient::new([a.clone()]).unwrap();
    let req = Request::Set { key: "evil".into(), value: "x".into() };
    let r = c.rt.block_on(anon.write(&req, Duration::from_secs(10)));
    assert!(matches!(r, Err(ClientError::Unauthorized(_))), "{r:?}");
    let wrong = KvClient::new([a]).unwrap().with_token(Some("nope")).unwrap();
    let r = c.rt.block_on(wrong.get("key00001", Duration::from_secs(10)));
    assert!(matches!(r, Err(ClientError::Unauthorized(_))), "{r:?}");
    c.converged(true);
}

#[test]
fn bad_arguments_fail_with_clear_errors_not_panics() {
    let run = |args: &[&str]| {
        let out = Command::new(env!("CARGO_BIN_EXE_mmapkit-kv"))
            .args(args)
            .env_remove("MMAPKIT_KV_TOKEN")
            .output()
            .expect("run mmapkit-kv");
        let err = String::from_utf8_lossy(&out.stderr).into_owned();
        assert!(!err.contains("panicked"), "{args:?}: {err}");
        (out.status.code(), err)
    };
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("n").display().to_string();
    let (code, err) = run(&["load", "--writes", "1"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("no nodes given"), "{err}");
    let (code, err) = run(&["serve", "--id", "1", "--dir", &dir, "--bind", "0.0.0.0:0"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("without a token"), "{err}");
    for bad in ["a b", "tab\tbed", "é", ""] {
        let (code, err) = run(&["serve", "--id", "1", "--dir", &dir, "--token", bad]);
        assert_eq!(code, Some(2), "token {bad:?}: {err}");
        assert!(err.contains("token"), "{err}");
    }
    let (code, err) = run(&["get", "--nodes", "127.0.0.1:1", "--token", "a\u{7f}", "k"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("bad token"), "{err}");
    let (code, err) = run(&["serve", "--id", "1", "--dir", &dir, "--max-value-bytes", "0"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("at least 1 byte"), "{err}");
    assert!(KvClient::new(Vec::<String>::new()).is_err());
}

/// Issue 37, defect 1's zombie: a node whose raft core stops on a fatal
/// error (here its store cannot save a vote: the data directory was
/// deleted under it) exits with status 70 instead of serving on.
#[test]
fn a_node_whose_store_fails_exits_instead_of_serving_on() {
    let mut c = Cluster::start(&[]);
    c.write(0..20, "a");
    let leader = c.leader();
    let doomed = (1..=3).find(|&i| i != leader).unwrap();
    std::fs::remove_dir_all(&c.node(doomed).dir).unwrap();
    // The next election needs its vote, which it cannot save.
    c.node(leader).kill();
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        let child = c.node(doomed).child.as_mut().unwrap();
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "node {doomed} went on without its store");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(status.code(), Some(70), "{status:?}");
    c.node(doomed).child = None;
}

/// `init` on a running cluster is a 409 (it answered 200 with
/// an `Err` body), and an unknown parameter is a 400 (`prefix=true` was
/// ignored: 200 with `null`).
#[test]
fn a_second_init_is_a_conflict_and_unknown_parameters_are_refused() {
    let mut c = Cluster::start(&[]);
    c.write(0..3, "a");
    let members: BTreeMap<u64, serde_json::Value> =
        (1..=3).map(|id| (id, serde_json::json!({"addr": c.addr(id)}))).collect();
    let body = serde_json::to_string(&members).unwrap();
    for id in 1..=3 {
        let url = format!("http://{}/cluster/init", c.addr(id));
        let (status, text) = raw(&c.rt, "POST", &url, None, Some(&body));
        assert_eq!(status, 409, "node {id}: {text}");
        assert!(text.contains("NotAllowed"), "{text}");
    }
    let e = c.rt.block_on(c.client.init(&c.addr(1), &BTreeMap::from([(1, c.addr(1))])));
    assert!(e.unwrap_err().contains("409"));
    let url = format!("http://{}/kv/get?key=a/&prefix=true", c.addr(1));
    let (status, text) = raw(&c.rt, "GET", &url, None, None);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("prefix"), "{text}");
}

#[test]
fn log_ids_are_paged() {
    let mut c = Cluster::start(&[]);
    c.write(0..30, "a");
    let a = c.addr(c.leader());
    let page = c.rt.block_on(c.client.log_ids_page(&a, 0, 10)).unwrap();
    assert_eq!(
        page.entries.iter().map(|e| e.index).collect::<Vec<_>>(),
        (0..10).collect::<Vec<_>>()
    );
    assert_eq!(page.next, Some(10));
    let page = c.rt.block_on(c.client.log_ids_page(&a, 25, 1_000_000)).unwrap();
    assert_eq!(page.entries.first().map(|e| e.index), Some(25));
    assert_eq!(page.next, None);
    // Without parameters: the first page, of the default size.
    let (status, text) = raw(&c.rt, "GET", &format!("http://{a}/log/ids"), None, None);
    assert_eq!(status, 200);
    assert!(text.contains(r#""next":null"#), "{text}");
    let all = c.rt.block_on(c.client.log_ids(&a)).unwrap();
    assert!(all.entries.len() >= 31, "{}", all.entries.len());
}

#[test]
fn a_leader_without_quorum_fails_writes_and_reads_promptly() {
    let mut c = Cluster::start(&[]);
    c.write(0..5, "a");
    let leader = c.leader();
    for f in (1..=3).filter(|&i| i != leader).collect::<Vec<_>>() {
        c.node(f).kill();
    }
    let a = c.addr(leader);
    let write = format!("http://{a}/kv/write");
    // Answered (503: not applied, or 504: unknown) instead of hanging
    // until the client gives up.
    let (status, text) =
        raw(&c.rt, "POST", &write, None, Some(r#"{"Set":{"key":"k","value":"v"}}"#));
    assert!((status == 503 || status == 504) && text.contains("no quorum"), "{status} {text}");
    // Once the leader knows, it refuses up front: certainly not applied.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, text) = raw(
            &c.rt,
            "POST",
            &write,
            None,
            Some(r#"{"Cas":{"key":"k","expected":null,"value":"v"}}"#),
        );
        assert!(text.contains("no quorum"), "{status} {text}");
        if status == 503 {
            break;
        }
        assert!(Instant::now() < deadline, "still {status} {text}");
    }
    let (status, text) = raw(&c.rt, "GET", &format!("http://{a}/kv/get?key=key00001"), None, None);
    assert_eq!(status, 503, "{text}");
    assert!(text.starts_with("no quorum"), "{text}");
    // The explicitly stale read still answers.
    let (status, text) =
        raw(&c.rt, "GET", &format!("http://{a}/kv/get?key=key00001&stale=true"), None, None);
    assert_eq!((status, got(&text)), (200, ("key00001".into(), Some("a-1".into()))), "{text}");
    // The client reports it, and a Cas whose outcome is unknown is not retried.
    let lone = KvClient::new([a]).unwrap();
    // (6 s: its first answer must come back within the limit, also on a
    // loaded machine, to be the error the timeout reports.)
    let r = c.rt.block_on(lone.write(&Request::Delete { key: "k".into() }, Duration::from_secs(6)));
    assert!(matches!(&r, Err(ClientError::Timeout(_, e)) if e.contains("no quorum")), "{r:?}");
}

// Defect 13: linearizable reads, compare-and-set, forwarding.

#[test]
fn reads_through_any_node_see_every_completed_write_and_cas_is_atomic() {
    let c = Cluster::start(&[]);
    let leader = c.leader();
    let follower = c.follower();
    let addrs: Vec<String> = (1..=3).map(|i| c.addr(i)).collect();
    // One client per node (no failover): followers forward writes and reads.
    let at = |a: &String| KvClient::new([a.clone()]).unwrap();
    let (fc, lc) = (at(&c.addr(follower)), at(&c.addr(leader)));
    let t = Duration::from_secs(30);
    for i in 0..40 {
        let (w, r) = (&addrs[i % 3], &addrs[(i + 1) % 3]);
        let v = format!("v{i}");
        c.rt.block_on(at(w).write(&Request::Set { key: "x".into(), value: v.clone() }, t)).unwrap();
        assert_eq!(c.rt.block_on(at(r).get("x", t)).unwrap(), Some(v), "read {i} through {r}");
    }
    let cas = |cl: &KvClient, expected: Option<&str>, value: Option<&str>| {
        let req = Request::Cas {
            key: "c".into(),
            expected: expected.map(str::to_owned),
            value: value.map(str::to_owned),
        };
        let (_, r) = c.rt.block_on(cl.write(&req, t)).unwrap();
        (r.ok, r.previous)
    };
    assert_eq!(cas(&fc, Some("a"), Some("b")), (false, None));
    assert_eq!(cas(&fc, None, Some("a")), (true, None));
    assert_eq!(cas(&lc, None, Some("z")), (false, Some("a".into())));
    assert_eq!(cas(&lc, Some("a"), Some("b")), (true, Some("a".into())));
    assert_eq!(c.rt.block_on(fc.get("c", t)).unwrap(), Some("b".into()));
    assert_eq!(cas(&fc, Some("b"), None), (true, Some("b".into())));
    assert_eq!(c.rt.block_on(fc.get("c", t)).unwrap(), None);
    // The raw API on a follower: forwarded, the leader's answer relayed.
    let fa = c.addr(follower);
    let (status, text) = raw(
        &c.rt,
        "POST",
        &format!("http://{fa}/kv/write"),
        None,
        Some(r#"{"Cas":{"key":"c","expected":null,"value":"q"}}"#),
    );
    assert_eq!(status, 200, "{text}");
    assert!(text.contains(r#""data":{"previous":null,"ok":true}"#), "{text}");
    let cas = text;
    let (status, text) = raw(&c.rt, "GET", &format!("http://{fa}/kv/get?key=c"), None, None);
    assert_eq!((status, got(&text)), (200, ("c".into(), Some("q".into()))), "{text}");
    let index: serde_json::Value = serde_json::from_str(&cas).unwrap();
    let a: mmapkit_raft::node::GetAnswer = serde_json::from_str(&text).unwrap();
    assert_eq!(a.mod_revision, index["Ok"]["log_id"]["index"].as_u64(), "the write's revision");
    let (status, text) =
        raw(&c.rt, "POST", &format!("http://{fa}/kv/write"), None, Some("{not json"));
    assert_eq!(status, 400, "{text}");
}

/// A TCP proxy on 127.0.0.1 to `target` that records where its
/// connections come from.
fn proxy(target: String) -> (String, std::sync::Arc<std::sync::Mutex<Vec<std::net::IpAddr>>>) {
    use std::net::{Shutdown, TcpListener, TcpStream};
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let seen = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let s = seen.clone();
    std::thread::spawn(move || {
        for c in l.incoming().flatten() {
            if let Ok(p) = c.peer_addr() {
                s.lock().unwrap().push(p.ip());
            }
            let Ok(up) = TcpStream::connect(&target) else { continue };
            let (c2, up2) = (c.try_clone().unwrap(), up.try_clone().unwrap());
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut &c, &mut &up);
                let _ = up.shutdown(Shutdown::Write);
            });
            std::thread::spawn(move || {
                let _ = std::io::copy(&mut &up2, &mut &c2);
                let _ = c2.shutdown(Shutdown::Write);
            });
        }
    });
    (addr, seen)
}

#[test]
fn peers_connect_from_the_ip_they_bind_through_proxies() {
    let tmp = tempfile::tempdir().unwrap();
    let ip = |id: u64| format!("127.0.0.{}", 10 + id);
    let mut nodes: Vec<Proc> = (1..=3)
        .map(|id| Proc {
            id,
            addr: format!("{}:0", ip(id)),
            dir: tmp.path().join(format!("n{id}")),
            args: Vec::new(),
            child: None,
            nofile: None,
        })
        .collect();
    for n in &mut nodes {
        n.spawn();
    }
    let proxies: Vec<_> = nodes.iter().map(|n| proxy(n.addr.clone())).collect();
    let members: BTreeMap<u64, String> =
        nodes.iter().zip(&proxies).map(|(n, p)| (n.id, p.0.clone())).collect();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = KvClient::new(nodes.iter().map(|n| n.addr.clone())).unwrap();
    rt.block_on(client.init(&nodes[0].addr, &members)).expect("init");
    let t = Duration::from_secs(30);
    rt.block_on(client.write(&Request::Set { key: "k".into(), value: "v".into() }, t)).unwrap();
    // A write through each node: the followers forward theirs to the
    // leader (through its proxy), the leader replicates to theirs.
    for n in &nodes {
        let one = KvClient::new([n.addr.clone()]).unwrap();
        rt.block_on(one.write(&Request::Set { key: format!("k{}", n.id), value: "v".into() }, t))
            .unwrap();
    }
    // Every node's connections to its peers' proxies come from its own IP.
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let seen: Vec<Vec<std::net::IpAddr>> =
            proxies.iter().map(|p| p.1.lock().unwrap().clone()).collect();
        for s in &seen {
            for a in s {
                assert!(
                    (11..=13).any(|i| a.to_string() == format!("127.0.0.{i}")),
                    "a peer connected from {a}"
                );
            }
        }
        let from = |id: u64| seen.iter().flatten().filter(|a| a.to_string() == ip(id)).count();
        if (1..=3).all(|id| from(id) > 0) {
            break;
        }
        assert!(Instant::now() < deadline, "connections seen: {seen:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

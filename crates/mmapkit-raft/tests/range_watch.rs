//! The etcd-style client API (issue 37, defect 4): range and prefix reads
//! with a limit and a continuation, delete-range, revisions on every
//! write, and watches resumable across disconnects and nodes without a
//! missed or repeated change.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::collections::BTreeMap;
use std::time::Duration;

use common::{raw, Cluster};
use mmapkit_raft::kv::Request;
use mmapkit_raft::query::prefix_end;
use mmapkit_raft::watch::Event;

const P: Duration = Duration::from_secs(30);

impl Cluster {
    fn set(&mut self, k: &str, v: &str) -> u64 {
        let req = Request::Set { key: k.into(), value: v.into() };
        let (id, _) = self.block(self.client.write(&req, P)).unwrap();
        self.acked.insert(k.into(), v.into());
        id.index
    }
}

#[test]
fn ranges_page_with_revisions_and_delete_range_removes_exactly_its_keys() {
    let mut c = Cluster::start(&[]);
    let mut rev = BTreeMap::new();
    for k in ["a/1", "a/2", "a/3", "a/4", "a/5", "a0", "b/1"] {
        rev.insert(k, c.set(k, &format!("v{k}")));
    }
    // Pages of 2 through a follower (forwarded: linearizable).
    let f = c.follower();
    let fc = mmapkit_raft::node::KvClient::new([c.addr(f)]).unwrap();
    let end = prefix_end("a/");
    let (mut got, mut start) = (Vec::new(), "a/".to_owned());
    loop {
        let page = c.block(fc.range(&start, end.as_deref(), 2, P)).unwrap();
        assert!(page.kvs.len() <= 2);
        assert!(page.revision >= rev["b/1"], "read before the last write: {}", page.revision);
        got.extend(page.kvs);
        match page.next {
            Some(n) => start = n,
            None => break,
        }
    }
    let keys: Vec<&str> = got.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["a/1", "a/2", "a/3", "a/4", "a/5"]);
    for kv in &got {
        assert_eq!(kv.mod_revision, rev[kv.key.as_str()], "{}", kv.key);
        assert_eq!(kv.value, format!("v{}", kv.key));
    }
    let again = c.set("a/3", "new");
    let one = c.block(c.client.range("a/3", Some("a/4"), 10, P)).unwrap();
    assert_eq!((one.kvs[0].mod_revision, one.kvs[0].value.as_str()), (again, "new"));
    // Delete-range [a/2, a/4): a/2 and a/3 only.
    let req = Request::DeleteRange { start: "a/2".into(), end: Some("a/4".into()) };
    let (_, r) = c.block(c.client.write(&req, P)).unwrap();
    assert_eq!(r.deleted, 2);
    c.acked.remove("a/2");
    c.acked.remove("a/3");
    let all = c.block(c.client.range("", None, 100, P)).unwrap();
    let keys: Vec<&str> = all.kvs.iter().map(|kv| kv.key.as_str()).collect();
    assert_eq!(keys, ["a/1", "a/4", "a/5", "a0", "b/1"]);
    c.converged(true);
    // Unknown or contradictory parameters are refused.
    let a = c.addr(1);
    for q in ["prefix=a/&start=a", "", "prefix=a/&limit=0", "prefix=a/&revision=3"] {
        let (status, text) = raw(&c.rt, "GET", &format!("http://{a}/kv/range?{q}"), None, None);
        assert_eq!(status, 400, "{q}: {text}");
    }
}

#[test]
fn watches_resume_across_disconnects_and_nodes_missing_and_repeating_nothing() {
    // Snapshots every 20 entries: a restarted node starts from one.
    let mut c = Cluster::start(&["--snapshot-every", "20"]);
    let r0 = c.set("w/0", "x");
    c.set("other", "y");
    let addrs: Vec<String> = (1..=3).map(|i| c.addr(i)).collect();
    // A writer thread: sets, deletes and a delete-range under w/ while
    // the watcher below hops from node to node.
    let writer = {
        let client = c.client.clone();
        std::thread::spawn(move || {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let mut expect = Vec::new();
            let mut live = std::collections::BTreeSet::from(["w/0".to_owned()]);
            for i in 1..=40u32 {
                let (k, req) = match i % 10 {
                    3 => (format!("w/{}", i - 1), Request::Delete { key: format!("w/{}", i - 1) }),
                    7 => ("x".into(), Request::Set { key: "x".into(), value: i.to_string() }),
                    _ => (
                        format!("w/{i}"),
                        Request::Set { key: format!("w/{i}"), value: i.to_string() },
                    ),
                };
                let (id, _) = rt.block_on(client.write(&req, P)).unwrap();
                if k.starts_with("w/") {
                    let value = match req {
                        Request::Set { value, .. } => Some(value),
                        _ => None,
                    };
                    // A delete of an absent key changes nothing.
                    let changed = value.is_some() || live.contains(&k);
                    if value.is_some() {
                        live.insert(k.clone());
                    } else {
                        live.remove(&k);
                    }
                    if changed {
                        expect.push(Event { revision: id.index, key: k, value });
                    }
                }
            }
            let req = Request::DeleteRange { start: "w/1".into(), end: Some("w/2".into()) };
            let (id, r) = rt.block_on(client.write(&req, P)).unwrap();
            let gone: Vec<String> = live
                .iter()
                .filter(|k| k.as_str() >= "w/1" && k.as_str() < "w/2")
                .cloned()
                .collect();
            assert_eq!(r.deleted as usize, gone.len());
            assert!(gone.len() >= 5);
            expect.extend(gone.into_iter().map(|key| Event {
                revision: id.index,
                key,
                value: None,
            }));
            expect
        })
    };
    let mut seen = vec![Event { revision: r0, key: "w/0".into(), value: Some("x".into()) }];
    let mut from = r0 + 1;
    let mut hop = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(90);
    let mut writer = Some(writer);
    let mut expect = vec![seen[0].clone()];
    while writer.is_some() || seen.len() < expect.len() {
        if writer.as_ref().is_some_and(|w| w.is_finished()) {
            expect.extend(writer.take().unwrap().join().unwrap());
        }
        assert!(std::time::Instant::now() < deadline, "saw {} changes: {seen:?}", seen.len());
        let addr = &addrs[hop % 3];
        hop += 1;
        // Short polls: many disconnects, some with nothing new.
        let a = c.block(c.client.watch(addr, "w/", from, Duration::from_millis(300))).unwrap();
        let a = a.unwrap_or_else(|e| panic!("compacted at {addr}: {e:?}"));
        assert!(a.events.iter().all(|e| e.revision >= from && e.key.starts_with("w/")));
        assert!(a.next > from || a.events.is_empty());
        seen.extend(a.events);
        from = a.next;
    }
    assert_eq!(seen, expect, "each change exactly once, in order");
    // A node restarted from a snapshot holds no history before it: 410.
    let until = std::time::Instant::now() + Duration::from_secs(30);
    while c.block(c.client.metrics(&addrs[0])).unwrap().snapshot.is_none_or(|s| s.index <= r0) {
        assert!(std::time::Instant::now() < until, "node 1 built no snapshot");
        std::thread::sleep(Duration::from_millis(50));
    }
    c.node(1).kill();
    c.node(1).spawn();
    let a1 = c.addr(1);
    let gone = c.block(c.client.watch(&a1, "w/", r0, Duration::from_millis(100))).unwrap();
    let oldest = gone.expect_err("history before the restart is compacted").oldest;
    assert!(oldest > r0);
    let (status, _) =
        raw(&c.rt, "GET", &format!("http://{a1}/kv/watch?prefix=w/&from=1&bogus=1"), None, None);
    assert_eq!(status, 400);
}

/// `GET /kv/state` is paged (issue 37, defect 6: it answered the whole
/// state at once): `limit` keys from `start`, `next` to go on; unknown
/// parameters and a limit out of range are a 400.
#[test]
fn the_state_is_read_in_pages() {
    let mut c = Cluster::start(&[]);
    for k in ["a", "b", "c", "d", "e"] {
        c.set(k, &format!("v{k}"));
    }
    let addr = c.addr(c.leader());
    let (mut keys, mut start) = (Vec::new(), String::new());
    loop {
        let page = c.block(c.client.state_page(&addr, &start, 2)).unwrap();
        assert!(page.data.len() <= 2);
        keys.extend(page.data.into_keys());
        match page.next {
            Some(n) => start = n,
            None => break,
        }
    }
    assert_eq!(keys, ["a", "b", "c", "d", "e"]);
    assert_eq!(c.block(c.client.state(&addr)).unwrap().data.len(), 5);
    for q in ["limit=0", "limit=10001", "prefix=a", "start=a&x=1"] {
        let (status, body) = raw(&c.rt, "GET", &format!("http://{addr}/kv/state?{q}"), None, None);
        assert_eq!(status, 400, "{q}: {body}");
    }
    c.converged(true);
}

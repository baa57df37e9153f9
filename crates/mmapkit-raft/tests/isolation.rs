//! Pre-auth denial of service (issue 37, defect 5): silent connections
//! without the token, bodies shorter than declared, heads that never end.
//! A node caps its connections below its fd limit, closes the oldest
//! unauthenticated one to make room for peers and clients with the token,
//! and times out heads, idle connections and stalled bodies.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::Cluster;
use mmapkit_raft::kv::Request;

const TOKEN: &str = "isolation-token";

/// Measured on main before the cap: 1,138 silent sockets to a leader
/// limited to 1,024 fds made 60 of 60 writes through a follower fail for
/// 60 s. Here: a 256-fd leader and 400 silent sockets.
#[test]
fn silent_connections_without_the_token_cannot_keep_peers_or_clients_out() {
    let mut c = Cluster::launch(&["--max-connections", "128"], Some(TOKEN), Some(256));
    c.write(0..5, "a");
    let leader = c.leader();
    let laddr = c.addr(leader);
    let sock: std::net::SocketAddr = laddr.parse().unwrap();
    let silent: Vec<TcpStream> = (0..400)
        .filter_map(|_| TcpStream::connect_timeout(&sock, Duration::from_millis(500)).ok())
        .collect();
    assert!(silent.len() >= 200, "only {} connections opened", silent.len());
    // New connections with the token, to the leader itself and through a
    // follower (which forwards over a connection of its own).
    let follower = c.follower();
    let t0 = Instant::now();
    for (via, addr) in [("the leader", laddr.clone()), ("a follower", c.addr(follower))] {
        let client =
            mmapkit_raft::node::KvClient::new([addr]).unwrap().with_token(Some(TOKEN)).unwrap();
        for i in 0..15 {
            let key = format!("b-{via}-{i}");
            let req = Request::Set { key: key.clone(), value: "v".into() };
            c.block(client.write(&req, Duration::from_secs(4))).unwrap_or_else(|e| {
                panic!("write {i} through {via} with {} silent sockets: {e}", silent.len())
            });
            c.acked.insert(key, "v".into());
        }
    }
    // Prompt, not after the header timeout (10 s) closed the silent ones.
    assert!(t0.elapsed() < Duration::from_secs(8), "30 writes took {:?}", t0.elapsed());
    assert_eq!(c.leader(), leader, "the flood cost the leader its leadership");
    drop(silent);
    c.converged(true);
}

/// A POST declaring 4,000,000 bytes and sending 6 got no answer for 20 s.
#[test]
fn a_body_shorter_than_declared_is_answered_408_and_a_head_that_never_ends_is_closed() {
    let c = Cluster::start(&["--body-timeout", "1", "--header-timeout", "1"]);
    let addr = c.addr(c.leader());
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    let t0 = Instant::now();
    s.write_all(b"POST /kv/write HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 4000000\r\n\r\n{\"Set\"")
        .unwrap();
    let mut answer = String::new();
    let _ = s.read_to_string(&mut answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "after {:?}: {answer:?}", t0.elapsed());
    assert!(answer.contains("not applied") && answer.contains("stalled"), "{answer}");
    assert!(t0.elapsed() < Duration::from_secs(10), "answered after {:?}", t0.elapsed());
    // A head begun and never finished: closed (no answer needed).
    let mut s = TcpStream::connect(&addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost").unwrap();
    let t0 = Instant::now();
    let mut rest = Vec::new();
    let _ = s.read_to_end(&mut rest);
    assert!(
        t0.elapsed() < Duration::from_secs(10),
        "a half head kept its connection {:?}",
        t0.elapsed()
    );
}

/// Peer traffic on its own listener (like etcd's 2380 beside 2379): a
/// client port full of silent connections (no token here, so nothing can
/// be evicted) does not cut the nodes off from each other; a follower
/// forwards writes to the leader's peer port.
#[test]
fn a_full_client_port_does_not_cut_the_nodes_off_from_each_other() {
    let mut c = Cluster::start(&["--peer-bind", "127.0.0.1:0", "--max-connections", "32"]);
    c.write(0..5, "a");
    let leader = c.leader();
    let list = c.block(c.client.members(Duration::from_secs(10))).unwrap();
    assert!(
        list.members.iter().all(|m| m.peer_addr.as_ref().is_some_and(|p| *p != m.addr)),
        "peer addresses recorded at init: {list:?}"
    );
    let sock: std::net::SocketAddr = c.addr(leader).parse().unwrap();
    let silent: Vec<TcpStream> = (0..64)
        .filter_map(|_| TcpStream::connect_timeout(&sock, Duration::from_millis(500)).ok())
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let follower = c.follower();
    let client = mmapkit_raft::node::KvClient::new([c.addr(follower)]).unwrap();
    let t0 = Instant::now();
    for i in 0..20 {
        let key = format!("p{i}");
        let req = Request::Set { key: key.clone(), value: "v".into() };
        c.block(client.write(&req, Duration::from_secs(4))).unwrap_or_else(|e| {
            panic!("write {i} through follower {follower}, leader's client port full: {e}")
        });
        c.acked.insert(key, "v".into());
    }
    assert!(t0.elapsed() < Duration::from_secs(8), "20 writes took {:?}", t0.elapsed());
    assert_eq!(c.leader(), leader);
    drop(silent);
    c.converged(true);
}

//! `GET /kv/backup`, `mmapkit-kv backup` and `restore` (issue 37, memory
//! bounded by configuration): a streamed backup through the leader or a
//! follower equals the state; a backup cut short anywhere is an error in
//! the client, in `backup` (which then leaves no file) and in `restore`
//! (before it writes anything); the older whole-JSON backups still restore.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

mod common;

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpListener;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

use common::{raw, Cluster};
use mmapkit_raft::backup::{BackupReader, Lines, Summary, CHUNK, CHUNKS};
use mmapkit_raft::kv::Request;
use mmapkit_raft::node::KvClient;

const P: Duration = Duration::from_secs(30);

fn kv(args: &[&str], file: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_mmapkit-kv")).args(args).arg(file).output().unwrap()
}

/// The keys and summary of a complete backup (panics on any other).
fn parse(bytes: &[u8]) -> (BTreeMap<String, String>, Summary) {
    let (mut r, mut lines, mut kvs) = (BackupReader::new(), Lines::new(), BTreeMap::new());
    lines
        .feed(bytes, |l| {
            if let Some(kv) = r.line(l)? {
                kvs.insert(kv.key, kv.value);
            }
            Ok(())
        })
        .unwrap();
    assert!(!lines.pending());
    (kvs, r.finish().unwrap())
}

#[test]
fn backups_through_the_leader_and_a_follower_equal_the_state_and_cut_ones_are_refused() {
    let mut c = Cluster::start(&[]);
    let tmp = c.tmp.path().to_owned();
    let nodes = c.nodes.iter().map(|n| n.addr.clone()).collect::<Vec<_>>().join(",");

    // A backup in the older format (one JSON object) restores into the empty cluster.
    let legacy = tmp.join("legacy.json");
    std::fs::write(
        &legacy,
        r#"{"kvs":[{"key":"old/a","value":"1","mod_revision":3},{"key":"old/b","value":"x\ny","mod_revision":4}],"next":null,"revision":4}"#,
    )
    .unwrap();
    let out = kv(&["restore", "--nodes", &nodes], &legacy);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).starts_with("restored 2 keys"));
    c.acked.insert("old/a".into(), "1".into());
    c.acked.insert("old/b".into(), "x\ny".into());

    // More than the server's channel holds, so it streams in many chunks.
    c.write_large("big/", 40, 10_000);
    const { assert!(40 * 10_000 > (CHUNKS + 1) * CHUNK) };
    let odd = Request::Set { key: "ü/\"é\"".into(), value: "a\"\n\u{1}\\b".into() };
    let (last, _) = c.block(c.client.write(&odd, P)).unwrap();
    c.acked.insert("ü/\"é\"".into(), "a\"\n\u{1}\\b".into());

    let (leader, follower) = (c.leader(), c.follower());
    for id in [leader, follower] {
        let one = KvClient::new([c.addr(id)]).unwrap();
        let mut bytes = Vec::new();
        let s = c.block(one.backup_to(&mut bytes, P)).unwrap();
        let (kvs, parsed) = parse(&bytes);
        assert_eq!(s, parsed);
        assert_eq!(kvs, c.acked, "node {id}'s backup");
        assert_eq!(s.count, c.acked.len() as u64);
        assert!(s.revision >= last.index, "node {id}: a read before the last write");
        let whole = c.block(one.backup(P)).unwrap();
        let got: BTreeMap<_, _> = whole.kvs.into_iter().map(|kv| (kv.key, kv.value)).collect();
        assert_eq!(got, c.acked);
        // Unknown parameters are refused (on a follower before any forwarding).
        let (status, text) =
            raw(&c.rt, "GET", &format!("http://{}/kv/backup?prefix=a", c.addr(id)), None, None);
        assert_eq!(status, 400, "{text}");
    }

    // The command writes the same backup to a file, through a follower.
    let file = tmp.join("kv-backup.ndjson");
    let out = kv(&["backup", "--nodes", &c.addr(follower)], &file);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = std::fs::read(&file).unwrap();
    let (kvs, s) = parse(&text);
    assert_eq!(kvs, c.acked);
    let said = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(said.trim(), format!("backed up {} keys at revision {}", s.count, s.revision));

    // Cut anywhere (inside a line, at a line's end, before the end line,
    // just its last newline), a backup file is refused before anything is
    // written: the error is the file's, not the cluster's (which holds keys).
    let end_line = text[..text.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    let first_line = text.iter().position(|&b| b == b'\n').unwrap() + 1;
    for cut in [0, 10, first_line, first_line + 7, text.len() / 2, end_line, text.len() - 1] {
        let f = tmp.join(format!("cut-{cut}.ndjson"));
        std::fs::write(&f, &text[..cut]).unwrap();
        let out = kv(&["restore", "--nodes", &nodes], &f);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "a backup cut at {cut} of {} restored", text.len());
        assert!(!err.contains("holds keys"), "cut at {cut}: {err}");
        if cut > 0 {
            assert!(err.contains("not a complete backup"), "cut at {cut}: {err}");
        }
    }
    c.converged(true);
}

/// A server answering each connection in turn with one of `answers`
/// (whole HTTP responses), then closing it.
fn fake_server(answers: Vec<Vec<u8>>) -> String {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    std::thread::spawn(move || {
        for answer in answers {
            let (mut s, _) = l.accept().unwrap();
            let mut head = Vec::new();
            let mut b = [0u8; 1];
            while !head.ends_with(b"\r\n\r\n") && s.read(&mut b).unwrap() == 1 {
                head.push(b[0]);
            }
            let _ = s.write_all(&answer);
        }
    });
    addr
}

#[test]
fn a_backup_stream_cut_short_is_an_error_in_the_client_and_leaves_no_file() {
    let body = concat!(
        r#"{"mmapkit_kv_backup":1,"revision":5}"#,
        "\n",
        r#"{"key":"a","value":"1","mod_revision":2}"#,
        "\n",
        r#"{"key":"b","value":"2","mod_revision":5}"#,
        "\n",
        r#"{"end":true,"count":2}"#,
        "\n"
    )
    .as_bytes();
    let ok = |b: &[u8]| {
        let mut r =
            b"HTTP/1.1 200 OK\r\ncontent-type: application/x-ndjson\r\nconnection: close\r\n\r\n"
                .to_vec();
        r.extend_from_slice(b);
        r
    };
    let end_line = body[..body.len() - 1].iter().rposition(|&b| b == b'\n').unwrap() + 1;
    // Cut before the end line, inside a line, and a body shorter than its length.
    let mut short =
        format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
    short.extend_from_slice(&body[..body.len() - 5]);
    let cuts = [ok(&body[..end_line]), ok(&body[..end_line - 9]), short];
    let rt = tokio::runtime::Runtime::new().unwrap();
    for (k, cut) in cuts.into_iter().enumerate() {
        let c = KvClient::new([fake_server(vec![cut])]).unwrap();
        let mut out = Vec::new();
        let e = rt.block_on(c.backup_to(&mut out, P)).expect_err("a cut backup was taken");
        assert!(e.to_string().contains("backup"), "cut {k}: {e}");
    }
    // The whole answer, from the same fake server, is taken (the control).
    let c = KvClient::new([fake_server(vec![ok(body)])]).unwrap();
    let mut out = Vec::new();
    let s = rt.block_on(c.backup_to(&mut out, P)).unwrap();
    assert_eq!((s.count, s.revision, out.as_slice()), (2, 5, body));

    // `mmapkit-kv backup` from a cut stream fails and leaves no file.
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("b.ndjson");
    let addr = fake_server(vec![ok(&body[..end_line])]);
    let out = kv(&["backup", "--nodes", &addr], &file);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("cut short"), "{out:?}");
    assert!(!file.exists(), "a failed backup left {}", file.display());
    let left: Vec<_> = std::fs::read_dir(tmp.path()).unwrap().collect();
    assert!(left.is_empty(), "a failed backup left {left:?}");
}

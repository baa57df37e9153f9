//! The KV state machine's snapshot decoding: a snapshot file from the input
//! (raw bytes, or a well-formed file of the input's records, possibly with
//! one byte altered or cut short) found at open ahead of empty tables, and
//! received through openraft's install. Never a panic; a snapshot that is
//! refused leaves the state as it was; one that is taken holds exactly its
//! records when the file was the well-formed one.

use std::collections::BTreeMap;

use mmapkit_raft::kv::KvStateMachine;
use openraft::storage::{RaftStateMachine, SnapshotMeta};
use openraft::{CommittedLeaderId, LogId};

use crate::Input;

type Meta = SnapshotMeta<u64, mmapkit_raft::member::Member>;

/// The file format of `mmapkit_raft`'s snapshot module (its doc).
fn encode(meta: &Meta, records: &BTreeMap<String, (u64, String)>) -> Vec<u8> {
    let json = serde_json::to_vec(meta).expect("json");
    let mut b = b"MMKVSNP1".to_vec();
    b.extend_from_slice(&(json.len() as u32).to_le_bytes());
    b.extend_from_slice(&json);
    for (k, (rev, v)) in records {
        b.extend_from_slice(&(k.len() as u32).to_le_bytes());
        b.extend_from_slice(&(v.len() as u32).to_le_bytes());
        b.extend_from_slice(&rev.to_le_bytes());
        b.extend_from_slice(k.as_bytes());
        b.extend_from_slice(v.as_bytes());
    }
    b.extend_from_slice(&u32::MAX.to_le_bytes());
    b.extend_from_slice(&(records.len() as u64).to_le_bytes());
    let crc = crc32c::crc32c(&b);
    b.extend_from_slice(&crc.to_le_bytes());
    b
}

fn text(b: &mut Input<'_>) -> String {
    let n = b.u8() as usize % 8;
    String::from_utf8_lossy(b.take(n)).into_owned()
}

fn dump(sm: &KvStateMachine) -> BTreeMap<String, (u64, String)> {
    let (kvs, _, _) = sm.range("", None, usize::MAX).expect("read the tables");
    kvs.into_iter().map(|kv| (kv.key, (kv.mod_revision, kv.value))).collect()
}

pub fn kv_snapshot(data: &[u8]) {
    use tokio::io::AsyncWriteExt;
    let mut b = Input::new(data);
    let flags = b.u8();
    let meta = Meta {
        last_log_id: Some(LogId::new(CommittedLeaderId::new(1, 1), 1 + b.u8() as u64)),
        last_membership: Default::default(),
        snapshot_id: text(&mut b),
    };
    let mut records = BTreeMap::new();
    let (bytes, exact) = if flags & 1 == 0 {
        (b.rest().to_vec(), false)
    } else {
        for _ in 0..b.u8() % 8 {
            let k = text(&mut b);
            let rev = b.u8() as u64;
            records.insert(k, (rev, text(&mut b)));
        }
        let mut bytes = encode(&meta, &records);
        let exact = flags & 6 == 0;
        if flags & 2 != 0 {
            let at = b.u16() as usize % bytes.len();
            bytes[at] ^= b.u8().max(1);
        }
        if flags & 4 != 0 {
            bytes.truncate(b.u16() as usize % bytes.len());
        }
        (bytes, exact)
    };
    let tmp = crate::scratch();
    // Found at open, ahead of the (empty) tables: loaded, or refused.
    let at_open = tmp.path().join("open");
    std::fs::create_dir(&at_open).expect("mkdir");
    std::fs::write(at_open.join("snapshot"), &bytes).expect("write snapshot");
    match KvStateMachine::open(&at_open) {
        Ok(sm) if exact => assert_eq!(dump(&sm), records),
        Ok(sm) => drop(dump(&sm)),
        Err(_) => assert!(!exact, "a well-formed snapshot is refused at open"),
    }
    // Received: installed whole, or refused with the state unchanged.
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    let mut sm = KvStateMachine::open(tmp.path().join("recv")).expect("open");
    let before = dump(&sm);
    let installed = rt.block_on(async {
        let mut into = sm.begin_receiving_snapshot().await.expect("receive");
        into.write_all(&bytes).await.expect("write");
        into.shutdown().await.expect("flush");
        sm.install_snapshot(&meta, into).await
    });
    match installed {
        Ok(()) if exact => assert_eq!(dump(&sm), records),
        Ok(()) => drop(dump(&sm)),
        Err(_) => {
            assert!(!exact, "a well-formed snapshot is refused");
            assert_eq!(dump(&sm), before, "a refused snapshot changed the state");
        }
    }
}

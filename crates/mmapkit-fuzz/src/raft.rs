//! The raft store's decoding: a store directory whose metadata file,
//! committed-id slot and log entries come from the input (checksummed
//! JSON, possibly altered before the checksum; real openraft entries with
//! any ids; raw bytes), opened and read through openraft's storage API.
//! Never a panic; what it reads is consecutive and ends at the last log id
//! it reports; a committed id past that end is not returned.

use mmapkit::log::{CommitLog, LogOptions, SyncMode};
use mmapkit_raft::kv::{KvConfig, Request};
use mmapkit_raft::{LogStore, StoreOptions};
use openraft::storage::{RaftLogReader, RaftLogStorage};
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId, Vote};

use crate::Input;

fn log_id(b: &mut Input<'_>) -> LogId<u64> {
    let term = b.u8() as u64;
    let node = b.u8() as u64 % 3;
    let shift = b.u8() % 64;
    LogId::new(CommittedLeaderId::new(term, node), b.u64() >> shift)
}

/// JSON followed by its checksum line, as the store writes its metadata.
fn checksummed(mut body: Vec<u8>, b: &mut Input<'_>) -> Vec<u8> {
    if b.u8() & 1 == 1 && !body.is_empty() {
        // Altered but checksummed: only the JSON decoding can refuse it.
        let at = b.u8() as usize % body.len();
        body[at] = b.u8();
    }
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(format!("\ncrc32c={crc:08x}\n").as_bytes());
    body
}

fn text(b: &mut Input<'_>) -> String {
    let n = b.u8() as usize % 8;
    String::from_utf8_lossy(b.take(n)).into_owned()
}

pub fn raft_decode(data: &[u8]) {
    let mut b = Input::new(data);
    let flags = b.u8();
    let tmp = crate::scratch();
    let dir = tmp.path();

    let purged = (flags & 2 != 0).then(|| log_id(&mut b));
    let gen = b.u8() as u64 % 3;
    let meta = if flags & 1 != 0 {
        let n = b.u8() as usize;
        b.take(n).to_vec()
    } else {
        let vote = (flags & 4 != 0).then(|| Vote::new(b.u8() as u64, b.u8() as u64 % 3));
        let version = if flags & 8 != 0 { b.u8() as u64 } else { 1 };
        let json =
            serde_json::json!({"version": version, "vote": vote, "purged": purged, "log": gen});
        checksummed(serde_json::to_vec(&json).expect("json"), &mut b)
    };
    std::fs::write(dir.join("meta"), meta).expect("write meta");
    let committed = if flags & 16 != 0 {
        let n = b.u8() as usize;
        b.take(n).to_vec()
    } else {
        let c = Some(log_id(&mut b));
        checksummed(serde_json::to_vec(&c).expect("json"), &mut b)
    };
    std::fs::write(dir.join("committed"), committed).expect("write committed");

    // The log: raft index i at log index i + 1 (from the purge point on,
    // or from where the input says).
    let start = match (&purged, flags & 32 != 0) {
        (Some(p), false) => p.index.saturating_add(2),
        _ => 1 + b.u8() as u64 % 4,
    };
    let opts = LogOptions::default().segment_size(4096).first_index(start).sync(SyncMode::Never);
    if let Ok(log) = CommitLog::open(dir.join(format!("log.{gen}")), opts) {
        let mut term = 1;
        for k in 0..b.u8() % 8 {
            let op = b.u8();
            term += (op >> 6) as u64;
            let bytes = if op & 1 == 0 {
                let index =
                    if op & 2 == 0 { (start + k as u64).saturating_sub(1) } else { b.u8() as u64 };
                let payload = match op >> 2 & 3 {
                    0 => EntryPayload::Blank,
                    1 => EntryPayload::Normal(Request::Delete { key: text(&mut b) }),
                    2 => EntryPayload::Normal(Request::Batch(vec![
                        Request::Set { key: text(&mut b), value: text(&mut b) },
                        Request::Delete { key: text(&mut b) },
                        Request::DeleteRange { start: text(&mut b), end: Some(text(&mut b)) },
                    ])),
                    _ => EntryPayload::Normal(Request::Set {
                        key: text(&mut b),
                        value: text(&mut b),
                    }),
                };
                let e = Entry::<KvConfig> {
                    log_id: LogId::new(CommittedLeaderId::new(term, 0), index),
                    payload,
                };
                let mut v = serde_json::to_vec(&e).expect("json");
                if op & 16 != 0 && !v.is_empty() {
                    let at = b.u8() as usize % v.len();
                    v[at] = b.u8();
                }
                v
            } else {
                let n = b.u8() as usize % 40;
                b.take(n).to_vec()
            };
            let t = if op & 32 != 0 { b.u8() as u64 } else { term };
            if log.append(&[(t, bytes)]).is_err() {
                break;
            }
        }
    }

    let opts = StoreOptions::default().segment_size(4096).durable(false);
    let Ok(mut store) = LogStore::<KvConfig>::open(dir, opts) else { return };
    let rt = tokio::runtime::Builder::new_current_thread().build().expect("runtime");
    rt.block_on(async {
        let state = store.get_log_state().await.expect("log state");
        let _ = store.read_vote().await;
        if let Ok(Some(c)) = store.read_committed().await {
            let last = state.last_log_id.as_ref().expect("a committed id with an empty log");
            assert!(c.index <= last.index, "committed {c} past the last {last}");
        }
        let lo = state.last_purged_log_id.as_ref().map_or(0, |p| p.index.saturating_add(1));
        if let Ok(all) = store.try_get_log_entries(..).await {
            for (k, e) in all.iter().enumerate() {
                assert_eq!(e.log_id.index, lo + k as u64, "{all:?}");
            }
            if let Some(e) = all.last() {
                assert_eq!(Some(&e.log_id), state.last_log_id.as_ref());
            }
        }
        let (x, y) = (b.u8() as u64, b.u8() as u64);
        let _ = store.try_get_log_entries(x..=y).await;
        let _ = store.limited_get_log_entries(x, y).await;
    });
}

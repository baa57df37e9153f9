use futures_util::StreamExt;
use openraft::storage::RaftStateMachine;
use openraft::{CommittedLeaderId, Entry, EntryPayload, LogId};

use super::*;
use crate::kv::{KvConfig, KvStateMachine, Request};

/// Waits (polling, up to a minute) until `cond` holds.
async fn wait_until(what: &str, cond: impl Fn() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !cond() {
        assert!(tokio::time::Instant::now() < deadline, "never: {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// A backup of a state several channels' worth large streams: the
/// producer never runs more than the channel (plus the chunk in hand)
/// ahead of the reader, so the server never holds it whole; the chunks
/// read make the whole state, checked by the end line; a reader that
/// goes away mid-way stops the producer (its read transaction dropped).
#[test]
fn a_backup_streams_in_bounded_chunks_and_stops_when_the_reader_goes() {
    let dir = tempfile::tempdir().unwrap();
    let mut sm = KvStateMachine::open(dir.path()).unwrap();
    let rt =
        tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let n = 1000usize;
    let entries: Vec<Entry<KvConfig>> = (0..n)
        .map(|i| Entry {
            log_id: LogId::new(CommittedLeaderId::new(1, 1), i as u64 + 1),
            payload: EntryPayload::Normal(Request::Set {
                key: format!("k{i:04}"),
                value: format!("{i}\n\"{}", "v".repeat(2000)),
            }),
        })
        .collect();
    rt.block_on(sm.apply(entries)).unwrap();
    let whole = n * 2000;
    assert!(whole > 3 * (backup::CHUNKS + 1) * backup::CHUNK, "the state must outsize the channel");
    rt.block_on(async {
        let stats = Arc::new(backup::BackupStats::default());
        let made = || stats.chunks.load(Ordering::SeqCst);
        let body = backup_body(sm.backup_cut().unwrap(), stats.clone(), backup::STALL).into_body();
        let mut body = body.into_data_stream();
        // Unread, the producer fills the channel and one chunk in hand.
        wait_until("the channel is full", || made() == backup::CHUNKS as u64 + 1).await;
        let (mut reader, mut lines, mut keys) =
            (backup::BackupReader::new(), backup::Lines::new(), Vec::new());
        let mut received = 0u64;
        while let Some(b) = body.next().await {
            let b = b.unwrap();
            received += 1;
            assert!(
                made() <= received + backup::CHUNKS as u64 + 1,
                "{} chunks made, {received} read: the producer ran ahead",
                made()
            );
            lines
                .feed(&b, |l| {
                    keys.extend(reader.line(l)?.map(|kv| kv.key));
                    Ok(())
                })
                .unwrap();
        }
        assert!(!lines.pending());
        let s = reader.finish().unwrap();
        assert_eq!((s.count, s.revision), (n as u64, n as u64));
        assert_eq!(keys.len(), n);
        assert!(received > 2 * (backup::CHUNKS as u64 + 1), "{received} chunks");
        wait_until("the producer ended", || stats.running.load(Ordering::SeqCst) == 0).await;

        // A reader that goes away after one chunk.
        let before = made();
        let body = backup_body(sm.backup_cut().unwrap(), stats.clone(), backup::STALL).into_body();
        let mut body = body.into_data_stream();
        body.next().await.unwrap().unwrap();
        drop(body);
        wait_until("the producer stopped", || stats.running.load(Ordering::SeqCst) == 0).await;
        assert!(made() - before <= backup::CHUNKS as u64 + 2, "{} chunks", made() - before);

        // A reader that stays connected but takes nothing: after the
        // stall the producer stops, and the body breaks (no clean end).
        let stall = Duration::from_millis(200);
        let body = backup_body(sm.backup_cut().unwrap(), stats.clone(), stall).into_body();
        let mut body = body.into_data_stream();
        body.next().await.unwrap().unwrap();
        wait_until("the stalled backup stopped", || stats.running.load(Ordering::SeqCst) == 0)
            .await;
        let mut broke = false;
        while let Some(b) = body.next().await {
            if b.is_err() {
                broke = true;
                break;
            }
        }
        assert!(broke, "a stalled backup's body ended cleanly");
    });
}

#[test]
fn prefix_end_is_the_first_string_past_the_prefix() {
    assert_eq!(prefix_end("a/").as_deref(), Some("a0"));
    assert_eq!(prefix_end("ab").as_deref(), Some("ac"));
    assert_eq!(prefix_end(""), None);
    assert_eq!(prefix_end("a\u{10FFFF}").as_deref(), Some("b"));
    assert_eq!(prefix_end("\u{D7FF}").as_deref(), Some("\u{E000}"), "surrogates skipped");
    for k in ["a/", "a/x", "a/\u{10FFFF}\u{10FFFF}"] {
        assert!(in_range("a/", prefix_end("a/").as_deref(), k), "{k:?}");
    }
    assert!(!in_range("a/", prefix_end("a/").as_deref(), "a0"));
}

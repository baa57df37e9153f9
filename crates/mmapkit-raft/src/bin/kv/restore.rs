//! `mmapkit-kv restore`: a backup file, checked whole, then written into
//! an empty cluster.

use super::*;

/// Sets every key of the backup in `file`, 16 at a time, into a cluster
/// that holds none. The file is read line by line twice: once to check it
/// whole (a backup cut short is refused before anything is written), then
/// to write its keys. A backup in the older format (one JSON object,
/// `{"kvs":[...]}`, which older servers answered whole) is still read, whole.
pub(super) async fn restore(
    conn: Conn,
    file: &std::path::Path,
    patience: Duration,
) -> Result<i32, BoxError> {
    let path = file.to_owned();
    let legacy = tokio::task::spawn_blocking(move || read_legacy(&path)).await??;
    let (n, revision) = match &legacy {
        Some(b) => (b.kvs.len() as u64, b.revision),
        None => {
            let path = file.to_owned();
            let s = tokio::task::spawn_blocking(move || each_line(&path, |_| true)).await??;
            (s.count, s.revision)
        }
    };
    let c = client(conn.nodes, conn.token)?;
    if !c.range("", None, 1, patience).await?.kvs.is_empty() {
        return Err("the cluster holds keys: restore into an empty one".into());
    }
    // Keys flow from a reading thread through a small channel to 16 writers.
    let (tx, rx) = tokio::sync::mpsc::channel::<mmapkit_raft::kv::KeyValue>(256);
    let path = file.to_owned();
    let reader = tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
        match legacy {
            Some(b) => {
                for kv in b.kvs {
                    if tx.blocking_send(kv).is_err() {
                        break;
                    }
                }
            }
            None => drop(each_line(&path, |kv| tx.blocking_send(kv).is_ok())?),
        }
        Ok(())
    });
    let rx = Arc::new(tokio::sync::Mutex::new(rx));
    let mut tasks = Vec::new();
    for _ in 0..16 {
        let (c, rx) = (c.clone(), rx.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let Some(kv) = rx.lock().await.recv().await else {
                    return Ok::<_, String>(());
                };
                let req = Request::Set { key: kv.key, value: kv.value };
                c.write(&req, patience).await.map_err(|e| e.to_string())?;
            }
        }));
    }
    let mut failed = None;
    for t in tasks {
        if let Err(e) = t.await.map_err(|e| e.to_string()).and_then(|r| r) {
            // The others stop once the channel closes.
            rx.lock().await.close();
            failed.get_or_insert(e);
        }
    }
    // A writer's error first: the reader stopped early because of it.
    let read = reader.await;
    if let Some(e) = failed {
        return Err(e.into());
    }
    read??;
    println!("restored {n} keys (from revision {revision})");
    Ok(0)
}

/// The backup in `file` if it is in the older whole-JSON format (which
/// always starts `{"kvs":`; read whole, through a mapping); `None` for
/// anything else, read as the line format.
fn read_legacy(
    file: &std::path::Path,
) -> Result<Option<mmapkit_raft::query::RangeAnswer>, BoxError> {
    const LEGACY: &[u8] = br#"{"kvs":"#;
    let f = mmapkit::fs::open_in_place(file, mmapkit::fs::InPlace::Read)?;
    let mut head = Vec::with_capacity(LEGACY.len());
    std::io::Read::read_to_end(&mut std::io::Read::take(f, LEGACY.len() as u64), &mut head)
        .map_err(|e| format!("{}: {e}", file.display()))?;
    if head != LEGACY {
        return Ok(None);
    }
    let map = mmapkit::map::Map::open(file, mmapkit::map::Mode::Read)?;
    let b = map
        .read_with(|bytes| serde_json::from_slice(bytes))?
        .map_err(|e| format!("{}: not a backup: {e}", file.display()))?;
    Ok(Some(b))
}

/// Reads the line-format backup in `file`, one line at a time, handing
/// each key to `each` (which returns `false` to stop early); the summary
/// once the end line was read, else the error of a file cut short or
/// damaged (naming the file).
fn each_line(
    file: &std::path::Path,
    mut each: impl FnMut(mmapkit_raft::kv::KeyValue) -> bool,
) -> Result<mmapkit_raft::backup::Summary, BoxError> {
    use mmapkit_raft::backup::{BackupReader, LINE_MAX};
    use std::io::{BufRead, Read};
    let bad = |e: String| format!("{}: not a complete backup: {e}", file.display());
    let f = mmapkit::fs::open_in_place(file, mmapkit::fs::InPlace::Read)?;
    let mut r = std::io::BufReader::with_capacity(1 << 20, f);
    let (mut reader, mut line) = (BackupReader::new(), Vec::new());
    loop {
        line.clear();
        let got = (&mut r).take(LINE_MAX as u64 + 1).read_until(b'\n', &mut line);
        if got.map_err(|e| format!("{}: {e}", file.display()))? == 0 {
            break;
        }
        if line.pop() != Some(b'\n') {
            let why = if line.len() >= LINE_MAX {
                "a line is too long"
            } else {
                "cut short inside a line"
            };
            return Err(bad(why.into()).into());
        }
        if let Some(kv) = reader.line(&line).map_err(bad)? {
            if !each(kv) {
                break;
            }
        }
    }
    Ok(reader.finish().map_err(bad)?)
}

//! Commit-log helpers shared by the core's unit tests (`src/test_util.rs`)
//! and its integration tests (`tests/common/mod.rs`); each includes this
//! file by path after importing `CommitLog`, `LogOptions` and `SyncMode`.
#![allow(dead_code)]

use std::path::Path;

use super::{CommitLog, LogOptions, SyncMode};

/// Segments of `seg` bytes and no syncing (durability is tested apart).
pub fn opts(seg: u64) -> LogOptions {
    LogOptions::default().segment_size(seg).sync(SyncMode::Never)
}

/// Segments of `seg` bytes, each append synced (`SyncMode::Batch`).
pub fn synced(seg: u64) -> LogOptions {
    opts(seg).sync(SyncMode::Batch)
}

/// `o` with repair on.
pub fn repairing(o: LogOptions) -> LogOptions {
    o.repair(true)
}

/// Opens (creating) the log in `dir` with `o` and appends `n` one-entry
/// batches, the `i`-th (from 0) being `entry(i)` = (term, payload).
pub fn open_filled(
    dir: &Path,
    o: LogOptions,
    n: u64,
    entry: impl Fn(u64) -> (u64, Vec<u8>),
) -> CommitLog {
    let log = CommitLog::open(dir, o).unwrap();
    for i in 0..n {
        log.append(&[entry(i)]).unwrap();
    }
    log
}

/// Entries `lo..hi` as (index, term, payload).
pub fn collect(log: &CommitLog, lo: u64, hi: u64) -> Vec<(u64, u64, Vec<u8>)> {
    log.read(lo, hi, None)
        .unwrap()
        .iter()
        .map(|e| (e.index(), e.term(), e.data().to_vec()))
        .collect()
}

/// Every entry as (index, term, payload), oldest first.
pub fn entries(log: &CommitLog) -> Vec<(u64, u64, Vec<u8>)> {
    if log.is_empty() {
        return Vec::new();
    }
    collect(log, log.first_index(), log.last_index() + 1)
}

/// Every payload, oldest first.
pub fn payloads(log: &CommitLog) -> Vec<Vec<u8>> {
    entries(log).into_iter().map(|e| e.2).collect()
}

/// The first index of a segment file, from its name.
pub fn first_index_of(seg: &Path) -> u64 {
    seg.file_name().unwrap().to_str().unwrap()[..20].parse().unwrap()
}

/// XORs `mask` into byte `at` of the file; the file's bytes after.
pub fn flip(path: &Path, at: usize, mask: u8) -> Vec<u8> {
    let mut b = std::fs::read(path).unwrap();
    b[at] ^= mask;
    std::fs::write(path, &b).unwrap();
    b
}

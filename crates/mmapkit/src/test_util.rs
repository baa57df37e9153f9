//! Shared by the unit tests: the scan options matrix, naive references,
//! files with given contents, short-read streams, FIFOs and log helpers.

use std::path::{Path, PathBuf};

use crate::log::{CommitLog, LogOptions, SyncMode};
use crate::scan::{ScanOptions, Strategy};

#[path = "../tests/common/plain.rs"]
mod plain;
pub(crate) use plain::*;

#[path = "../tests/common/log.rs"]
mod log;
pub(crate) use log::*;

/// Every strategy, `Auto` included.
pub(crate) const ALL_STRATEGIES: [Strategy; 4] =
    [Strategy::Mmap, Strategy::Read, Strategy::Stream, Strategy::Auto];
/// The strategies a caller can force (`Auto` picks one of them).
pub(crate) const STRATEGIES: [Strategy; 3] = [Strategy::Mmap, Strategy::Read, Strategy::Stream];
/// Window sizes that cut needles and lines everywhere; 0 is the default.
pub(crate) const CHUNKS: [usize; 5] = [1, 3, 7, 64, 0];

/// The options matrix the tools promise to agree on: `strategies` × one
/// and three threads × `chunks`.
pub(crate) fn scan_matrix(strategies: &[Strategy], chunks: &[usize]) -> Vec<ScanOptions> {
    let mut v = Vec::new();
    for &strategy in strategies {
        for threads in [1, 3] {
            for &chunk in chunks {
                v.push(ScanOptions {
                    strategy,
                    threads: threads.into(),
                    chunk,
                    progress: Default::default(),
                });
            }
        }
    }
    v
}

/// Offsets of the leftmost non-overlapping occurrences, the slow way.
pub(crate) fn naive_all(hay: &[u8], needle: &[u8]) -> Vec<u64> {
    let mut out = Vec::new();
    let mut i = 0;
    while i + needle.len() <= hay.len() {
        if &hay[i..i + needle.len()] == needle {
            out.push(i as u64);
            i += needle.len();
        } else {
            i += 1;
        }
    }
    out
}

/// Offset of the last (possibly overlapping) occurrence.
pub(crate) fn naive_last(hay: &[u8], needle: &[u8]) -> Option<u64> {
    (0..=hay.len().saturating_sub(needle.len()))
        .rev()
        .find(|&i| hay.len() >= needle.len() && &hay[i..i + needle.len()] == needle)
        .map(|i| i as u64)
}

/// A temporary directory holding one file with `data`.
pub(crate) fn temp_file(data: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.bin");
    std::fs::write(&p, data).unwrap();
    (dir, p)
}

/// A reader that returns at most `.1` bytes per read (forces carries).
pub(crate) struct Trickle<'a>(pub &'a [u8], pub usize);

impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.len().min(self.1).min(buf.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

/// A FIFO at `dir/name` fed with `data` by a thread (joined by the caller).
pub(crate) fn fifo(
    dir: &Path,
    name: &str,
    data: Vec<u8>,
) -> (PathBuf, std::thread::JoinHandle<()>) {
    let p = dir.join(name);
    assert!(std::process::Command::new("mkfifo").arg(&p).status().unwrap().success());
    let q = p.clone();
    let h = std::thread::spawn(move || {
        use std::io::Write;
        // A reader that failed before opening would leave us blocked: give up then.
        if let Ok(mut f) = std::fs::OpenOptions::new().write(true).open(&q) {
            let _ = f.write_all(&data);
        }
    });
    (p, h)
}

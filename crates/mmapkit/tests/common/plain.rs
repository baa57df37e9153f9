//! Test helpers that need nothing but `std`, shared by three test builds:
//! the core's unit tests (`src/test_util.rs`), its integration tests
//! (`tests/common/mod.rs`) and the CLI's tests (`mmapkit-cli/tests/common`),
//! each of which includes this file by path.
#![allow(dead_code)]

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// A small seeded xorshift: the tests need no crate for random choices.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    /// Uniform in `0..n` (0 for `n == 0`).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The files of `dir` with extension `ext`, sorted by name.
pub fn files_with_ext(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    v.sort();
    v
}

/// The segment files of the commit log in `dir`, oldest first.
pub fn segments(dir: &Path) -> Vec<PathBuf> {
    files_with_ext(dir, "seg")
}

/// Temporary files mmapkit left behind in `dir` (an interrupted rewrite).
pub fn temp_files(dir: &Path) -> Vec<PathBuf> {
    fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().contains(".mmapkit-"))
        .collect()
}

/// Sets the mtime of `path` far into the past and returns it, so that a
/// test can tell whether the file was written since.
pub fn old_mtime(path: &Path) -> SystemTime {
    let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs::File::options().write(true).open(path).unwrap().set_modified(t).unwrap();
    fs::metadata(path).unwrap().modified().unwrap()
}

/// Python's `bytes.replace`: leftmost, non-overlapping; the result and
/// the number of replacements.
pub fn naive_replace(hay: &[u8], pat: &[u8], rep: &[u8]) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let mut n = 0;
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(pat) {
            out.extend_from_slice(rep);
            i += pat.len();
            n += 1;
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    (out, n)
}

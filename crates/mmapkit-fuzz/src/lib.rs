//! Fuzz harnesses: one function per target, each taking arbitrary bytes and
//! asserting the target's properties (never a panic; errors are fine where
//! the input is bad). `fuzz/` (cargo-fuzz, nightly) drives them for
//! coverage-guided runs (`make fuzz`); `tests/corpus.rs` replays the
//! committed corpus `fuzz/corpus/<target>/` through them on stable.
#![forbid(unsafe_code)]
#![allow(
    clippy::disallowed_methods,
    reason = "dev-only: the harness writes the damaged files it feeds the code under test directly"
)]

mod fasta;
mod grep;
mod kv_backup;
mod kv_snapshot;
mod log;
mod npy;
mod raft;
mod replicate;

pub use fasta::fasta;
pub use grep::grep;
pub use kv_backup::kv_backup;
pub use kv_snapshot::kv_snapshot;
pub use log::log_recovery;
pub use npy::npy_header;
pub use raft::raft_decode;
pub use replicate::replicate;

/// Reads structured values off the front of the fuzz input; past its end
/// every value is zero (so every input is valid).
pub(crate) struct Input<'a>(&'a [u8]);

impl<'a> Input<'a> {
    pub fn new(data: &'a [u8]) -> Self {
        Input(data)
    }
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
    pub fn u8(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }
    pub fn u16(&mut self) -> u16 {
        u16::from_le_bytes([self.u8(), self.u8()])
    }
    pub fn u64(&mut self) -> u64 {
        let mut b = [0u8; 8];
        b.iter_mut().for_each(|x| *x = self.u8());
        u64::from_le_bytes(b)
    }
    /// Up to `n` bytes.
    pub fn take(&mut self, n: usize) -> &'a [u8] {
        let (a, b) = self.0.split_at(n.min(self.0.len()));
        self.0 = b;
        a
    }
    /// Bytes up to the next `sep` (dropped) or the end.
    pub fn until(&mut self, sep: u8) -> &'a [u8] {
        match self.0.iter().position(|&b| b == sep) {
            Some(i) => {
                let a = &self.0[..i];
                self.0 = &self.0[i + 1..];
                a
            }
            None => self.rest(),
        }
    }
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.0)
    }
}

/// A scratch directory on tmpfs where there is one (the log and raft
/// harnesses fsync; on tmpfs that costs nothing).
pub(crate) fn scratch() -> tempfile::TempDir {
    let shm = std::path::Path::new("/dev/shm");
    if shm.is_dir() {
        if let Ok(d) = tempfile::Builder::new().prefix("mmapkit-fuzz").tempdir_in(shm) {
            return d;
        }
    }
    tempfile::tempdir().expect("temp dir")
}

//! Replays the committed fuzz corpus (`fuzz/corpus/<target>/`, minimized by
//! `cargo fuzz cmin`; inputs that once crashed included) through every
//! harness on stable, so `cargo test` keeps what the fuzzer found fixed.

#![allow(clippy::disallowed_methods, reason = "integration tests read their fixtures directly")]

use std::path::PathBuf;

fn corpus(target: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../fuzz/corpus").join(target);
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.expect("read_dir").path())
        .collect();
    files.sort();
    files
}

fn replay(target: &str, harness: fn(&[u8])) {
    let files = corpus(target);
    assert!(!files.is_empty(), "no corpus for {target}");
    for f in files {
        let data = std::fs::read(&f).expect("read");
        if std::panic::catch_unwind(|| harness(&data)).is_err() {
            panic!("{target}: {} fails", f.display());
        }
    }
}

macro_rules! replay {
    ($($target:ident),*) => {$(
        #[test]
        fn $target() {
            replay(stringify!($target), mmapkit_fuzz::$target);
        }
    )*};
}

replay!(log_recovery, npy_header, replicate, raft_decode, kv_snapshot, kv_backup, fasta, grep);

//! Integration tests of the map's cross-thread and cross-process promises.
#![allow(clippy::disallowed_methods, reason = "integration tests write their fixtures directly")]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::thread;

use mmapkit::map::{page_size, Map, Mode};
use mmapkit::Error;

#[test]
fn readers_keep_their_slices_while_another_thread_grows() {
    let dir = tempfile::tempdir().unwrap();
    let map = Arc::new(Map::create(dir.path().join("g.bin"), 0).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let busy = Arc::new(AtomicUsize::new(0)); // readers that have checked a grown map
    let start = Arc::new(Barrier::new(4));
    let base = map.as_ptr() as usize;
    let readers: Vec<_> = (0..3)
        .map(|_| {
            let (map, stop, busy, start) = (map.clone(), stop.clone(), busy.clone(), start.clone());
            thread::spawn(move || {
                let mut checks = 0u64;
                start.wait();
                while !stop.load(Ordering::Relaxed) {
                    let s = map.as_slice(); // a slice of whatever length it has now
                    assert_eq!(s.as_ptr() as usize, base, "the map moved");
                    // every grown region is zero-filled
                    assert!(s.iter().step_by(997).all(|&b| b == 0));
                    if checks == 0 && !s.is_empty() {
                        busy.fetch_add(1, Ordering::Relaxed);
                    }
                    checks += !s.is_empty() as u64;
                }
                checks
            })
        })
        .collect();
    start.wait();
    for i in 1..=200 {
        map.grow(i * 3 * page_size() + 7).unwrap();
    }
    while busy.load(Ordering::Relaxed) < 3 {
        thread::yield_now(); // every reader must have read a grown map
    }
    stop.store(true, Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
    assert_eq!(map.len(), 200 * 3 * page_size() + 7);
}

#[test]
fn truncation_by_another_process_during_a_scan() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("t.bin");
    std::fs::write(&path, vec![1u8; 64 << 20]).unwrap();
    let map = Map::open(&path, Mode::Read).unwrap();
    assert_eq!(map.count(&[1]).unwrap(), 64 << 20);
    let status =
        std::process::Command::new("truncate").args(["-s", "4096"]).arg(&path).status().unwrap();
    assert!(status.success());
    match map.count(&[1]) {
        Err(Error::FileTruncated { path: p }) => assert_eq!(p, path),
        other => panic!("expected FileTruncated, got {other:?}"),
    }
}

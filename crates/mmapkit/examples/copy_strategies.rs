//! Measures copying a file's bytes out of a fresh map three ways
//! (used to pick `Map::read_at`'s strategy): cargo run --release --example copy_strategies FILE
#![allow(clippy::disallowed_methods, reason = "examples write their demo files directly")]
use std::os::unix::fs::FileExt;
use std::time::Instant;

use mmapkit::map::{Advice, Map, Mode};

fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    let len = std::fs::metadata(&path).unwrap().len() as usize;
    let mut buf = vec![0u8; len];
    let f = std::fs::File::open(&path).unwrap();
    f.read_exact_at(&mut buf, 0).unwrap(); // warm the page cache
    for round in 0..3 {
        let t = Instant::now();
        let m = Map::open(&path, Mode::Read).unwrap();
        m.read_at(0, &mut buf).unwrap();
        let memcpy = t.elapsed();
        drop(m);
        let t = Instant::now();
        let m = Map::open(&path, Mode::Read).unwrap();
        m.populate(false).unwrap();
        m.read_at(0, &mut buf).unwrap();
        let populate = t.elapsed();
        drop(m);
        let t = Instant::now();
        let m = Map::open(&path, Mode::Read).unwrap();
        m.advise(Advice::Sequential, 0, None).unwrap();
        m.read_at(0, &mut buf).unwrap();
        let seq = t.elapsed();
        drop(m);
        let t = Instant::now();
        f.read_exact_at(&mut buf, 0).unwrap();
        let pread = t.elapsed();
        let t = Instant::now();
        let m = Map::open(&path, Mode::Read).unwrap();
        m.read_at(0, &mut buf).unwrap();
        m.read_at(0, &mut buf).unwrap();
        let second = t.elapsed() - memcpy;
        // Into a fresh, never-touched destination (what Python's bytes gets).
        let t = Instant::now();
        let m = Map::open(&path, Mode::Read).unwrap();
        let mut fresh = vec![0u8; len];
        m.read_at(0, &mut fresh).unwrap();
        let fresh_memcpy = t.elapsed();
        drop((m, fresh));
        let t = Instant::now();
        let mut fresh = vec![0u8; len];
        f.read_exact_at(&mut fresh, 0).unwrap();
        let fresh_pread = t.elapsed();
        drop(fresh);
        println!("round {round}: fresh dest: memcpy {fresh_memcpy:?} pread {fresh_pread:?}");
        println!("round {round}: fresh memcpy {memcpy:?}  populate+memcpy {populate:?}  sequential+memcpy {seq:?}  pread {pread:?}  memcpy on mapped pages {second:?}");
    }
}

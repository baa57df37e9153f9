//! Does pre-populating page tables per window speed up a mapped scan?
//! cargo run --release --example fault_cost FILE
#![allow(clippy::disallowed_methods, reason = "examples write their demo files directly")]
use std::time::Instant;

use mmapkit::map::{Advice, Map, Mode};

fn main() {
    let path = std::env::args().nth(1).expect("FILE");
    for round in 0..3 {
        for populate in [false, true] {
            let t = Instant::now();
            let m = Map::open(&path, Mode::Read).unwrap();
            m.advise(Advice::Sequential, 0, None).unwrap();
            let win = 8 << 20;
            let mut n = 0;
            let mut pos = 0;
            while pos < m.len() {
                let end = (pos + win).min(m.len());
                if populate {
                    m.advise(Advice::PopulateRead, pos, Some(end - pos)).unwrap();
                }
                n += bytecount::count(&m.as_slice()[pos..end], b'\n');
                pos = end;
            }
            println!("round {round} populate={populate}: {n} lines in {:?}", t.elapsed());
        }
    }
}

//! The FASTA/FASTQ parser: a mapped file and a stream give the same
//! records (or both fail), whatever the block caps; every record's k-mers
//! count without a panic, and the counts add up to the total returned.

use mmapkit::kmer::{records_for_fuzzing, Kmerizer, MAX_K};

use crate::Input;

pub fn fasta(data: &[u8]) {
    let mut b = Input::new(data);
    let k = 1 + b.u8() as usize % MAX_K.min(4);
    let records = 1 + b.u8() as usize % 4;
    let bytes = 1 + b.u16() as usize;
    let text = b.rest();
    let whole = records_for_fuzzing(text, false, usize::MAX, usize::MAX);
    for (stream, records, bytes) in
        [(true, usize::MAX, usize::MAX), (false, records, bytes), (true, records, bytes)]
    {
        let got = records_for_fuzzing(text, stream, records, bytes);
        match (&whole, &got) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "stream {stream}, caps {records}/{bytes}"),
            (Err(_), Err(_)) => {}
            _ => panic!("stream {stream}, caps {records}/{bytes}: {whole:?} vs {got:?}"),
        }
    }
    let Ok(seqs) = whole else { return };
    let km = Kmerizer::new(k).expect("k in range");
    let mut out = vec![0u32; km.dims()];
    for s in &seqs {
        out.fill(0);
        if let Ok(total) = km.count(s, &mut out) {
            assert_eq!(out.iter().map(|&c| c as u64).sum::<u64>(), total);
        }
    }
}

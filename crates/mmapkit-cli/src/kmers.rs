//! `mmapkit kmers`: canonical k-mer frequency vectors of FASTA/FASTQ reads.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;
use mmapkit::kmer::{self, KmerOptions, Mode, OutFormat};

use crate::common::{Progress, ThreadsArg, EXIT_OK};

pub const KMERS_HELP: &str = "\
Reads FASTA or FASTQ (plain or gzip, detected from the content; sequences may
span lines) and writes one vector per read, in input order: canonical k-mers
(a k-mer and its reverse complement counted together; 136 dimensions at k=4,
ordered AAAA, AAAC, ... like kmertools), as frequencies (count / k-mers in the
read) or with --counts raw counts. Lowercase counts like uppercase; k-mers
containing N or any other non-ACGT letter are skipped; a read without k-mers
gives zeros.

Formats (default from OUT's extension: .npy, .tsv, else csv):
  csv, tsv   one line per read, every value with 6 decimals (0.015625), or
             with --counts plain decimal numbers (0,3,12): byte for byte what
             kmertools comp oligo -p csv|tsv [-c] writes for the same k
  npy        a (reads, dims) float32 array (uint32 with --counts)

Modes (identical output bytes in every mode and thread count):
  single     one thread: read, vectorise, append
  batch      a reader thread queues batches of 10,000 reads, the worker pool
             vectorises each batch, batches are appended in order
  mmap       (default) workers take the next reads from the mapped input and
             write each block of vectors at its offset in the output (one
             positional write): no queue, no reordering (csv/tsv counts vary
             in length: a block's offset is known once the blocks before it
             are vectorised)

INPUT may be - (or /dev/stdin), a pipe or a FIFO: it is read once, as a
stream (gzip detected from its first bytes), in every mode, with the same
output bytes as the same data in a regular file.

OUT is written to a temporary file beside it and renamed into place at the
end: an interrupted run never leaves a complete-looking OUT (SIGINT, SIGTERM
and SIGHUP remove the temporary file; exit status 128 + the signal). A
symlink OUT is written through (the link stays); OUT keeps its mode and
owner; OUT being INPUT, a directory, a FIFO or a device is an error. `-o -`
(or /dev/stdout on a pipe or terminal) streams csv/tsv to stdout. A malformed
record is an error naming the file and the record number (exit status 2).

Examples:
  mmapkit kmers reads.fq.gz -o vectors.csv
  mmapkit kmers -k 5 --counts reads.fa -o counts.tsv
  mmapkit kmers reads.fa -o vectors.npy -j 8        then np.load('vectors.npy')
  mmapkit kmers --mode single reads.fa -o v.csv     the article's baseline design
  mmapkit kmers --json reads.fa -o v.csv            summary: reads, dims, seconds";

/// Arguments of `mmapkit kmers`.
#[derive(Args, Debug)]
pub struct KmersArgs {
    /// FASTA or FASTQ file, plain or gzip ('-': standard input).
    #[arg(value_name = "INPUT")]
    input: PathBuf,
    /// Where to write the vectors.
    #[arg(long, short = 'o', value_name = "OUT")]
    output: PathBuf,
    /// k-mer length (1 to 10).
    #[arg(short = 'k', long = "k-size", default_value_t = 4)]
    k: usize,
    /// csv, tsv or npy (default: from OUT's extension).
    #[arg(long)]
    format: Option<OutFormat>,
    /// Raw counts instead of frequencies.
    #[arg(long)]
    counts: bool,
    /// single, batch or mmap.
    #[arg(long, default_value = "mmap")]
    mode: Mode,
    // (single mode uses one thread)
    #[command(flatten)]
    exec: ThreadsArg,
    /// fsync OUT before renaming it into place.
    #[arg(long)]
    sync: bool,
    /// Print a JSON summary (input, output, reads, dims, k, format, mode, seconds).
    #[arg(long)]
    json: bool,
}

pub fn kmers(a: KmersArgs) -> anyhow::Result<u8> {
    let format = a.format.unwrap_or_else(|| OutFormat::for_path(&a.output));
    let (progress, _bar) = Progress::start(format!("kmers {}", a.input.display()));
    let opts = KmerOptions::default()
        .k(a.k)
        .counts(a.counts)
        .mode(a.mode)
        .threads(a.exec.threads)
        .sync(a.sync)
        .progress(progress);
    let t0 = std::time::Instant::now();
    let s = kmer::write(&a.input, &a.output, format, &opts)?;
    let secs = t0.elapsed().as_secs_f64();
    drop(_bar);
    if a.json {
        let mut out = std::io::BufWriter::new(crate::stdout::stdout());
        serde_json::to_writer(
            &mut out,
            &serde_json::json!({
                "input": a.input, "output": a.output, "reads": s.records, "dims": s.dims,
                "k": a.k, "format": format.to_string(), "counts": a.counts, "mode": a.mode.to_string(),
                "seconds": secs,
            }),
        )?;
        writeln!(out)?;
        out.flush()?;
    }
    Ok(EXIT_OK)
}

use super::*;
use proptest::prelude::*;
use std::io::Write;
use std::path::PathBuf;

/// The naive model: clean the sequence of line breaks, slide a window,
/// skip windows with a non-ACGT letter, count min(kmer, revcomp) by label.
fn naive(seq: &[u8], k: usize) -> (Vec<u32>, u64) {
    let km = Kmerizer::new(k).unwrap();
    let labels = km.labels();
    let clean: Vec<u8> =
        seq.iter().filter(|&&b| b != b'\n' && b != b'\r').map(|b| b.to_ascii_uppercase()).collect();
    let mut out = vec![0u32; labels.len()];
    let mut total = 0;
    if clean.len() >= k {
        for w in clean.windows(k) {
            if !w.iter().all(|b| b"ACGT".contains(b)) {
                continue;
            }
            let f = String::from_utf8(w.to_vec()).unwrap();
            let rc: String = w
                .iter()
                .rev()
                .map(|b| match b {
                    b'A' => 'T',
                    b'C' => 'G',
                    b'G' => 'C',
                    _ => 'A',
                })
                .collect();
            let c = if f <= rc { f } else { rc };
            out[labels.iter().position(|l| *l == c).unwrap()] += 1;
            total += 1;
        }
    }
    (out, total)
}

#[test]
fn dims_and_labels() {
    assert_eq!(dims(4), 136);
    for k in 1..=8 {
        let km = Kmerizer::new(k).unwrap();
        let labels = km.labels();
        assert_eq!(labels.len(), dims(k));
        assert!(labels.windows(2).all(|w| w[0] < w[1]), "sorted like the 2-bit codes");
    }
    assert_eq!(&Kmerizer::new(4).unwrap().labels()[..3], ["AAAA", "AAAC", "AAAG"]);
    assert!(Kmerizer::new(0).is_err());
    assert!(Kmerizer::new(MAX_K + 1).is_err());
}

#[test]
fn counts_a_known_sequence() {
    let km = Kmerizer::new(4).unwrap();
    let mut c = vec![0; 136];
    // pykmertools: ACGT x2, CGTA x3, GTAC x1, GTAA x1 (7 k-mers)
    assert_eq!(km.count(b"ACGTac\ngtAA", &mut c), Ok(7));
    let labels = km.labels();
    let at = |s: &str| c[labels.iter().position(|l| l == s).unwrap()];
    assert_eq!((at("ACGT"), at("CGTA"), at("GTAC"), at("GTAA")), (2, 3, 1, 1));
    assert_eq!(km.count(b"ACGNTACG", &mut vec![0; 136]), Ok(1));
    assert_eq!(km.count(b"AC\x00GT", &mut vec![0; 136]), Err(0));
}

#[test]
fn six_decimals_like_format() {
    let mut o = [0u8; 8];
    for (c, t) in [(1, 128), (1, 3), (2, 3), (5, 5), (1, 2_000_000), (3, 7), (123_456, 1_000_000)] {
        six_decimals(c, t, &mut o);
        assert_eq!(
            std::str::from_utf8(&o).unwrap(),
            format!("{:.6}", c as f64 / t as f64),
            "{c}/{t}"
        );
    }
}

#[test]
fn six_decimals_of_every_fraction_of_small_totals() {
    // Reads' totals are small: every c/t for t up to 300, ties included.
    let mut o = [0u8; 8];
    for t in 1..=300u64 {
        for c in 0..=t as u32 {
            six_decimals(c, t, &mut o);
            assert_eq!(std::str::from_utf8(&o).unwrap(), format!("{:.6}", c as f64 / t as f64));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 200, ..ProptestConfig::default() })]
    #[test]
    fn count_matches_the_naive_model(seq in proptest::collection::vec(prop::sample::select(b"ACGTacgtNn\n-R".to_vec()), 0..300), k in 1usize..7) {
        let km = Kmerizer::new(k).unwrap();
        let mut got = vec![0; km.dims()];
        let total = km.count(&seq, &mut got).unwrap();
        let (want, want_total) = naive(&seq, k);
        prop_assert_eq!(got, want);
        prop_assert_eq!(total, want_total);
    }

    #[test]
    fn six_decimals_prop(t in 1u64..5_000_000, c in any::<u32>()) {
        let c = (c as u64 % (t + 1)) as u32;
        let mut o = [0u8; 8];
        six_decimals(c, t, &mut o);
        prop_assert_eq!(std::str::from_utf8(&o).unwrap(), format!("{:.6}", c as f64 / t as f64));
    }
}

// ------------------------------------------------------------------ files

fn dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// `n` reads over `ACGTNacgt`: read `i` is `i * len.0 % len.1` long and
/// its byte `j` is letter `(i * pick.0 + j * pick.1) % 9`.
fn pseudo_reads(n: usize, len: (usize, usize), pick: (usize, usize)) -> Vec<Vec<u8>> {
    (0..n)
        .map(|i| {
            (0..(i * len.0 % len.1)).map(|j| b"ACGTNacgt"[(i * pick.0 + j * pick.1) % 9]).collect()
        })
        .collect()
}

/// A FASTA or FASTQ text of the given reads, sequences wrapped at `wrap`.
fn render(reads: &[Vec<u8>], fastq: bool, wrap: usize) -> Vec<u8> {
    let mut out = Vec::new();
    for (i, r) in reads.iter().enumerate() {
        out.extend_from_slice(if fastq { b"@" } else { b">" });
        out.extend_from_slice(format!("read{i} some description\n").as_bytes());
        for line in r.chunks(wrap.max(1)) {
            out.extend_from_slice(line);
            out.push(b'\n');
        }
        if fastq {
            out.extend_from_slice(b"+\n");
            // quality lines may start with '@' or '+'
            let q: Vec<u8> = (0..r.len()).map(|j| if j % 7 == 0 { b'@' } else { b'I' }).collect();
            for line in q.chunks(wrap.max(1)) {
                out.extend_from_slice(line);
                out.push(b'\n');
            }
        }
    }
    out
}

fn write_file(d: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = d.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

fn gzip(bytes: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(bytes).unwrap();
    e.finish().unwrap()
}

fn opts(mode: Mode, threads: usize, k: usize, counts: bool) -> KmerOptions {
    KmerOptions { k, counts, mode, threads: threads.into(), ..Default::default() }
}

fn all_outputs(
    input: &Path,
    d: &Path,
    format: OutFormat,
    k: usize,
    counts: bool,
) -> Vec<(String, Result<Vec<u8>>)> {
    let mut outs = Vec::new();
    for (mode, threads) in [
        (Mode::Single, 1),
        (Mode::Batch, 1),
        (Mode::Batch, 3),
        (Mode::Mmap, 1),
        (Mode::Mmap, 2),
        (Mode::Mmap, 4),
    ] {
        let out = d.join(format!("out-{mode:?}-{threads}"));
        let r = write(input, &out, format, &opts(mode, threads, k, counts))
            .map(|_| std::fs::read(&out).unwrap());
        outs.push((format!("{mode:?} x{threads}"), r));
    }
    outs
}

#[test]
fn text_layout_is_seq2vec_s() {
    let d = dir();
    let input = write_file(d.path(), "a.fa", b">x\nACGTAC\nGTAA\n>empty\n>n\nNNNN\n");
    let out = d.path().join("o.csv");
    let s = write(&input, &out, OutFormat::Csv, &opts(Mode::Mmap, 2, 4, false)).unwrap();
    assert_eq!(s, Summary { records: 3, dims: 136 });
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 3);
    assert!(lines.iter().all(|l| l.len() == 136 * 9 - 1));
    let first: Vec<&str> = lines[0].split(',').collect();
    let labels = Kmerizer::new(4).unwrap().labels();
    assert_eq!(first[labels.iter().position(|l| l == "CGTA").unwrap()], "0.428571");
    assert_eq!(lines[1], vec!["0.000000"; 136].join(","));
    // counts: plain decimal numbers, as kmertools writes them
    for mode in [Mode::Single, Mode::Batch, Mode::Mmap] {
        let s = write(&input, &out, OutFormat::Tsv, &opts(mode, 2, 4, true)).unwrap();
        assert_eq!(s, Summary { records: 3, dims: 136 });
        let text = std::fs::read_to_string(&out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        let f: Vec<&str> = lines[0].split('\t').collect();
        assert_eq!(f[labels.iter().position(|l| l == "CGTA").unwrap()], "3");
        assert_eq!(lines[1], vec!["0"; 136].join("\t"));
        assert_eq!(text.len(), lines.iter().map(|l| l.len() + 1).sum::<usize>());
    }
}

/// Counts lines vary in length; over many blocks (mmap mode places each
/// block after the previous one's bytes) every mode writes the naive
/// model's numbers, in read order.
#[test]
fn variable_length_counts_lines_over_many_blocks() {
    let d = dir();
    let reads = pseudo_reads(3000, (37, 900), (5, 17));
    let input = write_file(d.path(), "r.fa", &render(&reads, false, 70));
    for (format, sep) in [(OutFormat::Csv, ","), (OutFormat::Tsv, "\t")] {
        let want: String = reads
            .iter()
            .map(|r| {
                let f: Vec<String> = naive(r, 3).0.iter().map(u32::to_string).collect();
                f.join(sep) + "\n"
            })
            .collect();
        for (name, r) in all_outputs(&input, d.path(), format, 3, true) {
            let got = r.unwrap_or_else(|e| panic!("{name}: {e}"));
            assert!(got == want.as_bytes(), "{format} {name} differs from the model");
        }
    }
    // A bad record mid-run: the workers waiting for its block's length
    // give up (no hang), and the error names it in every mode.
    let mut bad = reads;
    bad[1500].insert(0, 0x01);
    let input = write_file(d.path(), "bad.fa", &render(&bad, false, 70));
    for (name, r) in all_outputs(&input, d.path(), OutFormat::Csv, 3, true) {
        let e = r.expect_err(&name).to_string();
        assert!(e.contains("record 1501: invalid byte 0x01"), "{name}: {e}");
    }
}

#[test]
fn npy_output_and_memory_vectors() {
    let d = dir();
    let input = write_file(
        d.path(),
        "a.fq",
        &render(&[b"ACGTACGTAA".to_vec(), b"".to_vec(), b"acgnnacgt".to_vec()], true, 4),
    );
    let out = d.path().join("o.npy");
    write(&input, &out, OutFormat::Npy, &opts(Mode::Mmap, 2, 4, false)).unwrap();
    let bytes = std::fs::read(&out).unwrap();
    let (h, off) = crate::store::npy::Header::decode(&bytes, &out).unwrap();
    assert_eq!((h.simple_dtype(), h.shape.as_slice()), (Some("<f4"), &[3u64, 136][..]));
    let (s, raw) = vectors(&input, &opts(Mode::Batch, 2, 4, false)).unwrap();
    assert_eq!(s.records, 3);
    assert_eq!(&bytes[off..], &raw[..]);
    let (_, raw_single) = vectors(&input, &opts(Mode::Single, 1, 4, false)).unwrap();
    assert_eq!(raw, raw_single);
    let row0: Vec<f32> =
        raw[..136 * 4].chunks(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
    assert!((row0.iter().sum::<f32>() - 1.0).abs() < 1e-5);
}

#[test]
fn empty_input_gives_no_records() {
    let d = dir();
    let input = write_file(d.path(), "e.fa", b"");
    for (name, r) in all_outputs(&input, d.path(), OutFormat::Npy, 4, false) {
        let b = r.unwrap_or_else(|e| panic!("{name}: {e}"));
        let (h, _) = crate::store::npy::Header::decode(&b, &input).unwrap();
        assert_eq!(h.shape, vec![0, 136], "{name}");
    }
}

#[test]
fn gzip_input_gives_the_same_bytes() {
    let d = dir();
    let text = render(&pseudo_reads(500, (37, 400), (7, 13)), false, 60);
    let plain = write_file(d.path(), "r.fa", &text);
    let gz = write_file(d.path(), "r.fa.gz", &gzip(&text));
    let a = all_outputs(&plain, d.path(), OutFormat::Csv, 4, false);
    let b = all_outputs(&gz, d.path(), OutFormat::Csv, 4, false);
    let want = a[0].1.as_ref().unwrap().clone();
    for (name, r) in a.into_iter().chain(b) {
        assert!(r.as_ref().unwrap() == &want, "{name} differs");
    }
}

#[test]
fn malformed_inputs_name_the_record() {
    let d = dir();
    let cases: Vec<(&str, Vec<u8>, &str)> = vec![
        ("junk.fa", b"ACGT\n>x\nAC\n".to_vec(), "record 1: expected '>' (FASTA) or '@' (FASTQ)"),
        (
            "qual.fq",
            b"@a\nACGT\n+\nIIII\n@b\nACGT\n+\nIIIII\n@c\nA\n+\nI\n".to_vec(),
            "record 2: quality length 5 differs from sequence length 4",
        ),
        (
            "trunc.fq",
            b"@a\nACGT\n+\nIIII\n@b\nACGT\n".to_vec(),
            "record 2: truncated FASTQ record: no '+' line",
        ),
        (
            "short.fq",
            b"@a\nACGT\n+\nII".to_vec(),
            "record 1: truncated FASTQ record: quality has 2 of 4",
        ),
        (
            "hdr.fq",
            b"@a\nAC\n+\nII\n>b\nAC\n+\nII\n".to_vec(),
            "record 2: expected '@' at the start of a FASTQ record",
        ),
        (
            "bin.fa",
            b">a\nACGT\n>b\nAC\x01GT\n".to_vec(),
            "record 2: invalid byte 0x01 in the sequence",
        ),
    ];
    for (name, bytes, want) in cases {
        let input = write_file(d.path(), name, &bytes);
        for (mode, r) in all_outputs(&input, d.path(), OutFormat::Csv, 3, false) {
            let e = r.expect_err(name);
            assert!(matches!(e, Error::Format { .. }), "{name} {mode}: {e:?}");
            let msg = e.to_string();
            assert!(
                msg.starts_with(&input.display().to_string()) && msg.contains(want),
                "{name} {mode}: {msg}"
            );
        }
        // a failed run leaves no output and no temporary file
        let left: Vec<_> = std::fs::read_dir(d.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .filter(|n| {
                n.to_string_lossy().starts_with(".out-") || n.to_string_lossy().starts_with("out-")
            })
            .collect();
        assert!(left.is_empty(), "{left:?}");
    }
}

#[test]
fn line_endings_and_blank_lines() {
    let d = dir();
    let a = write_file(d.path(), "a.fa", b"\n>a\r\nACGT\r\nAC\r\n\r\n>b\r\nGG\r\n");
    let b = write_file(d.path(), "b.fa", b">a\nACGTAC\n>b\nGG\n");
    let (_, x) = vectors(&a, &opts(Mode::Mmap, 2, 2, true)).unwrap();
    let (_, y) = vectors(&b, &opts(Mode::Mmap, 2, 2, true)).unwrap();
    assert_eq!(x, y);
}

fn arb_reads() -> impl Strategy<Value = Vec<Vec<u8>>> {
    proptest::collection::vec(
        proptest::collection::vec(prop::sample::select(b"ACGTacgtNNR".to_vec()), 0..200),
        0..60,
    )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, ..ProptestConfig::default() })]
    /// Every mode and thread count writes the same bytes, and they decode
    /// to the naive model's counts.
    #[test]
    fn modes_agree_and_match_the_model(reads in arb_reads(), fastq in any::<bool>(), wrap in 1usize..90,
                                        k in 1usize..6, npy in any::<bool>()) {
        let d = dir();
        let input = write_file(d.path(), "in", &render(&reads, fastq, wrap));
        let format = if npy { OutFormat::Npy } else { OutFormat::Csv };
        for counts in [false, true] {
            let outs = all_outputs(&input, d.path(), format, k, counts);
            let want = outs[0].1.as_ref().unwrap().clone();
            for (name, r) in &outs {
                prop_assert!(r.as_ref().unwrap() == &want, "{} differs", name);
            }
        }
        let (s, raw) = vectors(&input, &opts(Mode::Mmap, 3, k, true)).unwrap();
        prop_assert_eq!(s.records as usize, reads.len());
        for (i, r) in reads.iter().enumerate() {
            let row: Vec<u32> = raw[i * s.dims * 4..(i + 1) * s.dims * 4].chunks(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
            prop_assert_eq!(row, naive(r, k).0);
        }
    }
}

#[test]
fn progress_counts_every_input_byte() {
    let d = dir();
    let reads: Vec<Vec<u8>> = (0..300).map(|i| vec![b"ACGT"[i % 4]; 50 + i]).collect();
    let text = render(&reads, true, 33);
    let plain = write_file(d.path(), "p.fq", &text);
    let gz = write_file(d.path(), "p.fq.gz", &gzip(&text));
    for input in [&plain, &gz] {
        let size = std::fs::metadata(input).unwrap().len();
        for mode in [Mode::Single, Mode::Batch, Mode::Mmap] {
            let counter = Progress::watched();
            let o = KmerOptions {
                progress: counter.clone(),
                mode,
                threads: 2.into(),
                ..Default::default()
            };
            write(input, &d.path().join("o.csv"), OutFormat::Csv, &o).unwrap();
            assert_eq!(
                (counter.done(), counter.total()),
                (size, size),
                "{mode:?} {}",
                input.display()
            );
        }
    }
}

/// `write()` on another thread, failing (instead of hanging) after `secs`.
fn write_within(input: &Path, out: &Path, o: KmerOptions, secs: u64) -> Result<Summary> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (input, out) = (input.to_owned(), out.to_owned());
    std::thread::spawn(move || {
        let _ = tx.send(write(&input, &out, OutFormat::Csv, &o));
    });
    rx.recv_timeout(std::time::Duration::from_secs(secs)).expect("kmers hung on a stream input")
}

#[test]
fn fifo_inputs_plain_and_gzip_give_the_same_bytes_in_every_mode() {
    let d = dir();
    let text = render(&pseudo_reads(400, (29, 300), (5, 11)), true, 50);
    let plain = write_file(d.path(), "r.fq", &text);
    let want_out = d.path().join("want.csv");
    write(&plain, &want_out, OutFormat::Csv, &opts(Mode::Single, 1, 4, false)).unwrap();
    let want = std::fs::read(&want_out).unwrap();
    let mut k = 0;
    for data in [text.clone(), gzip(&text), b">r\nACGT\n".to_vec()] {
        for (mode, threads) in
            [(Mode::Single, 1), (Mode::Batch, 3), (Mode::Mmap, 1), (Mode::Mmap, 3)]
        {
            k += 1;
            let (f, h) = crate::test_util::fifo(d.path(), &format!("ff{k}"), data.clone());
            let out = d.path().join(format!("o{k}.csv"));
            let r = write_within(&f, &out, opts(mode, threads, 4, false), 30);
            // Unblock the feeder if the run failed before opening the FIFO.
            use std::os::unix::fs::OpenOptionsExt;
            drop(std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&f));
            h.join().unwrap();
            r.unwrap_or_else(|e| panic!("{mode:?} x{threads}: {e}"));
            let got = std::fs::read(&out).unwrap();
            if data.len() > 20 {
                assert!(got == want, "{mode:?} x{threads}: output differs from the regular file's");
            } else {
                assert_eq!(got.len(), 136 * 9, "{mode:?} x{threads}: the one-read FIFO");
            }
        }
    }
}

#[test]
fn proc_files_are_streamed_not_empty() {
    // A /proc file is not FASTA: reading it (rather than seeing 0 bytes)
    // gives a format error naming it.
    let d = dir();
    let e = write(
        Path::new("/proc/meminfo"),
        &d.path().join("o.csv"),
        OutFormat::Csv,
        &opts(Mode::Mmap, 2, 4, false),
    )
    .unwrap_err();
    assert!(e.to_string().contains("/proc/meminfo") && e.to_string().contains("record 1"), "{e}");
}

#[test]
fn format_follows_the_output_extension() {
    for (p, f) in [
        ("v.npy", OutFormat::Npy),
        ("v.tsv", OutFormat::Tsv),
        ("v.csv", OutFormat::Csv),
        ("v", OutFormat::Csv),
        ("v.NPY", OutFormat::Csv),
    ] {
        assert_eq!(OutFormat::for_path(Path::new(p)), f, "{p}");
    }
}

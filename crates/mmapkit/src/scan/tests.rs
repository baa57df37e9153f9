//! Equivalence of every strategy × thread count × window size against a
//! naive reference (the SearcherTester idea from ripgrep).

use proptest::prelude::{prop_oneof, proptest, Just, ProptestConfig};

use super::{count, count_lines, find, find_all, rfind, ScanOptions, Strategy};
use crate::test_util::{
    fifo, naive_all, naive_last, scan_matrix, temp_file, Trickle, ALL_STRATEGIES,
};

/// Every combination the tools promise to agree on.
fn all_options() -> Vec<ScanOptions> {
    scan_matrix(&ALL_STRATEGIES, &[1, 2, 3, 7, 64, 0])
}

fn check(data: &[u8], needle: &[u8]) {
    let (_d, p) = temp_file(data);
    let all = naive_all(data, needle);
    for step in [1, 2, 3, 5, 1 << 20] {
        let got = super::count_stream(Trickle(data, step), needle, &p).unwrap();
        assert_eq!(got, all.len() as u64, "count_stream step={step} needle={needle:?}");
    }
    for o in all_options() {
        let ctx = format!("{o:?} needle={needle:?}");
        assert_eq!(count(&p, needle, &o).unwrap(), all.len() as u64, "count {ctx}");
        assert_eq!(find_all(&p, needle, None, &o).unwrap(), all, "find_all {ctx}");
        assert_eq!(
            find_all(&p, needle, Some(2), &o).unwrap(),
            all.iter().take(2).copied().collect::<Vec<_>>(),
            "limit {ctx}"
        );
        assert_eq!(find(&p, needle, &o).unwrap(), all.first().copied(), "find {ctx}");
        assert_eq!(rfind(&p, needle, &o).unwrap(), naive_last(data, needle), "rfind {ctx}");
    }
}

#[test]
fn overlapping_needles_across_every_boundary() {
    check(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", b"aa");
    check(b"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", b"aaa");
    check(b"abababababababababababababababababab", b"abab");
    check(b"abaabaabaababaabaaba", b"aba");
    check(b"line one\nline two\r\n\n\nlast line, no newline", b"\n");
    check(b"", b"x");
    check(b"x", b"x");
}

#[test]
fn lines_and_single_bytes() {
    let data: Vec<u8> =
        (0..5000u32).map(|i| if i % 37 == 0 { b'\n' } else { b'a' + (i % 26) as u8 }).collect();
    let (_d, p) = temp_file(&data);
    let want = data.iter().filter(|&&b| b == b'\n').count() as u64;
    for o in all_options() {
        assert_eq!(count_lines(&p, &o).unwrap(), want, "{o:?}");
    }
}

#[test]
fn bad_input_errors() {
    let o = ScanOptions::default();
    let dir = tempfile::tempdir().unwrap();
    let e = count(dir.path().join("missing"), b"x", &o).unwrap_err();
    assert!(e.to_string().contains("missing"), "{e}");
    let e = count(dir.path(), b"x", &o).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EISDIR));
    let (_d, p) = temp_file(b"abc");
    assert!(matches!(count(&p, b"", &o), Err(crate::Error::InvalidArgument(_))));
    assert_eq!(count(&p, b"zz", &o).unwrap(), 0);
}

#[test]
fn truncation_while_scanning_is_an_error_for_both_strategies() {
    use crate::exec::Progress;
    const LEN: u64 = 16 << 20;
    for strategy in [Strategy::Mmap, Strategy::Read] {
        let mut caught = false;
        for _attempt in 0..3 {
            let (_d, p) = temp_file(&vec![b'x'; LEN as usize]);
            // "Another writer" truncates as soon as the first window is done.
            let path = p.clone();
            let counter = Progress::watched_then(1, move || {
                std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(4096).unwrap();
            });
            let opts =
                ScanOptions { strategy, threads: 1.into(), chunk: 64 << 10, progress: counter };
            let result = count(&p, b"x", &opts);
            // Never a silently wrong answer: an error, or a whole-file one.
            match result {
                // The message matches the strategy: "while mapped" only for a mapping.
                Err(e @ crate::Error::FileTruncated { .. }) if strategy == Strategy::Mmap => {
                    assert!(e.to_string().contains("while mapped"), "{e}");
                    caught = true;
                    break;
                }
                Err(e @ crate::Error::Truncated { .. }) if strategy == Strategy::Read => {
                    assert!(
                        !e.to_string().contains("mapped") && e.to_string().contains("being read"),
                        "{e}"
                    );
                    caught = true;
                    break;
                }
                Ok(n) => assert_eq!(n, LEN, "{strategy:?}: partial count without an error"),
                Err(e) => panic!("{strategy:?}: unexpected error {e}"),
            }
        }
        assert!(caught, "{strategy:?}: the truncation was never observed mid-scan");
    }
}

#[test]
fn fifos_are_streamed_with_the_same_results() {
    let data: Vec<u8> = (0..300_000u32)
        .map(|i| if i % 41 == 0 { b'\n' } else { b"ab"[(i % 3 % 2) as usize] })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let (_d, p) = temp_file(&data);
    for (k, o) in all_options().into_iter().filter(|o| o.chunk == 0 || o.chunk == 7).enumerate() {
        let ctx = format!("{o:?}");
        let (f, h) = fifo(dir.path(), &format!("c{k}"), data.clone());
        assert_eq!(count(&f, b"ab", &o).unwrap(), count(&p, b"ab", &o).unwrap(), "count {ctx}");
        h.join().unwrap();
        let (f, h) = fifo(dir.path(), &format!("l{k}"), data.clone());
        assert_eq!(count_lines(&f, &o).unwrap(), 300_000u64.div_ceil(41), "lines {ctx}");
        h.join().unwrap();
        let (f, h) = fifo(dir.path(), &format!("a{k}"), data.clone());
        assert_eq!(
            find_all(&f, b"ba", Some(5), &o).unwrap(),
            find_all(&p, b"ba", Some(5), &o).unwrap(),
            "find_all {ctx}"
        );
        // Unblock the writer if find_all stopped early (non-blocking: it may be gone).
        use std::os::unix::fs::OpenOptionsExt;
        drop(std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(&f));
        h.join().unwrap();
        let (f, h) = fifo(dir.path(), &format!("r{k}"), data.clone());
        assert_eq!(rfind(&f, b"\nab", &o).unwrap(), naive_last(&data, b"\nab"), "rfind {ctx}");
        h.join().unwrap();
    }
}

#[test]
fn zero_size_proc_and_sysfs_files_are_read() {
    let o = ScanOptions::default();
    // procfs reports size 0; the content is there all the same.
    let want =
        std::fs::read("/proc/self/mountinfo").unwrap().iter().filter(|&&b| b == b'\n').count()
            as u64;
    assert!(want > 0);
    let got = count_lines("/proc/self/mountinfo", &o).unwrap();
    // mountinfo rarely changes between two reads; allow a mount or two.
    assert!(got.abs_diff(want) <= 2 && got > 0, "got {got}, want about {want}");
    assert_eq!(find("/proc/meminfo", b"MemTotal:", &o).unwrap(), Some(0));
    for o in all_options().into_iter().filter(|o| o.chunk == 0 || o.chunk == 3) {
        assert_eq!(count("/proc/meminfo", b"MemTotal", &o).unwrap(), 1, "{o:?}");
    }
    // sysfs reports 4096 for most attributes; it is streamed, never "truncated".
    let sys = std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled");
    let sys =
        if sys.exists() { sys } else { std::path::Path::new("/sys/devices/system/cpu/online") };
    if sys.exists() {
        let want = std::fs::read(sys).unwrap().iter().filter(|&&b| b == b'\n').count() as u64;
        for o in all_options() {
            assert_eq!(count_lines(sys, &o).unwrap(), want, "{o:?}");
        }
    }
    // An ordinary empty file is simply empty.
    let (_d, p) = temp_file(b"");
    assert_eq!(count_lines(&p, &o).unwrap(), 0);
}

/// `peek_whole` reads a file shorter than the peek at once, and hands
/// back everything else opened as `Input::open` would have: a longer file
/// at offsets, a FIFO as a stream; a directory is `read: Is a directory`.
#[test]
fn peek_whole_reads_short_files_and_opens_the_rest_as_input_does() {
    use super::source::{peek_whole, Input, Peeked};
    let whole = |p: &std::path::Path, max| {
        peek_whole(p, max, Strategy::Auto, |_f, d: &[u8]| d.to_vec()).map(|r| match r {
            Peeked::Whole(d) => Ok(d),
            Peeked::Larger(i) => Err(matches!(i, Input::Random(_))),
        })
    };
    let (_d, p) = temp_file(b"abc\ndef\n");
    assert_eq!(whole(&p, 9).unwrap(), Ok(b"abc\ndef\n".to_vec()));
    assert_eq!(whole(&p, 8).unwrap(), Err(true), "a file as long as the peek is larger");
    let (_e, empty) = temp_file(b"");
    assert_eq!(whole(&empty, 8).unwrap(), Ok(vec![]));
    let status = whole(std::path::Path::new("/proc/self/status"), 1 << 20).unwrap().unwrap();
    assert!(status.starts_with(b"Name:"), "procfs is read for what it holds");
    let dir = tempfile::tempdir().unwrap();
    let e = whole(dir.path(), 8).unwrap_err();
    assert_eq!((e.errno(), e.to_string().contains("read")), (Some(libc::EISDIR), true), "{e}");
    let (f, writer) = fifo(dir.path(), "f", b"x\n".to_vec());
    assert_eq!(whole(&f, 8).unwrap(), Err(false), "a FIFO is a stream");
    writer.join().unwrap();
    let missing = whole(&dir.path().join("nowhere"), 8).unwrap_err();
    assert_eq!(missing.errno(), Some(libc::ENOENT));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_data_all_strategies(
        data in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'\n'), Just(b'\r')], 0..400),
        needle in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), Just(b'\n')], 1..5),
    ) {
        check(&data, &needle);
    }
}

//! `grep` against a naive reference (split into lines, `is_match` per
//! line) for every strategy × thread count × window size.

use std::ops::ControlFlow;
use std::path::{Path, PathBuf};

use proptest::prelude::{prop_oneof, proptest, Just, ProptestConfig, Strategy as _};
use regex::bytes::RegexBuilder;

use super::{cannot_match_newline, grep, grep_count, grep_lines, whole_haystack_assertions, Grep, GrepOptions};
use crate::scan::{ScanOptions, Strategy};
use crate::Error;

/// Every combination that must give identical results.
fn combos() -> Vec<ScanOptions> {
    let mut v = Vec::new();
    for strategy in [Strategy::Mmap, Strategy::Read, Strategy::Stream] {
        for threads in [1, 3] {
            for chunk in [1, 3, 7, 64, 0] {
                v.push(ScanOptions { strategy, threads: threads.into(), chunk, progress: Default::default() });
            }
        }
    }
    v
}

fn write(data: &[u8]) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("d.txt");
    std::fs::write(&p, data).unwrap();
    (dir, p)
}

/// A reader returning at most `step` bytes per read (forces carries).
struct Trickle<'a>(&'a [u8], usize);
impl std::io::Read for Trickle<'_> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.len().min(self.1).min(buf.len());
        buf[..n].copy_from_slice(&self.0[..n]);
        self.0 = &self.0[n..];
        Ok(n)
    }
}

struct Expected {
    count: u64,
    out: Vec<u8>,
    records: Vec<(u64, u64, Vec<u8>)>,
}

/// The obvious implementation: one line at a time.
fn reference(data: &[u8], g: &GrepOptions, label: &[u8]) -> Expected {
    let parts: Vec<String> = g
        .patterns
        .iter()
        .flat_map(|p| p.split('\n'))
        .map(|p| if g.fixed { regex::escape(p) } else { p.to_owned() })
        .map(|p| format!("(?:{p})"))
        .collect();
    let re = RegexBuilder::new(&parts.join("|")).multi_line(true).case_insensitive(g.ignore_case).build().unwrap();
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if data.is_empty() || data.ends_with(b"\n") {
        lines.pop();
    }
    let cap = g.max_count.unwrap_or(u64::MAX);
    let mut e = Expected { count: 0, out: Vec::new(), records: Vec::new() };
    let mut off = 0u64;
    for (i, line) in lines.iter().enumerate() {
        if e.count >= cap {
            break;
        }
        let no = i as u64 + 1;
        if re.is_match(line) != g.invert {
            e.count += 1;
            let mut put = |at: u64, text: &[u8]| {
                if g.with_filename == Some(true) {
                    e.out.extend_from_slice(label);
                    e.out.push(b':');
                }
                if g.line_numbers {
                    e.out.extend_from_slice(format!("{no}:").as_bytes());
                }
                if g.byte_offset {
                    e.out.extend_from_slice(format!("{at}:").as_bytes());
                }
                e.out.extend_from_slice(text);
                e.out.push(b'\n');
                e.records.push((no, at, text.to_vec()));
            };
            if !g.only_matching {
                put(off, line);
            } else if !g.invert {
                for m in re.find_iter(line).filter(|m| !m.is_empty()) {
                    put(off + m.start() as u64, m.as_bytes());
                }
            }
        }
        off += line.len() as u64 + 1;
    }
    e
}

fn check(data: &[u8], g: &GrepOptions) {
    let (_dir, path) = write(data);
    let label = path.as_os_str().as_encoded_bytes().to_vec();
    let want = reference(data, g, &label);
    let mut counting = g.clone();
    counting.only_matching = false;
    let want_count = reference(data, &counting, &label).count;
    let compiled = Grep::new(g).unwrap();
    // The free functions once (they compile the regex each time) ...
    let opts = ScanOptions::new(Strategy::Read, 3);
    assert_eq!(grep_count(&path, g, &opts).unwrap(), want_count, "count {g:?}");
    let mut out = Vec::new();
    assert_eq!(grep(&path, g, &opts, &mut out).unwrap(), want.count, "selected {g:?}");
    assert_eq!(grep_lines(&path, g, &opts, None).unwrap(), want.records, "lines {g:?}");
    // ... and every combination through one compiled search.
    for opts in combos() {
        let what = format!("{g:?} {opts:?} data={:?}", String::from_utf8_lossy(data));
        assert_eq!(compiled.count(&path, &opts).unwrap(), want_count, "count {what}");
        let mut out = Vec::new();
        let n = compiled.write(&path, &opts, &mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&want.out), "output {what}");
        assert_eq!(n, want.count, "selected {what}");
        let mut records = Vec::new();
        compiled
            .for_each(&path, &opts, &mut |l| {
                records.push((l.line, l.offset, l.text.to_vec()));
                Ok(ControlFlow::Continue(()))
            })
            .unwrap();
        assert_eq!(records, want.records, "records {what}");
        // A stream, in the window size as read size, through short reads.
        let step = if opts.chunk == 0 { 5 } else { opts.chunk };
        let mut out = Vec::new();
        let n = compiled.write_reader(&mut Trickle(data, step), &path, &opts, &mut out).unwrap();
        assert_eq!(String::from_utf8_lossy(&out), String::from_utf8_lossy(&want.out), "stream {what}");
        assert_eq!(n, want.count, "stream selected {what}");
        assert_eq!(compiled.count_reader(&mut Trickle(data, step), &path, &opts).unwrap(), want_count, "stream count {what}");
    }
}

/// Lines from a small alphabet: empty lines, CR, spaces, long lines.
fn corpus() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        4 => Just(b'a'),
        3 => Just(b'b'),
        2 => Just(b'A'),
        2 => Just(b'1'),
        1 => Just(b'B'),
        1 => Just(b' '),
        1 => Just(b','),
        1 => Just(b'\r'),
        1 => Just(b'.'),
    ];
    let line = prop_oneof![
        6 => proptest::collection::vec(byte.clone(), 0..8),
        1 => proptest::collection::vec(byte, 60..150), // longer than small windows
    ];
    (proptest::collection::vec(line, 0..30), proptest::bool::ANY).prop_map(|(lines, last_newline)| {
        let mut data = lines.join(&b'\n');
        if last_newline && !lines.is_empty() {
            data.push(b'\n');
        }
        data
    })
}

fn patterns() -> impl proptest::strategy::Strategy<Value = (Vec<String>, bool)> {
    let regex = prop_oneof![
        Just("a"),
        Just("ab"),
        Just("aa"),
        Just("bA"),
        Just("^a"),
        Just("b$"),
        Just("^$"),
        Just("^"),
        Just("$"),
        Just(""),
        Just("a|1"),
        Just("a|ab"),
        Just("[0-9]+"),
        Just("[ab]{3}"),
        Just("a.b"),
        Just("(?i)ab"),
        Just("\\s"),
        Just("a\\sb"),
        Just("b\\s*a"),
        Just("[^a]*b"),
        Just("[^,]+,"),
        Just("a\\nb"),
        Just("\\r$"),
        Just("\\bab\\b"),
        Just("\\Aa"),
        Just("b\\z"),
        Just("(?-m)^a"),
        Just("(?s)a.*b"),
        Just("a*"),
        Just("x"),
        Just("[[:alpha:]]1"),
        Just("[[:^alpha:]]b"),
        Just("\\w+,"),
    ]
    .prop_map(|p| (vec![p.to_owned()], false));
    let literal = proptest::collection::vec(prop_oneof![Just('a'), Just('b'), Just('.'), Just('*'), Just('1')], 0..4)
        .prop_map(|c| (vec![c.into_iter().collect::<String>()], true));
    let several = proptest::collection::vec(prop_oneof![Just("a"), Just("b1"), Just("^A"), Just("x"), Just("a\nB")], 2..4)
        .prop_map(|v| (v.into_iter().map(String::from).collect(), false));
    prop_oneof![4 => regex, 2 => literal, 1 => several]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    #[test]
    fn grep_matches_reference(
        data in corpus(),
        (patterns, fixed) in patterns(),
        ignore_case: bool,
        invert: bool,
        numbers: bool,
        offsets: bool,
        only in proptest::bool::weighted(0.3),
        with_filename: bool,
        max_count in prop_oneof![3 => Just(None), 1 => (0u64..4).prop_map(Some)],
    ) {
        let g = GrepOptions {
            patterns,
            fixed,
            ignore_case,
            invert,
            line_numbers: numbers,
            byte_offset: offsets,
            only_matching: only,
            with_filename: Some(with_filename),
            max_count,
            ..Default::default()
        };
        check(&data, &g);
    }
}

#[test]
fn edge_cases() {
    let plain = |p: &str| GrepOptions { patterns: vec![p.into()], line_numbers: true, byte_offset: true, ..Default::default() };
    for data in [&b""[..], b"\n", b"\n\n", b"a", b"a\n", b"\na", b"ab\r\nb\r\n", b"xyz"] {
        for p in ["", "^", "$", "a", "^$", "\\s", "b\\r$", "x*"] {
            check(data, &plain(p));
            check(data, &GrepOptions { invert: true, ..plain(p) });
            check(data, &GrepOptions { only_matching: true, ..plain(p) });
        }
    }
}

#[test]
fn many_ranges_and_batches() {
    // Over two printing ranges per thread at the default window, with
    // matches on both sides of every cut.
    let mut data = Vec::new();
    let mut x = 12345u64;
    while data.len() < 2 << 20 {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        data.extend_from_slice(format!("{},{}\n", x >> 40, (x >> 20) & 0xfff).as_bytes());
    }
    let g = GrepOptions { patterns: vec!["^12[0-9]*,".into()], line_numbers: true, byte_offset: true, ..Default::default() };
    let (_dir, path) = write(&data);
    let want = reference(&data, &g, b"");
    assert!(want.count > 100);
    for opts in [ScanOptions::new(Strategy::Mmap, 2), ScanOptions::new(Strategy::Read, 3), ScanOptions::new(Strategy::Mmap, 1)] {
        let mut out = Vec::new();
        assert_eq!(grep(&path, &g, &opts, &mut out).unwrap(), want.count);
        assert!(out == want.out, "{opts:?}");
        assert_eq!(grep_count(&path, &g, &opts).unwrap(), want.count);
        for cap in [1, want.count - 1] {
            let capped = GrepOptions { max_count: Some(cap), ..g.clone() };
            let mut out = Vec::new();
            assert_eq!(grep(&path, &capped, &opts, &mut out).unwrap(), cap);
            assert!(out == reference(&data, &capped, b"").out, "{opts:?} -m {cap}");
            assert_eq!(grep_count(&path, &capped, &opts).unwrap(), cap);
        }
    }
}

#[test]
fn stops_when_the_callback_says_so() {
    let (_dir, path) = write(b"a1\nb\na2\na3\n");
    let g = GrepOptions { patterns: vec!["a".into()], ..Default::default() };
    for opts in combos() {
        assert_eq!(grep_lines(&path, &g, &opts, Some(2)).unwrap(), vec![(1, 0, b"a1".to_vec()), (3, 5, b"a2".to_vec())]);
        let mut seen = 0;
        Grep::new(&g)
            .unwrap()
            .for_each(&path, &opts, &mut |_| {
                seen += 1;
                Ok(ControlFlow::Break(()))
            })
            .unwrap();
        assert_eq!(seen, 1);
    }
}

#[test]
fn invalid_regex_and_missing_pattern() {
    let err = Grep::new(&GrepOptions { patterns: vec!["a(".into()], ..Default::default() }).unwrap_err();
    assert!(matches!(&err, Error::InvalidArgument(m) if m.starts_with("invalid regex") && m.contains("unclosed group")), "{err}");
    // Each alternative must be valid on its own.
    let err = Grep::new(&GrepOptions { patterns: vec!["a)".into(), "(b".into()], ..Default::default() }).unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    assert!(Grep::new(&GrepOptions::default()).is_err());
    // -F escapes metacharacters.
    assert!(Grep::new(&GrepOptions { patterns: vec!["a(".into()], fixed: true, ..Default::default() }).is_ok());
}

#[test]
fn missing_file_names_it() {
    let g = GrepOptions { patterns: vec!["a".into()], ..Default::default() };
    let err = grep_count(Path::new("/nonexistent/x.txt"), &g, &ScanOptions::default()).unwrap_err();
    assert!(err.to_string().contains("/nonexistent/x.txt"), "{err}");
}

#[test]
fn detects_whole_haystack_assertions() {
    for p in ["\\Aa", "a\\z", "(?-m)^a", "(?i-m:x)", "(?s-m)$"] {
        assert!(whole_haystack_assertions(p), "{p}");
    }
    for p in ["a", "^a$", "\\\\A", "(?i)a", "(?m)^", "(?:a)", "[-m]", "\\bA\\b"] {
        assert!(!whole_haystack_assertions(p), "{p}");
    }
}

#[test]
fn detects_patterns_that_cannot_match_newlines() {
    for p in ["7[0-9]{3}\\.5", "\\w+@\\d", "^foo$", "(?i)abc", "a.b", "[[:alpha:]]+", "\\bx\\b", "\\[^a\\]", "[]^]", "é+"] {
        assert!(cannot_match_newline(p), "{p}");
    }
    for p in [
        "\\s", "\\S", "\\D", "\\W", "[^a]", "a[^b]c", "(?s).", "(?is:a.)", "[[:space:]]", "[[:^alpha:]]", "\\x0a", "\\n",
        "\\pC", "\\P{L}", "[\\t-\\r]", "a\\", "\tb", "\\Aa",
    ] {
        assert!(!cannot_match_newline(p), "{p}");
    }
}

#[test]
fn grep_reads_proc_files_and_fifos() {
    let g = GrepOptions { patterns: vec!["^MemTotal".into()], ..Default::default() };
    let mut out = Vec::new();
    // /proc/meminfo has size 0: it used to give no match at all.
    assert_eq!(grep("/proc/meminfo", &g, &ScanOptions::default(), &mut out).unwrap(), 1);
    assert!(out.starts_with(b"MemTotal:"), "{}", String::from_utf8_lossy(&out));
    let data = b"one\ntwo MemTotal\nMemTotal three\nfour".to_vec();
    let dir = tempfile::tempdir().unwrap();
    for (k, opts) in combos().into_iter().enumerate() {
        let g = GrepOptions { patterns: vec!["^MemTotal|two".into()], line_numbers: true, ..Default::default() };
        let (f, h) = crate::scan::tests::fifo(dir.path(), &format!("f{k}"), data.clone());
        let mut out = Vec::new();
        assert_eq!(grep(&f, &g, &opts, &mut out).unwrap(), 2, "{opts:?}");
        h.join().unwrap();
        assert_eq!(out, b"2:two MemTotal\n3:MemTotal three\n", "{opts:?}");
    }
}

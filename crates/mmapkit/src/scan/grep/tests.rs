//! `grep` against a naive reference (split into lines, `is_match` per
//! line, context marked around selected lines) for every strategy ×
//! thread count × window size, through the GNU printer and the collecting
//! sink.

use std::ops::ControlFlow;
use std::path::Path;

use proptest::prelude::{prop_oneof, proptest, Just, ProptestConfig, Strategy as _};
use regex::bytes::RegexBuilder;

use super::pattern::cannot_match_newline;
use super::{
    grep, grep_count, grep_lines, whole_haystack_assertions, BinaryFiles, Collect, GnuPrinter,
    Grep, GrepOptions, JsonPrinter, PrintOptions, Report, Sink, SinkLine,
};
use super::{FINDER_DFA, FINDER_PREFILTER};
use crate::test_util::{scan_matrix, ALL_STRATEGIES};
use crate::test_util::{temp_file as write, Trickle};

/// Every strategy, 1 and 3 threads, tiny to whole-file windows.
fn all_options() -> Vec<ScanOptions> {
    scan_matrix(&ALL_STRATEGIES, &[1, 2, 3, 7, 64, 0])
}
use crate::scan::{ScanOptions, Strategy};
use crate::Error;

/// Every combination that must give identical results (the scan tests'
/// matrix without `auto`, which picks one of the others).
fn combos() -> Vec<ScanOptions> {
    all_options().into_iter().filter(|o| o.strategy != Strategy::Auto && o.chunk != 2).collect()
}

struct Expected {
    count: u64,
    out: Vec<u8>,
    records: Vec<(u64, u64, Vec<u8>)>,
}

/// The regex the reference uses for one line.
fn line_pattern(g: &GrepOptions) -> String {
    let parts: Vec<String> = g
        .patterns
        .iter()
        .flat_map(|p| p.split(|&b| b == b'\n'))
        .map(|p| std::str::from_utf8(p).unwrap())
        .map(|p| if g.fixed { regex::escape(p) } else { p.to_owned() })
        .map(|p| format!("(?:{p})"))
        .collect();
    let joined = parts.join("|");
    if g.line {
        format!("^(?:{joined})$")
    } else if g.word {
        // GNU grep's rule: no word byte right before or after the match
        // (so word matches may be adjacent).
        format!(r"\b{{start-half}}(?:{joined})\b{{end-half}}")
    } else {
        joined
    }
}

fn line_regex(g: &GrepOptions) -> regex::bytes::Regex {
    RegexBuilder::new(&line_pattern(g))
        .unicode(false)
        .case_insensitive(g.ignore_case)
        .build()
        .unwrap()
}

/// The spans GNU grep shows, the slow way: POSIX leftmost-longest, each
/// start tried in turn with every match state kept (the longest end),
/// the next search where the last match ended (a byte on after an empty
/// one).
fn posix_spans(g: &GrepOptions) -> impl Fn(&[u8]) -> Vec<(usize, usize)> {
    use regex_automata::{meta, Anchored, Input, MatchKind};
    let re = meta::Builder::new()
        .syntax(
            regex_automata::util::syntax::Config::new()
                .unicode(false)
                .utf8(false)
                .case_insensitive(g.ignore_case),
        )
        .configure(meta::Config::new().utf8_empty(false).match_kind(MatchKind::All))
        .build(&line_pattern(g))
        .unwrap();
    move |line: &[u8]| {
        let longest = |s: usize| {
            let input = Input::new(line).range(s..).anchored(Anchored::Yes);
            re.search_half(&input).map(|m| (s, m.offset()))
        };
        let (mut out, mut cur) = (Vec::new(), 0);
        while let Some((s, e)) = (cur..=line.len()).find_map(longest) {
            if e > s {
                out.push((s, e));
                cur = e;
            } else {
                cur = s + 1;
            }
        }
        out
    }
}

/// The obvious implementation: one line at a time, then context.
fn reference(data: &[u8], g: &GrepOptions, p: &PrintOptions, label: &[u8]) -> Expected {
    let re = line_regex(g);
    // GNU's spans are POSIX leftmost-longest; -P's are Perl's, leftmost-first.
    let posix = posix_spans(g);
    let spans = |line: &[u8]| -> Vec<(usize, usize)> {
        if g.perl {
            re.find_iter(line).map(|m| (m.start(), m.end())).collect()
        } else {
            posix(line)
        }
    };
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if data.is_empty() || data.ends_with(b"\n") {
        lines.pop();
    }
    let mut offsets = Vec::new();
    let mut off = 0u64;
    for l in &lines {
        offsets.push(off);
        off += l.len() as u64 + 1;
    }
    let cap = g.max_count.unwrap_or(u64::MAX);
    let mut selected = vec![false; lines.len()];
    let mut count = 0;
    for (i, line) in lines.iter().enumerate() {
        if count >= cap {
            break;
        }
        if re.is_match(line) != g.invert {
            selected[i] = true;
            count += 1;
        }
    }
    let mut shown = selected.clone();
    for i in (0..lines.len()).filter(|&i| selected[i]) {
        let around = i.saturating_sub(p.before.unwrap_or(0))
            ..=(i + p.after.unwrap_or(0)).min(lines.len() - 1);
        shown[around].fill(true);
    }
    let mut e = Expected { count, out: Vec::new(), records: Vec::new() };
    let mut last: Option<usize> = None;
    for i in (0..lines.len()).filter(|&i| shown[i]) {
        let (line, no) = (lines[i], i as u64 + 1);
        let sep = if selected[i] { b':' } else { b'-' };
        if (p.before.is_some() || p.after.is_some()) && last.is_some_and(|l| l + 1 != i) {
            e.out.extend_from_slice(b"--\n");
        }
        last = Some(i);
        let mut put = |at: u64, text: &[u8]| {
            if p.with_filename {
                e.out.extend_from_slice(label);
                e.out.push(sep);
            }
            if p.line_numbers {
                e.out.extend_from_slice(format!("{no}{}", sep as char).as_bytes());
            }
            if p.byte_offset {
                e.out.extend_from_slice(format!("{at}{}", sep as char).as_bytes());
            }
            e.out.extend_from_slice(text);
            e.out.push(b'\n');
            if selected[i] {
                e.records.push((no, at, text.to_vec()));
            }
        };
        if !p.only_matching {
            put(offsets[i], line);
        } else if selected[i] != g.invert {
            for (s, end) in spans(line).into_iter().filter(|(s, e)| e > s) {
                put(offsets[i] + s as u64, &line[s..end]);
            }
        }
    }
    e
}

/// Runs the GNU printer over a file or a stream.
fn printed(
    compiled: &Grep,
    path: &Path,
    p: &PrintOptions,
    opts: &ScanOptions,
    stream: Option<(&[u8], usize)>,
) -> (Vec<u8>, u64) {
    let mut out = Vec::new();
    let mut printer = GnuPrinter::new(&mut out, p.clone());
    let n = match stream {
        None => compiled.search(path, opts, &mut printer),
        Some((data, step)) => {
            compiled.search_reader(&mut Trickle(data, step), path, opts, &mut printer)
        }
    }
    .unwrap();
    (out, n)
}

fn check(data: &[u8], g: &GrepOptions, p: &PrintOptions) {
    let (_dir, path) = write(data);
    let label = path.as_os_str().as_encoded_bytes().to_vec();
    let want = reference(data, g, p, &label);
    let plain = PrintOptions { before: None, after: None, ..p.clone() };
    let want_records = reference(data, g, &plain, &label).records;
    // The free functions once (they compile the regex each time) ...
    let opts = ScanOptions::new(Strategy::Read, 3);
    assert_eq!(grep_count(&path, g, &opts).unwrap(), want.count, "count {g:?}");
    let mut out = Vec::new();
    assert_eq!(grep(&path, g, p, &opts, &mut out).unwrap(), want.count, "selected {g:?}");
    assert_eq!(
        grep_lines(&path, g, p.only_matching, &opts, None).unwrap(),
        want_records,
        "lines {g:?}"
    );
    // ... and every combination through one compiled search, with each
    // line finder (files this small never time them: each is forced).
    let finders: Vec<Grep> = [FINDER_PREFILTER, FINDER_DFA]
        .into_iter()
        .map(|which| {
            let mut compiled = Grep::new(g).unwrap();
            compiled.force_finder(which);
            compiled
        })
        .collect();
    for (which, compiled, opts) in
        finders.iter().enumerate().flat_map(|(w, c)| combos().into_iter().map(move |o| (w, c, o)))
    {
        let what =
            format!("finder {which} {g:?} {p:?} {opts:?} data={:?}", String::from_utf8_lossy(data));
        assert_eq!(compiled.count(&path, &opts).unwrap(), want.count, "count {what}");
        let (out, n) = printed(compiled, &path, p, &opts, None);
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want.out),
            "output {what}"
        );
        assert_eq!(n, want.count, "selected {what}");
        let mut collect = Collect::new(p.only_matching, None);
        compiled.search(&path, &opts, &mut collect).unwrap();
        assert_eq!(collect.found, want_records, "records {what}");
        // A stream, in the window size as read size, through short reads.
        let step = if opts.chunk == 0 { 5 } else { opts.chunk };
        let (out, n) = printed(compiled, &path, p, &opts, Some((data, step)));
        assert_eq!(
            String::from_utf8_lossy(&out),
            String::from_utf8_lossy(&want.out),
            "stream {what}"
        );
        assert_eq!(n, want.count, "stream selected {what}");
        assert_eq!(
            compiled.count_reader(&mut Trickle(data, step), &path, &opts).unwrap(),
            want.count,
            "stream count {what}"
        );
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
    (proptest::collection::vec(line, 0..30), proptest::bool::ANY).prop_map(
        |(lines, last_newline)| {
            let mut data = lines.join(&b'\n');
            if last_newline && !lines.is_empty() {
                data.push(b'\n');
            }
            data
        },
    )
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
        Just("[^[:alpha:]]b"),
        Just("\\w+,"),
        // Inner literals (inner.rs): no good prefix, a literal set inside.
        Just("[ab]+A1"),
        Just("b*ab1"),
        Just("[ab][ab]*,[1A]"),
        Just("\\w+ba\\b"),
        Just("[^,]*, ?a1"),
    ]
    .prop_map(|p| (vec![p.to_owned()], false));
    let literal = proptest::collection::vec(
        prop_oneof![Just('a'), Just('b'), Just('.'), Just('*'), Just('1')],
        0..4,
    )
    .prop_map(|c| (vec![c.into_iter().collect::<String>()], true));
    let several = proptest::collection::vec(
        prop_oneof![Just("a"), Just("b1"), Just("^A"), Just("x"), Just("a\nB")],
        2..4,
    )
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
        whole in prop_oneof![4 => Just((false, false)), 1 => Just((true, false)), 1 => Just((false, true))],
        context in prop_oneof![3 => Just((None, None)), 1 => (proptest::option::of(0usize..3), proptest::option::of(0usize..3))],
        max_count in prop_oneof![3 => Just(None), 1 => (0u64..4).prop_map(Some)],
    ) {
        let patterns = patterns.into_iter().map(String::into_bytes).collect();
        let g = GrepOptions { patterns, fixed, ignore_case, invert, word: whole.0, line: whole.1, max_count, ..Default::default() };
        let p = PrintOptions {
            line_numbers: numbers,
            byte_offset: offsets,
            only_matching: only,
            with_filename,
            before: context.0,
            after: context.1,
            ..Default::default()
        };
        check(&data, &g, &p);
    }
}

#[test]
fn edge_cases() {
    let numbered = PrintOptions { line_numbers: true, byte_offset: true, ..Default::default() };
    for data in [&b""[..], b"\n", b"\n\n", b"a", b"a\n", b"\na", b"ab\r\nb\r\n", b"xyz"] {
        for p in ["", "^", "$", "a", "^$", "\\s", "b\\r$", "x*"] {
            let g = GrepOptions { patterns: vec![p.into()], ..Default::default() };
            check(data, &g, &numbered);
            check(data, &GrepOptions { invert: true, ..g.clone() }, &numbered);
            check(data, &g, &PrintOptions { only_matching: true, ..numbered.clone() });
            check(
                data,
                &GrepOptions { word: true, ..g.clone() },
                &PrintOptions { before: Some(1), after: Some(1), ..numbered.clone() },
            );
        }
    }
}

/// The fuzzer's find: `\z` (a whole-haystack assertion, searched line by
/// line) after an alternative that matches empty, in a line with NULs.
#[test]
fn end_of_text_in_a_line_searched_alone() {
    let data = b"x\n\na\x0c\0\0\x14\0\0\x08\0y\n\nz";
    let g = GrepOptions { patterns: vec![b"^$|\nax|y\\z".to_vec()], ..Default::default() };
    check(data, &g, &PrintOptions { only_matching: true, ..Default::default() });
}

#[test]
fn context_groups_across_windows() {
    let data: Vec<u8> =
        (0..200)
            .map(|i| {
                if i % 17 == 0 || i % 23 == 0 {
                    "hit\n".to_string()
                } else {
                    format!("line {i}\n")
                }
            })
            .collect::<String>()
            .into_bytes();
    let g = GrepOptions { patterns: vec!["hit".into()], ..Default::default() };
    for (before, after) in [
        (None, Some(1)),
        (Some(2), None),
        (Some(0), Some(0)),
        (Some(3), Some(3)),
        (Some(8), Some(8)),
    ] {
        let p = PrintOptions { line_numbers: true, before, after, ..Default::default() };
        check(&data, &g, &p);
        check(&data, &GrepOptions { max_count: Some(3), ..g.clone() }, &p);
        check(&data, &GrepOptions { invert: true, max_count: Some(40), ..g.clone() }, &p);
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
    let g = GrepOptions { patterns: vec!["^12[0-9]*,".into()], ..Default::default() };
    let p = PrintOptions { line_numbers: true, byte_offset: true, ..Default::default() };
    let (_dir, path) = write(&data);
    let want = reference(&data, &g, &p, b"");
    assert!(want.count > 100);
    for opts in [
        ScanOptions::new(Strategy::Mmap, 2),
        ScanOptions::new(Strategy::Read, 3),
        ScanOptions::new(Strategy::Mmap, 1),
    ] {
        let mut out = Vec::new();
        assert_eq!(grep(&path, &g, &p, &opts, &mut out).unwrap(), want.count);
        assert!(out == want.out, "{opts:?}");
        assert_eq!(grep_count(&path, &g, &opts).unwrap(), want.count);
        for cap in [1, want.count - 1] {
            let capped = GrepOptions { max_count: Some(cap), ..g.clone() };
            let mut out = Vec::new();
            assert_eq!(grep(&path, &capped, &p, &opts, &mut out).unwrap(), cap);
            assert!(out == reference(&data, &capped, &p, b"").out, "{opts:?} -m {cap}");
            assert_eq!(grep_count(&path, &capped, &opts).unwrap(), cap);
        }
    }
}

#[test]
fn forked_printers_match_one_thread() {
    // Parallel ranges format their lines on their own threads (forks of the
    // printer); the bytes must be those of one thread, window sizes from
    // tiny up, for every output option.
    let mut data = Vec::new();
    for i in 0..3000u32 {
        data.extend_from_slice(
            format!("{},{},id{}\n", i * 7919 % 10007, i % 13, i % 97).as_bytes(),
        );
    }
    let (_dir, path) = write(&data);
    let g =
        Grep::new(&GrepOptions { patterns: vec!["1[0-9]*".into()], ..Default::default() }).unwrap();
    let base = PrintOptions { with_filename: true, ..Default::default() };
    let prints = [
        PrintOptions { line_numbers: true, ..base.clone() },
        PrintOptions { byte_offset: true, ..base.clone() },
        PrintOptions { only_matching: true, byte_offset: true, line_numbers: true, ..base.clone() },
        PrintOptions { color: true, line_numbers: true, ..base.clone() },
        PrintOptions { report: Report::Count, ..base.clone() },
        PrintOptions { before: Some(1), after: Some(2), line_numbers: true, ..base.clone() },
    ];
    for p in &prints {
        let (want, n) = printed(&g, &path, p, &ScanOptions::new(Strategy::Mmap, 1), None);
        assert!(n > 100 && !want.is_empty());
        for chunk in [3, 64, 4096, 0] {
            for strategy in [Strategy::Mmap, Strategy::Read] {
                let opts = ScanOptions { chunk, ..ScanOptions::new(strategy, 3) };
                let (out, m) = printed(&g, &path, p, &opts, None);
                assert_eq!(m, n, "{p:?} {opts:?}");
                assert!(out == want, "{p:?} {opts:?}");
            }
        }
    }
    for only_matching in [false, true] {
        let json = |opts: &ScanOptions| {
            let mut out = Vec::new();
            g.search(&path, opts, &mut JsonPrinter::new(&mut out, Report::Lines, only_matching))
                .unwrap();
            out
        };
        let want = json(&ScanOptions::new(Strategy::Mmap, 1));
        for chunk in [3, 4096, 0] {
            let opts = ScanOptions { chunk, ..ScanOptions::new(Strategy::Mmap, 3) };
            assert!(json(&opts) == want, "json -o={only_matching} {opts:?}");
        }
    }
}

/// Stops at its first line.
struct First(u64);
impl Sink for First {
    fn needs(&self) -> super::Needs {
        super::Needs { lines: true, ..Default::default() }
    }
    fn matched(&mut self, _: &SinkLine<'_>) -> crate::Result<ControlFlow<()>> {
        self.0 += 1;
        Ok(ControlFlow::Break(()))
    }
}

#[test]
fn stops_when_the_sink_says_so() {
    let (_dir, path) = write(b"a1\nb\na2\na3\n");
    let g = GrepOptions { patterns: vec!["a".into()], ..Default::default() };
    for opts in combos() {
        assert_eq!(
            grep_lines(&path, &g, false, &opts, Some(2)).unwrap(),
            vec![(1, 0, b"a1".to_vec()), (3, 5, b"a2".to_vec())]
        );
        let mut first = First(0);
        Grep::new(&g).unwrap().search(&path, &opts, &mut first).unwrap();
        assert_eq!(first.0, 1);
    }
}

#[test]
fn reports_counts_and_file_names() {
    let (_dir, path) = write(b"a1\nb\na2\n");
    let name = path.display().to_string();
    let g = Grep::new(&GrepOptions { patterns: vec!["a".into()], ..Default::default() }).unwrap();
    let none =
        Grep::new(&GrepOptions { patterns: vec!["z".into()], ..Default::default() }).unwrap();
    let run = |g: &Grep, report: Report| {
        let mut out = Vec::new();
        let p = PrintOptions { report, with_filename: true, ..Default::default() };
        g.search(&path, &ScanOptions::default(), &mut GnuPrinter::new(&mut out, p)).unwrap();
        String::from_utf8(out).unwrap()
    };
    assert_eq!(run(&g, Report::Count), format!("{name}:2\n"));
    assert_eq!(run(&g, Report::FilesWithMatches), format!("{name}\n"));
    assert_eq!(run(&none, Report::FilesWithMatches), "");
    assert_eq!(run(&none, Report::FilesWithoutMatch), format!("{name}\n"));
    assert_eq!(run(&g, Report::Quiet), "");
}

/// GNU grep 3.8's rules: binary from the 96 KiB buffer holding the first
/// NUL on, where NUL ends lines and selected lines are not printed.
#[test]
fn binary_files_report_no_lines() {
    let (_dir, path) = write(b"a\0b\nab\n");
    let opts = GrepOptions { patterns: vec!["a".into()], ..Default::default() };
    let binary = GrepOptions { binary_files: BinaryFiles::Binary, ..opts.clone() };
    let g = Grep::new(&binary).unwrap();
    let text = Grep::new(&opts).unwrap();
    for opts in combos() {
        let mut out = Vec::new();
        let mut printer = GnuPrinter::new(&mut out, PrintOptions::default());
        assert_eq!(
            g.search(&path, &opts, &mut printer).unwrap(),
            1,
            "stops at the first selected line"
        );
        assert!(printer.binary_matched());
        assert!(out.is_empty());
        let (out, n) = printed(&text, &path, &PrintOptions::default(), &opts, None);
        assert_eq!((out, n), (b"a\0b\nab\n".to_vec(), 2));
        // NUL ends lines: "a", "b", "ab".
        let b = Grep::new(&GrepOptions { patterns: vec!["^b$".into()], ..binary.clone() }).unwrap();
        assert_eq!(b.count(&path, &opts).unwrap(), 1, "{opts:?}");
    }
    // A NUL in the second buffer: the lines that end before it printed.
    let mut data = b"ab\n".repeat(40_000);
    data.extend_from_slice(b"a\0\nab\n");
    let (_dir, path) = write(&data);
    for opts in [
        ScanOptions::new(Strategy::Read, 1),
        ScanOptions::new(Strategy::Mmap, 3),
        ScanOptions { chunk: 64, ..ScanOptions::new(Strategy::Read, 3) },
    ] {
        let mut out = Vec::new();
        let mut printer = GnuPrinter::new(&mut out, PrintOptions::default());
        assert_eq!(g.search(&path, &opts, &mut printer).unwrap(), 32_769, "{opts:?}");
        assert!(printer.binary_matched());
        assert!(out == b"ab\n".repeat(32_768), "{opts:?}");
        assert_eq!(g.count(&path, &opts).unwrap(), 40_002, "{opts:?}");
    }
}

/// Files under 256 KiB are read whole and checked for NUL bytes in the
/// buffer searched: the same answers as windowed, mapped and streamed
/// searches, whichever side of GNU grep's 96 KiB buffer boundary the
/// first NUL is on.
#[test]
fn small_binary_files_read_whole_match_the_windowed_search() {
    let lines: Vec<u8> = (0..20_000).flat_map(|i| format!("ab {i:06}\n").into_bytes()).collect();
    let ab = |o: GrepOptions| GrepOptions { patterns: vec!["ab".into()], ..o };
    let binary = ab(GrepOptions { binary_files: BinaryFiles::Binary, ..Default::default() });
    let cases = [
        (binary.clone(), PrintOptions::default()),
        (binary.clone(), PrintOptions { report: Report::Count, ..Default::default() }),
        (
            GrepOptions { invert: true, ..binary.clone() },
            PrintOptions { report: Report::Count, ..Default::default() },
        ),
        (
            GrepOptions { patterns: vec!["ab 00008".into()], ..binary.clone() },
            PrintOptions { line_numbers: true, after: Some(3), ..Default::default() },
        ),
        (
            ab(GrepOptions { binary_files: BinaryFiles::WithoutMatch, ..Default::default() }),
            PrintOptions { report: Report::Count, ..Default::default() },
        ),
    ];
    let windowed = ScanOptions { chunk: 4096, ..ScanOptions::new(Strategy::Read, 1) };
    for nul in [0, 99, 98_303, 98_304, 98_305, 199_999] {
        let mut data = lines.clone();
        data[nul] = 0;
        let (_dir, path) = write(&data);
        for (g, p) in &cases {
            let compiled = Grep::new(g).unwrap();
            let want = printed(&compiled, &path, p, &windowed, None);
            for opts in [
                ScanOptions::new(Strategy::Auto, 1),
                ScanOptions::new(Strategy::Read, 3),
                ScanOptions::new(Strategy::Mmap, 2),
            ] {
                let got = printed(&compiled, &path, p, &opts, None);
                assert!(got == want, "NUL at {nul}, {g:?} {p:?} {opts:?}");
            }
            let streamed = printed(&compiled, &path, p, &windowed, Some((&data, 4096)));
            assert!(streamed == want, "NUL at {nul}, {g:?} {p:?}, streamed");
        }
    }
}

#[test]
fn colors_like_gnu_grep() {
    let (_dir, path) = write(b"xaby\nzz\n");
    let g = Grep::new(&GrepOptions { patterns: vec!["ab".into()], ..Default::default() }).unwrap();
    let p = PrintOptions { color: true, line_numbers: true, after: Some(1), ..Default::default() };
    let (out, _) = printed(&g, &path, &p, &ScanOptions::default(), None);
    assert_eq!(
        out,
        b"\x1b[32m\x1b[K1\x1b[m\x1b[K\x1b[36m\x1b[K:\x1b[m\x1b[Kx\x1b[01;31m\x1b[Kab\x1b[m\x1b[Ky\n\x1b[32m\x1b[K2\x1b[m\x1b[K\x1b[36m\x1b[K-\x1b[m\x1b[Kzz\n"
    );
}

#[test]
fn walks_in_name_order_skipping_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir_all(d.join("b/c")).unwrap();
    for f in ["z", "a", "b/c/x", "b/y"] {
        std::fs::write(d.join(f), "x").unwrap();
    }
    std::os::unix::fs::symlink(d.join("a"), d.join("link")).unwrap();
    std::os::unix::fs::symlink(d.join("b"), d.join("dlink")).unwrap();
    let got: Vec<_> = super::walk_files(d, &super::WalkOptions::default())
        .into_iter()
        .map(|p| p.unwrap().strip_prefix(d).unwrap().to_path_buf())
        .collect();
    let want: Vec<std::path::PathBuf> = ["a", "b/c/x", "b/y", "z"].iter().map(Into::into).collect();
    assert_eq!(got, want);
}

#[test]
fn invalid_regex_and_no_pattern() {
    let err =
        Grep::new(&GrepOptions { patterns: vec!["a(".into()], ..Default::default() }).unwrap_err();
    assert!(
        matches!(&err, Error::InvalidArgument(m) if m.starts_with("invalid regex") && m.contains("unclosed group")),
        "{err}"
    );
    // Each alternative must be valid on its own.
    let err =
        Grep::new(&GrepOptions { patterns: vec!["a)".into(), "(b".into()], ..Default::default() })
            .unwrap_err();
    assert!(matches!(err, Error::InvalidArgument(_)));
    // No pattern at all (`grep -f /dev/null`) matches nothing, as in GNU grep.
    let (_dir, path) = write(b"a\n\nb\n");
    let none = Grep::new(&GrepOptions::default()).unwrap();
    assert_eq!(none.count(&path, &ScanOptions::default()).unwrap(), 0);
    let all = Grep::new(&GrepOptions { invert: true, ..Default::default() }).unwrap();
    assert_eq!(all.count(&path, &ScanOptions::default()).unwrap(), 3);
    // -F escapes metacharacters.
    assert!(Grep::new(&GrepOptions {
        patterns: vec!["a(".into()],
        fixed: true,
        ..Default::default()
    })
    .is_ok());
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
    for p in [
        "7[0-9]{3}\\.5",
        "\\w+@\\d",
        "^foo$",
        "(?i)abc",
        "a.b",
        "[[:alpha:]]+",
        "\\bx\\b",
        "\\[^a\\]",
        "[]^]",
        "é+",
    ] {
        assert!(cannot_match_newline(p), "{p}");
    }
    for p in [
        "\\s",
        "\\S",
        "\\D",
        "\\W",
        "[^a]",
        "a[^b]c",
        "(?s).",
        "(?is:a.)",
        "[[:space:]]",
        "[[:^alpha:]]",
        "\\x0a",
        "\\n",
        "\\pC",
        "\\P{L}",
        "[\\t-\\r]",
        "a\\",
        "\tb",
        "\\Aa",
    ] {
        assert!(!cannot_match_newline(p), "{p}");
    }
}

#[test]
fn grep_reads_proc_files_and_fifos() {
    let g = GrepOptions { patterns: vec!["^MemTotal".into()], ..Default::default() };
    let mut out = Vec::new();
    // /proc/meminfo has size 0: it used to give no match at all.
    assert_eq!(
        grep("/proc/meminfo", &g, &PrintOptions::default(), &ScanOptions::default(), &mut out)
            .unwrap(),
        1
    );
    assert!(out.starts_with(b"MemTotal:"), "{}", String::from_utf8_lossy(&out));
    let data = b"one\ntwo MemTotal\nMemTotal three\nfour".to_vec();
    let dir = tempfile::tempdir().unwrap();
    for (k, opts) in combos().into_iter().enumerate() {
        let g = GrepOptions { patterns: vec!["^MemTotal|two".into()], ..Default::default() };
        let p = PrintOptions { line_numbers: true, ..Default::default() };
        let (f, h) = crate::test_util::fifo(dir.path(), &format!("f{k}"), data.clone());
        let mut out = Vec::new();
        assert_eq!(grep(&f, &g, &p, &opts, &mut out).unwrap(), 2, "{opts:?}");
        h.join().unwrap();
        assert_eq!(out, b"2:two MemTotal\n3:MemTotal three\n", "{opts:?}");
    }
}

#[test]
fn large_files_time_the_finders_and_count_the_same() {
    // Past the size where a search times both finders on a sample: the
    // count (and printed lines) must not depend on the one it picks.
    let mut data = Vec::new();
    let mut x = 12345u64;
    while data.len() < (17 << 20) {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        let line = format!("{},{}.{},{}\n", x >> 44, (x >> 20) & 0xfff, (x >> 8) & 0x3f, x & 0xff);
        data.extend_from_slice(line.as_bytes());
    }
    let (_dir, path) = write(&data);
    for pattern in ["[0-9]{3},[0-9]{3}\\.[0-9]5", "45", "^9[0-9]*,|,7$", "\\b12\\b"] {
        let g = GrepOptions { patterns: vec![pattern.into()], ..Default::default() };
        let re = line_regex(&g);
        let want = data.split(|&b| b == b'\n').filter(|l| re.is_match(l)).count() as u64;
        let compiled = Grep::new(&g).unwrap();
        for opts in [
            ScanOptions::new(Strategy::Mmap, 1),
            ScanOptions::new(Strategy::Read, 2),
            ScanOptions::new(Strategy::Mmap, 3),
        ] {
            assert_eq!(compiled.count(&path, &opts).unwrap(), want, "{pattern} {opts:?}");
            let lines = grep_lines(&path, &g, false, &opts, None).unwrap();
            assert_eq!(lines.len() as u64, want, "{pattern} {opts:?}");
        }
    }
}

/// `-P` patterns in the syntax both engines share: PCRE2, line by line,
/// must answer as the reference does, for every strategy, thread count,
/// window size and stream.
fn perl_patterns() -> impl proptest::strategy::Strategy<Value = &'static str> {
    prop_oneof![
        Just("a"),
        Just("ab"),
        Just("^a"),
        Just("b$"),
        Just("^$"),
        Just(""),
        Just("a|ab"),
        Just("[0-9]+"),
        Just("a.b"),
        Just("(?i)ab"),
        Just("\\s"),
        Just("b\\s*a"),
        Just("[^a]*b"),
        Just("\\r$"),
        Just("\\bab\\b"),
        Just("\\Aa"),
        Just("b\\z"),
        Just("a*"),
        Just("[[:alpha:]]1"),
        Just("\\w+,"),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    #[test]
    fn perl_matches_reference(
        data in corpus(),
        pattern in perl_patterns(),
        ignore_case: bool,
        invert: bool,
        only in proptest::bool::weighted(0.3),
        whole in prop_oneof![4 => Just((false, false)), 1 => Just((true, false)), 1 => Just((false, true))],
        context in prop_oneof![3 => Just((None, None)), 1 => (proptest::option::of(0usize..3), proptest::option::of(0usize..3))],
        max_count in prop_oneof![3 => Just(None), 1 => (0u64..4).prop_map(Some)],
    ) {
        let g = GrepOptions { patterns: vec![pattern.into()], perl: true, ignore_case, invert, word: whole.0, line: whole.1, max_count, ..Default::default() };
        let p = PrintOptions {
            line_numbers: true,
            only_matching: only,
            before: context.0,
            after: context.1,
            ..Default::default()
        };
        check(&data, &g, &p);
    }
}

/// What only PCRE2 has (`\K`, lookarounds, back-references), the
/// one-pattern rule, the matcher conflicts, compile errors naming the
/// pattern, and matching errors naming the file.
#[test]
fn perl_syntax_rules_and_errors() {
    let perl = |p: &[u8]| GrepOptions::default().patterns(vec![p.to_vec()]).perl(true);
    let (_dir, path) = write(b"foobar x=1 y=22\nabab\n\xe9t\xe9\n");
    let matches = |g: &GrepOptions| {
        let opts = ScanOptions::new(Strategy::Read, 3);
        grep_lines(&path, g, true, &opts, None)
            .unwrap()
            .into_iter()
            .map(|(_, off, b)| (off, b))
            .collect::<Vec<_>>()
    };
    assert_eq!(matches(&perl(b"foo\\Kbar")), [(3, b"bar".to_vec())]);
    assert_eq!(matches(&perl(b"(?<=y=)\\d+")), [(13, b"22".to_vec())]);
    assert_eq!(matches(&perl(b"(ab)\\1")), [(16, b"abab".to_vec())]);
    assert_eq!(matches(&perl(b"\xe9.")), [(21, b"\xe9t".to_vec())]);
    assert_eq!(matches(&perl(b"(?<=o)o")), [(2, b"o".to_vec())]);
    let refused = |g: GrepOptions, want: &str| {
        let err = Grep::new(&g).unwrap_err();
        assert!(matches!(&err, Error::InvalidArgument(m) if m.contains(want)), "{err}");
    };
    let one = "the -P option only supports a single pattern";
    refused(perl(b"a").patterns(vec![b"a".to_vec(), b"b".to_vec()]), one);
    refused(perl(b"a\nb"), one);
    refused(perl(b"a").fixed(true), "conflicting matchers specified");
    refused(perl(b"a").basic(true), "conflicting matchers specified");
    refused(perl(b"a(b"), "invalid -P pattern 'a(b'");
    refused(perl(b"a(b"), "missing closing parenthesis");
    refused(perl(b"a)(b").line(true), "'a)(b'");
    assert!(Grep::new(&perl(b"a)|(b").word(true)).is_ok()); // as GNU grep wraps it
    refused(perl(b"(?u)a"), "(?u)a");
    // No pattern (`-f /dev/null`): nothing matches.
    let none = Grep::new(&GrepOptions::default().perl(true)).unwrap();
    assert_eq!(none.count(&path, &ScanOptions::default()).unwrap(), 0);
    // Backtracking past PCRE2's limit fails the file, naming it.
    let (_d, long) = write(format!("{}!\nhello\n", "a".repeat(40)).as_bytes());
    for opts in combos() {
        let err = grep_count(&long, &perl(b"^(a+)+$"), &opts).unwrap_err();
        assert_eq!(err.path(), Some(long.as_path()), "{err}");
        assert!(err.to_string().contains("limit"), "{err}");
    }
    // (*UTF) on a line that is not UTF-8: an error, as in GNU grep.
    let err = grep_count(&path, &perl(b"(*UTF)x"), &ScanOptions::default()).unwrap_err();
    assert_eq!(err.path(), Some(path.as_path()), "{err}");
}

#[test]
fn selects_nothing_is_gnu_greps_shortcut() {
    let g = |p: &[&str]| GrepOptions {
        patterns: p.iter().map(|p| p.as_bytes().to_vec()).collect(),
        ..Default::default()
    };
    assert!(g(&[]).selects_nothing());
    assert!(GrepOptions { line: true, ..g(&[]) }.selects_nothing());
    assert!(!GrepOptions { invert: true, ..g(&[]) }.selects_nothing());
    for p in [&[""][..], &["", ""], &["\n"]] {
        assert!(GrepOptions { invert: true, ..g(p) }.selects_nothing(), "{p:?}");
        assert!(!g(p).selects_nothing());
        assert!(!GrepOptions { invert: true, word: true, ..g(p) }.selects_nothing());
        assert!(!GrepOptions { invert: true, line: true, ..g(p) }.selects_nothing());
    }
    assert!(!GrepOptions { invert: true, ..g(&["", "a"]) }.selects_nothing());
    assert!(GrepOptions { max_count: Some(0), ..g(&["a"]) }.selects_nothing());
}

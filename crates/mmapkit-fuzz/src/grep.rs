//! grep against a naive reference: each line on its own through the
//! `regex` crate, for the pattern(s), the options (-F -i -v -w -x -m,
//! --only-matching) and a scan set-up (strategy, threads, window, finder)
//! all taken from the input.

use mmapkit::scan::grep::{Collect, Grep, GrepOptions};
use mmapkit::scan::{ScanOptions, Strategy};
use regex::bytes::{Regex, RegexBuilder};
use regex_automata::{meta, Anchored, Input as Haystack, MatchKind};

use crate::Input;

/// The regex the reference matches each line with (GNU grep's meaning of
/// -x and -w, the patterns split at newlines as alternatives).
fn line_pattern(g: &GrepOptions) -> String {
    let parts: Vec<String> = g
        .patterns
        .iter()
        .flat_map(|p| p.split(|&b| b == b'\n'))
        .map(|p| String::from_utf8_lossy(p).into_owned())
        // (an extended pattern as grep reads it: its translation is not
        // what this reference checks)
        .map(|p| {
            if g.fixed {
                regex::escape(&p)
            } else {
                mmapkit::scan::grep::extended_source(&p).unwrap_or(p)
            }
        })
        .map(|p| format!("(?:{p})"))
        .collect();
    let joined = parts.join("|");
    if g.line {
        format!("^(?:{joined})$")
    } else if g.word {
        format!(r"\b{{start-half}}(?:{joined})\b{{end-half}}")
    } else {
        joined
    }
}

fn line_regex(g: &GrepOptions) -> Option<Regex> {
    RegexBuilder::new(&line_pattern(g)).unicode(false).case_insensitive(g.ignore_case).build().ok()
}

/// The same pattern with every match state kept: anchored at a start, the
/// longest match's end (POSIX leftmost-longest, GNU grep's spans).
fn longest_regex(g: &GrepOptions) -> Option<meta::Regex> {
    let syntax = regex_automata::util::syntax::Config::new()
        .unicode(false)
        .utf8(false)
        .case_insensitive(g.ignore_case);
    let config = meta::Config::new().utf8_empty(false).match_kind(MatchKind::All);
    meta::Builder::new().syntax(syntax).configure(config).build(&line_pattern(g)).ok()
}

/// The non-empty spans of `line`: the first start with a match, its
/// longest end, then on from there (a byte on after an empty match).
fn posix_spans(longest: &meta::Regex, line: &[u8]) -> Vec<(usize, usize)> {
    let at_start = |s: usize| {
        let hay = Haystack::new(line).range(s..).anchored(Anchored::Yes);
        longest.search_half(&hay).map(|end| (s, end.offset()))
    };
    let mut spans = Vec::new();
    let mut at = 0;
    while at < line.len() {
        let Some((s, e)) = (at..=line.len()).find_map(at_start) else { break };
        if e > s {
            spans.push((s, e));
        }
        at = if e > s { e } else { s + 1 };
    }
    spans
}

/// Selected lines (number, offset, bytes) and, per selected line, its
/// non-empty match spans as (number, offset, bytes) records.
type Records = Vec<(u64, u64, Vec<u8>)>;

fn reference(
    data: &[u8],
    g: &GrepOptions,
    re: &Regex,
    longest: &meta::Regex,
) -> (Records, Records) {
    let mut lines: Vec<&[u8]> = data.split(|&b| b == b'\n').collect();
    if data.is_empty() || data.ends_with(b"\n") {
        lines.pop();
    }
    let cap = g.max_count.unwrap_or(u64::MAX);
    let (mut sel, mut spans) = (Vec::new(), Vec::new());
    let mut off = 0u64;
    for (i, line) in lines.iter().enumerate() {
        let no = i as u64 + 1;
        if (sel.len() as u64) < cap && re.is_match(line) != g.invert {
            sel.push((no, off, line.to_vec()));
            if !g.invert {
                for (s, e) in posix_spans(longest, line) {
                    spans.push((no, off + s as u64, line[s..e].to_vec()));
                }
            }
        }
        off += line.len() as u64 + 1;
    }
    (sel, spans)
}

pub fn grep(data: &[u8]) {
    let mut b = Input::new(data);
    let flags = b.u8();
    let max = b.u8();
    let setup = b.u8();
    let Ok(pattern) = std::str::from_utf8(b.until(0)) else { return };
    // Keep compile time bounded: short patterns, no large repetition counts.
    if pattern.len() > 64 || pattern.as_bytes().windows(3).any(|w| w.iter().all(u8::is_ascii_digit))
    {
        return;
    }
    let hay = b.rest();
    let g = GrepOptions::default()
        .patterns(vec![pattern.as_bytes().to_vec()])
        .fixed(flags & 1 != 0)
        .ignore_case(flags & 2 != 0)
        .invert(flags & 4 != 0)
        .word(flags & 8 != 0)
        .line(flags & 16 != 0)
        .max_count((flags & 32 != 0).then_some(max as u64 % 8));
    let only_matching = flags & 64 != 0;
    let Ok(mut grep) = Grep::new(&g) else { return };
    let re = line_regex(&g).expect("the reference builds what grep built");
    let longest = longest_regex(&g).expect("the reference builds what grep built");
    grep.force_finder((flags >> 7) as usize);
    let opts = ScanOptions::default()
        .strategy([Strategy::Mmap, Strategy::Read, Strategy::Stream][setup as usize % 3])
        .threads((1 + (setup as usize / 3) % 3).into())
        .chunk([1, 2, 3, 7, 64, 0][(setup as usize / 9) % 6]);
    let (want, want_spans) = reference(hay, &g, &re, &longest);
    let dir = crate::scratch();
    let path = dir.path().join("hay");
    std::fs::write(&path, hay).expect("write");

    let mut sink = Collect::new(false, None);
    let n = grep.search(&path, &opts, &mut sink).expect("search");
    assert_eq!(sink.found, want, "selected lines ({opts:?})");
    assert_eq!(n, want.len() as u64);
    let n = grep.count(&path, &opts).expect("count");
    assert_eq!(n, want.len() as u64, "count ({opts:?})");
    let mut reader: &[u8] = hay;
    let n = grep.count_reader(&mut reader, &path, &opts).expect("count_reader");
    assert_eq!(n, want.len() as u64, "count_reader ({opts:?})");
    if only_matching && !g.invert {
        let mut sink = Collect::new(true, None);
        grep.search(&path, &opts, &mut sink).expect("search");
        assert_eq!(sink.found, want_spans, "matches ({opts:?})");
    }
}

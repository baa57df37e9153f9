//! Inner literals: for a pattern with no good literal prefix, a set of
//! literals one of which every match contains (`[a-z]+_[0-9]+\(` has
//! `_0` ... `_9`), so that matching lines are found by searching for them
//! (memchr, memmem or Teddy) and only the lines around an occurrence are
//! searched with the regex (ripgrep's grep-regex does the same with its
//! "inner literals"). regex-automata's own prefilters look only at a
//! match's prefix or suffix: here that was `(`, in nearly every line of a
//! C header, so the DFA read every byte.

use regex_automata::util::prefilter::Prefilter;
use regex_automata::MatchKind;
use regex_syntax::hir::literal::{ExtractKind, Extractor, Seq};
use regex_syntax::hir::{Hir, HirKind};

/// At most this many literals (Teddy's limit; more is no faster than the DFA).
const MAX_LITERALS: usize = 64;

/// The inner-literal prefilter of `hir`, when one is clearly better than
/// what the regex's own prefix prefilter has: literals of at least two
/// bytes found past the start of the pattern.
pub(super) fn prefilter(hir: &Hir) -> Option<Prefilter> {
    let parts = concat_parts(hir);
    if parts.len() < 2 {
        return None;
    }
    let from = |i: usize| score(&prefixes(&Hir::concat(parts[i..].to_vec())));
    let (key, seq) = (1..parts.len()).filter_map(from).max_by(|a, b| a.0.cmp(&b.0))?;
    if key.0 < 2 || from(0).is_some_and(|(p, _)| p >= key) {
        return None; // one-byte literals, or no better than the prefix
    }
    // (Not gated on `is_fast`: Teddy calls two-byte sets slow, but `_0`..`_9`
    // is 80 K hits in /usr/include's 115 MB against `(`'s 1.4 M.)
    Prefilter::new(MatchKind::LeftmostFirst, seq.literals()?)
}

/// The literals every match of `hir` starts with, cut short until there
/// are at most [`MAX_LITERALS`] (`_0(`, `_00`, ... 110 of them become
/// `_0` ... `_9`).
fn prefixes(hir: &Hir) -> Seq {
    let mut seq = Extractor::new().kind(ExtractKind::Prefix).extract(hir);
    seq.dedup();
    while seq.len().is_some_and(|n| n > MAX_LITERALS)
        && seq.max_literal_len().is_some_and(|n| n > 1)
    {
        seq.keep_first_bytes(seq.max_literal_len().unwrap_or(1) - 1);
        seq.dedup();
    }
    seq
}

/// How good a literal set is: the shortest literal's length, then fewer
/// literals; `None` when it cannot be searched for.
fn score(seq: &Seq) -> Option<((usize, std::cmp::Reverse<usize>), Seq)> {
    let lits = seq.literals()?;
    let min = seq.min_literal_len()?;
    (min > 0 && !lits.is_empty() && lits.len() <= MAX_LITERALS)
        .then(|| ((min, std::cmp::Reverse(lits.len())), seq.clone()))
}

/// The parts of `hir`'s top-level concatenation (groups unwrapped, nested
/// concatenations flattened): every match of the pattern has a match of
/// each part, in order, so a suffix of the parts is matched by a
/// contiguous piece of every match.
fn concat_parts(hir: &Hir) -> Vec<Hir> {
    match hir.kind() {
        HirKind::Capture(c) => concat_parts(&c.sub),
        HirKind::Concat(subs) => subs.iter().flat_map(concat_parts).collect(),
        _ => vec![hir.clone()],
    }
}

#[cfg(test)]
mod tests {
    use super::prefilter;
    use regex_automata::Span;

    fn hir(p: &str) -> regex_syntax::hir::Hir {
        regex_automata::util::syntax::parse_with(p, &crate::scan::byte_regex::syntax(false))
            .unwrap()
    }

    fn finds(p: &str, hay: &str) -> Option<(usize, usize)> {
        let pre = prefilter(&hir(p))?;
        pre.find(hay.as_bytes(), Span::from(0..hay.len())).map(|s| (s.start, s.end))
    }

    #[test]
    fn inner_literals_where_the_prefix_is_poor() {
        // `_` then a digit: `_0`..`_9`, not the `(` suffix nor [a-z].
        assert_eq!(finds(r"[a-z]+_[0-9]+\(", "f(x) + u_8(y)"), Some((8, 10)));
        assert_eq!(finds(r"[a-z][a-z]*_[0-9][0-9]*[(]", "f(x) + u_8(y)"), Some((8, 10)));
        assert_eq!(finds(r"\w+Error\b", "x ValueError"), Some((7, 12)));
        assert_eq!(finds(r"(?:[0-9]+)(kB|MB)", "12 kB"), Some((3, 5)));
        // The grep tests' inner-literal patterns (tests.rs) do take this path.
        for p in ["[ab]+A1", "b*ab1", "[ab][ab]*,[1A]", r"\w+ba\b", "[^,]*, ?a1"] {
            assert!(prefilter(&hir(p)).is_some(), "{p}");
        }
    }

    #[test]
    fn none_where_the_prefix_is_as_good_or_nothing_is_required() {
        for p in ["self", "foo.*bar", "[a-z]+", "a|b", "x?yz?", "x_y", "(ab)*c+"] {
            assert!(prefilter(&hir(p)).is_none(), "{p}");
        }
    }
}

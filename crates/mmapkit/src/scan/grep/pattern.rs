//! What a pattern's text tells about its matches, judged conservatively
//! (used to pick the cheapest correct way to search windows of lines).

/// True when a pattern may assert something about the whole haystack
/// (`\A`, `\z`, or multi-line mode turned off by `(?-m)`), which searching
/// a window of many lines would get wrong. Errs on the side of true.
pub(crate) fn whole_haystack_assertions(p: &str) -> bool {
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                if matches!(b.get(i + 1), Some(b'A' | b'z')) {
                    return true;
                }
                i += 2;
                continue;
            }
            b'(' if b.get(i + 1) == Some(&b'?') => {
                let mut negated = false;
                for &c in b[i + 2..].iter().take_while(|&&c| c != b':' && c != b')') {
                    match c {
                        b'-' => negated = true,
                        b'm' if negated => return true,
                        _ => {}
                    }
                }
            }
            _ => {}
        }
        i += 1;
    }
    false
}

/// True when no match of the pattern can contain a newline, judged from
/// its text (conservative: false when unsure). Rejected: negated classes,
/// `\s`-like and numeric escapes, Unicode classes, POSIX classes other than
/// the printable ones, the `s` flag, and control characters (so class
/// ranges start above `\n`).
pub(crate) fn cannot_match_newline(p: &str) -> bool {
    const SAFE_POSIX: [&[u8]; 11] = [
        b"alnum", b"alpha", b"blank", b"digit", b"graph", b"lower", b"print", b"punct", b"upper",
        b"word", b"xdigit",
    ];
    let b = p.as_bytes();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            b'\\' => {
                match b.get(i + 1) {
                    Some(b'd' | b'w' | b'b' | b'B') => {}
                    Some(c) if c.is_ascii_punctuation() => {}
                    _ => return false,
                }
                i += 2;
                continue;
            }
            b'[' => match b.get(i + 1) {
                Some(b'^') => return false,
                Some(b':') => {
                    let rest = &b[i + 2..];
                    match rest.windows(2).position(|w| w == b":]") {
                        Some(k) if SAFE_POSIX.contains(&&rest[..k]) => {
                            i += k + 4;
                            continue;
                        }
                        _ => return false,
                    }
                }
                _ => {}
            },
            // flags: `s` lets `.` match a newline
            b'(' if b.get(i + 1) == Some(&b'?')
                && b[i + 2..]
                    .iter()
                    .take_while(|&&c| c != b':' && c != b')')
                    .any(|&c| c == b's') =>
            {
                return false;
            }
            c if c < 0x20 || c == 0x7f => return false,
            _ => {}
        }
        i += 1;
    }
    true
}

/// GNU grep's messages (glibc's and its dfa's, as `grep` prints them
/// under `LC_ALL=C`).
const BAD_CLASS: &str = "Invalid character class name";
const BAD_COLLATION: &str = "Invalid collation character";
const UNMATCHED_BRACKET: &str = "Unmatched [, [^, [:, [., or [=";
const BARE_CLASS: &str = "character class syntax is [[:space:]], not [:space:]";
const UNMATCHED_BRACE: &str = "Unmatched \\{";
const BAD_INTERVAL: &str = "Invalid content of \\{\\}";
const TOO_BIG: &str = "Regular expression too big";
const TRAILING_BACKSLASH: &str = "Trailing backslash";

/// glibc's `RE_DUP_MAX`: the largest interval bound.
const DUP_MAX: u32 = 0x7fff;

/// The character classes POSIX names (the C locale has no others).
const CLASSES: [&str; 12] = [
    "alnum", "alpha", "blank", "cntrl", "digit", "graph", "lower", "print", "punct", "space",
    "upper", "xdigit",
];

/// Where a BRE or ERE parser stands: what a `*`, `^` or interval there is.
#[derive(Clone, Copy, PartialEq)]
enum At {
    /// The start of an expression (the pattern, after `(` or `|`).
    Start,
    /// Right after an anchoring `^`: still nothing to repeat.
    Anchor,
    /// After an atom, which an operator repeats.
    Atom,
}

/// A POSIX basic regex (GNU grep's `-G` dialect, its default) as the
/// extended syntax the search compiles: `\(`, `\)`, `\{`, `\}`, `\|`, `\+`
/// and `\?` are the operators and their bare forms literals. As in glibc,
/// `^` anchors only at the start of an expression and `$` only at its end
/// (elsewhere, even `^^`'s second, they are literals); where nothing
/// precedes, `*`, `\+`, `\?` and `\{` are literals (`\}` outside an
/// interval is one too); `\<` and `\>` are word starts and ends. Bracket
/// expressions and intervals get GNU's checks. Back-references (`\1`) have
/// no equivalent here and are refused. Errors are GNU grep's messages.
pub(crate) fn basic_to_extended(p: &str) -> Result<String, &'static str> {
    let b: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 8);
    let mut i = 0;
    let mut at = At::Start;
    while i < b.len() {
        let c = b[i];
        let before = std::mem::replace(&mut at, At::Atom);
        match c {
            '\\' => {
                let Some(&n) = b.get(i + 1) else {
                    return Err(TRAILING_BACKSLASH);
                };
                i += 2;
                match n {
                    '(' | '|' => {
                        out.push(n);
                        at = At::Start;
                    }
                    '{' if before == At::Atom => {
                        let iv = interval(&b, i, true)?.expect("a BRE interval is never a literal");
                        iv.push_to(&mut out);
                        i = iv.end;
                    }
                    '{' | '}' | '+' | '?' if before != At::Atom || n == '}' => {
                        out.push('\\');
                        out.push(n);
                    }
                    ')' | '+' | '?' => out.push(n),
                    '<' => out.push_str(r"\b{start}"),
                    '>' => out.push_str(r"\b{end}"),
                    '`' => out.push_str(r"\A"),
                    '\'' => out.push_str(r"\z"),
                    '1'..='9' => return Err("back-references are not supported"),
                    // (`\xHH`: a byte that is not UTF-8, as the byte rule writes it)
                    'w' | 'W' | 's' | 'S' | 'b' | 'B' | 'x' => {
                        out.push('\\');
                        out.push(n);
                    }
                    _ => push_literal(&mut out, n),
                }
                continue;
            }
            '[' => {
                i = bracket(&b, i, &mut out)?;
                continue;
            }
            '*' if before != At::Atom => out.push_str(r"\*"),
            '^' if before == At::Start => {
                out.push('^');
                at = At::Anchor;
            }
            '^' => out.push_str(r"\^"),
            '$' => {
                let end = i + 1 == b.len()
                    || (b[i + 1] == '\\' && matches!(b.get(i + 2), Some(')' | '|')));
                out.push_str(if end { "$" } else { r"\$" });
            }
            '(' | ')' | '{' | '}' | '|' | '+' | '?' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// An extended regex (`-E`, the default here) as GNU grep reads it,
/// written for the regex crate, whose syntax it otherwise keeps (`\d`,
/// `(?i)`, nested classes): `{` opens an interval only where glibc reads
/// one and is a literal elsewhere, `{,n}` is `{0,n}`, an operator with
/// nothing before it (`*a`, `(+a)`, `x|{2}`) repeats nothing (GNU grep
/// warns), and bracket expressions get GNU's checks. Errors are GNU grep's
/// messages.
pub(crate) fn gnu_extended(p: &str) -> Result<String, &'static str> {
    let b: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 8);
    let mut i = 0;
    let mut at = At::Start;
    while i < b.len() {
        let c = b[i];
        let before = std::mem::replace(&mut at, At::Atom);
        match c {
            '\\' => {
                i = escape(&b, i, &mut out)?;
                continue;
            }
            '[' => {
                i = nested_bracket(&b, i, &mut out, true)?;
                continue;
            }
            '{' => match (before, interval(&b, i + 1, false)) {
                (At::Start, Ok(Some(iv))) => {
                    at = At::Start;
                    i = iv.end;
                    continue;
                }
                (_, Ok(Some(iv))) => {
                    iv.push_to(&mut out);
                    i = iv.end;
                    continue;
                }
                // With nothing to repeat, dfa reads a bad interval as text.
                (At::Atom, Err(e)) | (_, Err(e @ TOO_BIG)) => return Err(e),
                _ => out.push_str(r"\{"),
            },
            // (`(?` opens the regex crate's flags or group names)
            '*' | '+' | '?' if before == At::Start && !(c == '?' && i > 0 && b[i - 1] == '(') => {
                at = At::Start;
            }
            '(' | '|' => {
                out.push(c);
                at = At::Start;
            }
            '^' => {
                out.push(c);
                at = At::Anchor;
            }
            _ => out.push(c),
        }
        i += 1;
    }
    Ok(out)
}

/// Copies the regex crate escape at `b[i] == '\\'` (with its braces, as in
/// `\x{e9}`, `\p{L}`, `\b{start}`), returning the index after it.
fn escape(b: &[char], i: usize, out: &mut String) -> Result<usize, &'static str> {
    let Some(&n) = b.get(i + 1) else {
        return Err(TRAILING_BACKSLASH);
    };
    let mut end = i + 2;
    if n.is_ascii_alphabetic() && b.get(end) == Some(&'{') {
        end = (end..b.len()).find(|&k| b[k] == '}').map_or(b.len(), |k| k + 1);
    }
    out.extend(&b[i..end]);
    Ok(end)
}

/// An interval bound as glibc's `fetch_number` reads it.
#[derive(Clone, Copy, PartialEq)]
enum Bound {
    Missing,
    /// A token other than a digit came first (or the pattern ended).
    Bad,
    /// (capped at `DUP_MAX + 1`, which is too big anyway)
    Number(u32),
}

/// What ended a bound.
#[derive(Clone, Copy, PartialEq)]
enum Stop {
    Comma,
    Close,
    End,
}

/// Reads one bound from `b[i]` up to a `,` or the interval's close (`\}` in
/// a BRE, `}` in an ERE), returning it, what stopped it, and the index
/// after that.
fn bound(b: &[char], mut i: usize, basic: bool) -> (Bound, Stop, usize) {
    let mut n = Bound::Missing;
    while let Some(&c) = b.get(i) {
        let escaped = c == '\\';
        if (!basic && c == '}') || (basic && escaped && b.get(i + 1) == Some(&'}')) {
            return (n, Stop::Close, i + 1 + usize::from(basic));
        }
        if c == ',' {
            return (n, Stop::Comma, i + 1);
        }
        n = match (n, c.to_digit(10)) {
            (Bound::Missing, Some(d)) => Bound::Number(d),
            (Bound::Number(v), Some(d)) => Bound::Number((v * 10 + d).min(DUP_MAX + 1)),
            _ => Bound::Bad,
        };
        i += 1 + usize::from(escaped);
    }
    (Bound::Bad, Stop::End, i)
}

/// An interval's bounds and where its text ends.
struct Interval {
    min: u32,
    /// `None`: unbounded.
    max: Option<u32>,
    /// The index after its close.
    end: usize,
}

impl Interval {
    /// Writes it in the regex crate's syntax.
    fn push_to(&self, out: &mut String) {
        let min = self.min;
        out.push_str(&match self.max {
            Some(max) if max == min => format!("{{{min}}}"),
            Some(max) => format!("{{{min},{max}}}"),
            None => format!("{{{min},}}"),
        });
    }
}

/// The interval whose text starts at `b[i]` (after its `{` or `\{`), read
/// as glibc's `parse_dup_op` does, or `None` where an ERE's `{` is a
/// literal (a bound that is not a number).
fn interval(b: &[char], i: usize, basic: bool) -> Result<Option<Interval>, &'static str> {
    let (min, stop, i) = bound(b, i, basic);
    let (min, max, stop, end) = match (min, stop) {
        (Bound::Missing, Stop::Comma) => {
            let (max, stop, end) = bound(b, i, basic);
            (Bound::Number(0), max, stop, end)
        }
        (Bound::Missing, _) => return Err(BAD_INTERVAL), // `{}`
        (Bound::Number(_), Stop::Comma) => {
            let (max, stop, end) = bound(b, i, basic);
            (min, max, stop, end)
        }
        (Bound::Number(_), Stop::Close) => (min, min, stop, i),
        _ => (Bound::Bad, Bound::Bad, stop, i),
    };
    let (Bound::Number(min), max @ (Bound::Number(_) | Bound::Missing)) = (min, max) else {
        return match (basic, stop) {
            (false, _) => Ok(None),
            (true, Stop::End) => Err(UNMATCHED_BRACE),
            (true, _) => Err(BAD_INTERVAL),
        };
    };
    let max = match max {
        Bound::Number(n) => Some(n),
        _ => None,
    };
    if stop != Stop::Close || max.is_some_and(|max| min > max) {
        return Err(BAD_INTERVAL);
    }
    if max.unwrap_or(min) > DUP_MAX {
        return Err(TOO_BIG);
    }
    Ok(Some(Interval { min, max, end }))
}

/// `c` as a literal in the extended syntax.
fn push_literal(out: &mut String, c: char) {
    out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
}

/// The single characters of a bracket expression, for GNU's check that it
/// is no class written without the outer brackets (`[:alpha:]`).
#[derive(Default)]
struct Members {
    plain: Vec<char>,
    /// A class, collating element, range or nested class: no mistake.
    other: bool,
}

impl Members {
    /// GNU grep's rule: only single characters, the first and the last a
    /// colon, and not all colons.
    fn check(&self) -> Result<(), &'static str> {
        let p = &self.plain;
        let bare = !self.other
            && p.first() == Some(&':')
            && p.last() == Some(&':')
            && p.iter().any(|&c| c != ':');
        if bare {
            Err(BARE_CLASS)
        } else {
            Ok(())
        }
    }
}

/// Copies the BRE bracket expression starting at `b[i] == '['`, returning
/// the index after it: POSIX rules (a `]` first is a member, a backslash
/// is itself), written for the regex crate (whose classes give `\`, `[`,
/// `&`, `~` and `-` more meanings).
fn bracket(b: &[char], mut i: usize, out: &mut String) -> Result<usize, &'static str> {
    i = open_bracket(b, i, out);
    let mut members = Members::default();
    let mut first = true;
    loop {
        let Some(&c) = b.get(i) else {
            return Err(UNMATCHED_BRACKET);
        };
        let at_first = std::mem::replace(&mut first, false);
        match c {
            ']' if !at_first => {
                members.check()?;
                out.push(']');
                return Ok(i + 1);
            }
            '[' if matches!(b.get(i + 1), Some(':' | '.' | '=')) => {
                i = class_item(b, i, out)?;
                members.other = true;
                continue;
            }
            '-' if !at_first && b.get(i + 1) != Some(&']') => {
                out.push('-');
                members.other = true;
            }
            _ => {
                push_class_literal(out, c);
                members.plain.push(c);
            }
        }
        i += 1;
    }
}

/// Copies the ERE bracket expression starting at `b[i] == '['` in the
/// regex crate's syntax (escapes, nested classes, set operations), with
/// GNU's checks and its `[.c.]` and `[=c=]`, returning the index after it.
/// `top`: not nested in another (where GNU's `[:alpha:]` check applies).
fn nested_bracket(
    b: &[char],
    mut i: usize,
    out: &mut String,
    top: bool,
) -> Result<usize, &'static str> {
    i = open_bracket(b, i, out);
    let mut members = Members::default();
    let mut first = true;
    loop {
        let Some(&c) = b.get(i) else {
            return Err(UNMATCHED_BRACKET);
        };
        let at_first = std::mem::replace(&mut first, false);
        match c {
            ']' if !at_first => {
                if top {
                    members.check()?;
                }
                out.push(']');
                return Ok(i + 1);
            }
            '[' if matches!(b.get(i + 1), Some(':' | '.' | '=')) => {
                i = class_item(b, i, out)?;
                members.other = true;
                continue;
            }
            '[' => {
                i = nested_bracket(b, i, out, false)?;
                members.other = true;
                continue;
            }
            '\\' => {
                i = escape(b, i, out)?;
                members.other = true;
                continue;
            }
            '-' if !at_first && b.get(i + 1) != Some(&']') => {
                out.push('-');
                members.other = true;
            }
            _ => {
                out.push(c);
                members.plain.push(c);
            }
        }
        i += 1;
    }
}

/// Copies a bracket expression's `[` and `^` (at `b[i]`), returning the
/// index of its first member.
fn open_bracket(b: &[char], mut i: usize, out: &mut String) -> usize {
    out.push('[');
    i += 1;
    if b.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    i
}

/// A `[:class:]`, `[.c.]` or `[=c=]` inside a bracket expression (at
/// `b[i] == '['`), checked as glibc does and written for the regex crate;
/// returns the index after it.
fn class_item(b: &[char], i: usize, out: &mut String) -> Result<usize, &'static str> {
    let kind = b[i + 1];
    let close = (i + 2..b.len().saturating_sub(1))
        .find(|&k| b[k] == kind && b[k + 1] == ']')
        .ok_or(UNMATCHED_BRACKET)?;
    let name = &b[i + 2..close];
    if kind == ':' {
        let name: String = name.iter().collect();
        if !CLASSES.contains(&name.as_str()) {
            return Err(BAD_CLASS);
        }
        out.push_str(&format!("[:{name}:]"));
    } else {
        // The C locale's collating elements and equivalence classes are
        // its single characters.
        let &[c] = name else {
            return Err(BAD_COLLATION);
        };
        push_class_literal(out, c);
    }
    Ok(close + 2)
}

/// `c` as a member of a regex crate class.
fn push_class_literal(out: &mut String, c: char) {
    if matches!(c, '\\' | '[' | ']' | '&' | '~' | '-' | '^') {
        out.push('\\');
    }
    out.push(c);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only the first `^` anchors; after it `*`, `\{` and `^` are
    /// literals, as where nothing precedes (issue 40, defect 8).
    #[test]
    fn basic_anchors_and_leading_operators() {
        let ok = |p: &str| basic_to_extended(p).unwrap();
        assert_eq!(ok("^^ab"), r"^\^ab");
        assert_eq!(ok("^*a"), r"^\*a");
        assert_eq!(ok("a^b"), r"a\^b");
        assert_eq!(ok(r"\(^a\)\|^b"), "(^a)|^b");
        assert_eq!(ok("$$"), r"\$$");
        assert_eq!(ok(r"a$\)"), "a$)");
        assert_eq!(ok(r"\{1\}"), r"\{1\}");
        assert_eq!(ok(r"^\{1\}"), r"^\{1\}");
        assert_eq!(ok(r"x\|\{"), r"x|\{");
        assert_eq!(ok(r"\(\+x\)"), r"(\+x)");
        assert_eq!(ok(r"\?x"), r"\?x");
        assert_eq!(ok(r"a\}"), r"a\}");
    }

    /// `\{,n\}` is `{0,n}`; glibc's errors for the rest.
    #[test]
    fn basic_intervals() {
        let ok = |p: &str| basic_to_extended(p).unwrap();
        assert_eq!(ok(r"x\{,3\}"), "x{0,3}");
        assert_eq!(ok(r"x\{,\}"), "x{0,}");
        assert_eq!(ok(r"x\{2\}"), "x{2}");
        assert_eq!(ok(r"x\{01,\}"), "x{1,}");
        assert_eq!(ok(r"\(ab\)\{2,5\}"), "(ab){2,5}");
        assert_eq!(ok(r"x\{,3\}\{2\}"), "x{0,3}{2}");
        assert_eq!(ok(r"x\{32767\}"), "x{32767}");
        for (p, e) in [
            (r"a\{1", UNMATCHED_BRACE),
            (r"a\{1\", UNMATCHED_BRACE),
            (r"a\{1a", UNMATCHED_BRACE),
            (r"a\{1a\}", BAD_INTERVAL),
            (r"a\{\}", BAD_INTERVAL),
            (r"a\{ 1\}", BAD_INTERVAL),
            (r"a\{1,2,3\}", BAD_INTERVAL),
            (r"x\{2,1\}", BAD_INTERVAL),
            (r"x\{32768\}", TOO_BIG),
            (r"x\{0,99999999999\}", TOO_BIG),
            ("a\\", TRAILING_BACKSLASH),
        ] {
            assert_eq!(basic_to_extended(p), Err(e), "{p}");
        }
    }

    /// An ERE's `{` is an interval only where glibc reads one; with
    /// nothing before it an operator repeats nothing.
    #[test]
    fn extended_intervals_and_leading_operators() {
        let ok = |p: &str| gnu_extended(p).unwrap();
        assert_eq!(ok("x{,3}"), "x{0,3}");
        assert_eq!(ok("a{,}"), "a{0,}");
        assert_eq!(ok("[ab]{3}"), "[ab]{3}");
        assert_eq!(ok("a{1,}b{2,4}"), "a{1,}b{2,4}");
        assert_eq!(ok("{"), r"\{");
        assert_eq!(ok("{1"), r"\{1");
        assert_eq!(ok("a{1"), r"a\{1");
        assert_eq!(ok("a{1a}"), r"a\{1a}");
        assert_eq!(ok("a{ 1}"), r"a\{ 1}");
        assert_eq!(ok("x{1,2"), r"x\{1,2");
        assert_eq!(ok("a|{"), r"a|\{");
        assert_eq!(ok("{1}a"), "a");
        assert_eq!(ok("x|{1}"), "x|");
        assert_eq!(ok("({2,1})"), r"(\{2,1})");
        assert_eq!(ok("^{0}ab"), "^{0}ab");
        assert_eq!(ok("^{2,1}"), r"^\{2,1}");
        assert_eq!(ok("*a|(+b)"), "a|(b)");
        assert_eq!(ok("^*a"), "^*a");
        assert_eq!(ok("(?i)a+"), "(?i)a+");
        assert_eq!(ok(r"\x{41}{2}\p{L}{,2}"), r"\x{41}{2}\p{L}{0,2}");
        for (p, e) in [
            ("x{2,1}", BAD_INTERVAL),
            ("a{}", BAD_INTERVAL),
            ("a{1,2,3}", BAD_INTERVAL),
            ("x{65536}", TOO_BIG),
            ("x{,32768}", TOO_BIG),
            ("a\\", TRAILING_BACKSLASH),
        ] {
            assert_eq!(gnu_extended(p), Err(e), "{p}");
        }
    }

    /// Class names, collating elements and equivalence classes as glibc
    /// checks them, in both dialects.
    #[test]
    fn bracket_checks() {
        for gnu in [basic_to_extended, gnu_extended] {
            assert_eq!(gnu("[[:alpha:][:digit:]_]").unwrap(), "[[:alpha:][:digit:]_]");
            assert_eq!(gnu("[[=a=]]").unwrap(), "[a]");
            assert_eq!(gnu("[[.a.]b]").unwrap(), "[ab]");
            assert_eq!(gnu("[[.^.]]").unwrap(), r"[\^]");
            assert_eq!(gnu("[[.].]]").unwrap(), r"[\]]");
            assert_eq!(gnu("[[.-.]a]").unwrap(), r"[\-a]");
            assert_eq!(gnu("[a-[.z.]]").unwrap(), "[a-z]");
            assert_eq!(gnu("[:a]").unwrap(), "[:a]");
            assert_eq!(gnu("[::]").unwrap(), "[::]");
            assert_eq!(gnu("[:a-b:]").unwrap(), "[:a-b:]");
            assert_eq!(gnu("[:[:alpha:]:]").unwrap(), "[:[:alpha:]:]");
            for (p, e) in [
                ("[[:digt:]]", BAD_CLASS),
                ("[[:ALPHA:]]", BAD_CLASS),
                ("[[:^alpha:]]", BAD_CLASS),
                ("[[:word:]]", BAD_CLASS),
                ("[[::]]", BAD_CLASS),
                ("[[:alpha:][:digt:]]", BAD_CLASS),
                ("[[.space.]]", BAD_COLLATION),
                ("[[.ab.]]", BAD_COLLATION),
                ("[[=ab=]]", BAD_COLLATION),
                ("[[..]]", BAD_COLLATION),
                ("[[==]]", BAD_COLLATION),
                ("[[:alpha]]", UNMATCHED_BRACKET),
                ("[[:alpha:]", UNMATCHED_BRACKET),
                ("[[:]]", UNMATCHED_BRACKET),
                ("[a", UNMATCHED_BRACKET),
                ("[:alpha:]", BARE_CLASS),
                ("[^:alpha:]", BARE_CLASS),
                ("[:a:b:]", BARE_CLASS),
                ("[:space:]]", BARE_CLASS),
            ] {
                assert_eq!(gnu(p), Err(e), "{p}");
            }
        }
        // A leading `]` is a member, not the colon check's first one.
        assert_eq!(basic_to_extended("[]:alpha:]").unwrap(), r"[\]:alpha:]");
        assert_eq!(gnu_extended("[]:alpha:]").unwrap(), "[]:alpha:]");
    }
}

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

/// A POSIX basic regex (GNU grep's `-G` dialect, its default) as the
/// extended syntax the search compiles: `\(`, `\)`, `\{`, `\}`, `\|`, `\+`
/// and `\?` are the operators and their bare forms literals; `*` at the
/// start of an expression, `^` not at its start and `$` not at its end are
/// literals; `\<` and `\>` are word starts and ends; inside a bracket
/// expression a backslash is itself. Back-references (`\1`) have no
/// equivalent here and are refused.
pub(crate) fn basic_to_extended(p: &str) -> Result<String, String> {
    let b: Vec<char> = p.chars().collect();
    let mut out = String::with_capacity(p.len() + 8);
    let mut i = 0;
    // At the start of an expression (where `*` is literal and `^` an anchor).
    let mut start = true;
    while i < b.len() {
        let c = b[i];
        let was_start = start;
        start = false;
        match c {
            '\\' => {
                let Some(&n) = b.get(i + 1) else {
                    return Err("trailing backslash".into());
                };
                i += 2;
                match n {
                    '(' => {
                        out.push('(');
                        start = true;
                    }
                    '|' => {
                        out.push('|');
                        start = true;
                    }
                    ')' | '{' | '}' | '+' | '?' => out.push(n),
                    '<' => out.push_str(r"\b{start}"),
                    '>' => out.push_str(r"\b{end}"),
                    '`' => out.push_str(r"\A"),
                    '\'' => out.push_str(r"\z"),
                    '1'..='9' => return Err("back-references are not supported".into()),
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
            '*' if was_start => out.push_str(r"\*"),
            '^' if was_start => {
                out.push('^');
                start = true; // `^*` is a literal star
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

/// `c` as a literal in the extended syntax.
fn push_literal(out: &mut String, c: char) {
    out.push_str(&regex::escape(c.encode_utf8(&mut [0; 4])));
}

/// Copies the bracket expression starting at `b[i] == '['`, returning the
/// index after it: POSIX rules (a `]` first is a member, a backslash is
/// itself, `[:class:]` kept), written for the regex crate (whose classes
/// give `\`, `[`, `&`, `~` and `-` more meanings).
fn bracket(b: &[char], mut i: usize, out: &mut String) -> Result<usize, String> {
    out.push('[');
    i += 1;
    if b.get(i) == Some(&'^') {
        out.push('^');
        i += 1;
    }
    let mut first = true;
    loop {
        let Some(&c) = b.get(i) else {
            return Err("unmatched [".into());
        };
        match c {
            ']' if !first => {
                out.push(']');
                return Ok(i + 1);
            }
            '[' if matches!(b.get(i + 1), Some(':' | '.' | '=')) => {
                let kind = b[i + 1];
                let close = (i + 2..b.len().saturating_sub(1))
                    .find(|&k| b[k] == kind && b[k + 1] == ']')
                    .ok_or("unmatched [")?;
                let name: String = b[i + 2..close].iter().collect();
                if kind == ':' {
                    out.push_str(&format!("[:{name}:]"));
                } else {
                    // A collating element or equivalence class of one
                    // character (the C locale has no others).
                    for ch in name.chars() {
                        push_class_literal(out, ch);
                    }
                }
                i = close + 2;
                first = false;
                continue;
            }
            '-' if !first && b.get(i + 1) != Some(&']') => out.push('-'),
            _ => push_class_literal(out, c),
        }
        first = false;
        i += 1;
    }
}

fn push_class_literal(out: &mut String, c: char) {
    if matches!(c, '\\' | '[' | ']' | '&' | '~' | '-' | '^') {
        out.push('\\');
    }
    out.push(c);
}

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

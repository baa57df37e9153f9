//! `GREP_COLORS` (and the deprecated `GREP_COLOR`), read as GNU grep 3.8
//! reads them: the SGR parameters of each part of the output.

/// The SGR parameters (`01;31`) of each part of colored output; an empty
/// one leaves that part uncolored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Colors {
    /// `ms`: matches in selected lines.
    pub selected_match: Vec<u8>,
    /// `mc`: matches in context lines.
    pub context_match: Vec<u8>,
    /// `sl`: the rest of selected lines (context lines' with `rv` and `-v`).
    pub selected_line: Vec<u8>,
    /// `cx`: the rest of context lines (selected lines' with `rv` and `-v`).
    pub context_line: Vec<u8>,
    /// `fn`: file names.
    pub file_name: Vec<u8>,
    /// `ln`: line numbers.
    pub line_number: Vec<u8>,
    /// `bn`: byte offsets.
    pub byte_offset: Vec<u8>,
    /// `se`: separators (`:`, `-`, `--`).
    pub separator: Vec<u8>,
    /// Not `ne`: each start and end is followed by "erase to end of line"
    /// (`\x1b[K`), so a colored background does not run to the margin.
    pub erase_line: bool,
}

impl Default for Colors {
    /// GNU grep's: `ms=01;31:mc=01;31:sl=:cx=:fn=35:ln=32:bn=32:se=36`.
    fn default() -> Self {
        Colors {
            selected_match: b"01;31".to_vec(),
            context_match: b"01;31".to_vec(),
            selected_line: Vec::new(),
            context_line: Vec::new(),
            file_name: b"35".to_vec(),
            line_number: b"32".to_vec(),
            byte_offset: b"32".to_vec(),
            separator: b"36".to_vec(),
            erase_line: true,
        }
    }
}

impl Colors {
    /// The colors the environment asks for: `grep_colors` is
    /// `GREP_COLORS`, `grep_color` the deprecated `GREP_COLOR` (used for
    /// matches when it is all digits and `;`, and `GREP_COLORS` does not
    /// set them); `invert` is `-v` (with `rv`, `sl` and `cx` swap). Also
    /// returns GNU grep's warning when `GREP_COLOR` took effect.
    pub fn from_env(
        grep_colors: Option<&[u8]>,
        grep_color: Option<&[u8]>,
        invert: bool,
    ) -> (Colors, Option<String>) {
        let mut c = Colors::default();
        let legacy = grep_color
            .filter(|v| !v.is_empty() && v.iter().all(|&b| b == b';' || b.is_ascii_digit()));
        if let Some(v) = legacy {
            c.selected_match = v.to_vec();
            c.context_match = v.to_vec();
        }
        let mut reverse = false;
        if let Some(spec) = grep_colors {
            c.parse(spec, &mut reverse);
        }
        let warning = legacy.filter(|v| c.selected_match == *v || c.context_match == *v).map(|v| {
            let v = String::from_utf8_lossy(v);
            format!("warning: GREP_COLOR='{v}' is deprecated; use GREP_COLORS='mt={v}'")
        });
        if reverse && invert {
            std::mem::swap(&mut c.selected_line, &mut c.context_line);
        }
        (c, warning)
    }

    /// GNU grep's `parse_grep_colors`: `name=value` or `name` entries
    /// separated by `:`; unknown names are skipped, and the first
    /// malformed byte (a value byte other than digits and `;`, a second
    /// `=`) ends the parse, keeping what came before.
    fn parse(&mut self, spec: &[u8], reverse: &mut bool) {
        for entry in spec.split(|&b| b == b':') {
            let (name, value) = match entry.iter().position(|&b| b == b'=') {
                Some(0) => return,
                Some(i) => (&entry[..i], Some(&entry[i + 1..])),
                None => (entry, None),
            };
            if value.is_some_and(|v| !v.iter().all(|&b| b == b';' || b.is_ascii_digit())) {
                return; // GNU stops at the bad byte; the entry is not applied
            }
            let set = |field: &mut Vec<u8>| {
                if let Some(v) = value {
                    *field = v.to_vec();
                }
            };
            match name {
                b"mt" => {
                    set(&mut self.selected_match);
                    self.context_match = self.selected_match.clone();
                }
                b"ms" => set(&mut self.selected_match),
                b"mc" => set(&mut self.context_match),
                b"sl" => set(&mut self.selected_line),
                b"cx" => set(&mut self.context_line),
                b"fn" => set(&mut self.file_name),
                b"ln" => set(&mut self.line_number),
                b"bn" => set(&mut self.byte_offset),
                b"se" => set(&mut self.separator),
                b"rv" => *reverse = true,
                b"ne" => self.erase_line = false,
                _ => {} // for forward compatibility, as GNU grep
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Colors;

    fn env(colors: &str, color: &str, invert: bool) -> (Colors, Option<String>) {
        let opt = |s: &str| (!s.is_empty()).then(|| s.as_bytes().to_vec());
        Colors::from_env(opt(colors).as_deref(), opt(color).as_deref(), invert)
    }

    #[test]
    fn capabilities_set_their_parts() {
        let (c, w) = env("mt=01;32:fn=34:ln=:se=1;33:ne", "", false);
        assert_eq!(
            (c.selected_match.as_slice(), c.context_match.as_slice()),
            (&b"01;32"[..], &b"01;32"[..])
        );
        assert_eq!((c.file_name.as_slice(), c.line_number.as_slice()), (&b"34"[..], &b""[..]));
        assert_eq!(c.separator, b"1;33");
        assert!(!c.erase_line && w.is_none());
        assert_eq!(c.byte_offset, b"32", "untouched parts keep GNU's defaults");
    }

    #[test]
    fn a_malformed_entry_ends_the_parse_keeping_what_came_before() {
        let (c, _) = env("fn=34:ln=3x:se=1", "", false);
        assert_eq!((c.file_name.as_slice(), c.line_number.as_slice()), (&b"34"[..], &b"32"[..]));
        assert_eq!(c.separator, b"36");
        let (c, _) = env("=1:fn=34", "", false);
        assert_eq!(c.file_name, b"35");
        let (c, _) = env("zz=5:fn=34", "", false);
        assert_eq!(c.file_name, b"34", "unknown names are skipped");
    }

    #[test]
    fn grep_color_is_used_for_matches_with_a_warning_unless_overridden() {
        let (c, w) = env("", "1;32", false);
        assert_eq!(c.selected_match, b"1;32");
        assert_eq!(
            w.as_deref(),
            Some("warning: GREP_COLOR='1;32' is deprecated; use GREP_COLORS='mt=1;32'")
        );
        let (c, w) = env("mt=35", "1;32", false);
        assert_eq!((c.selected_match.as_slice(), w), (&b"35"[..], None));
        let (c, w) = env("", "red", false);
        assert_eq!((c.selected_match.as_slice(), w), (&b"01;31"[..], None));
    }

    #[test]
    fn rv_swaps_line_colors_only_with_invert() {
        let (c, _) = env("sl=1:cx=2:rv", "", true);
        assert_eq!((c.selected_line.as_slice(), c.context_line.as_slice()), (&b"2"[..], &b"1"[..]));
        let (c, _) = env("sl=1:cx=2:rv", "", false);
        assert_eq!((c.selected_line.as_slice(), c.context_line.as_slice()), (&b"1"[..], &b"2"[..]));
    }
}

//! Printers: sinks that write GNU grep's text output or JSON lines.

use std::io::Write;
use std::ops::ControlFlow;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use super::colors::Colors;

use super::sink::{FileInfo, Forked, Formatted, Needs, Sink, SinkLine};
use crate::scan::source::label;
use crate::{Error, Result};

/// What a printer reports per file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Report {
    /// The selected lines (or matches, with `only_matching`).
    #[default]
    Lines,
    /// `-c`: the number of selected lines.
    Count,
    /// `-l`: the name of a file with a selected line.
    FilesWithMatches,
    /// `-L`: the name of a file without one.
    FilesWithoutMatch,
    /// `-q`: nothing.
    Quiet,
}

crate::options! {
    /// How [`GnuPrinter`] shows what the search found (GNU grep's output
    /// options).
    #[derive(Clone, Debug)]
    pub struct PrintOptions {
        /// Lines, counts, file names or nothing.
        pub report: Report,
        /// `-H` / `-h`: prefix output with the file name.
        pub with_filename: bool,
        /// `-n`: prefix lines with their 1-based number.
        pub line_numbers: bool,
        /// `-b`: prefix lines with the byte offset of the line (of the match,
        /// with `only_matching`).
        pub byte_offset: bool,
        /// `-o`: print each non-empty match of a selected line instead of the
        /// line (nothing for `-v`).
        pub only_matching: bool,
        /// `-B`: context lines before each selected line (`Some(0)` still
        /// separates groups, as in GNU grep).
        pub before: Option<usize>,
        /// `-A`: context lines after each selected line.
        pub after: Option<usize>,
        /// Printed between context groups (`--`; `None`:
        /// `--no-group-separator`).
        pub group_separator: Option<Vec<u8>>,
        /// Color the output (SGR escapes, as GNU grep's `--color=always`).
        pub color: bool,
        /// The colors, when `color` (`GREP_COLORS`; GNU grep's defaults).
        pub colors: Box<Colors>,
        /// `-T`: a tab after the prefix (and offsets and line numbers
        /// padded, as GNU grep aligns them).
        pub initial_tab: bool,
        /// `-Z`: a NUL byte after file names instead of `:` (or a newline
        /// with `-l`/`-L`).
        pub null_after_name: bool,
        /// `-z`: output lines end in NUL, as the input's do.
        pub null_data: bool,
        /// `--label`: the name shown for standard input (`-`).
        pub label: Option<Vec<u8>>,
        /// `--line-buffered`: each line is written out at once.
        pub line_buffered: bool,
    }
}

impl Default for PrintOptions {
    fn default() -> Self {
        PrintOptions {
            report: Report::Lines,
            with_filename: false,
            line_numbers: false,
            byte_offset: false,
            only_matching: false,
            before: None,
            after: None,
            group_separator: Some(b"--".to_vec()),
            color: false,
            colors: Box::default(),
            initial_tab: false,
            null_after_name: false,
            null_data: false,
            label: None,
            line_buffered: false,
        }
    }
}

impl PrintOptions {
    fn needs(&self) -> Needs {
        let lines = self.report == Report::Lines;
        Needs {
            lines,
            line_numbers: lines && self.line_numbers,
            spans: lines && (self.only_matching || self.color),
            before: self.before.filter(|_| lines),
            after: self.after.filter(|_| lines),
            first_only: matches!(
                self.report,
                Report::FilesWithMatches | Report::FilesWithoutMatch | Report::Quiet
            ),
        }
    }
}

/// Which of [`Colors`]' parts a piece of output is colored as.
#[derive(Clone, Copy)]
enum Part {
    SelectedMatch,
    ContextMatch,
    SelectedLine,
    ContextLine,
    FileName,
    LineNumber,
    ByteOffset,
    Separator,
}

/// Most buffers kept for forks (at most a batch of ranges' are kept
/// anyway: forks take theirs before the previous batch is joined).
const SPARE_MAX: usize = 64;

/// GNU grep's text output, byte for byte, as a [`Sink`].
pub struct GnuPrinter<W: Write> {
    out: W,
    opts: PrintOptions,
    needs: Needs,
    buf: Vec<u8>,
    /// The name printed for the current file.
    name: Vec<u8>,
    binary: bool,
    binary_matched: bool,
    /// `-T`: the width line numbers and offsets are padded to (GNU grep's
    /// `offset_width`, from the file's size).
    width: usize,
    /// A group was printed (in any file): the next one is separated.
    printed_group: bool,
    /// No line of the current file printed yet.
    file_start: bool,
    /// `buf` is written out once this long (never, in a fork: its
    /// buffer is the range's output).
    flush_at: usize,
    /// Buffers of joined forks, for the next forks (fresh memory costs
    /// page faults and cache misses).
    spare: Vec<Vec<u8>>,
}

impl<W: Write> GnuPrinter<W> {
    /// A printer writing to `out`.
    pub fn new(out: W, opts: PrintOptions) -> Self {
        GnuPrinter {
            out,
            needs: opts.needs(),
            buf: Vec::new(),
            name: Vec::new(),
            binary: false,
            binary_matched: false,
            width: 0,
            printed_group: false,
            file_start: true,
            flush_at: if opts.line_buffered { 0 } else { 64 << 10 },
            spare: Vec::new(),
            opts,
        }
    }

    /// The last file searched was binary and had a selected line: its
    /// lines were not printed (front ends say so, as GNU grep does on
    /// standard error).
    pub fn binary_matched(&self) -> bool {
        self.binary_matched
    }

    /// The writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The name printed for the last file begun (as bytes: a file name
    /// need not be UTF-8; `(standard input)` or `--label` for `-`).
    pub fn name(&self) -> &[u8] {
        &self.name
    }

    /// Turns the file-name prefix on or off for the next files (`grep -r`
    /// prefixes files found in directories only).
    pub fn set_with_filename(&mut self, on: bool) {
        self.opts.with_filename = on;
    }

    /// Writes what `file` printed for the one file it just searched (a
    /// printer with the same options, on a walking thread), whole, as if
    /// this printer had searched that file: a group separator first when
    /// context groups were printed before. `file` is left ready for its
    /// next file; [`GnuPrinter::binary_matched`] then tells about this one.
    pub fn join_file(&mut self, file: &mut GnuPrinter<Vec<u8>>) -> Result<()> {
        file.flush_buf()?;
        let bytes = std::mem::take(&mut file.out);
        let context = self.opts.before.is_some() || self.opts.after.is_some();
        // As `group_start` would have: before the file's first group, even
        // when it printed nothing (`-o` with empty matches prints only `--`).
        if !file.file_start && self.printed_group && context {
            self.separator();
        }
        self.printed_group |= file.printed_group;
        self.binary_matched = file.binary_matched;
        file.printed_group = false;
        file.binary_matched = false;
        write_part(&mut self.out, &mut self.buf, &mut self.spare, bytes)?;
        if !self.buf.is_empty() {
            self.flush_buf()?; // a separator alone: nothing comes after it to carry it out
        }
        if let Some(spare) = self.spare.pop() {
            file.out = spare; // its memory again, for the next file
        }
        Ok(())
    }

    /// The SGR parameters of `part` (empty: not colored, or no color).
    fn sgr(&self, part: Part) -> &[u8] {
        if !self.opts.color {
            return &[];
        }
        let c = &self.opts.colors;
        match part {
            Part::SelectedMatch => &c.selected_match,
            Part::ContextMatch => &c.context_match,
            Part::SelectedLine => &c.selected_line,
            Part::ContextLine => &c.context_line,
            Part::FileName => &c.file_name,
            Part::LineNumber => &c.line_number,
            Part::ByteOffset => &c.byte_offset,
            Part::Separator => &c.separator,
        }
    }

    /// GNU grep's `pr_sgr_start`: `ESC[<sgr>m ESC[K`, nothing for an empty one.
    fn sgr_start(&mut self, part: Part) {
        let erase = self.opts.colors.erase_line;
        let sgr = self.sgr(part);
        if !sgr.is_empty() {
            let mut esc = Vec::with_capacity(sgr.len() + 6);
            esc.extend_from_slice(b"\x1b[");
            esc.extend_from_slice(sgr);
            esc.push(b'm');
            if erase {
                esc.extend_from_slice(b"\x1b[K");
            }
            self.buf.extend_from_slice(&esc);
        }
    }

    /// GNU grep's `pr_sgr_end`: `ESC[m ESC[K` after a colored part.
    fn sgr_end(&mut self, part: Part) {
        if !self.sgr(part).is_empty() {
            self.buf.extend_from_slice(b"\x1b[m");
            if self.opts.colors.erase_line {
                self.buf.extend_from_slice(b"\x1b[K");
            }
        }
    }

    fn color(&mut self, part: Part, text: &[u8]) {
        self.sgr_start(part);
        self.buf.extend_from_slice(text);
        self.sgr_end(part);
    }

    fn sep(&mut self, sep: u8) {
        self.color(Part::Separator, &[sep]);
    }

    /// `[name sep][line sep][offset sep][tab]` (`len`: of what follows;
    /// GNU grep writes `-T`'s tab only before something).
    fn prefix(&mut self, line: u64, offset: u64, sep: u8, len: usize) {
        if self.opts.with_filename {
            self.file_name();
            if self.opts.null_after_name {
                self.buf.push(0);
            } else {
                self.sep(sep);
            }
        }
        if self.opts.line_numbers {
            self.number(line, Part::LineNumber);
            self.sep(sep);
        }
        if self.opts.byte_offset {
            self.number(offset, Part::ByteOffset);
            self.sep(sep);
        }
        if self.opts.initial_tab
            && (self.opts.with_filename || self.opts.line_numbers || self.opts.byte_offset)
            && len != 0
        {
            self.buf.push(b'\t');
        }
    }

    fn file_name(&mut self) {
        let name = std::mem::take(&mut self.name);
        self.color(Part::FileName, &name);
        self.name = name;
    }

    /// A line number or offset, padded with `-T`.
    fn number(&mut self, n: u64, part: Part) {
        let d = decimal(n);
        let pad = self.width.saturating_sub(d.as_bytes().len());
        let mut text = Vec::with_capacity(pad + 20);
        text.resize(pad, b' ');
        text.extend_from_slice(d.as_bytes());
        self.color(part, &text);
    }

    /// The end of an output line (NUL with `-z`).
    fn eol(&self) -> u8 {
        if self.opts.null_data {
            0
        } else {
            b'\n'
        }
    }

    /// A separator before the first line of a file when an earlier file
    /// printed a group (GNU grep separates groups across files too).
    fn group_start(&mut self) {
        if self.file_start {
            self.file_start = false;
            if self.printed_group && (self.opts.before.is_some() || self.opts.after.is_some()) {
                self.separator();
            }
            self.printed_group = true;
        }
    }

    fn separator(&mut self) {
        if let Some(sep) = self.opts.group_separator.clone() {
            self.color(Part::Separator, &sep);
            self.buf.push(b'\n');
        }
    }

    /// The line, or with `-o` its non-empty matches (which only context
    /// lines have under `-v`, and GNU grep prints them).
    fn report_line(&mut self, l: &SinkLine<'_>, sep: u8) {
        // GNU grep's print_line: `:` marks a selected line, `-` context.
        let selected = sep == b':';
        let match_part = if selected { Part::SelectedMatch } else { Part::ContextMatch };
        if !self.opts.only_matching {
            return self.line(l, sep, selected, match_part);
        }
        let eol = self.eol();
        for &(s, e) in l.spans.iter().filter(|(s, e)| e > s) {
            self.prefix(l.line, l.offset + s as u64, sep, e - s);
            self.color(match_part, &l.bytes[s..e]);
            self.buf.push(eol);
        }
    }

    /// A whole line, as GNU grep colors it: each non-empty match in its
    /// color, each stretch before one started in the line's (`sl`/`cx`,
    /// ended by the match's end), the rest in the line's color but for a
    /// final `\r`.
    fn line(&mut self, l: &SinkLine<'_>, sep: u8, selected: bool, match_part: Part) {
        self.prefix(l.line, l.offset, sep, l.bytes.len());
        let line_part = if selected { Part::SelectedLine } else { Part::ContextLine };
        let mut at = 0;
        if !self.sgr(match_part).is_empty() {
            for &(s, e) in l.spans.iter().filter(|(s, e)| e > s) {
                self.sgr_start(line_part);
                self.buf.extend_from_slice(&l.bytes[at..s]);
                self.color(match_part, &l.bytes[s..e]);
                at = e;
            }
        }
        if !self.sgr(line_part).is_empty() {
            let rest = &l.bytes[at..];
            let tail = rest.len() - usize::from(rest.last() == Some(&b'\r'));
            if tail > 0 {
                self.color(line_part, &rest[..tail]);
                at += tail;
            }
        }
        self.buf.extend_from_slice(&l.bytes[at..]);
        self.buf.push(self.eol());
    }

    fn flush_buf(&mut self) -> Result<()> {
        if !self.buf.is_empty() {
            self.out.write_all(&self.buf).map_err(write_error)?;
            self.buf.clear();
        }
        Ok(())
    }
}

impl GnuPrinter<Vec<u8>> {
    /// Joining this printer would write and note nothing: the files it
    /// searched since it was last joined printed nothing (`grep -r`
    /// skips the join, and its lock, for them).
    pub fn is_empty(&self) -> bool {
        self.out.is_empty() && self.buf.is_empty() && !self.printed_group && !self.binary_matched
    }

    /// Bytes held since the last join.
    pub fn held(&self) -> usize {
        self.out.len() + self.buf.len()
    }

    /// Joining after more files writes what joining now would: no group
    /// separator to place between files (no context), no binary-file
    /// message to follow this file's lines, no line to write out at once.
    /// `grep -r -c` then takes its lock once per many files, not per file.
    pub fn can_hold(&self) -> bool {
        self.opts.before.is_none()
            && self.opts.after.is_none()
            && !self.binary_matched
            && !self.opts.line_buffered
    }
}

impl<W: Write> Sink for GnuPrinter<W> {
    fn needs(&self) -> Needs {
        self.needs
    }

    fn begin(&mut self, file: &FileInfo<'_>) -> Result<()> {
        // Into the same memory for every file (`grep -r` begins thousands).
        let name = match &self.opts.label {
            Some(l) if file.path.as_os_str() == "-" => l.as_slice(),
            _ => label(file.path).as_os_str().as_bytes(),
        };
        self.name.clear();
        self.name.extend_from_slice(name);
        if self.opts.initial_tab {
            // GNU grep: the digits of the size (plus one with -n), or of
            // the largest offset when the size is unknown.
            let n = file.size.map_or(i64::MAX as u64, |s| {
                s.saturating_add(u64::from(self.opts.line_numbers)).min(i64::MAX as u64)
            });
            self.width = decimal(n).as_bytes().len();
        }
        self.binary = false;
        self.binary_matched = false;
        self.file_start = true;
        Ok(())
    }

    fn binary(&mut self) -> Result<()> {
        self.binary = true;
        Ok(())
    }

    fn matched(&mut self, l: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        if self.binary {
            self.binary_matched = true;
            self.printed_group = true; // GNU grep counts its message as output
            self.flush_buf()?;
            return Ok(ControlFlow::Break(()));
        }
        self.group_start();
        self.report_line(l, b':');
        if self.buf.len() >= self.flush_at {
            self.flush_buf()?;
        }
        Ok(ControlFlow::Continue(()))
    }

    fn context(&mut self, l: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        self.group_start();
        self.report_line(l, b'-');
        if self.buf.len() >= self.flush_at {
            self.flush_buf()?;
        }
        Ok(ControlFlow::Continue(()))
    }

    fn context_break(&mut self) -> Result<()> {
        if !self.binary {
            self.separator();
        }
        Ok(())
    }

    fn finish(&mut self, selected: u64) -> Result<()> {
        match self.opts.report {
            Report::Lines | Report::Quiet => {}
            Report::Count => {
                if self.opts.with_filename {
                    self.file_name();
                    if self.opts.null_after_name {
                        self.buf.push(0);
                    } else {
                        self.sep(b':');
                    }
                }
                self.buf.extend_from_slice(decimal(selected).as_bytes());
                self.buf.push(b'\n');
            }
            Report::FilesWithMatches | Report::FilesWithoutMatch => {
                if (selected > 0) == (self.opts.report == Report::FilesWithMatches) {
                    self.file_name();
                    self.buf.push(if self.opts.null_after_name { 0 } else { b'\n' });
                }
            }
        }
        self.flush_buf()
    }

    /// Lines only, without context (groups need one thread) and in a file
    /// not already known to be binary.
    fn fork(&mut self) -> Option<Box<dyn Forked>> {
        if self.opts.report != Report::Lines
            || self.needs.before.is_some()
            || self.needs.after.is_some()
            || self.binary
        {
            return None;
        }
        Some(Box::new(GnuPrinter {
            out: Vec::new(),
            opts: self.opts.clone(),
            needs: self.needs,
            buf: self.spare.pop().unwrap_or_default(),
            name: self.name.clone(),
            binary: false,
            binary_matched: false,
            width: self.width,
            printed_group: false,
            file_start: false, // no group separators without context
            flush_at: usize::MAX,
            spare: Vec::new(),
        }))
    }

    /// The range's lines; a stopped fork met a selected line holding a NUL
    /// byte (as [`Sink::matched`] here would have).
    fn join(&mut self, part: Formatted) -> Result<ControlFlow<()>> {
        if !part.bytes.is_empty() {
            self.group_start();
        }
        write_part(&mut self.out, &mut self.buf, &mut self.spare, part.bytes)?;
        if part.stopped {
            self.binary_matched = true;
            self.printed_group = true;
            return Ok(ControlFlow::Break(()));
        }
        Ok(ControlFlow::Continue(()))
    }
}

impl Forked for GnuPrinter<Vec<u8>> {
    fn done(self: Box<Self>) -> Formatted {
        let GnuPrinter { out, buf, binary_matched, .. } = *self;
        Formatted { bytes: concat(out, buf), stopped: binary_matched }
    }
}

/// JSON lines: `{"path","line","offset","text"}` per selected line (per
/// non-empty match with `only_matching`; text as lossy UTF-8),
/// `{"path","count"}` per file for [`Report::Count`], `{"path"}` per
/// listed file for `-l`/`-L`. `path` is the path as given.
pub struct JsonPrinter<W: Write> {
    out: W,
    report: Report,
    only_matching: bool,
    path: String,
    buf: Vec<u8>,
    /// As [`GnuPrinter`]'s.
    flush_at: usize,
    spare: Vec<Vec<u8>>,
}

impl<W: Write> JsonPrinter<W> {
    /// A printer writing to `out`.
    pub fn new(out: W, report: Report, only_matching: bool) -> Self {
        JsonPrinter {
            out,
            report,
            only_matching,
            path: String::new(),
            buf: Vec::new(),
            flush_at: 64 << 10,
            spare: Vec::new(),
        }
    }

    /// The writer.
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// [`GnuPrinter::join_file`] for JSON lines.
    pub fn join_file(&mut self, file: &mut JsonPrinter<Vec<u8>>) -> Result<()> {
        file.flush_buf()?;
        let bytes = std::mem::take(&mut file.out);
        write_part(&mut self.out, &mut self.buf, &mut self.spare, bytes)?;
        if !self.buf.is_empty() {
            self.flush_buf()?; // a separator alone: nothing comes after it to carry it out
        }
        if let Some(spare) = self.spare.pop() {
            file.out = spare;
        }
        Ok(())
    }

    fn record(&mut self, line: u64, offset: u64, text: &[u8]) {
        self.buf.extend_from_slice(b"{\"path\":");
        json_string(&mut self.buf, &self.path);
        self.buf.extend_from_slice(
            format!(",\"line\":{line},\"offset\":{offset},\"text\":").as_bytes(),
        );
        json_string(&mut self.buf, &String::from_utf8_lossy(text));
        self.buf.extend_from_slice(b"}\n");
    }

    fn flush_buf(&mut self) -> Result<()> {
        self.out.write_all(&self.buf).map_err(write_error)?;
        self.buf.clear();
        Ok(())
    }
}

impl JsonPrinter<Vec<u8>> {
    /// As [`GnuPrinter::is_empty`].
    pub fn is_empty(&self) -> bool {
        self.out.is_empty() && self.buf.is_empty()
    }

    /// As [`GnuPrinter::held`].
    pub fn held(&self) -> usize {
        self.out.len() + self.buf.len()
    }
}

impl<W: Write> Sink for JsonPrinter<W> {
    fn needs(&self) -> Needs {
        let lines = self.report == Report::Lines;
        Needs {
            lines,
            line_numbers: lines,
            spans: lines && self.only_matching,
            first_only: matches!(
                self.report,
                Report::FilesWithMatches | Report::FilesWithoutMatch | Report::Quiet
            ),
            ..Needs::default()
        }
    }

    fn begin(&mut self, file: &FileInfo<'_>) -> Result<()> {
        self.path = file.path.to_string_lossy().into_owned();
        Ok(())
    }

    fn matched(&mut self, l: &SinkLine<'_>) -> Result<ControlFlow<()>> {
        if !self.only_matching {
            self.record(l.line, l.offset, l.bytes);
        } else {
            for &(s, e) in l.spans.iter().filter(|(s, e)| e > s) {
                self.record(l.line, l.offset + s as u64, &l.bytes[s..e]);
            }
        }
        if self.buf.len() >= self.flush_at {
            self.flush_buf()?;
        }
        Ok(ControlFlow::Continue(()))
    }

    fn fork(&mut self) -> Option<Box<dyn Forked>> {
        (self.report == Report::Lines).then(|| {
            let fork = JsonPrinter {
                out: Vec::new(),
                report: self.report,
                only_matching: self.only_matching,
                path: self.path.clone(),
                buf: self.spare.pop().unwrap_or_default(),
                flush_at: usize::MAX,
                spare: Vec::new(),
            };
            Box::new(fork) as Box<dyn Forked>
        })
    }

    fn join(&mut self, part: Formatted) -> Result<ControlFlow<()>> {
        write_part(&mut self.out, &mut self.buf, &mut self.spare, part.bytes)?;
        Ok(ControlFlow::Continue(()))
    }

    fn finish(&mut self, selected: u64) -> Result<()> {
        let listed = match self.report {
            Report::Count => {
                self.buf.extend_from_slice(b"{\"path\":");
                json_string(&mut self.buf, &self.path);
                self.buf.extend_from_slice(format!(",\"count\":{selected}}}\n").as_bytes());
                false
            }
            Report::FilesWithMatches => selected > 0,
            Report::FilesWithoutMatch => selected == 0,
            Report::Lines | Report::Quiet => false,
        };
        if listed {
            self.buf.extend_from_slice(b"{\"path\":");
            json_string(&mut self.buf, &self.path);
            self.buf.extend_from_slice(b"}\n");
        }
        self.flush_buf()
    }
}

impl Forked for JsonPrinter<Vec<u8>> {
    fn done(self: Box<Self>) -> Formatted {
        let JsonPrinter { out, buf, .. } = *self;
        Formatted { bytes: concat(out, buf), stopped: false }
    }
}

/// Writes a printer's buffered bytes, then a fork's, and keeps the fork's
/// buffer for a later fork.
fn write_part(
    out: &mut impl Write,
    buf: &mut Vec<u8>,
    spare: &mut Vec<Vec<u8>>,
    mut bytes: Vec<u8>,
) -> Result<()> {
    if !bytes.is_empty() {
        if !buf.is_empty() {
            out.write_all(buf).map_err(write_error)?;
            buf.clear();
        }
        out.write_all(&bytes).map_err(write_error)?;
    }
    if spare.len() < SPARE_MAX && bytes.capacity() > 0 {
        bytes.clear();
        spare.push(bytes);
    }
    Ok(())
}

/// A fork's output: what it wrote out, then what it still buffers.
fn concat(mut out: Vec<u8>, buf: Vec<u8>) -> Vec<u8> {
    if out.is_empty() {
        return buf;
    }
    out.extend_from_slice(&buf);
    out
}

/// A JSON string as serde_json writes it.
fn json_string(out: &mut Vec<u8>, s: &str) {
    out.push(b'"');
    for &b in s.as_bytes() {
        match b {
            b'"' => out.extend_from_slice(b"\\\""),
            b'\\' => out.extend_from_slice(b"\\\\"),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            0x08 => out.extend_from_slice(b"\\b"),
            0x0c => out.extend_from_slice(b"\\f"),
            b if b < 0x20 => out.extend_from_slice(format!("\\u{b:04x}").as_bytes()),
            b => out.push(b),
        }
    }
    out.push(b'"');
}

/// `n` in decimal, without allocating.
fn decimal(mut n: u64) -> Decimal {
    let mut d = Decimal([0; 20], 20);
    loop {
        d.1 -= 1;
        d.0[d.1] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return d;
        }
    }
}

struct Decimal([u8; 20], usize);

impl Decimal {
    fn as_bytes(&self) -> &[u8] {
        &self.0[self.1..]
    }
}

fn write_error(e: std::io::Error) -> Error {
    Error::io(Path::new("<output>"), "write", e)
}

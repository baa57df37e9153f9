//! `replace` and `keep_lines`: editing whole files, in place when the
//! sizes allow it, atomically otherwise.
//!
//! # Two ways to edit
//!
//! * **In place** (a literal pattern and a replacement of the same length):
//!   the file's ranges are scanned in parallel from their entry points
//!   (`Job::entries`, so matches are the whole file's leftmost
//!   non-overlapping ones) and each match is overwritten where it is. Only
//!   pages holding a match are written (and so dirtied): with `mmap` the
//!   file is mapped read-write and changed bytes are copied into the
//!   mapping; with `read`, windows are `pread` and the changed stretches
//!   `pwrite`n back. The inode, its hard links and its metadata stay; an
//!   interrupted run leaves some matches replaced and others not (use a
//!   backup when that matters). If another process truncates the file
//!   meanwhile, every thread stops at the first sign of it (a short read,
//!   `fstat` smaller than at the start, a faulting store) and nothing more
//!   is written, so the file keeps the truncating process's size: the size
//!   is checked right before each window's `pwrite`s, since a `pwrite` past
//!   the end would extend the file again. (A truncation landing between
//!   that check and the writes of the one window in flight can still be
//!   undone by those writes: there is no atomic check-and-write; through a
//!   mapping, stores past the end fault instead and cannot extend it.)
//! * **Rewrite** (different lengths, or regex mode): the new content is
//!   streamed into a temporary file next to the original
//!   (`.NAME.mmapkit-PID-N.tmp`, created with `O_EXCL`), which then gets the
//!   original's permission bits (and owner, when allowed), is `fsync`ed and
//!   renamed over the original; the directory is `fsync`ed last. A crash at
//!   any moment leaves either the old or the new file (plus, at worst, a
//!   stray temporary file), never a mix; on any error the temporary file
//!   is removed and the original is untouched. Like `sed -i`, this gives
//!   the file a new inode: other hard links keep the old content. Symbolic
//!   links are followed (the file they point to is replaced).
//!
//! A file we may not write (mode `0444`) but whose directory lets us create
//! files is rewritten, as `sed -i` does (even when an in-place edit was
//! possible): it keeps its mode, so it stays read-only. When neither the
//! file nor its directory is writable, the file's `Permission denied` is
//! the error.
//!
//! Nothing is written when nothing would change: a dry run, a pattern that
//! does not occur, or a literal replaced by itself, leaves the file (and its
//! mtime) untouched, and no temporary or backup file is even created.
//!
//! # Bounded memory
//!
//! Rewrites read the file in batches of byte ranges (three per thread, 8
//! MiB of input per batch, so ranges of at most a few MiB, smaller when the
//! replacement is longer than the pattern), build each range's output in
//! parallel and write the batch in file order on a writer thread while the
//! next batch is built. At most two batches are alive, and pages of a
//! mapped input are dropped from the process once used, so peak RSS stays
//! around 20-30 MiB whatever the file size (measured on 1 GiB: 17 MiB for
//! `,` → `, `, 30 MiB for a regex; regex mode also holds the longest line
//! whole). Ranges without a match are copied from the original by the
//! kernel (`copy_file_range`). Write-back of the new file is started
//! every 8 MiB (`sync_file_range`), so the final `fsync` waits for the tail
//! only; output buffers are recycled between batches. A one-byte pattern
//! goes through a 16-byte block kernel (`replace_byte`) rather than a call
//! per match. For literal patterns, matches straddling
//! range edges are found with the same entry-point logic as the scans
//! (`Job::entries`, batch by batch).
//!
//! # Regex mode
//!
//! Like `LC_ALL=C sed 's/RE/REPL/g'`: the pattern matches bytes, under the
//! same byte rule as grep (see [`crate::scan`]: `.` is one byte, `\b` and
//! classes are ASCII, `(?u)` opts into Unicode). Matches are found per line (the line without
//! its `\n`; a `\r` before it is an ordinary byte) and never span lines;
//! `^`/`$` match at line start/end. The replacement may use `$1`,
//! `${name}` and `$$` ([`regex::bytes::Captures::expand`]). Matches are
//! leftmost-first like Perl and ripgrep. Regex mode always rewrites (even
//! when lengths happen to match), since match lengths vary.

use std::fs::{self, File, Metadata};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::ops::ControlFlow;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;

use memchr::memmem::Finder;
use regex::bytes::Regex;

use super::engine::{Job, ScanOptions};
use super::grep::whole_haystack_assertions;
use super::source::{Source, Strategy};
use crate::fs::TempFile;
use crate::map::{Advice, Map, Mode, SharedMap};
use crate::{Error, Result};

mod commit;
mod in_place;
mod rewrite;

use commit::*;
use in_place::*;
use rewrite::*;

crate::options! {
    /// How [`replace`] treats the pattern and the file.
    #[derive(Clone, Debug, Default, PartialEq, Eq)]
    pub struct ReplaceOptions {
        /// The pattern is literal bytes (`-F`, as [`GrepOptions::fixed`]);
        /// false (the default, as for grep and sed): a regex (`regex` crate
        /// syntax under the byte rule of [`crate::scan`], matched per line).
        ///
        /// [`GrepOptions::fixed`]: crate::scan::GrepOptions::fixed
        pub fixed: bool,
        /// Count the replacements but write nothing.
        pub dry_run: bool,
        /// Keep the original content as `NAME` + this suffix (e.g. `.bak`).
        pub backup: Option<String>,
        /// In-place edits: wait until the changes are on disk (`msync` /
        /// `fdatasync`) before returning. Rewrites are always durable.
        ///
        /// A failed sync is reported (an EIO `Error::Io`). For a rewrite the
        /// original is then untouched (the temporary file is never renamed);
        /// in place, the edits were made and readers see them, but the disk
        /// may hold any mix of old and new pages (a later sync cannot write
        /// pages the kernel dropped), and the error says so.
        pub sync: bool,
    }
}

impl ReplaceOptions {
    /// Options matching `pattern` as the user spelled it: a literal with
    /// `fixed` (`-F`, Python's `fixed=True`), else a regex, except that a
    /// regex without metacharacters replaced by text without `$` is matched
    /// as the literal it is: the matches are the same (neither kind spans
    /// lines), and a literal allows the in-place edit when the lengths
    /// agree. The other options are the defaults (chain the setters).
    pub fn for_pattern(pattern: &[u8], replacement: &[u8], fixed: bool) -> ReplaceOptions {
        let literal = fixed || (is_plain_literal(pattern) && !replacement.contains(&b'$'));
        ReplaceOptions::default().fixed(literal)
    }
}

/// A non-empty UTF-8 pattern without any character that makes a regex
/// more than a literal (those `regex::escape` escapes, and newlines).
fn is_plain_literal(p: &[u8]) -> bool {
    !p.is_empty()
        && std::str::from_utf8(p).is_ok()
        && !p.iter().any(|b| b"\\.+*?()|[]{}^$#&-~\n".contains(b))
}

/// What [`replace`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReplaceReport {
    /// Matches replaced (with `dry_run`: that would be replaced).
    pub replacements: u64,
    /// The file is (or would be) edited in place rather than rewritten.
    pub in_place: bool,
    /// Bytes written to the file: the replaced bytes when in place, the
    /// whole new file when rewritten; 0 when nothing was written.
    pub bytes_written: u64,
}

/// What [`keep_lines`] did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeepReport {
    /// Length after the call.
    pub new_len: u64,
    /// Length before the call.
    pub old_len: u64,
    /// Whether the file was shortened.
    pub truncated: bool,
}

/// Replaces every (leftmost, non-overlapping) occurrence of `pattern` in
/// the file by `replacement`; see the [module docs](self) for how.
///
/// Errors: an empty pattern or an invalid regex is
/// [`Error::InvalidArgument`]; a missing or unreadable file, one that is
/// not writable in a directory that is not either, a directory or a
/// non-regular file is an error naming it. An empty file gives 0
/// replacements and is not touched.
///
/// # Strategy
///
/// For in-place edits `Strategy::Auto` is `read` (pread + pwrite of the
/// changed stretches) whatever the size (the measurements are in the private
/// `resolve_in_place`); rewrites read like scans do (`resolve_rewrite`).
pub fn replace(
    path: impl AsRef<Path>,
    pattern: &[u8],
    replacement: &[u8],
    ropts: &ReplaceOptions,
    opts: &ScanOptions,
) -> Result<ReplaceReport> {
    let path = path.as_ref();
    if pattern.is_empty() {
        return Err(Error::InvalidArgument("the pattern is empty".into()));
    }
    let regex = if ropts.fixed { None } else { Some(compile(pattern)?) };
    if let Some(re) = &regex {
        check_group_refs(re, replacement)?;
    }
    if let Some(sfx) = &ropts.backup {
        if sfx.is_empty() || sfx.contains('/') || sfx.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "invalid backup suffix {sfx:?} (it must be non-empty and contain no '/')"
            )));
        }
    }
    let meta = regular_file(path, "replace")?;
    let mut in_place = regex.is_none() && pattern.len() == replacement.len();
    if meta.len() == 0 {
        return Ok(ReplaceReport { replacements: 0, in_place, bytes_written: 0 });
    }
    // Permission problems show before any work (a dry run writes nothing,
    // so it only needs to read).
    let writable = if ropts.dry_run { None } else { Some(open_for_edit(path)?) };
    if let Some(file) = &writable {
        // A file we may not write is rewritten, never edited in place.
        in_place &= file.is_some();
        // Temp files of an earlier run that was killed (SIGKILL, power loss).
        crate::fs::remove_stale_temp_files_of(&real_path(path)?);
    }
    let empty = ReplaceReport { replacements: 0, in_place, bytes_written: 0 };
    if regex.is_none() && pattern == replacement {
        // Nothing would change: count, write nothing.
        let n = super::engine::count(path, pattern, opts)?;
        return Ok(ReplaceReport { replacements: n, ..empty });
    }
    match (regex, writable) {
        (None, None) => {
            let n = super::engine::count(path, pattern, opts)?;
            Ok(ReplaceReport { replacements: n, ..empty })
        }
        (None, Some(Some(file))) if in_place => {
            // A termination signal waits for the edit to end: an in-place
            // edit has no consistent state between "before" and "after".
            let _whole = crate::fs::critical_section();
            replace_in_place(path, file, pattern, replacement, ropts, opts)
        }
        (regex, file) => {
            let edit = match regex {
                Some(re) => Edit::Regex(RegexEdit::new(re, replacement)?),
                None => Edit::Literal { needle: Box::new(Needle::new(pattern)), repl: replacement },
            };
            drop(file);
            rewrite(path, &meta, &edit, ropts, opts)
        }
    }
}

/// The file opened for writing, for an in-place edit; `None` for a file we
/// may not write (`0444`) in a directory where we may create files: like
/// `sed -i`, it is then rewritten (a new file with its mode and, when
/// allowed, its owner, renamed over it), since replacing a directory entry
/// needs the directory's permission, not the file's. Neither writable: the
/// error of opening the file, which names it.
fn open_for_edit(path: &Path) -> Result<Option<File>> {
    match crate::fs::open_in_place(path, crate::fs::InPlace::Write) {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::EACCES) => {
            // The probe is the temporary file a rewrite would create
            // (removed when dropped): the exact test, ACLs and all.
            match TempFile::beside(&real_path(path)?) {
                Ok(_probe) => Ok(None),
                Err(_) => Err(e),
            }
        }
        Err(e) => Err(e),
    }
}

/// Truncates the file after its first `n` lines (after the `n`-th `\n`),
/// without rewriting anything: the `n`-th newline is found with `memchr`
/// from the start, so the cost depends on where it is, not on the file's
/// size. A file with `n` lines or fewer is left alone (`truncated` false);
/// `n = 0` empties the file. Directories and non-regular files are refused
/// with an error naming them.
pub fn keep_lines(path: impl AsRef<Path>, n: u64, opts: &ScanOptions) -> Result<KeepReport> {
    let path = path.as_ref();
    regular_file(path, "keep-lines")?;
    let file = crate::fs::open_in_place(path, crate::fs::InPlace::Write)?;
    let meta = file.metadata().map_err(|e| Error::io(path, "stat", e))?;
    if !meta.is_file() {
        return Err(Error::not_a_file(path, "not a regular file"));
    }
    let old_len = meta.len();
    let unchanged = KeepReport { new_len: old_len, old_len, truncated: false };
    let cut = if n == 0 || old_len == 0 { Some(0) } else { nth_line_end(path, n, opts)? };
    match cut {
        Some(cut) if cut < old_len => {
            file.set_len(cut).map_err(|e| Error::io(path, "ftruncate", e))?;
            Ok(KeepReport { new_len: cut, old_len, truncated: true })
        }
        _ => Ok(unchanged),
    }
}

/// The offset just past the `n`-th newline (`n >= 1`), if there is one.
fn nth_line_end(path: &Path, n: u64, opts: &ScanOptions) -> Result<Option<u64>> {
    let job = Job::open(path, opts)?;
    let len = job.src.len();
    let mut seen = 0u64;
    let mut pos = 0u64;
    // A small first window: "keep the first line" of a huge file reads
    // a few KiB, not a whole window.
    let mut step = job.window.min(64 << 10);
    while pos < len {
        let end = (pos + step).min(len);
        let hit = job.src.with_window(pos, end, |w| {
            let here = bytecount::count(w, b'\n') as u64;
            if seen + here < n {
                seen += here;
                None
            } else {
                memchr::memchr_iter(b'\n', w)
                    .nth((n - seen - 1) as usize)
                    .map(|i| pos + i as u64 + 1)
            }
        })?;
        job.opts.advance(end - pos);
        if hit.is_some() {
            return Ok(hit);
        }
        pos = end;
        step = job.window;
    }
    Ok(None)
}

/// Metadata of `path` (following links) when it is a regular file, else
/// an error naming it.
fn regular_file(path: &Path, op: &'static str) -> Result<Metadata> {
    let meta = fs::metadata(path).map_err(|e| Error::io(path, "open", e))?;
    if meta.is_dir() {
        return Err(Error::io(path, op, io::Error::from_raw_os_error(libc::EISDIR)));
    }
    if !meta.is_file() {
        return Err(Error::not_a_file(path, "not a regular file"));
    }
    // Sizes on procfs/sysfs are not contents (0 for /proc/meminfo): editing
    // would silently find nothing.
    if meta.len() == 0 || meta.len() == crate::map::page_size() as u64 {
        let f = crate::fs::open_nonblocking(path, 0).map_err(|e| Error::io(path, "open", e))?;
        if super::source::pseudo_fs(&f) {
            return Err(Error::not_a_file(
                path,
                format!("a /proc or /sys file cannot be edited in place ({op})"),
            ));
        }
    }
    Ok(meta)
}

/// The per-line regex, under the byte rule grep uses (`byte_regex`).
fn compile(pattern: &[u8]) -> Result<Regex> {
    super::byte_regex::build(&super::byte_regex::source(pattern, false), false, false)
}

/// Rejects references to groups the regex does not have (`$2` with one
/// group, `${nme}`), like sed's "invalid reference \\2": expanding them
/// would silently delete the match. Parses `$` references exactly as
/// [`regex::bytes::Captures::expand`] does (`$$` is a literal `$`, and a
/// `$` not followed by a name is literal).
fn check_group_refs(re: &Regex, repl: &[u8]) -> Result<()> {
    let mut i = 0;
    while let Some(k) = memchr::memchr(b'$', &repl[i..]) {
        let at = i + k;
        let rest = &repl[at + 1..];
        let (name, used) = if rest.first() == Some(&b'$') {
            i = at + 2;
            continue;
        } else if rest.first() == Some(&b'{') {
            match memchr::memchr(b'}', rest)
                .and_then(|e| std::str::from_utf8(&rest[1..e]).ok().map(|n| (n, e + 1)))
            {
                Some((n, used)) if !n.is_empty() => (n, used),
                _ => {
                    i = at + 1;
                    continue;
                }
            }
        } else {
            let n = rest.iter().take_while(|&&b| b == b'_' || b.is_ascii_alphanumeric()).count();
            if n == 0 {
                i = at + 1;
                continue;
            }
            (std::str::from_utf8(&rest[..n]).expect("ASCII"), n)
        };
        let shown = String::from_utf8_lossy(&repl[at..at + 1 + used]);
        let groups = re.captures_len() - 1;
        match name.parse::<usize>() {
            Ok(g) if g <= groups => {}
            Ok(_) => {
                return Err(Error::InvalidArgument(format!(
                    "invalid reference {shown} in the replacement: the pattern has {groups} group{} ($0 is the whole match)",
                    if groups == 1 { "" } else { "s" }
                )))
            }
            Err(_) if re.capture_names().flatten().any(|n| n == name) => {}
            Err(_) => {
                let digits = name.bytes().take_while(u8::is_ascii_digit).count();
                let hint = if digits > 0 {
                    format!(" (write ${{{}}}{} for group {} followed by {:?})", &name[..digits], &name[digits..], &name[..digits], &name[digits..])
                } else {
                    String::new()
                };
                return Err(Error::InvalidArgument(format!(
                    "invalid reference {shown} in the replacement: the pattern has no group named {name:?}{hint}"
                )));
            }
        }
        i = at + 1 + used;
    }
    Ok(())
}

// ----- matching ---------------------------------------------------------

/// A literal needle: `memchr` for one byte, `memmem` otherwise.
struct Needle {
    finder: Finder<'static>,
    byte: Option<u8>,
}

impl Needle {
    fn new(pattern: &[u8]) -> Needle {
        Needle {
            finder: Finder::new(pattern).into_owned(),
            byte: (pattern.len() == 1).then(|| pattern[0]),
        }
    }

    fn len(&self) -> usize {
        self.finder.needle().len()
    }

    /// Calls `f` for each leftmost non-overlapping match in `w` that starts
    /// before `core` (matches may run past it); returns the index just past
    /// the last match (0 if none).
    fn matches(&self, w: &[u8], core: usize, mut f: impl FnMut(usize)) -> usize {
        let mut i = 0;
        match self.byte {
            Some(b) => {
                for at in memchr::memchr_iter(b, &w[..core]) {
                    f(at);
                    i = at + 1;
                }
            }
            None => {
                let n = self.len();
                while let Some(m) = self.finder.find(&w[i..]) {
                    let at = i + m;
                    if at >= core {
                        break;
                    }
                    f(at);
                    i = at + n;
                }
            }
        }
        i
    }
}

#[cfg(test)]
mod tests;

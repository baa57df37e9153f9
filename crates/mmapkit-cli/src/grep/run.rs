//! `mmapkit grep`'s run: the patterns, then each FILE or tree searched
//! and printed in order, errors reported as GNU grep reports them.

use std::ffi::OsString;
use std::io::{self, BufWriter, Write};
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use mmapkit::scan::{walk, FileInfo, Grep, GrepOptions, Visit, WalkOptions};

use super::args::{DirAction, GrepArgs};
use super::printer::{Out, Output, Printer};
use crate::common::{
    error_to_stderr, exit_status, Progress, ScanArgs, EXIT_ERROR, EXIT_NO_MATCH, EXIT_OK,
};

pub fn grep(mut a: GrepArgs) -> anyhow::Result<u8> {
    if a.gnu.version {
        let mut out = crate::stdout::stdout();
        writeln!(out, "mmapkit grep {}", env!("CARGO_PKG_VERSION"))?;
        return Ok(EXIT_OK);
    }
    if let (true, (_, Some(warning))) = (a.color(), a.colors()) {
        eprintln!("mmapkit: {warning}");
    }
    if a.gnu.unix_byte_offsets {
        eprintln!("mmapkit: warning: --unix-byte-offsets (-u) is obsolete");
    }
    let matchers = [a.extended, a.fixed, a.gnu.basic, a.gnu.perl];
    if matchers.iter().filter(|&&m| m).count() > 1 {
        error_to_stderr(&mut io::stdout(), "conflicting matchers specified");
        return Ok(EXIT_ERROR);
    }
    let mut args = std::mem::take(&mut a.args).into_iter();
    // Patterns are bytes: a pattern need not be UTF-8 (`grep $'caf\xe9'`).
    let mut patterns: Vec<Vec<u8>> =
        std::mem::take(&mut a.patterns).into_iter().map(OsString::into_encoded_bytes).collect();
    for f in &a.gnu.pattern_files {
        match mmapkit::scan::read_input(Path::new(f)) {
            Ok(mut text) => {
                // One pattern per line; the last newline ends the last one.
                if text.last() == Some(&b'\n') {
                    text.pop();
                    patterns.push(text);
                } else if !text.is_empty() {
                    patterns.push(text);
                }
            }
            Err(e) => {
                error_to_stderr(&mut io::stdout(), e);
                return Ok(EXIT_ERROR);
            }
        }
    }
    if patterns.is_empty() && a.gnu.pattern_files.is_empty() {
        match args.next() {
            Some(p) => patterns.push(p.into_encoded_bytes()),
            None => anyhow::bail!("grep needs a PATTERN (or -e PATTERN)"),
        }
    }
    let mut files: Vec<OsString> = args.collect();
    let recurse = a.walk.recurse();
    // `grep -r PATTERN` searches '.', naming files without the './'.
    let bare_dot = files.is_empty() && recurse;
    if files.is_empty() {
        files.push(if recurse { "." } else { "-" }.into());
    }
    let walk_opts = match a.walk.options(bare_dot) {
        Ok(w) => w,
        Err(e) => {
            error_to_stderr(&mut io::stdout(), e);
            return Ok(EXIT_ERROR);
        }
    };
    let max_count = a.max_count.and_then(|m| m.0);
    let opts = GrepOptions::default()
        .patterns(patterns)
        .fixed(a.fixed)
        .basic(a.gnu.basic)
        .perl(a.gnu.perl)
        .ignore_case(a.ignore_case || a.gnu.ignore_case_y)
        .invert(a.invert)
        .word(a.word)
        .line(a.line)
        .max_count(max_count)
        .binary_files(a.binary_files())
        .null_data(a.gnu.null_data);
    if opts.selects_nothing() && !a.files_without_match {
        // GNU's shortcut (-m0, -f /dev/null, -v ''): exit 1 before the
        // pattern is compiled or a file opened (-L still lists the files).
        return Ok(EXIT_NO_MATCH);
    }
    let grep = match Grep::new(&opts) {
        Ok(g) => g,
        Err(e) => {
            error_to_stderr(&mut io::stdout(), e);
            return Ok(EXIT_ERROR);
        }
    };
    let out = Output {
        inner: BufWriter::with_capacity(256 << 10, crate::stdout::stdout()),
        error: None,
        line_buffered: a.gnu.line_buffered,
    };
    let mut printer = a.printer(out, false);
    let named =
        |found_in_dir: bool| !a.no_filename && (a.with_filename || files.len() > 1 || found_in_dir);
    let mut run = Run { failed: false, any: false, quiet: a.quiet, no_messages: a.no_messages };
    for file in &files {
        let path = Path::new(file);
        let operand = file != "-";
        if operand && walk_opts.skips_operand(path) {
            continue;
        }
        if operand && path.is_dir() && recurse {
            printer.set_with_filename(named(true));
            run.tree(&grep, path, &walk_opts, &a, &mut printer, named(true))?;
        } else if operand && a.walk.directories == Some(DirAction::Skip) && path.is_dir() {
            continue;
        } else {
            printer.set_with_filename(named(false));
            run.file(&grep, Ok(path.to_path_buf()), &a.scan, &mut printer)?;
        }
        if run.quiet && run.any {
            break; // like grep -q: the first selected line decides
        }
    }
    printer.out().inner.flush()?;
    Ok(if run.quiet && run.any { EXIT_OK } else { exit_status(run.failed, run.any) })
}

/// What the files searched so far came to.
struct Run {
    failed: bool,
    any: bool,
    quiet: bool,
    no_messages: bool,
}

impl Run {
    /// Searches one file (or stdin, `-`) and prints its results; an error
    /// with the file is reported and the run goes on, one writing to
    /// stdout ends it (a closed pipe quietly).
    fn file(
        &mut self,
        grep: &Grep,
        path: mmapkit::Result<PathBuf>,
        scan_args: &ScanArgs,
        printer: &mut Printer<Out>,
    ) -> anyhow::Result<()> {
        let result = path.map(|path| {
            let mut scan = scan_args.options();
            let _bar = (path != Path::new("-")).then(|| Progress::attach(&mut scan, &path, "grep"));
            let n = grep.search(&path, &scan, printer.sink());
            (path, n)
        });
        match result {
            Ok((path, Err(e))) if e.errno() == Some(libc::EISDIR) => {
                // GNU grep reads a directory operand (without -r) as a file
                // with no lines, after saying so: `-c` prints `d:0`, `-L`
                // lists it (`grep -c pat *` in a folder with subfolders).
                self.done(b"", Err(e), printer)?;
                let sink = printer.sink();
                let empty =
                    sink.begin(&FileInfo { path: &path, size: None }).and_then(|()| sink.finish(0));
                self.done(b"", empty.map(|()| 0), printer)
            }
            Ok((_, n)) => {
                let name = printer.name();
                self.done(&name, n, printer)
            }
            Err(e) => self.done(b"", Err(e), printer),
        }
    }

    /// The directory `root` (-r): files found are searched on the walking
    /// threads, each into its own printer, then joined whole to `printer`.
    fn tree(
        &mut self,
        grep: &Grep,
        root: &Path,
        walk_opts: &WalkOptions,
        a: &GrepArgs,
        printer: &mut Printer<Out>,
        with_filename: bool,
    ) -> anyhow::Result<()> {
        let scan = a.scan.options();
        let threads = scan.threads;
        // Under -q the walk's messages wait for its end: a match ends the
        // run quietly (GNU stops at its first match; on several threads the
        // entries "before" it are not defined), no match prints them all.
        let mut held: Vec<Held> = Vec::new();
        // Whether a thread may hold its files' output back and join many
        // files at once (see `Printer::can_hold`); never under -q, where
        // the first match ends the walk, or --line-buffered.
        let hold = !self.quiet && !a.gnu.line_buffered;
        let shared: Walked<'_> =
            Mutex::new((&mut *self, &mut *printer, None::<anyhow::Error>, &mut held));
        let search = |t: &mut Thread<'_, '_>, found: Visit<'_>| -> ControlFlow<()> {
            let file = &mut t.file;
            let searched = match found {
                Visit::File(path) => Some((path, grep.search(path, &scan, file.sink()))),
                _ => None,
            };
            match &searched {
                Some((_, Ok(0))) if file.is_empty() => return ControlFlow::Continue(()), // no lock
                Some((_, Ok(n))) if hold && file.can_hold() && file.held() < HOLD_BYTES => {
                    t.any |= *n > 0;
                    return ControlFlow::Continue(());
                }
                _ => {}
            }
            let mut guard = shared.lock().unwrap_or_else(|e| e.into_inner());
            let (run, printer, stop, held) = &mut *guard;
            run.any |= std::mem::take(&mut t.any);
            if searched.is_none() && !file.is_empty() {
                // The files held back first: a message must not overtake them.
                let joined = printer.join_file(file).map(|()| 0);
                if let Err(e) = run.done(b"", joined, printer) {
                    *stop = Some(e);
                    return ControlFlow::Break(());
                }
            }
            let done = match (found, searched) {
                (_, Some((_, n))) => {
                    let name = file.name();
                    let n = printer.join_file(file).and(n);
                    match n {
                        Err(e) if run.quiet => {
                            held.push(Held::Failed(name, e));
                            Ok(())
                        }
                        n => run.done(&name, n, printer),
                    }
                }
                (Visit::Error(e), _) if run.quiet => {
                    held.push(Held::Failed(Vec::new(), e));
                    Ok(())
                }
                (Visit::Error(e), _) => run.done(b"", Err(e), printer),
                (Visit::Loop(path), _) if run.quiet => {
                    held.push(Held::Loop(path.into()));
                    Ok(())
                }
                (Visit::Loop(path), _) => {
                    run.loop_warning(path, printer);
                    Ok(())
                }
                (Visit::File(_), None) => Ok(()),
            };
            if let Err(e) = done {
                *stop = Some(e);
                return ControlFlow::Break(());
            }
            if run.quiet && run.any {
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        };
        let thread =
            || Thread { file: a.printer(Vec::new(), with_filename), any: false, shared: &shared };
        walk(root, walk_opts, threads, &thread, &search);
        let (_, _, stop, _) = shared.into_inner().unwrap_or_else(|e| e.into_inner());
        if let Some(e) = stop {
            return Err(e);
        }
        if self.any {
            return Ok(());
        }
        for h in held {
            match h {
                Held::Failed(name, e) => self.done(&name, Err(e), printer)?,
                Held::Loop(path) => self.loop_warning(&path, printer),
            }
        }
        Ok(())
    }

    /// GNU grep's warning for a directory that is its own ancestor (not a
    /// failure).
    fn loop_warning(&self, path: &Path, printer: &mut Printer<Out>) {
        if !self.no_messages {
            let msg = format_args!("{}: warning: recursive directory loop", path.display());
            error_to_stderr(&mut printer.out().inner, msg);
        }
    }

    /// What searching `path` came to, its output already given to
    /// `printer`: the binary-file note, or the error.
    fn done(
        &mut self,
        name: &[u8],
        result: mmapkit::Result<u64>,
        printer: &mut Printer<Out>,
    ) -> anyhow::Result<()> {
        if result.is_ok() && printer.binary_matched() {
            // The name as bytes: a file name need not be UTF-8.
            let mut msg = b"mmapkit: ".to_vec();
            msg.extend_from_slice(name);
            msg.extend_from_slice(b": binary file matches\n");
            let _ = printer.out().inner.flush();
            let _ = io::stderr().write_all(&msg);
        }
        match result {
            Ok(n) => self.any |= n > 0,
            Err(e) => {
                if let Some(err) = printer.out().error.take() {
                    return Err(err.into()); // stdout is gone (a closed pipe ends quietly)
                }
                if !self.no_messages {
                    // Earlier files' lines first: the error must not overtake them.
                    error_to_stderr(&mut printer.out().inner, e);
                }
                self.failed = true;
            }
        }
        Ok(())
    }
}

/// A message of the walk held under -q (see [`Run::tree`]).
enum Held {
    Failed(Vec<u8>, mmapkit::Error),
    Loop(std::path::PathBuf),
}

/// What the walking threads of [`Run::tree`] share.
type Walked<'a> =
    Mutex<(&'a mut Run, &'a mut Printer<Out>, Option<anyhow::Error>, &'a mut Vec<Held>)>;

/// Output a walking thread holds back before it joins it: one lock per
/// this much, not per file (`-r -c` prints a line for every file).
const HOLD_BYTES: usize = 32 << 10;

/// A walking thread's printer and what it holds back, joined when the
/// thread ends.
struct Thread<'s, 'a> {
    file: Printer<Vec<u8>>,
    /// A file held back had a selected line.
    any: bool,
    shared: &'s Walked<'a>,
}

impl Drop for Thread<'_, '_> {
    fn drop(&mut self) {
        if self.file.is_empty() && !self.any {
            return;
        }
        let mut guard = self.shared.lock().unwrap_or_else(|e| e.into_inner());
        let (run, printer, stop, _) = &mut *guard;
        run.any |= self.any;
        if stop.is_none() {
            let joined = printer.join_file(&mut self.file).map(|()| 0);
            if let Err(e) = run.done(b"", joined, printer) {
                *stop = Some(e);
            }
        }
    }
}

//! `mmapkit grep`'s printers: the core's GNU or JSON printer behind one
//! type, over a stdout that remembers its first write error.

use std::io::{self, BufWriter, Write};

use mmapkit::scan::{GnuPrinter, JsonPrinter, Sink};

/// Stdout, buffered (not locked: walking threads join their files' output).
pub(super) type Out = Output<BufWriter<crate::stdout::Stdout>>;

/// The printer the options asked for.
pub(super) enum Printer<W: Write> {
    Gnu(GnuPrinter<W>),
    Json(JsonPrinter<W>),
}

impl Printer<Out> {
    /// Writes what `file` printed for the file it just searched.
    pub(super) fn join_file(&mut self, file: &mut Printer<Vec<u8>>) -> mmapkit::Result<()> {
        match (self, file) {
            (Printer::Gnu(p), Printer::Gnu(f)) => p.join_file(f),
            (Printer::Json(p), Printer::Json(f)) => p.join_file(f),
            _ => Ok(()), // both come from one GrepArgs::printer
        }
    }
}

impl Printer<Vec<u8>> {
    /// Nothing to join (see [`GnuPrinter::is_empty`]).
    pub(super) fn is_empty(&self) -> bool {
        match self {
            Printer::Gnu(p) => p.is_empty(),
            Printer::Json(p) => p.is_empty(),
        }
    }

    /// Bytes held since the last join.
    pub(super) fn held(&self) -> usize {
        match self {
            Printer::Gnu(p) => p.held(),
            Printer::Json(p) => p.held(),
        }
    }

    /// Joining later would write the same (see [`GnuPrinter::can_hold`]).
    pub(super) fn can_hold(&self) -> bool {
        match self {
            Printer::Gnu(p) => p.can_hold(),
            Printer::Json(_) => true,
        }
    }
}

impl<W: Write> Printer<W> {
    pub(super) fn sink(&mut self) -> &mut dyn Sink {
        match self {
            Printer::Gnu(p) => p,
            Printer::Json(p) => p,
        }
    }

    pub(super) fn out(&mut self) -> &mut W {
        match self {
            Printer::Gnu(p) => p.get_mut(),
            Printer::Json(p) => p.get_mut(),
        }
    }

    pub(super) fn set_with_filename(&mut self, on: bool) {
        if let Printer::Gnu(p) = self {
            p.set_with_filename(on);
        }
    }

    /// The last file searched was binary and had a selected line.
    pub(super) fn binary_matched(&self) -> bool {
        matches!(self, Printer::Gnu(p) if p.binary_matched())
    }

    /// The name printed for the last file begun (bytes; none for JSON).
    pub(super) fn name(&self) -> Vec<u8> {
        match self {
            Printer::Gnu(p) => p.name().to_vec(),
            Printer::Json(_) => Vec::new(),
        }
    }
}

/// Stdout, remembering the first write error so that a failed write is
/// told apart from a failed input file (and a closed pipe ends quietly).
pub(super) struct Output<W: Write> {
    pub(super) inner: W,
    pub(super) error: Option<io::Error>,
    /// `--line-buffered`: flush each write (the printer writes each line).
    pub(super) line_buffered: bool,
}

impl<W: Write> Output<W> {
    fn fail(&mut self, e: io::Error) -> io::Error {
        let copy = io::Error::new(e.kind(), e.to_string());
        self.error.get_or_insert(e);
        copy
    }
}

impl<W: Write> Write for Output<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf).map_err(|e| self.fail(e))?;
        if self.line_buffered {
            self.inner.flush().map_err(|e| self.fail(e))?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush().map_err(|e| self.fail(e))
    }
}

//! Input sniffing: the input opened once, gzip told from its first two
//! bytes without reopening, streams decompressed for the parser.

use std::fs::File;
use std::io::{BufReader, Read};
use std::path::Path;

use super::parse::{Counting, Input};
use crate::exec::Progress;
use crate::map::{pread_full, read_full};
use crate::scan::source::{label, open_input, Opened};
use crate::{Error, Result};

/// The input, opened once (never reopened: a FIFO or a pipe cannot be).
pub(super) enum Source {
    /// A plain (not gzip) regular file: can be mapped.
    Mappable(File),
    /// Read front to back; `gz` from the first two bytes.
    Stream { r: Box<dyn Read + Send>, gz: bool },
}

pub(super) const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Opens the input through the scans' [`open_input`] (`-` is stdin; pipes,
/// FIFOs and /proc files are streams) and sniffs gzip without reopening:
/// a regular file is `pread` at 0, a stream's first bytes are read and
/// put back in front of it.
pub(super) fn open_source(path: &Path, progress: &Progress) -> Result<Source> {
    let name = label(path);
    let progress = progress.clone();
    match open_input(path)? {
        Opened::File { file, len } => {
            progress.set_total(len);
            let mut magic = [0u8; 2];
            let got = pread_full(&file, &mut magic, 0).map_err(|e| Error::io(name, "read", e))?;
            let gz = got == 2 && magic == GZIP_MAGIC;
            Ok(if gz {
                Source::Stream { r: Box::new(Counting { inner: file, counter: progress }), gz }
            } else {
                Source::Mappable(file)
            })
        }
        Opened::Stream(r) => {
            let mut r = Counting { inner: r, counter: progress };
            let mut head = [0u8; 2];
            let got = read_full(&mut r, &mut head).map_err(|e| Error::io(name, "read", e))?;
            let head = head[..got].to_vec();
            let gz = head == GZIP_MAGIC;
            Ok(Source::Stream { r: Box::new(std::io::Cursor::new(head).chain(r)), gz })
        }
    }
}

/// A stream input for the parser (decompressed when gzip).
pub(super) fn stream_input<'a>(r: Box<dyn Read + Send>, gz: bool) -> Input<'a> {
    let r: Box<dyn Read + Send> = if gz {
        Box::new(flate2::read::MultiGzDecoder::new(BufReader::with_capacity(1 << 20, r)))
    } else {
        r
    };
    Input::Stream { r, buf: Vec::new(), eof: false, base: 0 }
}

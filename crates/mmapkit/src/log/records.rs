//! Entries to append, read from an input (`log append`'s stdin): one per
//! line, or length-prefixed records (`[u32 little-endian length][bytes]`,
//! what `log read --records` writes) for entries that hold newlines.

use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};

use crate::scan::source::{label, open_input, Opened};
use crate::{Error, Result};

/// How an input is cut into entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecordFormat {
    /// One entry per line; the newline is not part of it (a last line
    /// without one is an entry too).
    Lines,
    /// `[u32 little-endian length][bytes]` per entry.
    LengthPrefixed,
}

/// Reads entries from an input, in order; see [`RecordFormat`]. An input
/// that ends inside a record is an [`Error::Format`] naming the record
/// (1-based) and its byte offset.
pub struct RecordReader {
    input: BufReader<Box<dyn Read + Send>>,
    format: RecordFormat,
    label: PathBuf,
    /// Records read so far.
    count: u64,
    /// Byte offset of the next record (length-prefixed input).
    offset: u64,
}

impl RecordReader {
    /// Opens `path` (`-` is standard input; pipes and FIFOs are read as
    /// streams) through the crate's one input opener (`scan::source::open_input`).
    pub fn open(path: &Path, format: RecordFormat) -> Result<RecordReader> {
        let input: Box<dyn Read + Send> = match open_input(path)? {
            Opened::Stream(r) => r,
            Opened::File { file, .. } => Box::new(file),
        };
        Ok(Self::new(input, label(path), format))
    }

    /// Reads from `input`; errors name `label`.
    pub fn new(input: Box<dyn Read + Send>, label: &Path, format: RecordFormat) -> RecordReader {
        RecordReader {
            input: BufReader::with_capacity(1 << 20, input),
            format,
            label: label.to_owned(),
            count: 0,
            offset: 0,
        }
    }

    /// How many records have been read.
    pub fn records_read(&self) -> u64 {
        self.count
    }

    /// The next record, `None` at the end of the input.
    pub fn next_record(&mut self) -> Result<Option<Vec<u8>>> {
        let read_err = |l: &Path, e| Error::io(l, "read", e);
        let mut entry = Vec::new();
        match self.format {
            RecordFormat::Lines => {
                if crate::map::retry_eintr(|| self.input.read_until(b'\n', &mut entry))
                    .map_err(|e| read_err(&self.label, e))?
                    == 0
                {
                    return Ok(None);
                }
                if entry.last() == Some(&b'\n') {
                    entry.pop();
                }
            }
            RecordFormat::LengthPrefixed => {
                let mut len = [0u8; 4];
                let got = crate::map::read_full(&mut self.input, &mut len)
                    .map_err(|e| read_err(&self.label, e))?;
                if got == 0 {
                    return Ok(None);
                }
                let (k, at) = (self.count + 1, self.offset);
                if got < len.len() {
                    return Err(self.format_err(format!(
                        "the input ends inside the length prefix of record {k} \
                         (byte {at}: {got} of 4 bytes)"
                    )));
                }
                let n = u32::from_le_bytes(len) as u64;
                // Grows with what arrives: a claimed length allocates nothing.
                crate::map::retry_eintr(|| (&mut self.input).take(n).read_to_end(&mut entry))
                    .map_err(|e| read_err(&self.label, e))?;
                if entry.len() as u64 != n {
                    return Err(self.format_err(format!(
                        "record {k} (byte {at}) of {n} bytes is cut short after {} bytes",
                        entry.len()
                    )));
                }
                self.offset += 4 + n;
            }
        }
        self.count += 1;
        Ok(Some(entry))
    }

    fn format_err(&self, detail: String) -> Error {
        Error::Format { path: self.label.clone(), detail }
    }
}

impl Iterator for RecordReader {
    type Item = Result<Vec<u8>>;

    fn next(&mut self) -> Option<Self::Item> {
        self.next_record().transpose()
    }
}

#[cfg(test)]
mod tests;

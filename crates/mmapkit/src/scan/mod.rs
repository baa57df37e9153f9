//! Whole-file tools, parallel inside one file: count, find, grep,
//! replace, keep-lines.
//!
//! Every operation opens the file through a [`Strategy`] (`mmap`: scan
//! the mapping; `read`: `pread` into a reusable per-thread buffer; `auto`:
//! chosen by size, see [`Strategy::resolve`]), splits it into byte ranges
//! scanned by a thread pool window by window with the SIMD kernels in
//! [`crate::bytes`], and stitches the per-range results so that the answer is the
//! same for every strategy, thread count and window size:
//!
//! * matches are leftmost and **non-overlapping** over the whole file (in
//!   `aaaa`, `aa` occurs twice), including across range and window edges;
//! * line-oriented operations cut ranges at line starts.
//!
//! ```no_run
//! use mmapkit::exec::Threads;
//! use mmapkit::scan::{self, ScanOptions, Strategy};
//! let opts = ScanOptions::new(Strategy::Auto, Threads::AUTO); // all cores
//! let lines = scan::count_lines("big.csv", &opts)?;
//! let first = scan::find("big.csv", b"needle", &opts)?;
//! # Ok::<(), mmapkit::Error>(())
//! ```

mod byte_regex;
mod engine;
pub mod grep;
mod local;
pub mod replace;
pub(crate) mod source;
#[cfg(test)]
pub(crate) mod tests;

/// The byte kernels, re-exported from their bottom module ([`crate::bytes`]).
pub use crate::bytes;
pub use engine::{count, count_lines, count_stream, find, find_all, rfind, ScanOptions};
pub use grep::{
    grep, grep_count, grep_lines, walk, walk_files, BinaryFiles, Collect, Colors, Devices,
    FileInfo, Forked, Formatted, GnuPrinter, Grep, GrepOptions, JsonPrinter, NameFilter, Needs,
    PrintOptions, Report, Sink, SinkLine, Visit, WalkOptions,
};
pub use replace::{keep_lines, replace, KeepReport, ReplaceOptions, ReplaceReport};
pub use source::{read_input, Strategy, AUTO_MMAP_MIN};

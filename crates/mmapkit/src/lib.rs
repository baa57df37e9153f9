//! # mmapkit
//!
//! Memory-mapped I/O that is safe to use on real files:
//!
//! * [`map`]: the mapped-file type family ([`map::Map`]): read, read-write,
//!   copy-on-write and anonymous shared mappings of any offset and length
//!   (empty files included) that **grow without moving**, so slices handed
//!   out stay valid; advice, populate, ranged flush; and no `SIGBUS` crash
//!   when another process truncates the file (the operation gets
//!   [`Error::FileTruncated`] instead).
//! * [`exec`]: the execution context of every parallel operation: thread
//!   count ([`exec::Threads`]), the shared worker pools, progress
//!   ([`exec::Progress`]).
//! * [`bytes`]: byte-search kernels (memchr) on plain slices, under both
//!   [`map`] and [`scan`].
//! * [`dtype`]: the element types ([`dtype::DType`]) every typed module
//!   shares, with their numpy and `.npy` spellings.
//! * [`scan`]: whole-file count, find, grep and replace over every I/O
//!   strategy.
//! * [`info`]: size, allocated blocks and page-cache residency of files.
//! * [`writer`]: [`writer::RecordWriter`], fixed-width records written
//!   from many threads straight into a mapped output, in input order.
//! * [`kmer`]: canonical k-mer frequency vectors of FASTA/FASTQ reads,
//!   written through the record writer (single / batch / mmap designs).
//! * [`store`]: the `.npy` header, growable `.npy` array stores, shared-memory
//!   arrays (reference-counted `/dev/shm` and memfd segments) and sparse files.
//! * [`log`]: a segmented, checksummed, crash-safe write-ahead log
//!   ([`log::CommitLog`]) with group commit and zero-copy reads.
//! * [`stats`]: exact out-of-core statistics (median, quantiles, histogram,
//!   min/max/sum/mean) over typed slices or mapped files, multithreaded,
//!   in bounded memory.
//!
//! All unsafe code lives in [`map`] and the private `sys` floor under it
//! (system calls, SIMD kernels); everything else is built on their
//! documented APIs.
#![deny(unsafe_op_in_unsafe_fn)]
// `unsafe` only in `sys` and `map` (allowed there alone, below), every block with a
// `// SAFETY:` comment (clippy's undocumented_unsafe_blocks, denied in the
// workspace lints).
#![deny(unsafe_code)]
#![warn(missing_docs)]
// The library never prints: warnings go through the `log` facade, so the
// program embedding it decides where they go (see `log_warnings_to_stderr`).
#![cfg_attr(not(test), deny(clippy::print_stderr, clippy::print_stdout))]
// Unit tests write their fixtures directly; the crate itself is checked
// (`clippy.toml`'s disallowed methods) in its non-test build.
#![cfg_attr(test, allow(clippy::disallowed_methods, reason = "test fixtures are written directly"))]

pub mod bytes;
pub mod dtype;
mod error;
pub mod exec;
pub mod fs;
pub mod info;
pub mod kmer;
pub mod log;
#[allow(unsafe_code)]
pub mod map;
#[doc(hidden)]
pub mod names;
pub mod scan;
pub mod stats;
pub mod store;
// The bottom floor: every system call, the SIMD kernels.
#[allow(unsafe_code)]
mod sys;
#[cfg(test)]
mod test_util;
pub mod writer;

pub use error::{os_message, panic_detail, Error, ErrorKind, Result};

/// Sends the library's warnings (the `log` facade, level warn and above)
/// to standard error as `mmapkit: warning: ...`, for programs that have no
/// logger of their own (the CLI and the Python binding install it). Does
/// nothing if a logger is installed already.
pub fn log_warnings_to_stderr() {
    struct Stderr;
    impl ::log::Log for Stderr {
        fn enabled(&self, m: &::log::Metadata<'_>) -> bool {
            m.level() <= ::log::Level::Warn
        }
        fn log(&self, r: &::log::Record<'_>) {
            if self.enabled(r.metadata()) {
                use std::io::Write;
                let level = if r.level() == ::log::Level::Error { "error" } else { "warning" };
                let _ = writeln!(std::io::stderr(), "mmapkit: {level}: {}", r.args());
            }
        }
        fn flush(&self) {}
    }
    static LOGGER: Stderr = Stderr;
    if ::log::set_logger(&LOGGER).is_ok() {
        ::log::set_max_level(::log::LevelFilter::Warn);
    }
}

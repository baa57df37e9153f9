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
//! * [`scan`]: byte-search kernels (memchr) shared by every strategy.
//! * [`info`]: size, allocated blocks and page-cache residency of files.
//! * [`store`]: the `.npy` header and growable array stores.
//! * [`log`]: a segmented, checksummed, crash-safe write-ahead log
//!   ([`log::CommitLog`]) with group commit and zero-copy reads.
//!
//! All unsafe code lives in [`map`]; everything else is built on its
//! documented API.
#![deny(unsafe_op_in_unsafe_fn)]
#![warn(missing_docs)]

mod error;
pub mod info;
pub mod log;
pub mod map;
pub mod scan;
pub mod store;

pub use error::{os_message, Error, Result};

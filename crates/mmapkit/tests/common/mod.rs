//! Shared by the core's integration tests: log helpers, std-only helpers
//! (`Rng`, segment listing, temp files) and a child-process helper.
#![allow(dead_code)]

use mmapkit::log::{CommitLog, LogOptions, SyncMode};

mod log;
mod plain;
#[allow(unused_imports)] // not every test file uses every helper
pub use log::*;
#[allow(unused_imports)]
pub use plain::*;

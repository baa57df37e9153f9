//! `mmapkit grep`: parse, pick a printer, search each file; the search and
//! the printers are the core's (`mmapkit::scan::grep`).

mod args;
mod help;
mod printer;
mod run;

pub use args::{gnu_args, GrepArgs};
pub use help::GREP_HELP;
pub use run::grep;

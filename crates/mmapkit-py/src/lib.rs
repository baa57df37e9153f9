//! `mmapkit._native`: the Python binding of the mmapkit core.
//!
//! Thin by design: convert arguments, release the GIL around anything
//! long, map core errors to Python exceptions (see `errors`). All logic
//! lives in the `mmapkit` crate.
#![deny(unsafe_op_in_unsafe_fn)]
// `unsafe` only in `buffer` (and the buffer-protocol slots PyO3 declares
// `unsafe fn`, which forward there).
#![deny(unsafe_code)]

#[allow(unsafe_code)]
mod buffer;
mod errors;
mod exec;
mod features;
mod kmers;
mod log;
mod mapped;
mod replicate;
mod stats;
mod store;
mod tools;

use pyo3::prelude::*;

use errors::IntoPy;

/// Writes a file's dirty pages and drops it from the page cache.
#[pyfunction]
fn drop_cache(py: Python<'_>, path: std::path::PathBuf) -> PyResult<()> {
    py.detach(|| mmapkit::map::drop_cache(&path)).py_err()
}

/// The system page size in bytes.
#[pyfunction]
fn page_size() -> usize {
    mmapkit::map::page_size()
}

/// Puts mmapkit's SIGBUS guard back in front of a handler installed after
/// it (faulthandler, PyTorch's DataLoader workers); returns whether it had
/// to. The package calls it where those handlers are installed.
#[pyfunction]
fn guard_on_top() -> bool {
    mmapkit::map::guard_on_top()
}

/// Tells the SIGBUS guard that the handler it last went in front of
/// removed itself (`faulthandler.disable()`).
#[pyfunction]
fn guard_below_removed() {
    mmapkit::map::guard_below_removed()
}

/// Adds `#[pyfunction]`s to the module.
macro_rules! add_functions {
    ($m:ident: $($f:path),* $(,)?) => {
        $($m.add_function(wrap_pyfunction!($f, $m)?)?;)*
    };
}

/// The compiled core of the `mmapkit` package (Rust, through PyO3).
///
/// Import `mmapkit`, not this module: the package re-exports what is public
/// here (`MappedFile`, `mmap`, `CommitLog`, `RecordWriter`, the whole-file
/// tools, the exceptions) and wraps the stores' cores (`ArrayStoreCore`,
/// `FeatureStoreCore`, `SharedSegment`) in numpy facades. Long calls release
/// the GIL.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    // The core's warnings (the `log` facade) on stderr, as before it used one.
    mmapkit::log_warnings_to_stderr();
    m.add_class::<mapped::MappedFile>()?;
    m.add_class::<mapped::Mmap>()?;
    m.add_class::<log::CommitLog>()?;
    m.add_class::<log::CommitLogIter>()?;
    errors::register(m)?;
    m.add_class::<store::NpyBuffer>()?;
    m.add("ReplicationError", m.py().get_type::<replicate::ReplicationError>())?;
    m.add("SnapshotRequiredError", m.py().get_type::<replicate::SnapshotRequiredError>())?;
    m.add("DivergedError", m.py().get_type::<replicate::DivergedError>())?;
    m.add_class::<replicate::LogServer>()?;
    m.add_function(wrap_pyfunction!(replicate::log_follow, m)?)?;
    m.add_class::<store::ArrayStoreCore>()?;
    m.add_class::<store::SharedSegment>()?;
    m.add_class::<store::GatherAhead>()?;
    m.add_class::<features::FeatureStoreCore>()?;
    add_functions!(m:
        store::sparse, store::npy_header, store::segment_path, store::write_file_atomic, store::remove_stale_temp_files, drop_cache, page_size,
        guard_on_top, guard_below_removed,
        tools::count, tools::find, tools::find_all, tools::grep, tools::grep_count, tools::replace, tools::keep_lines,
        kmers::kmers, kmers::kmer_labels,
    );
    add_functions!(m: store::create_dir_durably, store::remove_file_durably);
    m.add_class::<kmers::RecordWriter>()?;
    add_functions!(m: stats::stats_reduce, stats::stats_quantile, stats::stats_histogram);
    m.add("ACCESS_DEFAULT", mapped::ACCESS_DEFAULT)?;
    m.add("ACCESS_READ", mapped::ACCESS_READ)?;
    m.add("ACCESS_WRITE", mapped::ACCESS_WRITE)?;
    m.add("ACCESS_COPY", mapped::ACCESS_COPY)?;
    Ok(())
}

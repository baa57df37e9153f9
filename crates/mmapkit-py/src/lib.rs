//! `mmapkit._native`: the Python binding of the mmapkit core.
//!
//! Thin by design: convert arguments, release the GIL around anything
//! long, map core errors to Python exceptions (see `errors`). All logic
//! lives in the `mmapkit` crate.
#![deny(unsafe_op_in_unsafe_fn)]

mod errors;
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

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<mapped::MappedFile>()?;
    m.add_class::<mapped::Mmap>()?;
    m.add_class::<log::CommitLog>()?;
    m.add_class::<log::CommitLogIter>()?;
    m.add("FileTruncatedError", py.get_type::<errors::FileTruncatedError>())?;
    m.add("DiskFullError", py.get_type::<errors::DiskFullError>())?;
    m.add("CorruptError", py.get_type::<errors::CorruptError>())?;
    m.add("FormatError", py.get_type::<errors::FormatError>())?;
    m.add("ReservationExhaustedError", py.get_type::<errors::ReservationExhaustedError>())?;
    m.add("ReplicationError", py.get_type::<replicate::ReplicationError>())?;
    m.add("SnapshotRequiredError", py.get_type::<replicate::SnapshotRequiredError>())?;
    m.add_class::<replicate::LogServer>()?;
    m.add_function(wrap_pyfunction!(replicate::log_follow, m)?)?;
    m.add_class::<store::ArrayStoreCore>()?;
    m.add_class::<store::SharedSegment>()?;
    m.add_function(wrap_pyfunction!(store::sparse, m)?)?;
    m.add_function(wrap_pyfunction!(store::npy_header, m)?)?;
    m.add_function(wrap_pyfunction!(store::segment_path, m)?)?;
    m.add_function(wrap_pyfunction!(drop_cache, m)?)?;
    m.add_function(wrap_pyfunction!(page_size, m)?)?;
    m.add_function(wrap_pyfunction!(tools::count, m)?)?;
    m.add_function(wrap_pyfunction!(tools::find, m)?)?;
    m.add_function(wrap_pyfunction!(tools::find_all, m)?)?;
    m.add_function(wrap_pyfunction!(tools::grep, m)?)?;
    m.add_function(wrap_pyfunction!(tools::grep_count, m)?)?;
    m.add_function(wrap_pyfunction!(tools::replace, m)?)?;
    m.add_function(wrap_pyfunction!(tools::keep_lines, m)?)?;
    m.add_function(wrap_pyfunction!(kmers::kmers, m)?)?;
    m.add_function(wrap_pyfunction!(kmers::kmer_labels, m)?)?;
    m.add_class::<kmers::RecordWriter>()?;
    m.add_function(wrap_pyfunction!(stats::stats_median, m)?)?;
    m.add_function(wrap_pyfunction!(stats::stats_quantile, m)?)?;
    m.add_function(wrap_pyfunction!(stats::stats_histogram, m)?)?;
    m.add_function(wrap_pyfunction!(stats::stats_extreme, m)?)?;
    m.add_function(wrap_pyfunction!(stats::stats_sum, m)?)?;
    m.add_function(wrap_pyfunction!(stats::stats_mean, m)?)?;
    m.add("ACCESS_DEFAULT", mapped::ACCESS_DEFAULT)?;
    m.add("ACCESS_READ", mapped::ACCESS_READ)?;
    m.add("ACCESS_WRITE", mapped::ACCESS_WRITE)?;
    m.add("ACCESS_COPY", mapped::ACCESS_COPY)?;
    Ok(())
}

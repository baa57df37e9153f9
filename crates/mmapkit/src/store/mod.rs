//! Array files: the `.npy` format ([`npy`]), growable `.npy` array stores
//! ([`array::ArrayStore`]), feature stores (two of them committed together:
//! [`features::FeatureStore`]), shared-memory arrays ([`shared::Segment`]) and
//! sparse files ([`sparse`]).
//!
//! Every file here is a real `.npy` file, so numpy reads it directly
//! (`np.load(path, mmap_mode="r")`), and dtypes are passed around as the
//! header's `descr` literal plus an item size (the Python binding gets
//! both from numpy).
//!
//! ```
//! use mmapkit::store::{ArrayStore, StoreOptions};
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("rows.npy");
//! // rows of 2 little-endian u32
//! let mut w = ArrayStore::create(&path, "'<u4'", 4, &[2], &StoreOptions::default())?;
//! w.append(&[1, 0, 0, 0, 2, 0, 0, 0])?;
//! let r = ArrayStore::open(&path, false, None)?; // a reader, e.g. another process
//! assert_eq!((r.len(), r.data().len()), (1, 8));
//! w.close()?; // trims the capacity reserved ahead
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
pub mod ahead;
pub mod array;
pub mod features;
pub mod npy;
pub mod shared;

pub use ahead::GatherAhead;
pub use array::{ArrayStore, StoreOptions};
pub use features::FeatureStore;
pub use shared::Segment;

use std::path::Path;

use crate::{Error, Result};

/// Makes `path` a sparse file of `size` bytes, instantly: no blocks are
/// allocated (reads give zeros; blocks are allocated when written). Creates
/// the file if missing; extends an existing smaller file sparsely, but
/// refuses to shrink one (that would destroy data: delete it first).
/// `mmapkit info` shows the apparent size and the (small) allocated size.
pub fn sparse(path: impl AsRef<Path>, size: u64) -> Result<()> {
    let path = path.as_ref();
    if i64::try_from(size).is_err() {
        // off_t cannot hold it: what ftruncate says for sizes it cannot
        // take (before creating anything).
        return Err(Error::io(path, "ftruncate", std::io::Error::from_raw_os_error(libc::EFBIG)));
    }
    let file = crate::fs::open_in_place(path, crate::fs::InPlace::Create)?;
    let have = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
    if have > size {
        return Err(Error::invalid(
            path,
            format!("the file already has {have} bytes, more than {size}; refusing to shrink it"),
        ));
    }
    // EFBIG: beyond the file system's maximum file size.
    file.set_len(size).map_err(|e| Error::io(path, "ftruncate", e))
}

#[cfg(test)]
mod tests;

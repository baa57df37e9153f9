//! Reading a store's `.npy` header: parsed, checked against the dtype
//! and row shape asked for, and the rows it may be trusted for.

use std::fs::File;
use std::path::Path;

use super::*;
use crate::{Error, Result};

pub(super) fn format_err(path: &Path, detail: String) -> Error {
    Error::Format { path: path.to_owned(), detail }
}

/// Reads and parses the header of the `.npy` file `file`: the preamble
/// first, then exactly the header length it claims (capped at
/// [`npy::MAX_HEADER_LEN`](super::npy::MAX_HEADER_LEN) before anything is
/// allocated).
pub(crate) fn read_header(file: &File, path: &Path) -> Result<(Header, usize)> {
    let mut pre = [0u8; crate::store::npy::PREAMBLE_LEN];
    let n = read_full(file, &mut pre, path)?;
    let total = Header::total_len(&pre[..n], path)?;
    let mut buf = vec![0u8; total];
    let n = read_full(file, &mut buf, path)?;
    if n < total {
        return Err(format_err(
            path,
            format!("truncated .npy header ({total} bytes expected, the file has {n})"),
        ));
    }
    Header::decode(&buf, path)
}

pub(super) fn read_full(file: &File, buf: &mut [u8], path: &Path) -> Result<usize> {
    crate::map::pread_full(file, buf, 0).map_err(|e| Error::io(path, "read", e))
}

/// Reads the header twice until two reads agree, so a read racing with a
/// writer's in-place update cannot return a torn row count.
pub(crate) fn read_header_stable(file: &File, path: &Path) -> Result<(Header, usize)> {
    let mut last = read_header(file, path)?;
    for _ in 0..100 {
        let next = read_header(file, path)?;
        if next == last {
            return Ok(next);
        }
        last = next;
    }
    Ok(last)
}

/// The header's row count, or fewer when the store's durable-rows record
/// says a power loss since may have lost the rest (see `durable`).
pub(super) fn trusted_rows(
    file: &File,
    path: &Path,
    header: &Header,
    data_off: usize,
    row_bytes: usize,
    use_record: bool,
) -> Result<u64> {
    let rows = header.shape[0];
    if !use_record {
        return Ok(rows);
    }
    match durable::read(&durable::path_of(path))? {
        Some(r)
            if !r.this_boot
                && r.rows < rows
                && r.fingerprint
                    == durable::fingerprint(file, path, header, data_off, row_bytes, r.rows)? =>
        {
            Ok(r.rows)
        }
        _ => Ok(rows),
    }
}

/// Reads the header of the `.npy` file at `path`: the header and the
/// offset of the data.
/// A FIFO or device is refused unread (and its open does not block).
pub fn read_header_of(path: &Path) -> Result<(Header, usize)> {
    let file = crate::fs::open_regular(path, "a .npy header is read from a file")?;
    read_header_stable(&file, path)
}

/// Checks that the header's dtype is plain fixed-width data that can be
/// mapped: a known kind, no Python objects (pickled, not data).
pub(crate) fn check_descr(path: &Path, header: &Header) -> Result<()> {
    let descr = header.descr.trim();
    if let Some(d) = header.simple_dtype() {
        // A kind numpy stores as plain bytes, as numpy spells plain types.
        if !TypeStr::parse(d).is_some_and(|t| "biufcSUVMma".contains(t.kind)) {
            let objects = d.strip_prefix(['<', '>', '|', '=']).unwrap_or(d).starts_with('O');
            let why = if objects { " (Python objects, pickled; not plain data)" } else { "" };
            return Err(format_err(path, format!("unsupported dtype {descr}{why}")));
        }
    } else if !descr.starts_with('[') {
        return Err(format_err(path, format!("unsupported dtype {descr}")));
    } else if ["'O", "'|O", "'<O", "'>O", "'=O", "\"O", "\"|O"]
        .iter()
        .any(|t| descr.contains(&format!(", {t}")))
    {
        // A structured dtype with an object field (its type follows ", ").
        return Err(format_err(path, format!("unsupported dtype {descr} (holds Python objects)")));
    }
    Ok(())
}

/// [`check_descr`], and a known non-zero item size agreeing with
/// `item_size` when both are known. Returns the item size.
pub(super) fn check_dtype(path: &Path, header: &Header, item_size: Option<usize>) -> Result<usize> {
    check_descr(path, header)?;
    let descr = header.descr.trim();
    let size = match (item_size, header.item_size()) {
        (Some(given), Some(known)) if given != known => {
            return Err(format_err(
                path,
                format!("dtype {descr} has {known}-byte items, not {given}"),
            ))
        }
        (Some(n), _) | (None, Some(n)) => n,
        (None, None) => {
            return Err(Error::invalid(
                path,
                format!("cannot tell the item size of dtype {descr}; pass it explicitly"),
            ))
        }
    };
    if size == 0 {
        return Err(format_err(path, format!("dtype {descr} has zero-byte items")));
    }
    Ok(size)
}

/// Bytes per row, from the item size and the row shape.
pub(super) fn row_bytes_of(path: &Path, item_size: usize, row_shape: &[u64]) -> Result<usize> {
    let items = row_shape.iter().try_fold(1u64, |a, &d| a.checked_mul(d));
    match items.and_then(|n| n.checked_mul(item_size as u64)).and_then(|b| usize::try_from(b).ok()) {
        Some(0) => Err(Error::invalid(
            path,
            format!("rows of zero bytes cannot be stored (item size {item_size}, row shape {row_shape:?})"),
        )),
        Some(b) => Ok(b),
        None => Err(Error::invalid(path, format!("row shape {row_shape:?} is too large"))),
    }
}

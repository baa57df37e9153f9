//! Small metadata files (vote, purge point, committed id): whole or absent.
//!
//! Each file is JSON followed by a line `crc32c=XXXXXXXX` over the JSON,
//! written through `mmapkit::fs::AtomicFile` (temp file beside it, rename;
//! with `sync`, fsync of the file before and of the directory after). A
//! reader therefore sees the old content, the new content, or (for a file
//! written without `sync`, after a power loss) possibly an empty or torn
//! file, which the CRC tells apart from a valid one.

use std::io::Write;
use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::{Error, Result};

/// Replaces `path` with `value` (durably when `sync`).
pub(crate) fn write<T: Serialize>(path: &Path, value: &T, sync: bool) -> Result<()> {
    let mut body = serde_json::to_vec(value).map_err(|e| Error::Encode(e.to_string()))?;
    let crc = crc32c::crc32c(&body);
    body.extend_from_slice(format!("\ncrc32c={crc:08x}\n").as_bytes());
    let mut f = mmapkit::fs::AtomicFile::create(path, &[])?;
    f.file_mut()
        .write_all(&body)
        .map_err(|e| Error::Io(path.to_owned(), "write", e))?;
    f.commit(sync)?;
    Ok(())
}

/// What a metadata file holds.
pub(crate) enum Read<T> {
    Missing,
    Valid(T),
    /// Empty, torn or damaged (the detail says how).
    Damaged(String),
}

/// Reads `path`.
pub(crate) fn read<T: DeserializeOwned>(path: &Path) -> Result<Read<T>> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Read::Missing),
        Err(e) => return Err(Error::Io(path.to_owned(), "read", e)),
    };
    Ok(parse(&bytes))
}

fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Read<T> {
    let text = match std::str::from_utf8(bytes) {
        Ok(t) => t,
        Err(_) => return Read::Damaged("not UTF-8".into()),
    };
    let Some((body, tail)) = text.trim_end_matches('\n').rsplit_once('\n') else {
        return Read::Damaged(format!("no checksum line ({} bytes)", bytes.len()));
    };
    let Some(crc) = tail.strip_prefix("crc32c=").and_then(|h| u32::from_str_radix(h, 16).ok()) else {
        return Read::Damaged("malformed checksum line".into());
    };
    if crc32c::crc32c(body.as_bytes()) != crc {
        return Read::Damaged("checksum mismatch".into());
    }
    match serde_json::from_str(body) {
        Ok(v) => Read::Valid(v),
        Err(e) => Read::Damaged(format!("checksummed but not readable: {e}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_every_damage_is_detected() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("m");
        assert!(matches!(read::<Vec<u64>>(&p).unwrap(), Read::Missing));
        write(&p, &vec![1u64, 2, 3], true).unwrap();
        let good = std::fs::read(&p).unwrap();
        assert!(matches!(read::<Vec<u64>>(&p).unwrap(), Read::Valid(v) if v == [1, 2, 3]));
        // Every truncation and every single-byte flip is reported, never misread.
        for cut in 0..good.len() - 1 {
            assert!(matches!(parse::<Vec<u64>>(&good[..cut]), Read::Damaged(_)), "cut at {cut}");
        }
        for i in 0..good.len() {
            for bit in 0..8 {
                let mut b = good.clone();
                b[i] ^= 1 << bit;
                match parse::<Vec<u64>>(&b) {
                    Read::Valid(v) => assert_eq!(v, [1, 2, 3], "flip at {i}.{bit} misread"),
                    Read::Damaged(_) => {}
                    Read::Missing => unreachable!(),
                }
            }
        }
        // Nothing is left beside it.
        assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 1);
    }
}

//! Typed views of bytes and of mapped files, and dispatch over the dtype.

use std::path::{Path, PathBuf};

use crate::map::{Advice, Map, MapOptions, Mode};
use crate::{Error, Result};

/// The element types statistics support (little-endian, native layout).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum DType {
    I8,
    U8,
    I16,
    U16,
    I32,
    U32,
    I64,
    U64,
    F32,
    F64,
}

impl DType {
    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::I8 | DType::U8 => 1,
            DType::I16 | DType::U16 => 2,
            DType::I32 | DType::U32 | DType::F32 => 4,
            DType::I64 | DType::U64 | DType::F64 => 8,
        }
    }

    /// Whether this is `float32` or `float64`.
    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64)
    }
}

impl std::str::FromStr for DType {
    type Err = Error;
    /// Accepts numpy's names (`int16`, `float64`) and array-protocol strings
    /// (`<i2`, `|u1`, `f8`); big-endian (`>i2`) is refused.
    fn from_str(s: &str) -> Result<DType> {
        let bad = || Error::InvalidArgument(format!("unsupported dtype {s:?}: statistics support int8..int64, uint8..uint64, float32 and float64 (little-endian)"));
        let t = match s {
            "int8" => "i1",
            "uint8" => "u1",
            "int16" => "i2",
            "uint16" => "u2",
            "int32" => "i4",
            "uint32" => "u4",
            "int64" => "i8",
            "uint64" => "u8",
            "float32" => "f4",
            "float64" => "f8",
            other => other,
        };
        let t = match t.as_bytes().first() {
            Some(b'<' | b'|' | b'=') => &t[1..],
            Some(b'>') if !t.ends_with('1') => return Err(bad()),
            Some(b'>') => &t[1..],
            _ => t,
        };
        Ok(match t {
            "i1" | "b" => DType::I8,
            "u1" | "B" => DType::U8,
            "i2" => DType::I16,
            "u2" => DType::U16,
            "i4" => DType::I32,
            "u4" => DType::U32,
            "i8" => DType::I64,
            "u8" => DType::U64,
            "f4" => DType::F32,
            "f8" => DType::F64,
            _ => return Err(bad()),
        })
    }
}

/// A typed slice of one of the supported element types.
#[derive(Clone, Copy, Debug)]
#[allow(missing_docs)]
pub enum Data<'a> {
    I8(&'a [i8]),
    U8(&'a [u8]),
    I16(&'a [i16]),
    U16(&'a [u16]),
    I32(&'a [i32]),
    U32(&'a [u32]),
    I64(&'a [i64]),
    U64(&'a [u64]),
    F32(&'a [f32]),
    F64(&'a [f64]),
}

/// Runs a generic expression on the typed slice inside a [`Data`]:
/// `with_data!(data, |s| stats::median(s, false))`.
#[macro_export]
macro_rules! with_data {
    ($data:expr, |$s:ident| $body:expr) => {
        match $data {
            $crate::stats::Data::I8($s) => $body,
            $crate::stats::Data::U8($s) => $body,
            $crate::stats::Data::I16($s) => $body,
            $crate::stats::Data::U16($s) => $body,
            $crate::stats::Data::I32($s) => $body,
            $crate::stats::Data::U32($s) => $body,
            $crate::stats::Data::I64($s) => $body,
            $crate::stats::Data::U64($s) => $body,
            $crate::stats::Data::F32($s) => $body,
            $crate::stats::Data::F64($s) => $body,
        }
    };
}

impl<'a> Data<'a> {
    /// Views `bytes` as elements of `dtype` without copying. Fails if the
    /// length is not a multiple of the element size or the bytes are not
    /// aligned for it; `label` names the source in the error.
    pub fn from_bytes(dtype: DType, bytes: &'a [u8], label: &Path) -> Result<Data<'a>> {
        let size = dtype.size();
        if !bytes.len().is_multiple_of(size) {
            return Err(Error::Format {
                path: label.to_owned(),
                detail: format!("{} bytes of data is not a whole number of {size}-byte elements", bytes.len()),
            });
        }
        fn cast<'b, T: bytemuck::Pod>(b: &'b [u8], label: &Path) -> Result<&'b [T]> {
            bytemuck::try_cast_slice(b).map_err(|_| {
                Error::invalid(label, format!(
                    "data is not aligned for {}-byte elements (use an offset that is a multiple of the element size)",
                    std::mem::align_of::<T>()
                ))
            })
        }
        if bytes.is_empty() {
            // An empty map's pointer may be unaligned; any empty slice will do.
            return Ok(match dtype {
                DType::I8 => Data::I8(&[]),
                DType::U8 => Data::U8(&[]),
                DType::I16 => Data::I16(&[]),
                DType::U16 => Data::U16(&[]),
                DType::I32 => Data::I32(&[]),
                DType::U32 => Data::U32(&[]),
                DType::I64 => Data::I64(&[]),
                DType::U64 => Data::U64(&[]),
                DType::F32 => Data::F32(&[]),
                DType::F64 => Data::F64(&[]),
            });
        }
        Ok(match dtype {
            DType::I8 => Data::I8(cast(bytes, label)?),
            DType::U8 => Data::U8(bytes),
            DType::I16 => Data::I16(cast(bytes, label)?),
            DType::U16 => Data::U16(cast(bytes, label)?),
            DType::I32 => Data::I32(cast(bytes, label)?),
            DType::U32 => Data::U32(cast(bytes, label)?),
            DType::I64 => Data::I64(cast(bytes, label)?),
            DType::U64 => Data::U64(cast(bytes, label)?),
            DType::F32 => Data::F32(cast(bytes, label)?),
            DType::F64 => Data::F64(cast(bytes, label)?),
        })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Data::I8(_) => DType::I8,
            Data::U8(_) => DType::U8,
            Data::I16(_) => DType::I16,
            Data::U16(_) => DType::U16,
            Data::I32(_) => DType::I32,
            Data::U32(_) => DType::U32,
            Data::I64(_) => DType::I64,
            Data::U64(_) => DType::U64,
            Data::F32(_) => DType::F32,
            Data::F64(_) => DType::F64,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        with_data!(*self, |s| s.len())
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Whether `path` starts with the `.npy` magic.
fn is_npy(path: &Path) -> Result<bool> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| Error::io(path, "open", e))?;
    let mut magic = [0u8; 6];
    let mut got = 0;
    while got < magic.len() {
        match f.read(&mut magic[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::io(path, "read", e)),
        }
    }
    Ok(&magic[..got] == b"\x93NUMPY")
}

/// A file (or part of one) mapped read-only as a flat array.
#[derive(Debug)]
pub struct MappedArray {
    map: Map,
    dtype: DType,
    path: PathBuf,
}

impl MappedArray {
    /// Maps `path` as elements of `dtype`, from byte `offset` to the end of
    /// the file, or `count` elements when given.
    ///
    /// With `dtype` `None` the file must be a `.npy` file: the dtype, data
    /// offset and element count (the product of the shape, so reserved
    /// capacity of a growable store is ignored) come from its header, and
    /// `offset`/`count` must be `0`/`None`.
    ///
    /// A `.npy` file (recognised by its magic, whatever its name) is always
    /// read through its header, even with a `dtype`: that must then be the
    /// header's (else [`Error::InvalidArgument`]), and `offset`/`count` must
    /// be `0`/`None`. A header claiming more data than the file holds is a
    /// [`Error::Format`].
    pub fn open(path: impl AsRef<Path>, dtype: Option<DType>, offset: u64, count: Option<u64>) -> Result<MappedArray> {
        let path = path.as_ref();
        let npy = dtype.is_none() || is_npy(path)?;
        let (dtype, offset, count) = if !npy {
            (dtype.expect("raw files have a dtype"), offset, count)
        } else {
            if offset != 0 || count.is_some() {
                return Err(Error::invalid(path, "offset and count apply to raw files; a .npy file is read through its header"));
            }
            let (header, data_offset) = crate::store::array::read_header_of(path)?;
            let fmt = |detail: String| Error::Format { path: path.to_owned(), detail };
            let d = header
                .simple_dtype()
                .ok_or_else(|| fmt(format!("structured dtype {} is not supported by statistics", header.descr)))?;
            let have: DType = d.parse().map_err(|_| fmt(format!("dtype {d} is not supported by statistics")))?;
            if dtype.is_some_and(|want| want != have) {
                return Err(Error::InvalidArgument(format!(
                    "{}: dtype {:?} conflicts with the .npy header's {d}",
                    path.display(),
                    dtype.unwrap()
                )));
            }
            let n = header.shape.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
            let need = n
                .and_then(|n| n.checked_mul(have.size() as u64))
                .and_then(|b| b.checked_add(data_offset as u64))
                .ok_or_else(|| fmt(format!("shape {:?} is too large", header.shape)))?;
            let file_len = std::fs::metadata(path).map_err(|e| Error::io(path, "stat", e))?.len();
            if file_len < need {
                return Err(fmt(format!(
                    "the header says shape {:?} ({need} bytes) but the file has only {file_len} bytes",
                    header.shape
                )));
            }
            (have, data_offset as u64, n)
        };
        let mut opts = MapOptions::new();
        opts.mode(Mode::Read).offset(offset);
        if let Some(c) = count {
            let len = c
                .checked_mul(dtype.size() as u64)
                .and_then(|l| usize::try_from(l).ok())
                .ok_or_else(|| Error::InvalidArgument(format!("{c} elements do not fit in memory")))?;
            opts.len(len);
        }
        let map = opts.open(path)?;
        // Every statistic streams the whole range: ask for aggressive read-ahead.
        // Advice is only a hint, so a refusal is not an error.
        let _ = map.advise(Advice::Sequential, 0, None);
        Ok(MappedArray { map, dtype, path: path.to_owned() })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.dtype
    }

    /// The underlying map (for advice, residency, ...).
    pub fn map(&self) -> &Map {
        &self.map
    }

    /// Runs `f` on the typed data; a truncation of the file by another
    /// process during `f` is reported as [`Error::FileTruncated`].
    pub fn with<R>(&self, f: impl FnOnce(Data<'_>) -> R) -> Result<R> {
        let data = Data::from_bytes(self.dtype, self.map.as_slice(), &self.path)?;
        self.map.read_with(|_| f(data))
    }
}

//! Typed views of bytes and of mapped files, and dispatch over the dtype.

use std::path::{Path, PathBuf};

use crate::dtype::{DType, Native};
use crate::with_dtype;
use crate::map::{Advice, Map, MapOptions, Mode};
use crate::{Error, Result};

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

macro_rules! data_from {
    ($($t:ty => $v:ident),*) => {$(
        impl<'a> From<&'a [$t]> for Data<'a> {
            fn from(s: &'a [$t]) -> Data<'a> {
                Data::$v(s)
            }
        }
    )*};
}

data_from!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
           i64 => I64, u64 => U64, f32 => F32, f64 => F64);

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
        if bytes.is_empty() {
            // An empty map's pointer may be unaligned; any empty slice will do.
            return Ok(with_dtype!(dtype, |T| Data::from(&[] as &[T])));
        }
        with_dtype!(dtype, |T| bytemuck::try_cast_slice::<u8, T>(bytes).map(Data::from).map_err(|_| {
            Error::invalid(label, format!(
                "data is not aligned for {}-byte elements (use an offset that is a multiple of the element size)",
                std::mem::align_of::<T>()
            ))
        }))
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        fn of<T: Native>(_: &[T]) -> DType {
            T::DTYPE
        }
        with_data!(*self, |s| of(s))
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
                    "{}: dtype {} conflicts with the .npy header's {d}",
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

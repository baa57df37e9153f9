//! Typed views of bytes and of mapped files, and dispatch over the dtype.

use std::fs::File;
use std::path::{Path, PathBuf};

use super::source::{Reader, Streamed, BLOCK_BYTES};
use super::{Histogram, Method, Sum, Value};
use crate::dtype::{DType, Native};
use crate::map::{Advice, Map, MapOptions, Mode};
use crate::scan::source::Source;
use crate::scan::Strategy;
use crate::with_dtype;
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
                detail: format!(
                    "{} bytes of data is not a whole number of {size}-byte elements",
                    bytes.len()
                ),
            });
        }
        if bytes.is_empty() {
            // An empty map's pointer may be unaligned; any empty slice will do.
            return Ok(with_dtype!(dtype, |T| Data::from(&[] as &[T])));
        }
        with_dtype!(dtype, |T| {
            bytemuck::try_cast_slice::<u8, T>(bytes).map(Data::from).map_err(|_| {
            Error::invalid(label, format!(
                "data is not aligned for {}-byte elements (use an offset that is a multiple of the element size)",
                std::mem::align_of::<T>()
            ))
        })
        })
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

/// Whether the regular file `file` starts with the `.npy` magic (pread:
/// the file is the one already open, never the name again).
fn is_npy(file: &File, path: &Path) -> Result<bool> {
    let mut magic = [0u8; 6];
    let got =
        crate::map::pread_full(file, &mut magic, 0).map_err(|e| Error::io(path, "read", e))?;
    Ok(&magic[..got] == b"\x93NUMPY")
}

#[cfg(test)]
thread_local! {
    /// Tests: runs once right after [`MappedArray::open`] read a `.npy`
    /// header (to replace the file there).
    pub(crate) static AFTER_HEADER: std::cell::RefCell<Option<Box<dyn FnOnce()>>> = std::cell::RefCell::new(None);
}

fn after_header() {
    #[cfg(test)]
    if let Some(f) = AFTER_HEADER.with(|h| h.borrow_mut().take()) {
        f();
    }
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
    pub fn open(
        path: impl AsRef<Path>,
        dtype: Option<DType>,
        offset: u64,
        count: Option<u64>,
    ) -> Result<MappedArray> {
        let path = path.as_ref();
        // One open; the magic, the header, the length and the mapping all
        // come through this descriptor, so a name replaced meanwhile (an
        // `ArrayStore::create` renames over it) cannot pair one file's
        // header with another's data; a FIFO is refused unread.
        let file = crate::fs::open_regular(path, "array files are mapped")?;
        let npy = dtype.is_none() || is_npy(&file, path)?;
        let (dtype, offset, count) = if !npy {
            (dtype.expect("raw files have a dtype"), offset, count)
        } else {
            if offset != 0 || count.is_some() {
                return Err(Error::invalid(
                    path,
                    "offset and count apply to raw files; a .npy file is read through its header",
                ));
            }
            let (header, data_offset) = crate::store::array::read_header_stable(&file, path)?;
            after_header();
            let fmt = |detail: String| Error::Format { path: path.to_owned(), detail };
            let d = header.simple_dtype().ok_or_else(|| {
                fmt(format!("structured dtype {} is not supported by statistics", header.descr))
            })?;
            let have: DType =
                d.parse().map_err(|_| fmt(format!("dtype {d} is not supported by statistics")))?;
            if let Some(want) = dtype.filter(|&want| want != have) {
                return Err(Error::invalid(
                    path,
                    format!("dtype {want} conflicts with the .npy header's {d}"),
                ));
            }
            let n = header.shape.iter().try_fold(1u64, |a, &x| a.checked_mul(x));
            let need = n
                .and_then(|n| n.checked_mul(have.size() as u64))
                .and_then(|b| b.checked_add(data_offset as u64))
                .ok_or_else(|| fmt(format!("shape {:?} is too large", header.shape)))?;
            // Again after the header: a store may have grown meanwhile.
            let file_len = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
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
                .ok_or_else(|| {
                    Error::invalid(path, format!("{c} elements do not fit in memory"))
                })?;
            opts.len(len);
        }
        let map = opts.map(file, path)?;
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

/// Resident share of a file's range from which [`Strategy::Auto`] maps it
/// instead of reading it: page faults on cached pages cost less than
/// copying them out, but faults on uncached ones get small, scattered I/O
/// (a strided sample, two workers reading far apart), while `pread`s of
/// [`BLOCK_BYTES`] in file order stream at the disk's speed.
pub const AUTO_MMAP_RESIDENT: f64 = 0.9;

/// A file (or part of one) as a flat array, read through a mapping or with
/// large sequential `pread`s; see [`ArrayFile::open`].
#[derive(Debug)]
pub struct ArrayFile {
    array: MappedArray,
    /// The `pread` source when reading (not mapping) the data.
    read: Option<Source>,
}

impl std::fmt::Debug for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Source::Mapped(_) => "Source::Mapped",
            Source::Read { .. } => "Source::Read",
        })
    }
}

impl ArrayFile {
    /// Opens the elements [`MappedArray::open`] would (same arguments, same
    /// errors), to be read with `strategy`: [`Strategy::Mmap`] maps them,
    /// [`Strategy::Read`] (or `Stream`) reads them in order with `pread`
    /// into per-worker buffers, and [`Strategy::Auto`] maps them when at
    /// least 90 % (`AUTO_MMAP_RESIDENT`) of the range is in the page cache
    /// (`mincore`) and reads them otherwise. Every statistic gives the same
    /// result either way.
    pub fn open(
        path: impl AsRef<Path>,
        dtype: Option<DType>,
        offset: u64,
        count: Option<u64>,
        strategy: Strategy,
    ) -> Result<ArrayFile> {
        let path = path.as_ref();
        let array = MappedArray::open(path, dtype, offset, count)?;
        let read = match strategy {
            Strategy::Mmap => false,
            Strategy::Read | Strategy::Stream => true,
            Strategy::Auto => {
                let r = array.map.residency()?;
                r.mapped_bytes > 0
                    && (r.resident_bytes as f64) < AUTO_MMAP_RESIDENT * r.mapped_bytes as f64
            }
        };
        let read = if read {
            let file = array.map.file().try_clone().map_err(|e| Error::io(path, "dup", e))?;
            let len = file.metadata().map_err(|e| Error::io(path, "stat", e))?.len();
            // Tell the kernel the file is read front to back (larger read-ahead).
            crate::map::fadvise_sequential(&file);
            Some(Source::Read { file, len, path: path.to_owned() })
        } else {
            None
        };
        Ok(ArrayFile { array, read })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        self.array.dtype
    }

    /// The strategy in use: [`Strategy::Mmap`] or [`Strategy::Read`].
    pub fn strategy(&self) -> Strategy {
        if self.read.is_some() {
            Strategy::Read
        } else {
            Strategy::Mmap
        }
    }

    /// Runs `f` on the elements; a truncation of the file by another
    /// process during `f` is an error ([`Error::FileTruncated`] when
    /// mapped, [`Error::Truncated`] when read).
    pub fn with<R>(&self, f: impl FnOnce(Input<'_>) -> R) -> Result<R> {
        let a = &self.array;
        // The same checks (whole elements, alignment) whichever the source.
        let data = Data::from_bytes(a.dtype, a.map.as_slice(), &a.path)?;
        match &self.read {
            None => a.map.read_with(|_| f(Input::Memory(data))),
            Some(source) => Ok(f(Input::File(FileData {
                source,
                offset: a.map.offset(),
                len: data.len(),
                dtype: a.dtype,
            }))),
        }
    }
}

/// The elements of a file read with `pread` (see [`ArrayFile`]).
#[derive(Clone, Copy, Debug)]
pub struct FileData<'a> {
    source: &'a Source,
    offset: u64,
    len: usize,
    dtype: DType,
}

/// Elements a caller copies out on request (see [`Input::copied`]).
#[derive(Clone, Copy)]
pub struct CopiedData<'a> {
    read: &'a (dyn Fn(usize, &mut [u8]) + Sync),
    len: usize,
    dtype: DType,
}

impl std::fmt::Debug for CopiedData<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CopiedData {{ len: {}, dtype: {} }}", self.len, self.dtype)
    }
}

/// What a statistic reads: elements in memory, a file read in blocks, or
/// blocks a caller copies out.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    /// A typed slice (an array in memory, or a mapped file).
    Memory(Data<'a>),
    /// A file read with large sequential `pread`s.
    File(FileData<'a>),
    /// Memory another thread may write, copied out by the caller (see
    /// [`Input::copied`]).
    Copied(CopiedData<'a>),
}

/// Runs a generic expression on the elements of an [`Input`], bound to
/// `$s` as a `&[T]` or a `&Streamed<T>` (both [`Elements`](super::source::Elements)).
macro_rules! on_input {
    ($input:expr, |$s:ident| $body:expr) => {
        match $input {
            Input::Memory(d) => $crate::with_data!(d, |$s| $body),
            Input::File(f) => with_dtype!(f.dtype, |T| {
                let streamed = Streamed::<T>::new(f.source, f.offset, f.len, BLOCK_BYTES);
                let $s = &streamed;
                $body
            }),
            Input::Copied(c) => with_dtype!(c.dtype, |T| {
                let reader = Reader(c.read);
                let streamed = Streamed::<T, Reader<'_>>::new(&reader, 0, c.len, BLOCK_BYTES);
                let $s = &streamed;
                $body
            }),
        }
    };
}

impl<'a> Input<'a> {
    /// `len` elements of `dtype` that the caller copies out on request:
    /// `read(byte_offset, dst)` fills `dst` (whole elements, up to
    /// 8 MiB, 8-byte aligned, a worker's reused buffer) with the
    /// bytes from `byte_offset`. For memory that another thread may write
    /// meanwhile (a Python buffer), which must never be read through a
    /// slice: the reader copies atomically, and a racing write gives some
    /// value, never undefined behaviour. Results equal [`Input::Memory`]'s
    /// over the same bytes (the same chunks, merged in the same order).
    pub fn copied(
        dtype: DType,
        len: usize,
        read: &'a (dyn Fn(usize, &mut [u8]) + Sync),
    ) -> Input<'a> {
        Input::Copied(CopiedData { read, len, dtype })
    }

    /// The element type.
    pub fn dtype(&self) -> DType {
        match self {
            Input::Memory(d) => d.dtype(),
            Input::File(f) => f.dtype,
            Input::Copied(c) => c.dtype,
        }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        match self {
            Input::Memory(d) => d.len(),
            Input::File(f) => f.len,
            Input::Copied(c) => c.len,
        }
    }

    /// Whether there are no elements.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// [`median`](super::median).
    pub fn median(self, skipna: bool) -> Result<f64> {
        on_input!(self, |s| super::median_in(s, skipna))
    }

    /// [`quantiles`](super::quantiles), or [`quantiles_wide`](super::quantiles_wide) with `wide`.
    pub fn quantiles(
        self,
        qs: &[f64],
        method: Method,
        skipna: bool,
        wide: bool,
    ) -> Result<Vec<Value>> {
        on_input!(self, |s| super::quantiles_in(s, qs, method, skipna, wide))
    }

    /// [`min`](super::min).
    pub fn min(self, skipna: bool) -> Result<Value> {
        on_input!(self, |s| super::extreme_in(s, skipna, false))
    }

    /// [`max`](super::max).
    pub fn max(self, skipna: bool) -> Result<Value> {
        on_input!(self, |s| super::extreme_in(s, skipna, true))
    }

    /// [`sum`](super::sum).
    pub fn sum(self, skipna: bool) -> Result<Sum> {
        on_input!(self, |s| super::sum_count_in(s, skipna).map(|(sum, _)| sum))
    }

    /// [`mean`](super::mean).
    pub fn mean(self, skipna: bool) -> Result<f64> {
        on_input!(self, |s| super::mean_in(s, skipna))
    }

    /// [`histogram`](super::histogram).
    pub fn histogram(self, bins: usize, range: Option<(f64, f64)>) -> Result<Histogram> {
        on_input!(self, |s| super::hist::histogram_in(s, bins, range))
    }
}

impl<'a> From<Data<'a>> for Input<'a> {
    fn from(d: Data<'a>) -> Input<'a> {
        Input::Memory(d)
    }
}

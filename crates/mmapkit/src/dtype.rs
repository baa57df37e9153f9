//! Element types: the one vocabulary for typed bytes, shared by `stats`
//! (what it computes on), `store` (`.npy` type strings), `writer`/`kmer`
//! (the records' `.npy` dtype) and the Python binding.
//!
//! [`DType`] names the ten numeric types mmapkit computes on. Its canonical
//! spelling is numpy's name (`float64`, shown by `Display`); parsing also
//! takes the `.npy` / array-protocol type strings (`<f8`, `|u1`, `=i4`,
//! `f8`) and the one-letter codes `b`/`B`. Rust spellings are not taken:
//! numpy's `i8` and `u8` mean 8-byte integers. Data is little-endian: a
//! big-endian type string (`>i2`) is refused, except for 1-byte types,
//! where byte order means nothing.
//!
//! [`TypeStr`] takes apart any simple numpy type string (`<U10`,
//! `<M8[ns]`, ...), for code that stores dtypes it does not compute on.
//! Generic code dispatches over a [`DType`] with [`with_dtype!`](crate::with_dtype); [`Native`]
//! ties each Rust type to its [`DType`].

use crate::{Error, Result};

/// A numeric element type; see the [module docs](self).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// (variant, numpy name, `.npy` type string): the one table of spellings.
const TABLE: [(DType, &str, &str); 10] = [
    (DType::I8, "int8", "|i1"),
    (DType::U8, "uint8", "|u1"),
    (DType::I16, "int16", "<i2"),
    (DType::U16, "uint16", "<u2"),
    (DType::I32, "int32", "<i4"),
    (DType::U32, "uint32", "<u4"),
    (DType::I64, "int64", "<i8"),
    (DType::U64, "uint64", "<u8"),
    (DType::F32, "float32", "<f4"),
    (DType::F64, "float64", "<f8"),
];

impl DType {
    /// Every type, in the order of the variants.
    pub const ALL: [DType; 10] = {
        let mut all = [DType::I8; 10];
        let mut i = 0;
        while i < 10 {
            all[i] = TABLE[i].0;
            i += 1;
        }
        all
    };

    fn row(self) -> &'static (DType, &'static str, &'static str) {
        &TABLE[self as usize]
    }

    /// numpy's name (`"float64"`): the canonical spelling.
    pub fn name(self) -> &'static str {
        self.row().1
    }

    /// The `.npy` header's type string (`"<f8"`, `"|u1"`), little-endian.
    pub fn descr(self) -> &'static str {
        self.row().2
    }

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

    /// The type a parsed type string names, if it is one of ours in an
    /// order we can read (little-endian, native, or any for 1 byte).
    pub fn from_typestr(t: &TypeStr<'_>) -> Option<DType> {
        if t.unit.is_some() || (t.order == Some('>') && t.count != 1) {
            return None;
        }
        TABLE.iter().map(|r| r.0).find(|d| {
            let kind = match d {
                DType::F32 | DType::F64 => 'f',
                DType::U8 | DType::U16 | DType::U32 | DType::U64 => 'u',
                _ => 'i',
            };
            kind == t.kind && d.size() == t.count
        })
    }
}

impl std::fmt::Display for DType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for DType {
    type Err = Error;
    /// numpy names (`int16`, `float64`), type strings (`<i2`, `|u1`, `f8`)
    /// and `b`/`B`; see the [module docs](self).
    fn from_str(s: &str) -> Result<DType> {
        let found = match s {
            "b" => Some(DType::I8),
            "B" => Some(DType::U8),
            _ => TABLE
                .iter()
                .find(|r| r.1 == s)
                .map(|r| r.0)
                .or_else(|| TypeStr::parse(s).as_ref().and_then(DType::from_typestr)),
        };
        found.ok_or_else(|| {
            Error::InvalidArgument(format!(
                "unsupported dtype {s:?} (expected one of {}, or its little-endian type string such as \"<f8\")",
                crate::names::one_of(&TABLE.map(|r| r.1))
            ))
        })
    }
}

/// A simple numpy type string taken apart: `[order] kind count [\[unit\]]`
/// (`<f8`, `|S3`, `<U10`, `<M8[ns]`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeStr<'a> {
    /// `<`, `>`, `|` or `=`, if given.
    pub order: Option<char>,
    /// numpy's kind letter (`i`, `u`, `f`, `c`, `S`, `U`, `M`, ...).
    pub kind: char,
    /// The number after the kind: bytes, or characters for `U`.
    pub count: usize,
    /// The datetime unit in brackets (`ns`), if any.
    pub unit: Option<&'a str>,
}

impl<'a> TypeStr<'a> {
    /// Parses `s`; None unless it has the shape above (any ASCII kind
    /// letter; whether numpy knows it is the caller's question).
    pub fn parse(s: &'a str) -> Option<TypeStr<'a>> {
        let order = s.chars().next().filter(|c| matches!(c, '<' | '>' | '|' | '='));
        let rest = &s[order.map_or(0, char::len_utf8)..];
        let kind = rest.chars().next().filter(char::is_ascii_alphabetic)?;
        let rest = &rest[1..];
        let digits = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        let count = rest[..digits].parse().ok()?;
        let unit = match &rest[digits..] {
            "" => None,
            u => Some(
                u.strip_prefix('[')
                    .and_then(|u| u.strip_suffix(']'))
                    .filter(|u| !u.is_empty() && u.chars().all(|c| c.is_ascii_alphanumeric()))?,
            ),
        };
        Some(TypeStr { order, kind, count, unit })
    }

    /// Bytes per item (`U` counts UCS-4 characters, 4 bytes each); None
    /// when a datetime unit makes the count not plainly bytes.
    pub fn item_size(&self) -> Option<usize> {
        if self.unit.is_some() {
            return None;
        }
        Some(if self.kind == 'U' { self.count * 4 } else { self.count })
    }
}

/// A Rust type that is the in-memory form of a [`DType`] (the ten
/// primitive integer and float types).
pub trait Native: bytemuck::Pod + Send + Sync + PartialOrd + std::fmt::Debug + 'static {
    /// The element type this Rust type stores.
    const DTYPE: DType;
}

/// Copies little-endian `.npy`/raw data into a vector of `T` (a trailing
/// partial element is dropped). mmapkit's data is little-endian, like the
/// hosts it runs on; typed views of mapped data rely on that too.
pub fn collect_le<T: Native>(bytes: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    let n = bytes.len() / size;
    let mut out = vec![T::zeroed(); n];
    bytemuck::cast_slice_mut::<T, u8>(&mut out).copy_from_slice(&bytes[..n * size]);
    out
}

macro_rules! native {
    ($($t:ty => $d:ident),*) => {$(
        impl Native for $t {
            const DTYPE: DType = DType::$d;
        }
    )*};
}

native!(i8 => I8, u8 => U8, i16 => I16, u16 => U16, i32 => I32, u32 => U32,
        i64 => I64, u64 => U64, f32 => F32, f64 => F64);

/// Runs generic code for the Rust type of a [`DType`]:
/// `with_dtype!(dtype, |T| std::mem::size_of::<T>())` expands to one match
/// arm per type, with `T` an alias of that arm's Rust type.
#[macro_export]
macro_rules! with_dtype {
    ($dtype:expr, |$t:ident| $body:expr) => {
        $crate::with_dtype!(@arms $dtype, $t, $body,
            I8 i8, U8 u8, I16 i16, U16 u16, I32 i32, U32 u32, I64 i64, U64 u64, F32 f32, F64 f64)
    };
    (@arms $dtype:expr, $t:ident, $body:expr, $($v:ident $ty:ty),*) => {
        match $dtype {
            $($crate::dtype::DType::$v => {
                type $t = $ty;
                $body
            })*
        }
    };
}

#[cfg(test)]
mod tests;

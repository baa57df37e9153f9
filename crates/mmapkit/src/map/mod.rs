//! STUB — being written. API promised to other modules:
//! Map::open(path, Mode) -> Result<Map>; Map::len(); Map::residency() -> Result<Residency>;
//! map::drop_cache(path) -> Result<()>
#![allow(missing_docs, unused)]
use crate::Result;
use std::path::Path;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode { Read, ReadWrite, CopyOnWrite }

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Residency { pub resident_bytes: u64, pub mapped_bytes: u64 }

pub struct Map;
impl Map {
    pub fn open(path: impl AsRef<Path>, mode: Mode) -> Result<Map> { todo!() }
    pub fn len(&self) -> usize { todo!() }
    pub fn is_empty(&self) -> bool { todo!() }
    pub fn residency(&self) -> Result<Residency> { todo!() }
}
pub fn drop_cache(path: impl AsRef<Path>) -> Result<()> { todo!() }

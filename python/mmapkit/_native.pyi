"""Type stubs for the native extension (checked with mypy.stubtest)."""

import os
import pathlib
from types import TracebackType
from typing import Any, Optional, Sequence, Union, final, overload

import numpy as np
import numpy.typing as npt
from typing_extensions import Buffer, Self, disjoint_base

__all__ = [
    "__version__",
    "MappedFile",
    "mmap",
    "FileTruncatedError",
    "DiskFullError",
    "ReservationExhaustedError",
    "CorruptError",
    "FormatError",
    "drop_cache",
    "page_size",
    "count",
    "find",
    "find_all",
    "grep",
    "grep_count",
    "replace",
    "keep_lines",
    "kmers",
    "kmer_labels",
    "RecordWriter",
    "ACCESS_DEFAULT",
    "ACCESS_READ",
    "ACCESS_WRITE",
    "ACCESS_COPY",
]

__version__: str
ACCESS_DEFAULT: int
ACCESS_READ: int
ACCESS_WRITE: int
ACCESS_COPY: int

class FileTruncatedError(OSError): ...
class DiskFullError(OSError): ...
class ReservationExhaustedError(BufferError): ...
class CorruptError(OSError): ...
class FormatError(ValueError): ...

def drop_cache(path: Union[str, os.PathLike[str]]) -> None: ...
def page_size() -> int: ...

_Path = Union[str, os.PathLike[str]]
_Pattern = Union[bytes, str]

def count(path: _Path, sub: _Pattern, *, strategy: str = "auto", threads: int = 0) -> int: ...
def find(path: _Path, sub: _Pattern, *, last: bool = False, strategy: str = "auto", threads: int = 0) -> int: ...
def find_all(
    path: _Path, sub: _Pattern, *, max: Optional[int] = None, strategy: str = "auto", threads: int = 0
) -> npt.NDArray[np.int64]: ...
def grep(
    path: _Path,
    pattern: _Pattern,
    *,
    ignore_case: bool = False,
    invert: bool = False,
    fixed: bool = False,
    only_matching: bool = False,
    max_count: Optional[int] = None,
    strategy: str = "auto",
    threads: int = 0,
) -> list[tuple[int, int, bytes]]: ...
def grep_count(
    path: _Path,
    pattern: _Pattern,
    *,
    ignore_case: bool = False,
    invert: bool = False,
    fixed: bool = False,
    max_count: Optional[int] = None,
    strategy: str = "auto",
    threads: int = 0,
) -> int: ...
def replace(
    path: _Path,
    pattern: _Pattern,
    replacement: _Pattern,
    *,
    regex: bool = False,
    dry_run: bool = False,
    backup: Optional[str] = None,
    sync: bool = False,
    strategy: str = "auto",
    threads: int = 0,
) -> int: ...
def keep_lines(path: _Path, n: int) -> int: ...
@overload
def kmers(
    path: _Path,
    k: int = 4,
    out: None = None,
    *,
    format: None = None,
    counts: bool = False,
    mode: str = "mmap",
    threads: Optional[int] = None,
    sync: bool = False,
) -> npt.NDArray[Any]: ...
@overload
def kmers(
    path: _Path,
    k: int,
    out: _Path,
    *,
    format: Optional[str] = None,
    counts: bool = False,
    mode: str = "mmap",
    threads: Optional[int] = None,
    sync: bool = False,
) -> int: ...
@overload
def kmers(
    path: _Path,
    k: int = 4,
    *,
    out: _Path,
    format: Optional[str] = None,
    counts: bool = False,
    mode: str = "mmap",
    threads: Optional[int] = None,
    sync: bool = False,
) -> int: ...
def kmer_labels(k: int) -> list[str]: ...
@final
class RecordWriter:
    def __new__(
        cls,
        path: _Path,
        width: int,
        n: Optional[int] = None,
        *,
        header: Optional[bytes] = None,
        npy: Optional[tuple[str, Sequence[int]]] = None,
        sync: bool = False,
    ) -> Self: ...
    def write(self, i: int, data: bytes) -> None: ...
    def write_many(self, start: int, data: bytes) -> None: ...
    def release(self, upto: int) -> None: ...
    def finish(self) -> int: ...
    def abort(self) -> None: ...
    @property
    def width(self) -> int: ...
    @property
    def path(self) -> pathlib.Path: ...
    @property
    def records(self) -> int: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *args: object) -> bool: ...

@disjoint_base
class MappedFile:
    def __new__(
        cls,
        path: Union[str, os.PathLike[str]],
        mode: str = "r",
        size: Optional[int] = None,
        offset: int = 0,
        length: Optional[int] = None,
        reserve: Optional[int] = None,
    ) -> Self: ...
    def close(self) -> None: ...
    @property
    def closed(self) -> bool: ...
    def __enter__(self) -> Self: ...
    def __exit__(self, *_args: object) -> None: ...
    def __reduce__(self) -> tuple[Any, ...]: ...
    def __len__(self) -> int: ...
    def size(self) -> int: ...
    def resize(self, newsize: int) -> None: ...
    def grow(self, nbytes: int) -> int: ...
    def refresh(self) -> int: ...
    def read(self, n: Optional[int] = None) -> bytes: ...
    def read_byte(self) -> int: ...
    def readline(self) -> bytes: ...
    def write(self, data: Buffer) -> int: ...
    def write_byte(self, byte: int) -> None: ...
    def seek(self, pos: int, whence: int = 0) -> int: ...
    def tell(self) -> int: ...
    def move(self, dest: int, src: int, count: int) -> None: ...
    def find(self, sub: Buffer, start: Optional[int] = None, end: Optional[int] = None) -> int: ...
    def rfind(self, sub: Buffer, start: Optional[int] = None, end: Optional[int] = None) -> int: ...
    def count(self, sub: Buffer) -> int: ...
    def find_all(self, sub: Buffer, limit: Optional[int] = None) -> npt.NDArray[np.int64]: ...
    def flush(self, offset: int = 0, size: Optional[int] = None, *, sync: bool = True) -> None: ...
    def advise(self, advice: Union[str, int], offset: int = 0, length: Optional[int] = None) -> None: ...
    def madvise(self, option: int, start: int = 0, length: Optional[int] = None) -> None: ...
    def populate(self, write: bool = False) -> None: ...
    def residency(self) -> tuple[int, int]: ...
    def numpy(
        self,
        dtype: Optional[npt.DTypeLike] = None,
        shape: Union[int, Sequence[int], None] = None,
        offset: int = 0,
    ) -> npt.NDArray[Any]: ...
    @property
    def path(self) -> Optional[str]: ...
    @property
    def mode(self) -> str: ...
    @property
    def offset(self) -> int: ...
    @property
    def readonly(self) -> bool: ...
    @property
    def reserved(self) -> int: ...
    def __getitem__(self, key: Union[int, slice], /) -> Any: ...
    def __setitem__(self, key: Union[int, slice], value: Any, /) -> None: ...
    def __delitem__(self, key: Any, /) -> None: ...
    def __buffer__(self, flags: int, /) -> memoryview: ...
    def __release_buffer__(self, buffer: memoryview, /) -> None: ...

class mmap(MappedFile):
    def __new__(  # type: ignore[misc]
        cls,
        fileno: int,
        length: int,
        flags: int = ...,
        prot: int = ...,
        access: int = ...,
        offset: int = 0,
        *,
        trackfd: bool = True,
    ) -> Self: ...
    def flush(self, offset: int = 0, size: Optional[int] = None) -> None: ...  # type: ignore[override]

"""Type stubs for the native extension (checked with mypy.stubtest)."""

import os
from types import TracebackType
from typing import Any, Optional, Sequence, Union, final

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
    "stats_median",
    "stats_quantile",
    "stats_histogram",
    "stats_extreme",
    "stats_sum",
    "stats_mean",
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

# mmapkit.stats natives: ``src`` is a contiguous numpy array or a path;
# each returns the source's dtype name with the result.
_Src = Union[npt.NDArray[Any], str, os.PathLike[str]]

def stats_median(
    src: _Src, *, dtype: Optional[str] = None, offset: int = 0, count: Optional[int] = None, skipna: bool = False
) -> tuple[str, float]: ...
def stats_quantile(
    src: _Src,
    qs: Sequence[float],
    *,
    method: str = "linear",
    wide: bool = False,
    dtype: Optional[str] = None,
    offset: int = 0,
    count: Optional[int] = None,
    skipna: bool = False,
) -> tuple[str, list[Union[int, float]]]: ...
def stats_histogram(
    src: _Src,
    bins: int = 10,
    range: Optional[tuple[float, float]] = None,
    *,
    dtype: Optional[str] = None,
    offset: int = 0,
    count: Optional[int] = None,
) -> tuple[str, npt.NDArray[np.int64], npt.NDArray[np.float64]]: ...
def stats_extreme(
    src: _Src,
    which: str,
    *,
    dtype: Optional[str] = None,
    offset: int = 0,
    count: Optional[int] = None,
    skipna: bool = False,
) -> tuple[str, Union[int, float]]: ...
def stats_sum(
    src: _Src, *, dtype: Optional[str] = None, offset: int = 0, count: Optional[int] = None, skipna: bool = False
) -> tuple[str, Union[int, float]]: ...
def stats_mean(
    src: _Src, *, dtype: Optional[str] = None, offset: int = 0, count: Optional[int] = None, skipna: bool = False
) -> tuple[str, float]: ...

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

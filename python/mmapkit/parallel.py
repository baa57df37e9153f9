"""Chunk-parallel map over worker processes: :func:`map_chunks`.

Each worker maps the array itself (by path: an :class:`~mmapkit.ArrayStore`,
a :class:`~mmapkit.SharedArray`, a ``np.memmap`` or a ``.npy`` path), once,
when it starts; a task is just ``(start, stop)``. So handing a 10 GB array
to N workers pickles a few hundred bytes, not 10 GB:

>>> import numpy as np, mmapkit
>>> np.save("ints.npy", np.arange(1000))
>>> def total(chunk):
...     return chunk.sum(dtype=np.int64)
>>> parts = mmapkit.parallel.map_chunks(total, "ints.npy", processes=2)
>>> int(sum(parts))
499500
"""

from __future__ import annotations

import mmap as _mmap
import multiprocessing
import os
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

import numpy as np

from .shared_memory import SharedArray
from .store import ArrayStore

__all__ = ["BrokenProcessPool", "chunk_bounds", "map_chunks"]

T = TypeVar("T")

# The worker's array and function, set once per worker by _init.
_ARRAY: Any = None
_FUNC: Any = None


def chunk_bounds(n: int, chunk_rows: int) -> list[tuple[int, int]]:
    """``[(0, c), (c, 2c), ...]`` covering ``range(n)``."""
    if chunk_rows <= 0:
        raise ValueError("chunk_rows must be positive")
    return [(i, min(i + chunk_rows, n)) for i in range(0, n, chunk_rows)]


def _source(array: Any) -> tuple[Any, ...]:
    """A small picklable recipe for re-mapping ``array`` in a worker."""
    if isinstance(array, ArrayStore):
        return ("store", array.path, len(array))
    if isinstance(array, SharedArray):
        return ("shared", array.path)
    if isinstance(array, (str, os.PathLike)):
        return ("npy", os.fspath(array))
    if isinstance(array, np.memmap) and getattr(array, "filename", None):
        if not array.flags.c_contiguous:
            raise ValueError("map_chunks needs a C-contiguous memmap")
        mm = getattr(array, "_mmap", None)  # the mmap.mmap numpy made; the array points into it
        if mm is None:
            raise ValueError("this memmap has no file mapping")
        start = array.offset - array.offset % _mmap.ALLOCATIONGRANULARITY
        base = np.frombuffer(mm, np.uint8).ctypes.data
        offset = start + (array.ctypes.data - base)
        return (
            "memmap",
            array.filename,
            array.dtype.str if not array.dtype.fields else array.dtype.descr,
            offset,
            array.shape,
        )
    raise TypeError(
        f"map_chunks maps the array in each worker by path; got {type(array).__name__}. "
        "Use an ArrayStore, a SharedArray (SharedArray.from_array copies an array once), "
        "a np.memmap or the path of a .npy file."
    )


def _open(src: tuple[Any, ...]) -> Any:
    kind = src[0]
    if kind == "store":
        return ArrayStore.open(src[1], "r").numpy()[: src[2]]
    if kind == "shared":
        return SharedArray.attach(src[1], readonly=True, unlink_on_close=False).numpy()
    if kind == "npy":
        return np.load(src[1], mmap_mode="r")
    _, filename, dtype, offset, shape = src
    return np.memmap(filename, dtype=np.dtype(dtype), mode="r", offset=offset, shape=shape)


def _init(src: tuple[Any, ...], func: Callable[..., Any]) -> None:
    global _ARRAY, _FUNC  # noqa: PLW0603 - a pool worker's state, set once by its initializer
    _ARRAY = _open(src)
    _FUNC = func


def _run(bounds: tuple[int, int]) -> Any:
    start, stop = bounds
    return _FUNC(_ARRAY[start:stop])


def map_chunks(
    func: Callable[[np.ndarray[Any, Any]], T],
    array: ArrayStore | SharedArray | np.memmap[Any, Any] | str | os.PathLike[str],
    processes: int | None = None,
    chunk_rows: int | None = None,
    *,
    start_method: str | None = None,
) -> list[T]:
    """``[func(array[a:b]) for (a, b) in chunks]``, computed by ``processes``
    worker processes (default: every core), in chunk order.

    ``array``: an :class:`~mmapkit.ArrayStore` (its rows at the time of the
    call), a :class:`~mmapkit.SharedArray`, a ``np.memmap`` or the path of
    a ``.npy`` file. Each worker maps it once, read-only; only
    ``(start, stop)`` pairs travel per task. ``chunk_rows`` defaults to
    about four chunks per process. ``func`` must be picklable (a
    module-level function) unless the start method is ``fork``.
    ``processes=0`` runs in this process (no pool), which helps debugging.
    If a worker process dies (killed, ``os._exit``, out of memory) this
    raises ``concurrent.futures.process.BrokenProcessPool`` (also
    ``mmapkit.parallel.BrokenProcessPool``) instead of waiting forever.
    """
    src = _source(array)
    n = len(_open(src)) if src[0] != "store" else src[2]
    procs = (os.cpu_count() or 1) if processes is None else int(processes)
    if procs < 0:
        raise ValueError("processes must be >= 0")
    if chunk_rows is None:
        chunk_rows = max(1, -(-n // max(1, procs * 4)))
    bounds = chunk_bounds(n, chunk_rows)
    if procs == 0 or not bounds:
        _init(src, func)
        try:
            return [_run(b) for b in bounds]
        finally:
            _init_clear()
    ctx = multiprocessing.get_context(start_method)
    # A ProcessPoolExecutor, not a multiprocessing.Pool: when a worker dies
    # (os._exit, SIGKILL, the OOM killer) the Pool silently replaces it and
    # waits forever for the lost task; the executor raises BrokenProcessPool.
    with ProcessPoolExecutor(
        min(procs, len(bounds)), mp_context=ctx, initializer=_init, initargs=(src, func)
    ) as pool:
        return list(pool.map(_run, bounds))


def _init_clear() -> None:
    global _ARRAY, _FUNC  # noqa: PLW0603 - see _init
    _ARRAY = None
    _FUNC = None

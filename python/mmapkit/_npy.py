"""The ``.npy`` dtype helpers the stores share (:mod:`mmapkit.store`,
:mod:`mmapkit.features`, :mod:`mmapkit.shared_memory`, :mod:`mmapkit.tokens`,
:mod:`mmapkit.torch`): numpy dtypes to and from a header's ``descr`` text,
the bytes an append writes, and the dtype token ids are handed out in."""

from __future__ import annotations

import ast
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._native import FormatError, npy_header


def split_dtype(
    dtype: npt.DTypeLike, row_shape: Sequence[int]
) -> tuple[np.dtype[Any], tuple[int, ...]]:
    """numpy's dtype and row shape, with subarray dtypes folded into the shape."""
    dt = np.dtype(dtype)
    shape = tuple(int(d) for d in row_shape)
    if dt.subdtype is not None:
        base, sub = dt.subdtype
        dt, shape = base, tuple(sub) + shape
    if dt.hasobject:
        raise TypeError(
            f"dtype {dt} holds Python objects; only plain data can be stored in a mapped file"
        )
    if dt.itemsize == 0:
        raise TypeError(f"dtype {dt} has no size")
    return dt, shape


_DTYPES: dict[str, np.dtype[Any]] = {}


def descr_dtype(descr: str) -> np.dtype[Any]:
    """numpy's dtype for a header's ``descr`` text, parsed once per process
    (``ast.literal_eval`` is most of the cost of attaching to a segment)."""
    dt = _DTYPES.get(descr)
    if dt is None:
        dt = np.lib.format.descr_to_dtype(ast.literal_eval(descr))
        if len(_DTYPES) < 256:
            _DTYPES[descr] = dt
    return dt


def header_dtype(path: str, descr: str | None = None) -> np.dtype[Any]:
    """The dtype a ``.npy`` file's header declares (``descr``, or read from
    the file); FormatError (naming the file) unless it is plain data numpy
    understands."""
    if descr is None:
        descr = npy_header(path)[0]
    try:
        dt = descr_dtype(descr)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError) as e:
        raise FormatError(f"{path}: unsupported dtype {descr} ({e})") from None
    if dt.hasobject:
        raise FormatError(
            f"{path}: unsupported dtype {descr} (Python objects, pickled; not plain data)"
        )
    return dt


def dtype_descr(dt: np.dtype[Any]) -> str:
    """The ``descr`` text of a ``.npy`` header for ``dt``."""
    return repr(np.lib.format.dtype_to_descr(dt))


def as_bytes(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """``a``'s elements as one C-ordered run of bytes (a view when ``a`` is
    contiguous), as the core's appends take them."""
    return np.ascontiguousarray(a).reshape(-1).view(np.uint8)


def id_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """Token ids (integers of ``dt``) as int64, what an embedding takes;
    floats as they are."""
    return np.dtype(np.int64) if dt.kind in "iu" else dt

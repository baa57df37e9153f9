"""The Rust core's whole-input statistics as numpy results, shared by
:mod:`mmapkit.stats` (``axis=None``) and :mod:`mmapkit._columns` (one
contiguous column at a time): the native calls and the numpy type of what
they return. ``src`` is what the core takes, a C-contiguous array of a core
dtype in native byte order or a path (with the path-only keyword arguments
``kw``)."""

from __future__ import annotations

import builtins
from typing import Any

import numpy as np
import numpy.typing as npt

from . import _native
from ._radix import EmptyQuantileError, QuantilePlan
from ._types import QuantileMethod


def float_type(dtype_name: str) -> type[np.floating[Any]]:
    """The float type numpy gives a statistic of ``dtype_name`` data."""
    return np.float32 if dtype_name == "float32" else np.float64


def median(src: Any, skipna: bool, threads: int | None, **kw: Any) -> np.floating[Any]:
    """The exact median (NaN for no elements: the caller warns)."""
    name, value = _native.stats_reduce(src, "median", skipna=skipna, threads=threads, **kw)
    return float_type(name)(value)


def quantile(
    src: Any,
    q: float | Any,
    method: QuantileMethod,
    skipna: bool,
    threads: int | None,
    **kw: Any,
) -> Any:
    """Exact quantile(s) ``q``, typed and shaped as numpy's: a scalar for a
    scalar ``q``; :class:`~mmapkit._radix.EmptyQuantileError` for no elements."""
    # numpy checks q and method (ValueError) before it finds no elements.
    QuantilePlan(q, method)
    qa: npt.NDArray[np.float64] = np.asarray(q, dtype=np.float64)
    # numpy interpolates float32 data in float32 only for a Python scalar q
    # (a "weak" scalar); for arrays and numpy scalars in float64.
    wide = type(q) not in (float, builtins.int)
    qs = [float(x) for x in qa.ravel()]
    try:
        name, values = _native.stats_quantile(
            src, qs, method=method, wide=wide, skipna=skipna, threads=threads, **kw
        )
    except IndexError:  # no elements (an array's or a file's)
        raise EmptyQuantileError from None
    if method == "inverted_cdf":
        out_type: Any = np.dtype(name).type  # an element (NaN only for float data)
    elif wide:
        out_type = np.float64
    else:
        out_type = float_type(name)
    out = np.array(values, dtype=out_type).reshape(qa.shape)
    return out[()] if qa.ndim == 0 else out

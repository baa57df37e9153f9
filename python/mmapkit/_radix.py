"""Pieces of exact selection shared by :mod:`mmapkit.dask` (quantiles of a
dask array across a cluster) and :meth:`mmapkit.FeatureStore.quantile`
(per-column quantiles out of core): order-preserving integer keys of
numbers, and numpy's quantile/median arithmetic on the selected order
statistics.

Keys: an unsigned integer of the element's width whose unsigned order is
the elements' numeric order (floats: negative values bit-inverted, positive
ones with the sign bit set; signed integers: sign bit flipped). NaNs have
keys too (above +inf or below -inf); callers count and drop them first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

__all__ = [
    "CORE_DTYPES",
    "DTYPES",
    "EmptyQuantileError",
    "QuantilePlan",
    "check_dtype",
    "dtype_problem",
    "from_key",
    "median_of",
    "to_keys",
]

#: The element types the Rust core computes on (``mmapkit::dtype::DType``).
CORE_DTYPES = frozenset(
    np.dtype(t) for t in ("i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8")
)
#: Every element type mmapkit's statistics take (:mod:`mmapkit.stats`,
#: :class:`mmapkit.FeatureStore`, :mod:`mmapkit.dask`): the core's and
#: ``float16``, which has keys here and numpy's arithmetic in Python.
DTYPES = CORE_DTYPES | {np.dtype(np.float16)}
_SUPPORTED_TEXT = "int8..int64, uint8..uint64, float16, float32 and float64"


def dtype_problem(dtype: Any) -> str | None:
    """Why mmapkit's statistics cannot take ``dtype`` (any byte order), or
    ``None`` when they can: the one message FeatureStore, the stats and
    dask give."""
    dt = np.dtype(dtype)
    if dt.newbyteorder("=") in DTYPES:
        return None
    why = ""
    if dt.kind == "c":
        why = " (complex: statistics here are of real numbers; take .real and .imag)"
    elif dt.kind == "f":
        why = f" ({dt.itemsize * 8}-bit np.longdouble)"
    return f"unsupported dtype {dt}{why}: mmapkit statistics take {_SUPPORTED_TEXT}"


class UnsupportedDtypeError(TypeError, ValueError):
    """A dtype the statistics do not take: a ``TypeError``, as numpy gives
    for a dtype an operation cannot handle, and a ``ValueError``, as mmapkit
    gives for any other file it cannot read (its message names the file)."""


class EmptyQuantileError(IndexError, ValueError):
    """Quantiles of no elements (an array's or a file's): an ``IndexError``,
    as numpy raises, and a ``ValueError``, as mmapkit raises for any other
    input it cannot compute on."""

    def __init__(self, message: str = "cannot take a quantile of an empty array") -> None:
        super().__init__(message)


def check_dtype(dtype: Any, where: str | None = None) -> np.dtype[Any]:
    """``dtype`` in native byte order; :class:`UnsupportedDtypeError`
    (:func:`dtype_problem`, after ``where``: the file) for one the
    statistics do not take."""
    problem = dtype_problem(dtype)
    if problem is not None:
        raise UnsupportedDtypeError(problem if where is None else f"{where}: {problem}")
    native: np.dtype[Any] = np.dtype(dtype).newbyteorder("=")
    return native


def _utype(dt: np.dtype[Any]) -> np.dtype[Any]:
    return np.dtype(f"u{dt.itemsize}")


def to_keys(a: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The keys of ``a``'s elements (same shape; a new array)."""
    a = np.asarray(a)
    if not a.dtype.isnative:
        a = a.astype(a.dtype.newbyteorder("="))
    ut = _utype(a.dtype)
    sign = ut.type(1 << (a.dtype.itemsize * 8 - 1))
    u = np.ascontiguousarray(a).view(ut)
    keys: np.ndarray[Any, Any]
    if a.dtype.kind == "f":
        keys = np.where(u & sign, ~u, u | sign)
    elif a.dtype.kind == "i":
        keys = u ^ sign
    else:
        keys = u.copy()
    return keys


def from_key(key: int, dtype: np.dtype[Any]) -> Any:
    """The element (a numpy scalar of ``dtype``) whose key is ``key``."""
    ut = _utype(dtype)
    k = ut.type(key)
    sign = ut.type(1 << (dtype.itemsize * 8 - 1))
    if dtype.kind == "f":
        u = k ^ sign if k & sign else ~k
    elif dtype.kind == "i":
        u = k ^ sign
    else:
        u = k
    return np.array([u], dtype=ut).view(dtype.newbyteorder("="))[0]


class QuantilePlan:
    """numpy's ``np.quantile(a, q, method)`` for ``n`` (non-NaN) elements,
    split in two: :meth:`ranks` (the order statistics it needs, 0-based)
    and :meth:`finish` (numpy's interpolation of their values, from
    ``np.lib._function_base_impl._quantile``: the same index arithmetic, the
    same ``_lerp`` and result dtypes; integer differences are exact, as in
    :mod:`mmapkit.stats`, where numpy wraps around)."""

    def __init__(
        self, q: float | Sequence[float] | npt.NDArray[Any], method: str = "linear"
    ) -> None:
        if method not in ("linear", "inverted_cdf"):
            raise ValueError(f"method must be 'linear' or 'inverted_cdf', got {method!r}")
        self.method = method
        self.weak = type(q) in (float, int)  # numpy: weak promotion for a Python scalar q
        self.q = np.asarray(q, dtype=np.float64)
        if np.any(np.isnan(self.q)) or np.any((self.q < 0) | (self.q > 1)):
            raise ValueError("Quantiles must be in the range [0, 1]")

    def positions(
        self, n: int
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """(lower ranks, upper ranks, interpolation weights), flat."""
        q1 = self.q.reshape(-1)
        if self.method == "inverted_cdf":
            index = n * q1 - 1
            prev = np.floor(index)
            res = np.where(index - prev == 0, prev, prev + 1).astype(np.intp)
            res[res < 0] = 0
            return res, res, np.zeros(q1.shape)
        virtual = (n - 1) * q1
        prev = np.floor(virtual)
        nxt = prev + 1
        # numpy points both neighbours at the last element (index -1) and
        # takes the weight against -1; below the start, at element 0.
        prev[virtual >= n - 1] = -1
        nxt[virtual >= n - 1] = -1
        prev[virtual < 0] = 0
        nxt[virtual < 0] = 0
        gamma = np.asarray(virtual - prev, dtype=np.float64)
        pi, ni = prev.astype(np.intp), nxt.astype(np.intp)
        return np.where(pi < 0, pi + n, pi), np.where(ni < 0, ni + n, ni), gamma

    def ranks(self, n: int) -> list[int]:
        """The sorted, distinct 0-based ranks whose values the quantiles of ``n`` elements need."""
        p, nx, _ = self.positions(n)
        return sorted({int(v) for v in np.concatenate([p, nx])})

    def result_dtype(self, dt: np.dtype[Any]) -> np.dtype[Any]:
        """The dtype of the quantiles of elements of ``dt`` (numpy's rule: ``float64`` unless the
        method keeps the input's type).
        """
        if self.method == "inverted_cdf" or (dt.kind == "f" and self.weak):
            return dt
        return np.dtype(np.float64)

    def nan(self, dt: np.dtype[Any]) -> Any:
        """The result when the data holds a NaN (numpy: NaN for every q)."""
        res = np.full(self.q.shape, np.nan, dtype=self.result_dtype(dt))
        return res[()] if res.ndim == 0 else res

    def finish(self, dt: np.dtype[Any], n: int, value: Any) -> Any:
        """The quantiles from ``value(rank)``, the element of each rank."""
        p, nx, gamma = self.positions(n)
        shape = self.q.shape
        pv = np.array([value(int(i)) for i in p], dtype=dt).reshape(shape)
        if self.method == "inverted_cdf":
            return pv[()] if pv.ndim == 0 else pv
        nv = np.array([value(int(i)) for i in nx], dtype=dt).reshape(shape)
        g: Any = float(gamma[0]) if self.weak else gamma.reshape(shape)
        if dt.kind in "iu":
            diff = np.array(
                [float(int(b) - int(a)) for a, b in zip(pv.ravel(), nv.ravel(), strict=True)]
            ).reshape(shape)
            pv, nv = pv.astype(np.float64), nv.astype(np.float64)
        else:
            diff = nv - pv
        res = np.asarray(np.add(pv, diff * g))  # an array even when 0-d, for out= below
        np.subtract(
            nv,
            diff * (1 - g),
            out=res,
            where=np.asarray(g) >= 0.5,
            casting="unsafe",
            dtype=res.dtype,
        )
        return res[()] if res.ndim == 0 else res


def median_of(dt: np.dtype[Any], n: int, lo: Any, hi: Any) -> Any:
    """``np.median`` from the elements of ranks ``(n-1)//2`` and ``n//2``:
    the middle one for odd ``n``, else their mean, like numpy's mean of
    one or two elements (``float64`` for integers, the element type for
    floats, float16 added in float32 as numpy does)."""
    ft = dt.type if dt.kind == "f" else np.float64
    if n % 2:
        return ft(lo)
    if dt.kind == "f":
        # numpy's mean accumulates float16 in float32, then rounds back.
        at = np.float32 if dt.itemsize == 2 else ft
        return ft((at(lo) + at(hi)) / at(2))
    return np.float64((float(lo) + float(hi)) / 2)

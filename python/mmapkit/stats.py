"""Exact statistics over arrays larger than memory.

:func:`median`, :func:`quantile`, :func:`histogram`, :func:`min`,
:func:`max`, :func:`sum`, :func:`mean`, :func:`var` and :func:`std` take

* a numpy array (``np.memmap`` included) or anything with ``__array__``
  (e.g. an :class:`mmapkit.ArrayStore`): read where it is, in 8 MiB
  copies (another thread may write it meanwhile), when it is C- or
  Fortran-contiguous; any other layout is **copied** first with
  ``np.ascontiguousarray`` (slice a memmap along its first axis to stay
  in place);
* or a path: a raw binary file read as ``dtype`` from byte ``offset``
  (``count`` elements, default: to the end of the file), or, without
  ``dtype``, a ``.npy`` file (dtype, offset and shape from its header).
  Nothing is loaded into memory: the Rust core maps the file when it is in
  the page cache and otherwise reads it front to back with large
  ``pread`` calls (disk speed; a mapping would fault it in piecemeal).
  ``strategy`` (``"auto"``, ``"mmap"`` or ``"read"``) overrides that choice
  (``axis=None`` only); results are identical either way.

The work runs in Rust with the GIL released, on ``threads`` workers (every
function takes it: ``None`` or ``0``, the default, one per core; ``1``
sequential; ``n`` workers; the result never depends on it), and needs memory
independent of the array's size: one counting pass for 8/16-bit integers,
two radix-selection passes for 32/64-bit integers and floats. Supported
dtypes: ``int8`` ... ``int64``, ``uint8`` ... ``uint64``, ``float16``,
``float32``, ``float64`` (other byte orders are converted); anything else
(complex, ``np.longdouble``, bool, objects) is a ``TypeError`` naming the
dtype: nothing is dropped or rounded silently. ``float16`` is computed in
Python over row chunks (numpy's arithmetic, the same memory bounds; not
for :func:`histogram`).

Results agree with numpy:

* :func:`median` equals ``np.median`` exactly (``float64`` for integer
  input, the input's float type otherwise).
* :func:`quantile` equals ``np.quantile(a, q, method=...)`` for
  ``method="linear"`` (numpy's default) and ``"inverted_cdf"``, with one
  deliberate difference: for integer input numpy computes the difference of
  the two neighbours in the integer type, which wraps around on overflow
  (``np.quantile(np.array([-30000, 30000], np.int16), 0.5)`` is 32768.0);
  here it is exact (0.0).
* :func:`histogram` equals ``np.histogram(a, bins, range)`` (equal-width
  bins given by their number) count for count and edge for edge.
* :func:`min`/:func:`max` equal ``np.min``/``np.max``.
* NaN: with ``skipna=False`` (default) any NaN makes the median, quantile,
  min and max NaN, like numpy; ``skipna=True`` ignores NaNs like
  ``np.nanmedian``/``np.nanquantile``/``np.nanmin``/``np.nansum``. ±inf are
  ordinary values: a sum or mean with +inf is inf, with +inf and -inf NaN,
  and a variance with either NaN, as in numpy, whatever the chunking.
* :func:`sum` of integers is **exact** (a Python ``int``; numpy's
  ``int64`` accumulator wraps around); of floats it is a compensated sum in
  ``float64``, accurate to about one unit in the last place whatever the
  length, so it can differ from numpy's pairwise sum in the last bits.
  :func:`mean` is that sum divided by the count (``float64``, also for
  ``float16``/``float32`` data, where numpy's mean keeps the input's type).
  :func:`var`/:func:`std` equal ``np.var``/``np.std`` of the data as
  ``float64``.
* Empty input: :func:`median` and :func:`mean` return NaN with a
  ``RuntimeWarning`` (as numpy); :func:`min` and :func:`max` raise
  ``ValueError`` (as numpy) and :func:`quantile` an error that is both an
  ``IndexError`` (numpy's) and a ``ValueError`` (an empty file's). With
  ``axis=0``, an array of rows without columns (``(n, 0)``) gives empty
  results of numpy's shape and dtype; one without rows (``(0, k)``) the
  same NaNs and errors as numpy.
* Signed zeros: -0.0 == 0.0, as in numpy, and when the answer is a zero
  it is the one the data's order gives with -0.0 below 0.0 (IEEE 754's
  ``minimum``/``maximum``): :func:`min` of ``[0.0, -0.0]`` is -0.0, its
  :func:`max` 0.0, an ``inverted_cdf`` quantile is the zero at its rank
  (``linear`` ones interpolate those elements with numpy's arithmetic),
  on every path, ``axis`` and thread count. numpy's choice between
  equal zeros is unspecified: it follows its SIMD kernels (the array's
  length, the zero's position, the CPU), so its sign bit can differ.
* Truncation: a view of an mmapkit mapping (a :class:`mmapkit.MappedFile`'s
  ``numpy()``, an :class:`mmapkit.ArrayStore`) whose file another process truncated
  before or during the computation raises
  :class:`~mmapkit.FileTruncatedError` naming the file, as a path does,
  instead of a result computed over the zero pages the guard put there.

Per column: every function but :func:`histogram` takes ``axis=0`` for an
array (or ``.npy`` file) of rows, ``(n, d)`` or ``(n, ...)``, and gives one
value per column, equal to numpy's ``axis=0`` results (``mean``/``std`` and
float sums in ``float64``; integer sums exact, in numpy's ``int64``/``uint64``
where every column's sum fits it, else as Python ints in an ``object`` array;
NaN columns give NaN: ``skipna`` is for ``axis=None`` only). It reads the rows
in chunks, so memory stays bounded: moments and extremes in one pass;
quantiles column by column when a column fits in ``memory`` bytes, else by
radix selection over the rows in 2-3 passes (the same code as
:class:`mmapkit.FeatureStore`'s per-feature statistics).

>>> import numpy as np, mmapkit.stats as st
>>> st.median(np.array([3, 1, 2, 10], dtype=np.int16))
np.float64(2.5)
>>> st.quantile(np.arange(10), [0.5, 0.9], method="inverted_cdf")
array([4, 8])
"""

from __future__ import annotations

import ast
import builtins
import functools
import os
import warnings
from collections.abc import Callable, Sequence
from typing import Any, Literal, ParamSpec, TypeAlias, TypeVar

import numpy as np
import numpy.typing as npt

from . import _columns, _kernels, _native
from ._native import ArrayStoreCore, FileTruncatedError, MappedFile
from ._radix import CORE_DTYPES, check_dtype
from ._types import PathLike, QuantileMethod, StatsStrategy

__all__ = ["histogram", "max", "mean", "median", "min", "quantile", "std", "sum", "var"]

Source: TypeAlias = npt.ArrayLike | PathLike
Floats: TypeAlias = np.floating[Any] | npt.NDArray[np.floating[Any]]
"""A float scalar for the whole input, an array of them per column (``axis=0``)."""
Float64s: TypeAlias = np.float64 | npt.NDArray[np.float64]
"""A ``float64`` for the whole input, an array of them per column."""
Numbers: TypeAlias = np.number[Any] | npt.NDArray[Any]
"""A numpy scalar for the whole input, an array of them per column."""

_P = ParamSpec("_P")
_R = TypeVar("_R")


def _truncation_check(a: Any) -> Callable[[], object] | None:
    """For an input whose memory is an mmapkit mapping (its base chain of
    numpy views and memoryviews ends at a :class:`~mmapkit.MappedFile` or
    an :class:`~mmapkit.ArrayStore`'s core): a call that raises
    :class:`~mmapkit.FileTruncatedError`, naming the file, if another
    process truncated the file under the mapping (its lost pages then
    read as zeros, and the SIGBUS guard counts them); else ``None``.
    Paths need none: the core reports a truncation of what it maps."""
    if isinstance(a, (str, os.PathLike)):
        return None
    obj: Any = np.asarray(a) if hasattr(a, "__array__") else a  # an ArrayStore: its view
    while isinstance(obj, (np.ndarray, memoryview)):
        obj = obj.base if isinstance(obj, np.ndarray) else obj.obj
    if isinstance(obj, MappedFile):
        m = obj
        # Every read through the map reports the truncation it suffered.
        return lambda: m[:1]
    if isinstance(obj, ArrayStoreCore):
        core = obj
        return lambda: core.check_rows(len(core))
    return None


def _reports_truncation(fn: Callable[_P, _R]) -> Callable[_P, _R]:
    """``fn`` (a statistic of its first argument), raising
    :class:`~mmapkit.FileTruncatedError` when the input is a view of an
    mmapkit mapping whose file another process truncated before or during
    the computation: its result, or its failure (a selection whose passes
    read different data says so), came from zero pages, not the file's.
    (Its frame is one more between a warning and the caller: the
    statistics' ``stacklevel`` counts it.)"""

    @functools.wraps(fn)
    def checked(*args: _P.args, **kwargs: _P.kwargs) -> _R:
        check = _truncation_check(args[0] if args else kwargs.get("a"))
        if check is None:
            return fn(*args, **kwargs)
        try:
            out = fn(*args, **kwargs)
        except Exception as e:
            try:
                check()
            except FileTruncatedError as t:
                raise t from e
            raise
        check()
        return out

    return checked


def _src(
    a: Any, dtype: Any, offset: int, count: int | None, strategy: StatsStrategy | None = None
) -> tuple[Any, dict[str, Any]]:
    """The native source (array or path) and the path-only keyword arguments."""
    if isinstance(a, (str, os.PathLike)):
        kw: dict[str, Any] = {"offset": offset, "count": count, "strategy": strategy}
        if dtype is not None:
            kw["dtype"] = _core_dtype(check_dtype(dtype)).str
        return os.fspath(a), kw
    if dtype is not None or offset or count is not None or strategy is not None:
        raise TypeError("dtype, offset, count and strategy apply to paths, not to arrays")
    arr = np.asarray(a)
    _core_dtype(check_dtype(arr.dtype))
    if arr.flags.c_contiguous:
        pass
    elif arr.flags.f_contiguous:
        arr = arr.T  # same elements, C order, no copy (order does not matter here)
    else:
        arr = np.ascontiguousarray(arr)
    if not arr.dtype.isnative:
        arr = arr.astype(arr.dtype.newbyteorder("="))
    return arr, {}


def _core_dtype(dt: np.dtype[Any]) -> np.dtype[Any]:
    """``dt`` when the Rust core computes on it, else a ``TypeError``."""
    if dt not in CORE_DTYPES:
        raise TypeError(
            f"unsupported dtype {dt}: histogram takes the integer types, float32 and float64"
        )
    return dt


def _python_path(
    a: Any, dtype: Any, offset: int, count: int | None, skipna: bool
) -> np.ndarray[Any, Any] | None:
    """For ``axis=None`` over a dtype the Rust core does not know
    (``float16``): the whole input as one column, NaNs dropped with
    ``skipna`` (in memory), for :mod:`mmapkit._columns`; else ``None``.
    ``TypeError`` for a dtype the statistics do not take."""
    where = None
    if isinstance(a, (str, os.PathLike)):
        where = os.fspath(a)
        if dtype is None:
            try:
                descr = ast.literal_eval(_native.npy_header(where)[0])
                dt = np.lib.format.descr_to_dtype(descr)
            except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
                return None  # a damaged header: the core's error names the file
        else:
            dt = np.dtype(dtype)
    else:
        dt = np.asarray(a).dtype
    if check_dtype(dt, where) in CORE_DTYPES:
        return None
    col = _mapped(a, dtype, offset, count).reshape(-1, 1)
    if skipna:
        col = col[~np.isnan(col[:, 0])]
    return col


def _rows(
    a: Any, dtype: Any, offset: int, count: int | None, skipna: bool, axis: int | None
) -> tuple[np.ndarray[Any, Any], tuple[int, ...]] | None:
    """For ``axis=0``: the input as a 2-D array of rows (a mapping for a
    path) and the shape of one row; ``None`` to reduce the whole input
    (``axis=None``, or a 1-D input, whose ``axis=0`` is the whole)."""
    if axis is None:
        return None
    if isinstance(axis, bool) or axis != 0:
        raise ValueError(f"axis must be None or 0, got {axis!r}")
    if isinstance(a, (str, os.PathLike)) and dtype is not None:
        return None  # a raw file is one-dimensional
    X = _mapped(a, dtype, offset, count)
    check_dtype(X.dtype)
    if X.ndim <= 1:
        return None
    if skipna:
        raise ValueError(
            "skipna applies to axis=None only (with axis=0 a column holding a NaN gives NaN)"
        )
    return X.reshape(X.shape[0], int(np.prod(X.shape[1:]))), X.shape[1:]


def _statistic(
    a: Any,
    dtype: Any,
    offset: int,
    count: int | None,
    skipna: bool,
    axis: int | None,
    strategy: StatsStrategy | None,
    columns: Callable[[np.ndarray[Any, Any]], np.ndarray[Any, Any]],
    core: Callable[[Any, dict[str, Any]], Any],
    lead: tuple[int, ...] = (),
) -> Any:
    """A statistic by the one of its three paths that fits the input:
    ``columns`` of the rows (``axis=0`` over 2-D or more), ``columns`` of the
    whole input as one column (a dtype the core lacks: ``float16``), else
    ``core`` over the whole input (the native source and its path-only
    keyword arguments). ``columns`` gives ``lead + (k,)`` values for ``k``
    columns (``lead``: quantile's ``q`` shape)."""
    rows = _rows(a, dtype, offset, count, skipna, axis)
    if rows is not None:
        X, shape = rows
        return columns(X).reshape(lead + shape)
    col = _python_path(a, dtype, offset, count, skipna)
    if col is not None:
        return columns(col).reshape(lead)[()]  # a scalar for lead == ()
    src, kw = _src(a, dtype, offset, count, strategy)
    return core(src, kw)


def _need_rows(X: np.ndarray[Any, Any], what: str) -> None:
    if X.shape[0] == 0:
        raise ValueError(f"zero-size array along axis 0: no {what}")


def _warn_empty() -> None:
    # Called by _statistic's columns or core: the frames below the caller are
    # this one, columns/core, _statistic, the statistic and its _reports_truncation.
    warnings.warn("Mean of empty slice.", RuntimeWarning, stacklevel=6)


def _size(src: Any) -> int:
    if isinstance(src, np.ndarray):
        return int(src.size)
    return -1  # a path: emptiness is not worth a second open just for the warning


@_reports_truncation
def median(
    a: Source,
    *,
    axis: int | None = None,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
    skipna: bool = False,
    threads: int | None = None,
    strategy: StatsStrategy | None = None,
    memory: int = 256 << 20,
) -> Floats:
    """Exact median, equal to ``np.median(a)`` (``np.nanmedian`` with
    ``skipna``); per column with ``axis=0``, within about ``memory`` bytes."""

    def columns(X: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if X.shape[0] == 0:
            _warn_empty()
        return _columns.median(X, memory, threads)

    def core(src: Any, kw: dict[str, Any]) -> np.floating[Any]:
        value = _kernels.median(src, skipna, threads, **kw)
        if value != value and _size(src) == 0:
            _warn_empty()
        return value

    out: Floats = _statistic(a, dtype, offset, count, skipna, axis, strategy, columns, core)
    return out


@_reports_truncation
def quantile(
    a: Source,
    q: float | Sequence[float] | npt.NDArray[Any],
    *,
    method: QuantileMethod = "linear",
    axis: int | None = None,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
    skipna: bool = False,
    threads: int | None = None,
    strategy: StatsStrategy | None = None,
    memory: int = 256 << 20,
) -> Numbers:
    """Exact quantile(s) ``q`` in [0, 1], equal to ``np.quantile(a, q, method=method)``.

    ``method``: ``"linear"`` (numpy's default: interpolates; ``float64`` for
    integer input) or ``"inverted_cdf"`` (always an element of the array, in
    its dtype). A scalar ``q`` gives a numpy scalar, a sequence an array of
    the same shape. As in numpy, ``float32`` data interpolates in
    ``float32`` for a Python ``float`` ``q`` and in ``float64`` (returning
    ``float64``) for an array or numpy scalar ``q``.

    ``axis=0``: per column, shape ``q.shape + a.shape[1:]`` like numpy's,
    within about ``memory`` bytes.
    """
    out: Numbers = _statistic(
        a,
        dtype,
        offset,
        count,
        skipna,
        axis,
        strategy,
        lambda X: np.asarray(_columns.quantile(X, q, method, memory, threads)),
        lambda src, kw: _kernels.quantile(src, q, method, skipna, threads, **kw),
        lead=np.shape(q),
    )
    return out


@_reports_truncation
def histogram(
    a: Source,
    bins: int = 10,
    range: tuple[float, float] | None = None,
    *,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
    threads: int | None = None,
    strategy: StatsStrategy | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.floating[Any]]]:
    """``np.histogram(a, bins, range)`` with ``bins`` equal-width bins: (counts, edges).

    Without ``range`` it is the data's ``[min, max]`` (NaN or ±inf is then a
    ``ValueError``, as in numpy); with it, values outside (and NaNs) are not
    counted. Edges are ``float32`` for ``float32`` data, else ``float64``.
    """
    if not isinstance(bins, (int, np.integer)) or isinstance(bins, bool):
        raise TypeError("bins must be an integer number of equal-width bins")
    if bins < 1:
        raise ValueError("`bins` must be positive, when an integer")
    src, kw = _src(a, dtype, offset, count, strategy)
    rng = None if range is None else (float(range[0]), float(range[1]))
    name, counts, edges = _native.stats_histogram(src, int(bins), rng, threads=threads, **kw)
    return counts, edges.astype(_kernels.float_type(name), copy=False)


def _extreme(
    which: Literal["min", "max"],
    a: Source,
    dtype: Any,
    offset: int,
    count: int | None,
    skipna: bool,
    threads: int | None,
    axis: int | None,
    strategy: StatsStrategy | None,
) -> Numbers:
    def columns(X: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        _need_rows(X, "minimum" if which == "min" else "maximum")
        return _columns.extreme(X, np.min if which == "min" else np.max)

    def core(src: Any, kw: dict[str, Any]) -> np.number[Any]:
        name, value = _native.stats_reduce(src, which, skipna=skipna, threads=threads, **kw)
        if isinstance(value, float) and value != value:
            return _kernels.float_type(name)(value)
        number: np.number[Any] = np.dtype(name).type(value)
        return number

    out: Numbers = _statistic(a, dtype, offset, count, skipna, axis, strategy, columns, core)
    return out


@_reports_truncation
def min(
    a: Source,
    *,
    axis: int | None = None,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
    skipna: bool = False,
    threads: int | None = None,
    strategy: StatsStrategy | None = None,
) -> Numbers:
    """Smallest element, like ``np.min`` (``np.nanmin`` with ``skipna``); per
    column with ``axis=0``."""
    return _extreme("min", a, dtype, offset, count, skipna, threads, axis, strategy)


@_reports_truncation
def max(
    a: Source,
    *,
    axis: int | None = None,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
    skipna: bool = False,
    threads: int | None = None,
    strategy: StatsStrategy | None = None,
) -> Numbers:
    """Largest element, like ``np.max`` (``np.nanmax`` with ``skipna``); per
    column with ``axis=0``."""
    return _extreme("max", a, dtype, offset, count, skipna, threads, axis, strategy)


@_reports_truncation
def sum(
    a: Source,
    *,
    axis: int | None = None,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
    skipna: bool = False,
    threads: int | None = None,
    strategy: StatsStrategy | None = None,
) -> int | np.float64 | npt.NDArray[Any]:
    """Sum: an exact Python ``int`` for integer input, a compensated ``float64``
    for floats; per column with ``axis=0``: for integers exact, in numpy's
    ``int64``/``uint64`` where every column's sum fits it, else Python ints (an
    ``object`` array) where numpy's would wrap around; ``float64`` for floats."""

    def core(src: Any, kw: dict[str, Any]) -> int | np.float64:
        _, value = _native.stats_reduce(src, "sum", skipna=skipna, threads=threads, **kw)
        return value if isinstance(value, builtins.int) else np.float64(value)

    out: int | np.float64 | npt.NDArray[Any] = _statistic(
        a, dtype, offset, count, skipna, axis, strategy, _columns.total, core
    )
    return out


@_reports_truncation
def mean(
    a: Source,
    *,
    axis: int | None = None,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
    skipna: bool = False,
    threads: int | None = None,
    strategy: StatsStrategy | None = None,
) -> Float64s:
    """Arithmetic mean as ``float64`` (exact-sum based; NaN with a warning
    when empty); per column with ``axis=0`` (merged per-chunk ``float64``
    moments, one pass)."""

    def columns(X: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if X.shape[0] == 0:
            _warn_empty()
        return _columns.mean(X)

    def core(src: Any, kw: dict[str, Any]) -> np.float64:
        _, value = _native.stats_reduce(src, "mean", skipna=skipna, threads=threads, **kw)
        if value != value and _size(src) == 0:
            _warn_empty()
        return np.float64(value)

    out: Float64s = _statistic(a, dtype, offset, count, skipna, axis, strategy, columns, core)
    return out


def _spread(
    fn: Callable[[np.ndarray[Any, Any], int], npt.NDArray[np.float64]],
    a: Any,
    axis: int | None,
    ddof: int,
    dtype: Any,
    offset: int,
    count: int | None,
) -> Float64s:
    rows = _rows(a, dtype, offset, count, False, axis)
    if rows is None:
        X = _mapped(a, dtype, offset, count).reshape(-1, 1)  # the whole input as one column
        check_dtype(X.dtype)
        shape: tuple[int, ...] = ()
    else:
        X, shape = rows
    if X.shape[0] - ddof <= 0:
        warnings.warn("Degrees of freedom <= 0 for slice", RuntimeWarning, stacklevel=4)
    out: Float64s = fn(X, ddof).reshape(shape)[()]  # a scalar for shape == ()
    return out


@_reports_truncation
def var(
    a: Source,
    *,
    axis: int | None = None,
    ddof: int = 0,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
) -> Float64s:
    """Variance as ``float64``, like ``np.var(a, axis=axis, ddof=ddof)``
    (one streaming pass of merged per-chunk moments; NaN, with a warning,
    when ``n - ddof <= 0``)."""
    return _spread(_columns.var, a, axis, ddof, dtype, offset, count)


@_reports_truncation
def std(
    a: Source,
    *,
    axis: int | None = None,
    ddof: int = 0,
    dtype: Any = None,
    offset: int = 0,
    count: int | None = None,
) -> Float64s:
    """Standard deviation as ``float64``, like ``np.std(a, axis=axis,
    ddof=ddof)`` (one streaming pass of merged per-chunk moments; NaN,
    with a warning, when ``n - ddof <= 0``)."""
    return _spread(_columns.std, a, axis, ddof, dtype, offset, count)


def _mapped(a: Any, dtype: Any, offset: int, count: int | None) -> np.ndarray[Any, Any]:
    """The input as a numpy array: a read-only mapping for a path (a raw
    file of ``dtype`` from ``offset``, or a ``.npy`` file), else the array."""
    if isinstance(a, (str, os.PathLike)):
        p = os.fspath(a)
        if dtype is not None:
            return np.memmap(
                p,
                dtype=np.dtype(dtype),
                mode="r",
                offset=offset,
                shape=None if count is None else (count,),
            )
        if offset or count is not None:
            raise TypeError("offset and count apply to raw files (with dtype), not to .npy files")
        # The core's checks and errors (FormatError naming the file), as without axis.
        _native.npy_header(p)
        arr: np.ndarray[Any, Any] = np.load(p, mmap_mode="r")
        return arr
    if dtype is not None or offset or count is not None:
        raise TypeError("dtype, offset and count apply to paths, not to arrays")
    return np.asarray(a)

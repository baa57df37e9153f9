"""Per-column (``axis=0``) statistics of a 2-D array larger than memory:
the one implementation behind ``mmapkit.stats.*(a, axis=0)`` and
:class:`mmapkit.FeatureStore`'s per-feature statistics.

``X`` is a 2-D array of ``n`` rows (typically a read-only mapping); every
function reads it in row chunks, so memory stays bounded whatever ``n``.
Moments are merged per chunk in ``float64`` (Chan et al.), extremes per
chunk, and quantiles either column by column (when a column fits in
``memory``: copied out and selected in Rust by :mod:`mmapkit._kernels`) or by
radix selection over the rows (:func:`_select`; always for ``float16``).
Every path orders -0.0 below 0.0, as the Rust core does, so that which
zero comes back never depends on the path, the chunking or the machine.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

from . import _kernels
from ._radix import CORE_DTYPES, EmptyQuantileError, QuantilePlan, from_key, median_of, to_keys
from ._types import QuantileMethod

Q: TypeAlias = float | Sequence[float] | npt.NDArray[Any]


#: Bytes of rows per chunk of the one-pass statistics (tests make it small
#: to cross chunk boundaries with small arrays).
CHUNK_BYTES = 64 << 20


def row_chunks(
    X: np.ndarray[Any, Any], chunk_bytes: int | None = None
) -> Iterator[np.ndarray[Any, Any]]:
    """``X`` in chunks of whole rows of about ``chunk_bytes`` (default :data:`CHUNK_BYTES`)."""
    if chunk_bytes is None:
        chunk_bytes = CHUNK_BYTES
    rows = max(1, chunk_bytes // max(1, X.shape[1] * X.dtype.itemsize))
    for s in range(0, X.shape[0], rows):
        yield X[s : s + rows]


def merge_moments(
    n: int, mean: npt.NDArray[np.float64], m2: npt.NDArray[np.float64], c: np.ndarray[Any, Any]
) -> tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Count, mean and M2 per column after adding the rows ``c`` (Chan et
    al.'s merge of the chunk's own float64 moments). A non-finite mean
    (a column holding ±inf or NaN) is kept as numpy's sum would: inf
    stays inf, inf and -inf give NaN; M2 is then NaN (numpy's variance)."""
    c64 = c.astype(np.float64)
    k = c64.shape[0]
    with np.errstate(invalid="ignore"):
        cm = c64.mean(axis=0)
        cm2 = ((c64 - cm) ** 2).sum(axis=0)
        delta = cm - mean
        tot = n + k
        finite = np.isfinite(mean) & np.isfinite(cm)
        # The merge's delta would turn inf into NaN; mean + cm has numpy's signs.
        new_mean = np.where(finite, mean + delta * (k / tot), mean + cm)
        new_m2 = np.where(finite, m2 + cm2 + delta**2 * (n * k / tot), np.nan)
    return tot, new_mean, new_m2


def merge_weighted_moments(
    wsum: float,
    mean: npt.NDArray[np.float64],
    m2: npt.NDArray[np.float64],
    c: np.ndarray[Any, Any],
    w: np.ndarray[Any, Any],
) -> tuple[float, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`merge_moments` with row weights ``w >= 0``: the weight sum
    ``Σw``, the weighted mean and ``M2 = Σ w·(x − mean)²`` per column after
    adding the rows ``c`` (rows of weight 0 change nothing), in ``float64``.
    The weighted variance is ``M2 / Σw`` (scikit-learn's
    ``StandardScaler(sample_weight=)``)."""
    w64 = np.asarray(w, dtype=np.float64)
    k = float(w64.sum())
    if k == 0:
        return wsum, mean, m2
    c64 = c.astype(np.float64)
    cm = (w64 @ c64) / k
    cm2 = w64 @ ((c64 - cm) ** 2)
    tot = wsum + k
    delta = cm - mean
    return tot, mean + delta * (k / tot), m2 + cm2 + delta**2 * (wsum * k / tot)


def moments(
    X: np.ndarray[Any, Any],
) -> tuple[int, npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """(count, mean, M2) per column in one pass."""
    n = 0
    mean = np.zeros(X.shape[1])
    m2 = np.zeros(X.shape[1])
    for c in row_chunks(X):
        n, mean, m2 = merge_moments(n, mean, m2, c)
    return n, mean, m2


def mean(X: np.ndarray[Any, Any]) -> npt.NDArray[np.float64]:
    """Per-column mean (``float64``; NaN for no rows)."""
    n, m, _ = moments(X)
    return m if n else np.full(X.shape[1], np.nan)


def total(X: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Per-column sum. Floats: ``float64`` (chunk sums added up; ±inf as
    numpy's). Integers: exact, in numpy's sum type (``int64``, ``uint64``
    for unsigned input) where every column's sum fits it, equal to
    ``np.sum(X, axis=0)``; else as Python ints (``object``), where numpy's
    accumulator wraps around (``mmapkit.stats.sum``'s exact rule)."""
    if X.dtype.kind == "f":
        acc = np.zeros(X.shape[1])
        with np.errstate(invalid="ignore"):
            for c in row_chunks(X):
                acc = acc + c.sum(axis=0, dtype=np.float64)
        return acc
    exact = np.zeros(X.shape[1], dtype=object)
    for c in row_chunks(X):
        exact = exact + _exact_sums(c)
    numpys = np.zeros(1, X.dtype).sum().dtype
    info = np.iinfo(numpys)
    if all(info.min <= v <= info.max for v in exact):
        return exact.astype(numpys)
    return exact


def _exact_sums(c: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The exact column sums of the integer rows ``c`` as Python ints. A
    chunk has under 2**31 rows, so 64-bit sums of values below 2**32 cannot
    wrap: 64-bit values are summed as their high and low 32 bits."""
    wide = np.int64 if c.dtype.kind == "i" else np.uint64
    if c.dtype.itemsize < 8:
        return np.asarray(c.sum(axis=0, dtype=wide), dtype=object)
    t = c.dtype.type
    lo = (c & t(0xFFFFFFFF)).sum(axis=0, dtype=np.uint64).astype(object)
    hi = (c >> t(32)).sum(axis=0, dtype=wide).astype(object)  # arithmetic: keeps the sign
    return np.asarray(hi * (1 << 32) + lo)


def var(X: np.ndarray[Any, Any], ddof: int = 0) -> npt.NDArray[np.float64]:
    """Per-column variance (``float64``; NaN when ``n - ddof <= 0``)."""
    n, _, m2 = moments(X)
    if n - ddof <= 0:
        return np.full(X.shape[1], np.nan)
    return m2 / (n - ddof)


def std(X: np.ndarray[Any, Any], ddof: int = 0) -> npt.NDArray[np.float64]:
    """Per-column standard deviation (``float64``; NaN when ``n - ddof <= 0``)."""
    return np.sqrt(var(X, ddof))


def ordered_extreme(c: np.ndarray[Any, Any], fn: Callable[..., Any]) -> np.ndarray[Any, Any]:
    """``fn(c, axis=0)`` (``np.min``/``np.max``) of rows ``c``, with -0.0
    below 0.0 as the Rust core and the radix keys order them: a column
    whose minimum is zero gives -0.0 when it holds a -0.0, one whose
    maximum is zero gives 0.0 when it holds a 0.0. numpy's choice between
    equal zeros follows its SIMD lanes (length, position, CPU), so every
    path here makes this one."""
    m: np.ndarray[Any, Any] = fn(c, axis=0)
    if c.dtype.kind != "f":
        return m
    zero = m == 0  # NaN columns are NaN, not zero
    if zero.any():
        # A zero extreme: the column's elements are all >= 0 (min) or all
        # <= 0 (max), so a sign bit marks a -0.0 (min) and its absence a 0.0 (max).
        signs = np.signbit(c[:, zero])
        negative = signs.any(axis=0) if fn is np.min else signs.all(axis=0)
        m[zero] = np.where(negative, -0.0, 0.0)
    return m


def extreme(X: np.ndarray[Any, Any], fn: Callable[..., Any]) -> np.ndarray[Any, Any]:
    """``fn(X, axis=0)`` (``np.min``/``np.max``) chunk by chunk; ``X`` has
    rows. Zeros as :func:`ordered_extreme` orders them."""
    acc: np.ndarray[Any, Any] | None = None
    for c in row_chunks(X):
        m = ordered_extreme(c, fn)
        acc = m if acc is None else ordered_extreme(np.stack([acc, m]), fn)
    if acc is None:
        raise ValueError("no rows (no minimum or maximum)")
    return acc


def describe(X: np.ndarray[Any, Any], ddof: int = 0) -> dict[str, Any]:
    """count, mean, std, min and max per column in one pass (min/max ``None`` without rows)."""
    d = X.shape[1]
    n = 0
    m = np.zeros(d)
    m2 = np.zeros(d)
    lo = hi = None
    for c in row_chunks(X):
        n, m, m2 = merge_moments(n, m, m2, c)
        cl, ch = ordered_extreme(c, np.min), ordered_extreme(c, np.max)
        lo = cl if lo is None else ordered_extreme(np.stack([lo, cl]), np.min)
        hi = ch if hi is None else ordered_extreme(np.stack([hi, ch]), np.max)
    nan = np.full(d, np.nan)
    return {
        "count": n,
        "mean": m if n else nan,
        "std": np.sqrt(m2 / (n - ddof)) if n - ddof > 0 else nan,
        "min": lo,
        "max": hi,
    }


def _native(dt: np.dtype[Any]) -> bool:
    """Whether the Rust core selects in columns of ``dt`` (else the radix
    selection here does: float16; not numpy, whose choice between -0.0 and
    0.0 differs from the core's and the radix keys' order, and whose
    integer interpolation wraps around where theirs is exact)."""
    return dt in CORE_DTYPES


def quantile(
    X: np.ndarray[Any, Any],
    q: Q,
    method: QuantileMethod = "linear",
    memory: int = 256 << 20,
    threads: int | None = None,
) -> Any:
    """Exact per-column quantile(s), equal to ``np.quantile(X, q, axis=0,
    method=method)``; ``X`` has rows. Within about ``memory`` bytes: columns
    copied out as many at a time as fit and selected by
    :func:`mmapkit._kernels.quantile` (Rust, GIL released) when a column fits,
    else (and for ``float16``) radix selection over the rows
    (:func:`_select`). No rows:
    :class:`~mmapkit._radix.EmptyQuantileError` (numpy's ``IndexError``);
    no columns: an empty result of numpy's shape and dtype."""
    plan = QuantilePlan(q, method)
    n, d, dt = X.shape[0], X.shape[1], X.dtype
    if n == 0:
        raise EmptyQuantileError("zero-size array along axis 0: no quantiles")
    if d == 0:
        return np.empty((*plan.q.shape, 0), dtype=plan.result_dtype(dt))
    if n * dt.itemsize > memory or not _native(dt):
        nan_cols, values = _select(X, plan.ranks(n), memory)
        return np.stack(
            [
                plan.nan(dt) if nan_cols[j] else plan.finish(dt, n, lambda r, j=j: values[j, r])
                for j in range(d)
            ],
            axis=-1,
        )
    return np.stack(
        [_kernels.quantile(col, q, method, False, threads) for col in _columns(X, memory)],
        axis=-1,
    )


def median(
    X: np.ndarray[Any, Any], memory: int = 256 << 20, threads: int | None = None
) -> np.ndarray[Any, Any]:
    """Exact per-column median, equal to ``np.median(X, axis=0)`` (NaN for no rows)."""
    n, dt = X.shape[0], X.dtype
    ft = dt.type if dt.kind == "f" else np.float64
    if n == 0:
        return np.full(X.shape[1], np.nan, dtype=ft)
    if n * dt.itemsize > memory or not _native(dt):
        lo, hi = (n - 1) // 2, n // 2
        nan_cols, values = _select(X, [lo, hi], memory)
        return np.array(
            [
                ft(np.nan) if nan_cols[j] else median_of(dt, n, values[j, lo], values[j, hi])
                for j in range(X.shape[1])
            ],
            dtype=ft,
        )
    return np.array([_kernels.median(col, False, threads) for col in _columns(X, memory)], dtype=ft)


def _columns(X: np.ndarray[Any, Any], memory: int) -> Iterator[np.ndarray[Any, Any]]:
    """Each column as a contiguous copy, made as many at a time as fit in ``memory``."""
    group = max(1, memory // max(1, X.shape[0] * X.dtype.itemsize))
    for j0 in range(0, X.shape[1], group):
        yield from np.ascontiguousarray(X[:, j0 : j0 + group].T)


def _select(
    X: np.ndarray[Any, Any], ranks: Sequence[int], memory: int, digit_bits: int = 12
) -> tuple[np.ndarray[Any, Any], dict[tuple[int, int], Any]]:
    """Out-of-core radix selection of the elements of ``ranks`` in every
    column: (columns holding a NaN, {(column, rank): element}) for the
    other columns. Memory: the per-column histograms (``dim`` ×
    2^``digit_bits`` counts), one row chunk and its keys, and the last
    buckets (at most ``memory`` bytes of keys)."""
    _n, d = X.shape
    dt = X.dtype
    w = dt.itemsize * 8

    def chunks() -> Iterator[np.ndarray[Any, Any]]:
        return row_chunks(X, 8 << 20)

    # Pass 1: NaNs and the top digit of every column at once (one bincount per chunk).
    D = min(digit_bits, w)
    nans = np.zeros(d, dtype=np.int64)
    hist = np.zeros(d << D, dtype=np.int64)
    offsets = (np.arange(d, dtype=np.intp) << D)[None, :]
    for c in chunks():
        keys = to_keys(c)
        idx = (keys >> keys.dtype.type(w - D)).astype(np.intp) + offsets
        if dt.kind == "f":
            m = np.isnan(c)
            nans += m.sum(axis=0)
            idx = idx[~m]
        hist += np.bincount(idx.ravel(), minlength=d << D)
    nan_cols = nans > 0
    # Each wanted statistic: [column, rank, prefix, elements below the prefix's bucket].
    state = [[j, r, 0, 0] for j in range(d) if not nan_cols[j] for r in ranks]
    hists = {(j, 0): hist[j << D : (j + 1) << D] for j in range(d)}
    done = 0
    while True:
        bucket: dict[tuple[int, int], int] = {}
        for st in state:
            h = hists[st[0], st[2]]
            cum = np.cumsum(h)
            digit = int(np.searchsorted(cum, st[1] - st[3], side="right"))
            st[3] += int(cum[digit - 1]) if digit else 0
            st[2] = (st[2] << D) | digit
            bucket[st[0], st[2]] = int(h[digit])
        done += D
        if done == w:
            return nan_cols, {(st[0], st[1]): from_key(st[2], dt) for st in state}
        pairs = sorted(bucket)
        if sum(bucket.values()) * dt.itemsize <= memory:
            break
        D = min(digit_bits, w - done)
        hists = {pr: np.zeros(1 << D, dtype=np.int64) for pr in pairs}
        for c in chunks():
            keys = to_keys(c)
            for j, p in pairs:
                col = keys[:, j]
                sel = col[(col >> col.dtype.type(w - done)) == col.dtype.type(p)]
                hists[j, p] += np.bincount(
                    ((sel >> sel.dtype.type(w - done - D)) & sel.dtype.type((1 << D) - 1)).astype(
                        np.intp
                    ),
                    minlength=1 << D,
                )
    # Last pass: collect the keys in each bucket, select exactly.
    got: dict[tuple[int, int], list[np.ndarray[Any, Any]]] = {pr: [] for pr in pairs}
    for c in chunks():
        keys = to_keys(c)
        for j, p in pairs:
            col = keys[:, j]
            got[j, p].append(col[(col >> col.dtype.type(w - done)) == col.dtype.type(p)])
    out = {}
    for st in state:
        ks = np.concatenate(got[st[0], st[2]])
        k = st[1] - st[3]
        out[st[0], st[1]] = from_key(int(np.partition(ks, k)[k]), dt)
    return nan_cols, out

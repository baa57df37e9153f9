"""Dask adapter (extra ``dask``): arrays whose tasks carry a path and row
bounds, never data; exact quantiles across a cluster; data-parallel
logistic regression.

* :func:`to_dask_array` turns a :class:`~mmapkit.FeatureStore` (its
  features or labels), an :class:`~mmapkit.ArrayStore` or any ``.npy`` file
  into a ``dask.array.Array`` chunked along rows. Each task is
  ``(load, path, start, stop)``: the graph's size does not depend on the
  array's, and each worker maps the file itself (chunks are zero-copy views
  of the mapping, so a worker's own memory stays far below the array).
  ``dask.array.from_array(np.memmap)`` instead pickles the memmap, copying
  its data into the graph.
* :func:`quantile` / :func:`median`: **exact** quantiles of a dask array
  (or store, or ``.npy`` path) over all its elements, equal to
  ``np.quantile(a, q, method=...)`` (``"linear"`` or ``"inverted_cdf"``;
  integer differences taken without wrap-around, as in
  :mod:`mmapkit.stats`). Radix selection over order-preserving integer
  keys: each pass sums per-chunk histograms of the next 16 bits of the keys
  (mergeable: computed where the chunks are), until the bucket holding
  each wanted order statistic has at most ``gather_limit`` elements, which
  a last pass brings to the client. Typically two passes for 32-bit data,
  one for 8/16-bit. ``dask.array.percentile`` is approximate.
* :func:`fit_logistic_regression`: full-batch gradient descent whose
  per-chunk gradients are computed on the workers (by path) and averaged on
  the client; runs on whatever scheduler is active (a
  ``distributed.Client`` to any cluster whose workers see the same files).
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Sequence
from typing import Any, TypeAlias

import numpy as np
import numpy.typing as npt

try:
    import dask
    import dask.array as da
    from dask.base import compute, tokenize
    from dask.delayed import delayed
except ImportError as e:
    raise ImportError(
        f"mmapkit.dask needs dask ({e}): pip install 'mmapkit[dask]'", name=e.name
    ) from e

from ._native import FormatError
from ._radix import QuantilePlan, check_dtype, from_key, median_of, to_keys
from ._types import PathLike
from .features import FeatureStore
from .store import ArrayStore

__all__ = ["fit_logistic_regression", "median", "quantile", "to_dask_array"]

Source: TypeAlias = FeatureStore | ArrayStore | PathLike | da.Array

# ----- arrays by path -----------------------------------------------------------

_cache: dict[str, tuple[tuple[int, int], ArrayStore]] = {}
_cache_lock = threading.Lock()


def _open_cached(path: str, stop: int) -> ArrayStore:
    """This process's reader of ``path`` holding at least ``stop`` rows
    (opened once per process and file; again if the file was replaced)."""
    st = os.stat(path)
    ident = (st.st_dev, st.st_ino)
    with _cache_lock:
        hit = _cache.get(path)
        if hit is not None and hit[0] == ident:
            s = hit[1]
            if len(s) < stop:
                try:
                    s.refresh()
                except FormatError:  # the count went down (a writer cut uncommitted rows)
                    s = ArrayStore.open(path, "r")
        else:
            s = ArrayStore.open(path, "r")
        _cache[path] = (ident, s)
    if len(s) < stop:
        raise ValueError(
            f"{path}: has {len(s)} rows, fewer than the {stop} this task reads (was it replaced?)"
        )
    return s


def load_rows(path: str, start: int, stop: int) -> np.ndarray[Any, Any]:
    """Rows ``[start, stop)`` of the ``.npy`` file ``path``: a zero-copy,
    read-only view of this process's mapping (the task of every chunk),
    its pages read and checked first: a file another process truncated
    under them is :class:`~mmapkit.FileTruncatedError`, not a chunk of zeros."""
    s = _open_cached(path, stop)
    s.check(start, stop, touch=True)
    return s.numpy()[start:stop]


def _resolve(source: Any, what: str) -> tuple[str, int, tuple[int, ...], np.dtype[Any]]:
    """(file, rows, row_shape, dtype) of a store, store directory or ``.npy`` file."""
    if what not in ("features", "labels"):
        raise ValueError(f"what must be 'features' or 'labels', got {what!r}")
    if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
        with FeatureStore(source) as fs:
            return _resolve(fs, what)
    if isinstance(source, FeatureStore):
        a = source._features if what == "features" else source._labels
        return os.path.abspath(a.path), len(source), a.row_shape, a.dtype
    if isinstance(source, ArrayStore):
        return os.path.abspath(source.path), len(source), source.row_shape, source.dtype
    if isinstance(source, (str, os.PathLike)):
        with ArrayStore.open(source, "r") as s:
            return _resolve(s, what)
    raise TypeError(
        f"expected a FeatureStore, an ArrayStore or a path, got {type(source).__name__}"
    )


def _row_chunks(rows: int, row_bytes: int, chunks: Any) -> tuple[int, ...]:
    if chunks == "auto":
        chunks = max(1, (128 << 20) // max(1, row_bytes))
    if isinstance(chunks, (int, np.integer)) and not isinstance(chunks, bool):
        if chunks < 1:
            raise ValueError(f"chunks must be a positive number of rows, got {chunks}")
        c = int(chunks)
        sizes = tuple(min(c, rows - s) for s in range(0, rows, c))
        return sizes or (0,)
    sizes = tuple(int(c) for c in chunks)
    if sum(sizes) != rows or any(c < 0 for c in sizes):
        raise ValueError(f"chunks {sizes} do not add up to the {rows} rows")
    return sizes


def to_dask_array(source: Source, chunks: Any = "auto", *, what: str = "features") -> da.Array:
    """A dask array of ``source``'s rows (committed rows of a store, when
    called): a :class:`~mmapkit.FeatureStore` or its directory (``what``:
    ``"features"`` or ``"labels"``), an :class:`~mmapkit.ArrayStore`, or a
    ``.npy`` path. ``chunks``: rows per chunk, a sequence of row counts, or
    ``"auto"`` (about 128 MiB per chunk). Chunks span whole rows."""
    path, rows, row_shape, dtype = _resolve(source, what)
    row_bytes = int(np.prod(row_shape, dtype=np.int64)) * dtype.itemsize
    sizes = _row_chunks(rows, row_bytes, chunks)
    st = os.stat(path)
    name = "mmapkit-rows-" + tokenize(path, st.st_ino, st.st_mtime_ns, rows, sizes)
    dsk: dict[Any, Any] = {}
    start = 0
    tail = (0,) * len(row_shape)
    for i, c in enumerate(sizes):
        dsk[(name, i, *tail)] = (load_rows, path, start, start + c)
        start += c
    return da.Array(
        dsk,
        name,
        (sizes, *tuple((d,) for d in row_shape)),
        dtype=dtype,
        meta=np.empty((0,) * (1 + len(row_shape)), dtype=dtype),
    )


def _as_dask(x: Source, what: str = "features") -> da.Array:
    return x if isinstance(x, da.Array) else to_dask_array(x, what=what)


# ----- exact quantiles ------------------------------------------------------------


def _keys(block: np.ndarray[Any, Any]) -> tuple[np.ndarray[Any, Any], int]:
    """Keys of the non-NaN elements (flat), and the NaN count."""
    a = np.asarray(block).reshape(-1)
    nans = 0
    if a.dtype.kind == "f":
        m = np.isnan(a)
        nans = int(np.count_nonzero(m))
        if nans:
            a = a[~m]
    return to_keys(a), nans


def _digits(dtype: np.dtype[Any]) -> int:
    return min(16, dtype.itemsize * 8)


def _select(keys: np.ndarray[Any, Any], w: int, done: int, prefix: int) -> np.ndarray[Any, Any]:
    if done == 0:
        return keys
    top = keys >> keys.dtype.type(w - done)
    picked: np.ndarray[Any, Any] = keys[top == keys.dtype.type(prefix)]
    return picked


def _hist(
    block: np.ndarray[Any, Any], done: int, prefixes: Sequence[int]
) -> tuple[int, np.ndarray[Any, Any]]:
    """(NaN count, histograms (len(prefixes), 2^D) of the next D key bits
    of the elements whose first ``done`` bits are each prefix)."""
    keys, nans = _keys(block)
    w = keys.dtype.itemsize * 8
    D = _digits(keys.dtype)
    shift = keys.dtype.type(w - done - D)
    mask = keys.dtype.type((1 << D) - 1)
    out = np.zeros((len(prefixes), 1 << D), dtype=np.int64)
    for i, p in enumerate(prefixes):
        sel = _select(keys, w, done, p)
        out[i] = np.bincount(((sel >> shift) & mask).astype(np.intp), minlength=1 << D)
    return nans, out


def _bucket(
    block: np.ndarray[Any, Any], done: int, prefixes: Sequence[int]
) -> list[np.ndarray[Any, Any]]:
    keys, _ = _keys(block)
    w = keys.dtype.itemsize * 8
    return [_select(keys, w, done, p) for p in prefixes]


def _add_hists(
    a: tuple[int, np.ndarray[Any, Any]], b: tuple[int, np.ndarray[Any, Any]]
) -> tuple[int, np.ndarray[Any, Any]]:
    return a[0] + b[0], a[1] + b[1]


def _tree(parts: list[Any], combine: Callable[[Any, Any], Any]) -> Any:
    """A pairwise tree of delayed combines (histograms merge near where they are made)."""
    while len(parts) > 1:
        parts = [
            delayed(combine)(parts[i], parts[i + 1]) if i + 1 < len(parts) else parts[i]
            for i in range(0, len(parts), 2)
        ]
    return parts[0]


def _check(x: da.Array) -> da.Array:
    """``x`` in native byte order; TypeError for a dtype the statistics do
    not take (the same ones as :class:`mmapkit.FeatureStore` and
    :mod:`mmapkit.stats`)."""
    dt = check_dtype(x.dtype)
    return x if x.dtype.isnative else x.astype(dt)


def quantile(
    x: Source,
    q: float | Sequence[float] | npt.NDArray[Any],
    *,
    method: str = "linear",
    skipna: bool = False,
    gather_limit: int = 1 << 22,
    what: str = "features",
) -> Any:
    """Exact quantile(s) of all elements of ``x`` (a dask array, or a
    store / ``.npy`` path made one with :func:`to_dask_array`), equal to
    ``np.quantile(np.asarray(x), q, method=method)``; see the module docs.
    ``skipna``: like ``np.nanquantile``. Runs on the active scheduler."""
    plan = QuantilePlan(q, method)
    x = _check(_as_dask(x, what))
    holder: dict[str, int] = {}

    def ranks(n: int) -> list[int]:  # called after the first pass counted the NaNs
        if n == 0 or (holder["nans"] and not skipna):
            return []
        return plan.ranks(n)

    n, nans, stats = _order_statistics(x, ranks, gather_limit, holder)
    if nans and not skipna:
        return plan.nan(x.dtype)
    if n == 0:
        raise ValueError(
            "cannot take a quantile of an empty array" + (" (all NaN)" if nans else "")
        )
    return plan.finish(x.dtype, n, stats.__getitem__)


def _order_statistics(
    x: da.Array, ranks_of: Callable[[int], list[int]], gather_limit: int, holder: dict[str, int]
) -> tuple[int, int, dict[int, Any]]:
    """(n non-NaN, NaN count, {rank: element}) for the ranks ``ranks_of(n)``
    (asked after the first pass, which also stores the NaN count in
    ``holder["nans"]``)."""
    blocks = list(x.to_delayed().ravel())
    if not blocks:
        return 0, 0, {}
    w = x.dtype.itemsize * 8
    D = _digits(x.dtype)
    nans_, hist = compute(_tree([delayed(_hist)(b, 0, [0]) for b in blocks], _add_hists))[0]
    holder["nans"] = nans = int(nans_)
    n = int(hist.sum())
    wanted = sorted(set(ranks_of(n)))
    if not wanted:
        return n, nans, {}
    # Each wanted rank: [rank, prefix, elements below the bucket].
    state = [[r, 0, 0] for r in wanted]
    done = 0
    prefixes = [0]
    while True:
        counts = []
        for s in state:
            h = hist[prefixes.index(s[1])]
            cum = np.cumsum(h)
            d = int(np.searchsorted(cum, s[0] - s[2], side="right"))
            s[2] += int(cum[d - 1]) if d else 0
            s[1] = (s[1] << D) | d
            counts.append(int(h[d]))
        done += D
        if done == w:
            return n, nans, {s[0]: from_key(s[1], x.dtype) for s in state}
        prefixes = sorted({s[1] for s in state})
        if max(counts) <= gather_limit:
            break
        _, hist = compute(_tree([delayed(_hist)(b, done, prefixes) for b in blocks], _add_hists))[0]
    parts = compute(*[delayed(_bucket)(b, done, prefixes) for b in blocks])
    out = {}
    for s in state:
        i = prefixes.index(s[1])
        keys = np.concatenate([p[i] for p in parts])
        k = s[0] - s[2]
        out[s[0]] = from_key(int(np.partition(keys, k)[k]), x.dtype)
    return n, nans, out


def median(
    x: Source, *, skipna: bool = False, gather_limit: int = 1 << 22, what: str = "features"
) -> Any:
    """Exact median of all elements, equal to ``np.median`` (``np.nanmedian``
    with ``skipna``): the middle element, or the mean of the two middle
    ones (``float64`` for integers, the element type for floats)."""
    x = _check(_as_dask(x, what))
    holder: dict[str, int] = {}

    def ranks(n: int) -> list[int]:
        if n == 0 or (holder["nans"] and not skipna):
            return []
        return [(n - 1) // 2, n // 2]

    n, nans, stats = _order_statistics(x, ranks, gather_limit, holder)
    if (nans and not skipna) or n == 0:
        if n == 0:
            warnings.warn("Mean of empty slice.", RuntimeWarning, stacklevel=2)
        return (x.dtype.type if x.dtype.kind == "f" else np.float64)(np.nan)
    return median_of(x.dtype, n, stats[(n - 1) // 2], stats[n // 2])


# ----- data-parallel training --------------------------------------------------------


def _chunk_gradient(
    X: np.ndarray[Any, Any], y: np.ndarray[Any, Any], w: np.ndarray[Any, Any], b: float
) -> tuple[np.ndarray[Any, Any], float, float, int]:
    from .ml import sigmoid

    X = np.asarray(X, dtype=np.float32)
    z = X @ w + np.float32(b)
    r = sigmoid(z) - np.asarray(y, dtype=np.float32)
    z64 = z.astype(np.float64)
    loss = float(np.sum(np.logaddexp(0.0, z64) - np.asarray(y, dtype=np.float64) * z64))
    return (r @ X).astype(np.float64), float(r.sum(dtype=np.float64)), loss, X.shape[0]


def _add_grads(a: Any, b: Any) -> Any:
    return a[0] + b[0], a[1] + b[1], a[2] + b[2], a[3] + b[3]


def fit_logistic_regression(
    store: FeatureStore | PathLike,
    epochs: int = 10,
    lr: float = 0.5,
    l2: float = 0.0,
    chunks: Any = "auto",
) -> tuple[np.ndarray[Any, Any], float, list[float]]:
    """Full-batch gradient descent for L2 logistic regression, data-parallel:
    each epoch, every chunk's summed gradient is computed where the chunk
    is (tasks carry the path, the bounds and the weights), the client adds
    them and updates ``w ← w − lr·(g/n + 2·l2·w)``, ``b ← b − lr·(g_b/n +
    2·l2·b)``. Returns ``(w, b, losses)`` (the mean log loss before each
    update). Deterministic; runs on the active scheduler."""
    X = to_dask_array(store, chunks, what="features")
    y = to_dask_array(store, X.chunks[0], what="labels")
    xb, yb = list(X.to_delayed().ravel()), list(y.to_delayed().ravel())
    w = np.zeros(X.shape[1], dtype=np.float32)
    b = 0.0
    losses = []
    for _ in range(epochs):
        parts = [delayed(_chunk_gradient)(xi, yi, w, b) for xi, yi in zip(xb, yb, strict=True)]
        gw, gb, loss, n = compute(_tree(parts, _add_grads))[0]
        if n == 0:
            raise ValueError(f"{store}: the store is empty")
        losses.append(loss / n + l2 * (float(np.dot(w, w)) + b * b))
        w = (w - lr * (gw / n + 2 * l2 * w)).astype(np.float32)
        b = float(b - lr * (gb / n + 2 * l2 * b))
    return w, b, losses


# ----- command line: the data-parallel example -----------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m mmapkit.dask {fit,median,quantile} PATH ...``: train on, or
    take exact quantiles of, a store (or ``.npy`` file) on a dask cluster:
    ``--scheduler tcp://host:8786`` (workers must see PATH at the same
    path: a shared file system), ``local`` (default: a ``LocalCluster`` of
    ``--workers`` processes) or ``synchronous``. Prints JSON."""
    import argparse
    import json

    ap = argparse.ArgumentParser(prog="python -m mmapkit.dask", description=main.__doc__)
    ap.add_argument("command", choices=["fit", "median", "quantile"])
    ap.add_argument("path")
    ap.add_argument("--scheduler", default="local")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--chunks", default="auto", help="rows per chunk, or auto")
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--lr", type=float, default=0.5)
    ap.add_argument("--l2", type=float, default=0.0)
    ap.add_argument(
        "-q", type=float, action="append", help="quantile(s) in [0, 1] (command quantile)"
    )
    args = ap.parse_args(argv)
    chunks: Any = args.chunks if args.chunks == "auto" else int(args.chunks)

    def run() -> dict[str, Any]:
        if args.command == "fit":
            w, b, losses = fit_logistic_regression(args.path, args.epochs, args.lr, args.l2, chunks)
            return {"coef": w.tolist(), "intercept": b, "losses": losses}
        x = to_dask_array(args.path, chunks)
        if args.command == "median":
            return {"median": float(median(x))}
        qs = args.q or [0.5]
        return {"q": qs, "quantile": [float(v) for v in np.atleast_1d(quantile(x, qs))]}

    if args.scheduler == "synchronous":
        with dask.config.set(scheduler="synchronous"):
            out = run()
    else:
        try:
            import distributed
        except ImportError as e:
            raise ImportError(
                f"a dask cluster needs distributed ({e}): pip install 'mmapkit[dask]'",
                name=e.name,
            ) from e

        if args.scheduler == "local":
            with (
                distributed.LocalCluster(
                    n_workers=args.workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                ) as cluster,
                distributed.Client(cluster),
            ):
                out = run()
        else:
            with distributed.Client(args.scheduler):
                out = run()
    print(json.dumps(out))  # noqa: T201 - the command's output
    return 0


if __name__ == "__main__":
    # Run as ``python -m mmapkit.dask`` this file is ``__main__``, whose
    # functions cloudpickle would ship by value (with ``_cache_lock``, which
    # cannot be pickled): run the importable module's main instead, so
    # tasks name ``mmapkit.dask`` functions that workers import.
    from mmapkit.dask import main as _main

    raise SystemExit(_main())

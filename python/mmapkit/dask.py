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


def _columns_of(x: da.Array, axis: int | None) -> tuple[list[da.Array], tuple[int, ...] | None]:
    """The arrays whose elements each result is taken over: ``[x]`` for
    ``axis=None`` (all elements), else ``x``'s columns (every element of
    ``x[:, j...]``) and the shape they give the result (``x.shape[1:]``)."""
    if axis is None:
        return [x], None
    if (
        isinstance(axis, bool)
        or not isinstance(axis, (int, np.integer))
        or axis not in (0, -x.ndim)
    ):
        raise ValueError(f"axis must be None or 0, got {axis!r}")
    if x.ndim < 2:
        return [x], ()
    rest = tuple(int(s) for s in x.shape[1:])
    flat = x if x.ndim == 2 else x.reshape((x.shape[0], int(np.prod(rest))))
    return [flat[:, j] for j in range(flat.shape[1])], rest


def quantile(
    x: Source,
    q: float | Sequence[float] | npt.NDArray[Any],
    *,
    axis: int | None = None,
    method: str = "linear",
    skipna: bool = False,
    gather_limit: int = 1 << 22,
    what: str = "features",
) -> Any:
    """Exact quantile(s) of all elements of ``x`` (a dask array, or a
    store / ``.npy`` path made one with :func:`to_dask_array`), equal to
    ``np.quantile(np.asarray(x), q, method=method)``; see the module docs.
    ``axis=0``: per column, equal to ``np.quantile(a, q, axis=0)`` (shape
    ``q.shape + a.shape[1:]``), each column selected by the same radix
    passes (all columns' histograms in one pass over the chunks, and no
    more than ``gather_limit`` elements gathered at once).
    ``skipna``: like ``np.nanquantile`` (a column of NaN only gives NaN,
    with numpy's ``RuntimeWarning``). Runs on the active scheduler."""
    plan = QuantilePlan(q, method)
    x = _check(_as_dask(x, what))
    cols, shape = _columns_of(x, axis)

    def ranks(n: int, nans: int) -> list[int]:
        if n == 0 or (nans and not skipna):
            return []
        return plan.ranks(n)

    found = _order_statistics(cols, ranks, gather_limit)
    if shape is None:
        n, nans, stats = found[0]
        if nans and not skipna:
            return plan.nan(x.dtype)
        if n == 0:
            raise ValueError(
                "cannot take a quantile of an empty array" + (" (all NaN)" if nans else "")
            )
        return plan.finish(x.dtype, n, stats.__getitem__)
    if x.shape[0] == 0:
        raise ValueError("cannot take a quantile of an empty array (no rows)")
    out = []
    for n, nans, stats in found:
        if (nans and not skipna) or n == 0:
            if n == 0:
                warnings.warn("All-NaN slice encountered", RuntimeWarning, stacklevel=2)
            out.append(plan.nan(x.dtype))
        else:
            out.append(plan.finish(x.dtype, n, stats.__getitem__))
    res = np.stack([np.asarray(v) for v in out], axis=-1)
    return res.reshape(plan.q.shape + shape)


def _order_statistics(
    xs: Sequence[da.Array], ranks_of: Callable[[int, int], list[int]], gather_limit: int
) -> list[tuple[int, int, dict[int, Any]]]:
    """For each array of ``xs``: (n non-NaN, NaN count, {rank: element})
    for the ranks ``ranks_of(n, nans)`` (asked after the first pass). The
    arrays' passes run together, one ``compute`` per pass (the columns of
    one array share its chunks, loaded once a pass); the last pass gathers
    the buckets of at most about ``gather_limit`` elements at a time."""
    out: list[tuple[int, int, dict[int, Any]]] = [(0, 0, {}) for _ in xs]
    blocks = [list(x.to_delayed().ravel()) for x in xs]
    live = [j for j, b in enumerate(blocks) if b]
    if not live:
        return out
    first = compute(
        *[_tree([delayed(_hist)(b, 0, [0]) for b in blocks[j]], _add_hists) for j in live]
    )
    # Per array: [state, prefixes, histograms, bits done, bucket sizes]; a state
    # is [rank, prefix, elements below the bucket] per wanted rank.
    jobs: dict[int, list[Any]] = {}
    for j, (nans_, hist) in zip(live, first, strict=True):
        n, nans = int(hist.sum()), int(nans_)
        out[j] = (n, nans, {})
        wanted = sorted(set(ranks_of(n, nans)))
        if wanted:
            jobs[j] = [[[r, 0, 0] for r in wanted], [0], hist, 0, 0]
    gathering: dict[int, list[Any]] = {}
    while jobs:
        again = []
        for j in list(jobs):
            job = jobs[j]
            state, prefixes, hist = job[0], job[1], job[2]
            dt = xs[j].dtype
            w, D = dt.itemsize * 8, _digits(dt)
            counts = []
            for s in state:
                h = hist[prefixes.index(s[1])]
                cum = np.cumsum(h)
                d = int(np.searchsorted(cum, s[0] - s[2], side="right"))
                s[2] += int(cum[d - 1]) if d else 0
                s[1] = (s[1] << D) | d
                counts.append(int(h[d]))
            job[3] += D
            if job[3] == w:
                out[j][2].update({s[0]: from_key(s[1], dt) for s in state})
                del jobs[j]
                continue
            job[1] = sorted({s[1] for s in state})
            if max(counts) <= gather_limit:
                job[4] = sum(counts)
                gathering[j] = jobs.pop(j)
                continue
            again.append(j)
        if again:
            hists = compute(
                *[
                    _tree(
                        [delayed(_hist)(b, jobs[j][3], jobs[j][1]) for b in blocks[j]], _add_hists
                    )
                    for j in again
                ]
            )
            for j, (_, h) in zip(again, hists, strict=True):
                jobs[j][2] = h
    # Gather the buckets, a batch of arrays of at most about gather_limit elements at a time.
    batch: list[int] = []
    size = 0
    for j in [*gathering, -1]:  # -1: the end
        if j >= 0 and (not batch or size + gathering[j][4] <= gather_limit):
            batch.append(j)
            size += gathering[j][4]
            continue
        if batch:
            parts = compute(
                *[
                    [delayed(_bucket)(b, gathering[i][3], gathering[i][1]) for b in blocks[i]]
                    for i in batch
                ]
            )
            for i, pieces in zip(batch, parts, strict=True):
                state, prefixes = gathering[i][0], gathering[i][1]
                for s in state:
                    at = prefixes.index(s[1])
                    keys = np.concatenate([p[at] for p in pieces])
                    k = s[0] - s[2]
                    out[i][2][s[0]] = from_key(int(np.partition(keys, k)[k]), xs[i].dtype)
        if j >= 0:
            batch, size = [j], gathering[j][4]
    return out


def median(
    x: Source,
    *,
    axis: int | None = None,
    skipna: bool = False,
    gather_limit: int = 1 << 22,
    what: str = "features",
) -> Any:
    """Exact median of all elements, equal to ``np.median`` (``np.nanmedian``
    with ``skipna``): the middle element, or the mean of the two middle
    ones (``float64`` for integers, the element type for floats).
    ``axis=0``: per column, equal to ``np.median(a, axis=0)`` (shape
    ``a.shape[1:]``), with :func:`quantile`'s passes."""
    x = _check(_as_dask(x, what))
    cols, shape = _columns_of(x, axis)

    def ranks(n: int, nans: int) -> list[int]:
        if n == 0 or (nans and not skipna):
            return []
        return [(n - 1) // 2, n // 2]

    ft = x.dtype.type if x.dtype.kind == "f" else np.float64
    out = []
    for n, nans, stats in _order_statistics(cols, ranks, gather_limit):
        if (nans and not skipna) or n == 0:
            if n == 0:
                msg = "All-NaN slice encountered" if nans and shape else "Mean of empty slice."
                warnings.warn(msg, RuntimeWarning, stacklevel=2)
            out.append(ft(np.nan))
        else:
            out.append(median_of(x.dtype, n, stats[(n - 1) // 2], stats[n // 2]))
    if shape is None:
        return out[0]
    return np.array(out, dtype=ft).reshape(shape)


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

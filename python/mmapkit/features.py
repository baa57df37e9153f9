"""A memory-mapped feature store: :class:`FeatureStore`.

A feature store is a directory::

    features.npy   n × d feature vectors (float32 by default; float16, float64 or integers)
    labels.npy     n labels (float32 by default)
    meta.json      schema, committed row count, format version

``features.npy`` and ``labels.npy`` are growable :class:`~mmapkit.ArrayStore`
files (real ``.npy`` files); ``meta.json`` holds the **committed** row count,
the only count readers trust:

>>> import numpy as np, mmapkit
>>> X, y = np.ones((1000, 64), np.float32), np.zeros(1000, np.float32)
>>> fs = mmapkit.FeatureStore("train", "w", dim=64)
>>> fs.add(X, y)                       # durable when it returns; the new row count
1000
>>> fs.close()
>>> fs = mmapkit.FeatureStore("train")  # read-only, any number of processes
>>> X, y = fs.get(0, 100)              # zero-copy views
>>> sum(len(y) for X, y in fs.batches(256, shuffle=True, seed=1))
1000
>>> del X, y; fs.close()

The store and its commit are the Rust core's (``mmapkit::store::features``;
this class is a facade over it): :meth:`FeatureStore.add` appends the rows
to both arrays, syncs each array once, then replaces ``meta.json``
atomically (a temp file beside it, fsync, rename, directory fsync) with the
new count: four syncs. Readers see exactly the committed count, so rows of
an add that has not returned are invisible; a crash or power loss mid-add
loses at most that batch, and the next writer cuts both arrays back to the
committed count, so the two files never disagree after a reopen.
``np.load("features.npy", mmap_mode="r")`` works at any moment but may show
uncommitted rows.

One writer at a time (each array holds an exclusive ``flock``; a second
writer gets ``BlockingIOError``); readers take no lock and follow the writer
with :meth:`FeatureStore.refresh`. A store pickles by path as a reader, so
data-loader workers and ``multiprocessing`` children map the files again
instead of receiving the data.

Reading: :meth:`~FeatureStore.get` (views), :meth:`~FeatureStore.take`
(rows in any order, gathered in Rust), :meth:`~FeatureStore.batches` (one
epoch, sequential or block-shuffled, prefetched by a background thread).
Per-feature statistics: :meth:`~FeatureStore.describe` (count, mean, std,
min, max in one pass), :meth:`~FeatureStore.quantile` and
:meth:`~FeatureStore.median` (exact, out of core). Adapters:
:mod:`mmapkit.ml` (streaming logistic regression), :mod:`mmapkit.torch`,
:mod:`mmapkit.dask`.
"""

from __future__ import annotations

import concurrent.futures
import math
import os
import resource
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Self, TypeVar

import numpy as np
import numpy.typing as npt

from . import _columns
from ._native import FeatureStoreCore, FormatError, GatherAhead
from ._native import (
    page_size as _page_size,
)
from ._npy import as_bytes
from ._order import block_layout
from ._radix import dtype_problem
from ._types import PathLike, QuantileMethod
from .store import ArrayStore

__all__ = ["FeatureStore", "batch_order"]

_T = TypeVar("_T")

META = "meta.json"

Batch = tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]

#: Bytes of rows :meth:`mmapkit.FeatureStore.batches` prepares per group of
#: sequential batches (one pass touching the pages, one prefetch job):
#: large enough that thread hand-offs cost nothing next to the pages,
#: small enough to stay in the CPU caches.
GROUP_BYTES = 1 << 20
#: The same for shuffled batches (one gather into a fresh array by the
#: core's gathering thread): larger, so the Rust core splits each gather between
#: threads and the per-group Python work and allocation are amortised
#: (d = 1000, batch 64, 2 cores, alternating runs: shuffled epochs 6-23 %
#: faster with 4 MiB groups than with 1 MiB ones, slower again at 8 MiB; the
#: gathered groups in flight, up to ``prefetch`` + 1, still fit a shared L3
#: cache).
GATHER_GROUP_BYTES = 4 << 20


def _taken(
    store: Any, rows: npt.NDArray[np.uint64], dtype: np.dtype[Any], shape: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """Rows ``rows`` of ``store`` (an :class:`~mmapkit.ArrayStore`) in a fresh
    array of ``shape``."""
    return _words_as(store._core.take(rows.data), dtype, shape)


def _words_as(
    words: npt.NDArray[np.uint64], dtype: np.dtype[Any], shape: tuple[int, ...]
) -> np.ndarray[Any, Any]:
    """The core's gathered rows (``uint64`` words: aligned, the last one
    padded) viewed as an array of ``shape``."""
    nbytes = math.prod(shape) * dtype.itemsize
    return words.view(np.uint8)[:nbytes].view(dtype).reshape(shape)


def _feature_dtype(dtype: npt.DTypeLike, what: str) -> np.dtype[Any]:
    """A feature dtype: an integer or floating-point scalar type the
    statistics take (token ids as ``uint16``, quantised features as ``int8``
    are stored as they are; every operation of the store works on them)."""
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"{what}: {e}") from None
    if dt.kind not in "iuf" or dt.shape:
        raise ValueError(f"{what} must be an integer or floating-point scalar dtype, got {dt}")
    _stats_dtype(dt, what)
    return dt.newbyteorder("=") if not dt.isnative else dt


def _plain_dtype(dtype: npt.DTypeLike, what: str) -> np.dtype[Any]:
    try:
        dt = np.dtype(dtype)
    except TypeError as e:
        raise ValueError(f"{what}: {e}") from None
    if dt.kind not in "biuf" or dt.shape:
        raise ValueError(f"{what} must be a numeric scalar dtype, got {dt}")
    if dt.kind != "b":
        _stats_dtype(dt, what)
    return dt


def _stats_dtype(dt: np.dtype[Any], what: str) -> None:
    """Refuses, when the store is created or opened, a dtype the statistics
    (the store's own, ``mmapkit.stats``, ``mmapkit.dask``) cannot take."""
    problem = dtype_problem(dt)
    if problem is not None:
        raise ValueError(f"{what}: {problem}")


def batch_order(
    n: int, batch_size: int, seed: Any = None, block_size: int | None = None
) -> npt.NDArray[np.uint64]:
    """The row order of one shuffled epoch over ``n`` rows: a seeded
    permutation of contiguous blocks of ``block_size`` rows (default
    ``max(1, batch_size // 8)``, so each batch mixes about 8 blocks from
    random places, and each block is one sequential read).

    Every row appears exactly once; equal ``seed`` gives the equal order
    (``seed`` is anything ``np.random.default_rng`` takes).
    """
    starts, lens, out_start = block_layout(n, batch_size, seed, block_size)
    # Output position i in block b (which starts at out_start[b]) holds row
    # starts[b] + (i - out_start[b]).
    order = np.repeat(starts - out_start, lens)
    order += np.arange(n, dtype=np.int64)
    return order.view(np.uint64)  # every value is >= 0: a view, not a copy


class FeatureStore:
    """A directory of feature vectors and labels; see the module docs.

    ``mode``: ``"r"`` (default) read-only; ``"r+"`` the one writer of an
    existing store; ``"w"`` create (replacing any store there; needs
    ``dim``); ``"a"`` ``"r+"`` if the store exists, else ``"w"``.
    ``dtype`` (``float32``, the default, ``float16``, ``float64`` or an
    integer type, ``int8`` to ``uint64``: the types the statistics take;
    long double and complex are refused) and ``label_dtype`` (bool or one of
    those, default float32) apply when creating. Integer features are stored
    and returned as they are (no conversion); statistics of them are
    numpy's (``mean``/``std`` in ``float64``, ``min``/``max``/quantiles in
    the features' type where numpy gives that).
    """

    def __init__(
        self,
        path: PathLike,
        mode: str = "r",
        *,
        dim: int | None = None,
        dtype: npt.DTypeLike = np.float32,
        label_dtype: npt.DTypeLike = np.float32,
    ) -> None:
        if mode not in ("r", "r+", "w", "a"):
            raise ValueError(f"invalid mode {mode!r}: expected 'r', 'r+', 'w' or 'a'")
        self._path = os.path.abspath(os.fspath(path))
        self._closed = True
        if mode == "a":
            mode = "r+" if os.path.exists(self._meta_path) else "w"
        if mode == "w":
            dt, ldt = self._check_schema(dim, dtype, label_dtype)
            self._tx = FeatureStoreCore.create(self._path, int(dim), dt.str, ldt.str)  # type: ignore[arg-type]
            mode = "r+"
        else:
            self._tx = FeatureStoreCore.open(self._path, mode == "r+")
        self._mode = mode
        self._closed = False
        try:
            meta = self._meta_path
            try:
                self._dtype: np.dtype[Any] = _feature_dtype(self._tx.dtype, "dtype")
                self._label_dtype: np.dtype[Any] = _plain_dtype(self._tx.label_dtype, "label_dtype")
            except (ValueError, TypeError) as e:
                raise FormatError(f"{meta}: bad schema ({type(e).__name__}: {e})") from None
            self._dim = int(self._tx.dim)
            self._n = len(self._tx)
            self._wrap_arrays()
        except BaseException:
            self.close()
            raise

    # ----- files ----------------------------------------------------------

    @property
    def _meta_path(self) -> str:
        return os.path.join(self._path, META)

    def _check_schema(
        self, dim: int | None, dtype: npt.DTypeLike, label_dtype: npt.DTypeLike
    ) -> tuple[np.dtype[Any], np.dtype[Any]]:
        """The dtypes of a store to create, after checking ``dim``."""
        if (
            dim is None
            or isinstance(dim, bool)
            or not isinstance(dim, (int, np.integer))
            or dim < 1
        ):
            raise ValueError(
                f"{self._path}: creating a FeatureStore needs dim, a positive integer (got {dim!r})"
            )
        return _feature_dtype(dtype, "dtype"), _plain_dtype(label_dtype, "label_dtype")

    def _wrap_arrays(self) -> None:
        """The core's two arrays as ``ArrayStore`` objects (their views are
        numpy's; ``take`` gathers through them)."""
        am = "r+" if self._mode == "r+" else "r"
        self._whole_views: tuple[tuple[int, Any], Batch] | None = None
        self._features = ArrayStore(self._tx.features, self._dtype, am)
        self._labels = ArrayStore(self._tx.labels, self._label_dtype, am)

    # ----- writing --------------------------------------------------------

    def add(self, vectors: npt.ArrayLike, labels: npt.ArrayLike) -> int:
        """Append rows (``vectors`` of shape ``(m, dim)``, ``labels`` of
        shape ``(m,)``; converted to the store's dtypes) and commit them;
        returns the committed row count. Durable when it returns; readers
        see the rows after their next :meth:`refresh`. On an error nothing
        is committed (the partial rows are cut off again)."""
        self._need_open()
        if self._mode != "r+":
            raise OSError(
                9,
                "FeatureStore opened read-only (mode 'r'); open with 'r+', 'w' or 'a' to add",
                self._path,
            )
        X = np.asarray(vectors, dtype=self._dtype)
        y = np.asarray(labels, dtype=self._label_dtype)
        if X.ndim == 1 and X.shape[0] == self._dim:
            X = X[None, :]
        if X.ndim != 2 or X.shape[1] != self._dim:
            raise ValueError(
                f"{self._path}: vectors must have shape (m, {self._dim}), got {np.shape(vectors)}"
            )
        y = y.reshape(-1) if y.ndim == 0 else y
        if y.ndim != 1 or y.shape[0] != X.shape[0]:
            raise ValueError(
                f"{self._path}: labels must have shape ({X.shape[0]},) to match the vectors, "
                f"got {np.shape(labels)}"
            )
        if X.shape[0] == 0:
            return self._n
        # The core appends, syncs and commits (GIL released); on an error
        # it cuts the partial rows off again.
        self._n = self._tx.add(as_bytes(X).data, as_bytes(y).data)
        return self._n

    # ----- reading --------------------------------------------------------

    def refresh(self) -> int:
        """Readers: see rows committed since (views taken before stay
        valid). Returns the committed row count."""
        self._need_open()
        if self._mode == "r+":
            return self._n
        self._n = self._tx.refresh()
        if (
            self._tx.features is not self._features._core
            or self._tx.labels is not self._labels._core
        ):
            # An array was replaced, or a writer cut off rows a dead writer
            # had left: the core mapped it again (old views keep the old
            # mapping).
            self._wrap_arrays()
        return self._n

    def _need_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self._path}: the FeatureStore is closed")

    def _bounds(self, start: int, end: int | None) -> tuple[int, int]:
        n = self._n
        s, e = int(start), n if end is None else int(end)
        if s < 0:
            s += n
        if e < 0:
            e += n
        if not 0 <= s <= e <= n:
            raise ValueError(
                f"{self._path}: rows [{start}, {end}) are out of range for a store of {n} rows"
            )
        return s, e

    def get(self, start: int = 0, end: int | None = None, *, touch: bool = False) -> Batch:
        """Rows ``[start, end)`` as zero-copy, read-only views ``(X, y)``
        (negative indices count from the end; out of range is ValueError).

        :class:`~mmapkit.FileTruncatedError` if another process truncated
        the files under the rows before the call (one ``fstat`` each);
        ``touch=True`` reads one byte of every page first (a few
        nanoseconds a resident page), so Ok means every row was the file's
        when looked at: what mmapkit's iterators do before they hand out a
        batch. A truncation after the call reads as zeros through the views
        (a raw view cannot report it); the store's next call reports it.
        """
        self._need_open()
        s, e = self._bounds(start, end)
        self._check_range(s, e, touch)
        X, y = self._whole()
        return X[s:e], y[s:e]

    def _whole(self) -> Batch:
        """Read-only views of every committed row. A reader keeps them
        between calls (made again when its row count or arrays change): a
        view of the whole store costs more than the slice of it a batch is."""
        key = (self._n, self._features._core)
        if self._whole_views is not None and self._whole_views[0] == key:
            return self._whole_views[1]
        X = self._features.numpy()[: self._n]
        y = self._labels.numpy()[: self._n]
        X.flags.writeable = False
        y.flags.writeable = False
        if self._mode == "r":
            self._whole_views = (key, (X, y))
        return X, y

    def check(self, start: int = 0, stop: int | None = None, *, touch: bool = False) -> None:
        """Raise :class:`~mmapkit.FileTruncatedError` if another process
        truncated the features or labels file under rows ``[start, stop)``
        (default: every row); ``touch=True`` reads every page of them first
        (see :meth:`mmapkit.ArrayStore.check`)."""
        self._need_open()
        hi = self._n if stop is None else min(int(stop), self._n)
        self._check_range(min(int(start), hi), hi, touch)

    def _check_range(self, s: int, e: int, touch: bool) -> None:
        """:meth:`check` of rows ``[s, e)`` (in range), straight on the
        cores: the per-batch check of the iterators."""
        fx, fy = self._features._core, self._labels._core
        if touch:
            fx.check_read(s, e)
            fy.check_read(s, e)
        else:
            fx.check_rows(e)
            fy.check_rows(e)

    @property
    def features(self) -> np.ndarray[Any, Any]:
        """All committed feature rows, a zero-copy read-only view ``(n, dim)``."""
        return self.get()[0]

    @property
    def labels(self) -> np.ndarray[Any, Any]:
        """All committed labels, a zero-copy read-only view ``(n,)``."""
        return self.get()[1]

    def take(self, rows: npt.ArrayLike) -> Batch:
        """Rows ``rows`` (any order, repeats allowed) gathered into fresh
        arrays ``(X, y)`` by the Rust core with the GIL released (runs of
        consecutive rows are one copy each). Indexed as numpy's
        ``X[rows]`` (flattened): integers, negative ones from the end, or a
        boolean mask of one entry per row; anything else (e.g. ``1.7``) or
        a row out of range is an ``IndexError``."""
        self._need_open()
        idx = _row_indices(rows, self._n, self._path)
        u, n = idx.view(np.uint64), idx.size
        return (
            _taken(self._features, u, self._dtype, (n, self._dim)),
            _taken(self._labels, u, self._label_dtype, (n,)),
        )

    def _take_into(
        self,
        rows: npt.NDArray[np.uint64],
        X: np.ndarray[Any, Any],
        y: np.ndarray[Any, Any],
        threads: int | None = None,
    ) -> None:
        """Rows ``rows`` gathered into the C-contiguous arrays ``X``
        (``len(rows) × dim``) and ``y`` (reused staging memory: the device
        loader's), by the Rust core with the GIL released, on up to
        ``threads`` workers (default one per core) when large enough."""
        self._need_open()
        self._features._core.gather(rows.data, X.reshape(-1).view(np.uint8).data, threads=threads)
        self._labels._core.gather(rows.data, y.view(np.uint8).data, threads=threads)

    def num_batches(self, batch_size: int, drop_last: bool = False) -> int:
        """How many batches :meth:`batches` yields per epoch now."""
        _check_batch_size(batch_size)
        return self._n // batch_size if drop_last else -(-self._n // batch_size)

    def batch_bounds(self, batch_size: int, drop_last: bool = False) -> list[tuple[int, int]]:
        """``[start, end)`` of each sequential batch."""
        nb = self.num_batches(batch_size, drop_last)
        return [(i * batch_size, min((i + 1) * batch_size, self._n)) for i in range(nb)]

    def batches(
        self,
        batch_size: int,
        shuffle: bool = False,
        seed: Any = None,
        drop_last: bool = False,
        prefetch: int = 2,
        *,
        block_size: int | None = None,
    ) -> Iterator[Batch]:
        """One epoch of ``(X, y)`` batches over the rows committed when it starts.

        Sequential (``shuffle=False``): zero-copy read-only views, in row
        order. Shuffled: rows in :func:`~mmapkit.features.batch_order` (a ``seed``-ed
        permutation of contiguous blocks of ``block_size`` rows), gathered
        into fresh arrays by :meth:`take` (Rust, GIL released). Every row
        is in exactly one batch per epoch (the last may be short;
        ``drop_last`` skips it); the order array costs 8 bytes per row.

        Batches are prepared in groups of about :data:`~mmapkit.features.GROUP_BYTES`
        (:data:`~mmapkit.features.GATHER_GROUP_BYTES` when shuffled; at least one batch):
        one ``take`` per group for shuffled batches (its batches are slices
        of one fresh array), one pass touching every page for sequential
        ones (so a store that is not in the page cache is
        read ahead). With ``prefetch`` > 0, once a group's pages had to be
        read from disk (on Linux: a major page fault; elsewhere: from the
        start) a background thread prepares up to ``prefetch`` groups ahead
        of the one being consumed, so I/O overlaps the caller's compute;
        while the pages are in the page cache the groups are prepared in
        the caller's thread, where they cost less. ``prefetch=0`` does it
        all in the caller's thread (sequential views are then not touched
        ahead). Shuffled groups, whenever ``prefetch`` > 0, are gathered
        from the first one on by a thread of the Rust core, up to
        ``prefetch`` groups ahead, on read-only handles of its own: the
        copy overlaps the caller's work and never waits for the GIL.
        """
        groups = self.batch_groups(
            batch_size, shuffle, seed, drop_last, prefetch, block_size=block_size
        )
        if shuffle:  # copies, checked as they were gathered
            bs = batch_size
            return (
                (X[s : s + bs], y[s : s + bs]) for X, y, _ in groups for s in range(0, len(y), bs)
            )
        return self._checked_batches(groups, batch_size, touch=prefetch == 0)

    def _checked_batches(
        self,
        groups: Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]],
        bs: int,
        touch: bool,
    ) -> Iterator[Batch]:
        """Sequential batches of views, each one checked before it is handed
        out: its pages read (``touch``; as ``get(touch=True)``) or, where the
        group's pages were just read ahead, the fault record and the files'
        lengths (see :meth:`_checked`)."""
        lo = 0
        for X, y, _ in groups:
            n = len(y)
            for s in range(0, n, bs):
                e = min(s + bs, n)
                self._check_range(lo + s, lo + e, touch)
                yield X[s:e], y[s:e]
            lo += n

    def batch_groups(
        self,
        batch_size: int,
        shuffle: bool = False,
        seed: Any = None,
        drop_last: bool = False,
        prefetch: int = 2,
        *,
        block_size: int | None = None,
    ) -> Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]]:
        """:meth:`batches`' epoch as groups ``(X, y, batch_size)``: each
        holds consecutive batches of ``batch_size`` rows (the last may be
        short). Consumers that can work per group (``mmapkit.ml``'s fit:
        labels converted once per group) skip the per-batch views."""
        self._need_open()
        _check_batch_size(batch_size)
        if prefetch < 0:
            raise ValueError(f"prefetch must be >= 0, got {prefetch}")
        n = self._n
        stop = (n // batch_size) * batch_size if drop_last else n
        row_bytes = self._dim * self._dtype.itemsize + self._label_dtype.itemsize
        group_bytes = GATHER_GROUP_BYTES if shuffle else GROUP_BYTES
        per_group = max(1, min(1024, group_bytes // max(1, batch_size * row_bytes)))
        step = per_group * batch_size
        bounds = [(lo, min(lo + step, stop)) for lo in range(0, stop, step)]
        if not shuffle:
            X, y = self.get(0, stop)
            if prefetch == 0:
                views = ((X[lo:hi], y[lo:hi], batch_size) for lo, hi in bounds)
                return self._checked(views, bounds, touch=True)
            made = self._prefetched(bounds, lambda b: self._touched(X, y, b, batch_size), prefetch)
            return self._checked(made, bounds, touch=False)
        order = batch_order(n, batch_size, seed, block_size).view(np.int64)
        if prefetch == 0:
            return ((*self.take(order[lo:hi]), batch_size) for lo, hi in bounds)
        # A gather is a copy with the GIL released: worth a thread from the
        # start, the core's own (it never waits for the GIL behind the caller).
        ahead = GatherAhead(
            [self._features._core, self._labels._core], order.view(np.uint64).data, bounds, prefetch
        )
        return self._gathered(ahead, bounds, batch_size)

    def _gathered(
        self, ahead: GatherAhead, bounds: Sequence[tuple[int, int]], batch_size: int
    ) -> Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]]:
        """The groups of a :class:`~mmapkit._native.GatherAhead`, as arrays."""
        for (lo, hi), (xw, yw) in zip(bounds, ahead, strict=True):
            m = hi - lo
            yield (
                _words_as(xw, self._dtype, (m, self._dim)),
                _words_as(yw, self._label_dtype, (m,)),
                batch_size,
            )

    def _checked(
        self,
        groups: Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]],
        bounds: Sequence[tuple[int, int]],
        touch: bool,
    ) -> Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]]:
        """Groups of views, each one checked against a truncation before it
        is handed out, and all rows once more after the last: an epoch that
        a truncation hit raises :class:`~mmapkit.FileTruncatedError`, never
        ends in zeros. ``touch``: read one byte of every page first (as
        ``get(touch=True)``, about 5 ns a page); groups that ``_touched``
        already read are checked by the fault record and one ``fstat``
        (reading them again here would take their disk reads, and with
        them the prefetch decision, away from ``_prefetched``)."""
        for (lo, hi), group in zip(bounds, groups, strict=True):
            self.check(lo, hi, touch=touch)
            yield group
        self.check(0, bounds[-1][1] if bounds else 0)

    def _touched(
        self, X: np.ndarray[Any, Any], y: np.ndarray[Any, Any], b: tuple[int, int], batch_size: int
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], int]:
        """Rows ``[lo, hi)`` as views, after reading one byte of each page."""
        lo, hi = b
        page = _page_size()
        for a in (X[lo:hi], y[lo:hi]):
            v = a.reshape(-1).view(np.uint8)
            if v.size:
                v[::page].max()
        return X[lo:hi], y[lo:hi], batch_size

    def _prefetched(
        self,
        bounds: Sequence[tuple[int, int]],
        make: Any,
        prefetch: int,
    ) -> Iterator[Any]:
        """``make(b)`` for each group of views, in order. While the
        groups' pages are in the page cache they are made in the
        caller's thread: a prefetch thread would only add hand-offs
        (measured at d = 64, batch 64: about 1 µs CPU and 2-3 µs wall per
        batch). From the first group whose making read from storage (major
        page faults or block reads of this thread), the background thread
        is used, so I/O overlaps compute. Without per-thread counts (not
        Linux) the thread is always used."""
        it = iter(bounds)
        if prefetch == 0:
            for b in it:
                yield make(b)
            return
        if _disk_reads is not None:
            for b in it:
                before = _disk_reads()
                group = make(b)
                cold = _disk_reads() != before
                yield group
                if cold:
                    break
            else:
                return
        pool = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="mmapkit-prefetch")
        pending: deque[concurrent.futures.Future[Any]] = deque()
        try:
            for b in it:
                pending.append(pool.submit(make, b))
                if len(pending) > prefetch:
                    break
            while pending:
                ready = pending.popleft().result()
                for b in it:
                    pending.append(pool.submit(make, b))
                    break
                yield ready
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=True)

    # ----- statistics (mmapkit._columns, shared with mmapkit.stats' axis=0) --

    def _stat(self, fn: Callable[..., _T], *args: Any) -> _T:
        """``fn(features, *args)`` over the zero-copy view, then the rows
        checked again: a truncation during the pass is
        :class:`~mmapkit.FileTruncatedError`, not statistics of zeros."""
        self._need_open()
        r = fn(self.features, *args)
        self.check(0, self._n)
        return r

    def mean(self) -> npt.NDArray[np.float64]:
        """Per-feature mean (``float64``, shape ``(dim,)``), one streaming pass."""
        return self._stat(_columns.mean)

    def std(self, ddof: int = 0) -> npt.NDArray[np.float64]:
        """Per-feature standard deviation (``float64``), one streaming pass."""
        return self._stat(_columns.std, ddof)

    def _extreme(self, fn: Any) -> np.ndarray[Any, Any]:
        self._need_open()
        if self._n == 0:
            raise ValueError(f"{self._path}: the store is empty (no minimum or maximum)")
        return self._stat(_columns.extreme, fn)

    def min(self) -> np.ndarray[Any, Any]:
        """Per-feature minimum (the store's dtype), like ``np.min(X, axis=0)``."""
        return self._extreme(np.min)

    def max(self) -> np.ndarray[Any, Any]:
        """Per-feature maximum (the store's dtype), like ``np.max(X, axis=0)``."""
        return self._extreme(np.max)

    def describe(self, ddof: int = 0) -> dict[str, Any]:
        """``count``, ``mean``, ``std``, ``min`` and ``max`` per feature in
        one pass over the store (the same values as the methods of those
        names; ``min``/``max`` are ``None`` for an empty store), e.g. to
        standardise features: ``(X - d["mean"]) / d["std"]``."""
        return self._stat(_columns.describe, ddof)

    def quantile(
        self,
        q: float | Sequence[float] | npt.NDArray[Any],
        *,
        method: QuantileMethod = "linear",
        memory: int = 256 << 20,
        threads: int | None = None,
    ) -> Any:
        """Exact per-feature quantile(s), equal to ``np.quantile(X, q, axis=0,
        method=method)`` (``"linear"`` or ``"inverted_cdf"``; shape
        ``(dim,)`` for a scalar ``q``, ``(len(q), dim)`` for a sequence; a
        column holding a NaN gives NaN, as in numpy), the same as
        ``mmapkit.stats.quantile(store.features, q, axis=0)``.

        Memory stays within about ``memory`` bytes: when a column (``n``
        values) fits, columns are copied out as many at a time as fit and
        selected by :func:`mmapkit.stats.quantile` (Rust, GIL released);
        otherwise by radix selection out of core: one pass over the store
        sums per-column histograms of the keys' top 12 bits, each further
        pass narrows every wanted order statistic to a bucket of the next
        12 bits, and when all buckets fit in ``memory`` a last pass
        collects them (typically 2-3 passes).
        """
        self._need_open()
        if self._n == 0:
            raise ValueError(f"{self._path}: the store is empty (no quantiles)")
        return self._stat(_columns.quantile, q, method, memory, threads)

    def median(
        self, *, memory: int = 256 << 20, threads: int | None = None
    ) -> np.ndarray[Any, Any]:
        """Exact per-feature median, equal to ``np.median(X, axis=0)``
        (``memory`` as in :meth:`quantile`)."""
        return self._stat(_columns.median, memory, threads)

    # ----- properties and protocol ----------------------------------------

    def __len__(self) -> int:
        return self._n

    @property
    def path(self) -> str:
        """The store's directory."""
        return self._path

    @property
    def mode(self) -> str:
        """``"r"`` (a reader) or ``"r+"`` (the one writer; what ``"w"`` and ``"a"`` open as)."""
        return self._mode

    @property
    def dim(self) -> int:
        """The number of features per row."""
        return self._dim

    @property
    def dtype(self) -> np.dtype[Any]:
        """The feature vectors' dtype."""
        return self._dtype

    @property
    def label_dtype(self) -> np.dtype[Any]:
        """The labels' dtype."""
        return self._label_dtype

    @property
    def shape(self) -> tuple[int, int]:
        """``(rows, dim)``: the committed rows as of the last :meth:`add` or :meth:`refresh`."""
        return (self._n, self._dim)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def close(self) -> None:
        """Close both arrays (a writer trims and flushes them, and lets its
        lock go at once: the store can be opened for writing again); views
        taken before keep their memory, readable, until they are gone."""
        if self._closed:
            return
        self._closed = True
        self._whole_views = None
        self._tx.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by path, always as a reader (there is one writer)."""
        return (FeatureStore, (self._path, "r"))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"rows={self._n}"
        return (
            f"<mmapkit.FeatureStore {self._path!r} mode={self._mode!r} dim={self._dim} "
            f"dtype={self._dtype} {state}>"
        )


def _row_indices(rows: npt.ArrayLike, n: int, path: str) -> npt.NDArray[np.int64]:
    """``rows`` as flat non-negative int64 row numbers, by numpy's rules
    for ``X[rows]`` on ``n`` rows."""
    idx = np.asarray(rows)
    if idx.dtype == np.bool_:
        if idx.shape != (n,):
            raise IndexError(
                f"{path}: a boolean mask of shape {idx.shape} does not match the {n} rows"
            )
        return np.flatnonzero(idx).astype(np.int64)
    if idx.size == 0:
        return np.empty(0, dtype=np.int64)
    if idx.dtype.kind not in "iu":
        raise IndexError(f"{path}: row indices must be integers or a boolean mask, got {idx.dtype}")
    bad = (idx < -n) | (idx >= n)
    if bad.any():
        raise IndexError(f"{path}: row {idx[bad].flat[0]} is out of range for a store of {n} rows")
    out = idx.astype(np.int64).reshape(-1)
    return np.where(out < 0, out + n, out)


def _thread_disk_reads() -> int:
    # Block reads count the faults' read-ahead too: Linux 6.18 here counts
    # no major fault for a mapped read that the fault's read-ahead serves.
    r = resource.getrusage(resource.RUSAGE_THREAD)
    return r.ru_majflt + r.ru_inblock


#: A count that grows when this thread reads from storage (major page
#: faults and block reads), or None where it is not kept per thread.
_disk_reads = _thread_disk_reads if hasattr(resource, "RUSAGE_THREAD") else None


def _check_batch_size(batch_size: int) -> None:
    if (
        isinstance(batch_size, bool)
        or not isinstance(batch_size, (int, np.integer))
        or batch_size < 1
    ):
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")

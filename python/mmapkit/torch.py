"""PyTorch adapters for :class:`~mmapkit.FeatureStore` and
:class:`~mmapkit.TokenStore` (extra ``torch``; token data: :func:`token_loader`,
at the end).

:class:`FeatureDataset` is a map-style ``Dataset`` whose items are **whole
batches**, and :class:`FeatureBatchSampler` yields one key per batch, so a
``DataLoader`` with automatic batching off (``batch_size=None``) moves one
``(X, y)`` pair of tensors per batch instead of collating rows:

>>> import numpy as np, mmapkit
>>> from torch.utils.data import DataLoader
>>> from mmapkit.torch import FeatureBatchSampler, FeatureDataset
>>> with mmapkit.FeatureStore("train", "w", dim=4) as fs:
...     fs.add(np.ones((1000, 4), np.float32), np.zeros(1000, np.float32))
1000
>>> ds = FeatureDataset("train")
>>> loader = DataLoader(ds, sampler=FeatureBatchSampler(ds, 256, shuffle=True, seed=0),
...                     batch_size=None, num_workers=2)
>>> for epoch in range(3):
...     loader.sampler.set_epoch(epoch)
...     rows = sum(len(y) for X, y in loader)
>>> rows
1000

(:func:`data_loader` builds exactly that.) The dataset holds only the
store's path: worker processes (fork or spawn) open the store themselves,
their pickles carry no data, and nothing in them grows with epochs (no
per-row Python objects to be touched by copy-on-read). Sequential batches
are ``torch.from_numpy`` of the mapped rows (no copy); readers map the
store copy-on-write, so writing to such a batch in place (``X -= mu``)
changes this process's private copy of those pages, never the file (a
page written so also keeps showing what it held then, should the store
grow into it and be refreshed). Shuffled batches are gathered into fresh
arrays by the Rust core (GIL released).

Workers or not: with ``num_workers=0`` a sequential batch reaches the
training loop without any copy; a worker process must hand each batch to
the main process, and PyTorch copies it into a new shared-memory segment
to do so (the ``features`` benchmark's ``loader`` task measures both,
next to a batch-aware ``np.memmap`` Dataset and in-RAM tensors). Use
workers when the per-batch work *in the dataset* (decoding, augmenting)
is what limits, and ``num_workers=0`` for batches read straight from
the store.

To feed a GPU, :func:`device_loader` copies batches to it asynchronously on
a CUDA stream, so copying and the model's compute overlap (the same batches
and order as :func:`data_loader`): straight from the store's page-cache
pages, registered with CUDA, where a batch is a few runs of consecutive rows,
else gathered first into reused pinned staging buffers by several Rust
threads.

Keys: a ``slice`` (rows ``start:stop``, zero-copy), an integer array or list
(those rows, gathered), or an ``int`` ``i`` (sequential batch ``i`` of
``batch_size`` rows).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import mmap
import os
import warnings
import weakref
from collections import deque
from collections.abc import Iterator
from typing import Any

import numpy as np
import numpy.typing as npt

try:
    import torch
    import torch.utils.data
except ImportError as e:
    raise ImportError(
        f"mmapkit.torch needs PyTorch ({e}): pip install 'mmapkit[torch]'", name=e.name
    ) from e

from ._npy import id_dtype
from ._order import batch_runs
from ._sharding import ShardedEpochs, Tracker
from ._types import PathLike
from .features import FeatureStore, batch_order
from .tokens import PackedSampler, TokenStore, WindowSampler, gather_windows

__all__ = [
    "DeviceLoader",
    "FeatureBatchSampler",
    "FeatureDataLoader",
    "FeatureDataset",
    "TokenDataLoader",
    "TokenDataset",
    "data_loader",
    "device_loader",
    "token_loader",
]


#: Whether torch's warning about read-only arrays is spent: torch gives it
#: once per process (TORCH_WARN_ONCE), so only the first read-only batch
#: needs the warnings filter (6 µs a call, a third of a batch's cost).
_warned = [False]


def _tensor(a: np.ndarray[Any, Any]) -> torch.Tensor:
    if a.flags.writeable or _warned[0]:
        return torch.from_numpy(a)
    with warnings.catch_warnings():
        # numpy's view is read-only, torch's cannot be: the reader's mapping is
        # copy-on-write, so a write to the tensor lands on private pages.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        t = torch.from_numpy(a)
    _warned[0] = True
    return t


class FeatureDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A :class:`~mmapkit.FeatureStore` as a map-style dataset of batches.

    ``store``: a store or its path (opened read-only in each process that
    uses the dataset). ``batch_size`` is the default for ``int`` keys and
    ``len()`` (number of sequential batches). The row count is fixed when
    the dataset is made (``refresh()`` to see rows committed since; a
    :class:`FeatureBatchSampler` reads it at the start of each epoch, and a
    worker whose store is behind a key refreshes it).
    """

    def __init__(self, store: FeatureStore | PathLike, batch_size: int = 256) -> None:
        self.path = (
            store.path if isinstance(store, FeatureStore) else os.path.abspath(os.fspath(store))
        )
        self.batch_size = int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self._store: FeatureStore | None = None
        self._pid = 0
        self.rows = len(self.store)

    @property
    def store(self) -> FeatureStore:
        """This process's read-only store (opened on first use, again after a fork)."""
        if self._store is None or self._pid != os.getpid():
            self._store = FeatureStore(self.path, "r")
            self._pid = os.getpid()
        return self._store

    def refresh(self) -> int:
        """See rows committed since; returns the row count."""
        self.rows = self.store.refresh()
        return self.rows

    def __len__(self) -> int:
        return (self.rows + self.batch_size - 1) // self.batch_size

    def _cover(self, stop: int) -> FeatureStore:
        """The store, refreshed if it holds fewer than ``stop`` rows (a
        worker's copy opened before the main process refreshed)."""
        s = self.store
        if stop > len(s):
            self.rows = max(self.rows, s.refresh())
        return s

    def __getitem__(self, key: Any) -> tuple[torch.Tensor, torch.Tensor]:
        if isinstance(key, (int, np.integer)):
            i = int(key)
            if not 0 <= i < len(self):
                raise IndexError(f"batch {i} out of range ({len(self)} batches)")
            key = slice(i * self.batch_size, min((i + 1) * self.batch_size, self.rows))
        if isinstance(key, slice):
            if key.step not in (None, 1):
                raise ValueError("slices of a FeatureDataset must have step 1")
            if isinstance(key.stop, (int, np.integer)) and key.stop >= 0:
                self._cover(int(key.stop))
            start, stop, _ = key.indices(self.rows)
            # Pages read and checked before the batch leaves (no zeros of
            # a truncated file reach training unreported).
            X, y = self.store.get(start, max(start, stop), touch=True)
        else:
            idx = np.asarray(key)
            if idx.size and np.issubdtype(idx.dtype, np.integer):
                self._cover(int(idx.max()) + 1)
            X, y = self.store.take(key)
        return _tensor(X), _tensor(y)

    def __getstate__(self) -> dict[str, Any]:
        # Path and sizes only: a worker opens the store itself.
        return {"path": self.path, "batch_size": self.batch_size, "rows": self.rows}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._store = None
        self._pid = 0


class FeatureBatchSampler(ShardedEpochs, torch.utils.data.Sampler[Any]):
    """Keys of one epoch's batches for :class:`FeatureDataset`: slices in
    row order, or (``shuffle``) arrays of rows in the order of
    :func:`mmapkit.features.batch_order` for seed
    ``np.random.SeedSequence(seed, spawn_key=(epoch,))``, equal (at world
    size 1) to ``FeatureStore.batches(batch_size, shuffle=True, seed=...)``'s
    order. Each epoch covers the dataset's rows as they are when it starts
    (after ``dataset.refresh()``, the rows committed since too).

    ``seed``: default 0, the same in every process, as ``DistributedSampler``'s
    (``None`` means the default too); for a fresh shuffle per run pass e.g.
    ``np.random.SeedSequence().entropy``, the same value in every rank.

    ``block_size``: rows per contiguous block of the shuffle (default
    ``max(1, batch_size // 8)``; ``1``: a full permutation of the rows). Long
    blocks are sequential reads (faster on cold storage, cheaper to gather),
    but a batch then mixes only ``batch_size / block_size`` places of the
    store: on a store sorted by label (or by time, source, ...) batches are
    far from i.i.d. (measured on a label-sorted store: per-batch positive
    fraction std 0.177 with the default blocks against 0.031 with
    ``block_size=1``). Use ``block_size=1`` unless the rows are in random order.

    Epochs: :meth:`set_epoch` chooses the epoch the next ``iter()`` yields (as
    ``DistributedSampler.set_epoch``); without it, each ``iter()`` yields the
    epoch after the one before (0, 1, 2, ...). The epoch moves on when an
    iteration starts (its first key), not when ``iter()`` is called.

    Ranks (``torch.distributed``): ``rank`` and ``world_size`` default to the
    initialised process group's (else rank 0 of 1). The epoch's global batch
    order (``G`` batches: the shuffled rows cut into batches, or the
    sequential batches) is the same in every rank; rank ``r`` takes global
    batches ``r, r + world_size, ...``. Every rank gets the same number of
    batches, so DDP's collectives never wait on a rank that ran out:
    ``ceil(G / world_size)``, the last ones wrapping around to the epoch's
    first batches (as ``DistributedSampler`` pads), or with ``drop_last``
    ``G // world_size`` (the tail dropped, as is a last partial batch).

    Resume (:meth:`state_dict`, :meth:`load_state_dict`): the state is a plain
    dict of ints recording the epoch, its row count and the number of global
    batches consumed (``k * world_size`` after ``k`` batches per rank). Loaded
    into a fresh sampler, the next ``iter()`` yields the rest of that epoch:
    exactly what an uninterrupted one would have yielded after ``k``, and at
    another world size the global batches not yet consumed (shared out anew,
    padded again). ``set_epoch`` with the state's epoch keeps the resume, any
    other epoch drops it. The sampler's own count is of keys it handed out: in
    a ``DataLoader`` with workers those run ahead of the batches the training
    loop has had, so save the state of the loader :func:`data_loader` returns
    (or of a :class:`DeviceLoader`), which counts delivered batches.
    """

    def __init__(
        self,
        dataset: FeatureDataset,
        batch_size: int | None = None,
        shuffle: bool = False,
        seed: int | None = 0,
        drop_last: bool = False,
        block_size: int | None = None,
        *,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self.dataset = dataset
        ShardedEpochs.__init__(
            self,
            dataset.batch_size if batch_size is None else batch_size,
            seed,
            drop_last,
            rank,
            world_size,
        )
        if block_size is not None and block_size < 1:
            raise ValueError(f"block_size must be at least 1, got {block_size}")
        self.shuffle = shuffle
        self.block_size = block_size

    @property
    def rows(self) -> int:
        """The dataset's row count now (read again at each epoch)."""
        return self.dataset.rows

    def _config(self) -> dict[str, int]:
        return {
            "shuffle": int(self.shuffle),
            "block_size": -1 if self.block_size is None else self.block_size,
        }

    def _cover(self, rows: int) -> None:
        self.dataset._cover(rows)

    def __iter__(self) -> Iterator[Any]:
        return self._keys(runs=False)

    def _epoch_keys(self, epoch: int, rows: int, mine: list[int], **how: Any) -> Iterator[Any]:
        """The epoch's batches (this rank's share): slices in order and arrays
        of rows shuffled, or (``runs``, for the device loader) :class:`_Runs`
        either way, a shuffled batch's read off the shuffle's blocks without
        the epoch's order being made (16 M rows: 128 MB and 0.1-0.4 s before
        the first batch)."""
        runs = bool(how.get("runs"))
        bs = self.batch_size
        stop = min(rows, self._total(rows) * bs)
        if not self.shuffle:
            spans = ((j * bs, min((j + 1) * bs, stop)) for j in mine)
            return (_Runs([(0, e - s, s)]) if runs else slice(s, e) for s, e in spans)
        if runs:
            seed = self.epoch_seed(epoch)
            return map(_Runs, batch_runs(rows, bs, seed, self.block_size, stop, mine))
        order = batch_order(rows, bs, self.epoch_seed(epoch), self.block_size).view(np.int64)
        return (order[j * bs : min((j + 1) * bs, stop)] for j in mine)


class _Runs:
    """A batch as runs of consecutive rows ``(i, j, first)``: positions ``i:j``
    hold rows ``first, first + 1, ...`` (maximal runs: a sequential batch is one)."""

    __slots__ = ("n", "runs", "stop")

    def __init__(self, runs: list[tuple[int, int, int]]) -> None:
        self.runs = runs
        self.n = runs[-1][1] if runs else 0
        self.stop = max((first + j - i for i, j, first in runs), default=0)

    def rows(self) -> npt.NDArray[np.uint64]:
        """The batch's rows, in order."""
        out = np.arange(self.n, dtype=np.int64)
        for i, j, first in self.runs:
            out[i:j] += first - i
        return out.view(np.uint64)


class _ShardedLoader(torch.utils.data.DataLoader[Any]):
    """A ``DataLoader`` over a sampler of :class:`mmapkit._sharding.ShardedEpochs`,
    with ``set_epoch`` and (``torchdata.stateful_dataloader``'s convention)
    ``state_dict()`` / ``load_state_dict()``, which count the batches this
    loader delivered to the caller (not the keys its workers took ahead)."""

    sampler: ShardedEpochs

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._tracker: Tracker | None = None

    def set_epoch(self, epoch: int) -> None:
        """The epoch the next ``iter()`` yields (as the sampler's ``set_epoch``)."""
        self.sampler.set_epoch(epoch)

    def __iter__(self) -> Iterator[Any]:  # type: ignore[override]
        return self._delivered(super().__iter__)

    def _delivered(self, start: Any) -> Iterator[Any]:
        tracker = self._tracker = Tracker(self.sampler)
        for batch in start():
            tracker.one()
            yield batch
        tracker.ended = True

    def state_dict(self) -> dict[str, int]:
        """Where the loader stands: after the batches it delivered (see
        :class:`FeatureBatchSampler`'s notes on resume); a plain dict of ints."""
        if self._tracker is None:
            return self.sampler.state_dict()
        return self._tracker.state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from :meth:`state_dict`'s dict: the next ``iter()`` yields
        the rest of its epoch (with workers too: keys come from this process)."""
        self.sampler.load_state_dict(state)
        self._tracker = None


class FeatureDataLoader(_ShardedLoader):
    """The ``DataLoader`` :func:`data_loader` returns: a plain ``DataLoader``
    over a :class:`FeatureDataset` and a :class:`FeatureBatchSampler`, with
    ``set_epoch`` and (``torchdata.stateful_dataloader``'s convention)
    ``state_dict()`` / ``load_state_dict()``, which count the batches this
    loader delivered to the caller (not the keys its workers took ahead)."""

    sampler: FeatureBatchSampler


def data_loader(
    store: FeatureStore | FeatureDataset | PathLike,
    batch_size: int = 256,
    shuffle: bool = False,
    seed: int | None = 0,
    drop_last: bool = False,
    *,
    block_size: int | None = None,
    rank: int | None = None,
    world_size: int | None = None,
    **kwargs: Any,
) -> FeatureDataLoader:
    """A ``DataLoader`` of ``(X, y)`` batches over ``store``: a
    :class:`FeatureDataset` with a :class:`FeatureBatchSampler` and
    automatic batching off. ``kwargs`` go to ``DataLoader``
    (``num_workers``, ``multiprocessing_context``, ``pin_memory``,
    ``persistent_workers``, ...).

    ``seed`` (default 0, the same in every process), ``block_size`` (rows per
    contiguous block of a shuffle; ``1``: a full permutation, which a store
    whose rows are sorted by label or time needs, at the cost of a gather of
    scattered rows; the default ``batch_size // 8`` reads longer runs but
    mixes only about 8 places of the store per batch), ``rank`` and
    ``world_size`` (default: the initialised ``torch.distributed`` group's, so
    each rank loads its own equal share of every epoch): as
    :class:`FeatureBatchSampler`. The loader has ``set_epoch``,
    ``state_dict()`` and ``load_state_dict()`` (:class:`FeatureDataLoader`).
    """
    ds = store if isinstance(store, FeatureDataset) else FeatureDataset(store, batch_size)
    sampler = FeatureBatchSampler(
        ds,
        batch_size,
        shuffle=shuffle,
        seed=seed,
        drop_last=drop_last,
        block_size=block_size,
        rank=rank,
        world_size=world_size,
    )
    return FeatureDataLoader(ds, sampler=sampler, batch_size=None, **kwargs)


class _Staging:
    """One reusable host buffer of the device loader's ring: ``batch_size``
    rows and labels (pinned when the target is a GPU, so its copies run
    asynchronously at the bus's rate), and the event of its last copy."""

    def __init__(self, store: FeatureStore, batch_size: int, pin: bool) -> None:
        X = torch.from_numpy(np.empty((batch_size, store.dim), dtype=store.dtype))
        y = torch.from_numpy(np.empty(batch_size, dtype=store.label_dtype))
        self.X, self.y = (X.pin_memory(), y.pin_memory()) if pin else (X, y)
        self.Xn, self.yn = self.X.numpy(), self.y.numpy()
        self.copied: Any = None  # torch.cuda.Event of the last copy out (None: none in flight)

    def wait(self) -> None:
        """Returns once the last copy out of this buffer has finished."""
        if self.copied is not None:
            self.copied.synchronize()
            self.copied = None


#: Auto mode copies a shuffled batch straight from the registered mapping when
#: its runs of consecutive rows average at least this many bytes (one
#: ``copy_`` each, a few µs to issue); shorter runs are gathered on the host.
DIRECT_RUN_BYTES = 256 << 10

_HOST_REGISTER_READ_ONLY = 8  # cudaHostRegisterReadOnly


class _Direct:
    """The store's two files mapped read-only and shared and registered with
    CUDA (``cudaHostRegister``): their page-cache pages pinned, so batches are
    copied to the device straight from them by DMA, with no host gather (the
    bus's rate for runs of consecutive rows). Covers the first ``rows`` rows.
    (``pin=False``: mapped only, for testing the copies without a GPU.)"""

    def __init__(self, store: FeatureStore, rows: int, pin: bool = True) -> None:
        self.rows = rows
        arrays = [np.load(os.path.join(store.path, f), mmap_mode="r") for f in _STORE_FILES]
        if any(len(a) < rows for a in arrays):
            raise ValueError(f"{store.path}: the files' headers are behind its rows")
        self.X, self.y = (_tensor(a[:rows]) for a in arrays)
        done: list[int] = []
        for a in arrays if pin else []:
            rt = torch.cuda.cudart()  # type: ignore[no-untyped-call]
            # From the start of numpy's mapping (the page holding the header).
            head = a.offset % mmap.ALLOCATIONGRANULARITY
            base = a.ctypes.data - head
            if int(rt.cudaHostRegister(base, a.nbytes + head, _HOST_REGISTER_READ_ONLY)):
                _unregister(done, arrays)
                raise OSError(f"cudaHostRegister of {store.path}'s mapping failed")
            done.append(base)
        # Unregistered before the mappings go (the arrays outlive the call).
        self._finalizer = weakref.finalize(self, _unregister, done, arrays)

    def close(self) -> None:
        self._finalizer()

    @staticmethod
    def fits(store: FeatureStore, rows: int) -> bool:
        """Whether pinning the store's pages is reasonable: at most half the RAM."""
        ram = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        row = store.dim * store.dtype.itemsize + store.label_dtype.itemsize
        return rows > 0 and rows * row <= ram // 2


_STORE_FILES = ("features.npy", "labels.npy")


def _unregister(bases: list[int], arrays: list[Any]) -> None:
    if bases:
        torch.cuda.synchronize()  # no copy out of them in flight (the loader went early)
    for b in bases:
        torch.cuda.cudart().cudaHostUnregister(b)  # type: ignore[no-untyped-call]
    del arrays  # (kept alive until now by the finalizer's reference)


def _copy_all(dst: list[torch.Tensor], src: list[torch.Tensor]) -> None:
    """``dst[i].copy_(src[i], non_blocking=True)`` for every ``i``, in one torch
    call where torch has ``_foreach_copy_`` (2.1 on), so the GIL is let go and
    taken back once, not once per copy."""
    foreach = getattr(torch, "_foreach_copy_", None)
    if foreach is not None:
        foreach(dst, src, non_blocking=True)
        return
    for d, s in zip(dst, src, strict=True):  # pragma: no cover (torch < 2.1)
        d.copy_(s, non_blocking=True)


class DeviceLoader:
    """Batches of a :class:`~mmapkit.FeatureStore` delivered to ``device``;
    see :func:`device_loader`. Each ``iter()`` is one epoch (the keys of a
    :class:`FeatureBatchSampler`, so epochs, seeds and :meth:`refresh` work
    as in :func:`data_loader`)."""

    def __init__(
        self,
        store: FeatureStore | FeatureDataset | PathLike,
        batch_size: int,
        shuffle: bool = False,
        seed: int | None = 0,
        drop_last: bool = False,
        device: str | torch.device | None = None,
        *,
        prefetch: int = 2,
        threads: int | None = None,
        block_size: int | None = None,
        workers: int = 2,
        direct: bool | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        if prefetch < 1:
            raise ValueError(f"prefetch must be at least 1, got {prefetch}")
        if workers < 1:
            raise ValueError(f"workers must be at least 1, got {workers}")
        self.dataset = (
            store if isinstance(store, FeatureDataset) else FeatureDataset(store, batch_size)
        )
        self.sampler = FeatureBatchSampler(
            self.dataset,
            batch_size,
            shuffle,
            seed,
            drop_last,
            block_size,
            rank=rank,
            world_size=world_size,
        )
        self._tracker: Tracker | None = None
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        self.device = torch.device(device)
        self.prefetch = int(prefetch)
        self.threads = threads
        self.workers = int(workers)
        self.direct = direct
        self._direct: _Direct | None = None
        self._ring: list[_Staging] = []
        self._stream: Any = None

    @property
    def batch_size(self) -> int:
        """Rows per batch (the last batch may have fewer unless ``drop_last``)."""
        return self.sampler.batch_size

    def set_epoch(self, epoch: int) -> None:
        """The epoch whose order the next ``iter()`` yields (as ``DataLoader``'s sampler)."""
        self.sampler.set_epoch(epoch)

    def refresh(self) -> int:
        """See rows committed since (from the next epoch on); returns the row count."""
        return self.dataset.refresh()

    def state_dict(self) -> dict[str, int]:
        """Where the loader stands, after the batches it delivered (not those
        prepared ahead): a plain dict of ints, as :class:`FeatureDataLoader`'s."""
        if self._tracker is None:
            return self.sampler.state_dict()
        return self._tracker.state()

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from :meth:`state_dict`'s dict: the next ``iter()`` yields
        the rest of its epoch (at this loader's world size)."""
        self.sampler.load_state_dict(state)
        self._tracker = None

    def __len__(self) -> int:
        return len(self.sampler)

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        return self._epoch()

    def _register(self) -> None:
        """The store's files registered with CUDA for the epoch's rows (see
        ``direct`` in :func:`device_loader`), again when rows were added."""
        if self.device.type != "cuda" or self.direct is False:
            return
        rows = self.dataset.rows  # what the sampler covers this epoch
        old = self._direct
        if rows == 0 or (old is not None and old.rows >= rows):
            return
        if old is not None:
            if self._stream is not None:
                self._stream.synchronize()  # no copy out of the old mapping in flight
            old.close()
            self._direct = None
        store = self.dataset._cover(rows)
        if self.direct is None and not _Direct.fits(store, rows):
            return
        try:
            self._direct = _Direct(store, rows)
        except (OSError, ValueError, RuntimeError):
            if self.direct:
                raise

    def _setup(self, store: FeatureStore) -> None:
        if self._ring:
            return
        cuda = self.device.type == "cuda"
        # One buffer being filled, one being copied, and the rest queued.
        self._ring = [_Staging(store, self.batch_size, pin=cuda) for _ in range(self.prefetch + 1)]
        self._stream = torch.cuda.Stream(self.device) if cuda else None  # type: ignore[no-untyped-call]

    def _prepare(
        self, k: int, key: _Runs, store: FeatureStore
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Batch ``k`` (rows ``key``): copied straight from the registered
        mapping when its runs are long enough, else gathered into staging
        buffer ``k`` mod the ring by the Rust core (several threads, GIL
        released), then an asynchronous copy to the device issued on the
        loader's stream (a plain copy on the CPU). Runs in the loader's thread."""
        direct = self._direct
        if direct is not None:
            row = store.dim * store.dtype.itemsize
            if self.direct or key.n * row >= DIRECT_RUN_BYTES * len(key.runs):
                out = self._copy_runs(direct, key.runs, key.n, store)
                # Straight from the mapping: a file truncated under the rows
                # (lost pages, or shorter than them) is an error, not zeros.
                store.check(0, key.stop)
                return out
        slot = self._ring[k % len(self._ring)]
        slot.wait()  # never overwrite a buffer whose copy out is in flight
        rows = key.rows()
        n = len(rows)
        store._take_into(rows, slot.Xn[:n], slot.yn[:n], self.threads)
        stream = self._stream
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            X = torch.empty((n, store.dim), dtype=slot.X.dtype, device=self.device)
            y = torch.empty(n, dtype=slot.y.dtype, device=self.device)
            X.copy_(slot.X[:n], non_blocking=True)
            y.copy_(slot.y[:n], non_blocking=True)
            if stream is not None:
                slot.copied = torch.cuda.Event()  # type: ignore[no-untyped-call]
                slot.copied.record(stream)
        return X, y, slot.copied

    def _copy_runs(
        self, direct: _Direct, runs: list[tuple[int, int, int]], n: int, store: FeatureStore
    ) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """A batch copied to the device straight from the registered mapping:
        one asynchronous copy per run of consecutive rows, on the loader's stream.

        All of them are issued by one ``torch._foreach_copy_`` call: each torch
        call releases the GIL and must win it back from the training loop, which
        can hold it for a whole switch interval, so a shuffled batch issued run
        by run (16 calls) ran at 0.4x the rate of a sequential one (2 calls) on
        an H200 host."""
        stream = self._stream
        done: Any = None
        lens = [j - i for i, j, _ in runs]
        with torch.cuda.stream(stream) if stream is not None else contextlib.nullcontext():
            X = torch.empty((n, store.dim), dtype=direct.X.dtype, device=self.device)
            y = torch.empty(n, dtype=direct.y.dtype, device=self.device)
            dst = [*torch.split(X, lens), *torch.split(y, lens)]
            spans = [(first, m) for (_, _, first), m in zip(runs, lens, strict=True)]
            src = [a.narrow(0, first, m) for a in (direct.X, direct.y) for first, m in spans]
            _copy_all(dst, src)
            if stream is not None:
                done = torch.cuda.Event()  # type: ignore[no-untyped-call]
                done.record(stream)
        return X, y, done

    def _epoch(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        tracker = self._tracker = Tracker(self.sampler)
        keys = self.sampler._keys(runs=True)
        self._register()
        for batch in self._batches(keys):
            tracker.one()
            yield batch
        tracker.ended = True

    def _batches(self, keys: Iterator[_Runs]) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        ds = self.dataset
        # Batch k's slot was last used by batch k - len(ring), whose result was
        # taken before k is submitted, so several workers never share a slot.
        pool = concurrent.futures.ThreadPoolExecutor(
            self.workers, thread_name_prefix="mmapkit-device"
        )
        pending: deque[concurrent.futures.Future[Any]] = deque()
        try:
            k = 0

            def submit(key: _Runs) -> None:
                nonlocal k
                store = ds._cover(key.stop)  # refreshed if behind the sampler's rows
                self._setup(store)
                pending.append(pool.submit(self._prepare, k, key, store))
                k += 1

            for key in keys:
                submit(key)
                if len(pending) > self.prefetch:
                    yield self._ready(pending.popleft())
            while pending:
                yield self._ready(pending.popleft())
        finally:
            for f in pending:
                f.cancel()
            pool.shutdown(wait=True)

    def _ready(self, fut: concurrent.futures.Future[Any]) -> tuple[torch.Tensor, torch.Tensor]:
        X, y, copied = fut.result()
        if copied is not None:
            # The caller's stream waits for the copy (the host does not), and
            # the caching allocator keeps X and y until that stream used them.
            current = torch.cuda.current_stream(self.device)
            current.wait_event(copied)
            X.record_stream(current)
            y.record_stream(current)
        return X, y


def device_loader(
    store: FeatureStore | FeatureDataset | PathLike,
    batch_size: int,
    shuffle: bool = False,
    seed: int | None = 0,
    drop_last: bool = False,
    device: str | torch.device | None = None,
    *,
    prefetch: int = 2,
    threads: int | None = None,
    block_size: int | None = None,
    workers: int = 2,
    direct: bool | None = None,
    rank: int | None = None,
    world_size: int | None = None,
) -> DeviceLoader:
    """Batches ``(X, y)`` of ``store`` as tensors on ``device`` (default
    ``"cuda"`` when available, else ``"cpu"``), for feeding a GPU at the
    bus's rate rather than one host thread's.

    A ring of ``prefetch + 1`` reusable host staging buffers (pinned with
    ``pin_memory()`` when the device is a GPU): background threads
    (``workers``) gather each batch's rows into the next buffer with the Rust
    core (several threads, GIL released: shuffled gathers too) and issue its
    copy to the device asynchronously (``copy_(non_blocking=True)`` on a dedicated
    ``torch.cuda.Stream``, with an event so a buffer is refilled only after
    its copy finished; the caller's stream waits for that event before using
    the batch). So gathering batch k + 1, copying batch k and the caller's
    compute on batch k - 1 overlap; up to ``prefetch`` batches are prepared
    ahead. On a CPU device the same code runs with plain copies (each batch
    is a fresh tensor; the staging buffers are never handed out).

    The batches and their order are those of :func:`data_loader` with the
    same arguments (:class:`FeatureBatchSampler`: epoch ``e`` of a shuffled
    loader uses ``FeatureStore.batches(batch_size, shuffle=True,
    seed=np.random.SeedSequence(seed, spawn_key=(e,)))``'s order); the
    loader's ``set_epoch``, ``refresh``, ``len``, ``state_dict`` and
    ``load_state_dict`` behave as there, and so do ``seed`` (default 0, the
    same in every process), ``block_size`` (rows per contiguous block of a
    shuffle: ``1`` a full permutation, needed on a store sorted by label or
    time; longer blocks are fewer, longer runs to copy, ``direct`` copies
    included, but mix fewer places of the store per batch), ``rank`` and
    ``world_size`` (default the initialised ``torch.distributed`` group's:
    each rank gets its equal share of every epoch).
    ``threads``: gather threads per batch (default one per core).
    ``workers``: batches prepared at once (each gathered by up to ``threads``
    threads, then its copy issued), up to ``prefetch + 1``: with one, a
    batch's gather waits while the one before issues its copy (measured on a
    16-core host: 2 gave 20 GB/s sequential where 1 gave 12).

    ``direct`` (CUDA only): the store's files mapped read-only and registered
    with CUDA (``cudaHostRegister``: their page-cache pages pinned while the
    loader lives), so a batch is copied to the device straight from them, one
    DMA copy per run of consecutive rows, with no host gather: sequential
    batches, and shuffled ones of long runs (``block_size`` rows), at the
    bus's rate. ``None`` (default): when the store takes at most half the RAM
    (registering reads any page not yet cached), for batches whose runs
    average at least ``DIRECT_RUN_BYTES``, else the staging path; ``True``:
    every batch so (an error if registering fails); ``False``: never. On an
    H200 host (16 M x 64 float32, batch 65,536, a model trained on the GPU)
    it feeds 36 GB/s sequential and 25 GB/s shuffled, where the staging path
    feeds 12 and 11 (``bench/results/extra/features-gpu-h200.md``). The
    registration covers the rows an epoch starts with (again, for the next
    epoch, after :meth:`DeviceLoader.refresh` found more). A truncation of the store by a
    writer is not seen by the pinned pages.
    """
    return DeviceLoader(
        store,
        batch_size,
        shuffle,
        seed,
        drop_last,
        device,
        prefetch=prefetch,
        threads=threads,
        block_size=block_size,
        workers=workers,
        direct=direct,
        rank=rank,
        world_size=world_size,
    )


# ----- token data (mmapkit.tokens) ------------------------------------------


class TokenDataset(torch.utils.data.Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A :class:`~mmapkit.TokenStore` as a map-style dataset of whole batches:
    its keys are a :class:`~mmapkit.tokens.WindowSampler`'s or
    :class:`~mmapkit.tokens.PackedSampler`'s, its items ``(x, y)`` tensors of
    shape ``(batch, seq_len)`` (``int64`` for integer tokens, what
    ``torch.nn.Embedding`` takes), both views of one buffer the batch's
    tokens were copied into once (``y`` is ``x`` shifted by one token).

    Holds only the store's path and the sampler's settings: DataLoader
    workers (fork or spawn) open the store themselves.
    """

    def __init__(self, store: TokenStore | PathLike, seq_len: int, eos: int | None = None) -> None:
        self.path = (
            store.path if isinstance(store, TokenStore) else os.path.abspath(os.fspath(store))
        )
        self.seq_len = int(seq_len)
        self.eos = eos
        self._store: TokenStore | None = store if isinstance(store, TokenStore) else None
        self._pid = os.getpid() if self._store is not None else 0

    @property
    def store(self) -> TokenStore:
        """This process's store (opened read-only on first use, again after a fork)."""
        if self._store is None or self._pid != os.getpid():
            self._store = TokenStore(self.path, "r")
            self._pid = os.getpid()
        return self._store

    def __getitem__(self, key: Any) -> tuple[torch.Tensor, torch.Tensor]:
        pieces = np.asarray(key, dtype=np.int64).reshape(-1, 3)
        s = self.store
        if len(pieces) and int((pieces[:, 1] + pieces[:, 2]).max()) > s.num_tokens:
            s.refresh()  # a worker's store opened before the sampler's epoch
        x, y = gather_windows(s.tokens, pieces, self.seq_len, self.eos, id_dtype(s.dtype))
        s.check()  # no zeros of a truncated file reach training unreported
        return torch.from_numpy(x), torch.from_numpy(y)

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "seq_len": self.seq_len, "eos": self.eos}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._store = None
        self._pid = 0


class TokenDataLoader(_ShardedLoader):
    """The ``DataLoader`` :func:`token_loader` returns: a plain ``DataLoader``
    over a :class:`TokenDataset` and a token sampler, with ``set_epoch``,
    ``state_dict()`` and ``load_state_dict()`` counting delivered batches
    (as :class:`FeatureDataLoader`)."""

    sampler: WindowSampler | PackedSampler


def token_loader(
    store: TokenStore | PathLike,
    seq_len: int,
    batch_size: int,
    *,
    packed: bool = False,
    eos: int | None = None,
    shuffle: bool = True,
    samples: int | None = None,
    seed: int | None = 0,
    drop_last: bool = False,
    rank: int | None = None,
    world_size: int | None = None,
    **kwargs: Any,
) -> TokenDataLoader:
    """A ``DataLoader`` of ``(x, y)`` token batches over ``store``, each of
    shape ``(batch_size, seq_len)`` (``int64`` for integer tokens): random
    windows (:class:`~mmapkit.tokens.WindowSampler`, nanoGPT's ``get_batch``;
    ``samples`` windows an epoch) or, with ``packed``, whole records packed
    into sequences (:class:`~mmapkit.tokens.PackedSampler`; ``eos`` a
    separator after each record, ``shuffle`` the records' and windows' order).
    ``seed`` (default 0, the same in every process), ``drop_last``, ``rank``
    and ``world_size`` (default: the ``torch.distributed`` group's) as the
    samplers; ``kwargs`` go to ``DataLoader`` (``num_workers``,
    ``pin_memory``, ...). Resumable: ``state_dict()``/``load_state_dict()``.
    """
    ts = store if isinstance(store, TokenStore) else TokenStore(store)
    common = {"seed": seed, "drop_last": drop_last, "rank": rank, "world_size": world_size}
    sampler: WindowSampler | PackedSampler
    if packed:
        sampler = PackedSampler(ts, seq_len, batch_size, eos=eos, shuffle=shuffle, **common)  # type: ignore[arg-type]
    else:
        if eos is not None or not shuffle:
            raise ValueError("eos and shuffle=False apply to packed=True only")
        sampler = WindowSampler(ts, seq_len, batch_size, samples=samples, **common)  # type: ignore[arg-type]
    ds = TokenDataset(ts, seq_len, sampler.eos)
    return TokenDataLoader(ds, sampler=sampler, batch_size=None, **kwargs)

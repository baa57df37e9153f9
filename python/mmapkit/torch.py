"""PyTorch adapter for :class:`~mmapkit.FeatureStore` (extra ``torch``).

:class:`FeatureDataset` is a map-style ``Dataset`` whose items are **whole
batches**, and :class:`FeatureBatchSampler` yields one key per batch, so a
``DataLoader`` with automatic batching off (``batch_size=None``) moves one
``(X, y)`` pair of tensors per batch instead of collating rows::

    ds = FeatureDataset("train")
    loader = DataLoader(ds, sampler=FeatureBatchSampler(ds, 256, shuffle=True, seed=0),
                        batch_size=None, num_workers=2)
    for epoch in range(3):
        loader.sampler.set_epoch(epoch)
        for X, y in loader:
            ...

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

Keys: a ``slice`` (rows ``start:stop``, zero-copy), an integer array or list
(those rows, gathered), or an ``int`` ``i`` (sequential batch ``i`` of
``batch_size`` rows).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterator
from typing import Any

import numpy as np

try:
    import torch
    import torch.utils.data
except ImportError as e:
    raise ImportError(
        f"mmapkit.torch needs PyTorch ({e}): pip install 'mmapkit[torch]'", name=e.name
    ) from e

from ._types import PathLike
from .features import FeatureStore, batch_order

__all__ = ["FeatureBatchSampler", "FeatureDataset", "data_loader"]


def _tensor(a: np.ndarray[Any, Any]) -> torch.Tensor:
    if a.flags.writeable:
        return torch.from_numpy(a)
    with warnings.catch_warnings():
        # numpy's view is read-only, torch's cannot be: the reader's mapping is
        # copy-on-write, so a write to the tensor lands on private pages.
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        return torch.from_numpy(a)


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
            X, y = self.store.get(start, max(start, stop))
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


class FeatureBatchSampler(torch.utils.data.Sampler[Any]):
    """Keys of one epoch's batches for :class:`FeatureDataset`: slices in
    row order, or (``shuffle``) arrays of rows in the order of
    :func:`mmapkit.features.batch_order` for seed
    ``np.random.SeedSequence(seed).spawn`` of the epoch (:meth:`set_epoch`;
    each ``iter()`` without it moves to the next epoch), equal to
    ``FeatureStore.batches(batch_size, shuffle=True, seed=...)``'s order.
    Each epoch covers the dataset's rows as they are when it starts (after
    ``dataset.refresh()``, the rows committed since too).
    """

    def __init__(
        self,
        dataset: FeatureDataset,
        batch_size: int | None = None,
        shuffle: bool = False,
        seed: int | None = None,
        drop_last: bool = False,
        block_size: int | None = None,
    ) -> None:
        self.dataset = dataset
        self.batch_size = dataset.batch_size if batch_size is None else int(batch_size)
        if self.batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.shuffle = shuffle
        self.seed = np.random.SeedSequence(seed).entropy if seed is None else seed
        self.drop_last = drop_last
        self.block_size = block_size
        self.epoch = 0
        self._explicit = False

    @property
    def rows(self) -> int:
        """The dataset's row count now (read again at each epoch)."""
        return self.dataset.rows

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self._explicit = True

    def epoch_seed(self, epoch: int) -> np.random.SeedSequence:
        return np.random.SeedSequence(self.seed, spawn_key=(epoch,))

    def __len__(self) -> int:
        return self.rows // self.batch_size if self.drop_last else -(-self.rows // self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        epoch = self.epoch
        if not self._explicit:
            self.epoch += 1
        self._explicit = False
        rows, bs = self.rows, self.batch_size
        stop = (rows // bs) * bs if self.drop_last else rows
        if not self.shuffle:
            for s in range(0, stop, bs):
                yield slice(s, min(s + bs, stop))
            return
        order = batch_order(rows, bs, self.epoch_seed(epoch), self.block_size).view(np.int64)
        for s in range(0, stop, bs):
            yield order[s : min(s + bs, stop)]


def data_loader(
    store: FeatureStore | FeatureDataset | PathLike,
    batch_size: int = 256,
    shuffle: bool = False,
    seed: int | None = None,
    drop_last: bool = False,
    **kwargs: Any,
) -> torch.utils.data.DataLoader[Any]:
    """A ``DataLoader`` of ``(X, y)`` batches over ``store``: a
    :class:`FeatureDataset` with a :class:`FeatureBatchSampler` and
    automatic batching off. ``kwargs`` go to ``DataLoader``
    (``num_workers``, ``multiprocessing_context``, ``pin_memory``,
    ``persistent_workers``, ...)."""
    ds = store if isinstance(store, FeatureDataset) else FeatureDataset(store, batch_size)
    sampler = FeatureBatchSampler(ds, batch_size, shuffle=shuffle, seed=seed, drop_last=drop_last)
    return torch.utils.data.DataLoader(ds, sampler=sampler, batch_size=None, **kwargs)

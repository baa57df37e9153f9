"""Variable-length records (token data): :class:`~mmapkit.TokenStore` and its samplers.

A token store is a directory of two plain ``.npy`` files, readable by
numpy without mmapkit::

    values.npy    every record's values, one after another (1-D; uint16 by default)
    offsets.npy   int64, n + 1 entries: record i is values[offsets[i]:offsets[i + 1]]

>>> import numpy as np, mmapkit
>>> ts = mmapkit.TokenStore("corpus", "w", dtype=np.uint16)
>>> ts.extend([[5, 6, 7], [8, 9], [10, 11, 12, 13]])   # durable when it returns
3
>>> ts[1]                                  # a zero-copy view of record 1
array([8, 9], dtype=uint16)
>>> ts.close()
>>> o = np.load("corpus/offsets.npy"); v = np.load("corpus/values.npy", mmap_mode="r")
>>> v[o[2]:o[3]].tolist()
[10, 11, 12, 13]

Both files are growable :class:`~mmapkit.ArrayStore` files. The offsets
are the commit point: an append writes the values (and, with ``sync``,
syncs them), then appends the new offsets (and syncs them), so a reader (or
a writer reopening after a crash or a power loss) sees whole records only:
values past the last offset are an append that did not finish, ignored by
readers and cut off by the next writer. One writer at a time (an exclusive
``flock`` on each file); any number of readers, which follow the writer
with :meth:`~mmapkit.TokenStore.refresh`. A store pickles by path as a reader.

Samplers, for training on the tokens (both sharded between ranks and
resumable exactly as :class:`mmapkit.torch.FeatureBatchSampler` is: a fixed
default seed, ranks from ``torch.distributed``, equal batch counts per rank,
``set_epoch``, ``state_dict``/``load_state_dict``):

- :class:`WindowSampler`: random windows of the flat token stream, as
  nanoGPT's ``get_batch`` (``x = tokens[i:i + T]``, ``y = tokens[i + 1:i + T + 1]``);
- :class:`PackedSampler`: whole records packed into fixed-length sequences
  (records concatenated in a shuffled order, each followed by an optional
  EOS token, cut into windows of ``T + 1`` tokens), as Megatron's GPT dataset.

``sampler.batches()`` yields ``(x, y)`` numpy ``int64`` arrays;
:func:`mmapkit.torch.token_loader` is a ``DataLoader`` of torch tensors.
"""

from __future__ import annotations

import bisect
import contextlib
import os
from collections.abc import Iterable, Iterator
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from ._native import FormatError, create_dir_durably
from ._npy import id_dtype
from ._sharding import ShardedEpochs
from ._types import PathLike
from .store import ArrayStore

__all__ = ["PackedSampler", "TokenStore", "WindowSampler", "gather_windows"]

VALUES = "values.npy"
OFFSETS = "offsets.npy"


class TokenStore:
    """A directory of variable-length 1-D records; see the module docs.

    ``mode``: ``"r"`` (default) read-only; ``"r+"`` the one writer of an
    existing store; ``"w"`` create (replacing any store there); ``"a"``
    ``"r+"`` if the store exists, else ``"w"``. ``dtype`` (any integer or
    floating-point scalar type; default ``uint16``, enough for vocabularies
    up to 65,536) applies when creating.

    ``store[i]`` is record ``i`` and :meth:`range` records ``i:j`` as one
    flat array, :attr:`tokens` every value and :attr:`offsets` the index:
    zero-copy views (read-only for a reader) that stay valid as the store
    grows.
    """

    def __init__(
        self, path: PathLike, mode: str = "r", *, dtype: npt.DTypeLike = np.uint16
    ) -> None:
        if mode not in ("r", "r+", "w", "a"):
            raise ValueError(f"invalid mode {mode!r}: expected 'r', 'r+', 'w' or 'a'")
        self._path = os.path.abspath(os.fspath(path))
        self._closed = True
        vp, op = self._file(VALUES), self._file(OFFSETS)
        if mode == "a":
            mode = "r+" if os.path.exists(op) and os.path.exists(vp) else "w"
        if mode == "w":
            dt = np.dtype(dtype)
            if dt.kind not in "iuf" or dt.shape:
                raise ValueError(
                    f"{self._path}: dtype must be an integer or floating-point scalar type, "
                    f"got {dt}"
                )
            create_dir_durably(self._path)
            # The offsets first: until the new values file replaces the old
            # one, the fresh index ([0]) makes the directory an empty store.
            offsets = ArrayStore.create(op, np.int64)
            offsets.append(0)
            offsets.flush()
            offsets.close()
            ArrayStore.create(vp, dt.newbyteorder("=") if not dt.isnative else dt).close()
            mode = "r+"
        for p in (op, vp):
            if not os.path.exists(p):
                if not os.path.isdir(self._path):
                    raise FileNotFoundError(2, "no such TokenStore directory", self._path)
                raise FileNotFoundError(2, "not a TokenStore (file missing)", p)
        self._mode = mode
        am = "r+" if mode == "r+" else "r"
        self._offsets = ArrayStore.open(op, am)
        try:
            self._values = ArrayStore.open(vp, am)
        except BaseException:
            self._offsets.close()
            raise
        self._closed = False
        try:
            if self._offsets.dtype != np.int64 or self._offsets.row_shape:
                raise FormatError(f"{op}: the offsets must be 1-D int64, got {self._offsets.dtype}")
            if self._values.row_shape or self._values.dtype.kind not in "iuf":
                raise FormatError(f"{vp}: the values must be 1-D integers or floats")
            self._n = 0
            self._seen = 0  # offsets checked so far
            self._follow()
            if mode == "r+":
                self._recover()
        except BaseException:
            self.close()
            raise

    def _file(self, name: str) -> str:
        return os.path.join(self._path, name)

    def _follow(self) -> None:
        """The records whose offsets are published and whose values the
        values file holds; new offsets checked (0 first, never decreasing)."""
        offs = self._offsets.numpy()
        m = len(offs)
        if m == 0 or offs[0] != 0:
            raise FormatError(f"{self._file(OFFSETS)}: the offsets must start with 0")
        lo = max(0, self._seen - 1)
        if m > lo + 1 and (np.diff(offs[lo:m]) < 0).any():
            raise FormatError(f"{self._file(OFFSETS)}: the offsets decrease")
        self._seen = m
        vals = self._values.numpy()
        # Whole records only: those whose values are all there.
        n = int(np.searchsorted(offs[:m], len(vals), side="right")) - 1
        self._n = n
        self._off = offs[: n + 1]
        self._tok = vals[: int(offs[n])]

    def _recover(self) -> None:
        """A writer cuts what an unfinished append left: values past the
        last record, offsets past the values (a damaged store)."""
        n = self._n
        if len(self._offsets) > n + 1:
            self._offsets._core.truncate(n + 1)
            self._seen = n + 1
        if len(self._values) > len(self._tok):
            self._values._core.truncate(len(self._tok))
        self._off = self._offsets.numpy()
        self._tok = self._values.numpy()

    # ----- writing --------------------------------------------------------

    def append(self, record: npt.ArrayLike, *, sync: bool = True) -> int:
        """Append one record (1-D; converted to the store's dtype); returns
        the record count. See :meth:`extend`."""
        return self.extend([record], sync=sync)

    def extend(self, records: Iterable[npt.ArrayLike], *, sync: bool = True) -> int:
        """Append records (each 1-D) in one commit; returns the record count.

        The values are written (and synced), then the offsets (and synced):
        with ``sync`` (default) the records are durable when it returns; with
        ``sync=False`` they survive a killed process but not a power loss
        until :meth:`flush`. Either way no reader, and no writer reopening
        after a crash, ever sees part of them. On an error nothing is
        committed (the values written are cut off again)."""
        self._need_writer()
        arrays = [np.asarray(r, dtype=self._values.dtype) for r in records]
        for a in arrays:
            if a.ndim != 1:
                raise ValueError(f"{self._path}: a record must be 1-D, got shape {a.shape}")
        if not arrays:
            return self._n
        lens = np.fromiter((len(a) for a in arrays), np.int64, len(arrays))
        ends = np.cumsum(lens) + len(self._tok)
        before = len(self._tok)
        try:
            self._values.extend(np.concatenate(arrays))
            if sync:
                self._values.flush()
            self._offsets.extend(ends)
            if sync:
                self._offsets.flush()
        except BaseException:
            if len(self._offsets) == self._n + 1:  # not committed: cut the values off
                with contextlib.suppress(Exception):  # a failed store: the next writer cuts
                    self._values._core.truncate(before)
            else:  # committed (published), its sync failed: the store has failed
                self._published()
            raise
        self._published()
        return self._n

    def _published(self) -> None:
        """The writer's record count and views after its offsets were appended."""
        self._off = self._offsets.numpy()
        self._n = self._seen = len(self._off) - 1
        self._tok = self._values.numpy()[: int(self._off[-1])]

    def flush(self) -> None:
        """Make every record appended so far durable (the values, then the offsets)."""
        self._need_writer()
        self._values.flush()
        self._offsets.flush()

    def _need_writer(self) -> None:
        self._need_open()
        if self._mode != "r+":
            raise OSError(
                9, "TokenStore opened read-only (mode 'r'); open with 'r+', 'w' or 'a'", self._path
            )

    # ----- reading --------------------------------------------------------

    def refresh(self) -> int:
        """Readers: see records committed since (views taken before stay
        valid). Returns the record count."""
        self._need_open()
        if self._mode == "r":
            self._offsets.refresh()  # the offsets first: the values they count are there
            self._values.refresh()
            self._follow()
        return self._n

    def _need_open(self) -> None:
        if self._closed:
            raise ValueError(f"{self._path}: the TokenStore is closed")

    def __len__(self) -> int:
        return self._n

    def __getitem__(self, i: int) -> np.ndarray[Any, Any]:
        """Record ``i`` (negative counts from the end): a zero-copy view."""
        self._need_open()
        if isinstance(i, slice) or not isinstance(i, (int, np.integer)):
            raise TypeError(
                f"a TokenStore is indexed by one record number (range(i, j) for several), got {i!r}"
            )
        n = self._n
        k = int(i) + n if i < 0 else int(i)
        if not 0 <= k < n:
            raise IndexError(f"record {i} out of range for a store of {n} records")
        return self._tok[self._off[k] : self._off[k + 1]]

    def __iter__(self) -> Iterator[np.ndarray[Any, Any]]:
        return (self[i] for i in range(self._n))

    def range(self, start: int, stop: int) -> np.ndarray[Any, Any]:
        """Records ``start:stop`` as one flat zero-copy view of their values
        (their boundaries are ``offsets[start:stop + 1] - offsets[start]``)."""
        self._need_open()
        s, e, _ = slice(start, stop).indices(self._n)
        e = max(s, e)
        return self._tok[self._off[s] : self._off[e]]

    @property
    def tokens(self) -> np.ndarray[Any, Any]:
        """Every committed value, records one after another (a zero-copy view)."""
        self._need_open()
        return self._tok

    @property
    def offsets(self) -> np.ndarray[Any, Any]:
        """The committed index: ``len(self) + 1`` int64 offsets into :attr:`tokens`."""
        self._need_open()
        return self._off

    @property
    def lengths(self) -> npt.NDArray[np.int64]:
        """Each record's length (a new array)."""
        return np.diff(self.offsets)

    @property
    def num_tokens(self) -> int:
        """The committed values' count (``offsets[-1]``)."""
        return len(self._tok)

    @property
    def dtype(self) -> np.dtype[Any]:
        """The values' dtype."""
        return self._values.dtype

    @property
    def path(self) -> str:
        """The store's directory."""
        return self._path

    @property
    def mode(self) -> str:
        """``"r"`` (a reader) or ``"r+"`` (the one writer; what ``"w"`` and ``"a"`` open as)."""
        return self._mode

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closed

    def check(self) -> None:
        """Raise :class:`~mmapkit.FileTruncatedError` if another process
        truncated a file under the committed records (what the samplers
        check after each batch, so zeros of a cut file never reach training)."""
        self._values.check(0, len(self._tok))
        self._offsets.check(0, self._n + 1)

    def close(self) -> None:
        """Close both files (a writer trims and flushes them and lets its
        locks go); views taken before keep their memory until they are gone."""
        if self._closed:
            return
        self._closed = True
        for a in ("_values", "_offsets"):
            if hasattr(self, a):
                getattr(self, a).close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickles by path, always as a reader (there is one writer)."""
        return (TokenStore, (self._path, "r"))

    def __repr__(self) -> str:
        state = "closed" if self._closed else f"records={self._n} tokens={len(self._tok)}"
        return f"<mmapkit.TokenStore {self._path!r} mode={self._mode!r} dtype={self.dtype} {state}>"


# ----- batches ----------------------------------------------------------------


def gather_windows(
    tokens: np.ndarray[Any, Any],
    pieces: npt.NDArray[np.int64],
    seq_len: int,
    eos: int | None = None,
    dtype: npt.DTypeLike = np.int64,
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """A batch ``(x, y)`` from a sampler's key: ``pieces`` (rows ``(at,
    start, length)``: positions ``at:at + length`` of the batch's flat
    windows of ``seq_len + 1`` tokens hold ``tokens[start:start + length]``,
    or ``eos`` where ``start`` is -1), copied once into one ``dtype`` buffer
    of shape ``(windows, seq_len + 1)``; ``x`` and ``y`` are views of it
    (``y`` is ``x`` shifted by one token)."""
    t1 = seq_len + 1
    total = int(pieces[-1, 0] + pieces[-1, 2]) if len(pieces) else 0
    out = np.empty(total, dtype=dtype)
    for at, start, n in pieces.tolist():
        if start < 0:
            out[at : at + n] = eos
        else:
            out[at : at + n] = tokens[start : start + n]
    w = out.reshape(-1, t1)
    return w[:, :-1], w[:, 1:]


class _TokenSampler(ShardedEpochs):
    """What both token samplers share: the store, ``seq_len`` and batches."""

    def __init__(
        self,
        store: TokenStore | PathLike,
        seq_len: int,
        batch_size: int,
        seed: int | None,
        drop_last: bool,
        rank: int | None,
        world_size: int | None,
    ) -> None:
        super().__init__(batch_size, seed, drop_last, rank, world_size)
        self.store = store if isinstance(store, TokenStore) else TokenStore(store)
        if isinstance(seq_len, bool) or int(seq_len) < 1:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        self.seq_len = int(seq_len)
        self.eos: int | None = None
        self._cache: tuple[tuple[int, int], Any] | None = None

    def _cover(self, _rows: int) -> None:
        self.store.refresh()

    def _cached(self, epoch: int, rows: int, make: Any) -> Any:
        """``make(epoch, rows)``, kept for the epoch being yielded."""
        if self._cache is None or self._cache[0] != (epoch, rows):
            self._cache = ((epoch, rows), make(epoch, rows))
        return self._cache[1]

    def batches(self) -> Iterator[tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]]:
        """The next epoch's batches (this rank's), as ``(x, y)`` numpy arrays
        of shape ``(batch_size, seq_len)`` (``int64`` for integer tokens),
        each checked against a truncated file before it is handed out."""
        dt = id_dtype(self.store.dtype)
        for key in self:
            batch = gather_windows(self.store.tokens, key, self.seq_len, self.eos, dt)
            self.store.check()
            yield batch


class WindowSampler(_TokenSampler):
    """Random windows of the store's token stream (``store.tokens``,
    every record one after another), as nanoGPT's ``get_batch``: a window
    at ``i`` is ``x = tokens[i:i + seq_len]``, ``y = tokens[i + 1:i + seq_len + 1]``.

    An epoch is ``samples`` windows (default ``(num_tokens - 1) // seq_len``,
    as many as fit side by side: about one pass over the tokens) at starts
    drawn uniformly, with replacement, from ``[0, num_tokens - seq_len - 1]``
    by ``np.random.default_rng(epoch_seed(epoch))``, cut into batches of
    ``batch_size`` windows: the same in every rank for one seed and epoch.
    Windows may cross record boundaries (as nanoGPT's do). Iterating yields
    keys for :func:`gather_windows` (or a ``mmapkit.torch`` dataset);
    :meth:`batches` the batches themselves.

    ``seed`` (default 0, the same in every process), ``drop_last``,
    ``rank`` and ``world_size`` (default: the ``torch.distributed`` group's),
    :meth:`set_epoch`, :meth:`state_dict` and :meth:`load_state_dict`: as
    :class:`mmapkit.torch.FeatureBatchSampler` (equal batch counts per rank,
    padded by wrap-around; a resume, at any world size, continues the epoch
    exactly). The epoch covers the tokens committed when it starts
    (``store.refresh()`` to see more).
    """

    def __init__(
        self,
        store: TokenStore | PathLike,
        seq_len: int,
        batch_size: int,
        *,
        samples: int | None = None,
        seed: int | None = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(store, seq_len, batch_size, seed, drop_last, rank, world_size)
        if samples is not None and (isinstance(samples, bool) or int(samples) < 0):
            raise ValueError(f"samples must be >= 0, got {samples}")
        self.samples = None if samples is None else int(samples)

    @property
    def rows(self) -> int:
        """The store's committed tokens now (an epoch's size)."""
        return self.store.num_tokens

    def _units(self, rows: int) -> int:
        fit = max(0, (rows - 1) // self.seq_len)
        if self.samples is None:
            return fit
        if self.samples and rows < self.seq_len + 1:
            raise ValueError(
                f"{self.store.path}: {rows} tokens hold no window of {self.seq_len} + 1 tokens"
            )
        return self.samples

    def _config(self) -> dict[str, int]:
        return {"seq_len": self.seq_len, "samples": -1 if self.samples is None else self.samples}

    def _starts(self, epoch: int, rows: int) -> npt.NDArray[np.int64]:
        """Epoch ``epoch``'s window starts."""
        rng = np.random.default_rng(self.epoch_seed(epoch))
        return rng.integers(0, max(1, rows - self.seq_len), size=self._units(rows), dtype=np.int64)

    def _epoch_keys(self, epoch: int, rows: int, mine: list[int], **_: Any) -> Iterator[Any]:
        starts = self._cached(epoch, rows, self._starts)
        bs, t1 = self.batch_size, self.seq_len + 1
        for j in mine:
            s = starts[j * bs : (j + 1) * bs]
            m = len(s)
            yield np.stack([np.arange(m, dtype=np.int64) * t1, s, np.full(m, t1)], axis=1)


class PackedSampler(_TokenSampler):
    """Whole records packed into fixed-length sequences, as Megatron's GPT
    dataset: each epoch concatenates the records (in a seeded random order
    with ``shuffle``, the default; else in store order), each followed by
    ``eos`` when given (a separator token id), and cuts the stream into
    windows of ``seq_len + 1`` tokens, window ``w`` starting at ``w *
    seq_len`` (``x`` is its first ``seq_len`` tokens, ``y`` its last: every
    token of the stream is in exactly one ``x``). The stream's tail shorter
    than a window is left out. With ``shuffle`` the windows are also taken
    in a seeded random order; they are then cut into batches of
    ``batch_size`` windows.

    Deterministic given ``seed`` and the epoch (:meth:`epoch_seed`); ranks,
    equal counts, ``drop_last``, :meth:`set_epoch` and resume as
    :class:`WindowSampler` (and :class:`mmapkit.torch.FeatureBatchSampler`).
    An epoch covers the records committed when it starts.
    """

    def __init__(
        self,
        store: TokenStore | PathLike,
        seq_len: int,
        batch_size: int,
        *,
        eos: int | None = None,
        shuffle: bool = True,
        seed: int | None = 0,
        drop_last: bool = False,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        super().__init__(store, seq_len, batch_size, seed, drop_last, rank, world_size)
        self.eos = None if eos is None else int(eos)
        self.shuffle = bool(shuffle)

    @property
    def rows(self) -> int:
        """The store's committed records now (an epoch's size)."""
        return len(self.store)

    def _length(self, rows: int) -> int:
        """The packed stream's length over the first ``rows`` records."""
        return int(self.store.offsets[rows]) + (rows if self.eos is not None else 0)

    def _units(self, rows: int) -> int:
        return max(0, (self._length(rows) - 1) // self.seq_len)

    def _config(self) -> dict[str, int]:
        return {
            "seq_len": self.seq_len,
            "shuffle": int(self.shuffle),
            "eos": -1 if self.eos is None else self.eos,
            "has_eos": int(self.eos is not None),
        }

    def _layout(self, epoch: int, rows: int) -> tuple[list[int], list[int], list[int], list[int]]:
        """Epoch ``epoch``'s packing: records in stream order, where each
        starts in the stream, their lengths, and the windows' order."""
        offs = self.store.offsets[: rows + 1]
        lens = np.diff(offs)
        rng = np.random.default_rng(self.epoch_seed(epoch))
        order = rng.permutation(rows) if self.shuffle else np.arange(rows)
        sizes = lens[order] + (1 if self.eos is not None else 0)
        at = np.cumsum(sizes) - sizes
        units = self._units(rows)
        windows = rng.permutation(units) if self.shuffle else np.arange(units)
        return offs[order].tolist(), at.tolist(), lens[order].tolist(), windows.tolist()

    def _epoch_keys(self, epoch: int, rows: int, mine: list[int], **_: Any) -> Iterator[Any]:
        firsts, at, lens, windows = self._cached(epoch, rows, self._layout)
        bs, t, t1, eos = self.batch_size, self.seq_len, self.seq_len + 1, self.eos is not None
        for j in mine:
            pieces: list[tuple[int, int, int]] = []
            for i, w in enumerate(windows[j * bs : (j + 1) * bs]):
                p, q, base = w * t, w * t + t1, i * t1
                k = bisect.bisect_right(at, p) - 1  # the record holding position p
                while k < len(at) and at[k] < q:
                    a, b = max(p, at[k]), min(q, at[k] + lens[k])
                    if a < b:
                        pieces.append((base + a - p, firsts[k] + a - at[k], b - a))
                    if eos and p <= at[k] + lens[k] < q:
                        pieces.append((base + at[k] + lens[k] - p, -1, 1))
                    k += 1
            yield np.array(pieces, dtype=np.int64).reshape(-1, 3)

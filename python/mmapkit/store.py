"""Growable ``.npy`` arrays: :class:`ArrayStore` and :func:`sparse`.

An :class:`ArrayStore` is a real ``.npy`` file whose first axis grows:

>>> import numpy as np, mmapkit
>>> s = mmapkit.ArrayStore.create("runs.npy", "f8", row_shape=(3,))
>>> s.append([1.0, 2.0, 3.0])          # one row; returns the new length
1
>>> s.extend(np.zeros((1000, 3)))      # many rows, one header update
1001
>>> view = s[10:20]                    # zero-copy, stays valid as s grows
>>> np.load("runs.npy", mmap_mode="r").shape  # works at any moment: whole rows only
(1001, 3)
>>> del view; s.close()                # gives the reserved capacity back

Capacity is allocated ahead in chunks (appends are amortised O(rows); a full
disk raises :class:`~mmapkit.DiskFullError` from the append), and the
header's row count is rewritten in place only after the rows are written, so
readers (``np.load``, :meth:`ArrayStore.open` with ``mode="r"`` and
:meth:`~ArrayStore.refresh`) never see a partial row, and a process killed
mid-append leaves the rows appended before. One writer at a time (an
exclusive ``flock``); any number of readers. The logic is in the Rust core
(``mmapkit::store::ArrayStore``); this module converts numpy dtypes.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from ._facade import NpyFacade
from ._native import ArrayStoreCore, FormatError
from ._native import sparse as _sparse
from ._npy import as_bytes, dtype_descr, header_dtype, split_dtype
from ._types import PathLike

__all__ = ["ArrayStore", "sparse"]


def sparse(path: PathLike, size: int) -> None:
    """Make ``path`` a sparse file of ``size`` bytes, instantly.

    No disk blocks are allocated until written (``mmapkit info`` shows the
    apparent and the allocated size). Creates the file if missing, extends
    a smaller one; refuses to shrink an existing file (``ValueError``).
    """
    _sparse(os.fspath(path), size)


class ArrayStore(NpyFacade):
    """A ``.npy`` file whose first axis grows; see the module docs.

    Create with :meth:`create`, open with :meth:`open`. Indexing
    (``s[a:b]``, ``s[i]``) and :meth:`numpy` return zero-copy numpy views
    (read-only in mode ``"r"``) of the rows published so far; they stay
    valid as the store grows. Pickles as ``(path, mode)``: the receiver
    opens the file again instead of receiving the data.
    """

    __slots__ = ("_mode", "_row_dtype", "_row_shape")
    _core: ArrayStoreCore

    def __init__(self, core: ArrayStoreCore, dtype: np.dtype[Any], mode: str) -> None:
        super().__init__(core, dtype)
        self._row_shape = tuple(int(d) for d in core.row_shape)
        self._row_dtype = np.dtype((dtype, self._row_shape)) if self._row_shape else dtype
        self._mode = mode

    @classmethod
    def create(
        cls,
        path: PathLike,
        dtype: npt.DTypeLike,
        row_shape: Sequence[int] = (),
        *,
        capacity: int = 0,
        chunk_bytes: int = 1 << 20,
        reserve: int | None = None,
    ) -> ArrayStore:
        """Create ``path`` as an empty store of rows of ``row_shape`` and ``dtype``.

        An existing file is replaced atomically (a complete new file appears
        at ``path``, or the old one stays). ``capacity`` rows are allocated
        up front; growth adds at least ``chunk_bytes`` (else 50%).
        ``reserve`` is the address space kept for growth in place.
        """
        dt, shape = split_dtype(dtype, row_shape)
        core = ArrayStoreCore.create(
            os.fspath(path),
            dtype_descr(dt),
            dt.itemsize,
            list(shape),
            capacity,
            chunk_bytes,
            reserve,
        )
        return cls(core, dt, "r+")

    @classmethod
    def open(
        cls,
        path: PathLike,
        mode: str = "r",
        *,
        chunk_bytes: int = 1 << 20,
        reserve: int | None = None,
    ) -> ArrayStore:
        """Open an existing ``.npy`` file (``np.save`` files included).

        ``mode="r"``: read-only; sees the rows published when opened, and
        more after :meth:`refresh`. ``mode="r+"``: the one writer (another
        writer raises ``BlockingIOError``); a file whose header has no room
        for a growing row count is rewritten once, atomically.
        """
        if mode not in ("r", "r+"):
            raise ValueError(f"invalid mode {mode!r}: expected 'r' or 'r+'")
        p = os.fspath(path)
        if mode == "r":
            # A reader changes nothing, so it may check numpy's view of the
            # dtype after opening: one open and one header read (a worker
            # handed a pickled store does this). Whatever fails here is
            # left to the checked path below, so the errors are its own.
            try:
                core = ArrayStoreCore.open(p, False, None, chunk_bytes, reserve)
            except Exception:  # noqa: BLE001 - the checked path below raises its own error
                core = None
            if core is not None:
                try:
                    dt = header_dtype(p, core.descr)
                except FormatError:
                    dt = None
                if dt is not None and dt.itemsize == core.itemsize:
                    return cls(core, dt, mode)
                core.close()
        dt = header_dtype(p)
        core = ArrayStoreCore.open(p, mode == "r+", dt.itemsize, chunk_bytes, reserve)
        return cls(core, dt, mode)

    # ----- data -----------------------------------------------------------

    def numpy(self) -> np.ndarray[Any, Any]:
        """A zero-copy view of every published row, shape ``(len,) + row_shape``."""
        return np.frombuffer(memoryview(self._core), dtype=self._row_dtype)

    def check(self, start: int = 0, stop: int | None = None, *, touch: bool = False) -> None:
        """Raise :class:`~mmapkit.FileTruncatedError` if another process
        truncated the file under rows ``[start, stop)`` (default: every
        published row): pages already lost, or (one ``fstat``) a file now
        shorter than them. ``touch=True`` reads one byte of every page of
        the rows first, so no return means each row was the file's when
        looked at (what iterators of views do before they hand one out)."""
        n = len(self._core)
        hi = n if stop is None else min(int(stop), n)
        if touch:
            self._core.check_read(min(int(start), hi), hi)
        else:
            self._core.check_rows(hi)

    def __len__(self) -> int:
        return len(self._core)

    def append(self, row: npt.ArrayLike) -> int:
        """Append one row (shape ``row_shape``); returns the new length."""
        a = np.asarray(row, dtype=self._dtype)
        if a.shape != self._row_shape:
            raise ValueError(f"a row must have shape {self._row_shape}, got {a.shape}")
        return self._core.append(as_bytes(a).data)

    def extend(self, rows: npt.ArrayLike) -> int:
        """Append many rows (shape ``(n,) + row_shape``) with one header
        update; returns the new length."""
        a = np.asarray(rows, dtype=self._dtype)
        if a.shape[1:] != self._row_shape or a.ndim != len(self._row_shape) + 1:
            raise ValueError(
                f"rows must have shape (n, {', '.join(map(str, self._row_shape))}), "
                f"got {a.shape}".replace(", )", ")")
            )
        return self._core.append(as_bytes(a).data)

    def reserve(self, rows: int) -> None:
        """Allocate room for ``rows`` more rows now (a full disk fails here)."""
        self._core.reserve(rows)

    def refresh(self) -> int:
        """Readers: see rows appended since (views taken before stay valid).
        Returns the row count."""
        return self._core.refresh()

    def flush(self) -> None:
        """Make the published rows durable: data synced before the header, then the
        count recorded in ``.NAME.mmapkit-durable`` (beside the store while a writer
        has it open), so after a power loss the store never counts rows that were
        not flushed."""
        self._core.flush()

    def trim(self) -> None:
        """Give unused reserved capacity back to the file system."""
        self._core.trim()

    def close(self) -> None:
        """Trim, flush and close; a writer's lock goes at once. Views keep the
        memory until they are gone (a reader's are copy-on-write mappings:
        written through, say, a torch tensor, they change private pages,
        never the file)."""
        super().close()

    # ----- properties -----------------------------------------------------

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape: the rows so far, then :attr:`row_shape`."""
        return (len(self._core), *self._row_shape)

    @property
    def row_shape(self) -> tuple[int, ...]:
        """The shape of one row (the ``.npy`` shape without its first axis)."""
        return self._row_shape

    @property
    def mode(self) -> str:
        """``"r"`` (a reader) or ``"r+"`` (the one writer; :meth:`create` opens as it)."""
        return self._mode

    @property
    def capacity(self) -> int:
        """Rows that fit before more space is allocated."""
        return self._core.capacity

    @property
    def data_offset(self) -> int:
        """File offset of row 0 (for ``np.memmap(path, offset=...)``)."""
        return self._core.data_offset

    def __reduce__(self) -> tuple[Any, ...]:
        return (ArrayStore.open, (self.path, self._mode))

    def __repr__(self) -> str:
        state = "closed" if self.closed else f"shape={self.shape}"
        return f"<mmapkit.ArrayStore {self.path!r} mode={self._mode!r} dtype={self._dtype} {state}>"

"""Shared-memory numpy arrays between processes: :class:`SharedArray`.

Named segments live in ``/dev/shm`` as ``.npy`` files, so a name is all
another process needs (dtype and shape are in the segment):

>>> from mmapkit import SharedArray
>>> a = SharedArray.create("frames", (1000, 1024), "f4")   # zeroed
>>> a[:10] = 1.0
>>> # in another process (or after pickling ``a``: only the path is sent)
>>> b = SharedArray.attach("frames")
>>> float(b.numpy()[9, 0])            # a zero-copy view of the same memory
1.0
>>> b.close(); a.close()              # the last handle removes the name

Unlike ``multiprocessing.shared_memory``, no resource tracker unlinks a
segment behind your back: every handle holds a shared lock, and the name is
removed when the *last* handle with ``unlink_on_close=True`` (the default)
closes, never while another process still holds it. :meth:`SharedArray.unlink`
removes the name at once (mappings stay valid, like ``shm_unlink``).
Segment memory is allocated at creation: a ``/dev/shm`` too small raises
:class:`~mmapkit.DiskFullError` there, never ``SIGBUS`` later.

:meth:`SharedArray.anonymous` makes an unnamed (memfd) segment, inherited by
children forked later and reachable by other processes through
``/proc/PID/fd/N`` while the creator lives (pickling sends that path).
:meth:`SharedArray.snapshot` gives a copy-on-write (``MAP_PRIVATE``) view
whose writes stay private to the caller.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np
import numpy.typing as npt

from ._facade import NpyFacade
from ._native import MappedFile, SharedSegment, segment_path
from ._npy import descr_dtype, dtype_descr, header_dtype, split_dtype
from ._types import PathLike

__all__ = ["SHM_DIR", "SharedArray"]

#: Where named segments are created unless ``dir=`` says otherwise.
SHM_DIR = "/dev/shm"  # noqa: S108 - POSIX shared memory, not a temp file


def _shape(shape: int | tuple[int, ...] | list[int]) -> tuple[int, ...]:
    return (int(shape),) if isinstance(shape, (int, np.integer)) else tuple(int(d) for d in shape)


class SharedArray(NpyFacade):
    """A numpy array in shared memory; see the module docs.

    ``np.asarray(a)`` / :meth:`numpy` give zero-copy views; ``a[...]``
    indexes that view. Pickling sends the segment's path, so a worker
    process attaches instead of receiving a copy.
    """

    __slots__ = ("_shape",)
    _core: SharedSegment

    def __init__(self, seg: SharedSegment) -> None:
        super().__init__(seg, descr_dtype(seg.descr))
        self._shape = tuple(int(d) for d in seg.shape)
        expect = self._dtype.itemsize * math.prod(self._shape)
        if seg.nbytes < expect:
            raise ValueError(
                f"{seg.path}: segment holds {seg.nbytes} bytes, "
                f"{self._shape} of {self._dtype} needs {expect}"
            )

    @classmethod
    def create(
        cls,
        name: str,
        shape: int | tuple[int, ...] | list[int],
        dtype: npt.DTypeLike = np.float64,
        *,
        dir: PathLike | None = None,
        unlink_on_close: bool = True,
    ) -> SharedArray:
        """Create the zeroed segment ``name`` (``FileExistsError`` if it exists).

        ``dir`` defaults to ``/dev/shm``. With ``unlink_on_close`` the name
        goes away when the last handle that has it set closes (or its
        process exits) and no other process holds the segment.
        """
        dt, sub = split_dtype(dtype, ())
        full = _shape(shape) + sub
        path = segment_path(name, None if dir is None else os.fspath(dir))
        return cls(
            SharedSegment.create(path, dtype_descr(dt), dt.itemsize, list(full), unlink_on_close)
        )

    @classmethod
    def from_array(
        cls,
        name: str,
        array: npt.ArrayLike,
        *,
        dir: PathLike | None = None,
        unlink_on_close: bool = True,
    ) -> SharedArray:
        """Create segment ``name`` holding a copy of ``array``."""
        a = np.asarray(array)
        out = cls.create(name, a.shape, a.dtype, dir=dir, unlink_on_close=unlink_on_close)
        out.numpy()[...] = a
        return out

    @classmethod
    def attach(
        cls,
        name: PathLike,
        *,
        dir: PathLike | None = None,
        readonly: bool = False,
        unlink_on_close: bool = True,
    ) -> SharedArray:
        """Attach to segment ``name`` (or a path: anything with a ``/``, such
        as another ``.npy`` file). ``FileNotFoundError`` if it is gone."""
        n = os.fspath(name)
        path = n if "/" in n else segment_path(n, None if dir is None else os.fspath(dir))
        # Attached with unlink_on_close off until the dtype and size are
        # checked: a rejected handle is dropped, and must not remove the
        # file. (One open and one header read: no separate pre-read.)
        seg = SharedSegment.attach(path, not readonly, False)
        try:
            header_dtype(path, seg.descr)
            out = cls(seg)
        except BaseException:
            seg.close()
            raise
        if unlink_on_close:
            seg.set_unlink_on_close(True)
        return out

    @classmethod
    def anonymous(
        cls, shape: int | tuple[int, ...] | list[int], dtype: npt.DTypeLike = np.float64
    ) -> SharedArray:
        """An unnamed zeroed segment (memfd), shared with children forked later."""
        dt, sub = split_dtype(dtype, ())
        return cls(SharedSegment.anonymous(dtype_descr(dt), dt.itemsize, list(_shape(shape) + sub)))

    # ----- data -----------------------------------------------------------

    def numpy(self) -> np.ndarray[Any, Any]:
        """A zero-copy view (read-only for read-only attachments)."""
        count = math.prod(self._shape)  # exact ints: np.prod costs more than the rest of numpy()
        return np.frombuffer(memoryview(self._core), dtype=self._dtype, count=count).reshape(
            self._shape
        )

    def __len__(self) -> int:
        return self._shape[0] if self._shape else 0

    def snapshot(self) -> np.ndarray[Any, Any]:
        """A copy-on-write view (``MAP_PRIVATE``): writes to it stay in this
        process. Pages it has not written still show later changes others
        make (that is how private file mappings work); copy it with
        ``np.array`` for a frozen copy."""
        m = MappedFile(self._core.path, "c", None, self._core.data_offset, self._core.nbytes)
        count = int(np.prod(self._shape, dtype=np.int64))
        return np.frombuffer(memoryview(m), dtype=self._dtype, count=count).reshape(self._shape)

    # ----- lifetime -------------------------------------------------------

    def close(self) -> None:
        """Release this handle (memory goes when the last view does); the
        last ``unlink_on_close`` handle of all processes removes the name."""
        super().close()

    def unlink(self) -> None:
        """Remove the name now: no new attachments; existing ones keep working."""
        self._core.unlink()

    def __reduce__(self) -> tuple[Any, ...]:
        return (_attach_path, (os.fspath(self._core.path), not self._core.writable))

    # ----- properties -----------------------------------------------------

    @property
    def name(self) -> str:
        """The segment's name (the last component of its path)."""
        return os.path.basename(os.fspath(self._core.path))

    @property
    def shape(self) -> tuple[int, ...]:
        """The array's shape."""
        return self._shape

    @property
    def nbytes(self) -> int:
        """The array's size in bytes."""
        return int(self._core.nbytes)

    def __repr__(self) -> str:
        closed = " closed" if self.closed else ""
        return (
            f"<mmapkit.SharedArray {self.path!r} shape={self._shape} dtype={self._dtype}{closed}>"
        )


def _attach_path(path: str, readonly: bool) -> SharedArray:
    """Unpickles a :class:`SharedArray` by attaching to its segment."""
    return SharedArray.attach(path, readonly=readonly)

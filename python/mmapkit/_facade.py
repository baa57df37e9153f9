"""The numpy facade that :class:`~mmapkit.ArrayStore` and
:class:`~mmapkit.SharedArray` share.

Each wraps a native ``_NpyBuffer`` (``self._core``: a ``.npy`` array whose
bytes are lent through the buffer protocol) and its numpy dtype; a subclass
says how to view the bytes (:meth:`numpy`), its length and shape, and how
it pickles (by path: the receiver maps the file again).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any, Self

import numpy as np
import numpy.typing as npt

from ._native import _NpyBuffer


class NpyFacade:
    """A numpy array view of a mapped ``.npy`` array (``_core``)."""

    __slots__ = ("__weakref__", "_core", "_dtype")

    def __init__(self, core: _NpyBuffer, dtype: np.dtype[Any]) -> None:
        self._core = core
        self._dtype = dtype

    def numpy(self) -> np.ndarray[Any, Any]:
        """A zero-copy view of the array."""
        raise NotImplementedError

    def __array__(
        self, dtype: npt.DTypeLike | None = None, copy: bool | None = None
    ) -> np.ndarray[Any, Any]:
        a = self.numpy()
        if copy:
            return np.array(a, dtype=dtype, copy=True)
        return a if dtype is None else a.astype(dtype, copy=False)

    def __getitem__(self, key: Any) -> Any:
        return self.numpy()[key]

    def __setitem__(self, key: Any, value: Any) -> None:
        self.numpy()[key] = value

    def __iter__(self) -> Iterator[Any]:
        return iter(self.numpy())

    @property
    def dtype(self) -> np.dtype[Any]:
        """The elements' numpy dtype."""
        return self._dtype

    @property
    def path(self) -> str:
        """The path of the mapped file."""
        return os.fspath(self._core.path)

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._core.closed

    def close(self) -> None:
        """Close; views taken before keep the memory until they are gone."""
        self._core.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

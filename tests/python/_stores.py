"""The FeatureStores the Python tests build: seeded normal features with
labels from a linear rule (:func:`linear_store`), rows that say which rows
they are (:func:`ids_store`) and given arrays (:func:`store_of`)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from mmapkit import FeatureStore


def _add(fs: FeatureStore, X: np.ndarray, y: np.ndarray, batch: int | None) -> None:
    """Adds the rows ``batch`` at a time (default: all in one add)."""
    step = batch or max(len(y), 1)
    for s in range(0, len(y), step):
        fs.add(X[s : s + step], y[s : s + step])


def linear_store(
    path: Path,
    n: int,
    d: int,
    *,
    seed: int = 0,
    slope: tuple[float, float] = (1.0, -1.0),
    bias: float = 0.0,
    threshold: float = 0.0,
    dtype: np.dtype | type = np.float32,
    batch: int | None = None,
) -> tuple[FeatureStore, np.ndarray, np.ndarray]:
    """A store (open as its writer) of ``n`` rows of ``d`` seeded normal
    features of ``dtype`` and float32 labels ``X @ w + bias > threshold``,
    ``w`` from ``slope[0]`` to ``slope[1]`` over the columns; ``(fs, X, y)``."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(dtype)
    y = (X @ np.linspace(*slope, d) + bias > threshold).astype(np.float32)
    fs = FeatureStore(path, "w", dim=d, dtype=dtype)
    _add(fs, X, y, batch)
    return fs, X, y


def ids_store(
    path: Path, n: int, d: int, dtype: np.dtype | type, batch: int | None = None
) -> FeatureStore:
    """A store (open as its writer) whose row i holds i in every column (of
    ``dtype``) and the int64 label i: batches say which rows they hold."""
    fs = FeatureStore(path, "w", dim=d, dtype=dtype, label_dtype=np.int64)
    ids = np.arange(n)
    _add(fs, np.repeat(ids[:, None].astype(dtype), d, axis=1), ids, batch)
    return fs


def store_of(path: Path, X: np.ndarray, y: np.ndarray, dtype: np.dtype | type) -> FeatureStore:
    """A store (open as its writer) of ``X`` as ``dtype`` and ``y`` as float32 labels."""
    fs = FeatureStore(path, "w", dim=X.shape[1], dtype=dtype)
    fs.add(np.asarray(X, dtype=dtype), np.asarray(y, dtype=np.float32))
    return fs

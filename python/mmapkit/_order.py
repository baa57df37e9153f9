"""The blocks of a shuffled epoch's row order, shared by
:func:`mmapkit.features.batch_order` (the permutation) and
:mod:`mmapkit.torch` (:func:`batch_runs`: each batch as runs of consecutive
rows, without the permutation being made)."""

from __future__ import annotations

import bisect
from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import numpy.typing as npt


def block_layout(
    n: int, batch_size: int, seed: Any, block_size: int | None
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """:func:`mmapkit.features.batch_order`'s blocks, in output order: each one's first row,
    length and position in the epoch's order."""
    if block_size is None:
        block_size = max(1, batch_size // 8)
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, got {block_size}")
    nblocks = -(-n // block_size)
    perm = np.random.default_rng(seed).permutation(nblocks)
    starts = perm * block_size
    lens = np.minimum(n - starts, block_size)
    return starts, lens, np.cumsum(lens) - lens


def batch_runs(
    n: int,
    batch_size: int,
    seed: Any,
    block_size: int | None,
    stop: int,
    batches: Iterable[int] | None = None,
) -> Iterator[list[tuple[int, int, int]]]:
    """Each batch of :func:`mmapkit.features.batch_order`'s epoch (positions ``[s, s + batch_size)``
    up to ``stop``) as maximal runs of consecutive rows ``(i, j, first)``:
    positions ``i:j`` of the batch hold rows ``first, first + 1, ...``. Read
    off the blocks, without the epoch's order (``n`` indices) being made.
    ``batches``: the batch numbers wanted, in the order wanted (default all,
    in order; a rank's share of them for the torch samplers)."""
    starts, lens, out_start = (a.tolist() for a in block_layout(n, batch_size, seed, block_size))
    if batches is None:
        batches = range(-(-stop // batch_size))
    for j in batches:
        s = j * batch_size
        e = min(s + batch_size, stop)
        b = bisect.bisect_right(out_start, s) - 1  # the block holding position s
        runs: list[tuple[int, int, int]] = []
        while 0 <= b < len(starts) and out_start[b] < e:
            end = out_start[b] + lens[b]
            lo, hi = max(out_start[b], s), min(end, e)
            first = starts[b] + lo - out_start[b]
            if runs and runs[-1][2] + runs[-1][1] - runs[-1][0] == first:
                runs[-1] = (runs[-1][0], hi - s, runs[-1][2])  # continues the run before
            else:
                runs.append((lo - s, hi - s, first))
            b += 1
        yield runs

"""Epochs of batches shared out between ranks, and resumed: the one
bookkeeping behind every sampler of mmapkit (:class:`mmapkit.torch.FeatureBatchSampler`,
:class:`mmapkit.tokens.WindowSampler`, :class:`mmapkit.tokens.PackedSampler`).

An epoch is ``G`` global batches in one order that every rank computes
alike (from the seed and the epoch); rank ``r`` of ``world_size`` takes
global batches ``r, r + world_size, ...``, padded by wrap-around to
``ceil(G / world_size)`` each (or ``G // world_size`` with ``drop_last``).
The state is a plain dict of ints: the epoch, the source's size when it
started (``rows``: rows, records or tokens) and the global batches consumed.
Torch is not needed here: without it (or without an initialised process
group) a sampler is rank 0 of 1.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

__all__ = ["ShardedEpochs", "Tracker", "rank_world"]


def rank_world(rank: int | None, world_size: int | None) -> tuple[int, int]:
    """``rank`` and ``world_size``, each taken from the initialised
    ``torch.distributed`` process group when not given (else rank 0 of 1)."""
    group = False
    try:
        import torch.distributed as dist
    except ImportError:  # no torch: one process
        dist = None  # type: ignore[assignment]
    else:
        group = dist.is_available() and dist.is_initialized()
    if world_size is None:
        world_size = dist.get_world_size() if group else 1
    if rank is None:
        rank = dist.get_rank() if group else 0
    world_size, rank = int(world_size), int(rank)
    if world_size < 1:
        raise ValueError(f"world_size must be positive, got {world_size}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, {world_size}), got {rank}")
    return rank, world_size


class Progress:
    """One epoch being yielded: its epoch, source size (``rows``), first
    global batch (``start``), global batch count (``total``) and keys
    handed out so far."""

    __slots__ = ("epoch", "rows", "start", "total", "yielded")

    def __init__(self, epoch: int, rows: int, start: int, total: int) -> None:
        self.epoch, self.rows, self.start, self.total = epoch, rows, start, total
        self.yielded = 0


class ShardedEpochs:
    """The epoch, rank and resume logic of a sampler (see the module docs).

    A subclass says what an epoch is: :attr:`rows` (the source's size now),
    :meth:`_units` (items an epoch over that size holds, cut into batches of
    ``batch_size``), :meth:`_config` (the settings a state must match),
    :meth:`_epoch_keys` (the keys of given global batches) and, where the
    source can grow, :meth:`_cover` (make it hold a resumed epoch's size).
    """

    def __init__(
        self,
        batch_size: int,
        seed: int | None,
        drop_last: bool,
        rank: int | None,
        world_size: int | None,
    ) -> None:
        if isinstance(batch_size, bool) or int(batch_size) < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        self.batch_size = int(batch_size)
        self.seed = 0 if seed is None else int(seed)
        self.drop_last = bool(drop_last)
        self.rank, self.world_size = rank_world(rank, world_size)
        self.epoch = 0
        self._resume: tuple[int, int, int] | None = None  # (epoch, rows, start)
        self._progress: Progress | None = None

    # ----- what a subclass defines -----------------------------------------

    @property
    def rows(self) -> int:
        """The source's size now (read again at each epoch)."""
        raise NotImplementedError

    def _units(self, rows: int) -> int:
        """Items (rows, windows) an epoch over a source of size ``rows`` holds."""
        return rows

    def _config(self) -> dict[str, int]:
        """Settings (ints) that decide the epochs' batches besides the seed."""
        return {}

    def _epoch_keys(self, epoch: int, rows: int, mine: list[int], **how: Any) -> Iterator[Any]:
        """The keys of global batches ``mine`` (in that order) of epoch
        ``epoch`` over a source of size ``rows``."""
        raise NotImplementedError

    def _cover(self, rows: int) -> None:
        """Make the source hold at least ``rows`` (a resumed epoch's size)."""

    # ----- epochs ------------------------------------------------------------

    def set_epoch(self, epoch: int) -> None:
        """Makes the next ``iter()`` yield epoch ``epoch``'s order (as
        ``DistributedSampler.set_epoch``); a loaded resume of another epoch is dropped.
        """
        self.epoch = int(epoch)
        if self._resume is not None and self._resume[0] != self.epoch:
            self._resume = None

    def epoch_seed(self, epoch: int) -> np.random.SeedSequence:
        """The seed of epoch ``epoch``'s shuffle: ``SeedSequence(seed).spawn``'s child ``epoch``."""
        return np.random.SeedSequence(self.seed, spawn_key=(epoch,))

    def _total(self, rows: int) -> int:
        """Global batches of an epoch over a source of size ``rows``."""
        units = self._units(rows)
        return units // self.batch_size if self.drop_last else -(-units // self.batch_size)

    def _count(self, total: int, start: int) -> int:
        """This rank's batches of an epoch of ``total`` global batches from ``start`` on."""
        left = max(0, total - start)
        return left // self.world_size if self.drop_last else -(-left // self.world_size)

    def __len__(self) -> int:
        """This rank's batches in a whole epoch over the source as it is now."""
        return self._count(self._total(self.rows), 0)

    # ----- state -------------------------------------------------------------

    def _settings(self) -> dict[str, int]:
        return {
            "batch_size": self.batch_size,
            "seed": self.seed,
            "drop_last": int(self.drop_last),
            **self._config(),
        }

    def _state(self, epoch: int, rows: int, consumed: int) -> dict[str, int]:
        if consumed and consumed >= self._total(rows):  # over: the next epoch, from its start
            epoch, consumed = epoch + 1, 0
        return {
            "epoch": epoch,
            "rows": rows if consumed else -1,
            "consumed": consumed,
            "world_size": self.world_size,
            **self._settings(),
        }

    def _state_of(self, prog: Progress, yielded: int) -> dict[str, int]:
        """The state after ``yielded`` of ``prog``'s keys were consumed (all of
        them: :meth:`state_dict`'s, the next epoch's start)."""
        if yielded >= self._count(prog.total, prog.start):
            return (
                self.state_dict()
                if prog is self._progress
                else self._state(prog.epoch + 1, self.rows, 0)
            )
        return self._state(prog.epoch, prog.rows, prog.start + yielded * self.world_size)

    def _next_state(self) -> dict[str, int]:
        """The state the next ``iter()`` starts from (a loaded resume, else
        :attr:`epoch` from its start)."""
        if self._resume is not None:
            return self._state(*self._resume)
        return self._state(self.epoch, self.rows, 0)

    def state_dict(self) -> dict[str, int]:
        """Where this sampler stands, as a plain dict of ints: the epoch in
        progress (or loaded) and the global batches of it consumed, or the
        next epoch from its start."""
        if self._resume is not None:
            epoch, rows, start = self._resume
            return self._state(epoch, rows, start)
        prog = self._progress
        if prog is None or prog.yielded >= self._count(prog.total, prog.start):
            return self._state(self.epoch, self.rows, 0)
        return self._state(prog.epoch, prog.rows, prog.start + prog.yielded * self.world_size)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resumes from :meth:`state_dict`'s dict (possibly saved at another
        world size): the next ``iter()`` yields the rest of its epoch. A
        state of other settings (batch size, seed, ...) is a ``ValueError``."""
        for name, have in self._settings().items():
            if name in state and int(state[name]) != have:
                raise ValueError(f"state's {name} is {state[name]}, this sampler's {have}")
        epoch, consumed = int(state["epoch"]), int(state["consumed"])
        self.epoch = epoch
        self._progress = None
        self._resume = (epoch, int(state["rows"]), consumed) if consumed > 0 else None

    # ----- iteration -----------------------------------------------------------

    def _begin(self) -> tuple[int, int, list[int], Progress]:
        """Starts the next iteration: its epoch, source size and this rank's
        global batches (from a loaded resume's on), and its progress; the epoch
        moves on."""
        resume, self._resume = self._resume, None
        if resume is not None:
            epoch, rows, start = resume
            if rows > self.rows:
                self._cover(rows)
        else:
            epoch, rows, start = self.epoch, self.rows, 0
        self.epoch = epoch + 1
        total = self._total(rows)
        prog = self._progress = Progress(epoch, rows, start, total)
        world = self.world_size
        mine = [(start + self.rank + t * world) % total for t in range(self._count(total, start))]
        return epoch, rows, mine, prog

    def __iter__(self) -> Iterator[Any]:
        return self._keys()

    def _keys(self, **how: Any) -> Iterator[Any]:
        """This rank's keys of the next iteration's epoch (``how`` goes to
        :meth:`_epoch_keys`), each counted as handed out. A generator: the
        epoch moves on at its first key, not when ``iter()`` is called."""
        epoch, rows, mine, prog = self._begin()
        for key in self._epoch_keys(epoch, rows, mine, **how):
            prog.yielded += 1
            yield key


class Tracker:
    """Batches delivered by one iteration of a loader over a
    :class:`ShardedEpochs` sampler, whose keys may run ahead (workers,
    prefetch): the state after them."""

    __slots__ = ("delivered", "ended", "prog", "sampler", "start")

    def __init__(self, sampler: ShardedEpochs) -> None:
        self.sampler = sampler
        self.start = sampler._next_state()  # before any key is taken
        self.prog: Progress | None = None
        self.delivered = 0
        self.ended = False  # the iteration ran to its end

    def one(self) -> None:
        """Counts one batch delivered."""
        if self.prog is None:
            self.prog = self.sampler._progress  # this iteration's (its first key is taken)
        self.delivered += 1

    def state(self) -> dict[str, int]:
        """The sampler's state after the batches delivered."""
        if self.ended:
            return self.sampler.state_dict()
        if self.prog is None:
            return self.start
        return self.sampler._state_of(self.prog, self.delivered)

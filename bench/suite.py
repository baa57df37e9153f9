"""What a benchmark suite declares (see bench/harness.py's module docs for the
contract): :class:`Suite` with its sizes (:class:`Size`), data
(:class:`Dataset`), tasks (:class:`Task`) and contenders (:class:`Contender`),
a contender's :class:`Measured` result and :class:`Unavailable`; the runner
and the suites' helpers are bench/harness.py."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


def human_bytes(n: int) -> str:
    """``n`` bytes for people: whole GiB or MiB when exact, decimal GB when large, else bytes."""
    for unit, div in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= div and n % div == 0:
            return f"{n // div} {unit}"
    if n >= 1_000_000_000 and n % 1_000_000 == 0:  # decimal sizes ("10 GB"), not "9765625 KiB"
        return f"{n / 1e9:g} GB"
    if n >= 1_000_000_000:
        return f"{n / 1e9:.3g} GB"  # not "2.15e+03 MB"
    if 1 << 10 <= n < 1 << 20 and n % (1 << 10) == 0:  # not "400000 KiB" for 409.6 MB
        return f"{n >> 10} KiB"
    if n >= 1_000_000:
        return f"{n / 1e6:.3g} MB"
    if n >= 1_000:
        return f"{n / 1e3:.3g} kB"
    return f"{n} B"


class Unavailable(Exception):
    """Raised by a contender (or its check) that cannot run; the reason is shown as n/a."""


@dataclass(frozen=True)
class Size:
    """One data size of a suite: its label and its size in bytes."""

    label: str  # "small", "large", ...
    nbytes: int

    @property
    def human(self) -> str:
        """The size for people (``4 GiB``, ``200,000 bytes``)."""
        return human_bytes(self.nbytes)


@dataclass
class Dataset:
    """What prepare() made for one size.

    ``path`` is handed to the contenders; ``files`` are the files whose pages are
    evicted before a cold run (for a directory-shaped dataset, all its files).
    """

    size: Size
    path: Path
    files: list[Path]
    info: dict[str, Any] = field(default_factory=dict)


def _same(value: Any) -> Any:
    return value


@dataclass
class Measured:
    """A contender's result plus extra numbers about the run (e.g. peak memory).

    The harness unwraps it: ``value`` is checked like any result, ``metrics``
    (name -> number) are kept per run in the cell and shown if the suite declares
    the metric in ``Suite.metrics``.
    """

    value: Any
    metrics: dict[str, float] = field(default_factory=dict)
    # the contender's own measurement of the operation, used instead of the wall time
    # of the call: for drivers (subprocesses) that time only the operation, not their
    # start-up or the generation of their input
    seconds: float | None = None


@dataclass
class Task:
    """One measured operation.

    setup:   untimed, before every run (warm-up included); returns the path given
             to the contender (e.g. a fresh copy of a file the task modifies).
             Its result's pages are evicted before cold runs too.
    check:   untimed, after every run: (path the run worked on, result) -> value
             compared with the reference contender's value. Default: the result
             itself, through ``digest``.
    digest:  reduces a result to something cheap to keep and compare (default:
             identity; see :func:`buffer_digest` for big bytes results).
    repeats: (size, default repeats) -> repeats for this task at that size, to
             trim very slow tasks (say why in ``note``).
    warmup:  "run" (one untimed run of every contender before the warm runs) or
             "prime" (just read the data files once: for tasks too slow to run an
             extra time per contender; the cache is then warm all the same).
    baseline, reference: override the suite's for this task (ratios / answers).
    throughput: whether "bytes of data per second" means something for this task
             (the report's GB/s column; False for e.g. "find near the start").
    caches:  the cache states that mean something for this task (default: all; e.g.
             only "warm" for writing a fresh file); the others are shown as n/a.
    sizes:   the size labels the task runs at (default: all); n/a at the others.
    """

    name: str
    title: str
    setup: Callable[[Dataset], Path] | None = None
    check: Callable[[Path, Any], Any] | None = None
    digest: Callable[[Any], Any] = _same
    teardown: Callable[[Dataset], None] | None = None  # untimed, after the task (cleanup)
    repeats: Callable[[Size, int], int] | None = None
    warmup: Callable[[Size], str] | str = "run"
    note: str = ""
    baseline: str | None = None
    reference: str | None = None
    throughput: bool = True
    caches: tuple[str, ...] | None = None
    sizes: tuple[str, ...] | None = None

    def warmup_for(self, size: Size) -> str:
        """The warm-up policy at ``size`` (``warmup`` may depend on the size)."""
        return self.warmup(size) if callable(self.warmup) else self.warmup

    def repeats_for(self, size: Size, default: int) -> int:
        """Timed runs at ``size``: the task's own count when it sets one, else ``default`` (at least
        1).
        """
        return max(1, self.repeats(size, default)) if self.repeats else default


@dataclass
class Contender:
    """A way of doing the tasks. ``available()`` returns None or why it cannot run."""

    name: str
    # task name -> callable(path) -> result; or a factory of that mapping, called once
    # (untimed) after available() said yes, so that the callables can close over a
    # module that may not be importable.
    impls: dict[str, Callable[[Path], Any]] | Callable[[], dict[str, Callable[[Path], Any]]]
    available: Callable[[], str | None] = lambda: None
    note: str = ""
    commands: dict[str, str] = field(default_factory=dict)  # task -> what runs (for the report)

    def resolve(self) -> dict[str, Callable[[Path], Any]]:
        """The task → callable mapping, built once from its factory when ``impls`` is one."""
        if callable(self.impls):
            self.impls = self.impls()
        return self.impls


class Suite:
    """Base class for suites; subclasses fill in the attributes and two methods."""

    name: str = ""
    title: str = ""
    description: str = ""  # markdown paragraph for the report
    baseline: str = ""
    reference: str | None = None
    tasks: Sequence[Task] = ()
    contenders: Sequence[Contender] = ()
    notes: Sequence[str] = ()  # extra markdown bullet points for the report
    timing: str = ""  # what a cell's time is, if not the wall time of the call
    layout: str = "columns"  # or "rows": see the module docstring
    # name -> {"title": ..., "unit": "bytes" | ""}: per-run numbers from Measured results
    metrics: dict[str, dict[str, str]] = {}
    # (task, contender) whose throughput is "the machine's limit" (rows layout: % column);
    # contender None: the task's fastest contender in the same size and cache state
    limit: tuple[str, str | None] | None = None
    # The one comparison the summary and the README's table show (see report.headline):
    # {"capability", "label", "task", "contender" (mmapkit's), "peers" (the best of them
    # is picked from the results), "sizes" (preferred labels, last measured wins; default
    # the last size), "cache" (default "warm")}.
    headline: dict[str, Any] | None = None

    def sizes(self, quick: bool) -> list[Size]:
        """The sizes to run: small ones with ``quick`` (``make run``), else the full ones."""
        raise NotImplementedError

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        """Creates (or reuses) the data of ``size`` under ``data_dir``; returns what tasks need."""
        raise NotImplementedError

    def versions(self) -> dict[str, str]:
        """Versions of the libraries measured, for the report."""
        return {}

    @property
    def reference_name(self) -> str:
        """The contender whose answers all others' must equal (default: the baseline)."""
        return self.reference or self.baseline

    def task_baseline(self, task: Task) -> str:
        """The plain-I/O baseline of ``task`` (the suite's unless the task names its own)."""
        return task.baseline or self.baseline

    def task_reference(self, task: Task) -> str:
        """The contender whose answer ``task``'s other contenders must match."""
        return task.reference or task.baseline or self.reference_name

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """Goals to check against the results document (rendered as a table), each
        {"label", "task", "contender", "versus", "min_speedup", "size", "cache"} plus
        optionally {"max_metric": {name: limit}}; see report.targets_table."""
        return []

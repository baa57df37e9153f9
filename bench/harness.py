"""Shared benchmark machinery: the runner, cache dropping, machine info, and the
helpers every suite uses (running commands, cached seeded data, working copies,
repeats policies, number formats). The suite model (:class:`Suite`, :class:`Task`,
...) is in bench/suite.py; who is measured (tools, mmapkit's CLI and package,
command tables) in bench/contenders.py; the reports in bench/report.py.

A suite (see bench/suites/) declares

* ``sizes(quick)``: the data sizes to run (a label and a byte count each),
* ``prepare(size, data_dir)``: generate (seeded, cached in bench/data/) the data
  for one size and return a :class:`Dataset`,
* ``tasks``: what is measured (:class:`Task`),
* ``contenders``: who is measured (:class:`Contender`), each a mapping from task
  name to a callable taking a path and returning a result,
* ``baseline``: the contender the ratios are relative to (plain file I/O), and
  ``reference``: the contender whose answers everybody must reproduce (defaults
  to the baseline); a task may name its own (``Task.baseline``/``reference``),
  e.g. when every task has a different classic tool to compare with,
* ``layout``: "columns" (one table per size and cache: tasks x contenders) or
  "rows" (one row per task and contender that implements it: for suites whose
  tasks have different contenders), and optionally ``targets`` and
  ``metrics`` (extra per-run numbers a contender reports, see :class:`Measured`).

The runner measures every (size, task, contender) with a warm page cache (one
untimed warm-up run, then timed runs) and a cold one (page cache dropped before
every timed run), in a fresh random order of contenders per round, and checks
every single run's answer against the reference contender's. A wrong answer is a
failure of the suite, never a number in the table.
"""

from __future__ import annotations

import datetime as _dt
import gc
import json
import os
import platform
import random
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .suite import (
    Contender,
    Dataset,
    Measured,
    Size,
    Suite,
    Task,
    Unavailable,
)

BENCH_DIR = Path(__file__).resolve().parent
REPO_DIR = BENCH_DIR.parent
DATA_DIR = BENCH_DIR / "data"
RESULTS_DIR = BENCH_DIR / "results"  # full runs (committed; feeds the README)
QUICK_RESULTS_DIR = RESULTS_DIR / "quick"  # --quick runs (git-ignored)

CACHES = ("warm", "cold")


# --------------------------------------------------------------------------- helpers


def buffer_digest(buf: Any) -> tuple[int, str]:
    """(length, hash) of any bytes-like object; cheap enough for GiB results."""
    import hashlib

    mv = memoryview(buf).cast("B")
    return (mv.nbytes, hashlib.sha1(mv, usedforsecurity=False).hexdigest())


def file_digest(path: Path) -> tuple[int, str]:
    """(length, hash) of a file's bytes, read in chunks."""
    import hashlib

    h = hashlib.sha1(usedforsecurity=False)
    n = 0
    with open(path, "rb", buffering=0) as f:
        buf = bytearray(8 << 20)
        view = memoryview(buf)
        while True:
            k = f.readinto(buf)
            if not k:
                break
            h.update(view[:k])
            n += k
    return (n, h.hexdigest())


def short(value: Any, limit: int = 120) -> str:
    """``repr(value)`` cut to ``limit`` characters (for error messages)."""
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def log(msg: str) -> None:
    """Prints ``msg`` on stderr at once (progress, never the results)."""
    print(msg, file=sys.stderr, flush=True)


def usable_cores() -> int:
    """The cores this process may run on (its affinity), else all of them."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def module_version(module: str) -> str:
    """A Python module's ``__version__`` (for the reports), or why it has none."""
    try:
        mod = __import__(module)
        return str(getattr(mod, "__version__", "?"))
    except Exception as exc:  # noqa: BLE001
        return f"not importable ({type(exc).__name__})"


def package_version(distribution: str) -> str:
    """An installed distribution's version (for the reports), or "not installed"."""
    import importlib.metadata as md

    try:
        return md.version(distribution)
    except md.PackageNotFoundError:
        return "not installed"


# --------------------------------------------------------------------------- repeats per size


def above(nbytes: int) -> Callable[[Size], bool]:
    """Size predicate for the helpers below: sizes of more than `nbytes`."""
    return lambda size: size.nbytes > nbytes


def labelled(*labels: str) -> Callable[[Size], bool]:
    """Size predicate for the helpers below: the sizes with one of these labels."""
    return lambda size: size.label in labels


def capped(
    limit: int, big: Callable[[Size], bool], otherwise: int | None = None
) -> Callable[[Size, int], int]:
    """``Task.repeats`` for slow tasks: at most `limit` timed runs on the `big` sizes
    (and at most `otherwise` on the others, if given)."""

    def repeats(size: Size, n: int) -> int:
        cap = limit if big(size) else otherwise
        return n if cap is None else min(n, cap)

    return repeats


def primed(big: Callable[[Size], bool]) -> Callable[[Size], str]:
    """``Task.warmup``: a plain read of the data instead of a warm-up run on the `big`
    sizes (for tasks too slow to run an extra time per contender)."""
    return lambda size: "prime" if big(size) else "run"


# --------------------------------------------------------------------------- subprocesses


class CommandError(RuntimeError):
    """A command of a contender failed; the message names it and quotes its stderr."""


_STDERR: Any = None


def _stderr_file() -> Any:
    """One reused temporary file for the commands' stderr: no second pipe to drain
    while reading stdout, and nothing to create per run."""
    global _STDERR
    if _STDERR is None:
        _STDERR = tempfile.TemporaryFile()
    _STDERR.seek(0)
    _STDERR.truncate()
    return _STDERR


def run_command(
    argv: Sequence[str],
    *,
    stdin: Path | None = None,
    stdout: Path | None = None,
    ok: Sequence[int] = (0,),
    env: dict[str, str] | None = None,
    shown: Sequence[str] | None = None,
    stderr: bool = False,
) -> tuple[bytes, bytes, int]:
    """Runs a command without a shell; returns (stdout, stderr if asked for, exit status).

    stdout is captured (or written to the file `stdout`), stdin is the file `stdin`
    (default: nothing). An exit status not in `ok` raises :class:`CommandError` with
    the end of its stderr; `shown` is the command to name in it (default `argv`).
    """
    err = _stderr_file()
    fin = open(stdin, "rb") if stdin else None
    fout = open(stdout, "wb") if stdout else None
    try:
        p = subprocess.Popen(
            list(argv),
            stdin=fin or subprocess.DEVNULL,
            stdout=fout or subprocess.PIPE,
            stderr=err,
            env=env,
        )
        out = b""
        if p.stdout is not None:
            out = p.stdout.read()
            p.stdout.close()
        rc = p.wait()
    finally:
        for f in (fin, fout):
            if f:
                f.close()
    text = b""
    if stderr or rc not in ok:  # (not read otherwise: µs count in the timed runs)
        err.seek(0)
        text = err.read()
    if rc not in ok:
        msg = text.decode(errors="replace").strip()
        raise CommandError(
            f"`{shlex.join(shown or argv)}` exited with status {rc}"
            + (f": {msg[-400:]}" if msg else "")
        )
    return out, text, rc


def tool_version(argv: Sequence[str], env: dict[str, str] | None = None) -> str:
    """First line of a tool's version output (for the reports): "?" if it fails,
    "not found" if it cannot run."""
    try:
        p = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=30, env=env, check=False
        )
        lines = (p.stdout or p.stderr).strip().splitlines()
        return lines[0] if lines and p.returncode == 0 else "?"
    except (OSError, subprocess.SubprocessError):
        return "not found"


# --------------------------------------------------------------------------- data files


def need_space(directory: Path, need: int, what: str, hint: str = "") -> None:
    """Raises if `directory` has less than `need` bytes free (before generating data)."""
    free = shutil.disk_usage(directory).free
    if free < need:
        raise RuntimeError(
            f"not enough free disk space in {directory} for {what}: "
            f"{free / 2**30:.1f} GiB free, need {need / 2**30:.1f} GiB"
            + (f" ({hint})" if hint else "")
        )


def generated(
    marker: Path,
    want: dict[str, Any],
    make: Callable[[], dict[str, Any]],
    valid: Callable[[dict[str, Any]], bool] = lambda info: True,
) -> dict[str, Any]:
    """Seeded data cached in bench/data: the marker file records what was generated
    (`want`: sizes, seed, generator version, plus what `make` returned); the data is
    generated again by `make()` unless the marker matches `want` and `valid(info)`.
    Returns the marker's contents."""
    try:
        info = json.loads(marker.read_text())
        if {k: info.get(k) for k in want} == want and valid(info):
            return info
    except (OSError, ValueError, KeyError):
        pass
    marker.unlink(missing_ok=True)
    info = {**want, **make()}
    marker.write_text(json.dumps(info) + "\n")
    return info


def generated_file(
    path: Path,
    want: dict[str, Any],
    write: Callable[[Path], dict[str, Any]],
    log: Callable[[str], None],
    what: str,
) -> dict[str, Any]:
    """One seeded data file (see :func:`generated`; marker PATH.ok): `write(tmp)`
    writes it to a temporary name (renamed into place when complete) and returns
    what to record; the byte count is recorded as "bytes" and checked on reuse."""
    path.parent.mkdir(parents=True, exist_ok=True)

    def make() -> dict[str, Any]:
        log(f"generating {path.name} ({what}) ...")
        tmp = path.with_name(path.name + ".partial")
        extra = write(tmp)
        os.replace(tmp, path)
        return {**extra, "bytes": path.stat().st_size}

    return generated(
        path.with_name(path.name + ".ok"),
        want,
        make,
        lambda info: path.stat().st_size == info["bytes"],
    )


def fsync_path(path: Path) -> None:
    """Syncs the file at ``path`` to disk."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fresh_copy(src: Path, dst: Path) -> Path:
    """`dst` as a fresh, fsync'ed copy of `src` (untimed, before every run of a task
    that modifies its file)."""
    shutil.copyfile(src, dst)
    fsync_path(dst)
    return dst


def evict(files: Iterable[Path]) -> None:
    """Evicts files from the page cache: fsync, then posix_fadvise(DONTNEED) (only
    clean pages not mapped by anyone are dropped)."""
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


# --------------------------------------------------------------------------- page cache


class CacheDropper:
    """Evicts data from the page cache before cold runs.

    As root with a writable /proc/sys/vm/drop_caches: sync, then drop the whole
    page cache ("drop_caches"). Otherwise, per data file: fsync, then
    posix_fadvise(DONTNEED) ("posix_fadvise"), which only evicts clean pages not
    mapped by someone else.
    """

    DROP = "/proc/sys/vm/drop_caches"

    def __init__(self) -> None:
        root_ok = os.geteuid() == 0 and os.access(self.DROP, os.W_OK)
        self.method = "drop_caches" if root_ok else "posix_fadvise"

    @property
    def description(self) -> str:
        """How cold runs are made cold, for the report."""
        if self.method == "drop_caches":
            return "`sync` + `echo 3 > /proc/sys/vm/drop_caches` before every cold run (root)"
        return (
            "`fsync` + `posix_fadvise(POSIX_FADV_DONTNEED)` on every data file before "
            "every cold run (not root, or drop_caches not writable)"
        )

    def _drop_all(self) -> None:
        os.sync()
        with open(self.DROP, "w") as f:
            f.write("3\n")

    def drop(self, files: Iterable[Path]) -> None:
        """Evicts ``files`` (or, as root, the whole page cache) before a cold run."""
        if self.method == "drop_caches":
            try:
                self._drop_all()
                return
            except OSError as exc:  # e.g. read-only /proc in a container
                log(f"  drop_caches failed ({exc}); using posix_fadvise from now on")
                self.method = "posix_fadvise"
        evict(files)


def prime(files: Iterable[Path]) -> int:
    """Reads files once (into one reusable 8 MiB buffer) so their pages are in the page
    cache; returns the bytes read."""
    buf = bytearray(8 << 20)
    total = 0
    for path in files:
        with open(path, "rb", buffering=0) as f:
            while n := f.readinto(buf):
                total += n
    return total


# --------------------------------------------------------------------------- machine


def machine_info(data_dir: Path) -> dict[str, Any]:
    """The machine, software and file system the run is on, for the report."""
    info: dict[str, Any] = {}
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith(("model name", "Model")):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    info["cpu"] = cpu
    info["cores"] = os.cpu_count()
    info["cores_usable"] = usable_cores()
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                kib = int(line.split()[1])
                info["ram"] = f"{kib / (1 << 20):.1f} GiB"
                break
    except (OSError, ValueError):
        pass
    info["kernel"] = f"{platform.system()} {platform.release()}"
    info["python"] = f"{platform.python_implementation()} {platform.python_version()}"
    info["filesystem"] = _filesystem_of(data_dir)
    info["git"] = _git_revision()
    info["date"] = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    return info


def _filesystem_of(path: Path) -> str:
    try:
        target = str(path.resolve())
        best = ("", "?", "?")
        for line in Path("/proc/mounts").read_text().splitlines():
            dev, mnt, fstype = line.split()[:3]
            if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(
                best[0]
            ):
                best = (mnt, fstype, dev)
        return f"{best[1]} on {best[2]} (mounted at {best[0]})"
    except (OSError, ValueError):
        return "?"


def _git(*args: str) -> str:
    """``git ARGS``' output in the repository, stripped (raises OSError or
    SubprocessError where git cannot run or does not answer in time)."""
    return subprocess.run(
        ["git", *args], cwd=REPO_DIR, capture_output=True, text=True, timeout=10, check=False
    ).stdout.strip()


def _git_revision() -> str:
    try:
        rev = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--untracked-files=no")
        return (rev + ("+dirty" if dirty else "")) if rev else "?"
    except (OSError, subprocess.SubprocessError):
        return "?"


# --------------------------------------------------------------------------- runner


@dataclass
class Cell:
    """Measurements of one (size, task, contender, cache)."""

    size: str
    task: str
    contender: str
    cache: str
    times: list[float] = field(default_factory=list)
    status: str = "ok"  # ok | n/a | error | wrong
    reason: str = ""
    metrics: dict[str, list[float]] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        """The cell as it is written to the suite's JSON."""
        d: dict[str, Any] = {
            "size": self.size,
            "task": self.task,
            "contender": self.contender,
            "cache": self.cache,
            "status": self.status,
            "reason": self.reason,
            "times": self.times,
        }
        if self.times:
            d.update(median=statistics.median(self.times), min=min(self.times), max=max(self.times))
        if self.metrics and self.status == "ok":
            d["metrics"] = {
                k: {"values": v, "max": max(v), "median": statistics.median(v)}
                for k, v in self.metrics.items()
                if v
            }
        return d


@dataclass
class RunOptions:
    """What one ``python -m bench`` run measures: sizes, tasks, contenders, repeats, caches."""

    quick: bool = False
    repeat: int | None = None
    sizes: list[str] | None = None
    tasks: list[str] | None = None
    contenders: list[str] | None = None
    caches: tuple[str, ...] = CACHES
    data_dir: Path = DATA_DIR
    seed: int = 20240601

    @property
    def default_repeats(self) -> int:
        """Timed runs per cell: ``--repeat``, else 3 quick or 5 full."""
        return self.repeat or (3 if self.quick else 5)


class _TaskRun:
    """Runs one task at one size for all contenders, verifying every answer."""

    def __init__(
        self,
        suite: Suite,
        task: Task,
        dataset: Dataset,
        contenders: list[Contender],
        cells: dict[tuple[str, str], Cell],
        dropper: CacheDropper,
        rng: random.Random,
    ) -> None:
        self.suite, self.task, self.dataset = suite, task, dataset
        self.cells = cells
        self.dropper = dropper
        self.rng = rng
        self.live = list(contenders)  # still running (not failed / unavailable)
        self.ref_name = suite.task_reference(task)
        self.metrics: dict[str, float] = {}  # of the last run
        self.ref_value: Any = None
        self.have_ref = False
        self.pending: list[tuple[Contender, str, Any]] = []  # awaiting the reference's answer

    # a contender that stops running marks all its (not yet measured) caches
    def _retire(self, c: Contender, status: str, reason: str) -> None:
        for cache in CACHES:
            cell = self.cells.get((c.name, cache))
            if cell is None or (cell.status == "n/a" and not cell.times):
                continue  # not measured in this run / for this task
            cell.times.clear()  # a cell is either ok with times, or not ok without
            cell.metrics.clear()
            cell.status, cell.reason = status, reason
        if c in self.live:
            self.live.remove(c)
        if c.name == self.ref_name and not self.have_ref:
            for other in list(self.live):
                self._retire(
                    other,
                    "error",
                    f"reference contender {c.name} failed "
                    "before giving an answer: nothing to verify against",
                )
        level = "n/a" if status == "n/a" else "FAILED"
        log(f"    {level}: {c.name} [{self.task.name} @ {self.dataset.size.label}]: {reason}")

    def _verify(self, c: Contender, cache: str, value: Any) -> bool:
        if self.have_ref:
            return self._compare(c, cache, value)
        if c.name != self.ref_name:  # reference not run yet (warm-up "prime"): later
            self.pending.append((c, cache, value))
            return True
        self.ref_value, self.have_ref = value, True
        pending, self.pending = self.pending, []
        for other, pcache, pvalue in pending:
            if other in self.live:
                self._compare(other, pcache, pvalue)
        return True

    def _compare(self, c: Contender, cache: str, value: Any) -> bool:
        if value == self.ref_value:
            return True
        what = (
            "is not stable across runs"
            if c.name == self.ref_name
            else f"differs from {self.ref_name}"
        )
        self._retire(
            c,
            "wrong",
            f"WRONG ANSWER ({cache} run): {short(value)} {what} (expected {short(self.ref_value)})",
        )
        return False

    def _once(self, c: Contender, cache: str, timed: bool) -> float | None:
        """One run; returns the time, or None if the contender dropped out."""
        task, ds = self.task, self.dataset
        path = task.setup(ds) if task.setup else ds.path
        if cache == "cold" and timed:
            self.dropper.drop(dict.fromkeys([*ds.files, path]))
        fn = c.resolve()[task.name]
        result: Any = None
        gc.disable()  # as timeit does; results are freed by refcounting, no gc.collect()
        # per run (it would also evict the CPU caches before µs-scale runs)
        try:
            t0 = time.perf_counter()
            result = fn(path)
            elapsed = time.perf_counter() - t0
        except Unavailable as exc:
            gc.enable()
            self._retire(c, "n/a", str(exc))
            return None
        except Exception as exc:  # noqa: BLE001 - a contender failing is a result
            gc.enable()
            self._retire(c, "error", f"{type(exc).__name__}: {exc}")
            return None
        gc.enable()
        self.metrics = {}
        if isinstance(result, Measured):
            self.metrics = dict(result.metrics)
            if result.seconds is not None:
                elapsed = result.seconds
            result = result.value
        try:
            value = task.check(path, result) if task.check else task.digest(result)
        except Exception as exc:  # noqa: BLE001
            self._retire(c, "error", f"checking the result raised {type(exc).__name__}: {exc}")
            return None
        del result
        if not self._verify(c, cache if timed else "warm-up", value):
            return None
        return elapsed

    def _order(self) -> list[Contender]:
        order = list(self.live)
        self.rng.shuffle(order)
        return order

    def run(self, repeats: int, caches: Sequence[str]) -> None:
        task, size = self.task, self.dataset.size
        ref = next((c for c in self.live if c.name == self.ref_name), None)
        if ref is None:
            raise RuntimeError(
                f"reference contender {self.ref_name!r} is not available "
                f"for task {task.name!r}: nothing to verify against"
            )
        for cache in caches:
            if cache == "warm":
                if task.warmup_for(size) == "run":
                    # reference first, so everybody's warm-up is already verified
                    for c in [ref] + [x for x in self._order() if x is not ref]:
                        if c in self.live:
                            self._once(c, "warm", timed=False)
                else:
                    prime(dict.fromkeys([*self.dataset.files]))
            for rnd in range(repeats):
                for c in self._order():
                    if c not in self.live:
                        continue
                    elapsed = self._once(c, cache, timed=True)
                    if elapsed is not None:
                        cell = self.cells[(c.name, cache)]
                        cell.times.append(elapsed)
                        for k, v in self.metrics.items():
                            cell.metrics.setdefault(k, []).append(v)
                log(
                    f"    {cache} round {rnd + 1}/{repeats}: "
                    + ", ".join(
                        f"{c.name} {fmt_seconds(self.cells[(c.name, cache)].times[-1])}"
                        for c in self.live
                        if self.cells[(c.name, cache)].times
                    )
                )
        for c, _cache, _value in self.pending:
            if c in self.live:
                self._retire(c, "error", "reference produced no answer to verify against")
        self.pending = []


def _select(
    suite: str, what: str, items: list, wanted: Sequence[str] | None, name: Callable[[Any], str]
) -> list:
    """The items named in `wanted` (all when None); unknown names end the run."""
    if not wanted:
        return items
    unknown = set(wanted) - {name(i) for i in items}
    if unknown:
        raise SystemExit(
            f"{suite}: unknown {what}(s) {sorted(unknown)}; have {[name(i) for i in items]}"
        )
    return [i for i in items if name(i) in wanted]


def run_suite(suite: Suite, opts: RunOptions) -> dict[str, Any]:
    """Runs a suite; returns the JSON-able results document."""
    started = time.perf_counter()
    dropper = CacheDropper()
    sizes = _select(suite.name, "size", suite.sizes(opts.quick), opts.sizes, lambda s: s.label)
    tasks = _select(suite.name, "task", list(suite.tasks), opts.tasks, lambda t: t.name)
    contenders = list(suite.contenders)
    if opts.contenders:
        keep = set(opts.contenders) | {suite.reference_name, suite.baseline}
        keep |= {suite.task_baseline(t) for t in tasks} | {suite.task_reference(t) for t in tasks}
        contenders = [c for c in contenders if c.name in keep]

    # which contenders can run at all
    unavailable: dict[str, str] = {}
    for c in contenders:
        try:
            reason = c.available()
        except Exception as exc:  # noqa: BLE001
            reason = f"availability check raised {type(exc).__name__}: {exc}"
        if not reason:
            try:
                c.resolve()
            except Unavailable as exc:
                reason = str(exc)
            except Exception as exc:  # noqa: BLE001
                reason = f"setting up raised {type(exc).__name__}: {exc}"
        if reason:
            unavailable[c.name] = reason
            log(f"  n/a: {c.name}: {reason}")

    rng = random.Random(opts.seed)
    results: list[dict[str, Any]] = []
    size_docs: list[dict[str, Any]] = []
    repeats_doc: dict[str, dict[str, int]] = {}
    for size in sizes:
        log(f"[{suite.name}] size {size.label} ({size.human})")
        dataset = suite.prepare(size, opts.data_dir, log)
        size_docs.append(
            {
                "label": size.label,
                "nbytes": size.nbytes,
                "human": size.human,
                "files": [
                    str(p.relative_to(REPO_DIR)) if p.is_relative_to(REPO_DIR) else str(p)
                    for p in dataset.files
                ],
                **dataset.info,
            }
        )
        for task in tasks:
            repeats = task.repeats_for(size, opts.default_repeats)
            repeats_doc.setdefault(task.name, {})[size.label] = repeats
            log(f"  {task.name} @ {size.label}: {repeats} timed run(s) per cache state")
            cells = {
                (c.name, cache): Cell(size.label, task.name, c.name, cache)
                for c in contenders
                for cache in CACHES
            }
            caches = tuple(c for c in opts.caches if task.caches is None or c in task.caches)
            for (_name, cache), cell in cells.items():
                if cache not in opts.caches:
                    cell.status, cell.reason = "n/a", "cache state not measured in this run"
                elif cache not in caches:
                    cell.status, cell.reason = (
                        "n/a",
                        "cache state not measured (not meaningful for this task)",
                    )
            if (task.sizes is not None and size.label not in task.sizes) or not caches:
                for cell in cells.values():
                    if cell.status != "n/a":
                        cell.status, cell.reason = "n/a", "not measured at this size"
                results.extend(cell.as_dict() for cell in cells.values())
                continue
            live: list[Contender] = []
            for c in contenders:
                if c.name in unavailable:
                    for cache in caches:
                        cells[(c.name, cache)].status = "n/a"
                        cells[(c.name, cache)].reason = unavailable[c.name]
                elif task.name not in c.resolve():
                    for cache in caches:
                        cells[(c.name, cache)].status = "n/a"
                        cells[(c.name, cache)].reason = "no implementation of this task"
                else:
                    live.append(c)
            runner = _TaskRun(suite, task, dataset, live, cells, dropper, rng)
            gc.collect()
            t_task = time.perf_counter()
            try:
                runner.run(repeats, caches)
            finally:
                if task.teardown:
                    task.teardown(dataset)
            log(f"  {task.name} @ {size.label}: done in {time.perf_counter() - t_task:.1f} s")
            results.extend(cell.as_dict() for cell in cells.values())

    versions = {"numpy": module_version("numpy"), "matplotlib": package_version("matplotlib")}
    versions.update(suite.versions())
    doc: dict[str, Any] = {
        "suite": suite.name,
        "title": suite.title,
        "description": suite.description,
        "notes": list(suite.notes),
        "timing": suite.timing,
        "mode": "quick" if opts.quick else "full",
        "baseline": suite.baseline,
        "reference": suite.reference_name,
        "machine": machine_info(opts.data_dir),
        "versions": versions,
        "cache_drop": {"method": dropper.method, "description": dropper.description}
        if "cold" in opts.caches
        else {"method": "none", "description": "cold cache not measured"},
        "default_repeats": opts.default_repeats,
        "repeats": repeats_doc,
        "seed": opts.seed,
        "sizes": size_docs,
        "tasks": [
            {
                "name": t.name,
                "title": t.title,
                "note": t.note,
                "baseline": suite.task_baseline(t),
                "reference": suite.task_reference(t),
                "throughput": t.throughput,
                "warmup": {
                    s["label"]: t.warmup_for(Size(s["label"], s["nbytes"])) for s in size_docs
                },
            }
            for t in tasks
        ],
        "contenders": [
            {
                "name": c.name,
                "note": c.note,
                "commands": dict(c.commands),
                "unavailable": unavailable.get(c.name, ""),
            }
            for c in contenders
        ],
        "results": results,
        "elapsed_s": round(time.perf_counter() - started, 1),
        "layout": suite.layout,
        "metrics": dict(suite.metrics),
        "limit": list(suite.limit) if suite.limit else None,
        "headline_spec": dict(suite.headline) if suite.headline else None,
    }
    doc["targets"] = suite.targets(doc)
    return doc


def failures(doc: dict[str, Any]) -> list[dict[str, Any]]:
    """Cells that make a suite fail: wrong answers and errors (n/a is not a failure)."""
    return [r for r in doc["results"] if r["status"] in ("wrong", "error")]


# --------------------------------------------------------------------------- formatting


def _fmt(x: float, digits: int, zero: str) -> str:
    """Whole numbers from 100, one decimal from 10, two from 1; below 1, `digits`
    significant digits (at most 9 decimals)."""
    if x >= 100:
        return f"{x:.0f}"
    if x >= 10:
        return f"{x:.1f}"
    if x >= 1:
        return f"{x:.2f}"
    if x <= 0:
        return zero
    import math

    decimals = min(9, -math.floor(math.log10(x)) + digits - 1)
    return f"{x:.{decimals}f}"


def fmt_seconds(t: float) -> str:
    """Seconds with 3 significant digits, for the tables."""
    return _fmt(t, 3, "0")


def fmt_ratio(r: float) -> str:
    """A ratio with 2 decimals, for the tables."""
    return _fmt(r, 2, "0.00")

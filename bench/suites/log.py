"""Suite `log`: mmapkit's commit log against the write-ahead logs of the field.

Workloads (the suite's "sizes"): the article's 100,000 entries of 50 random bytes,
1,000,000 entries of 50 bytes and 100,000 entries of 4 KiB, always appended 10 per
batch (one append call per batch) and read back 10 at a time by index. Tasks:

1. ``append``         append every entry, no sync (the OS writes back when it likes)
2. ``read``           reopen the log (a fresh process) and read everything back 10 at
                      a time by index, warm and cold (log files evicted) page cache
3. ``append_sync``    a fixed number of batches, each durable (fdatasync or the log's
                      equivalent) before its append returns
4. ``append_sync_4``  the same batches from 4 concurrent appenders: a log with group
                      commit needs fewer syncs than batches (the ``syncs`` column)

Contenders: mmapkit through its Rust API (a driver binary) and its Python API
(in-process, ``mmapkit.CommitLog``), the standard-I/O baseline (a pwrite/pread log with
mmapkit's framing, the ratios' ◆), tikv's raft-engine and the ``commitlog`` crate
(crates.io), tidwall/wal and etcd's wal (Go modules), and, in the sync tasks, the
disk's limit: a loop of 4 KiB pwrite + fdatasync, one per batch, measured in the same
run. The drivers live in bench/peers/ (``make bench-peers``) and share one protocol
(bench/peers/rust/src/lib.rs); each times only the operation itself (not its start-up
or the generation of its input) and reports checksums of everything it read back,
which the suite checks against the data it generates itself on every run.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..contenders import mmapkit_module
from ..harness import REPO_DIR, CommandError, above, capped, evict, run_command, tool_version
from ..suite import Contender, Dataset, Measured, Size, Suite, Task, Unavailable

BATCH = 10
SEED = 20240601
SYNC_BATCHES = 500  # batches per sync run (full); --quick: SYNC_BATCHES_QUICK
SYNC_BATCHES_QUICK = 200
APPENDERS = 4
SEGMENT = 64 << 20
LARGE = 64 << 20  # workloads above this get 3 timed runs per cell, not 5

PEERS = REPO_DIR / "bench" / "peers"
RUST_BIN = PEERS / "rust" / "target" / "release"
GO_BIN = PEERS / "go" / "bin"
BUILD_HINT = "make bench-peers"


@dataclass(frozen=True)
class Workload:
    """One log workload: entry count, entry size, and whether the sync tasks run on it."""

    label: str
    entries: int
    size: int
    sync: bool = True  # also run the sync tasks on it

    @property
    def nbytes(self) -> int:
        """The bytes appended in all."""
        return self.entries * self.size


WORKLOADS = {
    "100k-50B": Workload("100k-50B", 100_000, 50),
    "1M-50B": Workload("1M-50B", 1_000_000, 50, sync=False),  # its sync runs = 100k-50B's
    "100k-4KiB": Workload("100k-4KiB", 100_000, 4096),
}


# --------------------------------------------------------------------------- data


def generate(seed: int, nbytes: int) -> bytes:
    """The entries' bytes (entry i = bytes [i*S, (i+1)*S)): little-endian u64 words,
    word k = splitmix64(seed + (k+1) * golden), as every driver generates them."""
    k = np.arange(1, (nbytes + 7) // 8 + 1, dtype=np.uint64)
    z = np.uint64(seed) + k * np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    z ^= z >> np.uint64(31)
    return z.astype("<u8").tobytes()[:nbytes]


def checksums(data: bytes | memoryview, size: int) -> dict[str, int]:
    """What a driver reports for reading `data` back: CRC-32 in index order and the
    sum of the CRC-32s of each batch (order-free across batches)."""
    view = memoryview(data)
    step = size * BATCH
    return {
        "entries": len(view) // size,
        "bytes": len(view),
        "crc": zlib.crc32(view),
        "batch_sum": sum(zlib.crc32(view[p : p + step]) for p in range(0, len(view), step)),
    }


# --------------------------------------------------------------------------- drivers


class DriverError(CommandError):
    """A log driver failed (its output is in the message)."""


def _run_driver(argv: list[str]) -> dict[str, Any]:
    """Runs a driver (see bench/peers/rust/src/lib.rs); returns the JSON it printed."""
    out, _err, _rc = run_command(argv)
    try:
        return json.loads(out.decode().strip().splitlines()[-1])
    except (ValueError, IndexError) as exc:
        raise DriverError(f"`{' '.join(argv)}` printed no JSON: {out[-200:]!r}") from exc


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _fresh(path: Path) -> Path:
    shutil.rmtree(path, ignore_errors=True)
    return path


# --------------------------------------------------------------------------- suite


class LogSuite(Suite):
    """The ``log`` suite: mmapkit's commit log against raft-engine, commitlog, tidwall/wal and
    etcd's wal.
    """

    name = "log"
    title = "mmapkit's commit log vs raft-engine, commitlog, tidwall/wal, etcd wal"
    description = (
        "mmapkit's segmented, checksummed, memory-mapped commit log (`mmapkit::log`, "
        "Rust API and Python API) against the write-ahead logs of the field — tikv "
        "`raft-engine` and `commitlog` (crates.io), `tidwall/wal` and etcd's `wal` (Go "
        "modules) — and a standard-I/O baseline (◆: a pwrite/pread log with mmapkit's "
        "framing: length + CRC32C per entry, a commit record per batch, one pwrite per "
        "batch, fdatasync per batch in sync mode, the index in memory). The article's "
        "workload (100,000 entries of 50 random bytes, 10 per batch, read back 10 at a "
        "time by index) plus 1 M × 50 B and 100 K × 4 KiB; without sync, with a sync per "
        "batch, and with 4 concurrent appenders (group commit). Every contender's "
        "read-back data is checked against the generated data on every run. In the sync "
        "tasks, `disk limit` is a loop of 4 KiB pwrite + fdatasync, one per batch, "
        "measured in the same run: no log that syncs every batch on its own can be faster "
        "(with concurrent appenders, group commit can: one sync for several batches)."
    )
    baseline = "baseline"
    layout = "rows"
    headline = {
        "capability": "write-ahead log",
        "label": "append 100K × 50 B, no sync",
        "task": "append",
        "contender": "mmapkit",
        "peers": ["raft-engine", "commitlog", "tidwall/wal", "etcd/wal"],
        "sizes": ["100k-50B"],
    }
    timing = (
        "time of the operation as the contender measured it (`Instant`/`time.Now`/"
        "`perf_counter` around the appends or the read loop; see the notes)"
    )
    metrics = {"syncs": {"title": "syncs", "unit": ""}, "open_ms": {"title": "open ms", "unit": ""}}

    def __init__(
        self, workloads: dict[str, Workload] | None = None, sync_batches: int | None = None
    ) -> None:
        """`workloads`/`sync_batches`: other sizes than the issue's (the smoke test)."""
        self._workloads = workloads or WORKLOADS
        self._sync_batches = sync_batches
        self._quick = False
        self._expected: dict[tuple[str, int], dict[str, int]] = {}
        self._py_data: dict[str, list[list[bytes]]] = {}
        self._runs = 0
        self._datasets: dict[str, Dataset] = {}
        self.tasks = self._tasks()
        self.contenders = self._contenders()

    # ----------------------------------------------------------------- sizes and data

    def sizes(self, quick: bool) -> list[Size]:
        self._quick = quick
        labels = list(self._workloads)
        if quick and self._workloads is WORKLOADS:
            labels = ["100k-50B"]
        return [Size(w, self._workloads[w].nbytes) for w in labels]

    @property
    def sync_batches(self) -> int:
        """Batches per synced run (fewer with ``--quick``, unless set)."""
        if self._sync_batches:
            return self._sync_batches
        return SYNC_BATCHES_QUICK if self._quick else SYNC_BATCHES

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        w = self._workloads[size.label]
        root = _fresh(data_dir / "log" / w.label)
        root.mkdir(parents=True)
        t = time.perf_counter()
        data = generate(SEED, w.nbytes)
        sync_entries = self.sync_batches * BATCH
        if w.sync and sync_entries > w.entries:
            raise ValueError(
                f"{w.label}: {self.sync_batches} sync batches of {BATCH} is more "
                f"than its {w.entries} entries"
            )
        self._expected[(w.label, w.entries)] = checksums(data, w.size)
        self._expected[(w.label, sync_entries)] = checksums(
            memoryview(data)[: sync_entries * w.size], w.size
        )
        # the Python contender's input: one list of bytes per batch (built once, untimed)
        view = memoryview(data)
        entries = [bytes(view[i : i + w.size]) for i in range(0, w.nbytes, w.size)]
        self._py_data = {w.label: [entries[j : j + BATCH] for j in range(0, w.entries, BATCH)]}
        del entries, view, data
        info = {
            "entries": w.entries,
            "entry_bytes": w.size,
            "batch": BATCH,
            "sync_batches": self.sync_batches,
            "appenders": APPENDERS,
            "seed": SEED,
        }
        marker = root / "workload.json"
        marker.write_text(json.dumps({"label": w.label, **info}) + "\n")
        log(
            f"  {w.label}: {w.entries:,} entries of {w.size} B, {BATCH} per batch "
            f"(data and checksums in {time.perf_counter() - t:.1f} s)"
        )
        ds = Dataset(size, marker, [marker], info)
        self._datasets[w.label] = ds
        return ds

    def _workload(self, path: Path) -> Workload:
        return self._workloads[path.parent.name]

    def _rundir(self, path: Path, who: str) -> Path:
        self._runs += 1
        slug = who.replace("/", "-").replace(" ", "")
        return _fresh(path.parent / "runs" / f"{slug}-{self._runs}")

    # ----------------------------------------------------------------- verification

    def _check(self, kind: str) -> Callable[[Path, Any], Any]:
        """Verifies a result against the generated data; every correct result maps to
        the same value (what the harness compares with the reference's)."""

        def check(path: Path, r: dict[str, Any]) -> Any:
            w = self._workload(path)
            if r.get("driver") == "probe":  # the disk limit writes no log
                ok = r["syncs"] == r["batches"] == self.sync_batches
                return "verified" if ok else ("probe", r["syncs"], r["batches"])
            if r.get("driver") == "null":  # the driver's loop alone: nothing to read back
                ok = r["entries"] == w.entries and r["batches"] * BATCH == w.entries
                return "verified" if ok else ("null", r["entries"], r["batches"])
            n = self.sync_batches * BATCH if kind.startswith("sync") else w.entries
            want = self._expected[(w.label, n)]
            keys = (
                ("entries", "bytes", "batch_sum")
                if kind == "sync4"
                else ("entries", "bytes", "crc", "batch_sum")
            )
            got = {k: r.get(k) for k in keys}
            return "verified" if got == {k: want[k] for k in keys} else got

        return check

    # ----------------------------------------------------------------- tasks

    def _tasks(self) -> tuple[Task, ...]:
        def teardown(ds: Dataset) -> None:
            shutil.rmtree(ds.path.parent / "runs", ignore_errors=True)
            shutil.rmtree(ds.path.parent / "read", ignore_errors=True)
            ds.files[:] = [ds.path]

        # 400 MB per run and contender: 3 runs keep a full run within ~10 minutes
        fewer = capped(3, above(LARGE))

        # 1M x 50 B would only repeat 100k x 50 B's sync runs
        sync_sizes = tuple(label for label, w in self._workloads.items() if w.sync)
        return (
            Task(
                "append",
                "append, no sync (10 per batch)",
                caches=("warm",),
                repeats=fewer,
                check=self._check("append"),
                teardown=teardown,
                note="every entry, one append call per batch of 10, into a fresh log in an "
                "empty directory; timed: opening (creating) the log and all the "
                "appends, no sync (the OS writes back later; nobody is asked to "
                "close or sync). Then, untimed, the driver reads everything back "
                "and the suite checks the CRC-32 of all entries in index order. A "
                "write into a fresh log has no meaningful cold-cache state.",
            ),
            Task(
                "read",
                "read back 10 at a time by index",
                check=self._check("read"),
                repeats=fewer,
                teardown=teardown,
                note="a log written (untimed, once per contender, no sync) by the same "
                "contender is opened by a fresh process (`open ms`: the log's "
                "recovery, not in the time) and read back 10 entries at a time by "
                "index, every entry's bytes copied into one output buffer (what a "
                "Raft leader does when it builds a message; mmapkit's reads are "
                "zero-copy slices, the others copy already), its pages touched "
                "before the clock starts (the Rust and Go drivers: a fresh buffer's "
                "first-touch faults were half of reading 1 M x 50 B, and no log's "
                "cost; the Python API's list of bytes has no such buffer); "
                "checked: CRC-32 of "
                "all entries in index order. Cold: the page cache is dropped before "
                "every timed run. etcd's WAL has no random access: its time is "
                "Open + ReadAll (the replay etcd does at start) plus the copying.",
            ),
            Task(
                "open_read",
                "open, then read back (a restart)",
                check=self._check("read"),
                repeats=fewer,
                teardown=teardown,
                note="the `read` task's runs with the log's opening (`open ms`) inside "
                "the time: what a process that restarts pays to have every entry "
                "back. The logs differ in when they read the disk: the baseline "
                "rebuilds its index with a checksummed scan of every byte at open, "
                "so after a cache drop its timed reads find the data already "
                "cached (see each peer's `open ms` for theirs); mmapkit maps the "
                "segments, scans only the tail at open and verifies a sealed "
                "segment on its first read, so its cold reads pay the disk and "
                "the checksums. Here both halves are in the time.",
            ),
            Task(
                "append_sync",
                "append, fdatasync per batch",
                caches=("warm",),
                sizes=sync_sizes,
                throughput=False,
                check=self._check("sync"),
                repeats=fewer,
                teardown=teardown,
                note="a fixed number of batches of 10 (see the workload's `sync_batches`: "
                "500 in a full run, 200 with --quick; the whole 100 K entries would "
                "be 10,000 fdatasyncs per run), each durable before its append "
                "returns; timed like `append`. `disk limit`: one 4 KiB pwrite + "
                "fdatasync per batch into a fresh file. Only at 100 K × 50 B and "
                "100 K × 4 KiB (1 M × 50 B would repeat the first).",
            ),
            Task(
                "append_sync_4",
                f"{APPENDERS} concurrent appenders, fdatasync per batch",
                caches=("warm",),
                sizes=sync_sizes,
                throughput=False,
                repeats=fewer,
                check=self._check("sync4"),
                teardown=teardown,
                note=f"the same batches from {APPENDERS} threads (goroutines), appender t "
                f"appending batches t, t+{APPENDERS}, ...; a log with group commit "
                "(mmapkit, raft-engine) makes one sync serve several appenders, the "
                "others take a lock around write + sync. `syncs` = the syncs counted "
                "(mmapkit's `sync_count()`, raft-engine's own sync histogram, the "
                "drivers' calls for the others). Checked: every batch read back "
                "whole and in order (the sum of the batches' CRC-32s; their order "
                "is the appenders' race). raft-engine: one Raft group per appender "
                "(a group's entries must be appended in index order).",
            ),
        )

    # ----------------------------------------------------------------- contenders

    def _driver_args(self, path: Path, sync: bool, appenders: int = 1) -> list[str]:
        w = self._workload(path)
        n = self.sync_batches * BATCH if sync else w.entries
        return [
            "--entries",
            str(n),
            "--size",
            str(w.size),
            "--batch",
            str(BATCH),
            "--sync",
            "batch" if sync else "none",
            "--appenders",
            str(appenders),
            "--seed",
            str(SEED),
        ]

    def _read_log(self, path: Path, who: str, create: Callable[[Path], Any]) -> Path:
        """The contender's log for the read task, written once (untimed, verified)."""
        d = path.parent / "read" / who.replace("/", "-").replace(" ", "")
        done = d / ".bench-complete"
        if not done.exists():
            _fresh(d)
            r = create(d)
            got = self._check("read")(path, r)
            if got != "verified":
                raise DriverError(f"writing the log to read gave {got}")
            done.touch()
            files = [p for p in sorted(d.rglob("*")) if p.is_file() and p != done]
            evict(files)  # not left in the page cache by writing it (--cache cold)
            # evicted before cold runs too when the cache is dropped file by file
            self._datasets[path.parent.name].files.extend(files)
        return d

    def _driver(self, exe: Path, appenders_ok: bool = True) -> Callable[[], dict]:
        suite = self

        def make() -> dict[str, Callable[[Path], Any]]:
            if not exe.is_file():
                raise Unavailable(f"{exe.name} not built ({BUILD_HINT})")
            who = exe.name

            def append(sync: bool, k: int) -> Callable[[Path], Any]:
                def run(path: Path) -> Measured:
                    d = suite._rundir(path, who)
                    try:
                        r = _run_driver(
                            [
                                str(exe),
                                "append",
                                "--dir",
                                str(d),
                                *suite._driver_args(path, sync, k),
                            ]
                        )
                    finally:
                        shutil.rmtree(d, ignore_errors=True)
                    return Measured(r, {"syncs": r["syncs"]}, seconds=r["append_s"])

                return run

            def read(with_open: bool) -> Callable[[Path], Any]:
                def run(path: Path) -> Measured:
                    d = suite._read_log(
                        path,
                        who,
                        lambda d: _run_driver(
                            [str(exe), "append", "--dir", str(d), *suite._driver_args(path, False)]
                        ),
                    )
                    r = _run_driver(
                        [str(exe), "read", "--dir", str(d), *suite._driver_args(path, False)]
                    )
                    seconds = r["read_s"] + (r["open_s"] if with_open else 0.0)
                    return Measured(r, {"open_ms": round(r["open_s"] * 1e3, 2)}, seconds=seconds)

                return run

            impls = {
                "append": append(False, 1),
                "read": read(False),
                "open_read": read(True),
                "append_sync": append(True, 1),
            }
            if appenders_ok:
                impls["append_sync_4"] = append(True, APPENDERS)
            return impls

        return make

    def _scratch_run(
        self, exe_name: str, tag: str, args: Callable[[Path, Path], list[str]]
    ) -> Callable[[Path], Measured]:
        """One timed driver call (`args(scratch_dir, data_path)`) in a scratch directory
        of its own, removed afterwards."""
        exe = RUST_BIN / exe_name
        if not exe.is_file():
            raise Unavailable(f"{exe.name} not built ({BUILD_HINT})")
        suite = self

        def run(path: Path) -> Measured:
            d = suite._rundir(path, tag)
            try:
                r = _run_driver([str(exe), *args(d, path)])
            finally:
                shutil.rmtree(d, ignore_errors=True)
            return Measured(r, {"syncs": r["syncs"]}, seconds=r["append_s"])

        return run

    def _probe(self) -> dict[str, Callable[[Path], Any]]:
        run = self._scratch_run(
            "log-baseline",
            "probe",
            lambda d, _path: ["probe", "--dir", str(d), "--batches", str(self.sync_batches)],
        )
        return {"append_sync": run, "append_sync_4": run}

    def _null(self) -> dict[str, Callable[[Path], Any]]:
        """The drivers' own cost: log-mmapkit's loop, batches built the same way, no log."""
        run = self._scratch_run(
            "log-null",
            "null",
            lambda d, path: ["append", "--dir", str(d), *self._driver_args(path, False)],
        )
        return {"append": run}

    # ---- mmapkit's Python API, in-process

    def _python(self) -> dict[str, Callable[[Path], Any]]:
        mmapkit = mmapkit_module()
        if not hasattr(mmapkit, "CommitLog"):
            raise Unavailable("this mmapkit has no CommitLog")
        CommitLog = mmapkit.CommitLog
        suite = self

        def read_all(log: Any, n: int) -> tuple[list[bytes], float]:
            out: list[bytes] = []
            t = time.perf_counter()
            for lo in range(1, n + 1, BATCH):
                out.extend(log.read(lo, lo + BATCH))
            return out, time.perf_counter() - t

        def result(out: list[bytes], w: Workload, extra: dict[str, Any]) -> dict[str, Any]:
            if any(len(e) != w.size for e in out):
                raise DriverError("an entry read back has the wrong length")
            return {**checksums(b"".join(out), w.size), **extra}

        def write(path: Path, d: Path, sync: bool, k: int) -> tuple[dict[str, Any], float]:
            w = suite._workload(path)
            batches = suite._py_data[w.label]
            if sync:
                batches = batches[: suite.sync_batches]
            t = time.perf_counter()
            log = CommitLog(str(d), segment_size=SEGMENT, sync="batch" if sync else "never")
            before = log.sync_count()
            if k == 1:
                for b in batches:
                    log.append(b)
            else:
                errors: list[BaseException] = []

                def appender(t: int) -> None:
                    try:
                        for b in batches[t::k]:
                            log.append(b)
                    except BaseException as exc:  # noqa: BLE001 - reported below
                        errors.append(exc)

                threads = [threading.Thread(target=appender, args=(t,)) for t in range(k)]
                for th in threads:
                    th.start()
                for th in threads:
                    th.join()
                if errors:
                    raise errors[0]
            elapsed = time.perf_counter() - t
            syncs = log.sync_count() - before
            out, _ = read_all(log, len(batches) * BATCH)
            r = result(out, w, {"syncs": syncs, "batches": len(batches)})
            log.close()
            return r, elapsed

        def append(sync: bool, k: int) -> Callable[[Path], Any]:
            def run(path: Path) -> Measured:
                d = suite._rundir(path, "python")
                try:
                    r, elapsed = write(path, d, sync, k)
                finally:
                    shutil.rmtree(d, ignore_errors=True)
                return Measured(r, {"syncs": r["syncs"]}, seconds=elapsed)

            return run

        def read(with_open: bool) -> Callable[[Path], Any]:
            def run(path: Path) -> Measured:
                w = suite._workload(path)
                d = suite._read_log(path, "python", lambda d: write(path, d, False, 1)[0])
                t = time.perf_counter()
                log = CommitLog(str(d), segment_size=SEGMENT, sync="never")
                opened = time.perf_counter() - t
                out, elapsed = read_all(log, w.entries)
                r = result(out, w, {})
                log.close()
                seconds = elapsed + (opened if with_open else 0.0)
                return Measured(r, {"open_ms": round(opened * 1e3, 2)}, seconds=seconds)

            return run

        return {
            "append": append(False, 1),
            "read": read(False),
            "open_read": read(True),
            "append_sync": append(True, 1),
            "append_sync_4": append(True, APPENDERS),
        }

    def _contenders(self) -> tuple[Contender, ...]:
        def cmds(exe: str) -> dict[str, str]:
            common = "--entries N --size S --batch 10"
            return {
                "append": f"{exe} append --dir D {common} --sync none",
                "read": f"{exe} read --dir D {common}",
                "open_read": f"{exe} read --dir D {common}  # open_s + read_s",
                "append_sync": f"{exe} append --dir D {common} --sync batch",
                "append_sync_4": f"{exe} append --dir D {common} --sync batch "
                f"--appenders {APPENDERS}",
            }

        def driver(name: str, exe: Path, note: str) -> Contender:
            return Contender(name, self._driver(exe), commands=cmds(exe.name), note=note)

        return (
            driver(
                "baseline",
                RUST_BIN / "log-baseline",
                "the standard-I/O baseline (bench/peers/rust/src/bin/"
                "log-baseline.rs): one file, one pwrite per batch from a reused "
                "buffer, mmapkit's framing (len + CRC32C + term per entry, a "
                "commit record per batch), fdatasync per batch in sync mode, the "
                "index in memory (rebuilt on open by a CRC-checked scan); reads "
                "one pread per 10 entries. Concurrent appenders: a mutex around "
                "write + sync.",
            ),
            driver(
                "mmapkit",
                RUST_BIN / "log-mmapkit",
                "mmapkit's Rust API (`mmapkit::log::CommitLog`, 64 MiB segments, "
                "`SyncMode::Never` / `SyncMode::Batch`), driven by "
                "bench/peers/rust/src/bin/log-mmapkit.rs; concurrent appenders "
                "share the log (`append(&self)`, group commit).",
            ),
            Contender(
                "mmapkit (Python)",
                self._python,
                commands={
                    "append": "log.append(batch)  # list of 10 bytes",
                    "read": "out.extend(log.read(lo, lo + 10))",
                    "open_read": "CommitLog(d); out.extend(log.read(lo, lo + 10))",
                    "append_sync": 'CommitLog(d, sync="batch").append(batch)',
                    "append_sync_4": f"{APPENDERS} threads: log.append(batch)",
                },
                note="mmapkit's Python API in the benchmark's own process: "
                '`mmapkit.CommitLog(dir, segment_size=64 MiB, sync="never" | '
                '"batch")`, `append(list of 10 bytes)` per batch, '
                "`read(lo, lo + 10)` (a list of bytes) 10 at a time; the batches' "
                "lists of bytes are built before the clock starts. Concurrent "
                "appenders are Python threads (append releases the GIL).",
            ),
            driver(
                "raft-engine",
                RUST_BIN / "log-raft-engine",
                "tikv raft-engine 0.4 (crates.io; bench/peers/rust/src/bin/"
                "log-raft-engine.rs): protobuf `Entry`s built before the clock "
                "starts, one reused `LogBatch` per batch, `Engine::write(batch, "
                "sync)`, `fetch_entries_to` 10 at a time; batch compression off "
                "(random data), other settings default. It has group commit.",
            ),
            driver(
                "commitlog",
                RUST_BIN / "log-commitlog",
                "the `commitlog` crate 0.2 (crates.io; bench/peers/rust/src/bin/"
                "log-commitlog.rs): one `append(MessageBuf)` per batch, `read` "
                "sized for 10 messages. Its `flush()` does not make the segment "
                "durable (it calls `File::flush`, a no-op), so in sync mode the "
                "driver also fdatasyncs the segment file itself; its offset index "
                "is sized for the run (reading at a full index's boundary fails "
                "in 0.2). `&mut self`: concurrent appenders share a mutex.",
            ),
            driver(
                "tidwall/wal",
                GO_BIN / "log-tidwall",
                "github.com/tidwall/wal (Go; bench/peers/go/cmd/log-tidwall): "
                "`WriteBatch` per batch, `NoSync` or the default fsync per write, "
                "`Read` entry by entry (no range read). Concurrent appenders: a "
                "mutex around next index + write.",
            ),
            driver(
                "etcd/wal",
                GO_BIN / "log-etcd",
                "etcd's WAL (go.etcd.io/etcd/server/v3/storage/wal; bench/peers/"
                "go/cmd/log-etcd): `Save(HardState, entries)` per batch (it "
                "fdatasyncs whenever it saves entries; `SetUnsafeNoFsync` for "
                "no sync, as etcd's --unsafe-no-fsync); reading = `Open` + "
                "`ReadAll` (replay; no random access) + copying. Concurrent "
                "appenders: a mutex around next index + Save.",
            ),
            Contender(
                "driver loop (no log)",
                self._null,
                commands={
                    "append": "log-null append --dir D --entries N --size S --batch 10 --sync none"
                },
                note="the drivers' own cost (bench/peers/rust/src/bin/log-null.rs): "
                "log-mmapkit's timed loop, each batch's (term, slice) list built "
                "the same way in a reused Vec, handed to `black_box` instead of a "
                "log (the data generated before the clock starts, as everywhere). "
                "Its time is part of every Rust driver's append time; the targets "
                "quote mmapkit's net of it.",
            ),
            Contender(
                "disk limit",
                self._probe,
                commands={
                    "append_sync": "log-baseline probe --dir D --batches M",
                    "append_sync_4": "log-baseline probe --dir D --batches M",
                },
                note="the disk's fdatasync rate, measured in the same run: one 4 KiB "
                "pwrite + fdatasync per batch into a fresh file, single-threaded "
                "(not a log: checked only for its number of syncs).",
            ),
        )

    # ----------------------------------------------------------------- report

    def versions(self) -> dict[str, str]:
        v: dict[str, str] = {}
        lock = _text(PEERS / "rust" / "Cargo.lock")
        for crate in ("raft-engine", "commitlog"):
            marker = f'name = "{crate}"\nversion = "'
            i = lock.find(marker)
            if i >= 0:
                v[crate] = lock[i + len(marker) :].split('"', 1)[0] + " (crates.io)"
        for line in _text(PEERS / "go" / "go.mod").splitlines():
            parts = line.split()
            if len(parts) >= 2 and parts[0] in (
                "github.com/tidwall/wal",
                "go.etcd.io/etcd/server/v3",
            ):
                v[parts[0]] = parts[1]
        v["rustc"] = tool_version(["rustc", "--version"])
        v["go"] = tool_version(["go", "version"])
        return v

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        """The issue's targets, on the article's workload (or the first one run)."""
        have = [s["label"] for s in doc["sizes"] if s["label"] in self._workloads]
        if not have:
            return []
        out: list[dict[str, Any]] = []
        batches = doc["sizes"][0].get("sync_batches", SYNC_BATCHES)

        def goal(label: str, task: str, contender: str, size: str, **kw: Any) -> None:
            out.append(
                {
                    "label": label,
                    "task": task,
                    "contender": contender,
                    "size": size,
                    "cache": "warm",
                    **kw,
                }
            )

        a = "100k-50B" if "100k-50B" in have else have[0]
        synced = [x for x in have if self._workloads[x].sync]
        sa = a if a in synced else (synced[0] if synced else a)
        wa = self._workloads[a]
        what = f"{wa.entries:,} × {wa.size} B"
        per = wa.entries / 10e6  # 10 M entries/s
        goal(
            f"no sync: mmapkit appends {what} in ≤ {per * 1e3:g} ms (≥ 10 M entries/s)",
            "append",
            "mmapkit",
            a,
            max_seconds=per,
        )
        goal(
            "no sync: the same, net of the driver's own loop (`driver loop (no log)`)",
            "append",
            "mmapkit",
            a,
            max_seconds=per,
            net_of="driver loop (no log)",
        )
        goal(
            "sync per batch: mmapkit faster than raft-engine",
            "append_sync",
            "mmapkit",
            sa,
            versus="raft-engine",
            min_speedup=1.0,
            name_versus=True,
        )
        goal(
            "sync per batch: mmapkit at the disk's fdatasync limit (≥ 0.8× its rate)",
            "append_sync",
            "mmapkit",
            sa,
            versus="disk limit",
            min_speedup=0.8,
            name_versus=True,
        )
        goal(
            f"reads: mmapkit reads the {wa.entries:,} entries back in ≤ "
            f"{wa.entries / 20e6 * 1e3:g} ms",
            "read",
            "mmapkit",
            a,
            max_seconds=wa.entries / 20e6,
        )
        if "100k-4KiB" in have:
            # Issue 26's cells: ≤ 1.1× the baseline's time is ≥ 1/1.1 its speed.
            for task, what in (("read", "reads"), ("open_read", "open + reads (a restart)")):
                goal(
                    f"cold {what}: mmapkit ≤ 1.1× the baseline's time",
                    task,
                    "mmapkit",
                    "100k-4KiB",
                    cache="cold",
                    versus="baseline",
                    min_speedup=round(1 / 1.1, 3),
                )
            goal(
                "4 KiB appends, no sync: mmapkit at least as fast as commitlog",
                "append",
                "mmapkit",
                "100k-4KiB",
                versus="commitlog",
                min_speedup=1.0,
                name_versus=True,
            )
        py = "1M-50B" if "1M-50B" in have else a
        n = self._workloads[py].entries
        goal(
            f"Python: ≥ 1 M entries/s appending ({n:,} in ≤ {n / 1e6:g} s)",
            "append",
            "mmapkit (Python)",
            py,
            max_seconds=n / 1e6,
        )
        goal(
            f"Python: ≥ 1 M entries/s reading ({n:,} in ≤ {n / 1e6:g} s)",
            "read",
            "mmapkit (Python)",
            py,
            max_seconds=n / 1e6,
        )
        goal(
            f"{APPENDERS} concurrent appenders: fewer syncs than batches ({batches:,})",
            "append_sync_4",
            "mmapkit",
            sa,
            max_metric={"syncs": batches - 1},
        )
        return out

    notes = (
        "Timing: every contender times only the operation (a driver process measures "
        "from opening/creating the log to the last append's return, or the read loop; "
        "its start-up, the generation of the data and the verification are not timed); "
        "mmapkit (Python) is timed the same way in the benchmark's process.",
        "Data: entry i is 50 (or 4096) bytes of a splitmix64 stream seeded by the suite; "
        "the suite computes the expected CRC-32s with numpy + zlib and checks every run "
        "of every contender against them (a wrong answer fails the suite).",
        "Sync runs use a fixed number of batches (500 in a full run, 200 with --quick) "
        "instead of all 100 K entries: at ~1–4 ms per fdatasync on this kind of machine, "
        "10,000 syncs per run and contender would take most of an hour.",
        "Run time of a full run on a 2-core VM: see `elapsed_s` in log.json.",
    )

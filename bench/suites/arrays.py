"""Suite `arrays`: the experiments of the article "Memory-mapped arrays" (numpy
memmap, multiprocessing, sparse files) side by side with mmapkit, in one run.

Tasks (every contender's answer is checked on every run):

1. ``open_sum``  open a 10 M x 3 float64 table and sum it: ``np.loadtxt`` (on the
                 same data as text), ``np.fromfile``, ``np.memmap`` (baseline),
                 ``mmapkit.stats.sum`` on the path, ``mmapkit.ArrayStore``
                 -> the sum (values are multiples of 1/1024, so every order of
                 summation gives the same exact float)
2. ``read``      the disk's (cold) or page cache's (warm) sequential read speed:
                 a plain ``readinto`` loop over the int16 file into one reusable
                 8 MiB buffer -> bytes read; the "limit" of the median rows
3. ``median``    median of the int16 file (10 GB, ``--quick`` 128 MiB): ``np.median``
                 on a memmap (reference, exact, needs the whole array in RAM), the
                 article's median of chunk medians over a process pool
                 (approximate), dask's ``da.percentile(x, 50)`` (approximate),
                 ``mmapkit.stats.median`` (exact) -> the median; approximate
                 contenders must be within ``MEDIAN_TOLERANCE`` of the exact
                 median and report their error (``error`` column)
4. ``handoff``   hand a 1 GiB float64 array to 2 worker processes (already
                 running) that each attach and read three elements: pickling the
                 array through a pipe (what ``multiprocessing`` does),
                 ``multiprocessing.shared_memory`` (send the name),
                 ``mmapkit.SharedArray`` (send the name), ``mmapkit.ArrayStore``
                 (pickled by path) -> the workers' readings; ``copied`` = bytes
                 pickled to the workers
5. ``sparse``    create a 24 GiB float64 array (2^30 x 3, the article's) on disk:
                 ``f.truncate`` (baseline), ``np.memmap(mode="w+")`` (the
                 article), ``np.lib.format.open_memmap``, ``mmapkit.sparse``
                 -> bytes of array data; ``allocated`` = blocks really used
"""

from __future__ import annotations

import atexit
import contextlib
import json
import multiprocessing as mp
import os
import pickle
import statistics
import time
from collections.abc import Callable
from multiprocessing import shared_memory
from pathlib import Path
from typing import Any

import numpy as np

from ..contenders import Registry, mmapkit_has, mmapkit_module
from ..harness import capped, generated, labelled, module_version, need_space, prime
from ..suite import Dataset, Measured, Size, Suite, Task, Unavailable

DATA_SEED = 5
GENERATOR_VERSION = 1
GIGA = 1 << 30
FEWER = capped(3, labelled("large"))  # the slow tasks: 3 timed runs at the full size
MEDIAN_TOLERANCE = 64  # |approximate - exact| allowed for the estimators (int16 units)

# Per size label: table rows, median file bytes, handoff bytes, sparse rows.
PARAMS = {
    "small": {"rows": 100_000, "median": 64 << 20, "handoff": 16 << 20, "sparse_rows": 1 << 22},
    # --quick (make run), its only size: every contender (np.zeros.tofile too) in seconds
    "quick": {"rows": 200_000, "median": 128 << 20, "handoff": 64 << 20, "sparse_rows": 1 << 22},
    "large": {"rows": 10_000_000, "median": 10 * 10**9, "handoff": GIGA, "sparse_rows": GIGA},
}


def _mmapkit() -> Any:
    return mmapkit_module("stats")


def _need(name: str) -> Callable[[], str | None]:
    return mmapkit_has(name, submodules=("stats",))


# Every contender is declared on the function that does its task (see Registry).
CONTENDERS = Registry()
contender = CONTENDERS.add


# --------------------------------------------------------------------------- data


def _params(ds: Dataset) -> dict[str, Any]:
    return ds.info["params"]


def _table_files(d: Path) -> tuple[Path, Path]:
    return d / "table.npy", d / "table.csv"


def _write_table(d: Path, rows: int, log: Callable[[str], None]) -> None:
    npy, csv = _table_files(d)
    log(f"generating {rows:,} x 3 float64 table ({npy.name}, {csv.name}) ...")
    out = np.lib.format.open_memmap(
        npy.with_suffix(".partial.npy"), mode="w+", dtype=np.float64, shape=(rows, 3)
    )
    with open(csv.with_suffix(".partial"), "w") as f:
        for start in range(0, rows, 1_000_000):
            rng = np.random.default_rng([DATA_SEED, 1, start])
            n = min(1_000_000, rows - start)
            # multiples of 1/1024: exact in text ("%.10f") and every sum is exact
            block = rng.integers(-(1 << 20), 1 << 20, size=(n, 3)) / 1024.0
            out[start : start + n] = block
            np.savetxt(f, block, fmt="%.10f")
    out.flush()
    del out
    os.replace(npy.with_suffix(".partial.npy"), npy)
    os.replace(csv.with_suffix(".partial"), csv)


def _write_int16(path: Path, nbytes: int, log: Callable[[str], None]) -> None:
    """The article's data: uniform random int16, written in 1 GiB blocks."""
    log(f"generating {nbytes:,} bytes of random int16 ({path.name}) ...")
    tmp = path.with_suffix(".partial")
    n = nbytes // 2
    with open(tmp, "wb") as f:
        for start in range(0, n, GIGA // 2):
            rng = np.random.default_rng([DATA_SEED, 2, start])
            k = min(GIGA // 2, n - start)
            rng.integers(-32768, 32767, size=k, dtype=np.int16, endpoint=True).tofile(f)
    os.replace(tmp, path)


def _write_handoff(path: Path, nbytes: int) -> None:
    np.save(path, _handoff_array(nbytes))


def _handoff_array(nbytes: int) -> np.ndarray:
    return np.arange(nbytes // 8, dtype=np.float64)


# --------------------------------------------------------------------------- 1. open + sum


def _npy_offset(path: Path) -> int:
    with open(path, "rb") as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            np.lib.format.read_array_header_1_0(f)
        else:
            np.lib.format.read_array_header_2_0(f)
        return f.tell()


@contender("np.loadtxt", "open_sum", note="`np.loadtxt(csv).sum()` on the same numbers as text.")
def sum_loadtxt(d: Path) -> float:
    """Sums the table read with ``np.loadtxt`` from its text copy."""
    return float(np.loadtxt(_table_files(d)[1]).sum())


@contender(
    "np.fromfile",
    "open_sum",
    note="`np.fromfile(npy, float64, offset=header).sum()`: reads into a new array.",
)
def sum_fromfile(d: Path) -> float:
    """Sums the table read with ``np.fromfile``."""
    npy = _table_files(d)[0]
    return float(np.fromfile(npy, dtype=np.float64, offset=_npy_offset(npy)).sum())


@contender(
    "np.memmap",
    "open_sum",
    note="`np.memmap(npy, float64, 'r', offset=header).sum()` (the article's).",
)
def sum_memmap(d: Path) -> float:
    """Sums the table through ``np.memmap``."""
    npy = _table_files(d)[0]
    a = np.memmap(npy, dtype=np.float64, mode="r", offset=_npy_offset(npy))
    return float(a.reshape(-1, 3).sum())


@contender(
    "mmapkit.stats",
    "open_sum",
    available=_need("stats"),
    note="`mmapkit.stats.sum(path)` on the .npy (dtype and shape from its header): "
    "compensated float64 sum in Rust on every core, GIL released.",
)
def sum_mmapkit(d: Path) -> float:
    """Sums the table with ``mmapkit.stats.sum``."""
    return float(_mmapkit().stats.sum(_table_files(d)[0]))


@contender(
    "mmapkit.ArrayStore",
    "open_sum",
    available=_need("ArrayStore"),
    note="`mmapkit.ArrayStore.open(npy, mode='r')`: open_sum = `mmapkit.stats.sum(store)`; "
    "handoff = the store object itself (pickles as its path; the worker maps the "
    "file).",
)
def sum_arraystore(d: Path) -> float:
    """Sums the table through an ``ArrayStore`` opened read-only."""
    mk = _mmapkit()
    store = mk.ArrayStore.open(str(_table_files(d)[0]), mode="r")
    try:
        return float(mk.stats.sum(store))
    finally:
        getattr(store, "close", lambda: None)()


# --------------------------------------------------------------------------- 2. read speed


@contender("read loop", "read", note="plain `readinto` loop, 8 MiB reusable buffer.")
def read_loop(d: Path) -> int:
    """Reads the median file once (the plain-I/O baseline)."""
    return prime([d / "median.i16"])


# --------------------------------------------------------------------------- 3. median


def _chunk_median(bounds: tuple[str, int, int]) -> float:
    """The article's worker: map the file by path, median of one chunk."""
    path, start, stop = bounds
    data = np.memmap(path, dtype=np.int16, mode="r")
    return float(np.median(data[start:stop]))


@contender(
    "np.median",
    "median",
    note="`np.median(np.memmap(path, int16, 'r'))`: exact, whole array in RAM.",
)
def median_numpy(d: Path) -> float:
    """The median of the int16 file with ``np.median`` over ``np.memmap``."""
    return float(np.median(np.memmap(d / "median.i16", dtype=np.int16, mode="r")))


def _approx(d: Path, estimate: float) -> Measured:
    exact = json.loads((d / "median.json").read_text())["median"]
    err = abs(estimate - exact)
    return Measured(exact if err <= MEDIAN_TOLERANCE else estimate, {"error": err})


@contender(
    "pool median of medians",
    "median",
    note="the article's `estimate_median_pool`: `multiprocessing.Pool(cores)` (fork), "
    "128 Mi-element chunks, each worker maps the file by path; approximate.",
)
def median_pool(d: Path) -> Measured:
    """estimate_median_pool() of the article: Pool(cores), 128 Mi-element chunks
    (fewer for small files: at least 8 chunks), each worker maps the file by path,
    then the median of the chunk medians."""
    path = str(d / "median.i16")
    n = os.path.getsize(path) // 2
    chunk = max(1, min(128 << 20, n // 8))
    bounds = [(path, s, min(n, s + chunk)) for s in range(0, n, chunk)]
    with mp.get_context("fork").Pool(os.cpu_count()) as pool:
        partials = pool.map(_chunk_median, bounds)
    return _approx(d, float(np.median(partials)))


@contender(
    "dask percentile",
    "median",
    note="`dask.array.percentile(da.from_array(memmap, chunks=64 Mi), 50)` (threaded "
    "scheduler); approximate (dask's exact `da.median` must rechunk the whole axis "
    "into one chunk, i.e. load it all).",
)
def median_dask(d: Path) -> Measured:
    """The median of the int16 file with dask."""
    try:
        import dask.array as da
    except ImportError as exc:
        raise Unavailable(
            "dask not installed (pip install 'dask[array]', the bench extra)"
        ) from exc
    x = da.from_array(np.memmap(d / "median.i16", dtype=np.int16, mode="r"), chunks=64 << 20)
    return _approx(d, float(np.asarray(da.percentile(x, 50).compute()).ravel()[0]))


@contender(
    "mmapkit.stats.median",
    "median",
    available=_need("stats"),
    note="`mmapkit.stats.median(path, dtype=np.int16)`: exact.",
)
def median_mmapkit(d: Path) -> Measured:
    """The median of the int16 file with ``mmapkit.stats.median``."""
    st = _mmapkit().stats
    t0 = time.perf_counter()
    m = float(st.median(d / "median.i16", dtype=np.int16))
    return Measured(m, {"seconds": time.perf_counter() - t0})


# --------------------------------------------------------------------------- 4. handoff


def _worker_loop(conn: Any) -> None:
    """A worker: receive a handle, attach to the array, read three elements."""
    while True:
        handle = conn.recv()
        if handle is None:
            return
        reading = _read_handle(handle)
        # Free a pickled copy now, inside this hand-off's time, not the next one's.
        del handle
        conn.send(reading)


def _read_handle(handle: Any) -> tuple[int, float, float, float]:
    kind = handle[0]
    if kind == "array":
        a = handle[1]
        return _probe(a)
    if kind == "shm":
        _, name, n = handle
        shm = shared_memory.SharedMemory(name=name)
        a = np.ndarray((n,), dtype=np.float64, buffer=shm.buf)
        r = _probe(a)
        del a
        shm.close()
        return r
    if kind == "mmapkit_shared":
        import mmapkit

        arr = mmapkit.SharedArray.attach(handle[1])
        try:
            return _probe(arr.numpy())
        finally:
            arr.close()
    if kind == "store":
        return _probe(np.asarray(handle[1]))
    raise ValueError(f"unknown handle {kind!r}")


def _probe(a: np.ndarray) -> tuple[int, float, float, float]:
    return (int(a.shape[0]), float(a[0]), float(a[a.shape[0] // 2]), float(a[-1]))


class _Workers:
    """Two worker processes started once (forkserver: they inherit nothing)."""

    def __init__(self) -> None:
        ctx = mp.get_context("forkserver")
        self.conns = []
        self.procs = []
        for _ in range(2):
            parent, child = ctx.Pipe()
            p = ctx.Process(target=_worker_loop, args=(child,), daemon=True)
            p.start()
            child.close()
            self.conns.append(parent)
            self.procs.append(p)
        atexit.register(self.stop)

    def hand(self, handle: Any) -> tuple[Any, int]:
        """Sends `handle` to both workers; returns their readings and the pickled bytes."""
        sent = 0
        for c in self.conns:
            data = pickle.dumps(handle, protocol=pickle.HIGHEST_PROTOCOL)
            sent += len(data)
            c.send_bytes(data)
        return tuple(c.recv() for c in self.conns), sent

    def stop(self) -> None:
        for c in self.conns:
            with contextlib.suppress(OSError):
                c.send(None)
        for p in self.procs:
            p.join(timeout=5)


_STATE: dict[str, Any] = {}


def _workers() -> _Workers:
    if "workers" not in _STATE:
        _STATE["workers"] = _Workers()
    return _STATE["workers"]


def _cached(key: str, make: Callable[[], Any]) -> Any:
    if key not in _STATE:
        _STATE[key] = make()
    return _STATE[key]


# Hand-offs per timed run of a segment in /dev/shm (shared_memory, SharedArray): a
# fraction of a millisecond each, so one run is the median of this many, enough to
# rank them against each other; a cache drop does not touch tmpfs pages, so the cold
# runs' later hand-offs are no warmer than their first.
SHM_HANDS = 31


def _timed_hand(handle: Any, times: int = 1) -> Measured:
    seconds = []
    for _ in range(times):
        t0 = time.perf_counter()
        readings, sent = _workers().hand(handle)
        seconds.append(time.perf_counter() - t0)
    t = statistics.median(seconds)
    return Measured(readings, {"copied": sent, "seconds": t}, seconds=t)


def _handoff_n(d: Path) -> int:
    return json.loads((d / "handoff.json").read_text())["n"]


@contender(
    "pickle", "handoff", note="the array itself pickled down each worker's pipe (1 GiB each)."
)
def handoff_pickle(d: Path) -> Measured:
    """Hands the array to a worker process by pickling it."""
    a = _cached(f"array:{d}", lambda: _handoff_array(_handoff_n(d) * 8))
    return _timed_hand(("array", a))


@contender(
    "shared_memory",
    "handoff",
    note="`multiprocessing.shared_memory.SharedMemory` created (and filled) once, "
    "untimed; its name is sent; the worker attaches and views it with numpy (the "
    "workers share the parent's resource tracker, so 3.11's tracker does not unlink "
    "the segment behind the creator's back here).",
)
def handoff_shm(d: Path) -> Measured:
    """Hands the array to a worker through ``multiprocessing.shared_memory``."""
    n = _handoff_n(d)

    def make() -> Any:
        shm = shared_memory.SharedMemory(create=True, size=n * 8)
        np.ndarray((n,), dtype=np.float64, buffer=shm.buf)[:] = _handoff_array(n * 8)
        atexit.register(lambda: (shm.close(), shm.unlink()))
        return shm

    shm = _cached(f"shm:{d}", make)
    return _timed_hand(("shm", shm.name, n), SHM_HANDS)


@contender(
    "mmapkit.SharedArray",
    "handoff",
    available=_need("SharedArray"),
    note="`mmapkit.SharedArray.create(name, shape, float64)` once, untimed; the name is "
    "sent; the worker `attach`es and reads `numpy()`.",
)
def handoff_shared_array(d: Path) -> Measured:
    """Hands the array to a worker as a ``mmapkit.SharedArray`` (pickled by name)."""
    mk = _mmapkit()
    n = _handoff_n(d)

    name = f"mmapkit-bench-{os.getpid()}-{n}"

    def make() -> Any:
        arr = mk.SharedArray.create(name, (n,), np.float64)
        arr.numpy()[:] = _handoff_array(n * 8)

        def cleanup() -> None:
            arr.unlink()
            arr.close()

        atexit.register(cleanup)
        return arr

    _cached(f"sa:{d}", make)
    return _timed_hand(("mmapkit_shared", name), SHM_HANDS)


@contender("mmapkit.ArrayStore", "handoff")
def handoff_store(d: Path) -> Measured:
    """Hands the array to a worker as an ``ArrayStore`` (pickled by path)."""
    mk = _mmapkit()
    store = _cached(f"store:{d}", lambda: mk.ArrayStore.open(str(d / "handoff.npy"), mode="r"))
    return _timed_hand(("store", store))


# --------------------------------------------------------------------------- 5. sparse


def _sparse_rows(ds_dir: Path) -> int:
    return json.loads((ds_dir / "handoff.json").read_text())["sparse_rows"]


def _allocated(path: Path) -> int:
    return os.stat(path).st_blocks * 512


def _sparse_path(d: Path) -> Path:
    return d / "sparse.bin"


def _mapped(p: Path, create: Callable[[tuple[int, int]], np.ndarray]) -> Measured:
    """A numpy mapping `create(shape)` makes of the sparse array's file: its bytes."""
    a = create((_sparse_rows(p.parent), 3))
    nbytes = a.nbytes
    del a
    return Measured(nbytes, {"allocated": _allocated(p)})


@contender("f.truncate", "sparse", note="`open(p, 'wb').truncate(nbytes)`: a plain sparse file.")
def sparse_truncate(p: Path) -> Measured:
    """Creates the sparse file with ``truncate`` (the baseline)."""
    nbytes = _sparse_rows(p.parent) * 24
    with open(p, "wb") as f:
        f.truncate(nbytes)
    return Measured(nbytes, {"allocated": _allocated(p)})


@contender(
    "np.memmap w+",
    "sparse",
    note="`np.memmap(p, float64, shape=(2**30, 3), mode='w+')` (the article's).",
)
def sparse_memmap(p: Path) -> Measured:
    """Creates the sparse array with ``np.memmap(mode="w+")``."""
    return _mapped(p, lambda shape: np.memmap(p, dtype=np.float64, shape=shape, mode="w+"))


@contender("np.lib.format.open_memmap", "sparse", note="a .npy of that shape, `mode='w+'`.")
def sparse_open_memmap(p: Path) -> Measured:
    """Creates the sparse ``.npy`` with ``np.lib.format.open_memmap``."""
    return _mapped(
        p, lambda shape: np.lib.format.open_memmap(p, mode="w+", dtype=np.float64, shape=shape)
    )


@contender("np.zeros.tofile", "sparse", note="writes every zero (small size only).")
def sparse_zeros(p: Path) -> Measured:
    """Writes every zero (``np.zeros`` then ``tofile``; sizes up to 1 GiB only)."""
    rows = _sparse_rows(p.parent)
    if rows * 24 > GIGA:
        raise Unavailable("writes every zero: only run for sizes up to 1 GiB")
    np.zeros((rows, 3)).tofile(p)
    return Measured(rows * 24, {"allocated": _allocated(p)})


@contender(
    "mmapkit.sparse", "sparse", available=_need("sparse"), note="`mmapkit.sparse(path, nbytes)`."
)
def sparse_mmapkit(p: Path) -> Measured:
    """Creates the sparse file with ``mmapkit.sparse``."""
    nbytes = _sparse_rows(p.parent) * 24
    _mmapkit().sparse(str(p), nbytes)
    return Measured(nbytes, {"allocated": _allocated(p)})


def _fresh_sparse(ds: Dataset) -> Path:
    p = _sparse_path(ds.path)
    p.unlink(missing_ok=True)
    return p


# --------------------------------------------------------------------------- suite


class ArraysSuite(Suite):
    """The ``arrays`` suite: the article's array experiments, numpy, multiprocessing and dask
    against mmapkit.
    """

    name = "arrays"
    title = "arrays on disk and between processes: numpy, multiprocessing, dask vs mmapkit"
    description = (
        "The experiments of the article *Memory-mapped arrays* (reading a 10 M x 3 float64 "
        "table, the median of a 10 GB int16 file with a process pool, sparse 24 GB arrays) "
        "plus handing a 1 GiB array to worker processes, for numpy (`loadtxt`, `fromfile`, "
        "`memmap`, `median`), the article's process-pool estimator, dask, "
        "`multiprocessing.shared_memory` and mmapkit (`mmapkit.stats`, `ArrayStore`, "
        "`SharedArray`, `sparse`), all in one run. The `read` row is the disk's (cold) and "
        "page cache's (warm) sequential read speed measured in the same run."
    )
    baseline = "np.memmap"
    reference = "np.memmap"
    layout = "rows"
    metrics = {
        "error": {"title": "error of the estimate", "unit": ""},
        "copied": {"title": "bytes sent to workers", "unit": "bytes"},
        "allocated": {"title": "allocated on disk", "unit": "bytes"},
        "seconds": {"title": "seconds (self-timed, for the absolute goals)", "unit": ""},
    }
    limit = ("read", "read loop")
    headline = {
        "capability": "exact median of an on-disk array",
        "label": "median of the int16 file",
        "task": "median",
        "contender": "mmapkit.stats.median",
        "peers": ["np.median", "pool median of medians", "dask percentile"],
        "sizes": ["large", "quick"],
    }

    tasks: tuple[Task, ...] = (
        Task(
            "open_sum",
            "10 M x 3 float64: open + sum",
            throughput=False,
            repeats=FEWER,
            note="sum of every element. `np.loadtxt` parses the same numbers from text "
            "(`%.10f`, ~50 bytes a row); it is the slow one, so the full run repeats this "
            "task 3 times per cache state. Rows: 10 M (full), 200 k (`--quick`), 100 k "
            "(small).",
        ),
        Task(
            "read",
            "sequential read of the int16 file",
            baseline="read loop",
            reference="read loop",
            note="`readinto` of the whole median file into one reusable 8 MiB buffer: "
            "the disk's speed (cold) and the page cache's (warm); the ceiling of the "
            "`median` rows (their `% of limit`).",
        ),
        Task(
            "median",
            "median of the int16 file",
            baseline="np.median",
            reference="np.median",
            warmup="prime",
            repeats=FEWER,
            note="`np.median` on an `np.memmap` is exact but copies the whole array into RAM "
            "(10 GB at the full size); the process-pool median of chunk medians (the "
            "article's `estimate_median_pool`, one process per core) and "
            "`dask.array.percentile(x, 50)` (per-chunk percentiles merged) are estimates: "
            f"they pass when within ±{MEDIAN_TOLERANCE} of the exact median and the table "
            "shows their error. `mmapkit.stats.median(path, dtype=np.int16)` is exact "
            "(one counting pass over the mapped file, every core).",
        ),
        Task(
            "handoff",
            "hand a 1 GiB array to 2 workers",
            baseline="pickle",
            reference="pickle",
            throughput=False,
            note="two worker processes are already running (started once, forkserver); timed: "
            "pickle a handle, send it down each worker's pipe, the worker attaches and "
            "reads three elements, the answers come back. `pickle` sends the array itself "
            "(what `Pool.map(f, [array])` does); the others send a name or a path. "
            "`bytes sent` is the pickled size: the data copied per hand-off. 16 MiB at "
            "the small size, 64 MiB with `--quick`. `shared_memory` and "
            f"`mmapkit.SharedArray` take a fraction of a millisecond: each of their runs "
            f"is the median of {SHM_HANDS} hand-offs (their segments live in /dev/shm, "
            "which a cache drop leaves in memory, so cold is the same there).",
        ),
        Task(
            "sparse",
            "create a 24 GiB float64 array on disk",
            baseline="f.truncate",
            reference="f.truncate",
            throughput=False,
            setup=_fresh_sparse,
            teardown=lambda ds: _sparse_path(ds.path).unlink(missing_ok=True),
            note="2^30 x 3 float64 (the article's), a fresh file each run (deleted untimed "
            "before); answer: bytes of array data; `allocated` = blocks the file really "
            "uses. `np.zeros(...).tofile` (writing every zero) runs only at the small and "
            "`--quick` sizes (96 MiB).",
        ),
    )

    contenders = CONTENDERS.contenders()

    def sizes(self, quick: bool) -> list[Size]:
        if quick:
            return [Size("quick", PARAMS["quick"]["median"])]
        return [Size("small", PARAMS["small"]["median"]), Size("large", PARAMS["large"]["median"])]

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        p = PARAMS[size.label]
        d = data_dir / f"arrays-{size.label}-s{DATA_SEED}"
        d.mkdir(parents=True, exist_ok=True)
        want = {"params": p, "seed": DATA_SEED, "generator": GENERATOR_VERSION}

        def make() -> dict[str, Any]:
            need_space(
                d,
                p["median"] + p["rows"] * 80 + p["handoff"] + (2 << 30),
                f"the {size.label} `arrays` data",
                "with 2 GiB spare; use --quick",
            )
            _write_table(d, p["rows"], log)
            _write_int16(d / "median.i16", p["median"], log)
            _write_handoff(d / "handoff.npy", p["handoff"])
            log("computing the exact median once (checked against np.median in the run) ...")
            exact = _exact_median(d / "median.i16")
            (d / "median.json").write_text(json.dumps({"median": exact}) + "\n")
            (d / "handoff.json").write_text(
                json.dumps({"n": p["handoff"] // 8, "sparse_rows": p["sparse_rows"]}) + "\n"
            )
            return {}

        generated(d / "ok.json", want, make)
        npy, csv = _table_files(d)
        files = [npy, csv, d / "median.i16", d / "handoff.npy"]
        return Dataset(
            size,
            d,
            files,
            {
                "params": p,
                "bytes": p["median"],
                "generator": "bench/suites/arrays.py",
                "seed": DATA_SEED,
            },
        )

    def versions(self) -> dict[str, str]:
        return {mod: module_version(mod) for mod in ("mmapkit", "dask")}

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        big = next((s for s in doc["sizes"] if s["label"] in ("large", "quick")), None)
        if big is None:
            return []
        at = "" if big["label"] == "large" else f" (stated for 10 GB; this run: {big['human']})"
        return [
            {
                "label": "exact median: mmapkit ≥ 20× np.median (warm)" + at,
                "task": "median",
                "contender": "mmapkit.stats.median",
                "versus": "np.median",
                "min_speedup": 20,
                "size": big["label"],
                "cache": "warm",
            },
            {
                "label": "exact median faster than the article's approximate pool (cold)" + at,
                "task": "median",
                "contender": "mmapkit.stats.median",
                "versus": "pool median of medians",
                "min_speedup": 1,
                "size": big["label"],
                "cache": "cold",
            },
            {
                "label": "exact median of 10 GB in ≤ 3 s warm" + at,
                "task": "median",
                "contender": "mmapkit.stats.median",
                "versus": "np.median",
                "min_speedup": 1,
                "size": big["label"],
                "cache": "warm",
                "max_metric": {"seconds": 3.0},
            },
            {
                "label": "exact median of 10 GB in ≤ 5 s cold" + at,
                "task": "median",
                "contender": "mmapkit.stats.median",
                "versus": "np.median",
                "min_speedup": 1,
                "size": big["label"],
                "cache": "cold",
                "max_metric": {"seconds": 5.0},
            },
            {
                "label": "hand-off: mmapkit.SharedArray < 1 ms, no data copied (≤ 4 KiB pickled)",
                "task": "handoff",
                "contender": "mmapkit.SharedArray",
                "versus": "pickle",
                "min_speedup": 100,
                "size": big["label"],
                "cache": "warm",
                "max_metric": {"copied": 4096, "seconds": 0.001},
            },
            {
                "label": "hand-off: mmapkit.ArrayStore by path < 1 ms, no data copied",
                "task": "handoff",
                "contender": "mmapkit.ArrayStore",
                "versus": "pickle",
                "min_speedup": 100,
                "size": big["label"],
                "cache": "warm",
                "max_metric": {"copied": 4096, "seconds": 0.001},
            },
        ]

    notes = (
        "Absolute goals of the issue, read from the tables: exact median of 10 GB in ≤ 3 s warm "
        "and ≤ 5 s cold (the cold time is bounded by the `read` row: the disk's speed); "
        "hand-off < 1 ms with zero copies.",
        "Data (`bench/suites/arrays.py`, seeded): the table is uniform multiples of 1/1024 in "
        "[-1024, 1024) (exact in text and in every summation order); the int16 file is "
        "uniform over the whole int16 range like the article's; the hand-off array is "
        "`np.arange` as float64.",
        "The process-pool and dask rows include starting their workers / scheduler, as in the "
        "article; the hand-off rows do not (the workers run before the timing starts).",
    )


def _exact_median(path: Path) -> float:
    try:
        import mmapkit.stats as st

        return float(st.median(path, dtype=np.int16))
    except ImportError:
        return float(np.median(np.memmap(path, dtype=np.int16, mode="r")))

"""Suite `features` (issue 13): training from a feature store, out of core, data
loaders and cluster statistics, mmapkit side by side with what people use today.

Tasks (every contender's answer is checked on every run):

1. ``train``   one epoch of mini-batch logistic regression (batch 64, lr 0.01, the
               article's update rule: summed batch gradient, no L2) over n x d float32
               rows: the article's design (comma-separated text in a mapped file,
               every batch decoded, split and parsed; a prefix of the rows, the time
               scaled to the whole epoch), ``np.memmap`` + a numpy loop, scikit-learn
               ``SGDClassifier(loss="log_loss").partial_fit`` per batch,
               ``StreamingLogisticRegression.fit`` on the ``FeatureStore``
               (sequential and shuffled), and scikit-learn and mmapkit with batches of
               4096 (scikit-learn's per-call cost amortised) -> "trained" (held-out accuracy above
               ``MIN_ACCURACY``; the accuracy is the ``accuracy`` metric)
2. ``train_ooc`` the same, once, on a store larger than RAM (30 GB, cold cache):
               the disk's sequential read of the same file (``readinto`` loop), the
               numpy loop on ``np.memmap`` and mmapkit sequential; ``rss_anon`` = the
               process's own memory (RssAnon, sampled every 50 ms) at its peak
3. ``loader``  one pass over the store's first rows in batches of 256 ``(X, y)`` tensors,
               sequential and shuffled: ``mmapkit.torch.data_loader`` vs the peers a
               competent user writes: a batch-aware ``np.memmap`` ``Dataset`` driven by
               slices / a ``BatchSampler`` (sorted fancy-index gathers), and in-RAM
               tensors (slices / ``torch.randperm`` gathers); with 2 workers; the per-row
               ``Dataset`` only as an extra row for scale -> (rows, sum of the labels),
               rows/s and GB/s, and each peer's ratio to mmapkit in the notes
4. ``median``  exact median of an int16 array (10 GB, ``--quick`` 64 MiB) on a
               2-worker ``distributed.LocalCluster(processes=True)``:
               ``mmapkit.dask.median`` vs ``dask.array.percentile(x, 50)``
               (approximate; its ``error`` is shown) on the same dask array
               (``mmapkit.dask.to_dask_array``: tasks carry the path and bounds)
5. ``gpu``     (CUDA hosts only; one skip line elsewhere) one epoch of logistic regression
               trained on the GPU, 16 M x 64 float32 (4.3 GB), batch 65,536, fed by
               ``FeatureStore.batches`` (sequential, shuffled), ``data_loader(pin_memory=
               True)``, ``np.load(mmap_mode="r")`` slices, an in-RAM tensor with
               ``randperm`` gathers and ``mmapkit.torch.device_loader`` (sequential,
               shuffled); limits in the same run: the pinned host-to-device copy and the
               whole set already on the GPU (``bench/gpu_run.sh`` runs it into ``$OUT``)
"""

from __future__ import annotations

import atexit
import functools
import json
import mmap
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Self

import numpy as np

from ..contenders import Registry, mmapkit_has, mmapkit_module
from ..harness import capped, generated, labelled, module_version, need_space, prime, primed
from ..suite import Dataset, Measured, Size, Suite, Task, Unavailable

DATA_SEED = 13
GENERATOR_VERSION = 1
BATCH = 64  # the article's batch size
LR = 0.01  # the article's learning rate
BIG_BATCH = 4096  # for the large-batch rows (scikit-learn's per-call cost amortised)
LOADER_BATCH = 256
MIN_ACCURACY = 0.6  # held-out accuracy every trained model must beat (chance: 0.5)
MEDIAN_TOLERANCE = 64  # |approximate - exact| allowed for dask's percentile (int16 units)
TEST_ROWS = 8192

# Per size label: rows, dim, rows of the text design (a prefix), rows the loaders read.
PARAMS: dict[str, dict[str, Any]] = {
    "q64": {"rows": 100_000, "dim": 64, "text_rows": 20_000, "loader_rows": 32_768},
    "q128": {"rows": 100_000, "dim": 128, "text_rows": 10_000, "loader_rows": 0},
    "qdask": {"int16": 64 << 20},
    "d64": {"rows": 1_000_000, "dim": 64, "text_rows": 100_000, "loader_rows": 262_144},
    "d1000": {"rows": 1_000_000, "dim": 1000, "text_rows": 10_000, "loader_rows": 0},
    "ooc": {"rows": 30_000_000, "dim": 250, "text_rows": 0, "loader_rows": 0},
    # The gpu part (issue 26): 16 M x 64 float32 (4.3 GB), batch 65,536; --quick 1 M.
    "gpu": {"rows": 1 << 24, "dim": 64, "text_rows": 0, "loader_rows": 0, "batch": 65536},
    "qgpu": {"rows": 1 << 20, "dim": 64, "text_rows": 0, "loader_rows": 0, "batch": 8192},
    "dask": {"int16": 10 * 10**9},
}
TRAIN_SIZES = ("q64", "q128", "d64", "d1000")
LOADER_SIZES = ("q64", "d64")
GPU_SIZES = ("qgpu", "gpu")

CONTENDERS = Registry()
contender = CONTENDERS.add


def _need(*names: str) -> Callable[[], str | None]:
    return mmapkit_has(*names, submodules=("features", "ml"))


def _params(d: Path) -> dict[str, Any]:
    return json.loads((d / "ok.json").read_text())["params"]


# --------------------------------------------------------------------------- data


def _true_weights(dim: int) -> np.ndarray:
    return (np.random.default_rng([DATA_SEED, dim, 0]).standard_normal(dim) / np.sqrt(dim)).astype(
        np.float32
    )


def _rows(dim: int, start: int, n: int, stream: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Rows [start, start + n) of the seeded problem: N(0, 1) features, label 1 where
    x·w + noise > 0 (noise 0.1·N(0, 1): about 97 % reachable accuracy)."""
    rng = np.random.default_rng([DATA_SEED, dim, stream, start])
    X = rng.standard_normal((n, dim), dtype=np.float32)
    noise = rng.standard_normal(n, dtype=np.float32) * np.float32(0.1)
    y = ((X @ _true_weights(dim) + noise) > 0).astype(np.float32)
    return X, y


def _test_set(dim: int) -> tuple[np.ndarray, np.ndarray]:
    return _cached(f"test:{dim}", lambda: _rows(dim, 0, TEST_ROWS, stream=2))


def _write_store(d: Path, rows: int, dim: int, log: Callable[[str], None]) -> None:
    from mmapkit import FeatureStore

    log(f"generating a {rows:,} x {dim} float32 FeatureStore ...")
    chunk = max(1, (512 << 20) // (dim * 4))
    with FeatureStore(d / "store", "w", dim=dim) as fs:
        for start in range(0, rows, chunk):
            fs.add(*_rows(dim, start, min(chunk, rows - start)))


def _write_text(d: Path, rows: int, dim: int) -> None:
    """The article's file: each row's floats as text, each followed by a comma, rows
    back to back; plus the end offset of every row (the article's `positions`)."""
    X, _ = _rows(dim, 0, rows)
    fmt = "%.9g," * dim  # float32 round-trips exactly through 9 significant digits
    ends = np.empty(rows, dtype=np.int64)
    pos = 0
    with open(d / "text.partial", "wb") as f:
        for i in range(rows):
            line = (fmt % tuple(X[i].tolist())).encode()
            f.write(line)
            pos += len(line)
            ends[i] = pos
    np.save(d / "text.ends.npy", ends)
    os.replace(d / "text.partial", d / "text.csv")


def _write_int16(path: Path, nbytes: int, log: Callable[[str], None]) -> None:
    """Uniform int16 over the whole range (like the `arrays` suite's), as a .npy."""
    log(f"generating {nbytes:,} bytes of random int16 ({path.name}) ...")
    n = nbytes // 2
    tmp = path.with_name(path.name + ".partial")
    block = 1 << 28
    with open(tmp, "wb") as f:
        np.lib.format.write_array_header_1_0(
            f, {"descr": "<i2", "fortran_order": False, "shape": (n,)}
        )
        for start in range(0, n, block):
            rng = np.random.default_rng([DATA_SEED, 16, start])
            rng.integers(
                -32768, 32767, size=min(block, n - start), dtype=np.int16, endpoint=True
            ).tofile(f)
    os.replace(tmp, path)


# --------------------------------------------------------------------------- shared state


_STATE: dict[str, Any] = {}


def _cached(key: str, make: Callable[[], Any]) -> Any:
    if key not in _STATE:
        _STATE[key] = make()
    return _STATE[key]


class _RssAnon:
    """Samples this process's RssAnon (anonymous resident memory: RSS minus file-backed
    and shared pages) every `period` seconds in a thread; `peak` is the largest seen."""

    def __init__(self, period: float = 0.05) -> None:
        self.period, self.peak, self.start = period, 0, 0
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)

    @staticmethod
    def now() -> int:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("RssAnon:"):
                return int(line.split()[1]) * 1024
        return 0

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, self.now())
            self._stop.wait(self.period)

    def __enter__(self) -> Self:
        self.peak = self.start = self.now()
        self._t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._t.join()
        self.peak = max(self.peak, self.now())


# --------------------------------------------------------------------------- 1. train


def _accuracy(w: np.ndarray, b: float, dim: int) -> float:
    X, y = _test_set(dim)
    return float(np.mean(((X @ np.asarray(w, np.float32) + np.float32(b)) > 0) == (y > 0.5)))


def _trained(
    d: Path,
    w: np.ndarray,
    b: float,
    seconds: float,
    cpu: float,
    rows: int,
    extra: dict[str, float] | None = None,
) -> Measured:
    """The answer of a training run: whether it learned (held-out accuracy above
    MIN_ACCURACY); the time is the epoch's (`seconds` scaled from `rows` trained)."""
    p = _params(d)
    acc = _accuracy(w, b, p["dim"])
    epoch = seconds * p["rows"] / rows
    metrics = {
        "accuracy": acc,
        "rows_per_s": rows / seconds,
        "rows_per_cpu_s": rows / max(cpu, 1e-9),
        "cpu_s_per_m_rows": cpu * 1e6 / rows,
        **(extra or {}),
    }
    return Measured(bool(acc > MIN_ACCURACY and np.all(np.isfinite(w))), metrics, seconds=epoch)


def _one_blas_thread(fn: Callable[[Path], Measured]) -> Callable[[Path], Measured]:
    """Runs a training contender with BLAS limited to one thread: the goal is per core,
    and on a shared 2-core machine OpenBLAS's spinning second thread only adds noise."""

    @functools.wraps(fn)  # its name and docstring: the report's and the API's
    def run(d: Path) -> Measured:
        try:
            from threadpoolctl import threadpool_limits
        except ImportError:
            return fn(d)
        with threadpool_limits(limits=1, user_api="blas"):
            return fn(d)

    return run


def _clock() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


class _TextStore:
    """The article's `Feature` store, read side: a mapped file of comma-terminated
    floats and the end offset of every row; get(start, end) returns the bytes."""

    def __init__(self, d: Path) -> None:
        self.f = open(d / "text.csv", "rb")
        self.mm = mmap.mmap(self.f.fileno(), 0, access=mmap.ACCESS_READ)
        self.ends = np.load(d / "text.ends.npy")

    def get(self, start: int, end: int) -> bytes:
        lo = int(self.ends[start - 1]) if start > 0 else 0
        return self.mm[lo : int(self.ends[end - 1])]

    def close(self) -> None:
        self.mm.close()
        self.f.close()


@contender(
    "text store (article)",
    "train",
    note="the article's design reproduced: rows as comma-terminated `%.9g` text in a "
    "mapped file, each batch's bytes decoded, `split(',')`, parsed with "
    "`float()` into `np.array(...).reshape(-1, d)`, then the article's update "
    "(float64, `1/(1+exp(-h))`). Times a prefix of the rows (see the task) and "
    "scales it to the epoch.",
)
@_one_blas_thread
def train_text(d: Path) -> Measured:
    """One epoch of logistic regression from the text (CSV) copy, parsed in chunks."""
    p = _params(d)
    n, m = p["text_rows"], p["dim"]
    _, labels = _rows(m, 0, n)
    labels = labels.astype(np.float64)
    store = _TextStore(d)
    weights = np.zeros(m)
    bias = 0.0
    t0, c0 = _clock()
    for start in range(0, n, BATCH):
        end = min(start + BATCH, n)
        data = store.get(start, end).decode().split(",")
        data = np.array([float(x) for x in data if x != ""]).reshape(-1, m)
        h = bias + np.dot(weights, data.T)
        probs = 1.0 / (1.0 + np.exp(-h))
        r = probs - labels[start:end]
        weights -= LR * np.dot(r, data)
        bias -= LR * np.sum(r)
    t1, c1 = _clock()
    store.close()
    return _trained(d, weights, bias, t1 - t0, c1 - c0, n)


def _npy_memmaps(d: Path) -> tuple[np.ndarray, np.ndarray]:
    s = d / "store"
    return np.load(s / "features.npy", mmap_mode="r"), np.load(s / "labels.npy", mmap_mode="r")


def _numpy_epoch(X: np.ndarray, Y: np.ndarray, n: int) -> tuple[np.ndarray, float]:
    """The update rule in a plain numpy loop over views of a memmap (what a user writes)."""
    w = np.zeros(X.shape[1], dtype=np.float32)
    b = np.float32(0)
    lr = np.float32(LR)
    for s in range(0, n, BATCH):
        x, y = X[s : s + BATCH], Y[s : s + BATCH]
        p = 1 / (1 + np.exp(-(x @ w + b)))
        r = p - y
        w -= lr * (r @ x)
        b -= lr * r.sum()
    return w, float(b)


@contender(
    "np.memmap + numpy",
    "train",
    note="`np.load(features.npy, mmap_mode='r')` (an `np.memmap`) and a numpy loop: "
    "per batch of 64 views, `p = 1/(1+exp(-(x@w+b)))`, `w -= lr*((p-y)@x)`, "
    "`b -= lr*sum(p-y)`, float32.",
)
@_one_blas_thread
def train_memmap(d: Path) -> Measured:
    """One epoch of logistic regression in numpy over ``np.memmap`` of the ``.npy`` files."""
    X, Y = _npy_memmaps(d)
    n = _params(d)["rows"]
    t0, c0 = _clock()
    with np.errstate(over="ignore"):  # exp(-z) overflows to inf for very negative z: p = 0
        w, b = _numpy_epoch(X, Y, n)
    t1, c1 = _clock()
    return _trained(d, w, b, t1 - t0, c1 - c0, n)


def _train_sklearn(d: Path, batch: int) -> Measured:
    try:
        from sklearn.linear_model import SGDClassifier
    except ImportError as exc:
        raise Unavailable("scikit-learn not installed") from exc
    X, Y = _npy_memmaps(d)
    n = _params(d)["rows"]
    clf = SGDClassifier(loss="log_loss")
    classes = np.array([0.0, 1.0], dtype=np.float32)
    t0, c0 = _clock()
    for s in range(0, n, batch):
        clf.partial_fit(X[s : s + batch], Y[s : s + batch], classes=classes)
    t1, c1 = _clock()
    return _trained(d, clf.coef_.ravel(), float(clf.intercept_[0]), t1 - t0, c1 - c0, n)


@contender(
    "sklearn partial_fit",
    "train",
    note="scikit-learn `SGDClassifier(loss='log_loss')` (default settings) "
    "`.partial_fit(X, y, classes=[0, 1])` per batch of 64 views of the memmap.",
)
@_one_blas_thread
def train_sklearn(d: Path) -> Measured:
    """One epoch of scikit-learn's ``SGDClassifier.partial_fit`` in batches."""
    return _train_sklearn(d, BATCH)


@contender(
    f"sklearn partial_fit, batch {BIG_BATCH}",
    "train",
    note=f"the same with batches of {BIG_BATCH} rows (not the same work: 64× fewer "
    "updates; shown because each `partial_fit` call costs about 0.7 ms of input "
    "validation, which batches of 64 cannot amortise).",
)
@_one_blas_thread
def train_sklearn_big(d: Path) -> Measured:
    """As :func:`train_sklearn`, with the large batch."""
    return _train_sklearn(d, BIG_BATCH)


def _fit(d: Path, shuffle: bool, batch: int = BATCH) -> Measured:
    mk = mmapkit_module("features", "ml")
    from mmapkit.ml import StreamingLogisticRegression

    with mk.FeatureStore(d / "store") as fs:
        # The article's rule on raw features, one pass: the same work as the other
        # contenders (not the model's defaults, which standardise and run to convergence).
        model = StreamingLogisticRegression(
            lr=LR,
            reduction="sum",
            schedule="constant",
            standardize=False,
            epochs=1,
            tol=None,
            batch_size=batch,
            shuffle=shuffle,
            random_state=0,
            l2=0.0,
            progress=False,
        )
        with _RssAnon() as rss:
            t0, c0 = _clock()
            model.fit(fs)
            t1, c1 = _clock()
        assert model.coef_ is not None
        return _trained(
            d,
            model.coef_.ravel(),
            float(model.intercept_[0]),
            t1 - t0,
            c1 - c0,
            len(fs),
            {"rss_anon": rss.peak, "rss_anon_growth": rss.peak - rss.start},
        )


@contender(
    "mmapkit sequential",
    "train",
    available=_need("FeatureStore"),
    note="`StreamingLogisticRegression(lr=0.01, reduction='sum', schedule='constant', "
    "standardize=False, epochs=1, tol=None, batch_size=64, shuffle=False)"
    ".fit(FeatureStore(path))` (the article's rule, not the model's defaults): zero-copy "
    "views; a prefetch thread touching the next pages once a group's pages come from "
    "storage (none when the store is in the page cache).",
)
@_one_blas_thread
def train_mmapkit(d: Path) -> Measured:
    """One epoch of ``StreamingLogisticRegression`` over the store, in row order."""
    return _fit(d, shuffle=False)


@contender(
    "mmapkit shuffled",
    "train",
    available=_need("FeatureStore"),
    note="the same with `shuffle=True, seed=0`: a seeded permutation of blocks of 8 rows, "
    "gathered in Rust per group of ~4 MiB by the core's gathering thread (no GIL), so the "
    "copy overlaps the training loop.",
)
@_one_blas_thread
def train_mmapkit_shuffled(d: Path) -> Measured:
    """As :func:`train_mmapkit`, with shuffled batches."""
    return _fit(d, shuffle=True)


@contender(
    f"mmapkit sequential, batch {BIG_BATCH}",
    "train",
    available=_need("FeatureStore"),
    note=f"`mmapkit sequential` with batches of {BIG_BATCH} rows (the peer of the "
    "large-batch scikit-learn row).",
)
@_one_blas_thread
def train_mmapkit_big(d: Path) -> Measured:
    """As :func:`train_mmapkit`, with the large batch."""
    return _fit(d, shuffle=False, batch=BIG_BATCH)


# --------------------------------------------------------------------------- 2. out of core


@contender(
    "read loop",
    "train_ooc",
    note="`readinto` of the whole `features.npy` into one reusable 8 MiB buffer: the "
    "disk's sequential read speed (cold) in the same run.",
)
def ooc_read(d: Path) -> Measured:
    """Reads the store's features once, recording anonymous memory (the baseline)."""
    with _RssAnon() as rss:
        prime([d / "store" / "features.npy"])
    return Measured(True, {"rss_anon": rss.peak, "rss_anon_growth": rss.peak - rss.start})


@contender("np.memmap + numpy", "train_ooc")
@_one_blas_thread
def ooc_memmap(d: Path) -> Measured:
    """The numpy ``np.memmap`` epoch, recording anonymous memory."""
    with _RssAnon() as rss:
        m = train_memmap(d)
    m.metrics.update(rss_anon=rss.peak, rss_anon_growth=rss.peak - rss.start)
    return m


@contender("mmapkit sequential", "train_ooc")
@_one_blas_thread
def ooc_mmapkit(d: Path) -> Measured:
    """The mmapkit epoch over a store larger than memory."""
    return _fit(d, shuffle=False)


# --------------------------------------------------------------------------- 3. loader

LOADER_SEED = 0
#: Loader contenders: name -> (order, mmapkit counterpart for the ratio).
SEQ, SHUF = "sequential", "shuffled"
MK_SEQ, MK_SHUF = "mmapkit.torch sequential", "mmapkit.torch shuffled"
MEMMAP_SEQ, MEMMAP_SHUF = "np.memmap batch Dataset sequential", "np.memmap batch Dataset shuffled"
RAM_SEQ, RAM_SHUF = "in-RAM tensor slices", "in-RAM tensor randperm"
PER_ROW = "per-row np.memmap Dataset (extra, not a peer)"


def _loader_pass(make: Callable[[], Any], row_bytes: int) -> Measured:
    """One timed pass over the iterable `make()` returns (made inside the timing: a
    sampler's permutation is part of the epoch) -> (rows, sum of the labels), rows/s
    and GB/s (rows x bytes per row, features and label)."""
    rows, total = 0, 0.0
    t0 = time.perf_counter()
    for X, y in make():
        rows += X.shape[0]
        total += float(y.double().sum())
    secs = time.perf_counter() - t0
    return Measured(
        (rows, round(total, 3)),
        {"rows_per_s": rows / secs, "gb_per_s": rows * row_bytes / secs / 1e9},
        seconds=secs,
    )


def _row_bytes(d: Path) -> int:
    return int(_params(d)["dim"]) * 4 + 4


class MemmapBatches:
    """The strongest simple peer: a batch-aware map-style Dataset over
    `np.load(mmap_mode="c")` (copy-on-write, so its views make writable tensors with no
    copy); a key is a slice (sequential: views) or a list of rows from a `BatchSampler`
    (shuffled: one sorted fancy-index gather). Module-level so workers can pickle it."""

    def __init__(self, store_dir: str) -> None:
        self.X = np.load(os.path.join(store_dir, "features.npy"), mmap_mode="c")
        self.y = np.load(os.path.join(store_dir, "labels.npy"), mmap_mode="c")

    def __len__(self) -> int:
        return len(self.y)

    def __getitem__(self, key: Any) -> Any:
        import torch

        if not isinstance(key, slice):
            key = np.sort(np.asarray(key))
        return torch.from_numpy(self.X[key]), torch.from_numpy(self.y[key])


class MemmapRows:
    """The per-row Dataset (an extra row, not a peer): single rows of an np.memmap,
    batched by the default sampler and collate. Module-level so workers can pickle it."""

    def __init__(self, store_dir: str, rows: int) -> None:
        self.dir, self.rows = store_dir, rows
        self.X = np.load(os.path.join(store_dir, "features.npy"), mmap_mode="r")
        self.y = np.load(os.path.join(store_dir, "labels.npy"), mmap_mode="r")

    def __len__(self) -> int:
        return self.rows

    def __getitem__(self, i: int) -> Any:
        import torch

        return torch.tensor(self.X[i]), torch.tensor(self.y[i])


def _torch() -> Any:
    try:
        import torch
        import torch.utils.data
    except ImportError as exc:
        raise Unavailable("torch not installed (the `torch` extra)") from exc
    return torch


def _loader(key: str, make: Callable[[dict[str, Any]], Any], workers: int) -> Any:
    """A DataLoader made once per contender and size; with workers, persistent ones
    (started by the untimed warm-up pass, stopped by the task's teardown)."""
    extra = {"persistent_workers": True} if workers else {}
    return _cached(f"loader:{key}", lambda: make(extra))


def _drop_loaders(_ds: Dataset) -> None:
    for k in [k for k in _STATE if k.startswith(("loader:", "ram:"))]:
        del _STATE[k]  # the iterator's __del__ stops persistent workers
    import gc

    gc.collect()


def _slices(rows: int) -> list[slice]:
    return [slice(s, min(s + LOADER_BATCH, rows)) for s in range(0, rows, LOADER_BATCH)]


def _loader_mmapkit(shuffle: bool, workers: int) -> Callable[[Path], Any]:
    def run(d: Path) -> Any:
        torch = _torch()
        from mmapkit.torch import FeatureBatchSampler, FeatureDataset

        def make(extra: dict[str, Any]) -> Any:
            ds = FeatureDataset(d / "store", batch_size=LOADER_BATCH)
            ds.rows = _params(d)["loader_rows"]  # the prefix every loader reads
            sampler = FeatureBatchSampler(ds, LOADER_BATCH, shuffle=shuffle, seed=LOADER_SEED)
            return torch.utils.data.DataLoader(
                ds, sampler=sampler, batch_size=None, num_workers=workers, **extra
            )

        loader = _loader(f"mmapkit{shuffle}{workers}:{d}", make, workers)
        return _loader_pass(lambda: loader, _row_bytes(d))

    return run


def _loader_memmap(shuffle: bool, workers: int) -> Callable[[Path], Any]:
    def run(d: Path) -> Any:
        torch = _torch()
        tud = torch.utils.data

        def make(extra: dict[str, Any]) -> Any:
            rows = _params(d)["loader_rows"]
            sampler: Any = (
                tud.BatchSampler(
                    tud.RandomSampler(
                        range(rows), generator=torch.Generator().manual_seed(LOADER_SEED)
                    ),
                    LOADER_BATCH,
                    drop_last=False,
                )
                if shuffle
                else _slices(rows)
            )
            return tud.DataLoader(
                MemmapBatches(str(d / "store")),
                sampler=sampler,
                batch_size=None,
                num_workers=workers,
                **extra,
            )

        loader = _loader(f"memmap{shuffle}{workers}:{d}", make, workers)
        return _loader_pass(lambda: loader, _row_bytes(d))

    return run


def _loader_ram(shuffle: bool) -> Callable[[Path], Any]:
    def run(d: Path) -> Any:
        torch = _torch()

        def load() -> Any:
            rows = _params(d)["loader_rows"]
            X, y = _npy_memmaps(d)
            return torch.from_numpy(np.array(X[:rows])), torch.from_numpy(np.array(y[:rows]))

        X, y = _cached(f"ram:{d}", load)
        n, bs = len(y), LOADER_BATCH

        def batches() -> Any:
            if not shuffle:
                return ((X[s : s + bs], y[s : s + bs]) for s in range(0, n, bs))
            perm = torch.randperm(n, generator=torch.Generator().manual_seed(LOADER_SEED))
            return ((X.index_select(0, i), y.index_select(0, i)) for i in perm.split(bs))

        return _loader_pass(batches, _row_bytes(d))

    return run


def _loader_rows(d: Path) -> Any:
    torch = _torch()

    def make(extra: dict[str, Any]) -> Any:
        ds = MemmapRows(str(d / "store"), _params(d)["loader_rows"])
        return torch.utils.data.DataLoader(ds, batch_size=LOADER_BATCH)

    loader = _loader(f"rows:{d}", make, 0)
    return _loader_pass(lambda: loader, _row_bytes(d))


_SEQ_KEYS = f"a sampler of slices of {LOADER_BATCH} rows"
contender(
    MK_SEQ,
    "loader",
    available=_need("FeatureStore"),
    note="`mmapkit.torch.data_loader(path, 256)`: `DataLoader(FeatureDataset(path), "
    f"sampler=FeatureBatchSampler(...), batch_size=None)`, {_SEQ_KEYS}: "
    "`torch.from_numpy` of the mapped rows, no copy.",
)(_loader_mmapkit(False, 0))
contender(
    MK_SHUF,
    "loader",
    available=_need("FeatureStore"),
    note=f"`data_loader(path, 256, shuffle=True, seed={LOADER_SEED})`: rows in "
    "`batch_order` (a seeded permutation of blocks of 32 rows), each batch gathered by "
    "the Rust core (GIL released).",
)(_loader_mmapkit(True, 0))
contender(
    MEMMAP_SEQ,
    "loader",
    note="the peer a competent user writes: `MemmapBatches`, a map-style Dataset over "
    '`np.load(..., mmap_mode="c")` whose `__getitem__` takes a whole batch\'s key, '
    f"`DataLoader(ds, sampler=<{_SEQ_KEYS}>, batch_size=None)`: "
    "`torch.from_numpy` of the memmap's views, no copy.",
)(_loader_memmap(False, 0))
contender(
    MEMMAP_SHUF,
    "loader",
    note="the same Dataset driven by `BatchSampler(RandomSampler(range(n), "
    f"generator=seed {LOADER_SEED}), 256)`: each batch's row list sorted and gathered "
    "with one numpy fancy index (a full row permutation: more random than mmapkit's "
    "blocks, and more scattered reads).",
)(_loader_memmap(True, 0))
contender(
    RAM_SEQ,
    "loader",
    note="the rows loaded into RAM first (untimed: `torch.from_numpy(np.array(X[:n]))`), "
    "then `X[s:s+256]` slices in a loop: the in-memory limit.",
)(_loader_ram(False))
contender(
    RAM_SHUF,
    "loader",
    note="the same tensors, `perm = torch.randperm(n)` (timed) and "
    "`X.index_select(0, i), y.index_select(0, i)` for `i in perm.split(256)` (10-20× "
    "faster than `X[i]`): in-memory shuffling (a full row permutation).",
)(_loader_ram(True))
contender(
    f"{MK_SEQ}, 2 workers",
    "loader",
    available=_need("FeatureStore"),
    note=f"`{MK_SEQ}` with `num_workers=2` (forked, persistent): each "
    "batch crosses to the main process through a new shared-memory segment.",
)(_loader_mmapkit(False, 2))
contender(
    f"{MEMMAP_SEQ}, 2 workers",
    "loader",
    note=f"`{MEMMAP_SEQ}` with `num_workers=2` (forked, persistent).",
)(_loader_memmap(False, 2))
contender(
    PER_ROW,
    "loader",
    note=f"shown only for scale, not a peer: `DataLoader(MemmapRows(path), batch_size="
    f"{LOADER_BATCH})`, one `__getitem__` per row (`torch.tensor(X[i]), torch.tensor(y[i])` "
    "of an `np.memmap`), the default sampler and collate.",
)(_loader_rows)

#: (contender, its mmapkit counterpart): the ratios the report's notes give.
LOADER_PEERS = (
    (MEMMAP_SEQ, MK_SEQ),
    (RAM_SEQ, MK_SEQ),
    (MEMMAP_SHUF, MK_SHUF),
    (RAM_SHUF, MK_SHUF),
    (f"{MEMMAP_SEQ}, 2 workers", f"{MK_SEQ}, 2 workers"),
    (PER_ROW, MK_SEQ),
)


# --------------------------------------------------------------------------- 5. gpu

GPU_LR = 0.5  # mean-reduced logistic regression: a few hundred large-batch steps learn
GPU_DEVICE = "cuda"  # (a dry run of the code on a machine without one sets "cpu")


def _cuda() -> Any:
    torch = _torch()
    if not torch.cuda.is_available():
        raise Unavailable(GPU_SKIP)
    return torch


GPU_SKIP = "no CUDA device (torch.cuda.is_available() is false): the gpu part is skipped"


def _gpu_train(d: Path, make: Callable[[], Any], row_order: str) -> Measured:
    """One epoch of mean-reduced logistic regression on the GPU over the batches
    `make()` yields (host tensors are sent with `.to(device, non_blocking=True)`; a
    loader's device tensors are used as they come); timed from `make()` to the last
    update's completion (`torch.cuda.synchronize`). Answer: (rows, learned)."""
    torch = _cuda()
    p = _params(d)
    dev = torch.device(GPU_DEVICE)
    w = torch.zeros(p["dim"], device=dev)
    b = torch.zeros((), device=dev)
    rows = 0
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for Xb, yb in make():
        X = Xb.to(dev, non_blocking=True)
        r = torch.sigmoid(X @ w + b) - yb.to(dev, non_blocking=True)
        w -= (GPU_LR / len(r)) * (r @ X)
        b -= GPU_LR * r.mean()
        rows += len(r)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    acc = _accuracy(w.cpu().numpy(), float(b), p["dim"])
    nbytes = rows * (p["dim"] * 4 + 4)
    metrics = {"rows_per_s": rows / secs, "gb_per_s": nbytes / secs / 1e9, "accuracy": acc}
    _gpu_partial(d, row_order, metrics)
    return Measured((rows, bool(acc > MIN_ACCURACY)), metrics, seconds=secs)


def _gpu_partial(d: Path, name: str, metrics: dict[str, float]) -> None:
    """Each gpu run as it ends, on stderr and (with $MMAPKIT_BENCH_PARTIAL) appended to
    that JSON-lines file: a run cut short by a time limit keeps what it measured."""
    from ..harness import log

    log(f"    gpu run: {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in metrics.items()))
    out = os.environ.get("MMAPKIT_BENCH_PARTIAL")
    if out:
        with open(out, "a") as f:
            f.write(json.dumps({"size": d.name, "contender": name, **metrics}) + "\n")


def _gpu_store(d: Path) -> Any:
    from mmapkit import FeatureStore

    return _cached(f"gpustore:{d}", lambda: FeatureStore(d / "store"))


def _gpu_contender(name: str, note: str) -> Callable[[Callable[[Path], Any]], Any]:
    """A gpu task contender: `fn(d)` returns the callable that makes its epoch's batches."""

    def register(fn: Callable[[Path], Any]) -> Any:
        @functools.wraps(fn)
        def run(d: Path) -> Measured:
            _cuda()
            return _gpu_train(d, fn(d), name)

        return contender(name, "gpu", note=note)(run)

    return register


@_gpu_contender(
    "FeatureStore.batches sequential",
    "`for X, y in fs.batches(B)`: zero-copy views, `torch.from_numpy(X).to('cuda', "
    "non_blocking=True)` (pageable memory: a synchronous copy).",
)
def gpu_batches_seq(d: Path) -> Any:
    """An epoch of ``FeatureStore.batches`` in order, each batch copied to the GPU."""
    torch = _torch()
    fs, bs = _gpu_store(d), _params(d)["batch"]
    return lambda: (
        (torch.from_numpy(X), torch.from_numpy(y)) for X, y in _writable(fs.batches(bs))
    )


@_gpu_contender(
    "FeatureStore.batches shuffled",
    "`fs.batches(B, shuffle=True, seed=0)`: each group gathered by the Rust core "
    "(its gathering thread), then copied like the sequential row.",
)
def gpu_batches_shuf(d: Path) -> Any:
    """As :func:`gpu_batches_seq`, shuffled."""
    torch = _torch()
    fs, bs = _gpu_store(d), _params(d)["batch"]
    return lambda: (
        (torch.from_numpy(X), torch.from_numpy(y))
        for X, y in _writable(fs.batches(bs, shuffle=True, seed=0))
    )


def _writable(batches: Any) -> Any:
    """Batches with writable numpy flags (the mapping is copy-on-write; torch warns
    about read-only arrays otherwise)."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
        yield from batches


@_gpu_contender(
    "data_loader(pin_memory=True)",
    "`mmapkit.torch.data_loader(path, B, pin_memory=True)` (0 workers: torch's pin-memory "
    "thread copies each batch into pinned memory), then `.to('cuda', non_blocking=True)`.",
)
def gpu_data_loader(d: Path) -> Any:
    """An epoch of ``mmapkit.torch.data_loader`` (pinned), each batch copied to the GPU."""
    from mmapkit.torch import data_loader

    loader = data_loader(d / "store", _params(d)["batch"], pin_memory=True)
    return lambda: loader


@_gpu_contender(
    'np.load(mmap_mode="r") slices',
    '`X = np.load(features.npy, mmap_mode="r")`, `torch.from_numpy(X[s:s+B])` '
    "(through `np.asarray`: a read-only view) `.to('cuda')` per batch.",
)
def gpu_npy_slices(d: Path) -> Any:
    """An epoch of ``np.memmap`` slices copied to the GPU (the plain peer)."""
    torch = _torch()
    X, y = _npy_memmaps(d)
    bs, n = _params(d)["batch"], _params(d)["rows"]
    return lambda: _writable(
        (torch.from_numpy(X[s : s + bs]), torch.from_numpy(y[s : s + bs])) for s in range(0, n, bs)
    )


def _gpu_ram(d: Path) -> Any:
    torch = _torch()

    def load() -> Any:
        X, y = _npy_memmaps(d)
        return torch.from_numpy(np.array(X)), torch.from_numpy(np.array(y))

    return _cached(f"gpuram:{d}", load)


@_gpu_contender(
    "in-RAM tensor randperm",
    "the whole set in RAM first (untimed), `perm = torch.randperm(n)`, "
    "`X.index_select(0, i)` for `i in perm.split(B)` (torch's gather) then "
    "`.to('cuda', non_blocking=True)`.",
)
def gpu_ram_randperm(d: Path) -> Any:
    """An epoch from tensors in RAM indexed by ``torch.randperm`` (the in-memory peer)."""
    torch = _torch()
    X, y = _gpu_ram(d)
    bs = _params(d)["batch"]

    def batches() -> Any:
        perm = torch.randperm(len(y), generator=torch.Generator().manual_seed(0))
        return ((X.index_select(0, i), y.index_select(0, i)) for i in perm.split(bs))

    return batches


def _device_epochs(d: Path, **kw: Any) -> Callable[[], Any]:
    """The epochs of one ``mmapkit.torch.device_loader(store, B, device=GPU, **kw)``,
    made once per data set (its staging ring and registration reused across runs)."""
    from mmapkit.torch import device_loader

    key = f"gpudev:{d}:" + ",".join(f"{k}={v}" for k, v in sorted(kw.items()))
    loader = _cached(
        key, lambda: device_loader(d / "store", _params(d)["batch"], device=GPU_DEVICE, **kw)
    )
    return lambda: loader


@_gpu_contender(
    "mmapkit device_loader sequential",
    "`mmapkit.torch.device_loader(path, B)` (defaults): the store's pages registered with "
    "CUDA and each batch's runs of rows copied straight from them on a CUDA stream "
    "(`direct=None` picks this for runs of ≥ 256 KiB), else gathered by the Rust core "
    "into a ring of pinned buffers; gather, copy and compute overlap.",
)
def gpu_device_seq(d: Path) -> Any:
    """An epoch of ``mmapkit.torch.device_loader`` in order."""
    return _device_epochs(d)


@_gpu_contender(
    "mmapkit device_loader shuffled",
    "`device_loader(path, B, shuffle=True, seed=0)`: the same with `batch_order`'s "
    "block-shuffled rows (blocks of B/8 rows: 2 MiB runs, copied straight).",
)
def gpu_device_shuf(d: Path) -> Any:
    """As :func:`gpu_device_seq`, shuffled."""
    return _device_epochs(d, shuffle=True, seed=0)


@_gpu_contender(
    "mmapkit device_loader sequential, staging",
    "`device_loader(path, B, direct=False)`: the defaults' row without the direct path: "
    "every batch gathered into the pinned ring by the Rust core, then copied.",
)
def gpu_staging_seq(d: Path) -> Any:
    """An epoch of ``device_loader`` in order through the host staging ring."""
    return _device_epochs(d, direct=False)


@_gpu_contender(
    "mmapkit device_loader shuffled, staging",
    "`device_loader(path, B, shuffle=True, seed=0, direct=False)`: as the shuffled row, "
    "every batch gathered on the host (16 threads) into the pinned ring, then copied.",
)
def gpu_staging_shuf(d: Path) -> Any:
    """As :func:`gpu_staging_seq`, shuffled."""
    return _device_epochs(d, shuffle=True, seed=0, direct=False)


@contender(
    "limit: pinned host-to-device copy",
    "gpu",
    note="not a loader: the same bytes (features and labels) copied batch by batch from "
    "one pinned host buffer into one GPU buffer (`copy_(non_blocking=True)`), no model: "
    "the bus's rate.",
)
def gpu_limit_h2d(d: Path) -> Measured:
    """Host-to-device copies of pinned batches alone: the bus's limit."""
    torch = _cuda()
    p = _params(d)
    bs, n = p["batch"], p["rows"]
    X, y = _gpu_ram(d)
    Xp, yp = X[:bs].pin_memory(), y[:bs].pin_memory()
    Xd, yd = torch.empty_like(Xp, device=GPU_DEVICE), torch.empty_like(yp, device=GPU_DEVICE)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for s in range(0, n, bs):
        m = min(bs, n - s)
        Xd[:m].copy_(Xp[:m], non_blocking=True)
        yd[:m].copy_(yp[:m], non_blocking=True)
    torch.cuda.synchronize()
    secs = time.perf_counter() - t0
    metrics = {"rows_per_s": n / secs, "gb_per_s": n * (p["dim"] * 4 + 4) / secs / 1e9}
    _gpu_partial(d, "limit: pinned host-to-device copy", metrics)
    return Measured((n, True), metrics, seconds=secs)


@_gpu_contender(
    "limit: all on the GPU, randperm",
    "not a loader: the whole set copied to the GPU first (untimed), then `randperm` "
    "gathers on the GPU feeding the same model: the compute-side limit.",
)
def gpu_limit_resident(d: Path) -> Any:
    """Batches indexed from tensors already on the GPU: the device's limit."""
    torch = _torch()
    X, y = _cached(f"gpures:{d}", lambda: tuple(t.to(GPU_DEVICE) for t in _gpu_ram(d)))
    bs = _params(d)["batch"]

    def batches() -> Any:
        perm = torch.randperm(len(y), device=GPU_DEVICE)
        return ((X.index_select(0, i), y.index_select(0, i)) for i in perm.split(bs))

    return batches


def _drop_gpu(_ds: Dataset) -> None:
    for k in [k for k in _STATE if k.startswith(("gpu",))]:
        del _STATE[k]
    import gc

    gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except ImportError:
        pass


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


# --------------------------------------------------------------------------- 4. median


def _client() -> Any:
    def make() -> Any:
        try:
            import distributed
        except ImportError as exc:
            raise Unavailable("distributed not installed (the `dask` extra)") from exc
        cluster = distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        )
        client = distributed.Client(cluster)
        atexit.register(lambda: (client.close(), cluster.close()))
        return client

    return _cached("client", make)


def _dask_x(d: Path) -> Any:
    from mmapkit.dask import to_dask_array

    return to_dask_array(str(d / "median.npy"))


def _exact(d: Path) -> float:
    return float(json.loads((d / "median.json").read_text())["median"])


@contender(
    "mmapkit.dask.median",
    "median",
    available=_need("FeatureStore"),
    note="`mmapkit.dask.median(to_dask_array(path))` on the cluster: exact "
    "(mergeable per-chunk histograms of the keys; int16 needs one pass).",
)
def median_mmapkit(d: Path) -> Measured:
    """The exact per-feature median over a dask cluster with ``mmapkit.dask.median``."""
    _client()
    import mmapkit.dask as mkd

    x = _dask_x(d)
    t0 = time.perf_counter()
    m = float(mkd.median(x))
    return Measured(m, {"error": abs(m - _exact(d))}, seconds=time.perf_counter() - t0)


@contender(
    "dask percentile",
    "median",
    note="`dask.array.percentile(x, 50)` on the cluster, same dask array: approximate "
    "(per-chunk percentiles merged); passes when within "
    f"±{MEDIAN_TOLERANCE} of the exact median, `error` shows by how much it missed.",
)
def median_dask(d: Path) -> Measured:
    """Dask's own per-feature median (approximate for chunked arrays)."""
    _client()
    import dask.array as da

    x = _dask_x(d)
    t0 = time.perf_counter()
    est = float(np.asarray(da.percentile(x, 50).compute()).ravel()[0])
    secs = time.perf_counter() - t0
    err = abs(est - _exact(d))
    return Measured(_exact(d) if err <= MEDIAN_TOLERANCE else est, {"error": err}, seconds=secs)


def _median_check(path: Path, result: Any) -> Any:
    exact = _exact(path)
    if result != exact:
        raise AssertionError(f"median {result} is not the exact {exact}")
    return result


# --------------------------------------------------------------------------- suite


def _rate(doc: dict[str, Any], size: str, task: str, contender: str) -> float | None:
    s = next((x for x in doc["sizes"] if x["label"] == size), None)
    r = next(
        (
            x
            for x in doc["results"]
            if (x["size"], x["task"], x["contender"], x["cache"])
            == (size, task, contender, "warm" if task != "train_ooc" else "cold")
        ),
        None,
    )
    if s is None or r is None or r["status"] != "ok" or not r.get("median"):
        return None
    return s["rows"] / r["median"]


def _loader_notes(doc: dict[str, Any]) -> list[str]:
    """Per loader size: each contender's rows/s and GB/s, and each peer's ratio to the
    mmapkit loader of the same order (> 1: the peer is faster)."""
    out = []
    for s in doc["sizes"]:
        rows = s.get("params", {}).get("loader_rows") or PARAMS.get(s["label"], {}).get(
            "loader_rows"
        )
        if not rows:
            continue
        rate = {
            r["contender"]: rows / r["median"]
            for r in doc["results"]
            if (r["size"], r["task"], r["cache"]) == (s["label"], "loader", "warm")
            and r["status"] == "ok"
            and r.get("median")
        }
        if not rate:
            continue
        row_bytes = s.get("dim", 64) * 4 + 4
        parts = [
            f"`{c}` {_human_rate(x)} rows/s = {x * row_bytes / 1e9:.2f} GB/s"
            for c, x in rate.items()
        ]
        ratios = [
            f"`{peer}` {rate[peer] / rate[mk]:.2f}× `{mk}`"
            for peer, mk in LOADER_PEERS
            if peer in rate and mk in rate
        ]
        out.append(
            f"loader at {s['label']} ({rows:,} rows of {row_bytes} bytes), median pass: "
            + ", ".join(parts)
            + ". Peer / mmapkit rates (same order): "
            + (", ".join(ratios) or "–")
            + "."
        )
    return out


def _human_rate(x: float | None) -> str:
    if x is None:
        return "–"
    return f"{x / 1e6:.2f} M" if x >= 1e6 else f"{x / 1e3:.1f} k"


class FeaturesSuite(Suite):
    """The ``features`` suite: training from a feature store, out of core, data loaders, exact
    cluster median.
    """

    name = "features"
    title = "training from a feature store, out of core, data loaders, exact cluster median"
    description = (
        "One epoch of mini-batch logistic regression (batch 64, the article's update rule) from "
        "the article's comma-separated text store, an `np.memmap` with a numpy loop, "
        "scikit-learn's `SGDClassifier.partial_fit` and `mmapkit.FeatureStore` + "
        "`mmapkit.ml.StreamingLogisticRegression` (sequential and shuffled); the same out of core "
        "on a store larger than RAM with the process's own memory and the disk's read speed; "
        "PyTorch `DataLoader` throughput with 0-2 workers; the exact median of an int16 array on "
        "a 2-worker dask `LocalCluster`, all in one run."
    )
    baseline = "np.memmap + numpy"
    reference = "np.memmap + numpy"
    layout = "rows"
    timing = (
        "time of the operation as the contender measures it (training loop, loader pass, "
        "or `compute()`; not opening files, starting the cluster or scoring the model)"
    )
    metrics = {
        "rows_per_s": {"title": "rows/s", "unit": ""},
        "gb_per_s": {"title": "GB/s (rows x bytes per row / time)", "unit": ""},
        "rows_per_cpu_s": {"title": "rows per CPU-second", "unit": ""},
        "cpu_s_per_m_rows": {"title": "CPU-seconds per 1 M rows", "unit": ""},
        "accuracy": {"title": "held-out accuracy", "unit": ""},
        "rss_anon": {"title": "own memory (RssAnon, whole process)", "unit": "bytes"},
        "rss_anon_growth": {"title": "RssAnon growth during the run", "unit": "bytes"},
        "error": {"title": "error of the median", "unit": ""},
    }
    limit = ("train_ooc", "read loop")
    headline = {
        "capability": "out-of-core training from a feature store",
        "label": "logistic regression, one epoch, d = 64",
        "task": "train",
        "contender": "mmapkit sequential",
        "peers": ["np.memmap + numpy", "sklearn partial_fit", "text store (article)"],
        "sizes": ["d64", "q64"],
    }

    tasks: tuple[Task, ...] = (
        Task(
            "train",
            "train one epoch (batch 64)",
            caches=("warm",),
            sizes=TRAIN_SIZES,
            repeats=capped(3, labelled("d1000")),
            note="one epoch of logistic regression, batch 64, lr 0.01, weights from zero; "
            "the answer is whether the model learned (held-out accuracy on 8192 fresh "
            f"rows above {MIN_ACCURACY}; the `accuracy` metric). The text design parses "
            "so slowly that it trains on a prefix (20 k rows at q64, 10 k at q128 and "
            "d1000, 100 k at d64) and its time is scaled to the whole epoch (its rows/s "
            "are measured on the prefix). Warm cache: the store is read once before. BLAS is "
            "limited to one thread (threadpoolctl) in every training contender.",
        ),
        Task(
            "train_ooc",
            "train one epoch out of core (30 GB > RAM)",
            caches=("cold",),
            sizes=("ooc",),
            repeats=capped(1, labelled("ooc")),
            note="30 M x 250 float32 (30 GB, more than the 23.5 GiB of RAM), page cache dropped "
            "before each run; one run per contender. `read loop` is the disk's sequential "
            "read speed for the same file in the same run (the `% of limit` column).",
        ),
        Task(
            "loader",
            "DataLoader pass, batch 256",
            caches=("warm",),
            sizes=LOADER_SIZES,
            throughput=False,
            teardown=_drop_loaders,
            repeats=capped(3, labelled("d64")),
            baseline=MEMMAP_SEQ,
            reference=MEMMAP_SEQ,
            note="one pass over the first 262 144 rows of the d = 64 store (32 768 at q64), "
            "batches of 256 rows as `(X, y)` tensors (answer: rows and the sum of the labels), "
            "sequential and shuffled; the peers are what a competent user writes (a "
            "batch-aware `np.memmap` Dataset, in-RAM tensors), the per-row Dataset is shown "
            "only for scale. Workers are forked (Linux default) and persistent: started by the "
            "untimed warm-up pass, so the timed passes are the steady-state throughput. GB/s "
            "(metric `gb_per_s`) = rows x 260 bytes / time; the harness's GB/s column is not "
            "shown (a prefix of the store is read).",
        ),
        Task(
            "gpu",
            "one epoch into a GPU model, batch 65,536",
            caches=("warm",),
            sizes=GPU_SIZES,
            teardown=_drop_gpu,
            repeats=capped(3, labelled("gpu")),
            baseline='np.load(mmap_mode="r") slices',
            reference='np.load(mmap_mode="r") slices',
            note="16 M x 64 float32 (4.3 GB; --quick: 1 M rows, batch 8192), warm, on a CUDA "
            "host (skipped with one line without one): each loader feeds one epoch of "
            "mean-reduced logistic regression trained on the GPU (lr 0.5), timed to the last "
            "update's completion; answer (rows, learned). The two `limit:` rows are not "
            "loaders: the pinned host-to-device copy rate and the whole set already on the "
            "GPU. GB/s column: feature bytes / time; metric `gb_per_s`: features and labels.",
        ),
        Task(
            "median",
            "exact median of the int16 array on a 2-worker cluster",
            caches=("warm",),
            sizes=("dask", "qdask"),
            baseline="dask percentile",
            reference="mmapkit.dask.median",
            check=_median_check,
            warmup=primed(labelled("dask", "qdask")),
            repeats=capped(3, labelled("dask")),
            note="`distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True)` "
            "started once (untimed). Both contenders get the same dask array "
            "(`mmapkit.dask.to_dask_array(path)`, 128 MiB chunks whose tasks carry the path "
            "and bounds: `da.from_array(np.memmap)` would put the data itself in the graph, "
            "dask #11850). The answer is checked against the exact median computed once "
            "with `mmapkit.stats.median`.",
        ),
    )

    contenders = CONTENDERS.contenders()

    def sizes(self, quick: bool) -> list[Size]:
        labels: tuple[str, ...] = (
            ("q64", "q128", "qdask", "qgpu") if quick else ("d64", "d1000", "dask", "ooc", "gpu")
        )
        if not _has_cuda():
            from ..harness import log

            log(f"features: gpu part: {GPU_SKIP}")
            labels = tuple(lb for lb in labels if lb not in GPU_SIZES)
        return [Size(lb, self._nbytes(PARAMS[lb])) for lb in labels]

    @staticmethod
    def _nbytes(p: dict[str, Any]) -> int:
        return p["int16"] if "int16" in p else p["rows"] * p["dim"] * 4

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        p = PARAMS[size.label]
        d = data_dir / f"features-{size.label}-s{DATA_SEED}"
        d.mkdir(parents=True, exist_ok=True)
        want = {"params": p, "seed": DATA_SEED, "generator": GENERATOR_VERSION}

        def make() -> dict[str, Any]:
            need_space(
                d,
                size.nbytes + (2 << 30),
                f"the {size.label} `features` data",
                "with 2 GiB spare; use --quick",
            )
            if "int16" in p:
                _write_int16(d / "median.npy", p["int16"], log)
                log("computing the exact median once ...")
                st = mmapkit_module("stats").stats
                exact = float(st.median(np.load(d / "median.npy", mmap_mode="r")))
                (d / "median.json").write_text(json.dumps({"median": exact}) + "\n")
            else:
                _write_store(d, p["rows"], p["dim"], log)
                if p["text_rows"]:
                    log(f"writing the text design's prefix ({p['text_rows']:,} rows) ...")
                    _write_text(d, p["text_rows"], p["dim"])
            return {}

        generated(d / "ok.json", want, make)
        if "int16" in p:
            files = [d / "median.npy"]
            info = {"bytes": size.nbytes, "rows": p["int16"] // 2}
        else:
            files = [d / "store" / "features.npy", d / "store" / "labels.npy"]
            if p["text_rows"]:
                files.append(d / "text.csv")
            info = {"bytes": size.nbytes, "rows": p["rows"], "dim": p["dim"]}
        return Dataset(
            size,
            d,
            files,
            {"params": p, **info, "seed": DATA_SEED, "generator": "bench/suites/features.py"},
        )

    def versions(self) -> dict[str, str]:
        return {
            mod: module_version(mod)
            for mod in ("mmapkit", "sklearn", "torch", "dask", "distributed")
        }

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        labels = {s["label"] for s in doc["sizes"]}
        d64 = "d64" if "d64" in labels else "q64"
        big = "d1000" if "d1000" in labels else "q128"
        at = "" if d64 == "d64" else " (quick size)"
        rows64 = next((s["rows"] for s in doc["sizes"] if s["label"] == d64), 0)
        goals: list[dict[str, Any]] = [
            {
                "label": "d = 64: ≥ 4 M rows/s wall (time ≤ rows / 4 M)" + at,
                "task": "train",
                "contender": "mmapkit sequential",
                "size": d64,
                "cache": "warm",
                "max_seconds": rows64 / 4e6,
            },
            {
                "label": "d = 64: ≥ 4 M rows per CPU-second (≤ 0.25 CPU-s per 1 M rows, every run)"
                + at,
                "task": "train",
                "contender": "mmapkit sequential",
                "size": d64,
                "cache": "warm",
                "max_metric": {"cpu_s_per_m_rows": 0.25},
            },
            {
                "label": "d = 64: ≥ 2.5× sklearn partial_fit" + at,
                "task": "train",
                "contender": "mmapkit sequential",
                "versus": "sklearn partial_fit",
                "min_speedup": 2.5,
                "size": d64,
                "cache": "warm",
                "name_versus": True,
            },
        ]
        for lb in (d64, big):
            goals.append(
                {
                    "label": f"≥ 100× the article's text design ({lb})",
                    "task": "train",
                    "contender": "mmapkit sequential",
                    "versus": "text store (article)",
                    "min_speedup": 100,
                    "size": lb,
                    "cache": "warm",
                    "name_versus": True,
                }
            )
            goals.append(
                {
                    "label": f"shuffled ≥ 0.8× sequential, warm ({lb})",
                    "task": "train",
                    "contender": "mmapkit shuffled",
                    "versus": "mmapkit sequential",
                    "min_speedup": 0.8,
                    "size": lb,
                    "cache": "warm",
                    "name_versus": True,
                }
            )
        if "ooc" in labels:
            goals.append(
                {
                    "label": "out of core (30 GB): own memory (RssAnon) < 1 GB",
                    "task": "train_ooc",
                    "contender": "mmapkit sequential",
                    "size": "ooc",
                    "cache": "cold",
                    "max_metric": {"rss_anon": 1_000_000_000},
                }
            )
        # Issue 26 §2's goals for feeding a GPU, in feature bytes per second.
        for g in (s for s in doc["sizes"] if s["label"] in GPU_SIZES):
            fbytes = g["rows"] * g["dim"] * 4
            at = "" if g["label"] == "gpu" else " (quick size)"
            for order, rate in (("sequential", 20e9), ("shuffled", 15e9)):
                goals.append(
                    {
                        "label": f"gpu: device_loader {order} ≥ {rate / 1e9:.0f} GB/s" + at,
                        "task": "gpu",
                        "contender": f"mmapkit device_loader {order}",
                        "size": g["label"],
                        "cache": "warm",
                        "max_seconds": fbytes / rate,
                    }
                )
            goals.append(
                {
                    "label": "gpu: device_loader shuffled ≥ 0.6× the all-on-the-GPU rate" + at,
                    "task": "gpu",
                    "contender": "mmapkit device_loader shuffled",
                    "versus": "limit: all on the GPU, randperm",
                    "min_speedup": 0.6,
                    "size": g["label"],
                    "cache": "warm",
                    "name_versus": True,
                }
            )
        # rows/s per contender (the times are per epoch; rows/s = rows / median time)
        notes = doc.setdefault("notes", [])
        for s in doc["sizes"]:
            if "dim" not in s:
                continue
            parts = [
                f"`{c['name']}` {_human_rate(r)}"
                for c in doc["contenders"]
                for task in ("train", "train_ooc")
                if (r := _rate(doc, s["label"], task, c["name"])) is not None
            ]
            if parts:
                notes.append(
                    f"rows/s at {s['label']} ({s['rows']:,} x {s['dim']} float32), "
                    f"median epoch: " + ", ".join(parts) + "."
                )
        notes.extend(_loader_notes(doc))
        return [g for g in goals if g["size"] in labels]  # (a run of some sizes only)

    notes = (
        "Same update rule everywhere except scikit-learn (its own SGD: per-row updates, "
        "'optimal' learning-rate schedule, L2 alpha 1e-4): it is the peer users reach for, "
        "not the same arithmetic; the check is only that every model learned.",
        "`rows per CPU-second` divides the rows by the process's CPU time during the epoch "
        "(all its threads: a prefetch thread and BLAS included): the per-core rate.",
        "The machine is shared with other jobs (builds ran at the same time); numbers can move "
        "between runs.",
    )

"""Stage-by-stage profile of the device-feeding path (issue 26 §2), so the stage that
limits ``mmapkit.torch.device_loader`` is visible: each stage measured alone.

    python3 bench/gpu_profile.py --out DIR [--rows N] [--dim D] [--batch B]

(a) the core gather (``FeatureStore._take_into``) into a pinned buffer, sequential and
    shuffled batch keys, threads 1, 2, 4, 8, 16; (b) the same into unpinned memory;
(c) numpy references into the same buffer, 1 thread (``np.copyto`` of the mapped
    slice, ``np.take`` for shuffled keys), and ``np.copyto`` split over 16 Python
    threads (numpy releases the GIL for the copy): what memory itself gives;
(d) host-to-device copies of a 16 MiB buffer, pinned and pageable, synchronous
    each and non_blocking (one synchronize at the end);
(e) device_loader epochs with no training (iterate, synchronize at the end), each
    loader's first epoch (fresh mapping) and second: the defaults, then the staging
    path by prefetch x workers x threads, then the direct path (copies straight from
    the registered mapping), as far as the loader has those options;
(f) per-batch host time of the loader's ``_prepare``: the staging path's with the
    gather replaced by nothing, the direct path's (its copies issued); the index
    conversion alone; ``torch.empty`` on the device; one copy's issue;
(g) first touch of a fresh mapping: a whole-store gather pass on 16 threads over a
    fresh mapping, then again (minor page faults counted);
(h) an experiment: no host gather at all, batches copied to the device straight
    from the features file's mapping registered with CUDA (cudaHostRegister).

Only numpy, torch and mmapkit. The store (16 M x 64 float32 by default, 4.3 GB)
is made once in /tmp and reused. Without CUDA the CUDA parts are skipped (so it
runs anywhere at a small ``--rows``). Prints a compact table last and writes
``DIR/profile.json``. GB/s count feature and label bytes.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import inspect
import json
import os
import resource
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from mmapkit import FeatureStore
from mmapkit.torch import FeatureBatchSampler, FeatureDataset, device_loader

THREADS = (1, 2, 4, 8, 16)
CUDA = torch.cuda.is_available()
T0 = time.perf_counter()
RESULTS: dict[str, Any] = {}


def log(msg: str) -> None:
    """Prints ``msg`` with the seconds since the start."""
    print(f"[{time.perf_counter() - T0:6.1f} s] {msg}", flush=True)


def sync() -> None:
    """Waits for the GPU's queued work (nothing without CUDA)."""
    if CUDA:
        torch.cuda.synchronize()


def put(section: str, name: str, value: Any) -> None:
    """Records one result under ``section`` and logs it."""
    RESULTS.setdefault(section, {})[name] = value
    shown = f"{value:.3f}" if isinstance(value, float) else value
    log(f"{section}: {name} = {shown}")


def make_store(path: Path, rows: int, dim: int) -> FeatureStore:
    """The store at ``path`` (made once: rows x dim float32, float32 labels)."""
    if (path / ".done").exists():
        fs = FeatureStore(path)
        if len(fs) == rows and fs.dim == dim:
            return fs
        fs.close()
    import shutil

    shutil.rmtree(path, ignore_errors=True)
    rng = np.random.default_rng(0)
    with FeatureStore(path, "w", dim=dim, label_dtype=np.float32) as fs:
        step = 1 << 20
        for s in range(0, rows, step):
            n = min(step, rows - s)
            fs.add(rng.random((n, dim), dtype=np.float32), rng.random(n, dtype=np.float32))
    (path / ".done").touch()
    return FeatureStore(path)


def batch_keys(fs: FeatureStore, batch: int, shuffle: bool, runs: bool = False) -> list[Any]:
    """The keys of epoch 0 from the loaders' sampler: slices or arrays of rows, or
    (``runs``) the runs of consecutive rows the device loader gets."""
    s = FeatureBatchSampler(FeatureDataset(fs, batch), batch, shuffle=shuffle, seed=0)
    return list(s._keys(runs=runs))


def as_rows(key: Any) -> np.ndarray[Any, Any]:
    """A sampler key's rows (runs: the staging path's conversion in ``DeviceLoader._prepare``)."""
    if hasattr(key, "rows"):
        return key.rows()
    if isinstance(key, slice):
        return np.arange(key.start, key.stop, dtype=np.uint64)
    return np.ascontiguousarray(key, dtype=np.int64).view(np.uint64)


def best(fn: Any, repeat: int) -> float:
    """Best wall time of ``repeat`` calls of ``fn``."""
    t = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t.append(time.perf_counter() - t0)
    return min(t)


def buffers(fs: FeatureStore, batch: int, pinned: bool) -> tuple[Any, Any]:
    """Zeroed numpy views of (pinned, with ``pinned``) torch buffers for one batch of features and
    labels.
    """
    X = torch.from_numpy(np.zeros((batch, fs.dim), dtype=fs.dtype))
    y = torch.from_numpy(np.zeros(batch, dtype=fs.label_dtype))
    if pinned:  # (zeroed first: no first-touch faults in the timings)
        X, y = X.pin_memory(), y.pin_memory()
    return X.numpy(), y.numpy()


def gather_stage(fs: FeatureStore, keys: dict[str, list[Any]], nb: int, rb: int) -> None:
    """(a), (b): ``_take_into`` over ``nb`` batches per order; (c) numpy references."""
    for pinned in (True, False) if CUDA else (False,):
        sec = "a gather pinned" if pinned else "b gather unpinned"
        Xn, yn = buffers(fs, len(as_rows(keys["sequential"][0])), pinned)
        for order, ks in keys.items():
            rows = [as_rows(k) for k in ks[:nb]]
            nbytes = sum(len(r) for r in rows) * rb
            for t in THREADS:

                def run(t: int = t, rows: list[Any] = rows, Xn: Any = Xn, yn: Any = yn) -> None:
                    for r in rows:
                        fs._take_into(r, Xn[: len(r)], yn[: len(r)], t)

                put(sec, f"{order} threads={t} GB/s", nbytes / best(run, 3) / 1e9)
        if pinned or not CUDA:
            numpy_refs(fs, keys, nb, rb, Xn, yn)


def numpy_refs(
    fs: FeatureStore, keys: dict[str, list[Any]], nb: int, rb: int, Xn: Any, yn: Any
) -> None:
    """(c): numpy's own copies of the same batches into the same buffers, the memory's reference
    speed.
    """
    sec = "c numpy reference"
    X, y = fs.features, fs.labels
    seq = keys["sequential"][:nb]
    nbytes = sum(k.stop - k.start for k in seq) * rb

    def copyto() -> None:
        for k in seq:
            n = k.stop - k.start
            np.copyto(Xn[:n], X[k])
            np.copyto(yn[:n], y[k])

    put(sec, "copyto sequential 1 thread GB/s", nbytes / best(copyto, 3) / 1e9)
    shuf = [np.asarray(k, dtype=np.int64) for k in keys["shuffled"][:nb]]

    def take() -> None:
        for k in shuf:
            np.take(X, k, axis=0, out=Xn[: len(k)])
            np.take(y, k, out=yn[: len(k)])

    put(sec, "np.take shuffled 1 thread GB/s", nbytes / best(take, 3) / 1e9)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:

        def par() -> None:
            for k in seq:
                n = k.stop - k.start
                step = -(-n // 16)
                parts = [(s, X[k.start + s : k.start + s + step]) for s in range(0, n, step)]
                list(pool.map(lambda p: np.copyto(Xn[p[0] : p[0] + len(p[1])], p[1]), parts))
                np.copyto(yn[:n], y[k])

        put(sec, "copyto sequential 16 threads GB/s", nbytes / best(par, 3) / 1e9)


def h2d_stage() -> None:
    """(d) 16 MiB host-to-device copies."""
    sec = "d H2D 16 MiB"
    n = 16 << 20
    dev = torch.empty(n, dtype=torch.uint8, device="cuda")
    count = 64
    side = torch.cuda.Stream()
    for pinned in (True, False):
        host = torch.ones(n, dtype=torch.uint8, pin_memory=pinned)
        kind = "pinned" if pinned else "pageable"

        def each(host: Any = host) -> None:
            for _ in range(count):
                dev.copy_(host, non_blocking=False)
                torch.cuda.synchronize()

        def batched(host: Any = host) -> None:
            for _ in range(count):
                dev.copy_(host, non_blocking=True)
            torch.cuda.synchronize()

        def on_side(host: Any = host) -> None:
            with torch.cuda.stream(side):
                for _ in range(count):
                    dev.copy_(host, non_blocking=True)
            side.synchronize()

        each()
        put(sec, f"{kind} sync GB/s", count * n / best(each, 3) / 1e9)
        put(sec, f"{kind} non_blocking GB/s", count * n / best(batched, 3) / 1e9)
        put(sec, f"{kind} non_blocking side stream GB/s", count * n / best(on_side, 3) / 1e9)


def loader_options() -> list[dict[str, Any]]:
    """(e)'s grid: the staging path by prefetch, workers (batches prepared at once)
    and threads, then the direct path (copies straight from the registered mapping),
    for each option the loader has."""
    params = inspect.signature(device_loader).parameters
    staging = {"direct": False} if "direct" in params else {}
    one = {"workers": 1} if "workers" in params else {}
    grid = [{"prefetch": p, "threads": None, **one, **staging} for p in (1, 2, 4)]
    if "workers" in params:
        for prefetch, workers, threads in ((2, 2, None), (3, 2, None), (4, 2, None), (4, 4, 8)):
            grid.append({"prefetch": prefetch, "threads": threads, "workers": workers, **staging})
    if "direct" in params:
        for prefetch, workers in ((1, 1), (2, 1), (2, 2), (4, 2)):
            grid.append({"prefetch": prefetch, "workers": workers, "direct": True})
    return grid


def loader_stage(path: Path, batch: int, rows: int, rb: int, quick: bool) -> None:
    """(e) device_loader epochs without training."""
    sec = "e device_loader epoch"
    dev = "cuda" if CUDA else "cpu"
    grid = loader_options()
    if quick:
        grid = grid[:3]
    # Defaults first: what the benchmark's contender uses.
    for shuffle in (False, True):
        order = "shuffled" if shuffle else "sequential"
        for opts in [{}, *grid]:
            dl = device_loader(path, batch, shuffle=shuffle, seed=0, device=dev, **opts)
            for which in ("first", "warm"):
                sync()
                t0 = time.perf_counter()
                n = 0
                for X, _y in dl:
                    n += len(X)
                sync()
                secs = time.perf_counter() - t0
                name = " ".join(f"{k}={v}" for k, v in opts.items()) or "defaults"
                put(sec, f"{order} {name} {which} GB/s", n * rb / secs / 1e9)
            del dl


def prepare_time(dl: Any, ks: list[Any], store: FeatureStore) -> float:
    """Host time of ``dl._prepare`` over ``ks``, each call's copies waited for
    before the next (untimed)."""
    t = 0.0
    for i, k in enumerate(ks):
        sync()
        t0 = time.perf_counter()
        dl._prepare(i, k, store)
        t += time.perf_counter() - t0
    sync()
    return t


def overhead_stage(path: Path, fs: FeatureStore, keys: dict[str, list[Any]], nb: int) -> None:
    """(f) per-batch Python costs of the loader, the gather excluded (``keys``: the
    loader's own, runs of consecutive rows)."""
    sec = "f per-batch overhead"
    dev = "cuda" if CUDA else "cpu"
    for order, all_keys in keys.items():
        ks = all_keys[:nb]
        dl = device_loader(path, len(as_rows(ks[0])), device=dev)
        store = dl.dataset.store
        dl._setup(store)
        real = store._take_into
        store._take_into = lambda *a, **k: None  # type: ignore[method-assign]
        try:
            t = min(prepare_time(dl, ks, store) for _ in range(4))  # (the first: warm-up)
            put(sec, f"{order} staging _prepare without gather us/batch", t / len(ks) * 1e6)
        finally:
            store._take_into = real  # type: ignore[method-assign]
        if CUDA and "direct" in inspect.signature(device_loader).parameters:
            dl = device_loader(path, len(as_rows(ks[0])), device=dev, direct=True)
            dl._register()
            t = min(prepare_time(dl, ks, dl.dataset.store) for _ in range(4))
            put(sec, f"{order} direct _prepare (copies issued) us/batch", t / len(ks) * 1e6)
        put(
            sec,
            f"{order} index conversion us/batch",
            best(lambda ks=ks: [as_rows(k) for k in ks], 3) / len(ks) * 1e6,
        )
    if CUDA:
        b = len(as_rows(keys["sequential"][0]))

        def empty() -> None:
            for _ in range(nb):
                torch.empty((b, fs.dim), dtype=torch.float32, device="cuda")
            sync()

        put(sec, "torch.empty on the device us/batch", best(empty, 3) / nb * 1e6)
        host = torch.empty((b, fs.dim), dtype=torch.float32, pin_memory=True)
        dst = torch.empty((b, fs.dim), dtype=torch.float32, device="cuda")

        def issue() -> None:
            for _ in range(nb):
                dst.copy_(host, non_blocking=True)

        issue()
        sync()
        t = best(issue, 3)
        sync()
        put(sec, "copy_ issue (no wait) us/batch", t / nb * 1e6)


def registered_stage(fs: FeatureStore, keys: dict[str, list[Any]], nb: int) -> None:
    """(h) an experiment: the features file's read-only shared mapping registered
    with CUDA (cudaHostRegister, read-only flag: its page-cache pages pinned), and
    batches copied to the device straight from it: no host gather at all (sequential:
    one copy per batch; shuffled: one copy per run of consecutive rows)."""
    import mmap
    import warnings

    sec = "h H2D straight from a registered mapping (features only)"
    X = np.load(os.path.join(fs.path, "features.npy"), mmap_mode="r")
    gran = X.offset % mmap.ALLOCATIONGRANULARITY
    base, size = X.ctypes.data - gran, X.nbytes + gran
    rt = torch.cuda.cudart()
    t0 = time.perf_counter()
    err = rt.cudaHostRegister(base, size, 8)  # cudaHostRegisterReadOnly
    put(sec, "cudaHostRegister (read-only) error", int(err))
    if int(err):
        return
    put(sec, "register seconds", time.perf_counter() - t0)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            Xt = torch.from_numpy(X)
        put(sec, "torch sees it pinned", str(Xt.is_pinned()))
        b = len(as_rows(keys["sequential"][0]))
        dev = torch.empty((b, fs.dim), dtype=Xt.dtype, device="cuda")
        seq = keys["sequential"][:nb]

        def sequential() -> None:
            for k in seq:
                dev[: k.stop - k.start].copy_(Xt[k], non_blocking=True)
            sync()

        runs = []
        for key in keys["shuffled"][:nb]:
            k = np.asarray(key, dtype=np.int64)
            cut = np.flatnonzero(np.diff(k) != 1) + 1
            starts = np.concatenate(([0], cut))
            ends = np.concatenate((cut, [len(k)]))
            runs.append([(int(i), int(j), int(k[i])) for i, j in zip(starts, ends, strict=True)])

        def shuffled() -> None:
            for r in runs:
                for i, j, s in r:
                    dev[i:j].copy_(Xt[s : s + j - i], non_blocking=True)
            sync()

        fb = fs.dim * fs.dtype.itemsize
        sequential()
        put(
            sec,
            "sequential GB/s",
            sum(k.stop - k.start for k in seq) * fb / best(sequential, 3) / 1e9,
        )
        shuffled()
        put(sec, "shuffled GB/s", sum(r[-1][1] for r in runs) * fb / best(shuffled, 3) / 1e9)
        put(sec, "shuffled copies per batch", sum(len(r) for r in runs) / len(runs))
    finally:
        t0 = time.perf_counter()
        rt.cudaHostUnregister(base)
        put(sec, "unregister seconds", time.perf_counter() - t0)


def fault_stage(path: Path, fs_rows: int, rb: int) -> None:
    """(g) a whole pass over a fresh mapping, then over the same again."""
    sec = "g first touch"
    fs = FeatureStore(path)
    b = 1 << 16
    Xn, yn = buffers(fs, b, CUDA)
    for which in ("fresh mapping", "same mapping again"):
        f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
        t0 = time.perf_counter()
        for s in range(0, fs_rows, b):
            r = np.arange(s, min(s + b, fs_rows), dtype=np.uint64)
            fs._take_into(r, Xn[: len(r)], yn[: len(r)], 16)
        secs = time.perf_counter() - t0
        faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0
        put(sec, f"{which} sequential threads=16 GB/s", fs_rows * rb / secs / 1e9)
        put(sec, f"{which} minor faults", faults)
    fs.close()


def table() -> str:
    """The summary of every recorded result, one section per stage."""
    lines = ["", "== gpu_profile summary (GB/s unless named) =="]
    for sec, vals in RESULTS.items():
        lines.append(sec)
        for k, v in vals.items():
            lines.append(f"  {k:<66} {v:>10.3f}" if isinstance(v, float) else f"  {k:<66} {v}")
    return "\n".join(lines)


def main() -> int:
    """Parses the command line, runs every stage and writes the results to ``--out``."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--rows", type=int, default=1 << 24)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=65536)
    tmp = Path(tempfile.gettempdir())
    ap.add_argument("--data", type=Path, default=tmp / "mmapkit-gpu-profile")
    ap.add_argument("--store", type=Path, help="an existing FeatureStore to use instead")
    ap.add_argument("--batches", type=int, default=24, help="batches per gather timing")
    ap.add_argument("--quick", action="store_true", help="a short (e) grid")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    if a.store is not None:
        with FeatureStore(a.store) as fs:
            a.rows, a.dim = len(fs), fs.dim
    path = a.store or a.data / f"store-{a.rows}x{a.dim}"
    RESULTS["env"] = {
        "cuda": CUDA,
        "device": torch.cuda.get_device_name(0) if CUDA else "cpu",
        "cpus": os.cpu_count(),
        "torch": torch.__version__,
        "numpy": np.__version__,
        "rows": a.rows,
        "dim": a.dim,
        "batch": a.batch,
    }
    log(f"env: {RESULTS['env']}")
    fs = FeatureStore(path) if a.store is not None else make_store(path, a.rows, a.dim)
    rb = a.dim * fs.dtype.itemsize + fs.label_dtype.itemsize
    log(f"store ready: {path} ({a.rows * rb / 1e9:.2f} GB)")
    orders = ("sequential", "shuffled")
    keys = {o: batch_keys(fs, a.batch, o == "shuffled") for o in orders}
    loader_keys = {o: batch_keys(fs, a.batch, o == "shuffled", runs=True) for o in orders}
    # Spread the timed batches over the whole store (sequential: every k-th).
    nb = min(a.batches, len(keys["sequential"]))
    stride = max(1, len(keys["sequential"]) // nb)
    for ks in (keys, loader_keys):
        ks["sequential"] = ks["sequential"][::stride][:nb]
    fault_stage(path, a.rows, rb)  # first: the store's first mapping in this process
    # Warm this mapping over the timed batches (page tables), then time.
    Xn, yn = buffers(fs, a.batch, False)
    for ks in keys.values():
        for k in ks[:nb]:
            r = as_rows(k)
            fs._take_into(r, Xn[: len(r)], yn[: len(r)], None)
    gather_stage(fs, keys, nb, rb)
    if CUDA:
        h2d_stage()
    overhead_stage(path, fs, loader_keys, nb)
    if CUDA:
        try:
            registered_stage(fs, keys, nb)
        except Exception as e:  # noqa: BLE001 (an experiment: its failure is a result too)
            put("h H2D straight from a registered mapping (features only)", "error", repr(e))
    loader_stage(path, a.batch, a.rows, rb, a.quick)
    RESULTS["env"]["seconds"] = round(time.perf_counter() - T0, 1)
    (a.out / "profile.json").write_text(json.dumps(RESULTS, indent=1))
    print(table())
    return 0


if __name__ == "__main__":
    sys.exit(main())

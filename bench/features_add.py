"""Throughput of durable appends: ``FeatureStore.add`` against what a careful
numpy user would write (issue 24, "the FeatureStore transaction in the core").

    python bench/features_add.py [--rows N] [--dim D] [--runs R] [--batch B ...]
        [--impl NAME=PYTHONPATH ...] [--dir DIR] [--json FILE]

Every contender writes ``rows`` × ``dim`` float32 feature rows and float32
labels (FeatureStore's default label dtype) to DIR (a real file system:
tmpfs syncs nothing), durably, in batches of each ``--batch`` size, and
reports rows/s (median of ``--runs``, each in a fresh subprocess; the runs
of all contenders are interleaved, so a noisy moment hits each alike):

* ``FeatureStore.add[NAME]``: one ``add`` per batch (durable when it
  returns), for each ``--impl`` (e.g. ``before=/work/main/python``).
* ``np.save+fsync (whole)``: the whole array written once by ``np.save``,
  fsynced, with its directory: the bound of one sequential durable write.
* ``np.save+fsync (shard per batch)``: each batch its own ``.npy`` pair.
* ``open_memmap append``: one ``.npy`` per array grown per batch (header
  rewritten in place with the new shape, file extended, rows written
  through ``numpy.lib.format.open_memmap``, ``flush`` and ``fsync``). Not
  crash-safe across the two files: there is no commit record.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

CHILD = r"""
import json, os, sys, time
import numpy as np

kind, path, rows, dim, batch = sys.argv[1], sys.argv[2], *map(int, sys.argv[3:6])
rng = np.random.default_rng(0)
X = rng.standard_normal((rows, dim), dtype=np.float32)
y = (rng.random(rows) < 0.5).astype(np.float32)

def fsync_path(p):
    fd = os.open(p, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)

def grow_npy(p, data, n):
    # Header rewritten with the new shape (same length: format 1.0 pads
    # to 64 bytes), file extended, rows written through open_memmap.
    new = n + len(data)
    if n == 0:
        mm = np.lib.format.open_memmap(p, mode="w+", dtype=data.dtype, shape=data.shape)
    else:
        with open(p, "r+b") as f:
            np.lib.format.read_magic(f)
            np.lib.format.read_array_header_1_0(f)
            off = f.tell()
            f.seek(0)
            hdr = {"descr": np.lib.format.dtype_to_descr(data.dtype), "fortran_order": False,
                   "shape": (new, *data.shape[1:])}
            np.lib.format.write_array_header_1_0(f, hdr)
            assert f.tell() == off, "header length changed"
            f.truncate(off + new * data[0].nbytes)
        mm = np.lib.format.open_memmap(p, mode="r+")
    mm[n:new] = data
    mm.flush()
    del mm
    fsync_path(p)

t0 = time.perf_counter()
if kind == "featurestore":
    import mmapkit
    fs = mmapkit.FeatureStore(path, "w", dim=dim)
    t0 = time.perf_counter()
    for s in range(0, rows, batch):
        fs.add(X[s:s + batch], y[s:s + batch])
    t = time.perf_counter() - t0
    fs.close()
elif kind == "save_whole":
    os.makedirs(path)
    np.save(os.path.join(path, "features.npy"), X)
    np.save(os.path.join(path, "labels.npy"), y)
    for f in ("features.npy", "labels.npy"):
        fsync_path(os.path.join(path, f))
    fsync_path(path)
    t = time.perf_counter() - t0
elif kind == "save_shards":
    os.makedirs(path)
    for i, s in enumerate(range(0, rows, batch)):
        for name, a in (("features", X), ("labels", y)):
            p = os.path.join(path, f"{name}-{i:06d}.npy")
            np.save(p, a[s:s + batch])
            fsync_path(p)
        fsync_path(path)
    t = time.perf_counter() - t0
elif kind == "open_memmap":
    os.makedirs(path)
    fp, lp = os.path.join(path, "features.npy"), os.path.join(path, "labels.npy")
    for s in range(0, rows, batch):
        grow_npy(fp, X[s:s + batch], s)
        grow_npy(lp, y[s:s + batch], s)
        if s == 0:
            fsync_path(path)
    t = time.perf_counter() - t0
else:
    raise SystemExit(f"unknown kind {kind}")
print(json.dumps({"seconds": t}))
"""


def run_one(kind: str, pythonpath: str | None, d: str, rows: int, dim: int, batch: int) -> float:
    """Adds ``rows`` rows of ``dim`` features in batches of ``batch`` with contender ``kind`` in a
    fresh process; returns the seconds it took.
    """
    path = os.path.join(d, f"{kind}-{batch}")
    shutil.rmtree(path, ignore_errors=True)
    env = dict(os.environ)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    cmd = [sys.executable, "-c", CHILD, kind, path, str(rows), str(dim), str(batch)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    shutil.rmtree(path, ignore_errors=True)
    if out.returncode != 0:
        raise SystemExit(f"{kind} failed:\n{out.stderr[-3000:]}")
    return float(json.loads(out.stdout.strip().splitlines()[-1])["seconds"])


def measure(a: argparse.Namespace, d: str, contenders: list[tuple[str, str, str | None]]) -> list:
    """Runs every contender at every batch size in ``a.batch``; returns one result per run."""
    results = []
    for batch in a.batch:
        todo = [c for c in contenders if c[1] != "save_whole" or batch == a.batch[0]]
        secs: dict[str, list[float]] = {name: [] for name, _, _ in todo}
        for _ in range(a.runs):
            for name, kind, pp in todo:
                secs[name].append(run_one(kind, pp, d, a.rows, a.dim, batch))
        for name, kind, _ in todo:
            med = statistics.median(secs[name])
            b = "-" if kind == "save_whole" else str(batch)  # batch-independent
            r = {"contender": name, "batch": b, "median_s": med, "runs_s": secs[name]}
            r["rows_per_s"] = a.rows / med
            r["MB_per_s"] = a.rows * (a.dim + 1) * 4 / med / 1e6
            results.append(r)
            runs = ", ".join(f"{s:.2f}" for s in secs[name])
            print(
                f"{name:34} batch {b:>7}  {r['rows_per_s'] / 1e6:7.3f} M rows/s  "
                f"{r['MB_per_s']:7.1f} MB/s  (runs: {runs} s)",
                flush=True,
            )
    return results


def main() -> None:
    """Parses the command line, measures every contender and prints the results (and writes them to
    ``--json``).
    """
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--rows", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, action="append", help="default: 1000 and 100000")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--impl", action="append", default=[], help="NAME=PYTHONPATH of an mmapkit")
    ap.add_argument("--dir", default=".", help="where to write (a temp dir in it)")
    ap.add_argument("--json", default=None, help="also write the results here")
    a = ap.parse_args()
    a.batch = a.batch or [1000, 100_000]
    impls = [tuple(s.split("=", 1)) for s in a.impl] or [("this", "")]
    contenders: list[tuple[str, str, str | None]] = [
        (f"FeatureStore.add[{n}]", "featurestore", p) for n, p in impls
    ]
    contenders += [
        ("np.save+fsync (whole)", "save_whole", None),
        ("np.save+fsync (shard per batch)", "save_shards", None),
        ("open_memmap append", "open_memmap", None),
    ]
    d = tempfile.mkdtemp(prefix="features-add-", dir=a.dir)
    try:
        results = measure(a, d, contenders)
    finally:
        shutil.rmtree(d, ignore_errors=True)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    main()

"""Suite `replication` (cluster part): writes through a 3-node openraft KV service.

Three `mmapkit-kv serve` processes on loopback (crates/mmapkit-raft), one per node,
each with its own log store; `mmapkit-kv load` sends a fixed number of writes (100-byte
values) from 1, 16 or 256 concurrent clients, each waiting for its write to be
committed (replicated to a majority, durable where the store is) and applied before it
sends the next; the time and the latency percentiles are the load generator's own.

Contenders (the log store under the same openraft, network, state machine and KV):
``mmapkit`` (mmapkit's commit log; fdatasync of the range before openraft hears that
entries are flushed, shared by every batch waiting: group commit), ``rocksdb`` (a log
store on the `rocksdb` crate linked against Debian's librocksdb, each append one
WriteBatch with sync=true: equal durability; ``make bench-rocksdb``) and ``memory``
(a BTreeMap, no durability: the upper bound). The catch-up part of the issue's suite
is ``cargo run --release -p mmapkit-replicate --example catchup`` (its results:
bench/results/replication-catchup.md).
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from pathlib import Path
from typing import Any, Callable

from ..harness import (REPO_DIR, Contender, Dataset, Measured, Size, Suite, Task, Unavailable,
                       run_command)

KV = REPO_DIR / "target" / "release" / "mmapkit-kv"
KV_ROCKS = REPO_DIR / "target" / "bench-raft" / "release" / "mmapkit-kv"
CLIENTS = (1, 16, 256)
# writes per run: (full, quick)
WRITES = {1: (1_000, 200), 16: (10_000, 1_000), 256: (20_000, 2_000)}
VALUE = 100


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Cluster:
    """Three nodes of one store kind in fresh directories under `root`."""

    def __init__(self, exe: Path, store: str, root: Path) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.root = root
        self.addrs = [f"127.0.0.1:{_free_port()}" for _ in range(3)]
        self.procs: list[subprocess.Popen] = []
        try:
            for i, addr in enumerate(self.addrs, 1):
                p = subprocess.Popen([str(exe), "serve", "--id", str(i), "--dir", str(root / f"n{i}"),
                                      "--bind", addr, "--store", store],
                                     stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
                self.procs.append(p)
                line = p.stdout.readline().decode() if p.stdout else ""
                if "listening" not in line:
                    raise RuntimeError(f"node {i} ({store}) did not start: {line!r}")
            members = ",".join(f"{i}={a}" for i, a in enumerate(self.addrs, 1))
            run_command([str(exe), "init", "--nodes", members])
            # a few writes: a leader is elected and the connections are up
            run_command([str(exe), "load", "--nodes", ",".join(self.addrs), "--writes", "20"])
        except BaseException:
            self.close()
            raise

    def close(self) -> None:
        for p in self.procs:
            p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        shutil.rmtree(self.root, ignore_errors=True)


class ReplicationSuite(Suite):
    name = "replication"
    title = "3-node openraft KV: mmapkit's log store vs RocksDB and in-memory"
    description = (
        "Writes through a 3-node replicated key-value service on openraft 0.9.25 "
        "(crates/mmapkit-raft, processes on loopback, HTTP between nodes), the same "
        "service on three log stores: mmapkit's commit log, a RocksDB log store at equal "
        "durability (WriteBatch with sync=true per append) and an in-memory store (no "
        "durability: the upper bound). Each client waits for its write to be committed "
        "and applied before sending the next. Time: the load generator's, from the first "
        "write sent to the last answer; `writes/s`, `p50 ms`, `p99 ms` per run.")
    baseline = "rocksdb"
    reference = "mmapkit"
    layout = "rows"
    timing = "the load generator's own clock around all the writes"
    metrics = {"writes_per_s": {"title": "writes/s", "unit": ""},
               "p50_ms": {"title": "p50 ms", "unit": ""},
               "p99_ms": {"title": "p99 ms", "unit": ""}}
    notes = ("The catch-up half of this suite (a follower 1 M × 50 B and 100 K × 4 KiB "
             "behind, against one entry per request and the loopback limit) is "
             "`cargo run --release -p mmapkit-replicate --example catchup -- --out "
             "bench/results/replication-catchup.md`; its results are in that file.",)
    headline = {"capability": "replicated log", "label": "3-node KV, 16 clients, writes",
                "task": "clients-16", "contender": "mmapkit", "peers": ["rocksdb"]}

    def __init__(self) -> None:
        self._quick = False
        self._runs = 0
        self.tasks = tuple(
            Task(f"clients-{c}", f"{c} concurrent client{'s' if c > 1 else ''}", caches=("warm",),
                 throughput=False, warmup="prime", check=lambda _p, r: r,
                 note=f"{WRITES[c][0]:,} writes ({WRITES[c][1]:,} with --quick) of "
                      f"{VALUE}-byte values from {c} client(s), each waiting for its answer")
            for c in CLIENTS)
        self.contenders = (
            self._contender("mmapkit", KV, "mmapkit",
                            "mmapkit's commit log (crates/mmapkit-raft LogStore): entries "
                            "written into the mapped segment, a flusher thread syncs "
                            "(msync MS_SYNC) and only then fires openraft's flush callback"),
            self._contender("rocksdb", KV_ROCKS, "rocksdb",
                            "the rocksdb 0.20 crate on Debian's librocksdb 7.8.3 (default "
                            "options), our log store on it (crates/mmapkit-raft/src/rocks.rs): "
                            "one WriteBatch per append with sync=true; `make bench-rocksdb`"),
            self._contender("memory", KV, "memory",
                            "a BTreeMap log store (crates/mmapkit-raft/src/mem.rs), no "
                            "durability: the upper bound (openraft-memstore itself is "
                            "fixed to its own type config and cannot carry this KV)"),
        )

    def sizes(self, quick: bool) -> list[Size]:
        self._quick = quick
        return [Size("3 nodes", 0)]

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        root = data_dir / "replication"
        root.mkdir(parents=True, exist_ok=True)
        marker = root / "suite.json"
        marker.write_text(json.dumps({"value_bytes": VALUE}) + "\n")
        return Dataset(size, marker, [marker], {"value_bytes": VALUE, "nodes": 3})

    def _contender(self, name: str, exe: Path, store: str, note: str) -> Contender:
        suite = self

        def make() -> dict[str, Callable[[Path], Any]]:
            if not exe.is_file():
                hint = "make bench-rocksdb" if store == "rocksdb" else "make bench-peers"
                raise Unavailable(f"{exe.relative_to(REPO_DIR)} not built ({hint})")

            def task(clients: int) -> Callable[[Path], Any]:
                def run(path: Path) -> Measured:
                    suite._runs += 1
                    writes = WRITES[clients][1 if suite._quick else 0]
                    cluster = _Cluster(exe, store, path.parent / "runs" / f"{name}-{suite._runs}")
                    try:
                        out, _err, _rc = run_command(
                            [str(exe), "load", "--nodes", ",".join(cluster.addrs), "--clients",
                             str(clients), "--writes", str(writes), "--value-size", str(VALUE),
                             "--json"])
                    finally:
                        cluster.close()
                    r = json.loads(out.decode().strip().splitlines()[-1])
                    metrics = {k: round(r[k], 3) for k in ("writes_per_s", "p50_ms", "p99_ms")}
                    return Measured(r["writes"], metrics, seconds=r["seconds"])
                return run
            return {f"clients-{c}": task(c) for c in CLIENTS}

        return Contender(name, make, note=note,
                         commands={f"clients-{c}": f"mmapkit-kv load --clients {c}"
                                   for c in CLIENTS})

    def versions(self) -> dict[str, str]:
        return {"openraft": "0.9.25", "rocksdb crate": "0.20 (librocksdb 7.8.3)"}

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for c in (16, 256):
            out.append({"label": f"{c} clients: ≥ 1.5× the RocksDB store's writes/s",
                        "task": f"clients-{c}", "contender": "mmapkit", "size": "3 nodes",
                        "cache": "warm", "versus": "rocksdb", "min_speedup": 1.5,
                        "name_versus": True})
            out.append({"label": f"{c} clients: ≥ 0.5× the in-memory store's writes/s",
                        "task": f"clients-{c}", "contender": "mmapkit", "size": "3 nodes",
                        "cache": "warm", "versus": "memory", "min_speedup": 0.5,
                        "name_versus": True})
        return out


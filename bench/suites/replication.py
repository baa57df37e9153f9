"""Suite `replication`: a follower catching up over HTTP, and writes through a 3-node
openraft KV service.

Catch-up (task ``catchup``, sizes "1M × 50 B" and "100K × 4 KiB"; --quick: 100 K and
20 K entries): a follower that is the whole log behind copies it from a leader over HTTP
on loopback (crates/mmapkit-replicate; server and follower in one process of the driver
``target/release/examples/catchup``, built by ``make bench-peers``; the follower appends
with sync=never). Contenders: ``mmapkit`` (the follower: pages of entries, pipelined
appends), ``one-entry`` (the same follower asking one entry per request: the article's
design; timed on a prefix of the log, see ONE_ENTRY) and ``loopback`` (the limit: the
same framed bytes fetched as one static body over the same HTTP stack, and dropped). The
times are the driver's own. Run it alone with ``python -m bench replication --tasks
catchup`` (the cluster tasks need the KV and RocksDB builds).

Cluster (tasks ``clients-N``, size "3 nodes"):

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
(a BTreeMap, no durability: the upper bound). The KV service batches the writes that
arrive while proposals are in flight into one raft entry (crates/mmapkit-raft/src/batch.rs).

Peer system: ``etcd`` (Debian's etcd-server 3.4.23, ``make bench-etcd``), three members on
loopback with its default durability (WAL fdatasync per commit), the same writes, keys,
values and clients through etcd's Go client (bench/peers/go/cmd/kv-etcd, which prints
the same JSON as `mmapkit-kv load`). The catch-up part of the issue's suite
is the ``catchup`` task above.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..harness import (
    REPO_DIR,
    Contender,
    Dataset,
    Measured,
    Size,
    Suite,
    Task,
    Unavailable,
    generated,
    run_command,
)

KV = REPO_DIR / "target" / "release" / "mmapkit-kv"
CATCHUP = REPO_DIR / "target" / "release" / "examples" / "catchup"
KV_ROCKS = REPO_DIR / "target" / "bench-raft" / "release" / "mmapkit-kv"
# The etcd peer: Debian's etcd-server (`make bench-etcd`) driven by its own Go client
# (bench/peers/go/cmd/kv-etcd, `make bench-peers`).
ETCD = Path("/usr/bin/etcd")
ETCD_LOAD = REPO_DIR / "bench" / "peers" / "go" / "bin" / "kv-etcd"
CLIENTS = (1, 16, 256)
# writes per run: (full, quick)
WRITES = {1: (1_000, 200), 16: (10_000, 1_000), 256: (20_000, 2_000)}
VALUE = 100
CLUSTER = "3 nodes"
# catch-up workloads: size label -> (entries, entries with --quick, payload bytes)
CATCHUP_SIZES = {"50 B entries": (1_000_000, 100_000, 50), "4 KiB entries": (100_000, 20_000, 4096)}
# The one-entry design is timed on the first entries of the log only (its rate per entry
# is flat; the whole log would take minutes per run): this many, at most (full, quick).
ONE_ENTRY = {"50 B entries": (20_000, 5_000), "4 KiB entries": (5_000, 2_000)}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs: list[subprocess.Popen], root: Path) -> None:
    """SIGTERM every member of a cluster, SIGKILL one that has not exited
    within 10 s, then remove its directory."""
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()
    shutil.rmtree(root, ignore_errors=True)


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
                p = subprocess.Popen(
                    [
                        str(exe),
                        "serve",
                        "--id",
                        str(i),
                        "--dir",
                        str(root / f"n{i}"),
                        "--bind",
                        addr,
                        "--store",
                        store,
                    ],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.DEVNULL,
                )
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
        _stop(self.procs, self.root)


class _EtcdCluster:
    """Three etcd members on loopback in fresh directories under `root`, default
    durability (the WAL fdatasynced before a proposal is acknowledged)."""

    def __init__(self, root: Path) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.root = root
        ports = [(_free_port(), _free_port()) for _ in range(3)]
        self.addrs = [f"http://127.0.0.1:{c}" for c, _ in ports]
        initial = ",".join(f"n{i}=http://127.0.0.1:{p}" for i, (_, p) in enumerate(ports, 1))
        self.procs: list[subprocess.Popen] = []
        try:
            for i, (c, p) in enumerate(ports, 1):
                self.procs.append(
                    subprocess.Popen(
                        [
                            str(ETCD),
                            "--name",
                            f"n{i}",
                            "--data-dir",
                            str(root / f"n{i}"),
                            "--listen-client-urls",
                            f"http://127.0.0.1:{c}",
                            "--advertise-client-urls",
                            f"http://127.0.0.1:{c}",
                            "--listen-peer-urls",
                            f"http://127.0.0.1:{p}",
                            "--initial-advertise-peer-urls",
                            f"http://127.0.0.1:{p}",
                            "--initial-cluster",
                            initial,
                            "--initial-cluster-state",
                            "new",
                            "--initial-cluster-token",
                            root.name,
                            "--logger",
                            "zap",
                            "--log-level",
                            "error",
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
            # waits for a leader (the driver does), then a few writes: connections up
            self.load(1, 20)
        except BaseException:
            self.close()
            raise

    def load(self, clients: int, writes: int) -> dict[str, Any]:
        out, _err, _rc = run_command(
            [
                str(ETCD_LOAD),
                "--endpoints",
                ",".join(self.addrs),
                "--clients",
                str(clients),
                "--writes",
                str(writes),
                "--value-size",
                str(VALUE),
            ]
        )
        return json.loads(out.decode().strip().splitlines()[-1])

    def close(self) -> None:
        _stop(self.procs, self.root)


class ReplicationSuite(Suite):
    """The ``replication`` suite: follower catch-up over HTTP, and a 3-node KV on mmapkit's log
    store against RocksDB and etcd.
    """

    name = "replication"
    title = (
        "follower catch-up over HTTP; 3-node openraft KV: mmapkit's log store vs RocksDB "
        "and in-memory, and etcd"
    )
    description = (
        "Writes through a 3-node replicated key-value service on openraft 0.9.25 "
        "(crates/mmapkit-raft, processes on loopback, HTTP between nodes), the same "
        "service on three log stores: mmapkit's commit log, a RocksDB log store at equal "
        "durability (WriteBatch with sync=true per append) and an in-memory store (no "
        "durability: the upper bound), and a 3-node etcd 3.4 cluster at its default "
        "durability driven by its own Go client. Each client waits for its write to be committed "
        "and applied before sending the next. Time: the load generator's, from the first "
        "write sent to the last answer; `writes/s`, `p50 ms`, `p99 ms` per run. Catch-up: "
        "a follower the whole log behind copies it from a leader over HTTP on loopback, "
        "against one entry per request (the article's design) and the loopback limit."
    )
    baseline = "rocksdb"
    reference = "mmapkit"
    layout = "rows"
    timing = (
        "the load generator's own clock around all the writes (cluster); the catch-up "
        "driver's own clock around one catch-up (catchup)"
    )
    limit = ("catchup", "loopback")
    metrics = {
        "entries_per_s": {"title": "entries/s", "unit": ""},
        "writes_per_s": {"title": "writes/s", "unit": ""},
        "p50_ms": {"title": "p50 ms", "unit": ""},
        "p99_ms": {"title": "p99 ms", "unit": ""},
    }
    notes = (
        "Catch-up (task `catchup`): a follower the whole log behind copies it over "
        "HTTP on loopback, server and follower in one process of the driver "
        "(`target/release/examples/catchup run ...`, its own clock around the catch-up "
        "only). The follower appends with sync=never (the page cache; sealed 64 MiB "
        "segments are still synced at roll-over: crash safety), like the loopback limit, "
        "which writes nothing. The size's bytes are the payload bytes (GB/s column); "
        "`entries/s` is per run.",
        "`one-entry` copies only the first 20,000 (50 B) / 5,000 (4 KiB) entries "
        "(--quick: 5,000 / 2,000) of the same kind of log, one request each (its rate is "
        "flat; the whole log would take minutes per run); its time is scaled to the whole "
        "log's entry count, so the ratio of times is the ratio of entries/s (its "
        "`entries/s` column is the measured one).",
        "`loopback` fetches entries × (24-byte frame header + payload) bytes, what the "
        "follower receives, as one static body from the same axum/hyper server to the "
        "same reqwest client, and drops them: the transfer alone.",
    )
    headline = {
        "capability": "replicated log",
        "label": "3-node KV, 16 clients, writes",
        "task": "clients-16",
        "contender": "mmapkit",
        "peers": ["rocksdb"],
        "sizes": [CLUSTER],
    }

    def __init__(self) -> None:
        self._quick = False
        self._catchup_info: dict[Path, dict[str, Any]] = {}
        self._runs = 0
        self.tasks = (
            *tuple(
                Task(
                    f"clients-{c}",
                    f"{c} concurrent client{'s' if c > 1 else ''}",
                    caches=("warm",),
                    sizes=(CLUSTER,),
                    throughput=False,
                    warmup="prime",
                    check=lambda _p, r: r,
                    note=f"{WRITES[c][0]:,} writes ({WRITES[c][1]:,} with --quick) of "
                    f"{VALUE}-byte values from {c} client(s), each waiting for its answer",
                )
                for c in CLIENTS
            ),
            Task(
                "catchup",
                "follower catch-up",
                caches=("warm",),
                baseline="one-entry",
                sizes=tuple(CATCHUP_SIZES),
                check=lambda _p, r: r,
                note="a follower the whole leader's log behind copies it over HTTP on "
                "loopback; the answer checked is (entries, payload bytes) of the "
                "leader's log, the driver asserts the follower appended all of them",
            ),
        )
        self.contenders = (
            self._contender(
                "mmapkit",
                KV,
                "mmapkit",
                "mmapkit's commit log (crates/mmapkit-raft LogStore): append "
                "writes the entries into the mapped segment and syncs them "
                "(msync MS_SYNC; the next 1 MiB zeroed ahead, so the sync writes "
                "data only) before it fires openraft's flush callback; "
                "catchup: mmapkit's follower (crates/mmapkit-replicate): pages of "
                "entries, CRC32C checked, appended in batches by a second thread",
            ),
            self._contender(
                "rocksdb",
                KV_ROCKS,
                "rocksdb",
                "the rocksdb 0.20 crate on Debian's librocksdb 7.8.3 (default "
                "options), our log store on it (crates/mmapkit-raft/src/rocks.rs): "
                "one WriteBatch per append with sync=true; `make bench-rocksdb`",
            ),
            self._contender(
                "memory",
                KV,
                "memory",
                "a BTreeMap log store (crates/mmapkit-raft/src/mem.rs), no "
                "durability: the upper bound (openraft-memstore itself is "
                "fixed to its own type config and cannot carry this KV)",
            ),
            self._etcd(),
            self._catchup(
                "one-entry",
                "the same follower asking one entry per request "
                "(page_count=1): the article's design, on a keep-alive connection",
            ),
            self._catchup(
                "loopback",
                "the loopback limit: the same framed bytes as one "
                "static HTTP body (axum → reqwest), fetched and dropped",
            ),
        )

    def sizes(self, quick: bool) -> list[Size]:
        self._quick = quick
        return [Size(CLUSTER, 0)] + [
            Size(label, (q if quick else n) * b) for label, (n, q, b) in CATCHUP_SIZES.items()
        ]

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        if size.label in CATCHUP_SIZES:
            return self._prepare_catchup(size, data_dir, log)
        root = data_dir / "replication"
        root.mkdir(parents=True, exist_ok=True)
        marker = root / "suite.json"
        marker.write_text(json.dumps({"value_bytes": VALUE}) + "\n")
        return Dataset(size, marker, [marker], {"value_bytes": VALUE, "nodes": 3})

    def _prepare_catchup(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        """The leader's logs (cached in bench/data/replication/): the whole one, and the
        prefix the one-entry design copies."""
        if not CATCHUP.is_file():
            raise Unavailable(f"{CATCHUP.relative_to(REPO_DIR)} not built (make bench-peers)")
        n_full, n_quick, nbytes = CATCHUP_SIZES[size.label]
        n = n_quick if self._quick else n_full
        n_one = min(n, ONE_ENTRY[size.label][1 if self._quick else 0])
        root = data_dir / "replication"
        root.mkdir(parents=True, exist_ok=True)
        dirs = {}
        for what, count in (("leader", n), ("prefix", n_one)):
            d = root / f"catchup-{count}x{nbytes}"
            dirs[what] = d

            def make(d: Path = d, count: int = count) -> dict[str, Any]:
                log(f"building {d.name} ({count:,} entries of {nbytes} B) ...")
                shutil.rmtree(d, ignore_errors=True)
                run_command([str(CATCHUP), "build", str(d), str(count), str(nbytes)])
                return {}

            generated(
                root / f"{d.name}.ok",
                {"entries": count, "bytes": nbytes, "v": 1},
                make,
                lambda _info, d=d: d.is_dir(),
            )
        work = root / "catchup-work"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        files = sorted(p for p in dirs["leader"].iterdir() if p.suffix == ".seg")
        info = {
            "entries": n,
            "entry_bytes": nbytes,
            "one_entry_entries": n_one,
            "prefix": str(dirs["prefix"]),
            "work": str(work),
        }
        self._catchup_info[dirs["leader"]] = info
        return Dataset(size, dirs["leader"], files, info)

    def _catchup_run(self, who: str, path: Path) -> Measured:
        """One catch-up by the driver; `path` is the leader's log."""
        info = self._catchup_info[path]
        leader = Path(info["prefix"]) if who == "one-entry" else path
        out, _err, _rc = run_command([str(CATCHUP), "run", who, str(leader), info["work"]])
        r = json.loads(out.decode().strip().splitlines()[-1])
        seconds = r["seconds"]
        if who == "one-entry":  # scaled to the whole log (see ONE_ENTRY)
            seconds *= info["entries"] / r["entries"]
        return Measured(
            (info["entries"], info["entries"] * info["entry_bytes"]),
            {"entries_per_s": round(r["entries"] / r["seconds"])},
            seconds=seconds,
        )

    def _catchup(self, name: str, note: str) -> Contender:
        def make() -> dict[str, Callable[[Path], Any]]:
            if not CATCHUP.is_file():
                raise Unavailable(f"{CATCHUP.relative_to(REPO_DIR)} not built (make bench-peers)")
            return {"catchup": lambda path: self._catchup_run(name, path)}

        return Contender(
            name, make, note=note, commands={"catchup": f"catchup run {name} LEADER WORK"}
        )

    def _contender(self, name: str, exe: Path, store: str, note: str) -> Contender:
        suite = self

        def make() -> dict[str, Callable[[Path], Any]]:
            def task(clients: int) -> Callable[[Path], Any]:
                def run(path: Path) -> Measured:
                    # checked per run, not here: the catch-up task runs without the KV
                    if not exe.is_file():
                        hint = "make bench-rocksdb" if store == "rocksdb" else "make bench-peers"
                        raise Unavailable(f"{exe.relative_to(REPO_DIR)} not built ({hint})")
                    suite._runs += 1
                    writes = WRITES[clients][1 if suite._quick else 0]
                    cluster = _Cluster(exe, store, path.parent / "runs" / f"{name}-{suite._runs}")
                    try:
                        out, _err, _rc = run_command(
                            [
                                str(exe),
                                "load",
                                "--nodes",
                                ",".join(cluster.addrs),
                                "--clients",
                                str(clients),
                                "--writes",
                                str(writes),
                                "--value-size",
                                str(VALUE),
                                "--json",
                            ]
                        )
                    finally:
                        cluster.close()
                    r = json.loads(out.decode().strip().splitlines()[-1])
                    metrics = {k: round(r[k], 3) for k in ("writes_per_s", "p50_ms", "p99_ms")}
                    return Measured(r["writes"], metrics, seconds=r["seconds"])

                return run

            impls = {f"clients-{c}": task(c) for c in CLIENTS}
            if name == "mmapkit" and CATCHUP.is_file():
                impls["catchup"] = lambda path: suite._catchup_run("follower", path)
            return impls

        commands = {f"clients-{c}": f"mmapkit-kv load --clients {c}" for c in CLIENTS}
        if name == "mmapkit":
            commands["catchup"] = "catchup run follower LEADER WORK"
        return Contender(name, make, note=note, commands=commands)

    def _etcd(self) -> Contender:
        suite = self

        def make() -> dict[str, Callable[[Path], Any]]:
            def task(clients: int) -> Callable[[Path], Any]:
                def run(path: Path) -> Measured:
                    for exe, hint in ((ETCD, "make bench-etcd"), (ETCD_LOAD, "make bench-peers")):
                        if not exe.is_file():
                            raise Unavailable(f"{exe} not installed ({hint})")
                    suite._runs += 1
                    writes = WRITES[clients][1 if suite._quick else 0]
                    cluster = _EtcdCluster(path.parent / "runs" / f"etcd-{suite._runs}")
                    try:
                        r = cluster.load(clients, writes)
                    finally:
                        cluster.close()
                    metrics = {k: round(r[k], 3) for k in ("writes_per_s", "p50_ms", "p99_ms")}
                    return Measured(r["writes"], metrics, seconds=r["seconds"])

                return run

            return {f"clients-{c}": task(c) for c in CLIENTS}

        return Contender(
            "etcd",
            make,
            note="etcd 3.4.23 (Debian's etcd-server; `make bench-etcd`), three members on "
            "loopback with the default durability (the WAL fdatasynced before a proposal "
            "is acknowledged; etcd batches the proposals that arrive meanwhile), driven "
            "by go.etcd.io/etcd/client/v3 (bench/peers/go/cmd/kv-etcd: the same writes, "
            "keys, values and clients as `mmapkit-kv load`, to the leader)",
            commands={f"clients-{c}": f"kv-etcd --clients {c}" for c in CLIENTS},
        )

    def versions(self) -> dict[str, str]:
        v = {"openraft": "0.9.25", "rocksdb crate": "0.20 (librocksdb 7.8.3)"}
        if ETCD.is_file():
            out, _err, _rc = run_command([str(ETCD), "--version"])
            v["etcd"] = out.decode().split()[2] if out else "?"
        return v

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        out = []
        for size in doc["sizes"]:
            if size["label"] not in CATCHUP_SIZES:
                continue
            out.append(
                {
                    "label": f"{size['label']}: ≥ 100× the one-entry design's entries/s",
                    "task": "catchup",
                    "contender": "mmapkit",
                    "size": size["label"],
                    "cache": "warm",
                    "versus": "one-entry",
                    "min_speedup": 100,
                    "name_versus": True,
                }
            )
            if size["label"] == "4 KiB entries":
                out.append(
                    {
                        "label": f"{size['label']}: ≥ 0.7× the loopback limit",
                        "task": "catchup",
                        "contender": "mmapkit",
                        "size": size["label"],
                        "cache": "warm",
                        "versus": "loopback",
                        "min_speedup": 0.7,
                        "name_versus": True,
                    }
                )
        for c, ratio in ((1, 1.0), (16, 1.5), (256, 1.5)):
            out.append(
                {
                    "label": f"{c} client{'s' if c > 1 else ''}: ≥ {ratio}× etcd's writes/s",
                    "task": f"clients-{c}",
                    "contender": "mmapkit",
                    "size": "3 nodes",
                    "cache": "warm",
                    "versus": "etcd",
                    "min_speedup": ratio,
                    "name_versus": True,
                }
            )
        for c in (16, 256):
            out.append(
                {
                    "label": f"{c} clients: ≥ 1.5× the RocksDB store's writes/s",
                    "task": f"clients-{c}",
                    "contender": "mmapkit",
                    "size": "3 nodes",
                    "cache": "warm",
                    "versus": "rocksdb",
                    "min_speedup": 1.5,
                    "name_versus": True,
                }
            )
            out.append(
                {
                    "label": f"{c} clients: ≥ 0.5× the in-memory store's writes/s",
                    "task": f"clients-{c}",
                    "contender": "mmapkit",
                    "size": "3 nodes",
                    "cache": "warm",
                    "versus": "memory",
                    "min_speedup": 0.5,
                    "name_versus": True,
                }
            )
        tasks = {t["name"] for t in doc["tasks"]}
        return [g for g in out if g["task"] in tasks]

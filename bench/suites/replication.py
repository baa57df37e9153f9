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

Data (task ``data``, sizes "100 MB data", "1 GB data", "4 GB data"; --quick: 20 MB): a
fresh cluster of each system (mmapkit-kv on its commit log, etcd) takes the size's bytes
as 64 KiB values from 16 clients; then the largest node's memory (VmRSS, RssAnon, VmHWM);
then a follower's disk is lost and replaced the operator's way (member remove, a fresh
node, member add as a learner, member promote), timed until the new member holds the
last write and answers a linearizable read (bench/suites/_clusters.py).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..harness import REPO_DIR, generated, run_command
from ..suite import Contender, Dataset, Measured, Size, Suite, Task, Unavailable
from ._clusters import ETCD, ETCD_LOAD, KV, EtcdCluster, KvCluster

CATCHUP = REPO_DIR / "target" / "release" / "examples" / "catchup"
KV_ROCKS = REPO_DIR / "target" / "bench-raft" / "release" / "mmapkit-kv"
CLIENTS = (1, 16, 256)
# writes per run: (full, quick)
WRITES = {1: (1_000, 200), 16: (10_000, 1_000), 256: (20_000, 2_000)}
VALUE = 100
CLUSTER = "3 nodes"
# catch-up workloads: size label -> (entries, entries with --quick, payload bytes)
CATCHUP_SIZES = {"50 B entries": (1_000_000, 100_000, 50), "4 KiB entries": (100_000, 20_000, 4096)}
# Task `data`: memory per node and a node replacement against the data a cluster holds.
# size label -> bytes of values (full); --quick runs only the smallest, scaled down.
DATA_SIZES = {"100 MB data": 100_000_000, "1 GB data": 1_000_000_000, "4 GB data": 4_000_000_000}
DATA_QUICK = {"20 MB data": 20_000_000}
DATA_VALUE = 64 << 10  # etcd takes requests up to 1.5 MiB
DATA_CLIENTS = 16
# Per system: extra flags of every node in task `data` (see the etcd contender's note).
DATA_ARGS: dict[str, tuple[str, ...]] = {
    "mmapkit": (),
    "etcd": ("--quota-backend-bytes", str(8 << 30), "--snapshot-count", "10000"),
}
# The one-entry design is timed on the first entries of the log only (its rate per entry
# is flat; the whole log would take minutes per run): this many, at most (full, quick).
ONE_ENTRY = {"50 B entries": (20_000, 5_000), "4 KiB entries": (5_000, 2_000)}


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
        "max_ms": {"title": "slowest write ms", "unit": ""},
        "load_mb_per_s": {"title": "load MB/s", "unit": ""},
        "rss_mib": {"title": "RSS MiB", "unit": ""},
        "anon_mib": {"title": "anon MiB", "unit": ""},
        "peak_mib": {"title": "peak RSS MiB", "unit": ""},
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
        "Data (task `data`): the time is the node replacement (from `member remove` until "
        "the new member holds the last write and answers a linearizable read of it); "
        "`RSS MiB` / `anon MiB` are the largest node's VmRSS / RssAnon once the data is "
        "written (file pages of mapped files count in RSS: mmapkit's log segments until "
        "they are sealed and synced, etcd's bbolt database, which is mapped whole), "
        "`peak RSS MiB` its VmHWM up to then; `load MB/s` and `slowest write ms` are the "
        "load generator's for writing the data (16 clients, 64 KiB values).",
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
        self._data_info: dict[Path, dict[str, Any]] = {}
        self._root = Path()
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
                "data",
                "memory per node, then a node replacement",
                caches=("warm",),
                baseline="etcd",
                sizes=(*DATA_SIZES, *DATA_QUICK),
                throughput=False,
                warmup="prime",
                repeats=lambda size, n: 1 if size.nbytes >= 1_000_000_000 else min(n, 3),
                check=lambda _p, r: r,
                note=f"{DATA_CLIENTS} clients write the size's bytes as {DATA_VALUE >> 10} KiB "
                "values into a fresh 3-node cluster, then one more write (a marker); the memory "
                "columns are the largest node's after that; then a follower's disk is lost "
                "(SIGKILL, directory deleted) and the time is the operator's replacement, "
                "from `member remove` until the new member (learner, then promoted) holds the "
                "marker and answers a linearizable read of it. One timed run at 1 GB and "
                "above (each loads the whole size), three below",
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
        data = DATA_QUICK if quick else DATA_SIZES
        return (
            [Size(CLUSTER, 0)]
            + [Size(label, (q if quick else n) * b) for label, (n, q, b) in CATCHUP_SIZES.items()]
            + [Size(label, nbytes) for label, nbytes in data.items()]
        )

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        if size.label in CATCHUP_SIZES:
            return self._prepare_catchup(size, data_dir, log)
        root = self._root = data_dir / "replication"
        root.mkdir(parents=True, exist_ok=True)
        if size.label == CLUSTER:
            marker = root / "suite.json"
            info = {"value_bytes": VALUE, "nodes": 3}
        else:  # a data size: the clusters write their own data
            marker = root / f"data-{size.nbytes}.json"
            info = {"value_bytes": DATA_VALUE, "nodes": 3, "writes": -(-size.nbytes // DATA_VALUE)}
            self._data_info[marker] = info
        marker.write_text(json.dumps(info) + "\n")
        return Dataset(size, marker, [marker], info)

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

    def _cluster_tasks(
        self, name: str, start: Callable[[Path, tuple[str, ...]], Any], missing: Callable[[], None]
    ) -> dict[str, Callable[[Path], Any]]:
        """The cluster tasks of one system: ``start(root, args)`` starts three nodes (a
        KvCluster or an EtcdCluster), ``missing()`` raises Unavailable when it is not built
        (checked per run, not in the factory: the catch-up task runs without the clusters)."""
        suite = self

        def fresh(args: tuple[str, ...] = ()) -> Any:
            missing()
            suite._runs += 1
            return start(suite._root / "runs" / f"{name}-{suite._runs}", args)

        def clients(n: int) -> Callable[[Path], Any]:
            def run(_path: Path) -> Measured:
                cluster = fresh()
                try:
                    r = cluster.load(n, WRITES[n][1 if suite._quick else 0], VALUE)
                finally:
                    cluster.close()
                metrics = {k: round(r[k], 3) for k in ("writes_per_s", "p50_ms", "p99_ms")}
                return Measured(r["writes"], metrics, seconds=r["seconds"])

            return run

        def data(path: Path) -> Measured:
            info = suite._data_info[path]
            cluster = fresh(DATA_ARGS.get(name, ()))
            try:
                r = cluster.load(DATA_CLIENTS, info["writes"], DATA_VALUE)
                cluster.put_marker()
                memory = cluster.memory()
                replace_s = cluster.replace_node()
            finally:
                cluster.close()
            metrics = {
                **memory,
                "load_mb_per_s": round(info["writes"] * DATA_VALUE / r["seconds"] / 1e6, 1),
                "max_ms": round(r["max_ms"], 1),
            }
            return Measured(info["writes"], metrics, seconds=replace_s)

        impls = {f"clients-{c}": clients(c) for c in CLIENTS}
        if name in DATA_ARGS:
            impls["data"] = data
        return impls

    def _contender(self, name: str, exe: Path, store: str, note: str) -> Contender:
        def missing() -> None:
            if not exe.is_file():
                hint = "make bench-rocksdb" if store == "rocksdb" else "make bench-peers"
                raise Unavailable(f"{exe.relative_to(REPO_DIR)} not built ({hint})")

        def make() -> dict[str, Callable[[Path], Any]]:
            impls = self._cluster_tasks(
                name, lambda root, args: KvCluster(exe, store, root, args), missing
            )
            if name == "mmapkit" and CATCHUP.is_file():
                impls["catchup"] = lambda path: self._catchup_run("follower", path)
            return impls

        commands = {f"clients-{c}": f"mmapkit-kv load --clients {c}" for c in CLIENTS}
        if name == "mmapkit":
            commands["catchup"] = "catchup run follower LEADER WORK"
            commands["data"] = (
                f"mmapkit-kv load --clients {DATA_CLIENTS}; member remove/add/promote"
            )
        return Contender(name, make, note=note, commands=commands)

    def _etcd(self) -> Contender:
        def missing() -> None:
            for exe, hint in ((ETCD, "make bench-etcd"), (ETCD_LOAD, "make bench-peers")):
                if not exe.is_file():
                    raise Unavailable(f"{exe} not installed ({hint})")

        return Contender(
            "etcd",
            lambda: self._cluster_tasks("etcd", EtcdCluster, missing),
            note="etcd 3.4.23 (Debian's etcd-server; `make bench-etcd`), three members on "
            "loopback with the default durability (the WAL fdatasynced before a proposal "
            "is acknowledged; etcd batches the proposals that arrive meanwhile), driven "
            "by go.etcd.io/etcd/client/v3 (bench/peers/go/cmd/kv-etcd: the same writes, "
            "keys, values and clients as `mmapkit-kv load`, to the leader); task `data`: "
            "also `--quota-backend-bytes` 8 GiB (the default 2 GiB cannot hold 4 GB) and "
            "`--snapshot-count 10000` (mmapkit-kv's default interval; etcd's default 100,000 "
            "keeps that many entries in memory), replacement with etcdctl `member remove`, "
            "`member add --learner`, `member promote`",
            commands={
                **{f"clients-{c}": f"kv-etcd --clients {c}" for c in CLIENTS},
                "data": f"kv-etcd --clients {DATA_CLIENTS}; etcdctl member remove/add/promote",
            },
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
        for size in doc["sizes"]:
            if not size["label"].endswith(" data"):
                continue
            if size["nbytes"] >= 4_000_000_000:
                out.append(
                    {
                        "label": f"{size['label']}: the largest node ≤ 512 MiB RSS",
                        "task": "data",
                        "contender": "mmapkit",
                        "size": size["label"],
                        "cache": "warm",
                        "max_metric": {"rss_mib": 512},
                    }
                )
            out.append(
                {
                    "label": f"{size['label']}: no write waits over 50 ms (snapshots, syncs)",
                    "task": "data",
                    "contender": "mmapkit",
                    "size": size["label"],
                    "cache": "warm",
                    "max_metric": {"max_ms": 50},
                }
            )
        tasks = {t["name"] for t in doc["tasks"]}
        return [g for g in out if g["task"] in tasks]

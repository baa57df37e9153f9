"""Three-node clusters on loopback for the `replication` suite: mmapkit-kv (any log store)
and etcd, each started in fresh directories, loaded through its own load generator,
measured (memory per node) and repaired the way its operators replace a lost disk.

Both clusters have the same surface: ``addrs``, ``load(clients, writes, value)`` (the
generator's JSON report), ``put_marker()``, ``memory()`` and ``replace_node()``, so the
suite's tasks are written once for both.
"""

from __future__ import annotations

import json
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from ..harness import REPO_DIR, run_command

KV = REPO_DIR / "target" / "release" / "mmapkit-kv"
ETCD = Path("/usr/bin/etcd")
ETCDCTL = Path("/usr/bin/etcdctl")
ETCD_LOAD = REPO_DIR / "bench" / "peers" / "go" / "bin" / "kv-etcd"
# A replacement that has not finished by then is a failure, not a slow result.
REPLACE_PATIENCE_S = 900.0
MARKER = "replication-bench-marker"


def free_port() -> int:
    """A port nothing listens on now (the kernel's choice)."""
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


def _status_mib(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and VmHWM (the peak RSS) of a process, in MiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, rest = line.partition(":")
        if name in ("VmRSS", "RssAnon", "VmHWM"):
            fields[name] = int(rest.split()[0]) / 1024
    return fields


def _memory(procs: list[subprocess.Popen]) -> dict[str, float]:
    """The largest node's resident memory (MiB): all of it (file pages of mapped logs and
    databases included), its anonymous part (heap: what grows with data held in RAM), and
    the peak of the resident set over the node's life."""
    per = [_status_mib(p.pid) for p in procs if p.poll() is None]
    return {
        "rss_mib": round(max(m["VmRSS"] for m in per), 1),
        "anon_mib": round(max(m["RssAnon"] for m in per), 1),
        "peak_mib": round(max(m["VmHWM"] for m in per), 1),
    }


def _until(what: str, attempt: Any, patience: float = REPLACE_PATIENCE_S) -> Any:
    """Calls ``attempt()`` until it returns something other than None (every 50 ms)."""
    deadline = time.monotonic() + patience
    while True:
        got = attempt()
        if got is not None:
            return got
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what}: not done within {patience:.0f} s")
        time.sleep(0.05)


def _ok(argv: list[str]) -> bytes | None:
    """stdout of a command that exits 0, else None (for polling)."""
    p = subprocess.run(argv, capture_output=True, check=False)
    return p.stdout if p.returncode == 0 else None


class _Nodes:
    """What both kinds of cluster share: their processes and directory."""

    root: Path
    procs: list[subprocess.Popen]

    def memory(self) -> dict[str, float]:
        """The largest node's memory now (see :func:`_memory`)."""
        return _memory(self.procs)

    def close(self) -> None:
        """Stops every node and removes the cluster's directory."""
        _stop(self.procs, self.root)


class KvCluster(_Nodes):
    """Three mmapkit-kv nodes of one store kind in fresh directories under `root`."""

    def __init__(self, exe: Path, store: str, root: Path, args: tuple[str, ...] = ()) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.exe, self.store, self.root, self.args = exe, store, root, args
        self.ids = [1, 2, 3]
        self.addrs = [f"127.0.0.1:{free_port()}" for _ in self.ids]
        self.procs: list[subprocess.Popen] = []
        try:
            for i, addr in zip(self.ids, self.addrs, strict=True):
                self.procs.append(self._serve(i, addr))
            members = ",".join(f"{i}={a}" for i, a in zip(self.ids, self.addrs, strict=True))
            run_command([str(exe), "init", "--nodes", members])
            # a few writes: a leader is elected and the connections are up
            run_command([str(exe), "load", "--nodes", ",".join(self.addrs), "--writes", "20"])
        except BaseException:
            self.close()
            raise

    def _serve(self, i: int, addr: str) -> subprocess.Popen:
        argv = [str(self.exe), "serve", "--id", str(i), "--dir", str(self.root / f"n{i}")]
        argv += ["--bind", addr, "--store", self.store, *self.args]
        p = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        line = p.stdout.readline().decode() if p.stdout else ""
        if "listening" not in line:
            p.kill()
            raise RuntimeError(f"node {i} ({self.store}) did not start: {line!r}")
        return p

    def load(self, clients: int, writes: int, value: int) -> dict[str, Any]:
        """`mmapkit-kv load --json`'s report."""
        out, _err, _rc = run_command(
            [
                *(str(self.exe), "load", "--nodes", ",".join(self.addrs)),
                *("--clients", str(clients), "--writes", str(writes)),
                *("--value-size", str(value), "--json"),
            ]
        )
        return json.loads(out.decode().strip().splitlines()[-1])

    def put_marker(self) -> None:
        """One last write: a node whose applied state holds it holds every earlier write."""
        run_command([str(self.exe), "put", "--nodes", ",".join(self.addrs), MARKER, "1"])

    def replace_node(self) -> float:
        """A follower's disk is lost: SIGKILL it and delete its directory; then the operator's
        replacement (docs/guide/kv-operators.md): `member remove`, a fresh node on an empty
        directory, `member add` (a learner), `member promote` (retried until it has caught
        up), until the new member holds the last write (a stale read of it answers) and
        answers a linearizable read of it. Returns the seconds from `member remove` on."""
        exe = str(self.exe)
        listing = [exe, "member", "list", "--nodes", ",".join(self.addrs), "--json"]
        out, _e, _rc = run_command(listing)
        leader = json.loads(out)["leader"]
        v = next(k for k, i in enumerate(self.ids) if i != leader)  # a follower
        nodes = ",".join(a for k, a in enumerate(self.addrs) if k != v)
        old = self.procs[v]
        old.kill()
        old.wait()
        shutil.rmtree(self.root / f"n{self.ids[v]}")
        new_id, new_addr = max(self.ids) + 1, f"127.0.0.1:{free_port()}"
        t0 = time.monotonic()
        run_command([exe, "member", "remove", "--nodes", nodes, str(self.ids[v])])
        self.procs[v] = self._serve(new_id, new_addr)
        self.ids[v], self.addrs[v] = new_id, new_addr
        run_command([exe, "member", "add", "--nodes", nodes, str(new_id), new_addr])
        _until("promote", lambda: _ok([exe, "member", "promote", "--nodes", nodes, str(new_id)]))
        get = [exe, "get", "--nodes", new_addr]
        _until("the new member's copy", lambda: _ok([*get, "--stale", MARKER]))
        _until("a linearizable read", lambda: _ok([*get, MARKER]))
        return time.monotonic() - t0


class EtcdCluster(_Nodes):
    """Three etcd members on loopback in fresh directories under `root`, default
    durability (the WAL fdatasynced before a proposal is acknowledged); `args`: more
    flags for every member."""

    def __init__(self, root: Path, args: tuple[str, ...] = ()) -> None:
        shutil.rmtree(root, ignore_errors=True)
        root.mkdir(parents=True)
        self.root, self.args = root, args
        self.names = ["n1", "n2", "n3"]
        ports = [(free_port(), free_port()) for _ in self.names]
        self.addrs = [f"http://127.0.0.1:{c}" for c, _ in ports]
        self.peers = [f"http://127.0.0.1:{p}" for _, p in ports]
        initial = ",".join(f"{n}={p}" for n, p in zip(self.names, self.peers, strict=True))
        self.procs: list[subprocess.Popen] = []
        try:
            for name, client, peer in zip(self.names, self.addrs, self.peers, strict=True):
                self.procs.append(self._serve(name, client, peer, initial, "new"))
            # waits for a leader (the driver does), then a few writes: connections up
            self.load(1, 20, 100)
        except BaseException:
            self.close()
            raise

    def _serve(
        self, name: str, client: str, peer: str, initial: str, state: str
    ) -> subprocess.Popen:
        argv = [str(ETCD), "--name", name, "--data-dir", str(self.root / name)]
        argv += ["--listen-client-urls", client, "--advertise-client-urls", client]
        argv += ["--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer]
        argv += ["--initial-cluster", initial, "--initial-cluster-state", state]
        argv += ["--initial-cluster-token", self.root.name, "--logger", "zap"]
        argv += ["--log-level", "error", *self.args]
        return subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def load(self, clients: int, writes: int, value: int) -> dict[str, Any]:
        """kv-etcd's report (the same JSON as `mmapkit-kv load --json`)."""
        out, _err, _rc = run_command(
            [
                *(str(ETCD_LOAD), "--endpoints", ",".join(self.addrs), "--clients", str(clients)),
                *("--writes", str(writes), "--value-size", str(value)),
            ]
        )
        return json.loads(out.decode().strip().splitlines()[-1])

    def _ctl(self, endpoints: list[str], *args: str) -> list[str]:
        return [str(ETCDCTL), "--endpoints", ",".join(endpoints), *args]

    def put_marker(self) -> None:
        """See :meth:`KvCluster.put_marker`."""
        run_command(self._ctl(self.addrs, "put", MARKER, "1"))

    def replace_node(self) -> float:
        """The same replacement as :meth:`KvCluster.replace_node`, etcd's way (its runtime
        reconfiguration guide): `member remove`, `member add --learner`, a new member on an
        empty directory with `--initial-cluster-state existing`, `member promote` (refused
        until the learner is in sync; retried), then a serializable read of the last write
        on the new member and a linearizable one through it."""
        out, _e, _rc = run_command(self._ctl(self.addrs, "endpoint", "status", "-w", "json"))
        status = [e["Status"] for e in json.loads(out)]
        v = next(k for k, st in enumerate(status) if st["header"]["member_id"] != st["leader"])
        gone = f"{status[v]['header']['member_id']:x}"
        live = [a for k, a in enumerate(self.addrs) if k != v]
        old = self.procs[v]
        old.kill()
        old.wait()
        shutil.rmtree(self.root / self.names[v])
        name = "n4"  # one replacement per cluster
        client, peer = f"http://127.0.0.1:{free_port()}", f"http://127.0.0.1:{free_port()}"
        t0 = time.monotonic()
        run_command(self._ctl(live, "member", "remove", gone))
        # etcd refuses a change until every voter has been connected for 5 s (its strict
        # reconfiguration check: "unhealthy cluster"); an operator retries, so do we
        add = self._ctl(live, "member", "add", name, "--learner", f"--peer-urls={peer}")
        added = _until("member add", lambda: _ok(add))
        new_id = added.decode().split()[1]  # "Member 8e9e05c52164694d added to cluster ..."
        kept = [f"{n}={p}" for n, p in zip(self.names, self.peers, strict=True)]
        initial = ",".join(m for k, m in enumerate(kept) if k != v)
        self.procs[v] = self._serve(name, client, peer, f"{initial},{name}={peer}", "existing")
        self.names[v], self.addrs[v], self.peers[v] = name, client, peer
        promote = self._ctl(live, "member", "promote", new_id)
        _until("promote", lambda: _ok(promote))
        get = self._ctl([client], "get", MARKER, "--print-value-only")
        _until("the new member's copy", lambda: _ok([*get, "--consistency=s"]) or None)
        _until("a linearizable read", lambda: _ok([*get, "--consistency=l"]) or None)
        return time.monotonic() - t0

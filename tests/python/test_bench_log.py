"""The `log` benchmark suite runs end to end on a tiny workload and verifies answers.

The baseline and both mmapkit contenders must run and be verified; a peer whose driver
was not built (make bench-peers) is skipped with the reason, one that was built must
give verified answers too.
"""

import pytest

from bench.harness import RunOptions, failures, run_suite
from bench.report import text_tables
from bench.suites.log import GO_BIN, RUST_BIN, LogSuite, Workload

TINY = {
    "tiny": Workload("tiny", 2_000, 50),
    "tiny-4KiB": Workload("tiny-4KiB", 200, 4096, sync=False),
}
TASKS = ("append", "read", "open_read", "append_sync", "append_sync_4")


@pytest.fixture(scope="module")
def doc(tmp_path_factory):
    data = tmp_path_factory.mktemp("logbench")
    suite = LogSuite(workloads=TINY, sync_batches=20)
    d = run_suite(suite, RunOptions(repeat=1, caches=("warm",), data_dir=data))
    print(text_tables(d))
    return d


def cells(doc, contender):
    return [r for r in doc["results"] if r["contender"] == contender and r["cache"] == "warm"]


@pytest.mark.parametrize("contender", ["baseline", "mmapkit", "mmapkit (Python)"])
def test_baseline_and_mmapkit_run_and_are_verified(doc, contender):
    mine = cells(doc, contender)
    ran = [r for r in mine if r["status"] == "ok"]
    bad = [r for r in mine if r["status"] != "ok" and "not measured" not in r["reason"]]
    assert not bad, bad
    # append, read and open + read on both workloads, the two sync tasks on the one with sync
    assert len(ran) == 2 * 3 + 2, mine
    assert all(r["times"] and r["times"][0] > 0 for r in ran)


PEERS = {
    "raft-engine": RUST_BIN / "log-raft-engine",
    "commitlog": RUST_BIN / "log-commitlog",
    "tidwall/wal": GO_BIN / "log-tidwall",
    "etcd/wal": GO_BIN / "log-etcd",
    "disk limit": RUST_BIN / "log-baseline",
    "driver loop (no log)": RUST_BIN / "log-null",
}


@pytest.mark.parametrize("peer", list(PEERS))
def test_peer_runs_and_is_verified(doc, peer):
    if not PEERS[peer].is_file():
        pytest.skip(f"{PEERS[peer].name} not built (make bench-peers)")
    mine = cells(doc, peer)
    assert not [r for r in mine if r["status"] not in ("ok", "n/a")], mine
    assert [r for r in mine if r["status"] == "ok"], mine
    na = [r for r in mine if r["status"] == "n/a"]
    assert all("not measured" in r["reason"] or "no implementation" in r["reason"] for r in na), na


def test_no_failures_and_group_commit_counts(doc):
    assert not failures(doc)
    syncs = {
        r["contender"]: r["metrics"]["syncs"]["max"]
        for r in doc["results"]
        if r["task"] == "append_sync" and r["status"] == "ok"
    }
    assert syncs["baseline"] == syncs["mmapkit"] == 20  # one per batch
    assert doc["targets"], "the targets table is built"


def test_the_driver_loop_is_measured_and_netted(doc):
    """The drivers' own loop (log-null) has an append row, and the net target quotes
    mmapkit's median minus it."""
    if not (RUST_BIN / "log-null").is_file():
        pytest.skip("log-null not built (make bench-peers)")
    null = [r for r in cells(doc, "driver loop (no log)") if r["task"] == "append"]
    assert null and all(r["status"] == "ok" for r in null), null
    rows = [r for r in text_tables(doc).splitlines() if "net of the driver" in r]
    assert rows and " s net (" in rows[0], rows


def test_a_wrong_answer_is_caught(tmp_path):
    """A contender whose read-back data differs from the generated data is reported
    as a wrong answer (here: mmapkit's driver, with one bit of its CRC flipped)."""
    suite = LogSuite(workloads={"tiny": Workload("tiny", 100, 50)}, sync_batches=2)
    real = suite._check("append")

    def tampered(path, r):
        return real(path, {**r, "crc": r["crc"] ^ 1} if r.get("driver") == "mmapkit" else r)

    suite.tasks[0].check = tampered
    d = run_suite(
        suite, RunOptions(repeat=1, caches=("warm",), data_dir=tmp_path, tasks=["append"])
    )
    status = {
        r["contender"]: r["status"]
        for r in d["results"]
        if r["task"] == "append" and r["cache"] == "warm"
    }
    assert status["mmapkit"] == "wrong" and status["baseline"] == "ok", status

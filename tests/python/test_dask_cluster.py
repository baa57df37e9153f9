"""``python -m mmapkit.dask`` against real dask components (issue 24, defect 2):
a ``dask scheduler`` and a ``dask worker`` process started with the
``distributed`` command-line tools, the default ``LocalCluster`` of worker
processes, and the README's example. Run as ``__main__`` the module's task
functions must pickle by reference (``mmapkit.dask``), which workers import."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

distributed = pytest.importorskip("distributed")
pytest.importorskip("dask.array")

from _stores import linear_store  # noqa: E402

import mmapkit  # noqa: E402
import mmapkit.dask as md  # noqa: E402

DASK = Path(sys.executable).with_name("dask")
TREE = str(Path(mmapkit.__file__).resolve().parent.parent)


def env() -> dict[str, str]:
    """This interpreter's environment, with this tree's mmapkit first on the path."""
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([TREE, *filter(None, [e.get("PYTHONPATH")])])
    return e


def start(log: Path, *args: str) -> subprocess.Popen[bytes]:
    with open(log, "wb") as out:
        return subprocess.Popen(
            args, stdout=out, stderr=subprocess.STDOUT, env=env(), start_new_session=True
        )


def stop(p: subprocess.Popen[bytes]) -> None:
    """Ends the process and its group (a nanny's worker child too)."""
    if p.poll() is None:
        os.killpg(p.pid, signal.SIGTERM)
        with contextlib.suppress(subprocess.TimeoutExpired):
            p.wait(10)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(p.pid, signal.SIGKILL)
    p.wait()


@pytest.fixture(scope="module")
def scheduler(tmp_path_factory):
    """The address of a ``dask scheduler`` process with one ``dask worker`` process."""
    if not DASK.exists():
        pytest.skip(f"no dask command-line tool beside {sys.executable}")
    d = tmp_path_factory.mktemp("cluster")
    sfile = d / "scheduler.json"
    procs = []
    try:
        procs.append(
            start(
                d / "scheduler.log",
                *(str(DASK), "scheduler", "--port", "0", "--no-dashboard"),
                *("--scheduler-file", str(sfile)),
            )
        )
        deadline = time.monotonic() + 60
        while not (sfile.exists() and sfile.stat().st_size):
            if procs[0].poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"the scheduler did not start:\n{(d / 'scheduler.log').read_text()}")
            time.sleep(0.05)
        procs.append(
            start(
                d / "worker.log",
                *(str(DASK), "worker", "--scheduler-file", str(sfile)),
                *("--nthreads", "1", "--nworkers", "1", "--no-dashboard"),
            )
        )
        with distributed.Client(scheduler_file=str(sfile), timeout=60) as c:
            try:
                c.wait_for_workers(1, timeout=60)
            except Exception:  # noqa: BLE001 - report the worker's log instead
                pytest.fail(f"no worker joined:\n{(d / 'worker.log').read_text()}")
            yield c.scheduler.address
    finally:
        for p in reversed(procs):
            stop(p)


def store(path: Path, n: int = 6000, d: int = 4) -> tuple[np.ndarray, np.ndarray]:
    fs, X, y = linear_store(path, n, d, seed=2)
    fs.close()
    return X, y


def cli(*args: str) -> dict:
    r = subprocess.run(
        [sys.executable, "-m", "mmapkit.dask", *args],
        capture_output=True,
        text=True,
        env=env(),
        timeout=180,
        check=False,
    )
    # On main: exit 1, "Could not serialize object of type _HLGExprSequence".
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout)


def test_command_line_on_a_scheduler_and_worker_processes(tmp, scheduler):
    X, _ = store(tmp / "fs")
    p = str(tmp / "fs")
    out = cli("median", p, "--scheduler", scheduler, "--chunks", "700")
    assert out == {"median": float(np.median(X))}
    out = cli("quantile", p, "--scheduler", scheduler, "-q", "0.1", "-q", "0.9")
    assert out["quantile"] == np.quantile(X, [0.1, 0.9]).tolist()
    # The README's example: python -m mmapkit.dask fit DIR --scheduler ADDR
    out = cli("fit", p, "--scheduler", scheduler, "--epochs", "3", "--chunks", "1000")
    w, b, losses = md.fit_logistic_regression(p, 3, 0.5, 0.0, 1000)
    np.testing.assert_allclose(out["coef"], w, rtol=1e-5)
    assert out["intercept"] == pytest.approx(b, rel=1e-5, abs=1e-7)
    np.testing.assert_allclose(out["losses"], losses, rtol=1e-6)


def test_command_line_default_local_cluster(tmp):
    X, _ = store(tmp / "fs", n=3000)
    # The default scheduler: a LocalCluster of worker processes.
    assert cli("median", str(tmp / "fs"), "--workers", "1") == {"median": float(np.median(X))}

"""Issue 24's FeatureStore and torch defects: in-place writes to batches,
the writer lock after close, and the loader after a refresh."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mmapkit
from mmapkit import FeatureStore

torch = pytest.importorskip("torch")

from mmapkit.torch import FeatureDataset, data_loader  # noqa: E402


def make(path, n=8, d=4):
    with FeatureStore(path, "w", dim=d) as fs:
        fs.add(np.arange(n * d, dtype=np.float32).reshape(n, d), np.zeros(n))


def run_child(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# ----- defect 1: writing in place to a batch -------------------------------------


def test_in_place_writes_to_sequential_batches_do_not_kill_the_process(tmp):
    make(tmp / "t")
    # In a child: on today's main this dies by SIGSEGV (rc -11).
    r = run_child(
        f"""
        import numpy as np, mmapkit, mmapkit.torch
        for X, y in mmapkit.torch.data_loader({str(tmp / "t")!r}, 4):
            X -= X.mean(0)
            y += 1
        ds = mmapkit.torch.FeatureDataset({str(tmp / "t")!r}, 4)
        ds[0][0].sub_(1)
        ds[slice(0, 8)][1].add_(5)
        print("alive")
        """
    )
    assert r.returncode == 0 and "alive" in r.stdout, (r.returncode, r.stderr[-2000:])


def test_in_place_writes_land_on_private_memory(tmp):
    make(tmp / "t")
    want = np.arange(32, dtype=np.float32).reshape(8, 4)
    ds = FeatureDataset(tmp / "t", 4)
    X, y = ds[0]
    X.sub_(100)
    y.add_(1)
    assert torch.equal(X, torch.from_numpy(want[:4] - 100)), "the tensor holds the write"
    assert torch.equal(y, torch.ones(4))
    # Neither the file nor another process's (or handle's) reading changed.
    assert np.array_equal(np.load(tmp / "t" / "features.npy"), want)
    with FeatureStore(tmp / "t") as fs:
        assert np.array_equal(fs.features, want) and not fs.labels.any()
        # numpy views of a reader stay read-only.
        X2, _ = fs.get()
        assert not X2.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            X2[0, 0] = 1
        with pytest.raises(ValueError):
            X2.flags.writeable = True


def test_a_reader_still_follows_growth_after_a_private_write(tmp):
    make(tmp / "t")
    r = FeatureStore(tmp / "t")
    FeatureDataset(r, 8)[0][0].add_(1)
    with FeatureStore(tmp / "t", "r+") as w:
        w.add(np.full((3000, 4), 7, np.float32), np.ones(3000))
    assert r.refresh() == 3008
    X, y = r.get(8)
    assert (X == 7).all() and (y == 1).all()
    r.close()


# ----- defect 4: the writer lock after close() -----------------------------------


def test_close_releases_the_writer_lock_while_views_live(tmp):
    make(tmp / "t")
    fs = FeatureStore(tmp / "t", "r+")
    X, y = fs.get()
    fs.close()
    # Today: BlockingIOError "another process has the store open for writing".
    with FeatureStore(tmp / "t", "r+") as w:
        w.add(np.ones((2, 4)), np.ones(2))
    assert X.shape == (8, 4) and X[1, 0] == 4.0 and not y.any(), "views stay readable"
    fs2 = FeatureStore(tmp / "t", "w", dim=4)  # re-creating works as well
    fs2.close()
    a = mmapkit.ArrayStore.create(tmp / "a.npy", "f4")
    a.extend(np.ones(5))
    v = a[:]
    a.close()
    mmapkit.ArrayStore.open(tmp / "a.npy", "r+").close()
    assert v.sum() == 5


def test_a_second_writer_in_this_process_is_told_it_is_this_process(tmp):
    make(tmp / "t")
    with FeatureStore(tmp / "t", "r+"), pytest.raises(BlockingIOError) as e:
        FeatureStore(tmp / "t", "r+")
    assert "this process already has" in str(e.value)
    assert "another process" not in str(e.value)


def test_close_with_live_views_releases_the_lock_for_other_processes(tmp):
    make(tmp / "t")
    fs = FeatureStore(tmp / "t", "r+")
    X, _ = fs.get()
    fs.close()
    r = run_child(
        f"""
        import numpy as np, mmapkit
        with mmapkit.FeatureStore({str(tmp / "t")!r}, "r+") as w:
            print(w.add(np.ones((1, 4)), [1]))
        """
    )
    assert r.returncode == 0 and r.stdout.strip() == "9", r.stderr[-2000:]
    assert X[7, 3] == 31.0
    # And the other way round: a live writer elsewhere is "another process".
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, mmapkit
                w = mmapkit.FeatureStore({str(tmp / "t")!r}, "r+")
                print("open", flush=True)
                sys.stdin.read()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "open"
        with pytest.raises(BlockingIOError, match="another process"):
            FeatureStore(tmp / "t", "r+")
    finally:
        child.kill()
        child.wait()


def _try_writer(path: str) -> str:
    try:
        FeatureStore(path, "r+").close()
    except BlockingIOError as e:
        return str(e)
    return "opened"


def test_a_forked_child_is_told_another_process_has_it(tmp):
    # The child inherits the parent's lock and bookkeeping, not the ownership.
    import multiprocessing

    make(tmp / "t")
    with FeatureStore(tmp / "t", "r+"), multiprocessing.get_context("fork").Pool(1) as pool:
        msg = pool.apply(_try_writer, (str(tmp / "t"),))
    assert "another process" in msg and "this process" not in msg, msg


# ----- defect 8: the loader after a refresh --------------------------------------


@pytest.mark.parametrize("shuffle", [False, True])
def test_data_loader_sees_rows_added_after_a_refresh(tmp, shuffle):
    make(tmp / "t", n=8)
    ds = FeatureDataset(tmp / "t", 4)
    loader = data_loader(ds, 4, shuffle=shuffle, seed=1)
    assert sum(len(y) for _, y in loader) == 8
    with FeatureStore(tmp / "t", "r+") as w:
        w.add(np.full((6, 4), -1, np.float32), np.ones(6))
    assert sum(len(y) for _, y in loader) == 8, "not before the refresh"
    assert ds.refresh() == 14
    got = [(X.numpy().copy(), y.numpy().copy()) for X, y in loader]
    assert len(loader) == len(got) == 4
    X = np.concatenate([g[0] for g in got])
    y = np.concatenate([g[1] for g in got])
    assert len(y) == 14 and y.sum() == 6 and (X == -1).all(axis=1).sum() == 6


def test_persistent_workers_follow_a_refresh(tmp):
    make(tmp / "t", n=8)
    ds = FeatureDataset(tmp / "t", 4)
    loader = data_loader(
        ds, 4, num_workers=1, persistent_workers=True, multiprocessing_context="fork"
    )
    assert sum(len(y) for _, y in loader) == 8
    with FeatureStore(tmp / "t", "r+") as w:
        w.add(np.ones((5, 4)), np.ones(5))
    ds.refresh()
    ys = [y for _, y in loader]
    assert sum(len(y) for y in ys) == 13 and float(sum(y.sum() for y in ys)) == 5

"""mmapkit.parallel.map_chunks: workers map the array by path."""

import pickle
import uuid

import numpy as np
import pytest

import mmapkit
from mmapkit.parallel import _source, chunk_bounds, map_chunks


def chunk_sum(chunk):
    return int(chunk.sum(dtype=np.int64))


def chunk_info(chunk):
    """What a worker received: no data of its own (a view of a mapping)."""
    return (len(chunk), bool(chunk.flags.owndata), chunk.base is not None)


def expected_sums(a, rows):
    return [int(a[i : i + rows].sum(dtype=np.int64)) for i in range(0, len(a), rows)]


@pytest.fixture
def data():
    return np.arange(10_007 * 3, dtype=np.int32).reshape(10_007, 3)


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_store_source(tmp, data, method):
    s = mmapkit.ArrayStore.create(tmp / "s.npy", "i4", row_shape=(3,))
    s.extend(data)
    got = map_chunks(chunk_sum, s, processes=2, chunk_rows=1000, start_method=method)
    assert got == expected_sums(data, 1000)
    infos = map_chunks(chunk_info, s, processes=2, chunk_rows=4000, start_method=method)
    assert [n for n, _, _ in infos] == [4000, 4000, 2007]
    assert not any(own for _, own, _ in infos)


def test_memmap_shared_and_path_sources(tmp, data):
    path = tmp / "raw.bin"
    with open(path, "wb") as f:
        f.write(b"x" * 100)  # a header to skip: an odd offset
        f.write(data.tobytes())
    mm = np.memmap(path, dtype="i4", mode="r", offset=100, shape=data.shape)
    assert map_chunks(chunk_sum, mm, processes=2, chunk_rows=3000) == expected_sums(data, 3000)
    # A slice of a memmap: the worker maps exactly those rows.
    part = mm[5000:6001]
    assert map_chunks(chunk_sum, part, processes=2, chunk_rows=100) == expected_sums(
        data[5000:6001], 100
    )

    name = f"mmapkit-test-{uuid.uuid4().hex[:12]}"
    sh = mmapkit.SharedArray.from_array(name, data)
    try:
        assert map_chunks(chunk_sum, sh, processes=2) == expected_sums(data, -(-len(data) // 8))
    finally:
        sh.unlink()
    np.save(tmp / "d.npy", data)
    assert map_chunks(chunk_sum, str(tmp / "d.npy"), processes=0, chunk_rows=5000) == expected_sums(
        data, 5000
    )


def test_only_bounds_and_a_recipe_are_pickled(tmp):
    s = mmapkit.ArrayStore.create(tmp / "big.npy", "f8")
    s.extend(np.zeros(1 << 20))  # 8 MiB
    assert len(pickle.dumps(_source(s))) < 300
    assert len(pickle.dumps(chunk_bounds(len(s), 1000)[0])) < 50


def test_edge_cases(tmp):
    s = mmapkit.ArrayStore.create(tmp / "e.npy", "u1")
    assert map_chunks(chunk_sum, s, processes=2) == []
    s.extend(np.ones(5, "u1"))
    assert map_chunks(chunk_sum, s, processes=8, chunk_rows=2) == [2, 2, 1]
    assert chunk_bounds(5, 2) == [(0, 2), (2, 4), (4, 5)]
    with pytest.raises(ValueError):
        chunk_bounds(5, 0)
    with pytest.raises(TypeError, match="by path"):
        map_chunks(chunk_sum, np.zeros(10))
    with pytest.raises(ValueError, match="processes"):
        map_chunks(chunk_sum, s, processes=-1)


DYING_WORKER = r"""
import os, signal, sys
import numpy as np
import mmapkit
from concurrent.futures.process import BrokenProcessPool
from mmapkit.parallel import map_chunks

def die(chunk):
    if chunk[0] == 0:
        if sys.argv[2] == "exit":
            os._exit(1)
        os.kill(os.getpid(), signal.SIGKILL)
    return int(chunk.sum())

s = mmapkit.ArrayStore.create(sys.argv[1], "i8")
s.extend(np.arange(100))
try:
    map_chunks(die, s, processes=2, chunk_rows=10, start_method="fork")
except BrokenProcessPool as e:
    print("raised", type(e).__name__)
"""


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_map_chunks_raises_when_a_worker_dies(tmp, how):
    """Issue 10 defect 15: a dead worker made map_chunks wait forever."""
    import subprocess
    import sys

    try:
        r = subprocess.run(
            [sys.executable, "-c", DYING_WORKER, str(tmp / "w.npy"), how],
            capture_output=True,
            text=True,
            timeout=120,  # a hang-breaker: a start-up and a fork pool on a loaded machine fit
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail("map_chunks hung after a worker died")
    assert r.stdout.strip() == "raised BrokenProcessPool", r.stderr

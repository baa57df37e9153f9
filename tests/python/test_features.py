"""mmapkit.FeatureStore and mmapkit.ml.StreamingLogisticRegression."""

from __future__ import annotations

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import _stores
import numpy as np
import pytest
from _stores import linear_store

import mmapkit
import mmapkit.features
import mmapkit.ml
from mmapkit import FeatureStore, FormatError
from mmapkit.features import batch_order
from mmapkit.ml import StreamingLogisticRegression, sigmoid


def make(path, n=1000, d=8, dtype=np.float32, seed=0, batch=None):
    return linear_store(path, n, d, seed=seed, slope=(-1, 1), bias=0.1, dtype=dtype, batch=batch)


def ids_store(path, n, d=3, batch=None):
    return _stores.ids_store(path, n, d, np.float64, batch)


# ----- store: layout, commit, errors -----------------------------------------


def test_round_trip_layout_and_zero_copy_views(tmp):
    fs, X, y = make(tmp / "fs", n=500, batch=128)
    assert (len(fs), fs.shape, fs.dim, fs.dtype, fs.label_dtype) == (
        500,
        (500, 8),
        8,
        np.float32,
        np.float32,
    )
    fs.close()
    assert sorted(os.listdir(tmp / "fs")) == ["features.npy", "labels.npy", "meta.json"]
    meta = json.loads((tmp / "fs" / "meta.json").read_text())
    assert meta["format"] == "mmapkit.FeatureStore" and meta["version"] == 1
    assert (meta["rows"], meta["dim"], meta["dtype"], meta["label_dtype"]) == (500, 8, "<f4", "<f4")
    # Plain .npy files, equal to what was added.
    assert np.array_equal(np.load(tmp / "fs" / "features.npy"), X)
    assert np.array_equal(np.load(tmp / "fs" / "labels.npy"), y)

    r = FeatureStore(tmp / "fs")
    Xv, yv = r.get(100, 200)
    assert np.array_equal(Xv, X[100:200]) and np.array_equal(yv, y[100:200])
    assert np.shares_memory(Xv, r.features) and np.shares_memory(yv, r.labels)
    assert not Xv.flags.writeable and not yv.flags.writeable
    assert np.array_equal(r.get(-10)[0], X[-10:])
    Xt, yt = r.take([5, 6, 7, 499, 0, 5])
    assert np.array_equal(Xt, X[[5, 6, 7, 499, 0, 5]]) and np.array_equal(
        yt, y[[5, 6, 7, 499, 0, 5]]
    )
    with pytest.raises(ValueError, match="out of range"):
        r.get(10, 501)
    with pytest.raises(IndexError, match="row 500 is out of range"):
        r.take([1, 500])
    r.close()
    with pytest.raises(ValueError, match="closed"):
        r.get(0, 1)


def test_any_float_dtype_and_label_dtype(tmp):
    fs = FeatureStore(tmp / "f8", "w", dim=2, dtype="float64", label_dtype="int32")
    fs.add([[1, 2], [3, 4]], [0, 1])
    fs.add([5, 6], 1)  # one row
    X, y = fs.get()
    assert X.dtype == np.float64 and y.dtype == np.int32
    assert X.tolist() == [[1, 2], [3, 4], [5, 6]] and y.tolist() == [0, 1, 1]
    fs.close()
    fs = FeatureStore(tmp / "f2", "w", dim=3, dtype=np.float16)
    fs.add(np.ones((4, 3)), np.zeros(4))
    assert FeatureStore(tmp / "f2").features.dtype == np.float16


@pytest.mark.parametrize("dtype", [np.uint16, np.int8, np.int64, np.uint64])
def test_integer_features_are_stored_read_and_summarised_as_numpy_does(tmp, dtype):
    rng = np.random.default_rng(0)
    info = np.iinfo(dtype)
    X = rng.integers(max(info.min, -1000), min(info.max, 60000), (300, 4)).astype(dtype)
    y = rng.integers(0, 2, 300)
    with FeatureStore(tmp / "i", "w", dim=4, dtype=dtype, label_dtype=np.int64) as fs:
        fs.add(X, y)
    fs = FeatureStore(tmp / "i")
    assert fs.dtype == dtype and fs.features.dtype == dtype
    assert np.array_equal(fs.get()[0], X) and np.array_equal(fs.take([5, 1])[0], X[[5, 1]])
    np.testing.assert_allclose(fs.mean(), X.mean(axis=0))
    np.testing.assert_allclose(fs.std(), X.std(axis=0))
    assert np.array_equal(fs.min(), X.min(axis=0)) and fs.min().dtype == dtype
    assert np.array_equal(fs.max(), X.max(axis=0))
    np.testing.assert_array_equal(fs.median(), np.median(X, axis=0))
    np.testing.assert_array_equal(fs.quantile([0.1, 0.9]), np.quantile(X, [0.1, 0.9], axis=0))
    got = np.concatenate([b for b, _ in fs.batches(64, shuffle=True, seed=3)])
    assert got.dtype == dtype and sorted(map(tuple, got.tolist())) == sorted(map(tuple, X.tolist()))
    fs.close()


def test_bad_input_is_a_clear_error_naming_the_path(tmp):
    with pytest.raises(FileNotFoundError) as e:
        FeatureStore(tmp / "nope")
    assert e.value.filename == str(tmp / "nope")
    (tmp / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="not a FeatureStore") as e:
        FeatureStore(tmp / "empty")
    assert e.value.filename == str(tmp / "empty" / "meta.json")
    (tmp / "file").write_text("x")
    with pytest.raises(NotADirectoryError):
        FeatureStore(tmp / "file")
    with pytest.raises(ValueError, match="needs dim"):
        FeatureStore(tmp / "x", "w")
    with pytest.raises(ValueError, match="integer or floating-point"):
        FeatureStore(tmp / "x", "w", dim=2, dtype=np.complex64)
    with pytest.raises(ValueError, match="integer or floating-point"):
        FeatureStore(tmp / "x", "w", dim=2, dtype=np.bool_)
    with pytest.raises(ValueError, match="invalid mode"):
        FeatureStore(tmp / "x", "rw")

    fs = FeatureStore(tmp / "fs", "w", dim=3)
    with pytest.raises(ValueError, match=r"shape \(m, 3\)") as e:
        fs.add(np.zeros((2, 4)), np.zeros(2))
    assert str(tmp / "fs") in str(e.value)
    with pytest.raises(ValueError, match=r"labels must have shape \(2,\)"):
        fs.add(np.zeros((2, 3)), np.zeros(3))
    assert len(fs) == 0
    with pytest.raises(BlockingIOError):
        FeatureStore(tmp / "fs", "r+")  # one writer
    with pytest.raises(BlockingIOError, match="cannot re-create"):
        FeatureStore(tmp / "fs", "w", dim=3)
    fs.close()
    with pytest.raises(OSError, match="read-only"):
        FeatureStore(tmp / "fs").add(np.zeros((1, 3)), [0])

    meta = tmp / "fs" / "meta.json"
    meta.write_text("{not json")
    with pytest.raises(FormatError, match="not valid JSON") as e:
        FeatureStore(tmp / "fs")
    assert str(meta) in str(e.value)
    meta.write_text(json.dumps({"format": "mmapkit.FeatureStore", "version": 99}))
    with pytest.raises(FormatError, match="version 99"):
        FeatureStore(tmp / "fs")
    meta.write_text(
        json.dumps(
            {
                "format": "mmapkit.FeatureStore",
                "version": 1,
                "dim": 3,
                "rows": 5,
                "dtype": "<f4",
                "label_dtype": "<f4",
            }
        )
    )
    with pytest.raises(FormatError, match="fewer than the 5"):
        FeatureStore(tmp / "fs")
    meta.write_text(
        json.dumps(
            {
                "format": "mmapkit.FeatureStore",
                "version": 1,
                "dim": 4,
                "rows": 0,
                "dtype": "<f4",
                "label_dtype": "<f4",
            }
        )
    )
    with pytest.raises(FormatError, match=r"features.npy: holds rows of \(3,\)"):
        FeatureStore(tmp / "fs")


def test_a_reader_follows_a_re_created_store(tmp):
    make(tmp / "fs", n=30)[0].close()
    r = FeatureStore(tmp / "fs")
    old = r.features
    fs = FeatureStore(tmp / "fs", "w", dim=8)
    fs.add(np.full((5, 8), 2.0), np.ones(5))
    assert r.refresh() == 5 and (r.features == 2).all() and len(old) == 30


def test_modes_w_replaces_and_a_appends(tmp):
    make(tmp / "fs", n=10)[0].close()
    fs = FeatureStore(tmp / "fs", "a")
    assert len(fs) == 10
    fs.add(np.zeros((5, 8)), np.zeros(5))
    fs.close()
    fs = FeatureStore(tmp / "fs", "w", dim=2)
    assert len(fs) == 0 and fs.dim == 2
    fs.close()
    fs = FeatureStore(tmp / "new", "a", dim=4)
    assert (len(fs), fs.dim) == (0, 4)


def test_w_holds_the_writer_lock_while_it_replaces_both_arrays(tmp):
    """A second writer is refused while "w" replaces a store and after. The
    step-by-step race (the old features array gone while locked, the new one
    locked before labels and meta.json appear) is the core's
    create_holds_the_writer_lock_while_it_replaces_both_arrays: "w" is
    mmapkit::store::features::FeatureStore::create, with no Python step to
    intercept."""
    make(tmp / "fs", n=10)[0].close()
    fs = FeatureStore(tmp / "fs", "w", dim=2)
    for opener in (
        lambda: mmapkit.ArrayStore.open(tmp / "fs" / "features.npy", "r+"),
        lambda: mmapkit.ArrayStore.open(tmp / "fs" / "labels.npy", "r+"),
        lambda: FeatureStore(tmp / "fs", "r+"),
    ):
        with pytest.raises(BlockingIOError):
            opener()
    fs.close()
    assert (len(FeatureStore(tmp / "fs", "r+")), FeatureStore(tmp / "fs").dim) == (0, 2)


def test_a_failed_add_commits_nothing_and_cuts_its_rows(tmp):
    fs, X, _y = make(tmp / "fs", n=50)
    # The commit (meta.json's replacement) fails: a directory is in its way.
    meta = tmp / "fs" / "meta.json"
    saved = meta.read_bytes()
    meta.unlink()
    meta.mkdir()
    with pytest.raises(OSError):
        fs.add(np.ones((10, 8)), np.ones(10))
    meta.rmdir()
    meta.write_bytes(saved)
    assert len(fs) == 50
    for name in ("features.npy", "labels.npy"):
        assert len(np.load(tmp / "fs" / name, mmap_mode="r")) == 50, name
    fs.add(np.full((2, 8), 3.0), [1, 1])
    r = FeatureStore(tmp / "fs")
    assert len(r) == 52 and np.array_equal(r.features[:50], X) and (r.features[50:] == 3).all()


def _leave_uncommitted(path, n_features, n_labels, d):
    """What a writer killed mid-add leaves: rows past meta.json's count."""
    f = mmapkit.ArrayStore.open(path / "features.npy", "r+")
    f.extend(np.full((n_features, d), -1, dtype=f.dtype))
    f.close()
    lab = mmapkit.ArrayStore.open(path / "labels.npy", "r+")
    lab.extend(np.full(n_labels, -1, dtype=lab.dtype))
    lab.close()


@pytest.mark.parametrize("extra", [(7, 0), (7, 7), (0, 3)])
def test_readers_see_the_committed_count_and_a_writer_trims_the_rest(tmp, extra):
    fs, X, y = make(tmp / "fs", n=100)
    fs.close()
    _leave_uncommitted(tmp / "fs", *extra, d=8)
    assert len(np.load(tmp / "fs" / "features.npy", mmap_mode="r")) == 100 + extra[0]
    r = FeatureStore(tmp / "fs")
    assert len(r) == 100 and r.features.shape == (100, 8) and r.labels.shape == (100,)
    assert sum(len(b[0]) for b in r.batches(33, shuffle=True, seed=1)) == 100
    w = FeatureStore(tmp / "fs", "r+")  # cuts both arrays back to 100
    assert len(np.load(tmp / "fs" / "features.npy", mmap_mode="r")) == 100
    assert len(np.load(tmp / "fs" / "labels.npy", mmap_mode="r")) == 100
    w.add(np.ones((2, 8)), [1, 1])
    # The reader opened before the trim follows (it maps the arrays again).
    assert r.refresh() == 102
    assert np.array_equal(r.features[:100], X) and np.array_equal(r.features[100:], np.ones((2, 8)))
    assert r.labels.tolist() == [*y.tolist(), 1, 1]
    w.close()


def test_concurrent_reader_sees_whole_committed_batches(tmp):
    fs = ids_store(tmp / "fs", 0)
    r = FeatureStore(tmp / "fs")
    seen = []
    for i in range(50):
        fs.add(
            np.full((10, 3), 0.0) + np.arange(i * 10, i * 10 + 10)[:, None],
            np.arange(i * 10, i * 10 + 10),
        )
        if i % 7 == 0:
            n = r.refresh()
            seen.append(n)
            X, y = r.get()
            assert (
                n % 10 == 0
                and np.array_equal(X[:, 0], np.arange(n))
                and np.array_equal(y, np.arange(n))
            )
    assert seen == [10, 80, 150, 220, 290, 360, 430, 500][: len(seen)]
    fs.close()


_KILL_CHILD = textwrap.dedent(
    """
    import sys, numpy as np, mmapkit
    fs = mmapkit.FeatureStore(sys.argv[1], "a", dim=16, dtype=np.float64, label_dtype=np.int64)
    print("ready", flush=True)
    n = len(fs)
    while True:
        m = 1 + (n * 7919) % 97  # batches of varying size
        ids = np.arange(n, n + m)
        fs.add(np.repeat(ids[:, None].astype(np.float64), 16, axis=1), ids)
        n += m
    """
)


def test_reader_in_another_process_sees_only_whole_commits(tmp):
    path = tmp / "fs"
    child = subprocess.Popen([sys.executable, "-c", _KILL_CHILD, str(path)], stdout=subprocess.PIPE)
    try:
        assert child.stdout.readline().strip() == b"ready"
        r = FeatureStore(path)
        seen = set()
        # At least 1.5 s of reading, and until the store was seen growing
        # (a loaded machine may schedule the writer rarely): at most 20 s.
        start = time.monotonic()
        while (time.monotonic() < start + 1.5 or len(seen) <= 3) and time.monotonic() < start + 20:
            n = r.refresh()
            X, y = r.get()
            assert len(X) == len(y) == n
            assert (
                np.array_equal(y, np.arange(n))
                and np.array_equal(X[:, 0], y)
                and np.array_equal(X[:, 15], y)
            )
            seen.add(n)
        assert len(seen) > 3, seen  # it saw the store grow while reading
    finally:
        child.kill()
        child.wait()
        child.stdout.close()


def test_a_writer_removes_the_meta_temp_file_a_dead_writer_left(tmp):
    path = tmp / "fs"
    FeatureStore(path, "w", dim=2).close()
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=False,
    )
    stale = path / f".meta.json.mmapkit-{int(dead.stdout)}-7.tmp"
    mine = path / f".meta.json.mmapkit-{os.getpid()}-7.tmp"  # a live process's: kept
    other = (
        path / f".labels.npy.mmapkit-{int(dead.stdout)}-7.tmp"
    )  # not meta.json's: the arrays' business
    for f in (stale, mine, other):
        f.write_bytes(b"{half")
    FeatureStore(path).close()  # a reader removes nothing
    assert stale.exists()
    FeatureStore(path, "r+").close()
    assert not stale.exists() and mine.exists() and other.exists()
    mine.unlink()


def test_sigkill_mid_add_leaves_a_consistent_store(tmp):
    path = tmp / "fs"
    rng = np.random.default_rng(42)
    last = 0
    for _ in range(6):
        child = subprocess.Popen(
            [sys.executable, "-c", _KILL_CHILD, str(path)], stdout=subprocess.PIPE
        )
        assert child.stdout.readline().strip() == b"ready"
        time.sleep(float(rng.uniform(0.02, 0.25)))
        child.send_signal(signal.SIGKILL)
        child.wait()
        child.stdout.close()
        r = FeatureStore(path)  # a reader before any writer repaired it
        n = len(r)
        X, y = r.get()
        assert n >= last and np.array_equal(y, np.arange(n))
        assert np.array_equal(X, np.repeat(np.arange(n, dtype=np.float64)[:, None], 16, axis=1))
        r.close()
        w = FeatureStore(path, "r+")
        assert len(w) == n
        w.close()
        for name in ("features.npy", "labels.npy"):
            assert len(np.load(path / name, mmap_mode="r")) == n, name
        last = n
    assert last > 0
    assert not [f for f in os.listdir(path) if f.endswith(".tmp")]


def test_pickles_by_path_as_a_reader(tmp):
    fs, X, _y = make(tmp / "fs", n=20000, d=16)
    blob = pickle.dumps(fs)
    assert len(blob) < 500  # 1.3 MB of data, not in the pickle
    other = pickle.loads(blob)
    assert other.mode == "r" and len(other) == 20000
    assert np.array_equal(other.features, X)
    fs.close()
    # In another process: maps the files itself.
    code = (
        "import pickle, sys, numpy as np; fs = pickle.loads(sys.stdin.buffer.read()); "
        "print(len(fs), float(fs.features.sum(dtype=np.float64)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], input=blob, capture_output=True, check=True
    ).stdout.split()
    assert int(out[0]) == 20000 and float(out[1]) == pytest.approx(float(X.sum(dtype=np.float64)))


# ----- batches ---------------------------------------------------------------


def test_sequential_batches_are_views_covering_every_row_once(tmp):
    fs = ids_store(tmp / "fs", 1000, batch=300)
    got = list(fs.batches(64))
    assert [len(y) for _, y in got] == [64] * 15 + [40] == [e - s for s, e in fs.batch_bounds(64)]
    assert np.array_equal(np.concatenate([y for _, y in got]), np.arange(1000))
    assert all(np.shares_memory(X, fs.features) for X, _ in got)
    assert [len(y) for _, y in fs.batches(64, drop_last=True)] == [64] * 15
    assert fs.num_batches(64) == 16 and fs.num_batches(64, drop_last=True) == 15
    with pytest.raises(ValueError, match="batch_size"):
        list(fs.batches(0))


@pytest.mark.parametrize(
    ("n", "bs", "block"),
    [(1000, 64, None), (1000, 64, 1), (997, 100, 33), (5, 64, None), (0, 8, None)],
)
def test_shuffled_batches_cover_every_row_exactly_once(tmp, n, bs, block):
    fs = ids_store(tmp / "fs", n)
    for seed in (0, 1):
        got = list(fs.batches(bs, shuffle=True, seed=seed, block_size=block))
        ids = np.concatenate([y for _, y in got]) if got else np.array([], np.int64)
        assert np.array_equal(np.sort(ids), np.arange(n))
        for X, y in got:
            assert np.array_equal(X[:, 0], y) and np.array_equal(X[:, 2], y)  # rows gathered whole
            assert len(y) <= bs
        if n >= bs:
            assert all(len(y) == bs for _, y in got[:-1])
        dropped = np.concatenate(
            [
                y
                for _, y in fs.batches(
                    bs, shuffle=True, seed=seed, drop_last=True, block_size=block
                )
            ]
            or [np.array([], np.int64)]
        )
        assert len(dropped) == (n // bs) * bs and len(np.unique(dropped)) == len(dropped)


@pytest.mark.parametrize(
    "group_bytes", [1 << 20, 1, 10000]
)  # batches per prefetch group: all, 1, 2
def test_equal_seeds_give_equal_orders_and_prefetch_does_not_change_them(
    tmp, monkeypatch, group_bytes
):
    monkeypatch.setattr(mmapkit.features, "GROUP_BYTES", group_bytes)
    monkeypatch.setattr(mmapkit.features, "GATHER_GROUP_BYTES", group_bytes)
    fs = ids_store(tmp / "fs", 3200)
    seq = list(fs.batches(128, prefetch=3))
    assert np.array_equal(np.concatenate([y for _, y in seq]), np.arange(3200))
    assert all(np.shares_memory(X, fs.features) for X, _ in seq)

    def order(**kw):
        return np.concatenate([y for _, y in fs.batches(128, shuffle=True, **kw)])

    a = order(seed=7)
    assert np.array_equal(a, order(seed=7, prefetch=0))
    assert np.array_equal(a, order(seed=7, prefetch=5))
    assert np.array_equal(a, batch_order(3200, 128, 7).astype(np.int64))
    assert not np.array_equal(a, order(seed=8))
    assert not np.array_equal(a, np.arange(3200))
    # Blocks of 16 rows (128 // 8), each contiguous, in a permuted order.
    blocks = a.reshape(-1, 16)
    assert np.all(np.diff(blocks, axis=1) == 1) and np.all(blocks[:, 0] % 16 == 0)
    _, first = next(iter(fs.batches(128, shuffle=True, seed=1)))
    assert len(np.unique(first // 16)) == 8  # each batch mixes 8 blocks


def test_abandoned_prefetching_epoch_stops_its_thread(tmp, monkeypatch):
    import threading

    monkeypatch.setattr(mmapkit.features, "GATHER_GROUP_BYTES", 1)  # a group per batch
    fs = ids_store(tmp / "fs", 5000)
    before = threading.active_count()
    it = fs.batches(100, shuffle=True, seed=0, prefetch=3)
    next(it)
    assert _prefetch_threads() == ["mmapkit-gather"]
    it.close()
    assert threading.active_count() == before
    assert _no_prefetch_threads()


def test_shuffled_epoch_survives_the_store_closing_under_it(tmp):
    """The core's gathering thread reads through handles of its own: closing
    the store mid-epoch neither crashes nor changes the batches."""
    fs = ids_store(tmp / "fs", 5000)
    want = [y.copy() for _, y in fs.batches(100, shuffle=True, seed=4, prefetch=0)]
    it = fs.batches(100, shuffle=True, seed=4, prefetch=2)
    got = [next(it)[1].copy()]
    fs.close()
    got += [y.copy() for _, y in it]
    for a, b in zip(want, got, strict=True):
        assert np.array_equal(a, b)


def _prefetch_threads():
    """The read-ahead threads alive: Python's (views of sequential groups)
    and the Rust core's gathering threads (shuffled groups; named in /proc)."""
    import glob
    import threading

    names = [t.name for t in threading.enumerate() if t.name.startswith("mmapkit-prefetch")]
    for comm in glob.glob("/proc/self/task/*/comm"):
        try:
            with open(comm) as f:
                name = f.read().strip()
        # The thread ended meanwhile: its entry is gone (ENOENT), or still
        # listed but no longer readable (ESRCH).
        except (FileNotFoundError, ProcessLookupError):
            continue
        if name == "mmapkit-gather":
            names.append(name)
    return names


def _no_prefetch_threads():
    """Whether every read-ahead thread has ended. A joined thread's task can
    stay listed in /proc for an instant after pthread_join returns, so its
    absence is awaited (up to 30 s, a hang-breaker), not sampled once."""
    deadline = time.monotonic() + 30
    while _prefetch_threads():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True


def _reopened_cold(fs):
    """``fs`` closed, its files dropped from the page cache, opened again."""
    path = fs.path
    fs.close()
    if mmapkit.features._disk_reads is None:
        pytest.skip("no per-thread I/O counts on this platform")
    for name in ("features.npy", "labels.npy"):
        mmapkit.drop_cache(os.path.join(path, name))
    with mmapkit.MappedFile(os.path.join(path, "features.npy")) as m:
        resident, size = m.residency()
    if resident > size // 2:  # (pages still under write-back stay)
        pytest.skip(f"this file system keeps the pages cached (tmpfs?): {resident} of {size}")
    return FeatureStore(path)


@pytest.mark.parametrize("shuffle", [False, True])
def test_prefetch_thread_only_once_pages_come_from_disk(tmp, monkeypatch, shuffle):
    monkeypatch.setattr(mmapkit.features, "GROUP_BYTES", 4096)  # many groups
    monkeypatch.setattr(mmapkit.features, "GATHER_GROUP_BYTES", 4096)
    fs = ids_store(tmp / "fs", 100_000)  # 3.2 MB: more than the kernel reads ahead
    # Copies: a view left alive would keep the pages mapped, and mapped
    # pages stay in the page cache.
    want = [y.copy() for _, y in fs.batches(100, shuffle=shuffle, seed=2, prefetch=0)]
    # In the page cache (just written): every sequential group made in this
    # thread; shuffled ones (gathers: copies with the GIL released, worth
    # overlapping with the caller's work) by the core's one thread from the
    # start, which ends once it has gathered the last group.
    # (The thread's read counts held still: a major fault on any page, such
    # as a code page evicted by another process's memory use, would count.)
    real_disk_reads = mmapkit.features._disk_reads
    if real_disk_reads is not None:
        monkeypatch.setattr(mmapkit.features, "_disk_reads", lambda: 0)
    got = []
    for batch in fs.batches(100, shuffle=shuffle, seed=2, prefetch=2):
        got.append(batch[1].copy())
        alive = len(_prefetch_threads())
        assert alive == (1 if shuffle and len(got) == 1 else 0) or (shuffle and alive == 1)
    del batch
    assert _no_prefetch_threads()
    monkeypatch.setattr(mmapkit.features, "_disk_reads", real_disk_reads)
    fs = _reopened_cold(fs)
    cold, threads = [], []
    for batch in fs.batches(100, shuffle=shuffle, seed=2, prefetch=2):
        cold.append(batch[1].copy())
        threads.append(len(_prefetch_threads()))
    del batch
    # From the first group that read from disk (opening the store may have
    # read the first pages ahead), one thread, stopped at the end (the
    # gathering thread as soon as it has gathered the last group).
    assert max(threads) == 1 and (shuffle or threads[-1] == 1) and _no_prefetch_threads()
    for a, b, c in zip(want, got, cold, strict=True):
        assert np.array_equal(a, b) and np.array_equal(a, c)
    # An epoch abandoned while its thread runs stops the thread.
    fs = _reopened_cold(fs)
    it = fs.batches(100, shuffle=shuffle, seed=2, prefetch=2)
    for _ in it:
        if _prefetch_threads():
            break
    assert len(_prefetch_threads()) == 1
    it.close()
    assert _no_prefetch_threads()


def test_fit_on_a_cold_store_equals_the_warm_fit(tmp):
    fs, _, _ = make(tmp / "fs", n=3000, d=8)
    kw = {"l2": 0.01, "epochs": 2, "batch_size": 32, "random_state": 5}
    warm = StreamingLogisticRegression(**kw).fit(fs)
    fs.close()
    for name in ("features.npy", "labels.npy"):
        mmapkit.drop_cache(str(tmp / "fs" / name))
    cold = StreamingLogisticRegression(**kw).fit(FeatureStore(tmp / "fs"))
    assert np.array_equal(warm.coef_, cold.coef_) and np.array_equal(
        warm.intercept_, cold.intercept_
    )


# ----- statistics -------------------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_per_feature_statistics_match_numpy(tmp, dtype):
    fs, X, _ = make(tmp / "fs", n=3001, d=5, dtype=dtype)
    X[7, 2] = 1e6
    fs.close()
    fs = FeatureStore(tmp / "fs2", "w", dim=5, dtype=dtype)
    fs.add(X, np.zeros(len(X)))
    X64 = X.astype(np.float64)
    np.testing.assert_allclose(fs.mean(), X64.mean(axis=0), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(fs.std(), X64.std(axis=0), rtol=1e-10)
    np.testing.assert_allclose(fs.std(ddof=1), X64.std(axis=0, ddof=1), rtol=1e-10)
    assert np.array_equal(fs.min(), X.min(axis=0)) and fs.min().dtype == dtype
    assert np.array_equal(fs.max(), X.max(axis=0))
    d = fs.describe(ddof=1)
    assert (
        d["count"] == 3001
        and np.array_equal(d["mean"], fs.mean())
        and np.array_equal(d["std"], fs.std(ddof=1))
    )
    assert np.array_equal(d["min"], fs.min()) and np.array_equal(d["max"], fs.max())
    for q in (0.5, 0.0, 1.0, 0.37):
        got = fs.quantile(q)
        assert got.shape == (5,) and np.array_equal(got, np.quantile(X, q, axis=0)), q
    qs = [0.1, 0.5, 0.99]
    assert np.array_equal(
        fs.quantile(qs, memory=3001 * X.itemsize), np.quantile(X, qs, axis=0)
    )  # one column at a time
    assert np.array_equal(
        fs.quantile(qs, method="inverted_cdf"), np.quantile(X, qs, axis=0, method="inverted_cdf")
    )
    assert np.array_equal(fs.median(), np.median(X, axis=0))


@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
@pytest.mark.parametrize(
    "memory", [1, 4000]
)  # out of core: radix passes to the last bit / then a gather
def test_out_of_core_quantiles_equal_numpy(tmp, dtype, memory):
    rng = np.random.default_rng(5)
    X = (rng.normal(size=(4001, 6)) * 100).astype(dtype)
    X[:1000, 1] = np.round(X[:1000, 1])  # ties
    X[:, 2] = 7  # one value
    X[17, 3] = np.nan  # numpy: NaN for that column
    X[:, 4] = np.abs(X[:, 4])
    X[5, 5], X[6, 5] = -np.inf, np.inf
    fs = FeatureStore(tmp / "fs", "w", dim=6, dtype=dtype)
    fs.add(X, np.zeros(len(X)))
    with np.errstate(invalid="ignore"):
        for q in (0.5, [0.0, 0.1, 0.5, 0.9, 1.0], 0.37, np.float64(0.25)):
            for method in ("linear", "inverted_cdf"):
                got, want = (
                    fs.quantile(q, method=method, memory=memory),
                    np.quantile(X, q, axis=0, method=method),
                )
                assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True), (
                    q,
                    method,
                )
        got, want = fs.median(memory=memory), np.median(X, axis=0)
    assert got.dtype == want.dtype and np.array_equal(got, want, equal_nan=True)


def test_statistics_of_an_empty_store(tmp):
    fs = FeatureStore(tmp / "fs", "w", dim=2)
    d = fs.describe()
    assert d["count"] == 0 and d["min"] is None and np.isnan(d["mean"]).all()
    assert np.isnan(fs.mean()).all() and np.isnan(fs.std()).all()
    with pytest.raises(ValueError, match="empty"):
        fs.min()
    with pytest.raises(ValueError, match="empty"):
        fs.quantile(0.5)


# ----- logistic regression ----------------------------------------------------


def reference_fit(X, y, batches, lr, l2, mean=False):
    """The update rule written out directly in float32 numpy, step by step."""
    w = np.zeros(X.shape[1], np.float32)
    b = np.float32(0)
    steps = []
    for idx in batches:
        Xb = X[idx].astype(np.float32)
        yb = y[idx].astype(np.float32)
        p = (1 / (1 + np.exp(-(Xb.astype(np.float64) @ w + b)))).astype(np.float32)
        s = len(idx) if mean else 1
        gw = Xb.T @ (p - yb) / s + 2 * l2 * w
        gb = np.sum(p - yb) / s + 2 * l2 * b
        w = (w - lr * gw).astype(np.float32)
        b = np.float32(b - lr * gb)
        steps.append((w.copy(), b))
    return steps


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_logistic_regression_matches_numpy_step_for_step(tmp, reduction):
    fs, X, y = make(tmp / "fs", n=700, d=6)
    lr, l2 = (0.01, 0.05) if reduction == "sum" else (0.5, 0.01)
    # partial_fit: one step per batch.
    bounds = [np.arange(s, min(s + 50, 700)) for s in range(0, 700, 50)]
    ref = reference_fit(X, y, bounds, lr, l2, mean=reduction == "mean")
    # The article's rule: raw features, a constant rate, every epoch.
    raw = {"l2": l2, "lr": lr, "reduction": reduction, "standardize": False}
    raw |= {"schedule": "constant", "tol": None}
    m = StreamingLogisticRegression(**raw)
    for idx, (w, b) in zip(bounds, ref, strict=True):
        m.partial_fit(X[idx], y[idx], classes=[0, 1])
        np.testing.assert_allclose(m.coef_[0], w, rtol=1e-4, atol=1e-6)
        assert float(m.intercept_[0]) == pytest.approx(float(b), rel=1e-4, abs=1e-6)
    assert m.coef_.dtype == np.float32 and m.n_steps_ == len(bounds)
    assert m.coef_.shape == (1, 6) and m.intercept_.shape == (1,)  # scikit-learn's binary shapes

    # fit with shuffling: epoch e's order comes from SeedSequence(seed).spawn(epochs)[e].
    seeds = np.random.SeedSequence(3).spawn(2)
    order = [batch_order(700, 64, s).astype(np.int64) for s in seeds]
    batches = [o[i : i + 64] for o in order for i in range(0, 700, 64)]
    ref = reference_fit(X, y, batches, lr, l2, mean=reduction == "mean")
    kw = {**raw, "epochs": 2, "batch_size": 64, "random_state": 3}
    m = StreamingLogisticRegression(**kw).fit(fs)
    np.testing.assert_allclose(m.coef_[0], ref[-1][0], rtol=1e-4, atol=1e-5)
    assert m.n_steps_ == len(batches)
    again = StreamingLogisticRegression(**kw).fit(fs)
    assert np.array_equal(again.coef_, m.coef_) and np.array_equal(
        again.intercept_, m.intercept_
    )  # deterministic


def test_logistic_regression_learns_a_separable_problem(tmp):
    rng = np.random.default_rng(1)
    n, d = 20000, 16
    w_true = rng.normal(size=d)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = (X @ w_true > 0).astype(np.float32)
    fs = FeatureStore(tmp / "fs", "w", dim=d)
    fs.add(X, y)
    m = StreamingLogisticRegression(lr=0.1, epochs=1, shuffle=False, standardize=False)
    m.fit(fs)
    loss1 = m.loss(fs)
    m2 = StreamingLogisticRegression(lr=0.1, epochs=3, tol=None).fit(fs)
    assert m2.loss(fs) < loss1 < np.log(2)
    assert m2.score(fs) > 0.97 and m2.score(X, y) == m2.score(fs)
    p = m2.predict_proba(X[:10])
    assert p.shape == (10, 2) and np.allclose(p.sum(axis=1), 1)
    assert np.array_equal(m2.predict(X[:10]), (p[:, 1] > 0.5).astype(np.float32))
    assert m2.loss(X, y) == pytest.approx(m2.loss(fs))

    sklearn = pytest.importorskip("sklearn.linear_model")
    sk = sklearn.SGDClassifier(loss="log_loss", random_state=0, max_iter=3, tol=None).fit(X, y)
    # Documented tolerance: within 2 points of scikit-learn's accuracy.
    assert m2.score(fs) >= sk.score(X, y) - 0.02


def test_logistic_regression_errors_and_stable_sigmoid():
    m = StreamingLogisticRegression()
    with pytest.raises(ValueError, match="not fitted"):
        m.predict(np.zeros((1, 2)))
    with pytest.raises(ValueError, match="reduction"):
        StreamingLogisticRegression(reduction="max").fit(np.eye(2), [0, 1])
    with pytest.raises(ValueError, match=r"y must have shape \(3,\)"):
        m.partial_fit(np.zeros((3, 2)), np.zeros(2), classes=[0, 1])
    m.partial_fit(np.zeros((3, 2)), np.zeros(3), classes=[0, 1])
    with pytest.raises(ValueError, match="X has 3 features, but StreamingLogisticRegression"):
        m.partial_fit(np.zeros((3, 3)), np.zeros(3))
    z = np.array([-1000, -20, 0, 20, 1000], np.float32)
    with np.errstate(over="raise", invalid="raise", divide="raise"):  # underflow to 0 is fine
        s = sigmoid(z)
    assert s.dtype == np.float32 and s[0] == 0 and s[2] == 0.5 and s[4] == 1
    np.testing.assert_allclose(s[1:4], 1 / (1 + np.exp(-z[1:4].astype(np.float64))), rtol=1e-6)


def test_progress_bar_on_request(tmp, capsys):
    fs, _, _ = make(tmp / "fs", n=300)
    StreamingLogisticRegression(progress=True, epochs=2, tol=None, batch_size=100).fit(fs)
    err = capsys.readouterr().err
    assert "epoch 2/2" in err and "100.0%" in err and "rows/s" in err
    StreamingLogisticRegression(epochs=1).fit(fs)  # not a terminal: silent
    assert capsys.readouterr().err == ""

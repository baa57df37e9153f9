"""mmapkit.torch.device_loader: the device-feeding path (a ring of reused staging
buffers filled by the Rust gather, copies issued asynchronously) yields exactly the
batches of data_loader / FeatureStore.batches, in the same order, epoch after epoch.
Run here on the CPU device: the same code path as on a GPU, minus pinning and streams."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

torch = pytest.importorskip("torch")

from mmapkit import FeatureStore  # noqa: E402
from mmapkit._order import batch_runs  # noqa: E402
from mmapkit.features import batch_order  # noqa: E402
from mmapkit.torch import _Direct, _Runs, data_loader, device_loader  # noqa: E402


def make_store(path, n, d=5, seed=0):
    rng = np.random.default_rng(seed)
    with FeatureStore(path, "w", dim=d, label_dtype=np.int64) as fs:
        fs.add(rng.standard_normal((n, d)).astype(np.float32), np.arange(n))
    return path


def pairs(loader):
    return [(X.numpy().copy(), y.numpy().copy()) for X, y in loader]


def same(got, want):
    assert len(got) == len(want)
    for (gX, gy), (wX, wy) in zip(got, want, strict=True):
        assert gX.shape == np.asarray(wX).shape
        np.testing.assert_array_equal(gX, np.asarray(wX))
        np.testing.assert_array_equal(gy, np.asarray(wy))


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
@pytest.mark.parametrize(("n", "bs"), [(1003, 64), (1000, 100), (5, 64), (0, 8)])
def test_same_batches_and_order_as_data_loader(tmp, shuffle, drop_last, n, bs):
    p = make_store(tmp / "fs", n)
    dl = device_loader(p, bs, shuffle=shuffle, seed=7, drop_last=drop_last, device="cpu")
    ref = data_loader(p, bs, shuffle=shuffle, seed=7, drop_last=drop_last)
    assert len(dl) == len(ref)
    for _ in range(3):  # epochs move on together (each iter() is the next epoch)
        got = pairs(dl)
        same(got, pairs(ref))
        assert all(X.flags.writeable for X, _ in got)
    if n and not drop_last and n % bs:
        assert len(got[-1][1]) == n % bs  # the last, partial batch


def test_shuffled_epochs_follow_feature_store_batches(tmp):
    p = make_store(tmp / "fs", 2000, d=3)
    dl = device_loader(p, 128, shuffle=True, seed=11, device="cpu")
    with FeatureStore(p) as fs:
        for epoch in (0, 1, 5):
            dl.set_epoch(epoch)
            seed = np.random.SeedSequence(11, spawn_key=(epoch,))
            same(pairs(dl), list(fs.batches(128, shuffle=True, seed=seed)))
        every = np.concatenate([y for _, y in pairs(dl)])
        assert sorted(every.tolist()) == list(range(2000))  # each row once per epoch


def test_batches_are_not_the_reused_staging_buffers(tmp):
    # Kept batches must not change while later ones are gathered into the ring.
    p = make_store(tmp / "fs", 3000, d=4)
    kept = list(device_loader(p, 100, shuffle=True, seed=3, device="cpu", prefetch=1))
    with FeatureStore(p) as fs:
        want = list(fs.batches(100, shuffle=True, seed=np.random.SeedSequence(3, spawn_key=(0,))))
    same([(X.numpy(), y.numpy()) for X, y in kept], want)
    assert len({X.data_ptr() for X, _ in kept}) == len(kept)


def test_large_batches_gathered_by_several_threads(tmp):
    # 10,000 rows x 64 float32 = 2.5 MiB a batch: the core splits each gather.
    p = make_store(tmp / "fs", 25_000, d=64)
    for shuffle in (False, True):
        ref = pairs(data_loader(p, 10_000, shuffle=shuffle, seed=1))
        for threads in (None, 1, 3):
            dl = device_loader(p, 10_000, shuffle=shuffle, seed=1, device="cpu", threads=threads)
            same(pairs(dl), ref)


@pytest.mark.parametrize(("prefetch", "workers"), [(1, 1), (1, 3), (2, 2), (4, 3)])
def test_several_workers_keep_batches_order_and_kept_batches(tmp, prefetch, workers):
    # Several batches prepared at once, each in its own ring slot: the order is the
    # keys' and a kept batch is never a slot later batches are gathered into.
    p = make_store(tmp / "fs", 4000, d=6)
    for shuffle in (False, True):
        dl = device_loader(
            p, 128, shuffle=shuffle, seed=5, device="cpu", prefetch=prefetch, workers=workers
        )
        kept = list(dl)
        same([(X.numpy(), y.numpy()) for X, y in kept], pairs(data_loader(p, 128, shuffle, 5)))
        assert len({X.data_ptr() for X, _ in kept}) == len(kept)


def _runs(rows: np.ndarray) -> list[tuple[int, int, int]]:
    """The reference: ``(i, j, first)`` for each maximal run of consecutive rows, read
    off the rows themselves (positions ``i:j`` hold ``first, first + 1, ...``)."""
    if not len(rows):
        return []
    r = rows.view(np.int64)
    cut = np.flatnonzero(np.diff(r) != 1) + 1
    starts = [0, *cut.tolist()]
    ends = [*cut.tolist(), len(r)]
    return [(i, j, int(r[i])) for i, j in zip(starts, ends, strict=True)]


def test_runs_of_consecutive_rows():
    rows = np.array([5, 6, 7, 0, 9, 10, 3], dtype=np.uint64)
    assert _runs(rows) == [(0, 3, 5), (3, 4, 0), (4, 6, 9), (6, 7, 3)]
    assert _runs(np.arange(4, 9, dtype=np.uint64)) == [(0, 5, 4)]
    assert _runs(np.array([], dtype=np.uint64)) == []


@given(
    n=st.integers(0, 3000),
    bs=st.integers(1, 700),
    block=st.one_of(st.none(), st.integers(1, 900)),
    seed=st.integers(0, 2**32),
    drop_last=st.booleans(),
)
def test_batch_runs_read_off_the_blocks_equal_the_orders_runs(n, bs, block, seed, drop_last):
    # The device loader's shuffled keys, made without the epoch's order, against
    # the order's own batches: the same runs (merged alike), rows and extent.
    stop = (n // bs) * bs if drop_last else n
    order = batch_order(n, bs, seed, block)
    got = list(batch_runs(n, bs, seed, block, stop))
    want = [order[s : min(s + bs, stop)] for s in range(0, stop, bs)]
    assert got == [_runs(w) for w in want]
    for runs, w in zip(got, want, strict=True):
        key = _Runs(runs)
        np.testing.assert_array_equal(key.rows(), w)
        assert (key.n, key.stop) == (len(w), int(w.max()) + 1)


@pytest.mark.parametrize("shuffle", [False, True])
@pytest.mark.parametrize("drop_last", [False, True])
def test_the_device_loaders_keys_hold_the_samplers_rows(tmp, shuffle, drop_last):
    # The device loader gets every batch as runs (one per sequential batch): the
    # rows of the sampler's own keys, epoch by epoch.
    dl = device_loader(make_store(tmp / "fs", 1000), 96, shuffle, 4, drop_last, "cpu")
    for epoch in (0, 1):
        dl.set_epoch(epoch)
        plain = list(dl.sampler)
        dl.set_epoch(epoch)
        runs = list(dl.sampler._keys(runs=True))
        assert all(isinstance(k, _Runs) for k in runs)
        assert len(runs) == len(plain) == len(dl)
        for key, want in zip(runs, plain, strict=True):
            rows = np.arange(1000)[want]
            np.testing.assert_array_equal(key.rows(), rows)
            assert key.runs == _runs(rows.astype(np.uint64))
            assert key.stop == int(rows.max()) + 1


@pytest.mark.parametrize("direct", [True, None])
@pytest.mark.parametrize("block", [None, 3, 1000])
def test_direct_copies_from_the_mapping_on_the_cpu(tmp, direct, block):
    # The direct path's copies (one per run of consecutive rows, straight from the
    # files' read-only mapping), run here unpinned: the same batches as the ring's.
    p = make_store(tmp / "fs", 5000, d=64)
    for shuffle in (False, True):
        kw = {"shuffle": shuffle, "seed": 9, "block_size": block}
        dl = device_loader(p, 1024, device="cpu", direct=direct, **kw)
        dl._direct = _Direct(dl.dataset.store, 5000, pin=False)
        kept = list(dl)
        same(
            [(X.numpy(), y.numpy()) for X, y in kept],
            pairs(device_loader(p, 1024, device="cpu", direct=False, **kw)),
        )
        assert len({X.data_ptr() for X, _ in kept}) == len(kept)
        dl._direct.close()


def test_refresh_semantics_match_data_loader(tmp):
    p = make_store(tmp / "fs", 300)
    dl = device_loader(p, 64, device="cpu")
    ref = data_loader(p, 64)
    with FeatureStore(p, "r+") as w:
        w.add(np.ones((50, 5)), np.arange(300, 350))
    # Rows committed after the loader was made: not seen until refresh().
    got = np.concatenate([y for _, y in pairs(dl)])
    assert got.tolist() == list(range(300))
    assert got.tolist() == np.concatenate([y for _, y in pairs(ref)]).tolist()
    assert dl.refresh() == 350 and ref.dataset.refresh() == 350
    assert len(dl) == len(ref) == 6
    same(pairs(dl), pairs(ref))


def test_abandoned_epoch_then_a_full_one(tmp):
    p = make_store(tmp / "fs", 1000)
    dl = device_loader(p, 50, shuffle=True, seed=2, device="cpu")
    it = iter(dl)
    next(it)
    next(it)
    it.close()  # stops the background thread; nothing left in flight
    dl.set_epoch(0)
    ref = data_loader(p, 50, shuffle=True, seed=2)
    ref.sampler.set_epoch(0)
    same(pairs(dl), pairs(ref))


def test_arguments(tmp):
    p = make_store(tmp / "fs", 10)
    with pytest.raises(ValueError, match="prefetch"):
        device_loader(p, 4, device="cpu", prefetch=0)
    with pytest.raises(ValueError, match="batch_size"):
        device_loader(p, 0, device="cpu")
    with pytest.raises(ValueError, match="workers"):
        device_loader(p, 4, device="cpu", workers=0)
    dl = device_loader(p, 4)
    want = "cuda" if torch.cuda.is_available() else "cpu"
    assert dl.device.type == want and dl.batch_size == 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_batches_equal_the_cpu_path(tmp):
    p = make_store(tmp / "fs", 5000, d=16)
    for shuffle in (False, True):
        ref = pairs(device_loader(p, 512, shuffle=shuffle, seed=4, device="cpu"))
        got = [
            (X.cpu().numpy(), y.cpu().numpy())
            for X, y in device_loader(p, 512, shuffle=shuffle, seed=4, device="cuda")
        ]
        same(got, ref)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("direct", [False, None, True])
def test_cuda_direct_copies_equal_the_cpu_path(tmp, direct):
    # Straight from the registered mapping (True: every batch; None: batches of
    # long runs) or through the staging ring (False): the same batches.
    p = make_store(tmp / "fs", 40_000, d=64)
    for shuffle, block in ((False, None), (True, None), (True, 3), (True, 4096)):
        kw = {"shuffle": shuffle, "seed": 4, "block_size": block}
        ref = pairs(device_loader(p, 8192, device="cpu", **kw))
        dl = device_loader(p, 8192, device="cuda", direct=direct, **kw)
        kept = list(dl)
        same([(X.cpu().numpy(), y.cpu().numpy()) for X, y in kept], ref)
        assert (dl._direct is not None) == (direct is not False)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
def test_cuda_direct_registers_again_after_refresh(tmp):
    p = make_store(tmp / "fs", 3000, d=8)
    dl = device_loader(p, 256, device="cuda", direct=True)
    assert np.concatenate([y.cpu().numpy() for _, y in dl]).tolist() == list(range(3000))
    with FeatureStore(p, "r+") as w:
        w.add(np.ones((500, 8)), np.arange(3000, 3500))
    assert dl.refresh() == 3500
    got = [(X.cpu().numpy(), y.cpu().numpy()) for X, y in dl]
    assert dl._direct is not None and dl._direct.rows == 3500
    same(got, pairs(data_loader(p, 256)))

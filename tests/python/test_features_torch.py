"""mmapkit.torch: FeatureStore batches through a real DataLoader."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import _stores  # noqa: E402

from mmapkit import FeatureStore  # noqa: E402
from mmapkit.features import batch_order  # noqa: E402
from mmapkit.torch import FeatureBatchSampler, FeatureDataset, data_loader  # noqa: E402


def ids_store(path, n, d=4):
    _stores.ids_store(path, n, d, np.float32).close()
    return path


def rows_of(batches):
    ys = [y.numpy() for _, y in batches]
    for X, y in batches:
        assert torch.equal(X[:, 0].long(), y) and torch.equal(X[:, -1].long(), y)
    return np.concatenate(ys) if ys else np.array([], np.int64)


def test_dataset_keys_and_zero_copy_sequential_batches(tmp):
    ds = FeatureDataset(ids_store(tmp / "fs", 1000), batch_size=128)
    assert len(ds) == 8
    X, y = ds[0]
    assert X.dtype == torch.float32 and y.dtype == torch.int64 and X.shape == (128, 4)
    # The tensor is the mapped rows: same address as the store's view.
    assert X.data_ptr() == ds.store.features[0:128].ctypes.data
    assert ds[7][1].tolist() == list(range(896, 1000))
    assert ds[slice(10, 13)][1].tolist() == [10, 11, 12]
    assert ds[np.array([5, 1, 999])][1].tolist() == [5, 1, 999]
    with pytest.raises(IndexError):
        ds[8]
    blob = pickle.dumps(ds)
    assert len(blob) < 300 and b"features" not in blob  # path and sizes only
    assert pickle.loads(blob)[3][1].tolist() == list(range(384, 512))


def test_sampler_orders_cover_every_row_once_and_match_the_store(tmp):
    path = ids_store(tmp / "fs", 1003)
    ds = FeatureDataset(path, batch_size=100)
    s = FeatureBatchSampler(ds, shuffle=True, seed=5)
    e0 = rows_of([ds[k] for k in s])
    e1 = rows_of([ds[k] for k in s])  # the next epoch
    assert np.array_equal(np.sort(e0), np.arange(1003)) and np.array_equal(
        np.sort(e1), np.arange(1003)
    )
    assert not np.array_equal(e0, e1)
    s.set_epoch(0)
    assert np.array_equal(rows_of([ds[k] for k in s]), e0)
    # The same order as FeatureStore.batches and StreamingLogisticRegression.fit for epoch 0.
    seed0 = np.random.SeedSequence(5).spawn(1)[0]
    assert np.array_equal(e0, batch_order(1003, 100, seed0).astype(np.int64))
    fs = FeatureStore(path)
    assert np.array_equal(
        e0, np.concatenate([y for _, y in fs.batches(100, shuffle=True, seed=seed0)])
    )
    seq = FeatureBatchSampler(ds, drop_last=True)
    assert len(seq) == 10 and np.array_equal(rows_of([ds[k] for k in seq]), np.arange(1000))


@pytest.mark.parametrize("context", ["fork", "spawn"])
@pytest.mark.parametrize("shuffle", [False, True])
def test_dataloader_with_two_workers_reads_exactly_the_store(tmp, context, shuffle):
    path = ids_store(tmp / "fs", 5000)
    loader = data_loader(
        path,
        batch_size=256,
        shuffle=shuffle,
        seed=1,
        num_workers=2,
        multiprocessing_context=context,
    )
    got = list(loader)
    assert len(got) == 20
    ids = rows_of(got)
    assert np.array_equal(np.sort(ids), np.arange(5000))
    if shuffle:
        assert np.array_equal(
            ids, batch_order(5000, 256, np.random.SeedSequence(1).spawn(1)[0]).astype(np.int64)
        )
    else:
        assert np.array_equal(ids, np.arange(5000))


def _rss_anon_kib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def test_worker_memory_does_not_grow_with_epochs(tmp):
    # 60 000 × 256 float32 = 61 MB: far more than any growth we allow.
    fs = FeatureStore(tmp / "fs", "w", dim=256)
    rng = np.random.default_rng(0)
    for _ in range(6):
        fs.add(rng.normal(size=(10000, 256)).astype(np.float32), np.zeros(10000))
    fs.close()
    loader = data_loader(
        tmp / "fs",
        batch_size=1000,
        shuffle=True,
        seed=0,
        num_workers=2,
        persistent_workers=True,
        multiprocessing_context="fork",
    )
    anon = []
    total = 0.0
    for _ in range(3):
        for X, _ in loader:
            total += float(X[0, 0])
        workers = loader._iterator._workers  # persistent: the same two processes every epoch
        anon.append(sum(_rss_anon_kib(w.pid) for w in workers))
    del loader
    # Process memory (not the mapped file's pages) stays flat across epochs.
    growth_mib = (anon[-1] - anon[0]) / 1024
    print("workers RssAnon KiB per epoch:", anon)
    assert growth_mib < 8, f"workers' RssAnon grew {growth_mib:.1f} MiB over 3 epochs: {anon}"

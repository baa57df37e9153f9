"""mmapkit.dask: arrays by path, exact quantiles, data-parallel training."""

from __future__ import annotations

import itertools
import pickle

import numpy as np
import pytest

dask = pytest.importorskip("dask")
da = pytest.importorskip("dask.array")

from _stores import linear_store  # noqa: E402

import mmapkit  # noqa: E402
import mmapkit.dask as md  # noqa: E402
from mmapkit import FeatureStore  # noqa: E402


def store(path, n, d=8, seed=0):
    return linear_store(path, n, d, seed=seed, threshold=0.2)


def graph_bytes(x):
    return len(pickle.dumps(dict(x.__dask_graph__())))


def test_arrays_by_path_equal_the_data(tmp):
    fs, X, y = store(tmp / "fs", 10007)
    with dask.config.set(scheduler="synchronous"):
        for src in (fs, tmp / "fs", str(tmp / "fs")):
            x = md.to_dask_array(src, chunks=1000)
            assert (
                x.shape == (10007, 8)
                and x.dtype == np.float32
                and x.chunks[0] == (1000,) * 10 + (7,)
            )
            assert np.array_equal(x.compute(), X)
        lab = md.to_dask_array(fs, chunks=(5000, 5007), what="labels")
        assert np.array_equal(lab.compute(), y)
        assert md.to_dask_array(fs).chunks[0] == (10007,)  # "auto": ~128 MiB per chunk
        np.save(tmp / "a.npy", np.arange(3000, dtype=np.int16).reshape(1000, 3))
        a = md.to_dask_array(tmp / "a.npy", 128)
        assert np.array_equal(a.compute(), np.arange(3000, dtype=np.int16).reshape(1000, 3))
        s = mmapkit.ArrayStore.create(tmp / "s.npy", "f8")
        s.extend(np.arange(10.0))
        assert float(md.to_dask_array(s, 3).sum().compute()) == 45.0
        # Rows added later are not part of an array made before.
        fs.add(np.zeros((5, 8)), np.zeros(5))
        assert np.array_equal(x.compute(), X)
    with pytest.raises(ValueError, match="do not add up"):
        md.to_dask_array(fs, chunks=(5, 5))
    with pytest.raises(ValueError, match="what must be"):
        md.to_dask_array(fs, what="weights")
    with pytest.raises(FileNotFoundError):
        md.to_dask_array(tmp / "missing.npy")


def test_graph_size_does_not_depend_on_the_array_size(tmp):
    small = md.to_dask_array(store(tmp / "small", 1000)[0], chunks=100)
    big = md.to_dask_array(store(tmp / "big", 200000)[0], chunks=20000)
    assert small.numblocks == big.numblocks == (10, 1)
    assert abs(graph_bytes(big) - graph_bytes(small)) < 100, (graph_bytes(small), graph_bytes(big))
    assert graph_bytes(big) < 2000  # 6.4 MB of data; the graph has paths and bounds
    # What dask does with a memmap: the data goes into the graph.
    mm = np.load(tmp / "big" / "features.npy", mmap_mode="r")
    assert graph_bytes(da.from_array(mm, chunks=(20000, 8))) > 6_000_000


DTYPES = ["i1", "i2", "i4", "i8", "u1", "u2", "u4", "u8", "f4", "f8"]


def sample(dt, n, rng, full_range=False):
    dt = np.dtype(dt)
    if dt.kind == "f":
        a = (rng.normal(size=n) * 1000).astype(dt)
        a[: n // 10] = np.round(a[: n // 10])  # ties
        return a
    info = np.iinfo(dt)
    lo, hi = (info.min, info.max) if full_range else (info.min // 2 + 1, info.max // 2)
    return rng.integers(lo, hi, size=n, endpoint=True, dtype=dt)


@pytest.mark.parametrize("dt", DTYPES)
def test_exact_quantiles_equal_numpy_on_every_dtype(dt):
    rng = np.random.default_rng(abs(hash(dt)) % 1000)
    qs = [0.0, 0.1, 0.25, 0.5, 0.77, 0.999, 1.0]
    with dask.config.set(scheduler="synchronous"):
        for n in (1, 2, 5, 1001, 40000):
            a = sample(dt, n, rng)
            x = da.from_array(a, chunks=max(1, n // 7))
            for method in ("linear", "inverted_cdf"):
                for gather_limit in (1 << 22, 5):  # 5: refine by more histogram passes
                    got = md.quantile(x, qs, method=method, gather_limit=gather_limit)
                    want = np.quantile(a, qs, method=method)
                    assert got.dtype == want.dtype and np.array_equal(got, want), (
                        dt,
                        n,
                        method,
                        gather_limit,
                    )
                    one = md.quantile(x, 0.3, method=method, gather_limit=gather_limit)
                    assert type(one) is type(
                        np.quantile(a, 0.3, method=method)
                    ) and one == np.quantile(a, 0.3, method=method)
            assert md.median(x) == np.median(a)
        # Full-range integers: numpy wraps the difference around; this is exact, like mmapkit.stats.
        a = sample(dt, 3000, rng, full_range=True)
        got = md.quantile(da.from_array(a, chunks=500), qs)
        assert np.array_equal(got, mmapkit.stats.quantile(a, qs))


def test_quantile_nans_and_errors():
    a = np.array([3.0, np.nan, 1.0, 2.0], dtype=np.float32)
    x = da.from_array(a, chunks=2)
    with dask.config.set(scheduler="synchronous"):
        assert np.isnan(md.median(x)) and np.isnan(np.median(a))
        assert md.median(x, skipna=True) == np.nanmedian(a) == 2.0
        assert (
            md.quantile(x, [0.5, 1.0], skipna=True).tolist()
            == np.nanquantile(a, [0.5, 1.0]).tolist()
        )
        with pytest.raises(ValueError, match="empty"):
            md.quantile(da.from_array(np.array([np.nan]), chunks=1), 0.5, skipna=True)
        with pytest.raises(ValueError, match="range"):
            md.quantile(x, 1.5)
        for bad in (np.longdouble, np.complex128):
            with pytest.raises(TypeError, match="unsupported dtype"):
                md.quantile(da.from_array(np.array([1.0], bad), chunks=1), 0.5)


@pytest.fixture(scope="module")
def client():
    distributed = pytest.importorskip("distributed")
    with (
        distributed.LocalCluster(
            n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
        ) as c,
        distributed.Client(c) as cl,
    ):
        yield cl


def _rss_anon_kib():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("RssAnon:"):
                return int(line.split()[1])
    raise AssertionError("no RssAnon")


def _mapped_paths():
    return sorted(md._cache)


def test_local_cluster_reads_exactly_the_store_by_path(tmp, client):
    # 250 000 × 64 float32: 64 MB, in 16 chunks.
    fs = FeatureStore(tmp / "fs", "w", dim=64)
    rng = np.random.default_rng(3)
    total = 0.0
    for _ in range(5):
        X = rng.normal(size=(50000, 64)).astype(np.float32)
        fs.add(X, np.zeros(50000))
        total += float(X.sum(dtype=np.float64))
    x = md.to_dask_array(fs, chunks=15625)
    before = client.run(_rss_anon_kib)
    got = float(x.astype(np.float64).sum().compute())
    col = x[:, 5].compute()
    after = client.run(_rss_anon_kib)
    assert got == pytest.approx(total, rel=1e-9)
    assert np.array_equal(col, fs.features[:, 5])
    # Every worker mapped the file itself; their own memory stayed far below the 64 MB array.
    paths = client.run(_mapped_paths)
    assert len(paths) == 2 and all(p == [str(tmp / "fs" / "features.npy")] for p in paths.values())
    growth = {w: (after[w] - before[w]) / 1024 for w in after}
    print(
        "workers RssAnon growth (MiB):",
        growth,
        "absolute (MiB):",
        {w: a / 1024 for w, a in after.items()},
    )
    assert all(g < 16 for g in growth.values()), f"workers' RssAnon grew (MiB): {growth}"


def test_exact_median_and_quantiles_on_the_cluster(tmp, client):
    a = sample("f8", 200000, np.random.default_rng(9))
    np.save(tmp / "a.npy", a)
    x = md.to_dask_array(tmp / "a.npy", chunks=25000)
    assert md.median(x) == np.median(a)
    assert np.array_equal(
        md.quantile(x, [0.01, 0.5, 0.99], gather_limit=1000), np.quantile(a, [0.01, 0.5, 0.99])
    )
    _fs, X, _ = store(tmp / "fs", 30000)
    assert md.median(tmp / "fs") == np.median(X)


def test_exact_quantiles_on_the_cluster_for_every_dtype(tmp, client):
    rng = np.random.default_rng(11)
    qs = [0.0, 0.3, 0.5, 0.9, 1.0]
    for dt in DTYPES:
        a = sample(dt, 20001, rng)
        np.save(tmp / f"{dt}.npy", a)
        x = md.to_dask_array(tmp / f"{dt}.npy", chunks=3000)  # the workers map the file
        for method in ("linear", "inverted_cdf"):
            got = md.quantile(x, qs, method=method, gather_limit=200)
            assert np.array_equal(got, np.quantile(a, qs, method=method)), (dt, method)
        assert md.median(x) == np.median(a), dt


def test_data_parallel_training_on_the_cluster(tmp, client):
    fs, X, y = store(tmp / "fs", 40000, d=8)
    w, b, losses = md.fit_logistic_regression(fs, epochs=8, lr=2.0, chunks=5000)
    assert losses[0] == pytest.approx(np.log(2))
    assert all(l2 < l1 for l1, l2 in itertools.pairwise(losses))
    with dask.config.set(scheduler="synchronous"):
        w1, b1, losses1 = md.fit_logistic_regression(fs, epochs=8, lr=2.0, chunks=5000)
    # The same computation, wherever it runs.
    np.testing.assert_allclose(w, w1, rtol=1e-6)
    assert b1 == pytest.approx(b, rel=1e-6)
    np.testing.assert_allclose(losses1, losses, rtol=1e-6)
    # The same full-batch rule written directly.
    wr, br = np.zeros(8, np.float32), 0.0
    for _ in range(8):
        p = 1 / (1 + np.exp(-(X.astype(np.float64) @ wr + br)))
        wr = (wr - 2.0 * (X.T.astype(np.float64) @ (p - y)) / len(y)).astype(np.float32)
        br = br - 2.0 * float(np.sum(p - y)) / len(y)
    np.testing.assert_allclose(w, wr, rtol=1e-4, atol=1e-5)
    assert b == pytest.approx(br, rel=1e-4, abs=1e-5)
    acc = float(np.mean(((X @ w + b) > 0) == (y > 0.5)))
    assert acc > 0.9


def test_command_line_example(tmp, capsys, client):
    import json

    fs, X, _ = store(tmp / "fs", 5000)
    assert (
        md.main(["median", str(tmp / "fs"), "--scheduler", "synchronous", "--chunks", "700"]) == 0
    )
    assert json.loads(capsys.readouterr().out) == {"median": float(np.median(X))}
    md.main(
        [
            "quantile",
            str(tmp / "fs"),
            "--scheduler",
            client.scheduler.address,
            "-q",
            "0.1",
            "-q",
            "0.9",
        ]
    )
    assert json.loads(capsys.readouterr().out)["quantile"] == np.quantile(X, [0.1, 0.9]).tolist()
    md.main(
        [
            "fit",
            str(tmp / "fs"),
            "--scheduler",
            client.scheduler.address,
            "--epochs",
            "3",
            "--chunks",
            "1000",
        ]
    )
    out = json.loads(capsys.readouterr().out)
    w, _b, losses = md.fit_logistic_regression(fs, 3, 0.5, 0.0, 1000)
    assert out["losses"] == losses and np.allclose(out["coef"], w)


# ----- issue 38, gap 7: median/quantile per column (axis=0) -------------------------


@pytest.mark.parametrize("dt", ["int16", "int64", "uint8", "float32", "float64"])
def test_median_and_quantile_per_column_equal_numpy(dt):
    rng = np.random.default_rng(7)
    qs = [0.0, 0.1, 0.5, 0.77, 1.0]
    with dask.config.set(scheduler="synchronous"):
        for n in (1, 2, 9, 3001):
            a = np.stack([sample(dt, n, rng) for _ in range(5)], axis=1)
            x = da.from_array(a, chunks=(max(1, n // 6), 5))
            for gather_limit in (1 << 22, 7):  # 7: histogram passes, buckets gathered in batches
                got = md.median(x, axis=0, gather_limit=gather_limit)
                want = np.median(a, axis=0)
                assert got.dtype == want.dtype and np.array_equal(got, want), (dt, n)
                for method in ("linear", "inverted_cdf"):
                    got = md.quantile(x, qs, axis=0, method=method, gather_limit=gather_limit)
                    want = np.quantile(a, qs, axis=0, method=method)
                    assert got.shape == want.shape == (len(qs), 5)
                    assert got.dtype == want.dtype and np.array_equal(got, want), (dt, n, method)
                one = md.quantile(x, 0.3, axis=0, gather_limit=gather_limit)
                want = np.quantile(a, 0.3, axis=0)
                assert one.dtype == want.dtype and np.array_equal(one, want)
            # axis=None is today's: all elements.
            assert md.median(x) == np.median(a)


def test_per_column_quantiles_with_nans_and_skipna():
    rng = np.random.default_rng(3)
    a = rng.normal(size=(500, 4))
    a[rng.random(a.shape) < 0.1] = np.nan
    a[:, 2] = np.nan  # a column of NaN only
    a[:, 3] = rng.normal(size=500)  # no NaN
    x = da.from_array(a, chunks=(70, 4))
    qs = [0.25, 0.5, 0.9]
    with dask.config.set(scheduler="synchronous"):
        got, want = md.median(x, axis=0), np.median(a, axis=0)
        assert np.array_equal(got, want, equal_nan=True)
        assert np.array_equal(
            md.quantile(x, qs, axis=0), np.quantile(a, qs, axis=0), equal_nan=True
        )
        with pytest.warns(RuntimeWarning, match="All-NaN"):
            got = md.median(x, axis=0, skipna=True)
        with pytest.warns(RuntimeWarning, match="All-NaN"):
            want = np.nanmedian(a, axis=0)
        assert np.array_equal(got, want, equal_nan=True)
        with pytest.warns(RuntimeWarning, match="All-NaN"):
            got = md.quantile(x, qs, axis=0, skipna=True)
        with pytest.warns(RuntimeWarning, match="All-NaN"):
            want = np.nanquantile(a, qs, axis=0)
        assert np.array_equal(got, want, equal_nan=True)
        with pytest.raises(ValueError, match="axis"):
            md.median(x, axis=1)


def test_per_column_median_of_a_store_by_path(tmp):
    fs, X, _ = store(tmp / "fs", 4000, d=6)
    with dask.config.set(scheduler="synchronous"):
        got = md.median(tmp / "fs", axis=0, gather_limit=100)
        assert np.array_equal(got, np.median(X, axis=0)) and got.shape == (6,)
        q = md.quantile(fs, [0.1, 0.9], axis=0, gather_limit=100)
        assert np.array_equal(q, np.quantile(X, [0.1, 0.9], axis=0))

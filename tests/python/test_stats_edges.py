"""Statistics edge cases (issue 24, defect 7): ±inf across chunks, float16
on every path, integer quantiles that must not depend on ``memory=``,
dtypes the statistics refuse (long double, complex) and refuse the same
way everywhere, ``FeatureStore.take``'s index rules; and a differential
property test against numpy over dtypes, axes, chunk sizes and ``memory``,
so that an answer depending on the path taken fails. Then: views of
mmapkit mappings whose file another process truncated, signed zeros in
one order on every path, and arrays without rows or columns."""

from __future__ import annotations

import math
import subprocess
import sys
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st_
from hypothesis.extra import numpy as hnp

import mmapkit
import mmapkit.stats as st
from mmapkit import _columns

INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOATS = ["float16", "float32", "float64"]


@contextmanager
def chunk_bytes(n: int) -> Iterator[None]:
    """Row chunks of ``n`` bytes in the one-pass statistics, so that small
    arrays cross chunk boundaries."""
    old = _columns.CHUNK_BYTES
    _columns.CHUNK_BYTES = n
    try:
        yield
    finally:
        _columns.CHUNK_BYTES = old


# ----- a. ±inf across chunks ------------------------------------------------


def test_mean_of_inf_column_across_64mib_chunks() -> None:
    """The reported case: more than one 64 MiB chunk, +inf in the first."""
    X = np.ones((9_000_000, 1))
    X[0, 0] = np.inf
    assert st.mean(X, axis=0)[0] == np.inf == np.mean(X, axis=0)[0]


@pytest.mark.parametrize(
    "specials", [[np.inf], [-np.inf], [np.inf, -np.inf], [np.nan], [np.nan, np.inf]]
)
@pytest.mark.parametrize("where", ["first", "last", "spread"])
def test_nonfinite_mean_var_std_sum(specials: list[float], where: str) -> None:
    rng = np.random.default_rng(1)
    X = rng.standard_normal((100, 3))
    rows = {"first": [0, 1], "last": [98, 99], "spread": [3, 77]}[where]
    for r, v in zip(rows, specials, strict=False):
        X[r, 1] = v
    ref = X.astype(np.float64)
    with chunk_bytes(10 * 3 * 8), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        np.testing.assert_allclose(st.mean(X, axis=0), np.mean(ref, axis=0), rtol=1e-12)
        np.testing.assert_allclose(st.var(X, axis=0), np.var(ref, axis=0), rtol=1e-9)
        np.testing.assert_allclose(st.std(X, axis=0), np.std(ref, axis=0), rtol=1e-9)
        col = np.ascontiguousarray(X[:, 1])
        for got, want in [
            (st.mean(col), np.mean(col)),
            (st.sum(col), np.sum(col)),
            (st.var(col), np.var(col)),
            (st.std(col), np.std(col)),
        ]:
            np.testing.assert_allclose(got, want, rtol=1e-9)
            assert np.isnan(got) == np.isnan(want) and np.isinf(got) == np.isinf(want)


@pytest.mark.parametrize("specials", [[(0, np.inf)], [(0, -np.inf)], [(0, np.inf), (-1, -np.inf)]])
def test_whole_array_mean_sum_std_with_inf_across_core_chunks(
    specials: list[tuple[int, float]],
) -> None:
    """axis=None: the core's chunked, threaded sums keep numpy's signs."""
    a = np.ones(9_000_000)
    for i, v in specials:
        a[i] = v
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for threads in (1, 2):
            np.testing.assert_array_equal(st.mean(a, threads=threads), np.mean(a))
            np.testing.assert_array_equal(st.sum(a, threads=threads), np.sum(a))
        assert np.isnan(st.std(a)) and np.isnan(st.var(a))


def test_feature_store_mean_std_with_inf(tmp: Path) -> None:
    X = np.ones((50, 2), np.float32)
    X[0, 0] = np.inf
    X[10, 1] = -np.inf
    X[11, 1] = np.inf
    with mmapkit.FeatureStore(tmp / "s", "w", dim=2) as fs:
        fs.add(X, np.zeros(50))
        with chunk_bytes(2 * 4 * 4):
            assert fs.mean()[0] == np.inf and np.isnan(fs.mean()[1])
            assert np.isnan(fs.std()).all()
            d = fs.describe()
            assert d["mean"][0] == np.inf and np.isnan(d["std"]).all()


# ----- b. float16 ------------------------------------------------------------


@pytest.mark.parametrize("memory", [1, 256 << 20])
def test_float16_median_does_not_overflow(memory: int) -> None:
    a = np.array([55456, 65504], np.float16)
    want = np.median(a)
    assert want == np.float16(60480)
    got = st.median(a.reshape(-1, 1), axis=0, memory=memory)
    assert got.dtype == np.float16 and got[0] == want
    assert st.median(a, memory=memory) == want
    assert type(st.median(a)) is np.float16


@pytest.mark.parametrize("memory", [1, 256 << 20])
@pytest.mark.parametrize("q", [0.5, [0.3, 0.5], 0.999])
def test_float16_quantile_is_numpys(memory: int, q: Any) -> None:
    a = np.array([-60000, 55456, 65504, 1.5, -2], np.float16)
    want = np.quantile(a, q)
    for got in (
        st.quantile(a, q, memory=memory),
        np.asarray(st.quantile(a.reshape(-1, 1), q, axis=0, memory=memory))[..., 0],
    ):
        np.testing.assert_array_equal(got, want)
        assert np.asarray(got).dtype == np.asarray(want).dtype


# ----- c. integer quantiles independent of memory= ---------------------------


def test_int8_linear_quantile_does_not_depend_on_memory() -> None:
    x = np.array([-100, 100], np.int8).reshape(-1, 1)
    small = st.quantile(x, 0.5, axis=0, memory=1)
    large = st.quantile(x, 0.5, axis=0)
    assert small[0] == large[0] == st.quantile(x.ravel(), 0.5) == 0.0


@pytest.mark.parametrize("dtype", INTS)
@pytest.mark.parametrize("method", ["linear", "inverted_cdf"])
def test_int_quantile_paths_agree_with_numpy(dtype: str, method: str) -> None:
    info = np.iinfo(dtype)
    rng = np.random.default_rng(7)
    # Half the range, so numpy's differences in the integer type cannot wrap.
    x = rng.integers(info.min // 2, info.max // 2, size=(301, 3), dtype=dtype, endpoint=True)
    q = [0.0, 0.1, 1 / 3, 0.5, 0.77, 1.0]
    want = np.quantile(x, q, axis=0, method=method)
    for memory in (1, 256 << 20):
        got = st.quantile(x, q, axis=0, method=method, memory=memory)
        np.testing.assert_array_equal(got, want)
        assert got.dtype == want.dtype
    flat = st.quantile(x.ravel(), q, method=method)
    np.testing.assert_array_equal(flat, np.quantile(x.ravel(), q, method=method))
    np.testing.assert_array_equal(
        st.median(x, axis=0, memory=1), st.median(x, axis=0, memory=256 << 20)
    )


# ----- d/e. one set of dtypes: FeatureStore, stats, dask ---------------------


def test_longdouble_refused_clearly_everywhere(tmp: Path) -> None:
    name = np.dtype(np.longdouble).name
    with pytest.raises(ValueError, match=f"unsupported dtype {name}.*float16, float32"):
        mmapkit.FeatureStore(tmp / "f", "w", dim=2, dtype=np.longdouble)
    with pytest.raises(ValueError, match=f"label_dtype: unsupported dtype {name}"):
        mmapkit.FeatureStore(tmp / "g", "w", dim=2, label_dtype=np.longdouble)
    a = np.ones((4, 2), np.longdouble)
    store = mmapkit.ArrayStore.create(tmp / "a.npy", np.longdouble, (2,))
    store.extend(a)
    for src in (a, store):
        for axis in (None, 0):
            with pytest.raises(TypeError, match=f"unsupported dtype {name}"):
                st.quantile(src, 0.5, axis=axis, memory=1)
            with pytest.raises(TypeError, match=f"unsupported dtype {name}"):
                st.mean(src, axis=axis)
    store.close()
    np.save(tmp / "l.npy", a)
    with pytest.raises(TypeError, match=f"unsupported dtype {name}"):
        st.median(tmp / "l.npy")
    pytest.importorskip("dask")
    import mmapkit.dask as md

    with pytest.raises(TypeError, match=f"unsupported dtype {name}"):
        md.median(tmp / "a.npy")


def test_dask_takes_float16_stores(tmp: Path) -> None:
    pytest.importorskip("dask")
    import dask

    import mmapkit.dask as md

    rng = np.random.default_rng(3)
    X = np.clip(rng.standard_normal((301, 3)) * 20000, -65504, 65504).astype(np.float16)
    X[5, 1] = 65504
    with mmapkit.FeatureStore(tmp / "h", "w", dim=3, dtype=np.float16) as fs:
        fs.add(X, np.zeros(len(X)))
    with dask.config.set(scheduler="synchronous"):
        got = md.median(tmp / "h", gather_limit=16)
        assert got == np.median(X) and got.dtype == np.float16
        q = md.quantile(tmp / "h", [0.25, 0.999], gather_limit=16)
        np.testing.assert_array_equal(q, np.quantile(X, [0.25, 0.999]))


# ----- f. complex -------------------------------------------------------------


@pytest.mark.parametrize("fn", ["mean", "median", "min", "max", "sum", "std", "var"])
@pytest.mark.parametrize("axis", [None, 0])
def test_complex_is_refused_not_truncated(fn: str, axis: int | None) -> None:
    c = np.array([[1 + 2j, 3 + 4j], [5 - 1j, 0j]])
    with pytest.raises(TypeError, match=r"unsupported dtype complex128 .*imag"):
        getattr(st, fn)(c, axis=axis)
    with pytest.raises(TypeError, match="unsupported dtype complex128"):
        st.quantile(c, 0.5, **({} if axis is None else {"axis": 0}))


# ----- g. FeatureStore.take indexes as numpy ----------------------------------


def test_take_indexes_like_numpy(tmp: Path) -> None:
    X = np.arange(20, dtype=np.float32).reshape(10, 2)
    y = np.arange(10, dtype=np.float32)
    with mmapkit.FeatureStore(tmp / "t", "w", dim=2) as fs:
        fs.add(X, y)
        for bad in ([1.7], np.array([1.0]), [0, 1.5], ["1"]):
            with pytest.raises(IndexError, match="integers or a boolean mask"):
                fs.take(bad)
            with pytest.raises(IndexError):
                X[np.asarray(bad)]
        for rows in ([-1, 0, -10], np.array([3, -2], np.int8), np.uint64([9]), [], 4):
            Xt, yt = fs.take(rows)
            ix = np.asarray(rows, dtype=np.int64).reshape(-1)
            assert np.array_equal(Xt, X[ix]) and np.array_equal(yt, y[ix])
        mask = np.arange(10) % 3 == 0
        Xt, yt = fs.take(mask)
        assert np.array_equal(Xt, X[mask]) and np.array_equal(yt, y[mask])
        Xt, _ = fs.take(list(mask))
        assert np.array_equal(Xt, X[mask])
        for bad in ([True, False], np.ones((10, 1), bool), True):
            with pytest.raises(IndexError, match="boolean mask"):
                fs.take(bad)
        for bad in ([10], [-11], np.uint64([2**63 + 1])):
            with pytest.raises(IndexError, match="out of range"):
                fs.take(bad)


# ----- differential property test -----------------------------------------------


@st_.composite
def _data(draw: st_.DrawFn) -> np.ndarray:
    """A 2-D array of any dtype the statistics take: integers over their
    whole range, floats with ±inf, NaN and ±0 put in at drawn places."""
    dt = np.dtype(draw(st_.sampled_from(INTS + FLOATS)))
    shape = draw(st_.tuples(st_.integers(1, 40), st_.integers(1, 3)))
    if dt.kind in "iu":
        info = np.iinfo(dt)
        edge = st_.sampled_from([info.min, info.max, 0, -1 if dt.kind == "i" else 1])
        elements = st_.integers(int(info.min), int(info.max)) | edge
        return draw(hnp.arrays(dt, shape, elements=elements))
    # Bounded so that float64 sums of squares stay finite.
    bound = {"float16": 65504.0, "float32": 2.0**100, "float64": 2.0**300}[dt.name]
    a = draw(hnp.arrays(dt, shape, elements=st_.floats(-bound, bound, width=dt.itemsize * 8)))
    for _ in range(draw(st_.integers(0, 4))):
        r, c = draw(st_.integers(0, shape[0] - 1)), draw(st_.integers(0, shape[1] - 1))
        a[r, c] = draw(st_.sampled_from([np.inf, -np.inf, np.nan, 0.0, -0.0]))
    return a


def _np_quantile(a: np.ndarray, q: Any, axis: int | None, method: str) -> Any:
    """numpy's quantile, its integer arithmetic done without wrapping around
    (on Python ints: numpy's steps, exact differences; mmapkit.stats' rule)."""
    want = np.quantile(a, q, axis=axis, method=method)
    if a.dtype.kind in "iu":
        exact = np.quantile(a.astype(object), q, axis=axis, method=method)
        want = np.asarray(exact).astype(np.asarray(want).dtype)
        want = want[()] if want.ndim == 0 else want
    return want


QUANTILES = st_.sampled_from([0.0, 0.5, 1.0, 0.25, 1 / 3, 0.9]) | st_.floats(0, 1)


def _same(got: Any, want: Any) -> None:
    np.testing.assert_array_equal(got, want)
    assert np.asarray(got).dtype == np.asarray(want).dtype


def _close(got: Any, want: Any, scale: float) -> None:
    got, want = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert (np.isnan(got) == np.isnan(want)).all(), (got, want)
    assert (got[np.isinf(want)] == want[np.isinf(want)]).all(), (got, want)
    fin = np.isfinite(want)
    np.testing.assert_allclose(got[fin], want[fin], rtol=1e-9, atol=1e-9 * scale)


@settings(
    max_examples=150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=_data(),
    q=QUANTILES,
    qs=st_.lists(QUANTILES, min_size=1, max_size=3),
    rows_per_chunk=st_.integers(1, 8),
    method=st_.sampled_from(["linear", "inverted_cdf"]),
)
def test_stats_match_numpy_on_every_path(
    data: np.ndarray, q: float, qs: list[float], rows_per_chunk: int, method: str
) -> None:
    ref = data.astype(np.float64)
    flat = data.ravel()
    big = float(np.max(np.abs(ref[np.isfinite(ref)]), initial=1.0))
    with (
        chunk_bytes(rows_per_chunk * data.shape[1] * data.itemsize),
        warnings.catch_warnings(),
        np.errstate(all="ignore"),
    ):
        warnings.simplefilter("ignore", RuntimeWarning)
        # Moments: numpy's on the float64 data (mmapkit's are float64).
        for axis in (None, 0):
            _close(st.mean(data, axis=axis), np.mean(ref, axis=axis), big)
            _close(st.var(data, axis=axis), np.var(ref, axis=axis), big * big)
            _close(st.std(data, axis=axis), np.std(ref, axis=axis), big)
            _same(st.min(data, axis=axis), np.min(data, axis=axis))
            _same(st.max(data, axis=axis), np.max(data, axis=axis))
        _close(st.sum(flat), np.sum(ref), big * flat.size)
        # Order statistics: exactly numpy's, whichever path and memory.
        for memory in (1, 256 << 20):
            _same(st.median(data, axis=0, memory=memory), np.median(data, axis=0))
            _same(st.median(flat, memory=memory), np.median(flat))
            for qq in (q, qs):
                want0 = _np_quantile(data, qq, 0, method)
                _same(st.quantile(data, qq, axis=0, method=method, memory=memory), want0)
                want = _np_quantile(flat, qq, None, method)
                _same(st.quantile(flat, qq, method=method, memory=memory), want)


# ----- arrays written by another thread meanwhile ---------------------------------


def test_stats_of_an_array_another_thread_writes() -> None:
    """The binding copies the array in blocks (atomic copies, never a slice
    over it: writes racing the GIL-free read are defined): every result is
    within what the array held, and a selection whose passes disagree says
    so (it panicked on an index out of bounds). A smoke test: the data
    race itself is not observable."""
    import threading

    a = np.ones(4 << 20)
    stop = threading.Event()

    def writer() -> None:
        v = 1.0
        while not stop.is_set():
            v = 3.0 - v  # 1.0 and 2.0 in turn
            a[:] = v

    t = threading.Thread(target=writer)
    t.start()
    try:
        for _ in range(20):
            assert 1.0 <= st.mean(a) <= 2.0
            assert st.max(a) <= 2.0
            try:
                m = st.median(a)
            except ValueError as e:
                assert "changed while being read" in str(e)
            else:
                assert 1.0 <= m <= 2.0
    finally:
        stop.set()
        t.join()


# ----- views of a mapping whose file another process truncated ---------------------


def _truncate_elsewhere(path: Path, size: int) -> None:
    """Truncates ``path`` to ``size`` bytes from another process."""
    code = "import os, sys; os.truncate(sys.argv[1], int(sys.argv[2]))"
    subprocess.run([sys.executable, "-c", code, str(path), str(size)], check=True)


TRUNCATED_CALLS: dict[str, Callable[[Any], Any]] = {
    "sum": st.sum,
    "mean": st.mean,
    "median": st.median,
    "quantile": lambda v: st.quantile(v, [0.1, 0.9]),
    "inverted_cdf": lambda v: st.quantile(v, 0.5, method="inverted_cdf"),
    "min": st.min,
    "max": st.max,
    "histogram": lambda v: st.histogram(v, 5),
    "var": st.var,
    "std": st.std,
    "median axis=0": lambda v: st.median(np.asarray(v).reshape(-1, 4), axis=0),
    "radix quantile axis=0": lambda v: st.quantile(
        np.asarray(v).reshape(-1, 4), 0.5, axis=0, memory=1
    ),
    "min axis=0": lambda v: st.min(np.asarray(v).reshape(-1, 4), axis=0),
    "mean axis=0": lambda v: st.mean(np.asarray(v).reshape(-1, 4), axis=0),
}


@pytest.mark.parametrize(
    "source", ["MappedFile.numpy()", "MappedFile", "ArrayStore.numpy()", "ArrayStore"]
)
@pytest.mark.parametrize("call", sorted(TRUNCATED_CALLS))
def test_stats_of_a_view_whose_file_was_truncated_raise_file_truncated_error(
    tmp: Path, source: str, call: str
) -> None:
    """Another process cut the mapped file: the guard turned the lost pages
    into zeros, and every statistic of a view of them says so, naming the
    file, instead of a result computed over the zeros (it was one: 0.0 for
    a median)."""
    a = np.arange(1 << 18, dtype=np.float64) + 1  # 2 MiB; no zero of its own
    if source.startswith("MappedFile"):
        path = tmp / "a.raw"
        a.tofile(path)
        owner: Any = mmapkit.open(path, "r")
        # The map itself is a buffer of bytes: its uint8 elements.
        v: Any = owner.numpy(np.float64) if source.endswith("()") else owner
    else:
        path = tmp / "a.npy"
        np.save(path, a)
        owner = mmapkit.ArrayStore.open(path)
        v = owner.numpy() if source.endswith("()") else owner
    _truncate_elsewhere(path, 4096)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with pytest.raises(mmapkit.FileTruncatedError) as e:
            TRUNCATED_CALLS[call](v)
    assert e.value.filename == str(path)
    del e, v  # the traceback's frames hold the view too
    owner.close()


def test_a_failure_over_a_truncated_view_is_file_truncated_error(tmp: Path) -> None:
    """A statistic that fails over a view of a cut file (here the NaN range
    of a histogram; in the core, selection passes that read different
    data) reports the truncation, the failure as its cause."""
    path = tmp / "nan.raw"
    np.full(1 << 18, np.nan).tofile(path)
    m = mmapkit.open(path, "r")
    v = m.numpy(np.float64)
    _truncate_elsewhere(path, 4096)
    with pytest.raises(mmapkit.FileTruncatedError) as e:
        st.histogram(v)
    assert e.value.filename == str(path) and isinstance(e.value.__cause__, ValueError)
    del e, v  # the traceback's frames hold the view too
    m.close()


def test_a_truncation_between_the_radix_passes_is_file_truncated_error(
    tmp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The file is cut while the out-of-core selection reads the rows (after
    its first chunk): its passes then count different data, and what comes
    out is FileTruncatedError naming the file, not that failure or a wrong
    quantile."""
    path = tmp / "rows.raw"
    np.random.default_rng(5).random((4096, 2)).tofile(path)
    m = mmapkit.open(path, "r")
    X = m.numpy(np.float64, (4096, 2))
    real = _columns.row_chunks
    cut: list[bool] = []

    def chunks(X: np.ndarray, chunk_bytes: int | None = None) -> Iterator[np.ndarray]:
        for c in real(X, 4096):
            yield c
            if not cut:
                _truncate_elsewhere(path, 0)
                cut.append(True)

    monkeypatch.setattr(_columns, "row_chunks", chunks)
    with pytest.raises(mmapkit.FileTruncatedError) as e:
        st.quantile(X, [0.3, 0.7], axis=0, memory=1)
    assert cut and e.value.filename == str(path)
    del e, X  # the traceback's frames hold the view too
    m.close()


def test_stats_of_views_of_an_intact_mapping_are_the_arrays(tmp: Path) -> None:
    """The truncation check costs nothing in results: an intact mapping's
    views give the array's statistics, and errors of their own pass through."""
    a = np.random.default_rng(6).random(10000)
    path = tmp / "ok.raw"
    a.tofile(path)
    with mmapkit.open(path, "r") as m:
        v = m.numpy(np.float64)
        assert st.median(v) == np.median(a) and st.max(v) == np.max(a)
        np.testing.assert_array_equal(
            st.quantile(v.reshape(-1, 2), 0.5, axis=0), np.quantile(a.reshape(-1, 2), 0.5, axis=0)
        )
        with pytest.raises(ValueError, match="range"):
            st.quantile(v, 2.0)
        del v


# ----- signed zeros ------------------------------------------------------------------


@st_.composite
def _signed_zeros(draw: st_.DrawFn) -> np.ndarray:
    """Rows of 0.0 and -0.0 mixed, sometimes with ±1.0 (so that the extreme
    or the quantile is not always a zero), in a float dtype."""
    dt = np.dtype(draw(st_.sampled_from(FLOATS)))
    shape = draw(st_.tuples(st_.integers(1, 40), st_.integers(1, 3)))
    values = draw(st_.sampled_from([[0.0, -0.0], [0.0, -0.0, 1.0], [0.0, -0.0, -1.0]]))
    picks = draw(hnp.arrays(np.intp, shape, elements=st_.integers(0, len(values) - 1)))
    return np.array(values, dtype=dt)[picks]


def _ordered(col: np.ndarray) -> np.ndarray:
    """``col`` sorted with -0.0 below 0.0 (Python's sort of (value, sign))."""
    return np.array(sorted(col.tolist(), key=lambda v: (v, math.copysign(1.0, v))), col.dtype)


def _bits(x: Any) -> tuple[Any, ...]:
    a = np.asarray(x)
    return a.dtype, a.shape, a.tobytes()


@settings(max_examples=200, deadline=None)
@given(data=_signed_zeros(), q=QUANTILES, rows_per_chunk=st_.integers(1, 8))
def test_signed_zeros_are_ordered_one_way_on_every_path(
    data: np.ndarray, q: float, rows_per_chunk: int
) -> None:
    """-0.0 == 0.0 as numpy has it, and which zero comes back is the one
    the order with -0.0 below 0.0 gives (np.signbit against a sort), the
    same for axis=None and axis=0, every thread count, chunking and
    ``memory``. numpy's own sign bit is not the reference: it follows its
    SIMD kernels (with AVX-512, min([0., -0., 0.]) is 0.0 but
    min([0., 0., -0.]) -0.0, and at other lengths other positions win;
    NEON orders the zeros), which mmapkit cannot follow out of core."""
    n = data.shape[0]
    flat = data[:, 0]
    rank = int(np.quantile(np.arange(n), q, method="inverted_cdf"))
    cols = [_ordered(data[:, j]) for j in range(data.shape[1])]
    with chunk_bytes(rows_per_chunk * data.shape[1] * data.itemsize):
        for X, axis, ordered in ((flat, None, cols[:1]), (data, 0, cols)):
            for fn, want_of, np_fn in (
                (st.min, lambda o: o[0], np.min),
                (st.max, lambda o: o[-1], np.max),
            ):
                got = fn(X, axis=axis)
                _same(got, np_fn(X, axis=axis))
                want = np.array([want_of(o) for o in ordered], data.dtype)
                np.testing.assert_array_equal(np.signbit(got).reshape(-1), np.signbit(want))
            got = st.quantile(X, q, axis=axis, method="inverted_cdf")
            _same(got, np.quantile(X, q, axis=axis, method="inverted_cdf"))
            want = np.array([o[rank] for o in ordered], data.dtype)
            np.testing.assert_array_equal(np.signbit(got).reshape(-1), np.signbit(want))
        # Every path gives the same bits: the core, the radix selection, numpy's arithmetic.
        column = flat.reshape(-1, 1)
        for fn, kw in (
            (st.median, {}),
            (st.quantile, {"q": q}),
            (st.quantile, {"q": [q, 0.5], "method": "inverted_cdf"}),
            (st.min, {}),
            (st.max, {}),
        ):
            want = _bits(fn(flat, **kw))
            for other in (
                fn(flat, threads=1, **kw),
                fn(flat, threads=3, **kw),
                np.asarray(fn(column, axis=0, **kw))[..., 0],
            ):
                assert _bits(other) == want, (fn, kw)
            if fn is not st.min and fn is not st.max:
                assert _bits(fn(flat, memory=1, **kw)) == want, (fn, kw)
                assert _bits(np.asarray(fn(column, axis=0, memory=1, **kw))[..., 0]) == want
        if data.dtype.kind == "f":
            np.testing.assert_array_equal(st.median(flat), np.median(flat))


# ----- arrays without rows or columns ------------------------------------------------


EMPTY_CALLS = {
    "median": (st.median, np.median, {}),
    "quantile": (st.quantile, np.quantile, {"q": 0.5}),
    "quantiles": (st.quantile, np.quantile, {"q": [0.2, 0.5]}),
    "inverted_cdf": (st.quantile, np.quantile, {"q": [0.5], "method": "inverted_cdf"}),
    "min": (st.min, np.min, {}),
    "max": (st.max, np.max, {}),
    # mmapkit's moments are float64 whatever the dtype: numpy's in float64.
    "mean": (st.mean, np.mean, {"dtype": np.float64}),
    # Sums of floats are float64 too; of integers in numpy's sum type.
    "sum": (
        st.sum,
        lambda x, **kw: np.sum(x, dtype=np.float64 if x.dtype.kind == "f" else None, **kw),
        {},
    ),
    "var": (st.var, np.var, {"dtype": np.float64}),
    "std": (st.std, np.std, {"dtype": np.float64}),
}


def _outcome(f: Any) -> Any:
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore", RuntimeWarning)
        try:
            return f()
        except (ValueError, IndexError) as e:  # what numpy raises here
            return e


@pytest.mark.parametrize("shape", [(3, 0), (0, 2), (0, 0), (3, 0, 2), (2, 3, 0), (0,)])
@pytest.mark.parametrize("dtype", ["float64", "float32", "float16", "int32"])
@pytest.mark.parametrize("axis", [None, 0])
@pytest.mark.parametrize("call", sorted(EMPTY_CALLS))
def test_statistics_of_arrays_without_rows_or_columns_are_numpys(
    shape: tuple[int, ...], dtype: str, axis: int | None, call: str
) -> None:
    """An array of rows without columns, without rows, or both: numpy's
    result (shape, dtype, NaNs), or the type of the error numpy raises
    (quantile's of (n, 0) rows was "need at least one array to stack")."""
    mk, ref, kw = EMPTY_CALLS[call]
    x = np.zeros(shape, dtype)
    want = _outcome(lambda: ref(x, axis=axis, **kw))
    mk_kw = {k: v for k, v in kw.items() if k != "dtype"}
    got = _outcome(lambda: mk(x, axis=axis, **mk_kw))
    if isinstance(want, Exception):
        assert isinstance(got, type(want)), (got, want)
    else:
        assert not isinstance(got, Exception), got
        _same(got, want)
        assert np.shape(got) == np.shape(want)


def test_quantile_of_no_elements_is_numpys_index_error_and_a_value_error(tmp: Path) -> None:
    """numpy raises IndexError for quantiles of nothing, mmapkit a
    ValueError for an input it cannot compute on: the error is both, for
    arrays, files and every path (after numpy's own checks of q)."""
    np.save(tmp / "empty.npy", np.zeros(0))
    np.save(tmp / "rows.npy", np.zeros((0, 3)))
    (tmp / "empty.raw").write_bytes(b"")
    for src, kw in (
        (np.zeros(0), {}),
        (np.zeros(0, np.float16), {}),
        (np.zeros((0, 3), np.int16), {"axis": 0}),
        (np.zeros((0, 3), np.float16), {"axis": 0}),
        (tmp / "empty.npy", {}),
        (tmp / "empty.raw", {"dtype": "int32"}),
        (tmp / "rows.npy", {"axis": 0}),
    ):
        for exc in (IndexError, ValueError):
            with pytest.raises(exc, match="quantile"):
                st.quantile(src, 0.5, **kw)
        with pytest.raises(ValueError, match="range") as e:
            st.quantile(src, 2.0, **kw)
        assert not isinstance(e.value, IndexError)

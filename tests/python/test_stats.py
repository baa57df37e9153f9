"""mmapkit.stats against numpy: exact equality for every supported dtype,
with NaN and ±inf, odd and even lengths, empty and length-1 input, from
arrays, memmaps, raw files and .npy files."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st_
from hypothesis.extra import numpy as hnp

import mmapkit
import mmapkit.stats as st
from mmapkit import _columns

INTS = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]
FLOATS = ["float32", "float64"]
DTYPES = INTS + FLOATS
QS = [0.0, 0.01, 0.1, 0.25, 1 / 3, 0.5, 0.75, 0.9, 0.999, 1.0]


def rand(dtype: str, n: int, seed: int, special: bool = False) -> np.ndarray:
    rng = np.random.default_rng(seed)
    dt = np.dtype(dtype)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        # Mix the full range with a narrow band (many duplicates).
        a = rng.integers(info.min, info.max, size=n, dtype=dt, endpoint=True)
        a[: n // 3] = rng.integers(0, 5, size=n // 3).astype(dt)
        return a
    a = (rng.standard_normal(n) * 10.0 ** rng.integers(-3, 30, size=n)).astype(dt)
    a[: n // 4] = rng.integers(-3, 3, size=n // 4).astype(dt)  # duplicates, ±0
    if special and n >= 4:
        a[rng.integers(0, n, size=2)] = np.inf
        a[rng.integers(0, n, size=1)] = -np.inf
    rng.shuffle(a)
    return a


def same(got: object, want: object) -> None:
    g, w = np.asarray(got), np.asarray(want)
    assert g.dtype == w.dtype, (g.dtype, w.dtype)
    np.testing.assert_array_equal(g, w)


def close(got: object, want: object) -> None:
    """Float sums: numpy's pairwise sum vs a compensated one (NaN/inf exact)."""
    g, w = float(got), float(want)  # type: ignore[arg-type]
    if np.isfinite(w):
        assert g == pytest.approx(w, rel=1e-9, abs=1e-300)
    else:
        assert g == w or (np.isnan(g) and np.isnan(w))


def hist_same(a: np.ndarray, bins: int, range: tuple[float, float] | None = None) -> None:
    """Same counts and edges as np.histogram, or the same refusal."""
    try:
        nc, ne = np.histogram(a, bins, range=range)
    except ValueError:
        with pytest.raises(ValueError):
            st.histogram(a, bins, range=range)
        return
    c, e = st.histogram(a, bins, range=range)
    same(c, nc.astype(np.int64))
    same(e, ne)


def with_nan(a: np.ndarray) -> np.ndarray:
    b = a.copy()
    b[len(b) // 2] = np.nan
    return b


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [1, 2, 7, 1000, 1001, 70_001])
def test_matches_numpy(dtype: str, n: int) -> None:
    a = rand(dtype, n, seed=n, special=True)
    same(st.median(a), np.median(a))
    same(st.min(a), np.min(a))
    same(st.max(a), np.max(a))
    same(st.quantile(a, QS, method="inverted_cdf"), np.quantile(a, QS, method="inverted_cdf"))
    for q in QS:
        same(st.quantile(a, q, method="inverted_cdf"), np.quantile(a, q, method="inverted_cdf"))
    if dtype in FLOATS or dtype in ("uint8", "uint16"):
        # (signed ints: numpy's own linear quantile wraps around; see below)
        for q in QS:
            same(st.quantile(a, q), np.quantile(a, q))
    else:
        wide = a.astype(np.float64) if np.dtype(dtype).itemsize <= 4 else None
        if wide is not None:
            for q in QS:
                same(st.quantile(a, q), np.quantile(wide, q))
    if np.isfinite(a.astype(np.float64)).all():
        for bins in (1, 7, 64):
            hist_same(a, bins)
    lo, hi = (
        float(np.quantile(a, 0.2, method="inverted_cdf")),
        float(np.quantile(a, 0.8, method="inverted_cdf")),
    )
    hist_same(a, 10, (lo, hi))
    if dtype in INTS:
        assert st.sum(a) == int(a.astype(object).sum())
        assert st.mean(a) == pytest.approx(float(np.mean(a.astype(np.float64))), rel=1e-12)
    else:
        close(st.sum(a), np.sum(a.astype(np.float64)))


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("n", [1, 2, 1000, 1001])
def test_nan_like_numpy(dtype: str, n: int) -> None:
    a = with_nan(rand(dtype, n, seed=7 * n, special=True))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        same(st.median(a), np.median(a))
        same(st.median(a, skipna=True), np.nanmedian(a))
        same(st.quantile(a, 0.3), np.quantile(a, 0.3))
        same(st.quantile(a, 0.3, skipna=True), np.nanquantile(a, 0.3))
        same(
            st.quantile(a, QS, method="inverted_cdf", skipna=True),
            np.nanquantile(a, QS, method="inverted_cdf"),
        )
        same(st.min(a), np.min(a))
        same(st.max(a), np.max(a))
        same(st.min(a, skipna=True), np.nanmin(a))
        same(st.max(a, skipna=True), np.nanmax(a))
        assert np.isnan(st.sum(a)) and np.isnan(st.mean(a))
        close(st.sum(a, skipna=True), np.nansum(a.astype(np.float64)))
    c, _ = st.histogram(a, 5, range=(-1.0, 1.0))
    same(c, np.histogram(a, 5, range=(-1.0, 1.0))[0].astype(np.int64))
    with pytest.raises(ValueError, match="not finite"):
        st.histogram(a, 5)
    with pytest.raises(ValueError):
        np.histogram(a, 5)


def test_empty_and_errors() -> None:
    e = np.array([], dtype=np.float64)
    with pytest.warns(RuntimeWarning):
        assert np.isnan(st.median(e))
    with pytest.warns(RuntimeWarning):
        assert np.isnan(st.mean(e))
    assert st.sum(e) == 0.0 and st.sum(np.array([], np.int32)) == 0
    for f in (st.min, st.max):
        with pytest.raises(ValueError, match="zero-size"):
            f(e)
    with pytest.raises(ValueError, match="empty"):
        st.quantile(e, 0.5)
    same(st.histogram(e, 3)[0], np.histogram(e, 3)[0].astype(np.int64))
    with pytest.raises(ValueError, match="range"):
        st.quantile(np.arange(3), 1.5)
    with pytest.raises(ValueError, match="method"):
        st.quantile(np.arange(3), 0.5, method="nearest")
    with pytest.raises(TypeError, match="unsupported dtype"):
        st.median(np.array([1 + 2j]))
    with pytest.raises(TypeError, match="unsupported dtype"):
        st.median(np.array([True, False]))
    with pytest.raises(ValueError, match="max must be larger"):
        st.histogram(np.arange(3), 2, range=(2, 1))
    with pytest.raises(TypeError):
        st.median(np.arange(3), dtype="int64")


def test_numpy_quirks_documented() -> None:
    # numpy wraps b - a in the integer type; mmapkit is exact.
    a = np.array([-30000, 30000], dtype=np.int16)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        assert np.quantile(a, 0.5) == 32768.0
        # ... but median (a mean in float64) agrees.
        same(st.median(a), np.median(a))
        # float32 median of two huge values overflows in numpy, and here.
        big = np.array([3e38, 3e38], dtype=np.float32)
        same(st.median(big), np.median(big))
    assert st.quantile(a, 0.5) == 0.0
    assert st.sum(np.array([2**62, 2**62, 2**62], dtype=np.int64)) == 3 * 2**62


def test_layouts_and_sources(tmp_path) -> None:
    a = rand("float32", 6000, seed=3).reshape(60, 100)
    same(st.median(a), np.median(a))
    same(st.median(a.T), np.median(a))  # Fortran order: no copy needed
    same(st.median(a[:, ::3]), np.median(a[:, ::3]))  # strided: copied
    same(st.median(a.astype(">f4")), np.median(a))  # byte-swapped: converted
    same(st.quantile(a, [[0.1, 0.2], [0.3, 0.4]]), np.quantile(a, [[0.1, 0.2], [0.3, 0.4]]))
    # Raw file with an offset, and a count.
    raw = tmp_path / "a.bin"
    raw.write_bytes(b"HEADER--" + a.tobytes())
    same(st.median(raw, dtype=np.float32, offset=8), np.median(a))
    same(st.median(str(raw), dtype="<f4", offset=8, count=101), np.median(a.ravel()[:101]))
    same(st.histogram(raw, 9, dtype="float32", offset=8)[0], np.histogram(a, 9)[0].astype(np.int64))
    # np.memmap and .npy (dtype from the header).
    mm = np.memmap(raw, dtype=np.float32, mode="r", offset=8)
    same(st.max(mm), np.max(a))
    npy = tmp_path / "a.npy"
    np.save(npy, a)
    same(st.median(npy), np.median(a))
    same(st.quantile(npy, 0.3, method="inverted_cdf"), np.quantile(a, 0.3, method="inverted_cdf"))
    same(st.min(np.load(npy, mmap_mode="r")), np.min(a))
    # Errors name the file.
    with pytest.raises(FileNotFoundError) as ei:
        st.median(tmp_path / "missing.bin", dtype="int16")
    assert ei.value.filename == str(tmp_path / "missing.bin")
    with pytest.raises(mmapkit.FormatError, match=r"a\.bin"):
        st.median(raw, dtype="float64", offset=4)  # 24004 bytes: not whole float64s
    with pytest.raises(mmapkit.FormatError, match="npy"):
        st.median(raw)
    with pytest.raises(ValueError, match="aligned"):
        st.median(raw, dtype="float32", offset=2, count=10)


def test_object_with_array_interface() -> None:
    class Holder:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __array__(self, dtype=None, copy=None):
            return self.a

    a = rand("int32", 999, seed=5)
    same(st.median(Holder(a)), np.median(a))


_finite = {"allow_nan": False, "allow_infinity": True}


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        st_.sampled_from([np.int8, np.uint16, np.int32, np.int64, np.uint64]),
        st_.integers(1, 200),
        elements=None,
    ),
    st_.floats(0, 1),
)
def test_property_ints(a: np.ndarray, q: float) -> None:
    same(st.median(a), np.median(a))
    same(st.quantile(a, q, method="inverted_cdf"), np.quantile(a, q, method="inverted_cdf"))
    same(st.min(a), np.min(a))
    same(st.max(a), np.max(a))
    assert st.sum(a) == int(a.astype(object).sum())


@settings(max_examples=150, deadline=None)
@given(
    hnp.arrays(
        st_.sampled_from([np.float32, np.float64]),
        st_.integers(1, 200),
        elements=st_.floats(width=32),
    ),
    st_.floats(0, 1),
)
def test_property_floats(a: np.ndarray, q: float) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        same(st.median(a), np.median(a))
        same(st.median(a, skipna=True), np.nanmedian(a))
        same(st.quantile(a, q), np.quantile(a, q))
        same(st.quantile(a, q, method="inverted_cdf"), np.quantile(a, q, method="inverted_cdf"))
        same(st.min(a), np.min(a))
        same(st.max(a, skipna=True), np.nanmax(a))
    if np.isfinite(a).all():
        hist_same(a, 13)


@pytest.mark.skipif(
    not hasattr(mmapkit, "ArrayStore"), reason="ArrayStore not built on this branch"
)
def test_array_store_as_object_and_by_path(tmp_path) -> None:
    # A growing store reserves capacity past its rows: the path form must use
    # the header's shape, not the file size.
    path = tmp_path / "s.npy"
    a = rand("int32", 5001, seed=11).reshape(-1, 3)[:1667]
    store = mmapkit.ArrayStore.create(str(path), np.int32, row_shape=(3,))
    store.extend(a[:1000])
    store.extend(a[1000:])
    store.flush()
    assert store.capacity >= len(a)
    same(st.median(store), np.median(a))
    same(st.median(path), np.median(a))
    same(st.quantile(path, 0.9, method="inverted_cdf"), np.quantile(a, 0.9, method="inverted_cdf"))
    store.close()
    same(st.max(mmapkit.ArrayStore.open(str(path), mode="r")), np.max(a))


def test_npy_header_is_honoured_even_with_a_dtype(tmp_path) -> None:
    """Issue 10 defect 13: with dtype= the 128-byte header was read as data."""
    a = np.arange(1001, dtype=np.int16)
    p = tmp_path / "x.npy"
    np.save(p, a)
    assert st.median(p, dtype=np.int16) == 500.0 == np.median(a)
    assert st.median(p, dtype="<i2") == 500.0
    q = tmp_path / "no_extension"  # detected by magic, not by name
    q.write_bytes(p.read_bytes())
    assert st.max(q, dtype=np.int16) == 1000
    assert st.median(q) == 500.0
    for bad in (np.int32, np.uint16, np.float64):
        with pytest.raises(ValueError, match="conflicts"):
            st.median(p, dtype=bad)
    with pytest.raises(ValueError, match="through its header"):
        st.median(p, dtype=np.int16, offset=128)
    raw = tmp_path / "raw.bin"  # not .npy: dtype/offset/count read raw bytes
    raw.write_bytes(a.tobytes())
    assert st.median(raw, dtype=np.int16, offset=2, count=3) == 2.0
    short = tmp_path / "short.npy"
    short.write_bytes(p.read_bytes()[:-2])
    with pytest.raises(mmapkit.FormatError, match=r"short\.npy"):
        st.median(short)


@pytest.mark.parametrize("dtype", ["int16", "int64", "float32"])
def test_threads_give_the_same_results(tmp_path, dtype: str) -> None:
    # Several chunks of work (1 Mi elements each), so workers really split it.
    a = rand(dtype, (3 << 20) + 17, 5)
    path = tmp_path / "a.npy"
    np.save(path, a)
    calls = [
        lambda src, t: st.median(src, threads=t),
        lambda src, t: st.quantile(src, [0.1, 0.5, 0.99], threads=t),
        lambda src, t: st.histogram(src, 7, threads=t)[0],
        lambda src, t: st.histogram(src, 7, threads=t)[1],
        lambda src, t: (st.min(src, threads=t), st.max(src, threads=t)),
        lambda src, t: st.sum(src, threads=t),
        lambda src, t: st.mean(src, threads=t),
    ]
    for call in calls:
        want = call(a, 1)
        for src in (a, path):
            for t in (None, 0, 1, 3):
                np.testing.assert_array_equal(call(src, t), want, strict=True)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [0, 1, 2, 1001, (1 << 20) + 3, (5 << 20) + 1])
def test_read_and_mmap_strategies_agree(tmp_path, dtype: str, n: int) -> None:
    """A path read with large preads ("read", what "auto" picks for a file
    not in the page cache) gives exactly the mapped path's results (the
    array's own), raw with an offset or .npy, on 1 and 3 threads."""
    a = rand(dtype, n, 11, special=dtype in FLOATS)
    raw = tmp_path / "a.raw"
    raw.write_bytes(b"\0" * 16 + a.tobytes())
    npy = tmp_path / "a.npy"
    np.save(npy, a)
    calls = [
        st.median,
        lambda src, **kw: st.median(src, skipna=True, **kw),
        lambda src, **kw: st.quantile(src, QS, **kw),
        lambda src, **kw: st.quantile(src, [0.5, 0.1], method="inverted_cdf", skipna=True, **kw),
        lambda src, **kw: st.histogram(src, 9, (-100, 100), **kw),
        lambda src, **kw: (st.min(src, skipna=True, **kw), st.max(src, skipna=True, **kw)),
        st.sum,
        lambda src, **kw: st.mean(src, skipna=True, **kw),
    ]
    if dtype not in FLOATS:
        calls.append(lambda src, **kw: st.histogram(src, 7, **kw))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        for call in calls:
            try:
                want = call(a, threads=1)
            except (ValueError, IndexError) as e:
                want = type(e)
            for path, kw in ((raw, {"dtype": dtype, "offset": 16}), (npy, {})):
                for strategy in ("mmap", "read", "auto"):
                    for t in (1, 3):
                        try:
                            got = call(path, strategy=strategy, threads=t, **kw)
                        except (ValueError, IndexError) as e:
                            got = type(e)
                        if isinstance(want, tuple):
                            assert isinstance(got, tuple) and len(got) == len(want)
                            for g, w in zip(got, want, strict=True):
                                np.testing.assert_array_equal(g, w, strict=True)
                        else:
                            np.testing.assert_array_equal(got, want, strict=True)
    with pytest.raises(TypeError, match="strategy"):
        st.median(a, strategy="read")
    with pytest.raises(ValueError, match="strategy"):
        st.median(npy, strategy="bogus")


@pytest.mark.parametrize("bad", [-1, 1025])
def test_threads_out_of_range_raise_value_error(bad: int) -> None:
    with pytest.raises(ValueError, match="threads"):
        st.median(np.arange(10), threads=bad)
    with pytest.raises(ValueError, match="threads"):
        st.sum(np.arange(10), threads=bad)


# ----- axis=0: per column (the code behind FeatureStore's statistics) -------


def _same(got, want) -> None:
    got, want = np.asarray(got), np.asarray(want)
    assert got.shape == want.shape, (got.shape, want.shape)
    assert np.array_equal(got, want, equal_nan=True), (got, want)


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("dtype", [*DTYPES, "float16"])
@pytest.mark.parametrize("memory", [256 << 20, 64])  # 64 bytes: radix selection over the rows
def test_axis0_matches_numpy(tmp_path, dtype: str, memory: int) -> None:
    X = rand(dtype, 3 * 501, 7, special=True).reshape(501, 3)
    if dtype.startswith("float"):
        X[5, 1] = np.nan  # one NaN column
    p = tmp_path / "x.npy"
    np.save(p, X)
    for src in (X, np.load(p, mmap_mode="r"), p):
        _same(st.median(src, axis=0, memory=memory), np.median(X, axis=0))
        for q in (0.5, [0.0, 0.1, 1 / 3, 0.999, 1.0], np.float64(0.25)):
            for method in ("linear", "inverted_cdf"):
                _same(
                    st.quantile(src, q, axis=0, method=method, memory=memory),
                    np.quantile(X, q, axis=0, method=method),
                )
        _same(st.min(src, axis=0), np.min(X, axis=0))
        _same(st.max(src, axis=0), np.max(X, axis=0))
        np.testing.assert_allclose(
            st.mean(src, axis=0), X.astype(np.float64).mean(axis=0), rtol=1e-12
        )
        np.testing.assert_allclose(
            st.std(src, axis=0, ddof=1), X.astype(np.float64).std(axis=0, ddof=1), rtol=1e-9
        )
        _same_sum(st.sum(src, axis=0), X)


def _same_sum(got, X) -> None:
    """``st.sum(X, axis=0)`` against numpy's: floats as ``np.sum(X, axis=0,
    dtype=np.float64)`` (to rounding: chunk sums added up); integers exact (numpy's
    on Python ints), in numpy's type and equal to its result where every column's
    sum fits that type, as Python ints where numpy's wraps around."""
    if X.dtype.kind == "f":
        assert got.dtype == np.float64
        np.testing.assert_allclose(got, np.sum(X, axis=0, dtype=np.float64), rtol=1e-12)
        return
    exact = np.sum(X.astype(object), axis=0)
    assert got.shape == exact.shape and (got == exact).all(), (got, exact)
    numpys = np.sum(X, axis=0)
    info = np.iinfo(numpys.dtype)
    if all(info.min <= v <= info.max for v in exact.ravel()):
        assert got.dtype == numpys.dtype
        _same(got, numpys)
    else:
        assert got.dtype == object


@pytest.mark.parametrize("dtype", INTS)
def test_sum_axis0_is_exact_where_numpys_wraps_around(dtype: str, monkeypatch) -> None:
    info = np.iinfo(dtype)
    X = np.array([[info.max, 1, info.min], [info.max, 2, info.min], [0, 3, 1]], dtype=dtype)
    got = st.sum(X, axis=0)
    _same_sum(got, X)
    assert list(got) == [2 * int(info.max), 6, 2 * int(info.min) + 1]
    if dtype in ("int64", "uint64"):
        assert got.dtype == object and np.sum(X, axis=0)[0] != got[0]  # numpy's wrapped
    else:  # numpy's sum type holds it (int64/uint64): the same type and values
        assert got.dtype == np.sum(X, axis=0).dtype
    # The exact sums are the same whatever the chunking (here a row a chunk).
    monkeypatch.setattr(_columns, "CHUNK_BYTES", 1)
    again = st.sum(X, axis=0)
    assert again.dtype == got.dtype and list(again) == list(got)
    Y = rand(dtype, 3 * 200, 3).reshape(200, 3)
    _same_sum(st.sum(Y, axis=0), Y)


def test_sum_axis0_shapes_and_the_whole_input(tmp_path) -> None:
    X = np.arange(2 * 3 * 4, dtype=np.int16).reshape(2, 3, 4)
    _same(st.sum(X, axis=0), np.sum(X, axis=0))
    _same(st.sum(np.zeros((0, 3), np.int32), axis=0), np.sum(np.zeros((0, 3), np.int32), axis=0))
    _same(st.sum(np.zeros((4, 0), np.uint8), axis=0), np.sum(np.zeros((4, 0), np.uint8), axis=0))
    # A 1-D input's axis 0 is the whole array, a raw file one-dimensional: the
    # exact int (a compensated float64 for floats) of axis=None.
    v = np.arange(10, dtype=np.int64)
    assert st.sum(v, axis=0) == st.sum(v) == 45 and type(st.sum(v, axis=0)) is int
    f = np.arange(10, dtype=np.float16)
    assert st.sum(f, axis=0) == st.sum(f) == 45.0 and type(st.sum(f, axis=0)) is np.float64
    raw = tmp_path / "raw.bin"
    v.tofile(raw)
    assert st.sum(raw, axis=0, dtype="int64") == 45
    with pytest.raises(ValueError, match="skipna applies to axis=None"):
        st.sum(X.astype(np.float32), axis=0, skipna=True)
    with pytest.raises(ValueError, match="axis must be None or 0"):
        st.sum(X, axis=1)


def test_axis0_shapes_one_dimensional_input_and_errors(tmp_path) -> None:
    X = np.arange(2 * 3 * 4, dtype=np.int32).reshape(2, 3, 4)
    _same(st.median(X, axis=0), np.median(X, axis=0))
    _same(st.quantile(X, [0.2, 0.7], axis=0), np.quantile(X, [0.2, 0.7], axis=0))
    _same(st.max(X, axis=0), np.max(X, axis=0))
    # A 1-D input's axis 0 is the whole array: a scalar, as in numpy.
    v = np.array([5, 1, 4], dtype=np.int16)
    assert st.median(v, axis=0) == np.median(v) and np.ndim(st.median(v, axis=0)) == 0
    assert st.std(v) == pytest.approx(np.std(v)) and st.std(v, axis=0) == st.std(v)
    raw = tmp_path / "raw.bin"
    v.tofile(raw)
    assert st.min(raw, axis=0, dtype="int16") == 1 and st.std(raw, dtype="int16") == pytest.approx(
        np.std(v)
    )
    with pytest.raises(ValueError, match="axis must be None or 0"):
        st.median(X, axis=1)
    with pytest.raises(ValueError, match="skipna"):
        st.median(X.astype(np.float32), axis=0, skipna=True)
    empty = np.empty((0, 3), dtype=np.float32)
    with pytest.raises(ValueError, match="no minimum"):
        st.min(empty, axis=0)
    with pytest.raises(ValueError, match="no quantiles"):
        st.quantile(empty, 0.5, axis=0)
    with pytest.warns(RuntimeWarning):
        assert np.isnan(st.median(empty, axis=0)).all() and np.isnan(st.mean(empty, axis=0)).all()
    with pytest.raises(TypeError):
        st.mean(X, axis=0, dtype="int16")
    # Bad files: the same errors, naming the file, as without axis.
    empty = tmp_path / "empty.npy"
    empty.write_bytes(b"")
    for bad, err in (
        (tmp_path / "missing.npy", FileNotFoundError),
        (tmp_path, IsADirectoryError),
        (empty, mmapkit.FormatError),
    ):
        with pytest.raises(err, match=str(bad.name)):
            st.median(bad, axis=0)
        with pytest.raises(err, match=str(bad.name)):
            st.std(bad)


def test_axis0_equals_the_feature_store_statistics(tmp_path) -> None:
    X = np.random.default_rng(3).standard_normal((1000, 5)).astype(np.float32)
    with mmapkit.FeatureStore(tmp_path / "fs", "w", dim=5) as fs:
        fs.add(X, np.zeros(1000))
    with mmapkit.FeatureStore(tmp_path / "fs") as fs:
        _same(fs.median(), st.median(fs.features, axis=0))
        _same(
            fs.quantile([0.1, 0.9], memory=64),
            st.quantile(tmp_path / "fs" / "features.npy", [0.1, 0.9], axis=0),
        )
        _same(fs.std(), st.std(fs.features, axis=0))
        _same(fs.mean(), st.mean(fs.features, axis=0))

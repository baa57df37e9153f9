"""mmapkit.ArrayStore (growable .npy files) and mmapkit.sparse."""

import json
import os
import pickle
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mmapkit

ROOT = Path(__file__).resolve().parents[2]


def test_create_append_extend_and_views(tmp):
    p = tmp / "a.npy"
    s = mmapkit.ArrayStore.create(p, "f8", row_shape=(3,))
    assert (len(s), s.shape, s.dtype, s.path, s.mode) == (0, (0, 3), np.dtype("f8"), str(p), "r+")
    assert s.append([1, 2, 3]) == 1
    assert s.extend(np.arange(12.0).reshape(4, 3)) == 5
    assert s.shape == (5, 3)
    view = s[1:3]
    assert view.tolist() == [[0, 1, 2], [3, 4, 5]]
    assert np.shares_memory(view, s.numpy()) and np.shares_memory(np.asarray(s), view)
    view[0, 0] = 42  # the writer's views are writable and write the file
    assert np.load(p, mmap_mode="r")[1, 0] == 42
    with pytest.raises(ValueError, match=r"shape \(3,\)"):
        s.append([1, 2])
    with pytest.raises(ValueError, match="rows must have shape"):
        s.extend(np.zeros((2, 4)))
    s.close()
    assert s.closed
    with pytest.raises(ValueError, match="closed"):
        len(s)


def test_np_load_sees_a_consistent_array_while_capacity_is_reserved(tmp):
    p = tmp / "a.npy"
    s = mmapkit.ArrayStore.create(p, "<i4", row_shape=(2,), capacity=1000)
    s.extend([[1, 2], [3, 4]])
    assert os.path.getsize(p) > s.data_offset + 2 * 8  # capacity beyond the header's rows
    for load in (lambda: np.load(p, mmap_mode="r"), lambda: np.load(p)):
        a = load()
        assert a.shape == (2, 2) and a.dtype == np.dtype("<i4")
        assert a.tolist() == [[1, 2], [3, 4]]
    s.close()
    assert os.path.getsize(p) == s_size(p, 2, 8)
    assert np.load(p).tolist() == [[1, 2], [3, 4]]


def s_size(p, rows, row_bytes):
    off = mmapkit.ArrayStore.open(p).data_offset
    return off + rows * row_bytes


def test_growth_keeps_views_valid(tmp):
    s = mmapkit.ArrayStore.create(tmp / "g.npy", "u8", chunk_bytes=64)
    s.extend(np.arange(100, dtype="u8"))
    v = s[:100]
    addr = v.ctypes.data
    for k in range(50):  # many reallocations of the capacity
        s.extend(np.arange(100 + 1000 * k, 100 + 1000 * (k + 1), dtype="u8"))
    assert v.tolist() == list(range(100))
    assert s.numpy().ctypes.data == addr
    assert (s.numpy() == np.arange(len(s))).all()
    r = mmapkit.ArrayStore.open(tmp / "g.npy")
    rv = r[:10]
    s.extend(np.arange(len(s), len(s) + 100_000, dtype="u8"))
    assert r.refresh() == len(s)
    assert rv.tolist() == list(range(10)) and r.numpy().ctypes.data == rv.ctypes.data
    assert (r.numpy() == np.arange(len(s))).all()


def test_readers_are_read_only_and_pickle_by_path(tmp):
    p = tmp / "r.npy"
    w = mmapkit.ArrayStore.create(p, "f4", row_shape=(1000,))
    w.extend(np.ones((100, 1000), "f4"))
    r = mmapkit.ArrayStore.open(p, "r")
    assert not r[0].flags.writeable
    with pytest.raises(ValueError):
        r[0][0] = 2
    with pytest.raises(TypeError, match="read-only"):
        r.append(np.ones(1000, "f4"))
    blob = pickle.dumps(r)
    assert len(blob) < 300  # 400 KB of rows, a path and a mode
    r2 = pickle.loads(blob)
    assert (r2.mode, r2.shape) == ("r", (100, 1000))
    w.extend(np.ones((1, 1000), "f4"))
    assert len(r2) == 100 and r2.refresh() == 101


def test_reader_open_reads_the_header_once(tmp, monkeypatch):
    """A reader (a worker handed a pickled store) opens the file once: the
    separate header pre-read is only for writers and for files the core
    alone cannot size (structured dtypes), and errors stay the checked
    path's."""
    np.save(tmp / "plain.npy", np.arange(12, dtype="<i4").reshape(4, 3))
    rec = np.zeros(3, dtype=[("a", "<i8"), ("b", "<f4")])
    rec["a"] = [1, 2, 3]
    np.save(tmp / "rec.npy", rec)
    import mmapkit._npy as npy_mod  # where the stores read a header's dtype

    calls = []
    real = npy_mod.npy_header

    def counting(path):
        calls.append(path)
        return real(path)

    monkeypatch.setattr(npy_mod, "npy_header", counting)
    with mmapkit.ArrayStore.open(tmp / "plain.npy") as s:
        assert (
            s.dtype == np.dtype("<i4")
            and s.numpy().tolist() == np.arange(12).reshape(4, 3).tolist()
        )
    assert calls == []
    with mmapkit.ArrayStore.open(tmp / "rec.npy") as s:
        assert s.numpy()["a"].tolist() == [1, 2, 3]
    assert len(calls) == 1  # structured: the core cannot size it alone
    bad = tmp / "bad.npy"
    d = "{'descr': [('a', '<q9')], 'fortran_order': False, 'shape': (1,), }"
    bad.write_bytes(
        b"\x93NUMPY\x01\x00"
        + (118).to_bytes(2, "little")
        + d.encode().ljust(117)
        + b"\n"
        + bytes(8)
    )
    with pytest.raises(mmapkit.FormatError, match=r"bad\.npy"):
        mmapkit.ArrayStore.open(bad)


def test_one_writer_and_clear_errors(tmp):
    p = tmp / "w.npy"
    w = mmapkit.ArrayStore.create(p, "i2")
    with pytest.raises(BlockingIOError, match="open for writing") as e:
        mmapkit.ArrayStore.open(p, "r+")
    assert e.value.filename == str(p)
    w.close()
    mmapkit.ArrayStore.open(p, "r+").close()
    with pytest.raises(FileNotFoundError) as e:
        mmapkit.ArrayStore.open(tmp / "missing.npy")
    assert e.value.filename == str(tmp / "missing.npy")
    (tmp / "junk.npy").write_bytes(b"hello, not numpy")
    with pytest.raises(mmapkit.FormatError, match=r"junk\.npy.*bad magic"):
        mmapkit.ArrayStore.open(tmp / "junk.npy")
    with pytest.raises(ValueError, match="invalid mode"):
        mmapkit.ArrayStore.open(p, "w")
    with pytest.raises(TypeError, match="Python objects"):
        mmapkit.ArrayStore.create(tmp / "o.npy", object)
    np.save(tmp / "short.npy", np.zeros(10))
    with open(tmp / "short.npy", "r+b") as f:
        f.truncate(200)
    with pytest.raises(mmapkit.FormatError, match="header says 10 rows"):
        mmapkit.ArrayStore.open(tmp / "short.npy")


def test_np_save_files_grow_and_exotic_dtypes(tmp):
    p = tmp / "saved.npy"
    np.save(p, np.arange(6, dtype=">i8").reshape(3, 2))
    s = mmapkit.ArrayStore.open(p, "r+")
    assert s.dtype == np.dtype(">i8") and s.shape == (3, 2)
    s.append([6, 7])
    s.close()
    assert np.load(p).tolist() == np.arange(8).reshape(4, 2).tolist()

    rec = np.dtype([("id", "<u4"), ("xy", "<f8", (2,)), ("tag", "S3")])
    q = tmp / "rec.npy"
    s = mmapkit.ArrayStore.create(q, rec, row_shape=(2,))
    rows = np.zeros((3, 2), rec)
    rows["id"] = np.arange(6).reshape(3, 2)
    rows["tag"] = b"abc"
    s.extend(rows)
    s.close()
    back = np.load(q, mmap_mode="r")
    assert back.dtype == rec and back.shape == (3, 2)
    assert (back == rows).all()
    r = mmapkit.ArrayStore.open(q)
    assert r.dtype == rec and (r[:] == rows).all()

    # A subarray dtype is folded into the row shape, as np.save does.
    t = mmapkit.ArrayStore.create(tmp / "sub.npy", ("f4", (2,)), row_shape=(3,))
    assert t.row_shape == (2, 3)


# Appends batches of rows until it has `limit` (0: until killed); says "ready" once
# the store exists, and "extended N" after the first append (every append with
# "report") returned, N the rows appended so far.
WRITER = """
import sys, numpy as np, mmapkit
path, batch, limit, report = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
s = mmapkit.ArrayStore.create(path, "<i8", row_shape=(8,), chunk_bytes=4096)
print("ready", flush=True)
i = 0
while limit == 0 or i < limit:
    rows = np.repeat(np.arange(i, i + batch, dtype="<i8")[:, None] + 1, 8, axis=1)
    s.extend(rows)
    i += batch
    if report == "report" or i == batch:
        print(f"extended {i}", flush=True)
s.close()
"""


def check_whole_rows(a):
    """Row i holds i + 1 in every column: no torn, missing or zero rows."""
    a = np.asarray(a)
    assert (a == (np.arange(len(a)) + 1)[:, None]).all()


def test_reader_by_path_while_another_process_appends(tmp):
    p = tmp / "live.npy"
    w = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(p), "7", "300000", "quiet"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert w.stdout.readline().strip() == "ready"
        r = mmapkit.ArrayStore.open(p)
        seen = set()
        deadline = time.monotonic() + 30
        while w.poll() is None and time.monotonic() < deadline:
            a = np.load(p, mmap_mode="r")  # any moment: whole rows only
            check_whole_rows(a)
            n = r.refresh()
            check_whole_rows(r[:n])
            seen.add(len(a))
        assert w.wait(timeout=30) == 0
        assert len(seen) > 3, "the reader should have seen the array grow"
        check_whole_rows(np.load(p))
        assert len(np.load(p)) == 300000 + (-300000) % 7
    finally:
        w.kill()
        w.wait()


# Kill points (appends returned before the SIGKILL): seeded, so a failure replays.
KILL_AFTER = sorted(random.Random(39).sample(range(1, 40), 4))


@pytest.mark.parametrize("appends", KILL_AFTER)
def test_reopen_after_sigkill_mid_append_shows_completed_appends(tmp, appends):
    p = tmp / "killed.npy"
    batch = 5000
    w = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(p), str(batch), "0", "report"],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert w.stdout.readline().strip() == "ready"
    # Killed once `appends` appends returned, while it goes on appending (by
    # the writer's progress, not a time: on a loaded machine it may not have
    # appended at all yet).
    for k in range(1, appends + 1):
        assert w.stdout.readline().split() == ["extended", str(k * batch)]
    os.kill(w.pid, signal.SIGKILL)
    w.wait()
    a = np.load(p, mmap_mode="r")
    assert len(a) >= appends * batch and len(a) % batch == 0, len(a)
    check_whole_rows(a)
    s = mmapkit.ArrayStore.open(p, "r+")  # the dead writer's lock is gone
    n = len(s)
    s.extend(np.repeat(np.arange(n, n + 3, dtype="<i8")[:, None] + 1, 8, axis=1))
    s.close()
    check_whole_rows(np.load(p))


def test_close_with_live_views_keeps_them_readable(tmp):
    s = mmapkit.ArrayStore.create(tmp / "c.npy", "u1", capacity=1 << 20)
    s.extend(np.arange(200, dtype="u1"))
    v = s[100:]
    s.close()
    assert os.path.getsize(tmp / "c.npy") == np.load(tmp / "c.npy", mmap_mode="r").offset + 200
    assert v[-1] == 199


def test_close_finishes_when_the_last_view_is_released(tmp):
    """close() with a view alive defers unmapping, but lets the writer's
    lock go at once (issue 24): another writer can open the file while the
    view stays readable; releasing the view finishes the close."""
    p = tmp / "d.npy"
    s = mmapkit.ArrayStore.create(p, "u1")
    s.extend(np.arange(10, dtype="u1"))
    v = s.numpy()
    s.close()
    w = mmapkit.ArrayStore.open(p, "r+")
    assert w.extend(np.arange(3, dtype="u1")) == 13
    assert v.tolist() == list(range(10))
    del v
    w.close()
    assert len(mmapkit.ArrayStore.open(p)) == 13


def test_native_store_and_segment_share_one_buffer_base(tmp):
    from mmapkit._native import _NpyBuffer

    s = mmapkit.ArrayStore.create(tmp / "b.npy", "<i4", row_shape=(2,))
    s.extend(np.zeros((3, 2), dtype="<i4"))
    a = mmapkit.SharedArray.anonymous((2, 2), "<i4")
    for core, shape in ((s._core, [3, 2]), (a._core, [2, 2])):
        assert isinstance(core, _NpyBuffer)
        assert (core.descr, core.shape, core.nbytes) == ("'<i4'", shape, 4 * shape[0] * shape[1])
        core.close()
        assert core.closed
        with pytest.raises(ValueError, match="closed"):
            _ = core.nbytes


def test_reading_while_another_thread_appends_does_not_deadlock(tmp):
    """An append holds the store while the GIL is released; a thread that
    asks for len() meanwhile must wait without the GIL (it used to block
    holding it, and the append could never finish)."""
    code = f"""
import threading, numpy as np, mmapkit
s = mmapkit.ArrayStore.create({str(tmp / "t.npy")!r}, "u1")
big = np.ones(64 << 20, dtype="u1")
done = threading.Event()
def reader():
    while not done.is_set():
        len(s)
t = threading.Thread(target=reader)
t.start()
for _ in range(4):
    s.extend(big)
done.set()
t.join()
print(len(s))
"""
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert r.returncode == 0 and r.stdout.split() == [str(4 * (64 << 20))], r.stderr


class Ops:
    """A random sequence of store operations (hypothesis strategy)."""

    op = st.one_of(
        st.tuples(st.just("append"), st.integers(0, 100)),
        st.tuples(st.just("extend"), st.integers(0, 300)),
        st.tuples(st.just("reopen"), st.just(0)),
        st.tuples(st.just("trim"), st.just(0)),
    )


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    ops=st.lists(Ops.op, min_size=1, max_size=25),
    width=st.integers(1, 5),
    dtype=st.sampled_from(["<i2", ">f8", "u1", "<c8"]),
)
def test_append_sequences_match_numpy(tmp, ops, width, dtype):
    p = tmp / "h.npy"
    s = mmapkit.ArrayStore.create(p, dtype, row_shape=(width,), chunk_bytes=128)
    ref = np.zeros((0, width), dtype)
    for k, (op, arg) in enumerate(ops):
        if op == "append":
            row = np.full(width, arg, dtype)
            s.append(row)
            ref = np.concatenate([ref, row[None]])
        elif op == "extend":
            rows = (np.arange(arg * width).reshape(arg, width) + k).astype(dtype)
            s.extend(rows)
            ref = np.concatenate([ref, rows])
        elif op == "reopen":
            s.close()
            s = mmapkit.ArrayStore.open(p, "r+", chunk_bytes=128)
        else:
            s.trim()
        assert s.shape == ref.shape
        assert np.array_equal(s[:], ref)
        assert np.array_equal(np.load(p, mmap_mode="r"), ref)
    s.close()
    assert np.array_equal(np.load(p), ref)


def test_sparse_file_is_instant_and_unallocated(tmp):
    p = tmp / "huge.bin"
    t = time.perf_counter()
    mmapkit.sparse(p, 24 << 30)
    # Writing 24 GiB would take minutes; what matters is checked by
    # st_blocks below (a tight bound failed on a loaded machine: issue 27).
    assert time.perf_counter() - t < 30
    st_ = os.stat(p)
    assert st_.st_size == 24 << 30 and st_.st_blocks * 512 < 1 << 20
    with pytest.raises(ValueError, match="refusing to shrink"):
        mmapkit.sparse(p, 10)
    binary = ROOT / "target" / "release" / "mmapkit"
    if binary.exists():
        out = subprocess.run(
            [binary, "info", "--json", p], capture_output=True, text=True, check=True
        ).stdout
        (info,) = json.loads(out)
        assert info["size"] == 24 << 30 and info["allocated"] < 1 << 20
    # numpy can map it as an array of zeros without reading anything
    a = np.memmap(p, dtype="i2", mode="r")
    assert a.shape == (12 << 30,) and a[123_456_789] == 0


def test_forked_child_cannot_write_or_trim_an_inherited_writer(tmp):
    p = tmp / "f.npy"
    s = mmapkit.ArrayStore.create(p, "i8", capacity=10_000)
    s.extend(np.arange(10, dtype="i8"))
    size = os.path.getsize(p)
    pid = os.fork()
    if pid == 0:
        code = 0
        try:
            s.append(1)
            code = 3
        except ValueError:
            pass
        s.close()  # must not trim the parent's capacity
        os._exit(code)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert os.path.getsize(p) == size
    s.extend(np.arange(10, 20, dtype="i8"))
    s.close()
    assert np.load(p).tolist() == list(range(20))


@pytest.mark.parametrize("dtype", ["<U5", "M8[ms]", "?", ">c16"])
def test_every_plain_dtype_round_trips(tmp, dtype):
    p = tmp / "d.npy"
    ref = np.zeros((4, 2), dtype)
    ref[1, 1] = np.array([1]).astype(dtype)[0]
    s = mmapkit.ArrayStore.create(p, dtype, row_shape=(2,))
    s.extend(ref[:3])
    s.append(ref[3])
    s.close()
    assert np.load(p).dtype == np.dtype(dtype) and (np.load(p) == ref).all()
    r = mmapkit.ArrayStore.open(p)
    assert r.dtype == np.dtype(dtype) and (r[:] == ref).all()


def _snapshot(p):
    st_ = os.stat(p)
    return Path(p).read_bytes(), st_.st_mtime_ns, st_.st_size


def _bad_npy_files(tmp):
    """(name, path) of .npy files ArrayStore cannot hold; each must be refused untouched."""
    out = []
    p = tmp / "objects.npy"
    np.save(p, np.array([1, "a", None, "x" * 1000], object), allow_pickle=True)
    out.append(("object dtype", p))
    p = tmp / "structured_objects.npy"
    np.save(p, np.array([(1, None)], dtype=[("a", "i4"), ("b", "O")]), allow_pickle=True)
    out.append(("structured object field", p))
    p = tmp / "fortran.npy"
    np.save(p, np.asfortranarray(np.arange(6, dtype="i4").reshape(2, 3)))
    out.append(("Fortran order", p))
    p = tmp / "truncated.npy"
    np.save(p, np.arange(100, dtype="f8"))
    with open(p, "r+b") as f:
        f.truncate(os.path.getsize(p) - 8)
    out.append(("truncated data", p))
    p = tmp / "malformed.npy"
    np.save(p, np.arange(4, dtype="i2"))
    b = bytearray(p.read_bytes())
    b[b.index(b"'shape'") + 10] = ord("x")
    p.write_bytes(bytes(b))
    out.append(("malformed header", p))
    p = tmp / "zero_size.npy"
    np.save(p, np.zeros(3, dtype="V0"))
    out.append(("zero-size items", p))
    return out


def test_open_refuses_unsupported_npy_files_without_touching_them(tmp):
    """Issue 10 defect 4: opening an object .npy in r+ shrank it to 160 bytes."""
    for what, p in _bad_npy_files(tmp):
        before = _snapshot(p)
        for mode in ("r", "r+"):
            with pytest.raises(mmapkit.FormatError) as e:
                mmapkit.ArrayStore.open(p, mode).close()
            assert p.name in str(e.value), (what, mode, e.value)
            assert _snapshot(p) == before, (what, mode)
        if what == "Fortran order":  # statistics do not care about the order
            assert mmapkit.stats.max(p) == 5
        else:
            with pytest.raises(ValueError, match=p.name):
                mmapkit.stats.max(p)
        assert _snapshot(p) == before, what
        if what != "zero-size items":  # a fixed-shape V0 array is fine to attach
            with pytest.raises(mmapkit.FormatError, match=p.name):
                mmapkit.SharedArray.attach(p, unlink_on_close=False)
        assert _snapshot(p) == before, what
    assert list(tmp.glob(".*tmp*")) == []


def test_open_and_close_without_appending_changes_nothing(tmp):
    """Opening for writing and closing must leave every byte (and mtime) as it was,
    including bytes past the header's row count and a valid header in another layout."""
    s = mmapkit.ArrayStore.create(tmp / "s.npy", "<i4", row_shape=(2,))
    s.extend(np.arange(10, dtype="<i4").reshape(5, 2))
    s.close()
    p = tmp / "s.npy"
    b = bytearray(p.read_bytes())
    b += b"trailing bytes numpy ignores"
    i = b.index(b"'shape': (") + 10
    j = b.index(b",", i)
    assert b[i:j].strip() == b"5"
    b[j - 1] = ord("3")  # fewer rows than the file holds
    p.write_bytes(bytes(b))
    q = tmp / "wide_header.npy"  # a valid header, not mmapkit's fixed-width layout
    raw = np.lib.format.header_data_from_array_1_0(np.zeros((2, 2), "<i4"))
    with open(q, "wb") as f:
        np.lib.format.write_array_header_1_0(f, raw)
        f.write(np.arange(4, dtype="<i4").tobytes())
    b = bytearray(q.read_bytes())
    head = b[: b.index(b"\n") + 1]
    head = head[:-1] + b" " * 256 + b"\n"  # 256 more bytes of padding
    head[8:10] = (len(head) - 10).to_bytes(2, "little")
    q.write_bytes(bytes(head) + b[b.index(b"\n") + 1 :])
    for path in (p, q):
        before = _snapshot(path)
        time.sleep(0.01)
        mmapkit.ArrayStore.open(path, "r+").close()
        assert _snapshot(path) == before, path
    w = mmapkit.ArrayStore.open(q, "r+")
    w.append([9, 9])
    w.close()
    assert np.load(q).tolist() == [[0, 1], [2, 3], [9, 9]]


def test_sparse_sizes_beyond_off_t_raise_like_os_truncate(tmp):
    """Issue 10 defect 15: sparse(p, 2**63) raised OSError with errno 0."""
    p = tmp / "f"
    p.write_bytes(b"")
    for size, exc in ((2**63, OverflowError), (-1, OSError)):
        with pytest.raises(exc) as want:
            os.truncate(p, size)
        with pytest.raises(exc) as got:
            mmapkit.sparse(p, size)
        if exc is OSError:
            assert got.value.errno == want.value.errno != 0
    assert p.stat().st_size == 0


def test_python_buffers_arrive_whole_through_piecewise_copies(tmp):
    # The binding never holds a Rust slice over a Python buffer (another
    # thread may write a bytearray or numpy array meanwhile): appends copy
    # straight into the new rows, gathers and atomic writes go through
    # 1 MiB pieces. Inputs of several pieces, at odd offsets, arrive whole.
    rng = np.random.default_rng(7)
    rows = rng.integers(0, 256, size=(3001, 1000), dtype=np.uint8)  # ~3 MiB
    raw = bytearray(b"xyz" + rows.tobytes())
    s = mmapkit.ArrayStore.create(tmp / "big.npy", "u1", row_shape=(1000,))
    assert s._core.append(memoryview(raw)[3:]) == 3001  # 3 bytes in: unaligned
    assert (s.numpy() == rows).all()
    with pytest.raises(ValueError, match="whole number"):
        s._core.append(memoryview(raw)[3 : 1003 + 1])
    assert len(s) == 3001

    idx = rng.permutation(3001).astype(np.uint64)[:2500]
    out = np.zeros((2500, 1000), np.uint8)
    s._core.gather(idx.data, out.reshape(-1).data)
    assert (out == rows[idx]).all()
    # Every check before any copy: a bad last index leaves `out` untouched
    # although the pieces before it would have been fine.
    bad = idx.copy()
    bad[-1] = 3001
    out2 = np.zeros_like(out)
    with pytest.raises(ValueError, match="out of range"):
        s._core.gather(bad.data, out2.reshape(-1).data)
    assert not out2.any()
    with pytest.raises(ValueError, match="not 2500 rows"):
        s._core.gather(idx.data, out2.reshape(-1)[:-1].data)
    s.close()

    p = tmp / "atomic.bin"
    mmapkit._native.write_file_atomic(p, memoryview(raw)[1:])
    assert p.read_bytes() == bytes(raw[1:])

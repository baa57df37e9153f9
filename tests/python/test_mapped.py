"""mmapkit.open / MappedFile and the mmapkit.mmap extras."""

import mmap as std_mmap
import os
import pickle
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

import mmapkit

PAGE = mmapkit.PAGESIZE


def write(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


# --- empty files and growth ---------------------------------------------------


def test_empty_file_maps_then_grows(tmp):
    p = write(tmp / "empty.bin", b"")
    with mmapkit.open(p, "r+") as m:
        assert len(m) == 0 and m[:] == b""
        assert m.count(b"x") == 0 and m.find(b"x") == -1
        assert m.grow(10) == 10
        m[:] = b"0123456789"
        m.resize(3 * PAGE + 5)
        m[-5:] = b"tail!"
    data = p.read_bytes()
    assert len(data) == 3 * PAGE + 5
    assert data[:10] == b"0123456789" and data[-5:] == b"tail!"


def test_create_new_file_with_size(tmp):
    p = tmp / "new.bin"
    with mmapkit.open(p, "w+", size=12345) as m:
        assert len(m) == 12345 and m[0] == 0
    assert p.stat().st_size == 12345
    # w+ truncates an existing file
    with mmapkit.open(p, "w+") as m:
        assert len(m) == 0


def test_numpy_view_taken_before_grow_stays_valid(tmp):
    p = write(tmp / "a.bin", np.arange(1000, dtype=np.int64).tobytes())
    m = mmapkit.open(p, "r+")
    view = m.numpy(np.int64)
    mv = memoryview(m)
    base_before = view.__array_interface__["data"][0]
    m.resize(64 << 20)  # grow a lot while the views are exported
    m.grow(PAGE)
    np.testing.assert_array_equal(view, np.arange(1000))
    assert mv[8:16].tobytes() == (1).to_bytes(8, "little")
    after = m.numpy(np.int64)
    assert after.__array_interface__["data"][0] == base_before, "the base address moved"
    np.testing.assert_array_equal(after[:1000], np.arange(1000))
    assert not after[1000:].any()
    view[0] = 42  # writable view of a writable map, reaching the file
    assert m[:8] == (42).to_bytes(8, "little")
    # shrinking would invalidate the views: refused while they exist
    with pytest.raises(BufferError):
        m.resize(8)
    with pytest.raises(BufferError):
        m.close()
    del view, mv, after
    m.resize(8)
    m.close()
    assert p.read_bytes() == (42).to_bytes(8, "little")


def test_numpy_views_shapes_and_readonly(tmp):
    arr = np.arange(24, dtype="<f4")
    p = write(tmp / "f.bin", b"HDR!" + arr.tobytes())
    with mmapkit.open(p) as m:
        v = m.numpy("<f4", shape=(4, 6), offset=4)
        np.testing.assert_array_equal(v, arr.reshape(4, 6))
        assert not v.flags.writeable
        with pytest.raises(ValueError):
            v[0, 0] = 1
        with pytest.raises(ValueError):
            m.numpy("<f4", shape=(100,), offset=4)
        del v


def test_copy_on_write_never_reaches_the_file(tmp):
    p = write(tmp / "c.bin", b"a" * 10000)
    with mmapkit.open(p, "c") as m:
        m[:4] = b"XXXX"
        m.numpy()[100] = ord("Y")
        m.flush()
        assert m[:4] == b"XXXX" and m[100] == ord("Y")
        assert p.read_bytes() == b"a" * 10000
        with pytest.raises(TypeError):
            m.resize(5)
    assert p.read_bytes() == b"a" * 10000


def test_read_mode_refuses_writes(tmp):
    p = write(tmp / "r.bin", b"abc")
    with mmapkit.open(p) as m:
        assert m.readonly
        for op in (
            lambda: m.__setitem__(0, 1),
            lambda: m.write(b"x"),
            lambda: m.write_byte(1),
            lambda: m.grow(1),
        ):
            with pytest.raises(TypeError):
                op()
    assert p.read_bytes() == b"abc"


def test_any_offset(tmp):
    data = bytes(range(256)) * 100
    p = write(tmp / "o.bin", data)
    for off, length in [(1, 10), (4095, 3), (5000, None), (len(data), None), (12345, 0)]:
        with mmapkit.open(p, offset=off, length=length) as m:
            assert m[:] == data[off : off + length if length is not None else None]
            assert m.offset == off
    # the stdlib-compatible class accepts unaligned offsets too
    with (
        open(p, "rb") as f,
        mmapkit.mmap(f.fileno(), 100, access=mmapkit.ACCESS_READ, offset=77) as m,
    ):
        assert m[:] == data[77:177]


def test_refresh_follows_appends(tmp):
    p = write(tmp / "log.txt", b"one\n")
    with mmapkit.open(p) as m:
        v = m.numpy()
        with open(p, "ab") as f:
            f.write(b"two\n")
        assert m.refresh() == 8  # grows in place: the view stays valid
        assert m[:] == b"one\ntwo\n" and v.tobytes() == b"one\n"
        del v


def test_anonymous_shared_memory_seen_after_fork():
    m = mmapkit.mmap(-1, PAGE)
    pid = os.fork()
    if pid == 0:  # child
        try:
            m[:11] = b"hello child"
        finally:
            os._exit(0)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    assert m[:11] == b"hello child"
    m.resize(10 * PAGE)  # anonymous maps grow too
    assert m[:11] == b"hello child" and len(m) == 10 * PAGE


def test_private_anonymous_stays_private():
    m = mmapkit.mmap(-1, PAGE, flags=mmapkit.MAP_PRIVATE)
    pid = os.fork()
    if pid == 0:
        m[:3] = b"kid"
        os._exit(0)
    os.waitpid(pid, 0)
    assert m[:3] == b"\0\0\0"


# --- truncation by another process ---------------------------------------------


def test_truncated_by_another_process_raises_and_survives(tmp):
    data = b"x" * (64 * PAGE)
    p = write(tmp / "t.bin", data)
    m = mmapkit.open(p)
    view = m.numpy()
    subprocess.run(["truncate", "-s", str(PAGE), str(p)], check=True)
    with pytest.raises(mmapkit.FileTruncatedError) as ei:
        m.count(b"x")
    assert isinstance(ei.value, OSError)
    assert str(p) in str(ei.value) and ei.value.filename == str(p)
    # raw readers see zeros where the pages were lost, and do not crash
    assert view[:PAGE].tobytes() == data[:PAGE]
    assert not view[10 * PAGE :].any()
    with pytest.raises(mmapkit.FileTruncatedError):
        m[:10]  # sticky until refresh
    del view
    assert m.refresh() == PAGE
    assert m[:] == data[:PAGE]
    m.close()


def test_truncated_mid_operation(tmp):
    """Another process truncates the file while we are scanning it."""
    size = 256 << 20
    p = tmp / "big.bin"
    with open(p, "wb") as f:
        f.truncate(size)
    with mmapkit.open(p, "r+") as m:
        m.numpy()[::PAGE] = 1  # real pages, not holes
        del_view = None  # noqa: F841
    m = mmapkit.open(p)
    child = subprocess.Popen(
        [sys.executable, "-c", f"import os, time; time.sleep(0.3); os.truncate({str(p)!r}, 4096)"]
    )
    deadline = time.monotonic() + 30
    with pytest.raises(mmapkit.FileTruncatedError):
        while time.monotonic() < deadline:
            assert m.count(b"\x01") in (size // PAGE, 1)
    child.wait()
    # the process is alive and the map usable again after refresh
    assert m.refresh() == 4096
    assert m.count(b"\x01") == 1


def test_stdlib_compatible_class_also_survives_truncation(tmp):
    p = write(tmp / "s.bin", b"y" * (8 * PAGE))
    with open(p, "rb") as f:
        m = mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ)
    os.truncate(p, 0)
    with pytest.raises(mmapkit.FileTruncatedError):
        m.read()
    with pytest.raises(mmapkit.FileTruncatedError):
        m.find(b"y")


# --- disk full and bad input ---------------------------------------------------


def test_disk_full_is_a_clear_error(small_tmpfs):
    p = small_tmpfs / "grow.bin"
    with pytest.raises(mmapkit.DiskFullError) as ei:
        mmapkit.open(p, "w+", size=8 << 20)
    assert ei.value.errno == 28 and str(p) in str(ei.value)
    with mmapkit.open(p, "w+", size=4096) as m:
        m[:4] = b"safe"
        with pytest.raises(mmapkit.DiskFullError):
            m.grow(8 << 20)
        # still usable, nothing lost
        assert len(m) == 4096 and m[:4] == b"safe"
        m.grow(100_000)
        m[-4:] = b"end!"
    data = p.read_bytes()
    assert data[:4] == b"safe" and data[-4:] == b"end!" and len(data) == 104_096


def test_missing_file_and_directory(tmp):
    with pytest.raises(FileNotFoundError) as ei:
        mmapkit.open(tmp / "nope.bin")
    assert ei.value.filename == str(tmp / "nope.bin")
    with pytest.raises(IsADirectoryError):
        mmapkit.open(tmp)
    with pytest.raises(ValueError, match="mode"):
        mmapkit.open(tmp / "x", "rw")
    with pytest.raises(ValueError, match="past the end"):
        mmapkit.open(write(tmp / "short", b"abc"), offset=10)
    with pytest.raises(ValueError, match="only 3 bytes"):
        mmapkit.open(tmp / "short", length=10)


def test_permission_denied(tmp):
    p = write(tmp / "secret.bin", b"top secret")
    os.chmod(p, 0o600)
    os.chmod(tmp, 0o755)
    code = textwrap.dedent(
        f"""
        import os, sys
        import mmapkit  # import first: the interpreter may live under /root
        if os.getuid() == 0:
            os.setgid(65534); os.setuid(65534)
        try:
            mmapkit.open({str(p)!r})
        except PermissionError as e:
            assert e.filename == {str(p)!r}, e
            print("PermissionError", e)
            sys.exit(0)
        sys.exit(1)
        """
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert "Permission denied" in r.stdout


def test_closed_map_errors(tmp):
    m = mmapkit.open(write(tmp / "c", b"abc"))
    m.close()
    m.close()
    assert m.closed
    for op in (lambda: len(m), lambda: m[0], lambda: m.count(b"a"), m.numpy):
        with pytest.raises(ValueError, match="closed"):
            op()


# --- pickling by path ------------------------------------------------------------


def _sum_in_worker(m) -> int:
    return int(m.numpy(np.uint8).sum())


def test_pickles_by_path_not_by_data(tmp):
    data = bytes(range(256)) * 4096  # 1 MiB
    p = write(tmp / "p.bin", data)
    with mmapkit.open(p, offset=256, length=1024) as m:
        blob = pickle.dumps(m)
        assert len(blob) < 500, "the data itself was pickled"
        m2 = pickle.loads(blob)
        assert m2[:] == data[256:1280] and m2.mode == "r"
        m2.close()
    with mmapkit.open(p, "r+") as m:
        import multiprocessing as mp

        with mp.get_context("spawn").Pool(1) as pool:
            assert pool.apply(_sum_in_worker, (m,)) == sum(data)
    with open(p, "rb") as f, mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ) as m:
        m3 = pickle.loads(pickle.dumps(m))
        assert isinstance(m3, mmapkit.mmap) and m3[:] == data
        m3.close()
    with pytest.raises(TypeError, match="anonymous"):
        pickle.dumps(mmapkit.mmap(-1, 10))


def test_stdlib_class_finds_its_file_after_the_callers_fd_is_gone(tmp):
    # mmapkit.mmap looks the file's path up only when an error, pickle or
    # `path` needs it (it costs more than mapping a small file), through
    # its own descriptor: the caller's may be closed by then, and a rename
    # in between is followed (the stdlib has no path to compare with).
    data = b"z" * (4 * PAGE)
    p = write(tmp / "before.bin", data)
    with open(p, "rb") as f:
        m = mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ)
        fd = f.fileno()
        null = os.open(os.devnull, os.O_RDONLY)
    os.rename(p, tmp / "after.bin")
    os.dup2(null, fd)  # the caller's number now names another file
    os.close(null)
    try:
        assert m.path == tmp / "after.bin"
        m2 = pickle.loads(pickle.dumps(m))
        assert m2[:] == data
        m2.close()
        os.truncate(tmp / "after.bin", 0)
        with pytest.raises(mmapkit.FileTruncatedError, match=r"after\.bin"):
            m.read()
    finally:
        os.close(fd)
    m.close()
    # A path never asked for while open is unknown once closed.
    with open(tmp / "after.bin", "wb") as f:
        f.write(data)
    with open(tmp / "after.bin", "rb") as f:
        m = mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ)
    m.close()
    assert m.path is None and m.mode == "r"


def test_stdlib_class_without_a_path_is_named_by_its_fd(tmp):
    # A file deleted before its path was looked up has none: not
    # picklable, and errors name the caller's descriptor.
    p = write(tmp / "gone.bin", b"q" * (2 * PAGE))
    with open(p, "r+b") as f:
        m = mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ)
        os.unlink(p)
        assert m.path is None
        with pytest.raises(TypeError, match="anonymous"):
            pickle.dumps(m)
        os.ftruncate(f.fileno(), 0)
        with pytest.raises(mmapkit.FileTruncatedError, match=f"<fd {f.fileno()}>"):
            m.read()
    m.close()


def test_read_only_stdlib_class_reserves_no_room_to_grow(tmp):
    # Nothing can grow a read-only mmap, so it is one plain mmap(2), not a
    # reserve + MAP_FIXED pair (half the system calls of a small map).
    p = write(tmp / "r.bin", b"r" * (3 * PAGE + 5))
    with open(p, "rb") as f:
        with mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ) as m:
            assert m.reserved == 4 * PAGE
            assert m[:] == p.read_bytes() and m.refresh() == 3 * PAGE + 5
        with mmapkit.mmap(f.fileno(), PAGE, access=mmapkit.ACCESS_READ, offset=PAGE) as m:
            assert m.reserved == PAGE and m[:] == b"r" * PAGE
    with open(p, "r+b") as f, mmapkit.mmap(f.fileno(), 0) as m:
        assert m.reserved >= 1 << 30  # writable maps keep room to grow in place
        m.resize(16 * PAGE)
        assert len(m) == 16 * PAGE


# --- advice, populate, flush, residency ------------------------------------------


def _pinned_as_faulted(m):
    """Pins ``m``'s pages as they are faulted in from now on
    (``mlock2(MLOCK_ONFAULT)``: nothing is read by this call), so what
    ``populate`` brings in stays resident until the map is closed: memory
    pressure from other processes cannot evict pages between ``populate``
    and ``residency`` (issue 27: a loaded machine)."""
    import ctypes

    view = m.numpy("u1")
    start = view.ctypes.data // PAGE * PAGE
    length = view.ctypes.data + view.size - start
    del view
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mlock2(ctypes.c_void_p(start), ctypes.c_size_t(length), 1) != 0:
        pytest.skip(f"mlock2(MLOCK_ONFAULT): {os.strerror(ctypes.get_errno())}")


def test_advice_populate_flush_residency(tmp):
    p = write(tmp / "adv.bin", os.urandom(64 * PAGE))
    with mmapkit.open(p, "r+", offset=3) as m:
        for adv in ("sequential", "random", "willneed", "normal", "hugepage", mmapkit.MADV_NORMAL):
            m.advise(adv)
        m.advise("willneed", 5, 100)  # unaligned ranges are fine
        with pytest.raises(ValueError, match="unknown advice"):
            m.advise("fast")
        _pinned_as_faulted(m)
        m.populate()
        resident, mapped = m.residency()
        assert mapped == len(m) and resident == mapped
        m[10:20] = b"0123456789"
        m.flush(7, 50)  # any alignment
        m.flush(sync=False)
        m.madvise(mmapkit.MADV_NORMAL)
    assert p.read_bytes()[13:23] == b"0123456789"


def test_drop_cache_and_residency(tmp):
    p = write(tmp / "cache.bin", os.urandom(256 * PAGE))
    mmapkit.drop_cache(p)
    with mmapkit.open(p) as m:
        resident, _ = m.residency()
        assert resident <= PAGE  # evicted (tmp may be tmpfs: then it stays resident)
        _pinned_as_faulted(m)
        m.populate()
        assert m.residency()[0] == len(m)


# --- stdlib mmap parity on the extras ---------------------------------------------


def test_count_and_find_all(tmp):
    p = write(tmp / "w.txt", b"the cat and the hat; the end")
    with mmapkit.open(p) as m:
        assert m.count(b"the") == 3
        offs = m.find_all(b"the")
        assert offs.dtype == np.int64 and offs.tolist() == [0, 12, 21]
        assert m.find_all(b"the", limit=2).tolist() == [0, 12]
        assert m.count(b"zzz") == 0 and m.find_all(b"zzz").size == 0
        with pytest.raises(ValueError):
            m.find_all(b"")
        assert m.find(b"the", 1) == 12 and m.rfind(b"the") == 21


def test_regex_and_memoryview_work_on_the_buffer(tmp):
    import re

    p = write(tmp / "re.txt", b"alpha beta gamma delta")
    with mmapkit.open(p) as m:
        assert [w.group() for w in re.finditer(rb"\b[a-z]{5}\b", m)] == [
            b"alpha",
            b"gamma",
            b"delta",
        ]
        assert bytes(memoryview(m)[6:10]) == b"beta"
        assert np.frombuffer(m, dtype=np.uint8)[0] == ord("a")


def test_same_results_as_stdlib_mmap(tmp):
    data = os.urandom(3 * PAGE + 123)
    p = write(tmp / "same.bin", data)
    with open(p, "r+b") as f, std_mmap.mmap(f.fileno(), 0) as a, mmapkit.mmap(f.fileno(), 0) as b:
        for sub in (data[100:103], data[-2:], b"\x00\x00", data[PAGE - 1 : PAGE + 1]):
            for start, end in ((None, None), (5, None), (-50, None), (10, -10), (PAGE, 2 * PAGE)):
                args = (
                    [x for x in (start, end) if x is not None]
                    if end is None or start is not None
                    else []
                )
                assert a.find(sub, *args) == b.find(sub, *args)
                assert a.rfind(sub, *args) == b.rfind(sub, *args)
        a.seek(17)
        b.seek(17)
        assert a.read(100) == b.read(100) and a.readline() == b.readline() and a.tell() == b.tell()
        assert repr(a) == repr(b)


def test_long_searches_match_the_stdlib_across_the_gil_cut(tmp):
    # A search over more than 64 KiB looks at its first 64 KiB (from the end for
    # rfind) holding the GIL, then at the rest with the GIL released, the two
    # overlapping by the needle's length less one: needles straddling the cut, on
    # either side of it, and in both parts at once, against mmap.mmap.
    k = 64 * 1024
    base = np.random.default_rng(3).integers(0, 250, 3 * k + 123, dtype=np.uint8).tobytes()
    needle = b"\xfb\xfc\xfd\xfe"  # bytes >= 250 are found only where put
    n = len(base)
    ranges = [(0, n), (7, n), (k, n - 9), (11, n - 5)]
    for a, e in ranges:
        spots = [a + k - d for d in range(5)] + [e - k - 4 + d for d in range(5)]
        for placed in [[x] for x in spots] + [[a + 10, a + k + 100], [e - k - 200, e - 20]]:
            data = bytearray(base)
            for x in placed:
                data[x : x + 4] = needle
            p = write(tmp / "cut.bin", bytes(data))
            with (
                open(p, "rb") as f,
                std_mmap.mmap(f.fileno(), 0, access=std_mmap.ACCESS_READ) as want,
                mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ) as got,
            ):
                for sub in (needle, needle[:1], needle[1:3]):
                    where = (sub, a, e, placed)
                    assert got.find(sub, a, e) == want.find(sub, a, e), where
                    assert got.rfind(sub, a, e) == want.rfind(sub, a, e), where


def test_writes_to_read_only_maps_raise_what_the_stdlib_raises(tmp):
    """Issue 10 defect 15: same exception type and message as mmap.mmap."""
    import mmap as std

    p = write(tmp / "ro.bin", b"hello world")
    misuse = {
        "setitem": lambda m: m.__setitem__(0, 65),
        "setslice": lambda m: m.__setitem__(slice(0, 2), b"AB"),
        "write": lambda m: m.write(b"A"),
        "write_byte": lambda m: m.write_byte(65),
        "move": lambda m: m.move(0, 1, 1),
        "resize": lambda m: m.resize(20),
        "memoryview": lambda m: memoryview(m).__setitem__(0, 65),
    }

    def outcome(m, f):
        try:
            f(m)
        except Exception as e:  # noqa: BLE001
            return type(e), str(e)
        return None

    with open(p, "rb") as f:
        want = {
            k: outcome(std.mmap(f.fileno(), 0, access=std.ACCESS_READ), f_)
            for k, f_ in misuse.items()
        }
        kit = {
            k: outcome(mmapkit.mmap(f.fileno(), 0, access=std.ACCESS_READ), f_)
            for k, f_ in misuse.items()
        }
    assert all(w is not None and w[0] is TypeError for w in want.values()), want
    assert kit == want
    with mmapkit.open(p, "r") as m:
        native = {k: outcome(m, f_) for k, f_ in misuse.items()}
    assert native == want
    assert p.read_bytes() == b"hello world"

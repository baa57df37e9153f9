"""A file another process truncates under mmapkit is reported, never
turned into a success over bytes that are in no file (issue 36, defects
2-7 and 9): FeatureStore commits, flushes of writes through numpy views,
the training iterators (FeatureStore.batches, the torch DataLoader and the
device loader), copy-on-write pickling, FIFOs, growth past the
reservation, and reversed()."""

from __future__ import annotations

import copy
import ctypes
import mmap as stdlib_mmap
import os
import pickle
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import mmapkit
from mmapkit import FeatureStore, FileTruncatedError


def truncate_elsewhere(path, size=0):
    """``os.truncate`` run by another process."""
    subprocess.run(
        [sys.executable, "-c", f"import os; os.truncate({str(path)!r}, {int(size)})"], check=True
    )


def ids_writer(path, n, d=8):
    """A writer of ``n`` rows: row i's features all i, its label i (a zero
    row is visible)."""
    fs = FeatureStore(path, "w", dim=d, dtype=np.float32, label_dtype=np.int64)
    ids = np.arange(n)
    fs.add(np.repeat(ids[:, None].astype(np.float32), d, axis=1), ids)
    return fs


def ids_store(path, n, d=8):
    """:func:`ids_writer`'s store, closed: its path."""
    ids_writer(path, n, d).close()
    return path


def assert_rows_right(X, y):
    X, y = np.asarray(X), np.asarray(y)
    assert (y[:, None].astype(np.float32) == X).all(), "a batch of wrong (zero) rows was yielded"


# ----- defect 2: FeatureStore.add over a truncated file ---------------------


def test_add_after_another_process_truncated_the_features_never_commits(tmp):
    fs = ids_writer(tmp / "fs", 20_000)
    truncate_elsewhere(tmp / "fs" / "features.npy", 1 << 16)
    more = np.ones((1000, 8), np.float32)
    for _ in range(2):
        with pytest.raises(FileTruncatedError) as e:
            fs.add(more, np.ones(1000))
        assert "features.npy" in str(e.value.filename)
    with pytest.raises(FileTruncatedError):  # its flush cannot make the rows durable
        fs.close()
    # Nothing claims the lost rows: the reader refuses the short file.
    with pytest.raises(mmapkit.FormatError, match=r"the file has only 65536 bytes"):
        FeatureStore(tmp / "fs", "r")


def test_add_after_the_labels_were_truncated_never_commits(tmp):
    fs = ids_writer(tmp / "fs", 5000)
    truncate_elsewhere(tmp / "fs" / "labels.npy", 4096)
    with pytest.raises(FileTruncatedError):
        fs.add(np.ones((10, 8), np.float32), np.ones(10))
    with pytest.raises(FileTruncatedError):
        fs.close()
    with pytest.raises(mmapkit.FormatError, match=r"labels\.npy"):
        FeatureStore(tmp / "fs", "r")  # nor does the reader serve the lost labels


# ----- defect 3: writes through a numpy view into truncated pages -----------


def test_flush_after_a_write_into_truncated_pages_raises(tmp):
    p = tmp / "w.bin"
    p.write_bytes(np.arange(1 << 15, dtype=np.int64).tobytes())
    m = mmapkit.open(p, "r+")
    v = m.numpy(np.int64)
    truncate_elsewhere(p, p.stat().st_size // 2)
    v[-1] = 12345
    assert v[-1] == 12345  # the raw view keeps working (zero pages, no death)
    with pytest.raises(FileTruncatedError):
        m.flush()
    with pytest.raises(FileTruncatedError):
        m.flush(sync=False)
    with pytest.raises(FileTruncatedError):
        m[0:1]
    with pytest.raises(FileTruncatedError):
        m.flush()  # still, after the read reported it
    del v


def test_flush_of_bytes_written_before_the_truncation_raises(tmp):
    # No page faulted: the dirty pages were simply dropped with the file's tail.
    p = tmp / "w.bin"
    p.write_bytes(bytes(1 << 16))
    m = mmapkit.open(p, "r+")
    m[-8:] = b"LOSTDATA"
    truncate_elsewhere(p, 4096)
    with pytest.raises(FileTruncatedError):
        m.flush()
    m.refresh()
    m.flush()  # re-synced with the file: nothing is claimed any more
    assert len(m) == 4096


# ----- defect 4: training iterators -----------------------------------------


def epoch_truncated_after(batches, path, k):
    """Consumes ``batches``, truncating ``path`` elsewhere after ``k`` of
    them; returns how many were yielded before FileTruncatedError."""
    n = 0
    with pytest.raises(FileTruncatedError):
        for X, y in batches:
            assert_rows_right(X, y)
            n += 1
            if n == k:
                truncate_elsewhere(path, 1 << 16)
    return n


@pytest.mark.parametrize("prefetch", [0, 2])
def test_sequential_batches_raise_instead_of_yielding_zeros(tmp, prefetch):
    ids_store(tmp / "fs", 40_000)
    r = FeatureStore(tmp / "fs", "r")
    it = r.batches(256, prefetch=prefetch)
    assert epoch_truncated_after(it, tmp / "fs" / "features.npy", 3) < 40_000 // 256


def test_shuffled_batches_raise_once_a_gather_meets_the_truncation(tmp):
    # Shuffled batches are copies: a group gathered before the truncation
    # is right; the next group's gather raises. 300,000 rows: 3 groups.
    ids_store(tmp / "fs", 300_000)
    r = FeatureStore(tmp / "fs", "r")
    it = r.batches(256, shuffle=True, seed=1, prefetch=0)
    assert epoch_truncated_after(it, tmp / "fs" / "features.npy", 3) < 300_000 // 256


def test_shuffled_batches_gathered_ahead_are_right_or_raise(tmp):
    ids_store(tmp / "fs", 300_000)
    r = FeatureStore(tmp / "fs", "r")
    n = 0
    try:
        for X, y in r.batches(256, shuffle=True, seed=1, prefetch=2):
            assert_rows_right(X, y)
            n += 1
            if n == 3:
                truncate_elsewhere(tmp / "fs" / "features.npy", 1 << 16)
    except FileTruncatedError:
        assert n < 300_000 // 256


def test_an_epoch_of_views_ends_in_an_error_when_the_last_batch_was_hit(tmp):
    # The truncation comes after the last batch was handed out: the epoch's
    # final check reports it instead of ending normally.
    ids_store(tmp / "fs", 4096)
    r = FeatureStore(tmp / "fs", "r")
    it = r.batches(4096, prefetch=0)
    X, y = next(it)
    assert_rows_right(X, y)
    truncate_elsewhere(tmp / "fs" / "features.npy", 4096)
    with pytest.raises(FileTruncatedError):
        next(it)


def test_get_of_rows_another_process_cut_off_raises(tmp):
    ids_store(tmp / "fs", 10_000)
    r = FeatureStore(tmp / "fs", "r")
    truncate_elsewhere(tmp / "fs" / "labels.npy", 4096)
    with pytest.raises(FileTruncatedError):
        r.get(0, 10_000)
    r.get(0, 10)  # rows still in the file are fine
    with pytest.raises(FileTruncatedError):
        r.check()


@pytest.mark.parametrize(
    ("workers", "context"), [(0, None), (2, "fork"), (2, "spawn")], ids=["main", "fork", "spawn"]
)
def test_torch_data_loader_raises_instead_of_feeding_zeros(tmp, workers, context):
    torch = pytest.importorskip("torch")
    from mmapkit.torch import data_loader

    ids_store(tmp / "fs", 60_000)
    kw = {} if workers == 0 else {"num_workers": workers, "multiprocessing_context": context}
    dl = data_loader(tmp / "fs", batch_size=256, **kw)
    batches = ((X.numpy(), y.numpy()) for X, y in dl)
    assert torch is not None
    assert epoch_truncated_after(batches, tmp / "fs" / "features.npy", 2) < len(dl)


def test_device_loader_raises_instead_of_feeding_zeros(tmp):
    pytest.importorskip("torch")
    from mmapkit.torch import device_loader

    for direct in (False, True):
        ids_store(tmp / f"fs{direct}", 60_000)
        dl = device_loader(tmp / f"fs{direct}", batch_size=256, device="cpu", direct=direct)
        it = ((X.numpy(), y.numpy()) for X, y in dl)
        assert epoch_truncated_after(it, tmp / f"fs{direct}" / "features.npy", 2) < len(dl)


def test_dask_chunks_of_a_truncated_store_raise(tmp):
    pytest.importorskip("dask")
    from mmapkit.dask import load_rows

    ids_store(tmp / "fs", 10_000)
    p = str(tmp / "fs" / "features.npy")
    assert load_rows(p, 0, 10).shape == (10, 8)
    truncate_elsewhere(p, 8192)
    with pytest.raises(FileTruncatedError):
        load_rows(p, 5000, 6000)


# ----- defect 5: copy-on-write maps are not pickled by path -----------------


def test_a_copy_on_write_map_refuses_to_pickle_or_copy(tmp):
    p = tmp / "c.bin"
    p.write_bytes(b"original" * 512)
    m = mmapkit.open(p, "c")
    m[0:8] = b"PRIVATE!"
    for how in (pickle.dumps, copy.copy):
        with pytest.raises(TypeError, match="copy-on-write"):
            how(m)
    with open(p, "rb") as f:
        s = mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_COPY)
    with pytest.raises(TypeError, match="copy-on-write"):
        pickle.dumps(s)
    # The stdlib refuses every mmap; read-only and shared maps still pickle by path.
    with open(p, "rb") as f, pytest.raises(TypeError):
        pickle.dumps(stdlib_mmap.mmap(f.fileno(), 0, access=stdlib_mmap.ACCESS_READ))
    assert pickle.loads(pickle.dumps(mmapkit.open(p, "r")))[:8] == b"original"


# ----- defect 6: a FIFO is refused at once ----------------------------------


def test_open_of_a_fifo_is_refused_at_once(tmp):
    fifo = tmp / "fifo"
    os.mkfifo(fifo)
    code = textwrap.dedent(
        f"""
        import mmapkit
        for mode in ("r", "r+", "c"):
            try:
                mmapkit.open({str(fifo)!r}, mode)
            except (OSError, ValueError) as e:
                print(mode, type(e).__name__, e)
        """
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert r.returncode == 0, r.stderr
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and all("FIFO" in line for line in lines), r.stdout


# ----- defect 7: refresh after growth past the reservation ------------------


def occupy_after_reservation(m):
    """Maps a page right after ``m``'s reservation (or finds one there), so
    the map cannot grow in place."""
    base = m.numpy(np.uint8).ctypes.data  # taken and dropped: no view stays alive
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int]
    libc.mmap.argtypes += [ctypes.c_int, ctypes.c_long]
    map_fixed_noreplace, private_anonymous = 0x100000, 0x22
    after = base - m.offset % mmapkit.PAGESIZE + m.reserved
    got = libc.mmap(after, 4096, 0, private_anonymous | map_fixed_noreplace, -1, 0)
    # EEXIST: something is there already, which is what this needs.
    assert got == after or ctypes.get_errno() == 17, ctypes.get_errno()


def test_refresh_after_the_file_grew_past_the_reservation(tmp):
    p = tmp / "g.bin"
    p.write_bytes(b"a" * 4096)
    m = mmapkit.open(p, "r", reserve=1 << 20)
    occupy_after_reservation(m)
    with open(p, "ab") as f:
        f.write(b"b" * (4 << 20))
    # No view pins the map: it moves to a larger reservation.
    assert m.refresh() == 4096 + (4 << 20)
    assert m[-1:] == b"b" and m[:1] == b"a"
    # With a view alive the map cannot move: the error says what to do.
    v = m.numpy(np.uint8)
    occupy_after_reservation(m)
    os.truncate(p, len(m) + m.reserved + 4096)  # sparse: nothing is written
    with pytest.raises(mmapkit.ReservationExhaustedError, match="release its views"):
        m.refresh()
    del v
    assert m.refresh() == p.stat().st_size


# ----- defect 9: reversed() ---------------------------------------------------


def test_reversed_yields_bytes_from_the_end_like_the_stdlib(tmp):
    p = tmp / "r.bin"
    p.write_bytes(b"abc")
    with open(p, "rb") as f:
        ref = list(reversed(stdlib_mmap.mmap(f.fileno(), 0, access=stdlib_mmap.ACCESS_READ)))
        ours = list(reversed(mmapkit.mmap(f.fileno(), 0, access=mmapkit.ACCESS_READ)))
    assert ours == ref == [b"c", b"b", b"a"]
    assert list(reversed(mmapkit.open(p, "r"))) == ref
    (tmp / "e.bin").write_bytes(b"")
    assert list(reversed(mmapkit.open(tmp / "e.bin", "r"))) == []

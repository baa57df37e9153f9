"""Corruption matrix for the ``.npy`` store.

Small ``.npy`` files (mmapkit's growable header layout and plain
``np.save`` files; several dtypes and shapes) are damaged at EVERY byte
offset: the byte flipped (two ways), and separately the file truncated
there. Each damaged file is then opened with ``ArrayStore.open(p, "r")``,
``ArrayStore.open(p, "r+")`` + ``close()``, ``np.load(p, mmap_mode="r")``
(ArrayStore must accept exactly what numpy accepts, with the same array)
``SharedArray.attach`` (read-only) and ``mmapkit.stats`` on the path. Every outcome must be
either a clear error (``ValueError``/``FormatError`` naming the file) with
the file untouched, or a successful open that reports exactly the bytes the
file holds, within the file (a flipped data byte legitimately changes a
value: that is not detectable without checksums). Never a crash, never a
changed file after an open and close that wrote nothing.
"""

from __future__ import annotations

import collections
import os
from pathlib import Path

import numpy as np
import pytest

import mmapkit
from mmapkit._native import npy_header


def _sources(d: Path) -> dict[str, bytes]:
    out = {}
    s = mmapkit.ArrayStore.create(d / "grow_f4.npy", "<f4", row_shape=(3,))
    s.extend(np.arange(12, dtype="<f4").reshape(4, 3))
    s.close()
    s = mmapkit.ArrayStore.create(d / "grow_u2_empty.npy", "<u2")
    s.close()
    s = mmapkit.ArrayStore.create(d / "grow_struct.npy", [("a", "<i4"), ("b", "u1")])
    s.extend(np.array([(1, 2), (3, 4)], dtype=[("a", "<i4"), ("b", "u1")]))
    s.close()
    np.save(d / "save_i2.npy", np.arange(5, dtype="<i2"))
    np.save(d / "save_u1_2d.npy", np.arange(6, dtype="u1").reshape(2, 3))
    np.save(d / "save_f8_fortran1d.npy", np.asfortranarray(np.arange(3, dtype="<f8")))
    # np.save leaves room for the row count to grow; older writers did not:
    # a minimal header (dict padded only to 64 bytes), which r+ re-lays out.
    dt = np.dtype([("x" * 48, "<i4")])
    descr = np.lib.format.dtype_to_descr(dt)
    d_ = f"{{'descr': {descr!r}, 'fortran_order': False, 'shape': (2,), }}"
    total = -(-(10 + len(d_) + 1) // 64) * 64
    head = (
        b"\x93NUMPY\x01\x00"
        + (total - 10).to_bytes(2, "little")
        + d_.encode().ljust(total - 11)
        + b"\n"
    )
    (d / "minimal_struct.npy").write_bytes(head + np.array([(7,), (8,)], dt).tobytes())
    for p in sorted(d.iterdir()):
        out[p.name] = p.read_bytes()
        p.unlink()
    return out


def _damaged(content: bytes):
    for off in range(len(content)):
        for mask in (0xFF, 0x01):
            b = bytearray(content)
            b[off] ^= mask
            yield f"flip{mask:#x}@{off}", bytes(b)
        yield f"truncate@{off}", content[:off]


def _snap(p: Path):
    st = os.stat(p)
    return p.read_bytes(), st.st_mtime_ns


def _clear_error(e: BaseException, p: Path) -> bool:
    return isinstance(e, ValueError) and p.name in str(e)


def _check_open_r(p: Path, counts) -> None:
    before = _snap(p)
    try:
        want = np.load(p, mmap_mode="r")
    except Exception:  # noqa: BLE001 - numpy's verdict, compared below
        want = None
    try:
        s = mmapkit.ArrayStore.open(p, "r")
    except Exception as e:  # noqa: BLE001 - classified below
        assert _clear_error(e, p), repr(e)
        assert want is None or want.ndim == 0, "numpy reads what mmapkit refused"
        counts["r: error"] += 1
    else:
        assert want is not None, "mmapkit accepted a header numpy rejects"
        assert (s.shape, s.dtype) == (want.shape, want.dtype)
        assert s.numpy().tobytes() == want.tobytes()
        data = p.read_bytes()
        end = s.data_offset + len(s) * s.dtype.itemsize * int(np.prod(s.row_shape, dtype=np.int64))
        assert end <= len(data), "the header's row count claims rows beyond the file's end"
        assert s.numpy().tobytes() == data[s.data_offset : end], (
            "the store reports exactly the file's bytes"
        )
        s.close()
        counts["r: ok"] += 1
    assert _snap(p) == before


def _check_open_rw(p: Path, counts) -> None:
    before, mtime = _snap(p)
    try:
        s = mmapkit.ArrayStore.open(p, "r+")
    except Exception as e:  # noqa: BLE001
        assert _clear_error(e, p), repr(e)
        assert _snap(p) == (before, mtime)
        counts["r+: error, untouched"] += 1
        return
    off, n = s.data_offset, len(s)
    s.close()
    after, mtime2 = _snap(p)
    if (after, mtime2) == (before, mtime):
        counts["r+: ok, untouched"] += 1
        return
    # Only an np.save header without room for a growing count may be
    # rewritten (atomically, once): same dtype and shape, and every byte
    # after the header as it was.
    old_descr, _old_fo, old_shape, old_off = _header_or_none(before, p)
    descr, _fo, shape, new_off = npy_header(os.fspath(p))
    assert new_off == off and new_off > old_off, "rewritten only to make room for the row count"
    assert (descr, shape[0]) == (old_descr, n) and list(shape) == list(old_shape)
    assert after[new_off:] == before[old_off:]
    counts["r+: ok, header re-laid out"] += 1


def _header_or_none(content: bytes, p: Path):
    tmp = p.with_name(p.name + ".orig")
    tmp.write_bytes(content)
    try:
        return npy_header(os.fspath(tmp))
    finally:
        tmp.unlink()


def _check_attach(p: Path, counts) -> None:
    """SharedArray.attach on a .npy path: a clear error or numpy's array."""
    before = _snap(p)
    try:
        want = np.load(p, mmap_mode="r")
    except Exception:  # noqa: BLE001
        want = None
    try:
        a = mmapkit.SharedArray.attach(p, readonly=True, unlink_on_close=False)
    except Exception as e:  # noqa: BLE001
        assert _clear_error(e, p), repr(e)
        counts["attach: error"] += 1
    else:
        assert want is not None, "SharedArray accepted a header numpy rejects"
        got = a.numpy()
        assert (got.shape, got.dtype) == (want.shape, want.dtype)
        assert got.tobytes() == want.tobytes()
        del got
        a.close()
        counts["attach: ok"] += 1
    assert _snap(p) == before


def _check_np_and_stats(p: Path, counts) -> None:
    before = _snap(p)
    try:
        a = np.load(p, mmap_mode="r")
        np_ok = True
    except Exception:  # noqa: BLE001 - numpy's own verdict, for comparison
        np_ok = False
    try:
        got = mmapkit.stats.max(p)
        st_ok = True
    except ValueError:
        st_ok = False
    counts[f"np.load {'ok' if np_ok else 'error'} / stats {'ok' if st_ok else 'error'}"] += 1
    if np_ok and st_ok and a.dtype.fields is None and a.size:
        assert np.array_equal(np.max(a), got, equal_nan=True), (np.max(a), got)
    assert _snap(p) == before


def test_every_offset_of_every_npy_file(tmp_path: Path) -> None:
    counts: collections.Counter[str] = collections.Counter()
    offsets = 0
    for name, content in _sources(tmp_path).items():
        for what, damaged in _damaged(content):
            offsets += 1
            p = tmp_path / name
            p.write_bytes(damaged)
            try:
                _check_open_r(p, counts)
                _check_np_and_stats(p, counts)
                _check_attach(p, counts)
                _check_open_rw(p, counts)
            except AssertionError as e:
                raise AssertionError(f"{name} {what}: {e}") from e
            finally:
                p.unlink()
            assert list(tmp_path.glob(".*")) == [], "no temp file left"
    print(f"\n{offsets} damaged files:", dict(sorted(counts.items())))
    assert offsets > 1000
    assert counts["r: error"] and counts["r: ok"] and counts["r+: ok, header re-laid out"]


@pytest.mark.parametrize("mode", ["r", "r+"])
def test_undamaged_files_open_and_round_trip(tmp_path: Path, mode: str) -> None:
    for name, content in _sources(tmp_path).items():
        p = tmp_path / name
        p.write_bytes(content)
        want = np.load(p)
        s = mmapkit.ArrayStore.open(p, mode)
        assert np.array_equal(s.numpy(), want) and s.dtype == want.dtype
        s.close()
        assert np.array_equal(np.load(p), want)

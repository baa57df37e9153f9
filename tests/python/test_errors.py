"""Core errors as Python exceptions: class, errno, strerror and filename come
from the error's fields (kind, errno, path, message), so paths with ": " in
them or bytes that are not UTF-8 come through unchanged."""

import errno
import os
import subprocess
from pathlib import Path

import pytest
from _logs import damaged_log

import mmapkit

# A directory and a file whose names look like "PATH: message" separators.
ODD = Path("x: y") / "a: b"


def _raises(exc, fn):
    with pytest.raises(exc) as ei:
        fn()
    return ei.value


def test_missing_file_is_file_not_found(tmp_path):
    p = tmp_path / ODD
    e = _raises(FileNotFoundError, lambda: mmapkit.open(p))
    assert (e.errno, e.strerror, e.filename) == (
        errno.ENOENT,
        "open: No such file or directory",
        str(p),
    )
    e = _raises(FileNotFoundError, lambda: mmapkit.count(p, b"x"))
    assert (e.errno, e.filename) == (errno.ENOENT, str(p))


def test_directory_is_a_directory_error(tmp_path):
    d = tmp_path / "x: y"
    d.mkdir()
    e = _raises(IsADirectoryError, lambda: mmapkit.open(d))
    assert (e.errno, e.filename) == (errno.EISDIR, str(d))
    e = _raises(IsADirectoryError, lambda: mmapkit.replace(d, b"a", b"b"))
    assert (e.errno, e.filename) == (errno.EISDIR, str(d))


@pytest.fixture
def immutable_file(tmp_path):
    """A file even root cannot open for writing (chattr +i): EPERM."""
    p = tmp_path / "x: y"
    p.write_bytes(b"abc")
    r = subprocess.run(["chattr", "+i", p], capture_output=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"chattr +i is not possible here: {r.stderr.decode().strip()}")
    try:
        yield p
    finally:
        subprocess.run(["chattr", "-i", p], check=False)


def test_immutable_file_is_permission_error(immutable_file):
    p = immutable_file
    e = _raises(PermissionError, lambda: mmapkit.open(p, "r+"))
    assert (e.errno, e.filename) == (errno.EPERM, str(p))
    assert e.strerror == "open: Operation not permitted"


def test_full_file_system_is_disk_full_error(small_tmpfs):
    d = small_tmpfs / "x: y"
    d.mkdir()
    p = d / "a: b"
    e = _raises(mmapkit.DiskFullError, lambda: mmapkit.open(p, "w+", size=8 << 20))
    assert isinstance(e, OSError)
    assert (e.errno, e.filename) == (errno.ENOSPC, str(p))
    assert e.strerror.startswith("no space left on device"), e.strerror


def test_damaged_log_is_corrupt_error_naming_the_segment(tmp_path):
    d = tmp_path / "x: y"
    seg = damaged_log(d)
    with mmapkit.CommitLog(d, segment_size=4096, sync="never") as log:
        e = _raises(mmapkit.CorruptError, log.verify)
    assert (e.errno, e.filename) == (errno.EIO, str(seg))
    assert e.strerror.startswith("corrupt: ") and "entry 1" in e.strerror, e.strerror


def test_format_and_argument_errors_are_value_errors(tmp_path):
    p = tmp_path / "x: y.npy"
    p.write_bytes(b"not an npy file")
    e = _raises(mmapkit.FormatError, lambda: mmapkit.ArrayStore.open(p))
    assert isinstance(e, ValueError) and str(e).startswith(f"{p}: ")
    q = tmp_path / "f"
    q.write_bytes(b"abc")
    e = _raises(ValueError, lambda: mmapkit.count(q, b""))
    assert str(e) == "the pattern is empty"
    # Out of range for this file: a ValueError that names it.
    e = _raises(ValueError, lambda: mmapkit.open(q, offset=10))
    assert str(e).startswith(f"{q}: offset 10 is past the end")


def test_fifo_is_a_value_error_naming_it(tmp_path):
    p = tmp_path / "x: y"
    os.mkfifo(p)
    e = _raises(ValueError, lambda: mmapkit.keep_lines(p, 1))
    assert str(e) == f"{p}: not a regular file"


def test_file_name_that_is_not_utf8_round_trips(tmp_path):
    # filename is the path decoded like os.fsdecode, not a lossy text copy.
    p = os.fsdecode(os.path.join(os.fsencode(tmp_path), b"caf\xe9: \xff"))
    e = _raises(FileNotFoundError, lambda: mmapkit.open(p))
    assert e.filename == p
    assert os.fsencode(e.filename).endswith(b"caf\xe9: \xff")


def test_truncated_mapping_says_how_to_recover(tmp_path):
    p = tmp_path / ODD.parent
    p.write_bytes(b"x" * 8192)
    with mmapkit.open(p, "r") as m:
        os.truncate(p, 0)
        e = _raises(mmapkit.FileTruncatedError, lambda: m[4096:4100])
    assert (e.errno, e.filename) == (errno.EFAULT, str(p))
    assert e.strerror.endswith("(call refresh() to re-sync)"), e.strerror


def test_array_store_missing_file(tmp_path):
    p = tmp_path / ODD
    e = _raises(FileNotFoundError, lambda: mmapkit.ArrayStore.open(p))
    assert (e.errno, e.filename) == (errno.ENOENT, str(p))

"""Disk-full matrix (issue 10, defect 5): every growing operation on a really
full file system raises DiskFullError (exit 2 in the CLI) and gives back
what it took: afterwards the file system has exactly as many free blocks as
before, and no temporary file is left.

Runs on a small ext4 file system (a file formatted with mkfs.ext4 and
loop-mounted; needs root) and on a small tmpfs (also a mount, so also
root). Each is skipped with the reason when it cannot be mounted.
"""

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import mmapkit

ROOT = Path(__file__).resolve().parents[2]
CLI = ROOT / "target" / "release" / "mmapkit"
MIB = 1 << 20


def _mount_ext4(tmp: Path) -> Path:
    img, mnt = tmp / "fs.img", tmp / "ext4"
    mnt.mkdir()
    with open(img, "wb") as f:
        f.truncate(48 * MIB)
    # -m 0: no blocks reserved for root (we are root); no lazy init, so the
    # free count does not move while the test runs.
    subprocess.run(
        [
            "mkfs.ext4",
            "-q",
            "-F",
            "-m",
            "0",
            "-E",
            "lazy_itable_init=0,lazy_journal_init=0",
            str(img),
        ],
        check=True,
        capture_output=True,
    )
    subprocess.run(["mount", "-o", "loop", str(img), str(mnt)], check=True, capture_output=True)
    return mnt


def _mount_tmpfs(tmp: Path) -> Path:
    mnt = tmp / "tmpfs"
    mnt.mkdir()
    subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mnt)],
        check=True,
        capture_output=True,
    )
    return mnt


@pytest.fixture(params=["ext4", "tmpfs"], scope="module")
def small_fs(request, tmp_path_factory):
    if os.geteuid() != 0:
        pytest.skip(f"{request.param}: mounting a small file system needs root")
    tmp = tmp_path_factory.mktemp(f"full-{request.param}")
    try:
        mnt = _mount_ext4(tmp) if request.param == "ext4" else _mount_tmpfs(tmp)
    except (subprocess.CalledProcessError, FileNotFoundError) as e:
        err = getattr(e, "stderr", b"") or b""
        pytest.skip(
            f"cannot mount a small {request.param}: {e} {err.decode(errors='replace').strip()}"
        )
    yield mnt
    subprocess.run(["umount", "-l", str(mnt)], check=False)


@pytest.fixture
def fs(small_fs):
    """A fresh directory on the small file system, emptied afterwards."""
    d = small_fs / "work"
    if d.exists():
        shutil.rmtree(d)
    d.mkdir()
    yield d
    shutil.rmtree(d, ignore_errors=True)


def free_blocks(path: Path) -> int:
    # Freed blocks reach the counters once the journal commits.
    os.sync()
    return os.statvfs(path).f_bfree


def free_bytes(path: Path) -> int:
    st = os.statvfs(path)
    return st.f_bfree * st.f_frsize


def assert_given_back(d: Path, before: int, keep: set[str] = frozenset()) -> None:
    left = {p.name for p in d.iterdir()} - set(keep)
    assert not left, f"left behind on a failed grow: {sorted(left)}"
    # Polled for up to 30 s: ext4 may free the blocks of a deleted file a
    # little later, later still on a loaded machine.
    for _ in range(600):
        now = free_blocks(d)
        if now == before:
            return
        time.sleep(0.05)
    assert now == before, (
        f"free blocks {before} before, {now} after the failure: the disk was not given back"
    )


def cli(*args, **kw):
    return subprocess.run(
        [str(CLI), *map(str, args)], capture_output=True, text=True, **kw, check=False
    )


# --- Python API ---------------------------------------------------------------


def test_open_with_a_size_past_the_free_space(fs):
    before = free_blocks(fs)
    with pytest.raises(mmapkit.DiskFullError) as ei:
        mmapkit.open(fs / "big.bin", "w+", size=1 << 40)
    assert isinstance(ei.value, OSError) and "big.bin" in str(ei.value)
    assert "0 bytes" not in str(ei.value)
    assert_given_back(fs, before, keep={"big.bin"})
    assert os.path.getsize(fs / "big.bin") == 0


def test_grow_and_resize_past_the_free_space_keep_the_map(fs):
    p = fs / "g.bin"
    with mmapkit.open(p, "w+", size=4096) as m:
        m[:5] = b"hello"
        before = free_blocks(fs)
        with pytest.raises(mmapkit.DiskFullError):
            m.grow(2 * free_bytes(fs))
        assert len(m) == 4096 and m[:5] == b"hello"
        assert_given_back(fs, before, keep={"g.bin"})
        assert os.path.getsize(p) == 4096
    with open(p, "r+b") as f:
        mm = mmapkit.mmap(f.fileno(), 0)
    before = free_blocks(fs)
    with pytest.raises(mmapkit.DiskFullError):
        mm.resize(2 * free_bytes(fs))
    assert len(mm) == 4096 and mm[:5] == b"hello"
    mm.close()
    assert_given_back(fs, before, keep={"g.bin"})
    assert os.path.getsize(p) == 4096


def test_array_store_extend_and_reserve(fs):
    p = fs / "a.npy"
    s = mmapkit.ArrayStore.create(p, np.float64)
    s.extend(np.arange(10.0))
    s.flush()
    s._core.trim()  # give the reserved capacity back first: measure from there
    # The durable-rows record beside an open store goes on close (counted
    # as given back).
    rec = fs / ".a.npy.mmapkit-durable"
    before = free_blocks(fs) + rec.stat().st_blocks * 512 // os.statvfs(fs).f_frsize
    rows = 2 * free_bytes(fs) // 8
    with pytest.raises(mmapkit.DiskFullError):
        s.extend(np.zeros(rows))
    with pytest.raises(mmapkit.DiskFullError):
        s._core.reserve(rows)
    assert len(s) == 10 and (s[:] == np.arange(10.0)).all()
    s.close()
    assert_given_back(fs, before, keep={"a.npy"})
    assert (np.load(p) == np.arange(10.0)).all()


def test_array_store_create_with_a_capacity_past_the_free_space(fs):
    before = free_blocks(fs)
    with pytest.raises(mmapkit.DiskFullError):
        mmapkit.ArrayStore.create(fs / "c.npy", np.float64, capacity=2 * free_bytes(fs) // 8)
    assert_given_back(fs, before)
    # Replacing an existing store: the old one stays whole.
    np.save(fs / "c.npy", np.arange(5))
    old = (fs / "c.npy").read_bytes()
    before = free_blocks(fs)
    with pytest.raises(mmapkit.DiskFullError):
        mmapkit.ArrayStore.create(fs / "c.npy", np.float64, capacity=2 * free_bytes(fs) // 8)
    assert_given_back(fs, before, keep={"c.npy"})
    assert (fs / "c.npy").read_bytes() == old


def test_record_writer_known_and_growing(fs):
    before = free_blocks(fs)
    with pytest.raises(mmapkit.DiskFullError):
        mmapkit.RecordWriter(fs / "r.bin", 1 << 20, 2 * free_bytes(fs) // MIB)
    assert_given_back(fs, before)
    # Unknown count: grows in steps until the disk is full.
    w = mmapkit.RecordWriter(fs / "r2.bin", 1 << 20)
    rec = b"x" * (1 << 20)
    with pytest.raises(mmapkit.DiskFullError):
        for i in range(1000):
            w.write(i, rec)
    w.abort()
    assert_given_back(fs, before)


def test_commit_log_segments(fs):
    d = fs / "log"
    d.mkdir()
    before = free_blocks(fs)
    with pytest.raises(mmapkit.DiskFullError):
        mmapkit.CommitLog(d, segment_size=2 * free_bytes(fs))
    # The (empty) lock file stays, as after any open; it holds no blocks.
    assert_given_back(d, before, keep={"LOCK"})
    # Small segments: appends roll over until a new segment does not fit;
    # the log stays usable and holds everything acknowledged.
    log = mmapkit.CommitLog(d, segment_size=4 * MIB, sync="never")
    acked = 0
    with pytest.raises(mmapkit.DiskFullError):
        for _ in range(100):
            log.append([b"y" * 65536] * 16)
            acked += 16
    assert len(log) == acked
    full = free_blocks(fs)
    log.close()
    reopened = mmapkit.CommitLog(d, read_only=True)
    assert len(reopened) == acked and reopened.get(acked) == b"y" * 65536
    reopened.close()
    assert not [p for p in d.iterdir() if "tmp" in p.name]
    assert free_blocks(fs) >= full


def test_shared_array_on_a_full_file_system(fs):
    before = free_blocks(fs)
    with pytest.raises(mmapkit.DiskFullError):
        mmapkit.SharedArray.create("big", 2 * free_bytes(fs) // 8, np.float64, dir=fs)
    assert_given_back(fs, before)


# --- CLI: exit 2, nothing left --------------------------------------------------


@pytest.fixture(scope="module")
def reads_fa(tmp_path_factory):
    p = tmp_path_factory.mktemp("reads") / "reads.fa"
    rng = np.random.default_rng(7)
    with open(p, "w") as f:
        f.writelines(f">r{i}\n{''.join(rng.choice(list('ACGT'), 60))}\n" for i in range(40000))
    return p


@pytest.mark.skipif(not CLI.exists(), reason="release CLI not built (make cli)")
def test_cli_kmers_output_on_a_full_disk(fs, reads_fa):
    # 40,000 reads x 136 values of CSV is ~50 MB: more than the disk has.
    before = free_blocks(fs)
    r = cli("kmers", reads_fa, "-o", fs / "v.csv")
    assert r.returncode == 2, r
    assert "no space" in r.stderr.lower() and "v.csv" in r.stderr
    assert_given_back(fs, before)
    r = cli("kmers", reads_fa, "--format", "npy", "-o", fs / "v.npy")
    assert r.returncode == 2 and "no space" in r.stderr.lower(), r
    assert_given_back(fs, before)


@pytest.mark.skipif(not CLI.exists(), reason="release CLI not built (make cli)")
def test_cli_replace_rewrite_on_a_full_disk(fs):
    p = fs / "text.txt"
    line = b"alpha beta gamma\n"
    with open(p, "wb") as f:
        f.write(line * ((free_bytes(fs) * 6 // 10) // len(line)))
    original = p.stat()
    before = free_blocks(fs)
    # A longer replacement: rewritten beside the file, which cannot fit twice.
    r = cli("replace", "alpha", "ALPHA-ALPHA", p)
    assert r.returncode == 2, r
    assert "no space" in r.stderr.lower()
    assert_given_back(fs, before, keep={"text.txt"})
    st = p.stat()
    assert (st.st_size, st.st_ino, st.st_mtime_ns) == (
        original.st_size,
        original.st_ino,
        original.st_mtime_ns,
    )


@pytest.mark.skipif(not CLI.exists(), reason="release CLI not built (make cli)")
def test_cli_log_on_a_full_disk(fs):
    d = fs / "wal"
    d.mkdir()
    before = free_blocks(fs)
    r = cli("log", "init", d, "--segment-size", str(2 * free_bytes(fs)))
    assert r.returncode == 2 and "no space" in r.stderr.lower(), r
    assert_given_back(d, before, keep={"LOCK"})


@pytest.mark.skipif(not CLI.exists(), reason="release CLI not built (make cli)")
def test_cli_error_output_names_no_meaningless_size(fs):
    r = subprocess.run(
        [
            sys.executable,
            "-c",
            f"import mmapkit; mmapkit.open({str(fs / 'z.bin')!r}, 'w+', size=1 << 40)",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode != 0 and "DiskFullError" in r.stderr
    assert "to 0 bytes" not in r.stderr

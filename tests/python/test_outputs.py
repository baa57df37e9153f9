"""Output-kind matrix of the Python entry points that write files (issue 10,
defect 3) and temp-file cleanup on KeyboardInterrupt (defect 10).

Every writer goes through the core's atomic-output module: symlinks are
written through (the link stays a link), the old file's mode is kept, FIFOs
and directories are refused with an error naming the path and left as they
were, an output that is the input is refused, and no temporary file
(``.NAME.mmapkit-PID-N.tmp``) is ever left behind.
"""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import mmapkit

FASTA = b">r1\nACGTACGTTTGA\n>r2\nGGGCCCAAATTT\n"


def temps(d: Path) -> list[str]:
    return [p.name for p in d.iterdir() if ".mmapkit-" in p.name or p.name.endswith(".tmp")]


def snapshot(d: Path) -> dict[str, tuple[str, int, int, bytes]]:
    out = {}
    for p in d.iterdir():
        st = p.lstat()
        if stat.S_ISLNK(st.st_mode):
            body = os.readlink(p).encode()
        elif stat.S_ISREG(st.st_mode):
            body = p.read_bytes()
        else:
            body = b""
        out[p.name] = (stat.filemode(st.st_mode), st.st_ino, st.st_mode, body)
    return out


def write_kmers(out: Path, d: Path) -> None:
    mmapkit.kmers(str(d / "in.fa"), out=str(out))


def write_records(out: Path, d: Path) -> None:
    w = mmapkit.RecordWriter(str(out), 4, 2)
    w.write(0, b"abcd")
    w.write(1, b"efgh")
    w.finish()


def write_store(out: Path, d: Path) -> None:
    s = mmapkit.ArrayStore.create(str(out), np.float32, (3,))
    s.extend(np.ones((2, 3), np.float32))
    s.close()


WRITERS: dict[str, Callable[[Path, Path], None]] = {
    "kmers": write_kmers,
    "RecordWriter": write_records,
    "ArrayStore.create": write_store,
}


def reference(name: str, tmp_path: Path) -> bytes:
    d = tmp_path / "ref"
    d.mkdir()
    (d / "in.fa").write_bytes(FASTA)
    WRITERS[name](d / "ref.out", d)
    return (d / "ref.out").read_bytes()


@pytest.mark.parametrize("name", list(WRITERS))
@pytest.mark.parametrize("kind", ["new", "regular", "symlink", "dangling", "chain", "hardlink"])
def test_writers_write_through_links_and_keep_mode(name: str, kind: str, tmp_path: Path) -> None:
    want = reference(name, tmp_path)
    d = tmp_path / "d"
    d.mkdir()
    (d / "in.fa").write_bytes(FASTA)
    real = d / "real.out"
    arg = real
    if kind != "new" and kind != "dangling":
        real.write_bytes(b"old")
        real.chmod(0o640)
    if kind == "symlink" or kind == "dangling":
        arg = d / "link.out"
        arg.symlink_to("real.out")
    elif kind == "chain":
        (d / "l1").symlink_to("real.out")
        arg = d / "l2"
        arg.symlink_to(d / "l1")
    elif kind == "hardlink":
        arg = d / "hard.out"
        os.link(real, arg)
    WRITERS[name](arg, d)
    target = arg if kind == "hardlink" else real
    assert target.read_bytes() == want
    if kind in ("symlink", "dangling", "chain"):
        assert arg.is_symlink()
    if kind == "hardlink":
        assert real.read_bytes() == b"old"  # only the name written to is replaced
    if kind != "new" and kind != "dangling":
        assert stat.S_IMODE(target.stat().st_mode) == 0o640
    assert temps(d) == []


@pytest.mark.parametrize("name", list(WRITERS))
@pytest.mark.parametrize(
    "kind", ["fifo", "directory", "same-as-input", "input-via-symlink", "input-via-hardlink"]
)
def test_writers_refuse_fifos_directories_and_their_input(
    name: str, kind: str, tmp_path: Path
) -> None:
    if kind.startswith(("same", "input")) and name != "kmers":
        pytest.skip("only kmers has an input file")
    d = tmp_path
    (d / "in.fa").write_bytes(FASTA)
    arg = d / "x.out"
    if kind == "fifo":
        os.mkfifo(arg)

        # Code that opens the FIFO to read would block forever: a writer
        # opened later unblocks it, so the test fails instead of hanging.
        def unblock() -> None:
            time.sleep(5)
            try:
                fd = os.open(arg, os.O_WRONLY | os.O_NONBLOCK)
                os.close(fd)
            except OSError:
                pass

        threading.Thread(target=unblock, daemon=True).start()
    elif kind == "directory":
        arg.mkdir()
    elif kind == "same-as-input":
        arg = d / "in.fa"
    elif kind == "input-via-symlink":
        arg.symlink_to("in.fa")
    else:
        os.link(d / "in.fa", arg)
    before = snapshot(d)
    with pytest.raises((OSError, ValueError)) as e:
        WRITERS[name](arg, d)
    assert arg.name in str(e.value)
    assert snapshot(d) == before
    assert temps(d) == []


def test_shared_array_create_does_not_replace_and_leaves_no_temp(tmp_path: Path) -> None:
    (tmp_path / "seg").write_bytes(b"keep me")
    with pytest.raises(FileExistsError):
        mmapkit.SharedArray.create("seg", (4,), np.int32, dir=tmp_path)
    assert (tmp_path / "seg").read_bytes() == b"keep me"
    a = mmapkit.SharedArray.create("seg2", (4,), np.int32, dir=tmp_path, unlink_on_close=False)
    a.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seg", "seg2"]


SCRIPT = textwrap.dedent(
    """
    import os, signal, sys, threading, time
    import mmapkit
    # As an interactive start would: launched in the background (`cmd &` in
    # a script), Python inherits SIGINT ignored and installs no handler.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    out = sys.argv[1]
    kind = sys.argv[2]
    # A KeyboardInterrupt arrives while a long write is in progress.
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGINT)).start()
    if kind == "RecordWriter":
        w = mmapkit.RecordWriter(out, 4096, None)
        i = 0
        while True:
            w.write(i, b"x" * 4096)
            i += 1
    else:
        while True:
            mmapkit.kmers(sys.argv[3], out=out)
    """
)


@pytest.mark.parametrize("kind", ["RecordWriter", "kmers"])
def test_keyboard_interrupt_during_a_write_leaves_no_temp_file(kind: str, tmp_path: Path) -> None:
    fa = tmp_path / "in.fa"
    fa.write_bytes(b"".join(b">r%d\n%s\n" % (i, b"ACGT" * 100) for i in range(20000)))
    out = tmp_path / "out.bin"
    p = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(out), kind, str(fa)],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert b"KeyboardInterrupt" in p.stderr, p.stderr[-2000:]
    assert temps(tmp_path) == []
    if kind == "RecordWriter":
        assert not out.exists()  # never finished: nothing at the destination

"""The SIGBUS handler must only swallow faults in mmapkit's own mappings,
and long native calls must release the GIL."""

import signal
import subprocess
import sys
import textwrap
import threading
import time

import mmapkit

FOREIGN_FAULT = textwrap.dedent(
    """
    import mmap, os, sys, tempfile
    {prelude}
    import mmapkit
    d = tempfile.mkdtemp()
    keep = mmapkit.open(os.path.join(d, "mine"), "w+", size=1 << 20)  # installs the handler
    p = os.path.join(d, "theirs")
    with open(p, "wb") as f:
        f.write(b"z" * (1 << 20))
    with open(p, "rb") as f:
        m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)  # NOT an mmapkit map
    os.truncate(p, 0)
    print("reading", flush=True)
    m[500000]  # a real SIGBUS outside mmapkit: must not be swallowed
    print("survived", flush=True)
    """
)


def run_child(prelude: str) -> subprocess.CompletedProcess:
    code = FOREIGN_FAULT.format(prelude=prelude)
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_foreign_sigbus_still_kills_with_default_action():
    r = run_child("")
    assert "reading" in r.stdout and "survived" not in r.stdout
    assert r.returncode == -signal.SIGBUS


def test_foreign_sigbus_is_chained_to_faulthandler():
    r = run_child("import faulthandler; faulthandler.enable()")
    assert "survived" not in r.stdout
    assert "Fatal Python error: Bus error" in r.stderr  # faulthandler ran
    assert r.returncode == -signal.SIGBUS


def test_own_sigbus_is_an_exception_even_with_faulthandler(tmp_path):
    import faulthandler

    assert faulthandler.is_enabled()  # pytest enables it; we chain behind it
    p = tmp_path / "f"
    p.write_bytes(b"q" * (1 << 20))
    m = mmapkit.open(p)
    p.write_bytes(b"")  # truncate
    try:
        m.count(b"q")
    except mmapkit.FileTruncatedError:
        pass
    else:
        raise AssertionError("no FileTruncatedError")


def test_long_calls_release_the_gil():
    m = mmapkit.mmap(-1, 512 << 20)
    t0 = time.perf_counter()
    m.count(b"\x01\x02")
    one_call = time.perf_counter() - t0
    done = threading.Event()

    def worker():
        for _ in range(3):
            m.count(b"\x01\x02")
        done.set()

    th = threading.Thread(target=worker)
    th.start()
    gaps = []
    last = time.perf_counter()
    while not done.is_set():
        now = time.perf_counter()
        gaps.append(now - last)
        last = now
    th.join()
    # With the GIL held, this loop would stall for a whole call at a time.
    assert max(gaps) < max(one_call / 2, 0.02), (max(gaps), one_call)
    m.close()

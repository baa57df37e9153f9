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
    """While a worker thread is inside a long call, the main thread runs
    Python. Measured as the main thread's own CPU time during the worker's
    calls (its pthread CPU clock, read by the worker), not as wall-clock
    gaps, which preemption on a loaded machine also makes (issue 27): with
    the GIL held the main thread only runs around each call's start and
    end (measured with `bytes.count`, which holds it, over the same 512
    MiB: 9-15 ms of main-thread CPU per call, whatever the switch
    interval), released it runs through the call (110-480 ms per call on a
    quiet machine; half that where it gets half a core)."""
    m = mmapkit.mmap(-1, 512 << 20)
    main_cpu = time.pthread_getcpuclockid(threading.main_thread().ident)
    during = []
    done = threading.Event()
    go = threading.Event()

    def worker():
        go.wait()
        for _ in range(6):
            c0 = time.clock_gettime(main_cpu)
            m.count(b"\x01\x02")
            during.append(time.clock_gettime(main_cpu) - c0)
        done.set()

    th = threading.Thread(target=worker)
    th.start()
    spins = 0
    go.set()
    while not done.is_set():
        spins += 1
    th.join()
    assert sum(during) > 0.2, (during, spins)  # held: under 0.1 s for six calls
    m.close()

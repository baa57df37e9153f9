"""The `files` suite's streaming row: how soon a line written to a live pipe comes out
of `grep --line-buffered` (issue 40: mmapkit printed nothing until ~96 KiB arrived).

One process per run reads a pipe that this driver writes: a line that does not match,
then one that does; the time from that write to the matching line's arrival on the
tool's standard output is one sample. A run is LINES samples; its time is their
median (a pipe's latency, not the start-up of the tool). The answer: the lines that
came back (all of them, in order, or the run fails).
"""

from __future__ import annotations

import os
import select
import statistics
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from ...contenders import ENV, Table
from ...suite import Dataset, Measured, Task

LINES = 200
PATTERN = "ERR"
# A line that takes longer than this has not been flushed: the run fails.
DEADLINE_S = 5.0


def _read_line(fd: int, pending: bytearray) -> bytes:
    """The next line the tool prints (waiting at most DEADLINE_S for it)."""
    end = time.monotonic() + DEADLINE_S
    while b"\n" not in pending:
        left = end - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            raise RuntimeError(f"no line within {DEADLINE_S} s of its write (not flushed)")
        chunk = os.read(fd, 1 << 16)
        if not chunk:
            raise RuntimeError("the tool closed its output before printing the line")
        pending += chunk
    line, _, rest = bytes(pending).partition(b"\n")
    pending[:] = rest
    return line + b"\n"


def latency(argv: list[str], _path: Path) -> Measured:
    """Runs `argv` on a live pipe; the median write-to-output time of LINES lines."""
    proc = subprocess.Popen(
        argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=ENV
    )
    assert proc.stdin is not None
    assert proc.stdout is not None
    samples = []
    pending = bytearray()
    try:
        for i in range(LINES):
            want = f"{PATTERN} {i}: disk almost full\n".encode()
            t0 = time.perf_counter()
            os.write(proc.stdin.fileno(), b"ok: all good\n" + want)
            got = _read_line(proc.stdout.fileno(), pending)
            samples.append(time.perf_counter() - t0)
            if got != want:
                raise RuntimeError(f"printed {got!r}, expected {want!r}")
        proc.stdin.close()
        if proc.wait(timeout=DEADLINE_S) != 0:
            raise RuntimeError(f"`{argv[0]}` exited with status {proc.returncode}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
    return Measured(len(samples), seconds=statistics.median(samples))


def task(first_size: str) -> Task:
    """The live-pipe latency row (one size, warm: it reads no file)."""

    def setup(ds: Dataset) -> Path:
        return ds.path  # unused: the input is the pipe

    return Task(
        "stream_latency",
        "live pipe: a line's write to its output (`--line-buffered`)",
        setup=setup,
        sizes=(first_size,),
        caches=("warm",),
        throughput=False,
        warmup="run",
        baseline="grep",
        reference="grep",
        note=f"`... | TOOL --line-buffered {PATTERN}`: the median over {LINES} lines of the "
        "time from writing a matching line into the pipe to reading it from the tool's "
        "output (each after a line that does not match); the tool runs for the whole run.",
    )


def table(prefix: list[str]) -> Table:
    """The row's command for a tool: `prefix` (its subcommand and options)."""
    runner: Callable[[list[str], Path], Measured] = latency
    return {"stream_latency": (runner, [*prefix, "--line-buffered", PATTERN])}

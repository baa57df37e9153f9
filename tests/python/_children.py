"""Child processes of one test, run in parallel (test_truncation_random.py,
test_no_crash.py): each is ``python ARGS`` with the mmapkit under test on
its path; its stdout is collected and its stderr written to
``child{SEED}.err`` under the test's ``tmp`` (a child logs each step there
before it runs it: a death names the step). The children share a scratch
directory, ``base``: on tmpfs where there is one (the stores' fsyncs then
cost nothing). Leaving the ``with`` block kills any child still running and
removes ``base`` and the files a child may leave behind (``leftovers``)."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Self


@dataclass
class Child:
    """One child; ``out`` (its stdout) and ``log`` (its stderr) once
    :meth:`Children.wait` returned."""

    seed: int
    proc: subprocess.Popen[bytes]
    err: IO[bytes]
    err_path: Path
    out: str = ""
    log: str = ""
    timed_out: bool = False  # killed by wait(): still running at its deadline

    @property
    def returncode(self) -> int:
        return self.proc.returncode

    @property
    def died(self) -> bool:
        """Killed by a signal, or a fatal error (faulthandler's report)."""
        return self.proc.returncode < 0 or "Fatal Python error" in self.log

    @property
    def last_steps(self) -> str:
        return self.log[-4000:]


class Children:
    """The children of one test (``with Children(tmp) as kids``).
    ``unset``: environment variables the children must not inherit;
    ``leftovers(pid)``: a glob of the files a child may leave behind."""

    def __init__(
        self,
        tmp: Path,
        *,
        unset: tuple[str, ...] = (),
        leftovers: Callable[[int], str] | None = None,
    ) -> None:
        self.tmp, self.leftovers = tmp, leftovers
        self.env = dict(os.environ)
        for name in unset:
            self.env.pop(name, None)
        self.env["PYTHONPATH"] = os.pathsep.join(
            [
                str(Path(__import__("mmapkit").__file__).parent.parent),
                self.env.get("PYTHONPATH", ""),
            ]
        )
        self.started: list[Child] = []
        self.base = Path(tempfile.mkdtemp(dir="/dev/shm" if os.path.isdir("/dev/shm") else tmp))

    def start(self, seed: int, args: list[str]) -> None:
        err_path = self.tmp / f"child{seed}.err"
        err = open(err_path, "wb")  # noqa: SIM115 - closed by wait() or close()
        proc = subprocess.Popen(
            [sys.executable, *args], stdout=subprocess.PIPE, stderr=err, env=self.env
        )
        self.started.append(Child(seed, proc, err, err_path))

    def wait(self, timeout_s: float) -> list[Child]:
        """Every child once it exited; one still running ``timeout_s``
        seconds from now is killed (``timed_out``)."""
        deadline = time.monotonic() + timeout_s
        for c in self.started:
            try:
                out, _ = c.proc.communicate(timeout=max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                c.proc.kill()
                out, _ = c.proc.communicate()
                c.timed_out = True
            c.err.close()
            c.out = out.decode(errors="replace")
            c.log = c.err_path.read_text(errors="replace")
        return self.started

    def close(self) -> None:
        for c in self.started:
            if c.proc.poll() is None:
                c.proc.kill()
                c.proc.wait()
            c.err.close()
            if self.leftovers is not None:
                for f in glob.glob(self.leftovers(c.proc.pid)):
                    os.unlink(f)
        shutil.rmtree(self.base, ignore_errors=True)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

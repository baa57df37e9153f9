"""How the `files` suite runs a command and reads its answer: a count, an offset, or
the file it rewrote (with the command's peak RSS)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from ...contenders import ENV
from ...harness import run_command
from ...suite import Measured
from .helper import rss_wrapper

_RSS_MARK = b"\nfiles-helper-maxrss-kib: "


def run(
    argv: list[str],
    *,
    stdin: Path | None = None,
    stdout: Path | None = None,
    ok: tuple[int, ...] = (0,),
    rss: bool = False,
) -> tuple[bytes, int, int | None]:
    """Runs a command; returns (stdout, exit status, peak RSS in bytes or None).

    With `rss`, the command runs under the compiled helper's `rss` wrapper, which
    reports the command's own peak RSS (see helper.rs; ~0.5 ms more).
    """
    wrapper = rss_wrapper() if rss else None
    full = [wrapper, "rss", *argv] if wrapper else argv
    out, err, rc = run_command(
        full, stdin=stdin, stdout=stdout, ok=ok, env=ENV, shown=argv, stderr=bool(wrapper)
    )
    peak = None
    if wrapper:
        _text, mark, kib = err.rpartition(_RSS_MARK)
        if not mark:
            raise RuntimeError(f"`{shlex.join(argv)}`: the rss wrapper reported nothing")
        peak = int(kib) * 1024  # ru_maxrss is in KiB on Linux
    return out, rc, peak


def _first_int(out: bytes, cmd: str) -> int:
    m = re.match(rb"\s*(\d+)", out)
    if not m:
        raise RuntimeError(f"`{cmd}` printed {out[:80]!r}, not a number")
    return int(m.group(1))


def count(argv: list[str], strict: bool = False) -> int:
    """A command that prints a count (nothing = 0, as rg -c does); exit 0 or 1.
    `strict` (mmapkit): exit status 1 if and only if the count is 0."""
    out, rc, _ = run(argv, ok=(0, 1))
    n = 0 if not out.strip() else _first_int(out, shlex.join(argv))
    if strict and (rc == 1) != (n == 0):
        raise RuntimeError(
            f"`{shlex.join(argv)}` printed {n} but exited with status {rc} "
            "(the contract: 1 if and only if nothing matched)"
        )
    return n


def offset(argv: list[str]) -> int:
    """A command that prints the first match's offset ("OFFSET" or "OFFSET:match")."""
    out, _rc, _ = run(argv)
    return _first_int(out.split(b":", 1)[0], shlex.join(argv))


def modify(
    argv: list[str],
    *,
    stdin: Path | None = None,
    stdout: Path | None = None,
    result: Path | None = None,
    expect: int | None = None,
) -> Measured:
    """A command that rewrites a file; returns the file to hash. `expect`: the number
    of replacements the command must print (mmapkit)."""
    out, _rc, rss = run(argv, stdin=stdin, stdout=stdout, rss=True)
    if expect is not None:
        n = _first_int(out, shlex.join(argv))
        if n != expect:
            raise RuntimeError(
                f"`{shlex.join(argv)}` reported {n} replacements, the file has {expect}"
            )
    return Measured(result or Path(argv[-1]), {"peak_rss": rss} if rss is not None else {})

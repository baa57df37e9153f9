"""The `files` suite's rewriting tools: replace a byte in place, replace it with two
bytes (the file grows), keep the first line. Their tasks and, per contender, the
command of each task; the file a command rewrote is hashed by the suite. The grown
replace also has a limit contender: a plain copy of a file of the output's size."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...contenders import Table
from ...harness import fsync_path
from ...suite import Dataset, Measured, Task
from .commands import modify
from .search import FILE


def _modify(argv: list[str], _p: Path) -> Measured:
    return modify(argv)


def tr_output(p: Path) -> Path:
    """Where `tr` writes (it cannot work in place): beside the working copy."""
    return p.with_name(p.name.replace(".work.csv", ".out.csv"))


def _tr(argv: list[str], p: Path) -> Measured:
    out = tr_output(p)
    return modify(argv, stdin=p, stdout=out, result=out)


def grown_source(work: Path) -> Path:
    """The grown replace's expected result (every `,` → `, ` of the pristine file the
    working copy `work` is restored from), made once per dataset; the copy limit copies
    it, so that its output has the size (and the hash) of the contenders'."""
    pristine = work.with_name(work.name.replace(".work.csv", ".csv"))
    grown = work.with_name(work.name.replace(".work.csv", ".grown.csv"))
    ok = grown.with_name(grown.name + ".ok")
    st = pristine.stat()
    stamp = f"{st.st_size}:{st.st_mtime_ns}"
    if grown.exists() and ok.exists() and ok.read_text() == stamp:
        return grown
    tmp = grown.with_name(grown.name + ".tmp")
    with open(pristine, "rb") as f, open(tmp, "wb") as g:
        while chunk := f.read(64 << 20):
            g.write(chunk.replace(b",", b", "))
    fsync_path(tmp)
    os.replace(tmp, grown)
    ok.write_text(stamp)
    return grown


def remove_grown(pristine: Path) -> None:
    """Removes the grown copy of ``pristine`` (and its marker) a rewrite task left."""
    grown = pristine.with_name(pristine.stem + ".grown.csv")
    for p in (grown, grown.with_name(grown.name + ".ok")):
        p.unlink(missing_ok=True)


def _copy_limit(argv: list[str], p: Path) -> Measured:
    """`files-helper copy GROWN NEW`: timed alone (making GROWN the first time is not)."""
    src, out = grown_source(p), tr_output(p)
    t0 = time.perf_counter()
    m = modify([argv[0], "copy", str(src), str(out)], result=out)
    m.seconds = time.perf_counter() - t0
    return m


def tasks(
    few: Callable[[Any, int], int],
    big: Callable[[Any], str],
    restore: Callable[[Dataset], Path],
    cleanup: Callable[[Dataset], None],
    rewritten: Callable[[Path, Any], Any],
) -> tuple[Task, ...]:
    # sed's tasks; the file is restored before and hashed after every run
    """The rewriting tasks (replace, keep-lines), given the suite's helpers for patterns and
    restoring the file.
    """
    rewriting: dict[str, Any] = {
        "baseline": "sed",
        "setup": restore,
        "check": rewritten,
        "teardown": cleanup,
    }
    return (
        Task(
            "replace_same",
            "replace `,` → `;` in place",
            repeats=few,
            warmup=big,
            **rewriting,
            note="every comma (99 per line) becomes a semicolon. Before every run "
            "(untimed) the file is restored from the pristine copy and fsync'ed; "
            "after every run (untimed) the result is hashed and must be identical "
            "across contenders (`tr`'s output file is hashed in place of the "
            "input). mmapkit must also print the number of replacements, checked "
            "against the file's comma count. Only `mmapkit --sync` makes the "
            "result durable; `sed -i` and `sd` rename a new file over the old "
            "one without fsync. `sed -i` runs at ~100 MB/s, so on the large size "
            "every contender is timed once per cache state (after reading the "
            "file once).",
        ),
        Task(
            "replace_grow",
            "replace `,` → `, ` (file grows)",
            repeats=few,
            warmup=big,
            **{**rewriting, "teardown": lambda ds: (cleanup(ds), remove_grown(ds.path))},
            note="every comma becomes comma-space: the file grows by ~17 %, so nobody "
            "can work in place; mmapkit writes a temporary file, fsyncs and "
            "renames it (its contract). The peak RSS column shows each tool's "
            "memory (mmapkit's target: ≤ 64 MiB at any size); the RSS of a "
            "process that maps the file counts the mapped pages it touched. Same "
            "restore/hash/once-on-large rules as the same-length replace. `copy "
            "limit` is the write limit: a plain copy (`copy_file_range`, like "
            "`cp`) of a file holding the expected result (made once, untimed), to "
            "a new file, fsync'ed: the same bytes reach the disk the same way, with "
            "no transformation.",
        ),
        Task(
            "keep_first",
            "keep the first line (truncate)",
            throughput=False,
            **rewriting,
            note="truncate the file after its first line (the article's task 1). The "
            "file is restored before every run, like the replaces.",
        ),
    )


def tables() -> dict[str, Table]:
    """The classic tools' and the helper's commands, per contender."""
    return {
        "sed": {
            "replace_same": (_modify, ["-i", "s/,/;/g", FILE]),
            "replace_grow": (_modify, ["-i", "s/,/, /g", FILE]),
            "keep_first": (_modify, ["-i", "1q", FILE]),
        },
        "sd": {
            "replace_same": (_modify, ["-F", ",", ";", FILE]),
            "replace_grow": (_modify, ["-F", ",", ", ", FILE]),
        },
        "tr": {"replace_same": (_tr, [",", ";"])},
        "copy limit": {"replace_grow": (_copy_limit, ["copy", FILE])},
        "read+rewrite": {"keep_first": (_modify, ["keep-first", FILE])},
    }


def mmapkit_table(opts: list[str], sync: bool, commas: Callable[[Path], int]) -> Table:
    """The mmapkit CLI's commands with the options `opts`; `commas(path)`: the number
    of replacements it must report."""

    def counted(argv: list[str], p: Path) -> Measured:
        return modify(argv, expect=commas(p))

    return {
        "replace_same": (
            counted,
            ["replace", "-F", *(["--sync"] if sync else []), *opts, ",", ";", FILE],
        ),
        "replace_grow": (counted, ["replace", "-F", *opts, ",", ", ", FILE]),
        "keep_first": (_modify, ["keep-lines", *opts, "1", FILE]),
    }

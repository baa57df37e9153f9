"""The `files` suite's rewriting tools: replace a byte in place, replace it with two
bytes (the file grows), keep the first line. Their tasks and, per contender, the
command of each task; the file a command rewrote is hashed by the suite."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...contenders import Table
from ...harness import Dataset, Measured, Task
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


def tasks(few: Callable[[Any, int], int], big: Callable[[Any], str],
          restore: Callable[[Dataset], Path], cleanup: Callable[[Dataset], None],
          rewritten: Callable[[Path, Any], Any]) -> tuple[Task, ...]:
    # sed's tasks; the file is restored before and hashed after every run
    rewriting: dict[str, Any] = {"baseline": "sed", "setup": restore, "check": rewritten,
                                 "teardown": cleanup}
    return (
        Task("replace_same", "replace `,` → `;` in place", repeats=few, warmup=big, **rewriting,
             note="every comma (99 per line) becomes a semicolon. Before every run "
                  "(untimed) the file is restored from the pristine copy and fsync'ed; "
                  "after every run (untimed) the result is hashed and must be identical "
                  "across contenders (`tr`'s output file is hashed in place of the "
                  "input). mmapkit must also print the number of replacements, checked "
                  "against the file's comma count. Only `mmapkit --sync` makes the "
                  "result durable; `sed -i` and `sd` rename a new file over the old "
                  "one without fsync. `sed -i` runs at ~100 MB/s, so on the large size "
                  "every contender is timed once per cache state (after reading the "
                  "file once)."),
        Task("replace_grow", "replace `,` → `, ` (file grows)", repeats=few, warmup=big,
             **rewriting,
             note="every comma becomes comma-space: the file grows by ~17 %, so nobody "
                  "can work in place; mmapkit writes a temporary file, fsyncs and "
                  "renames it (its contract). The peak RSS column shows each tool's "
                  "memory (mmapkit's target: ≤ 64 MiB at any size); the RSS of a "
                  "process that maps the file counts the mapped pages it touched. Same "
                  "restore/hash/once-on-large rules as the same-length replace."),
        Task("keep_first", "keep the first line (truncate)", throughput=False, **rewriting,
             note="truncate the file after its first line (the article's task 1). The "
                  "file is restored before every run, like the replaces."),
    )


def tables() -> dict[str, Table]:
    """The classic tools' and the helper's commands, per contender."""
    return {
        "sed": {"replace_same": (_modify, ["-i", "s/,/;/g", FILE]),
                "replace_grow": (_modify, ["-i", "s/,/, /g", FILE]),
                "keep_first": (_modify, ["-i", "1q", FILE])},
        "sd": {"replace_same": (_modify, ["-F", ",", ";", FILE]),
               "replace_grow": (_modify, ["-F", ",", ", ", FILE])},
        "tr": {"replace_same": (_tr, [",", ";"])},
        "read+rewrite": {"keep_first": (_modify, ["keep-first", FILE])},
    }


def mmapkit_table(opts: list[str], sync: bool, commas: Callable[[Path], int]) -> Table:
    """The mmapkit CLI's commands with the options `opts`; `commas(path)`: the number
    of replacements it must report."""
    def counted(argv: list[str], p: Path) -> Measured:
        return modify(argv, expect=commas(p))
    return {
        "replace_same": (counted, ["replace", "-F", *(["--sync"] if sync else []), *opts,
                                   ",", ";", FILE]),
        "replace_grow": (counted, ["replace", "-F", *opts, ",", ", ", FILE]),
        "keep_first": (_modify, ["keep-lines", *opts, "1", FILE]),
    }

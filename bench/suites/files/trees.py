"""The `files` suite's `trees` part: `grep -r` over real source trees (issue 25).

`-r` with `-l`, `-c` and `-n` over /usr/include and the Python standard library (the
running interpreter's `sysconfig` "stdlib" directory), and `-rl` over a generated tree
of tiny files, for GNU grep, `rg -uuu` (no ignore files, hidden files and binary files
searched: the same files as `grep -r`), mmapkit and mmapkit `-j 1`. Each task's answer
is the number of files listed (-l), the sum of the counts of text files (-c) or the
number of lines printed from text files (-n): binary files (a NUL byte in their first
96 KiB) count and print differently in each tool, so they are left out of those. The
trees are read only; they run at the suite's first size only (the CSV is not used) and
are not throughput tasks (a tree is many files).
"""

from __future__ import annotations

import os
import sysconfig
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...contenders import Table
from ...suite import Dataset, Task
from .commands import run

TINY_FILES = 5000  # files of the generated tree (50 directories of 100)


def stdlib() -> Path:
    """The running Python's standard library directory (one of the trees searched)."""
    return Path(sysconfig.get_paths()["stdlib"])


def tiny_tree(data_dir: Path) -> Path:
    """A seeded tree of tiny files (made once): 50 directories of 100 files of 3 lines,
    every 10th file holding the word `needle`."""
    root = data_dir / f"files-tree-tiny-{TINY_FILES}"
    done = root / ".complete"
    if done.exists():
        return root
    for i in range(TINY_FILES):
        d = root / f"d{i // 100:02d}"
        d.mkdir(parents=True, exist_ok=True)
        word = "needle" if i % 10 == 0 else "hay"
        (d / f"f{i:04d}.txt").write_text(f"line one of {i}\nsome {word} here\nthe end\n")
    done.write_text("")
    return root


# The regex cells' pattern: `[a-z]+_[0-9]+\\(` spelled so that GNU grep's basic
# syntax (its default), ERE and rg's Rust syntax all read it the same way.
REGEX = "[a-z][a-z]*_[0-9][0-9]*[(]"

# Per tree: (kind, pattern): a literal in many files, a literal in a few, a regex.
PATTERNS: dict[str, tuple[tuple[str, str], ...]] = {
    # size_t: 1,915 of /usr/include's files; EHWPOISON: 2; the regex: 61.
    "include": (("common", "size_t"), ("rare", "EHWPOISON"), ("regex", REGEX)),
    # self: most .py files; getpeercert: a few dozen.
    "stdlib": (("common", "self"), ("rare", "getpeercert"), ("regex", REGEX)),
}

TREE_NAMES = {"include": "/usr/include", "stdlib": "Python stdlib"}

# (task, title, grep options, pattern, tree): every -l/-c/-n x pattern kind x tree
# cell, and -rl over the tiny-files tree.
CASES: tuple[tuple[str, str, tuple[str, ...], str, str], ...] = (
    *(
        (
            f"tree_{flag[1]}_{tree}_{kind}",
            f"-r{flag[1]} {kind} {pattern!r} ({TREE_NAMES[tree]})",
            (flag,),
            pattern,
            tree,
        )
        for tree, patterns in PATTERNS.items()
        for kind, pattern in patterns
        for flag in ("-l", "-c", "-n")
    ),
    ("tree_l_tiny", f"-rl needle, {TINY_FILES} tiny files", ("-l",), "needle", "tiny"),
)

TREE = "TREE"  # placeholder for the tree's root in the commands


def _root(tree: str, ds: Dataset) -> Path:
    if tree == "include":
        return Path("/usr/include")
    if tree == "stdlib":
        return stdlib()
    return tiny_tree(ds.path.parent)


_binary: dict[bytes, bool] = {}


def _is_binary(path: bytes) -> bool:
    if path not in _binary:
        try:
            with open(path, "rb") as f:
                _binary[path] = b"\0" in f.read(96 << 10)
        except OSError:
            _binary[path] = True
    return _binary[path]


def _answer(flag: str, out: bytes) -> int:
    lines = out.splitlines()
    if flag == "-l":
        return len(lines)
    if flag == "-c":
        pairs = (line.rsplit(b":", 1) for line in lines if b":" in line)
        return sum(int(n) for path, n in pairs if not _is_binary(path))
    return sum(1 for line in lines if not _is_binary(line.split(b":", 1)[0]))


def _run(argv: list[str], _path: Path) -> bytes:
    """A run's output; its answer is worked out untimed, by the task's check (parsing
    GNU's and mmapkit's -c line for every file, rg's only for files that match, was
    in the time: up to 15 ms of 60 in the -rc cells)."""
    out, _rc, _ = run(argv, ok=(0, 1))
    return out


def _check(flag: str) -> Callable[[Path, bytes], int]:
    return lambda _path, out: _answer(flag, out)


def tasks(first_size: str) -> tuple[Task, ...]:
    """The ``grep -r`` tasks over directory trees (measured at ``first_size`` only)."""

    def setup(tree: str) -> Callable[[Dataset], Path]:
        return lambda ds: _root(tree, ds)

    return tuple(
        Task(
            name,
            f"tree: {title}",
            setup=setup(tree),
            sizes=(first_size,),
            throughput=False,
            check=_check(flags[0]),
            baseline="grep",
            reference="grep",
            note=f"`grep -r {' '.join(flags)} '{pattern}'` over the {tree} tree "
            "(answer: files listed, or the lines counted or printed from text files).",
        )
        for name, title, flags, pattern, tree in CASES
    )


def table(prefix: list[str]) -> Table:
    """Each case's command: `prefix` (the tool's recursive flags), its options, the
    pattern, the tree."""
    return {
        name: (_run, [*prefix, *flags, "-e", pattern, TREE])
        for name, _t, flags, pattern, _tree in CASES
    }


def fill(arg: str, path: Path) -> str | None:
    """The tree's root for TREE (the path the task's setup returned)."""
    return str(path) if arg == TREE else None


def info() -> dict[str, Any]:
    """What the trees are (for the report's notes)."""
    out: dict[str, Any] = {}
    for label, root in (("include", Path("/usr/include")), ("stdlib", stdlib())):
        files = sum(len(f) for _d, _s, f in os.walk(root))
        out[label] = {"root": str(root), "files": files}
    return out

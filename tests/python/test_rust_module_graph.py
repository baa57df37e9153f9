"""The Rust crates' module graphs (ARCHITECTURE.md): the core's top-level
modules stand on floors and no module reaches up to a higher floor; no
crate's top-level modules import each other in a circle.

An edge ``a -> b`` is any path ``crate::b`` (``use`` lines, grouped
``use crate::{b, ..}`` and paths in code) in the non-test code of module
``a``, and ``super::b`` in ``a``'s own file (there ``super`` is the crate
root). Comments are dropped (a doc link is not a dependency), as are unit
tests (``tests.rs`` files, ``test_util.rs``) and ``$crate`` paths (a
macro's expansion belongs to its caller)."""

from __future__ import annotations

import re
from pathlib import Path

from _graph import circles

CRATES = Path(__file__).resolve().parents[2] / "crates"

# The core's floors, bottom first (ARCHITECTURE.md "Floors"). A module may
# use the modules of lower floors and, without a circle, of its own.
CORE_FLOORS = [
    {"sys"},
    {"error", "names"},
    {"fs", "bytes", "dtype", "exec"},
    {"map"},
    {"scan", "log", "store", "stats", "writer", "kmer"},
    {"info"},
]

COMMENT = re.compile(r"//[^\n]*")
PATH = re.compile(r"(?<![$\w])crate::(\w+)")
GROUP = re.compile(r"(?<![$\w])crate::\{")
SUPER = re.compile(r"(?<![$\w:])super::(\w+)")


def group_heads(text: str, start: int) -> list[str]:
    """The first segment of each path in the ``{...}`` opened just before start."""
    heads, depth, expect, i = [], 1, True, start
    while i < len(text) and depth:
        c = text[i]
        if c == "{":
            depth += 1
        elif c == "}":
            depth -= 1
        elif c == "," and depth == 1:
            expect = True
        elif depth == 1 and expect and (c.isalpha() or c == "_"):
            m = re.match(r"\w+", text[i:])
            assert m is not None
            heads.append(m.group(0))
            expect = False
            i += len(m.group(0))
            continue
        i += 1
    return heads


def module_files(src: Path) -> dict[str, list[tuple[Path, bool]]]:
    """Top-level module -> [(file, is the module's own file)], tests left out."""
    mods: dict[str, list[tuple[Path, bool]]] = {}
    for entry in sorted(src.iterdir()):
        if entry.name in ("lib.rs", "main.rs", "bin", "test_util.rs"):
            continue
        if entry.is_file() and entry.suffix == ".rs" and not entry.stem.endswith("_tests"):
            name = entry.stem
            mods.setdefault(name, []).append((entry, True))
        elif entry.is_dir():
            name = entry.name
            own = entry / "mod.rs"
            for f in sorted(entry.rglob("*.rs")):
                in_tests = "tests" in f.parts[len(entry.parts) : -1]
                if f.name == "tests.rs" or f.name.endswith("_tests.rs") or in_tests:
                    continue
                mods.setdefault(name, []).append((f, f == own))
    return mods


def without_tests(text: str) -> str:
    """The file without comments and its inline unit-test module."""
    text = COMMENT.sub("", text)
    cut = re.search(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s*)?mod \w+\s*\{", text)
    return text[: cut.start()] if cut else text


def root_exports(src: Path) -> dict[str, str]:
    """Names lib.rs re-exports (``pub use m::{A, B}``) -> the module m."""
    out = {}
    for m, names in re.findall(r"pub use (\w+)::\{?([\w\s,]*)\}?;", (src / "lib.rs").read_text()):
        out.update({n.strip(): m for n in names.split(",") if n.strip()})
    return out


def graph(crate: str) -> dict[str, set[str]]:
    mods = module_files(CRATES / crate / "src")
    exports = root_exports(CRATES / crate / "src")
    out: dict[str, set[str]] = {m: set() for m in mods}
    for m, files in mods.items():
        for path, own in files:
            text = without_tests(path.read_text())
            found = set(PATH.findall(text))
            for g in GROUP.finditer(text):
                found.update(group_heads(text, g.end()))
            if own:
                found.update(SUPER.findall(text))
            found = {exports.get(t, t) for t in found}
            out[m] |= {t for t in found if t in mods and t != m}
    return out


def test_the_walk_finds_known_edges():
    core = graph("mmapkit")
    assert "map" in core["log"], "log builds on map"
    assert "error" in core["fs"], "fs returns the core's error"
    assert "meta" in graph("mmapkit-raft")["log_store"], "the log store keeps its vote in meta"


def test_every_core_module_stands_on_a_floor():
    assert set(graph("mmapkit")) == set().union(*CORE_FLOORS)


def test_no_core_module_reaches_up():
    floor = {m: i for i, mods in enumerate(CORE_FLOORS) for m in mods}
    up = [
        f"{m} (floor {floor[m]}) uses {t} (floor {floor[t]})"
        for m, targets in sorted(graph("mmapkit").items())
        for t in sorted(targets)
        if floor.get(t, -1) > floor.get(m, len(CORE_FLOORS))
    ]
    assert up == []


def test_no_import_circle_in_any_crate():
    found = {c: circles(graph(c)) for c in ("mmapkit", "mmapkit-raft", "mmapkit-replicate")}
    assert found == {c: [] for c in found}

"""The Python package's module graph (ARCHITECTURE.md): no module imports a
private name of another module (the shared pieces live in private modules,
``_npy``, ``_order``, ``_kernels``, ..., that both sides import), and no
import circle, counting imports inside functions."""

from __future__ import annotations

import ast
from pathlib import Path

from _graph import circles

PACKAGE = Path(__file__).resolve().parents[2] / "python" / "mmapkit"


def imports() -> dict[str, list[tuple[str, list[str]]]]:
    """module -> [(imported module of the package, names imported from it)]."""
    mods = {p.stem for p in PACKAGE.glob("*.py")} | {"_native"}
    out: dict[str, list[tuple[str, list[str]]]] = {}
    for path in sorted(PACKAGE.glob("*.py")):
        found: list[tuple[str, list[str]]] = []
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            names = [a.name for a in node.names]
            if node.level == 1 and node.module is None:  # from . import x, y
                found.extend((n, []) for n in names if n in mods)
            elif node.level == 1 or (node.module or "").startswith("mmapkit."):
                target = (node.module or "").removeprefix("mmapkit.").split(".")[0]
                if target in mods:
                    found.append((target, names))
        out[path.stem] = found
    return out


def test_no_module_imports_a_private_name_of_another():
    graph = imports()
    assert {"_npy", "_order", "_kernels"} <= set(graph), "the walk found the package"
    private = [
        f"{m} imports {target}.{name}"
        for m, found in graph.items()
        for target, names in found
        for name in names
        # _native is the compiled module: _NpyBuffer is its base class of the facades.
        if name.startswith("_") and not name.startswith("__") and target != "_native"
    ]
    assert private == []


def test_no_import_circle():
    # (dask.py's ``python -m mmapkit.dask`` imports itself, as a module, to run.)
    graph = {
        m: {t for t, _ in found if t not in ("__init__", "__main__", m)}
        for m, found in imports().items()
    }
    assert graph["stats"] >= {"_columns", "_kernels"}, "the walk found the edges"
    assert circles({m: t for m, t in graph.items() if m not in ("__init__", "__main__")}) == []

"""Every public module, function and class of python/mmapkit and bench/ has a docstring.

The Python counterpart of the crates' ``missing_docs``: the API reference is built
from these docstrings. Public: a name without a leading underscore, defined in the
module (not imported), at module level or in a class (methods, properties, nested
classes), in every module, the private-named ones included, and the compiled
``mmapkit._native``. A method that overrides a documented one inherits its
docstring (``inspect.getdoc``, what ``help()`` shows), so a suite's ``prepare``
needs none of its own. A module that cannot be imported here (an optional extra
missing) is checked from its source instead, without that inheritance.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]


def module_names() -> list[str]:
    """Every module of the package and of the benchmark, by import name."""
    names = []
    for base, top in ((ROOT / "python", "mmapkit"), (ROOT, "bench")):
        for path in sorted((base / top).rglob("*.py")):
            if "peers" in path.relative_to(base).parts:
                continue  # bench/peers: the drivers' own projects (Go, Rust)
            parts = path.relative_to(base).with_suffix("").parts
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return [*names, "mmapkit._native"]


def public_members(owner: Any, module: str) -> list[tuple[str, Any]]:
    """(qualified name, object) of the public functions and classes under `owner`."""
    native = module == "mmapkit._native"
    out: list[tuple[str, Any]] = []
    for name, obj in vars(owner).items():
        if name.startswith("_"):
            continue
        # The native classes say module "mmapkit" (their public home) or "mmapkit._native".
        here = getattr(obj, "__module__", None) in ((module, "mmapkit") if native else (module,))
        if getattr(obj, "__name__", name) != name:
            continue  # an alias or a lambda held as data (a dataclass default), not a def
        if inspect.isclass(obj):
            if here:
                out.append((name, obj))
                out.extend((f"{name}.{n}", o) for n, o in public_members(obj, module))
        elif inspect.ismodule(owner):
            if (inspect.isfunction(obj) or inspect.isbuiltin(obj)) and here:
                out.append((name, obj))
        elif isinstance(obj, staticmethod | classmethod) or inspect.isfunction(obj):
            out.append((name, getattr(owner, name)))  # through the class: inherited docs
        elif isinstance(obj, property) or (
            native and (inspect.ismethoddescriptor(obj) or inspect.isdatadescriptor(obj))
        ):
            out.append((name, obj))
    return out


def documented(obj: Any) -> bool:
    """A class needs its own docstring (not a base's, not dataclass's generated
    signature); a function or property may inherit the one it overrides."""
    if not inspect.isclass(obj):
        return bool(inspect.getdoc(obj))
    doc = vars(obj).get("__doc__")
    if dataclasses.is_dataclass(obj):
        generated = obj.__name__ + str(inspect.signature(obj)).replace(" -> None", "")
        return bool(doc) and doc != generated
    return bool(doc)


def missing_from_source(path: Path) -> list[str]:
    """The source-level check: public defs and classes without a docstring."""
    missing = []

    def walk(node: ast.AST, prefix: str) -> None:
        for n in ast.iter_child_nodes(node):
            if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                if n.name.startswith("_"):
                    continue
                if ast.get_docstring(n) is None:
                    missing.append(prefix + n.name)
                if isinstance(n, ast.ClassDef):
                    walk(n, f"{prefix}{n.name}.")

    walk(ast.parse(path.read_text()), "")
    return missing


@pytest.mark.parametrize("name", module_names())
def test_public_api_has_docstrings(name):
    try:
        module: ModuleType = importlib.import_module(name)
    except ImportError as e:
        base = ROOT / "python" if name.startswith("mmapkit") else ROOT
        path = base / Path(*name.split("."))
        path = path / "__init__.py" if path.is_dir() else path.with_suffix(".py")
        print(f"{name}: not importable here ({e}); checked from its source")
        assert not missing_from_source(path), missing_from_source(path)
        return
    assert inspect.getdoc(module), f"{name} has no module docstring"
    home = "mmapkit._native" if name == "mmapkit._native" else name
    missing = [q for q, obj in public_members(module, home) if not documented(obj)]
    assert not missing, f"{name}: no docstring: {', '.join(missing)}"


def test_the_check_sees_the_api():
    """The walk finds what it must (so a broken walk cannot pass by finding nothing)."""
    import mmapkit._native as native
    from mmapkit import features

    names = {q for q, _ in public_members(features, "mmapkit.features")}
    assert {"FeatureStore", "FeatureStore.add", "FeatureStore.shape", "batch_order"} <= names
    native_names = {q for q, _ in public_members(native, "mmapkit._native")}
    assert {"MappedFile", "MappedFile.read_byte", "MappedFile.tell", "count"} <= native_names
    assert len(module_names()) > 30

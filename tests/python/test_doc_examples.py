"""Every code example of the documentation site runs, as written.

The guide pages (docs/**/*.md): each page's ```python and ```console blocks run in
order in one fresh directory, the Python blocks in one namespace, the console
blocks' ``$ `` lines through bash with the built CLI first on PATH; a command
must exit 0, and the lines shown after it are its exact output (none shown: not
checked). `mmapkit-kv` is on PATH too; servers a page starts in the background
write their pid to NAME.pid and are killed after the page whatever happens. A page may use
no other fenced language for code (``text`` for a layout is fine, it is not run).
The API reference: every ``>>>`` example in the package's docstrings, through
doctest, in a fresh directory.
"""

from __future__ import annotations

import contextlib
import doctest
import importlib
import linecache
import os
import re
import signal
import subprocess
from pathlib import Path

import pytest

import mmapkit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
# The CLI the site's reference shows (docs/conf.py): $MMAPKIT_CLI, else the release build.
CLI = Path(
    os.environ.get("MMAPKIT_CLI")
    or Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "mmapkit"
)
# mmapkit-kv (the operator's guide): the newer of cargo's release and debug builds.
KV = max(
    (
        p
        for p in (CLI.parent / "mmapkit-kv", CLI.parent.parent / "debug" / "mmapkit-kv")
        if p.is_file()
    ),
    key=lambda p: p.stat().st_mtime,
    default=CLI.parent / "mmapkit-kv",
)
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```\s*$", re.DOTALL | re.MULTILINE)
RUN = {"python", "console"}
NOT_CODE = {"text", "", "{toctree}", "{include}", "{mmapkit-cli-help}"}
PAGES = sorted(p.relative_to(DOCS) for p in DOCS.rglob("*.md") if "_build" not in p.parts)
MODULES = [
    "mmapkit",
    *(
        f"mmapkit.{p.stem}"
        for p in sorted((ROOT / "python" / "mmapkit").glob("*.py"))
        if p.stem != "__init__" and p.stem not in ("torch", "dask")
    ),
]


def code_blocks(text: str) -> list[tuple[str, str]]:
    """The page's fenced blocks as (language, body), in order."""
    return [(m.group(1), m.group(2)) for m in FENCE.finditer(text)]


def console_steps(body: str) -> list[tuple[str, str]]:
    """(command, expected output) pairs of a console block: ``$ `` lines and what follows."""
    steps: list[tuple[str, list[str]]] = []
    for line in body.splitlines():
        if line.startswith("$ "):
            steps.append((line[2:], []))
        else:
            assert steps, f"console block starts with output: {line!r}"
            steps[-1][1].append(line)
    return [(cmd, "".join(f"{o}\n" for o in out)) for cmd, out in steps]


def test_the_pages_have_examples():
    """The extraction finds the guide's examples (a broken pattern must not pass on none)."""
    langs = [lang for page in PAGES for lang, _ in code_blocks((DOCS / page).read_text())]
    assert langs.count("python") >= 10 and langs.count("console") >= 4
    assert MODULES.count("mmapkit.stats") == 1


@pytest.mark.parametrize("page", PAGES, ids=str)
def test_page_examples_run(page, tmp_path):
    if not CLI.is_file():
        pytest.fail(f"no CLI at {CLI}: build it (make cli) or set MMAPKIT_CLI")
    if "mmapkit-kv" in (DOCS / page).read_text() and not KV.is_file():
        pytest.fail(f"no mmapkit-kv at {KV}: build it (cargo build -p mmapkit-raft)")
    path = os.pathsep.join([str(CLI.parent), str(KV.parent), os.environ["PATH"]])
    env = {**os.environ, "PATH": path}
    namespace: dict[str, object] = {"__name__": "__docs__"}
    cwd = Path.cwd()
    os.chdir(tmp_path)
    try:
        for n, (lang, body) in enumerate(code_blocks((DOCS / page).read_text())):
            where = f"{page}, block {n + 1} ({lang})"
            assert lang in RUN or lang in NOT_CODE, f"{where}: an example in no runnable language"
            if lang == "python":
                # Registered so that a failure's traceback shows the example's lines.
                linecache.cache[where] = (len(body), None, body.splitlines(True), where)
                exec(compile(body, where, "exec"), namespace)
            elif lang == "console":
                for cmd, expected in console_steps(body):
                    r = subprocess.run(
                        ["bash", "-c", f"set -o pipefail; {cmd}"],
                        env=env,
                        capture_output=True,
                        text=True,
                        check=False,
                        timeout=120,
                    )
                    assert r.returncode == 0, (where, cmd, r.stderr)
                    if expected:
                        assert r.stdout == expected, (where, cmd)
    finally:
        os.chdir(cwd)
        # Servers a page started in the background (`& echo $! >NAME.pid`).
        for pid in tmp_path.glob("*.pid"):
            with contextlib.suppress(ValueError, ProcessLookupError):
                os.kill(int(pid.read_text()), signal.SIGKILL)


@pytest.mark.parametrize(
    "module",
    [
        *MODULES,
        pytest.param(
            "mmapkit.torch",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("torch") is None, reason="torch extra not installed"
            ),
        ),
        pytest.param(
            "mmapkit.dask",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("dask") is None, reason="dask extra not installed"
            ),
        ),
    ],
)
def test_docstring_examples_run(module, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # The shared-memory example names its segment "frames" (a docstring reads
    # better without a pid in it): a run killed inside it leaves the name behind,
    # and `create` then rightly refuses it, so a stale one goes first.
    if module == "mmapkit.shared_memory":
        Path(mmapkit._native.segment_path("frames")).unlink(missing_ok=True)
    mod = importlib.import_module(module)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    tests = finder.find(mod, module, globs={"mmapkit": mmapkit, "np": __import__("numpy")})
    # The native classes' docstrings too, for the package (they live in mmapkit._native).
    if module == "mmapkit":
        for name in mmapkit.__all__:
            obj = getattr(mmapkit, name)
            if getattr(obj, "__module__", "").startswith("mmapkit._native") or (
                isinstance(obj, type) and obj.__module__ == "mmapkit"
            ):
                tests += finder.find(obj, f"mmapkit.{name}", globs={"mmapkit": mmapkit})
    for t in tests:
        runner.run(t)
    result = runner.summarize(verbose=False)
    assert result.failed == 0, f"{result.failed} of {result.attempted} examples failed (above)"

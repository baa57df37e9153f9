"""Who the suites measure, in one place: where the command-line tools are found (the
mmapkit CLI, ripgrep/sd from `make bench-tools`, the GNU tools), how mmapkit's Python
package is imported, whether each can run, and contenders made from a table of
commands (one argv per task, from which both what is timed and what the report shows
are derived).
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .harness import REPO_DIR, tool_version
from .suite import Contender, Unavailable

TOOLS_DIR = REPO_DIR / ".venv" / "tools" / "bin"
TOOLS_HINT = "make bench-tools installs it into .venv/tools"
DEFAULT_MMAPKIT = REPO_DIR / "target" / "release" / "mmapkit"

# Every command runs with LC_ALL=C (the GNU tools' fastest mode) and finds the bench
# tools first.
ENV = {
    **os.environ,
    "LC_ALL": "C",
    "PATH": os.pathsep.join([str(TOOLS_DIR), os.environ.get("PATH", "")]),
}
ENV.pop("LANGUAGE", None)

# --------------------------------------------------------------------------- tools


def tool(name: str) -> str | None:
    """Absolute path of a tool: .venv/tools/bin first, then PATH."""
    local = TOOLS_DIR / name
    if local.is_file() and os.access(local, os.X_OK):
        return str(local)
    return shutil.which(name)


def need_tool(name: str) -> str:
    """tool(), for the contenders' factories (called only when available)."""
    path = tool(name)
    if path is None:
        raise Unavailable(f"{name} not found")
    return path


@dataclass(frozen=True)
class Peer:
    """A command-line peer the suites' command tables are written for: the first line of
    its ``--version`` starts with ``family`` and a version at least ``minimum``."""

    family: str
    minimum: tuple[int, ...]
    hint: str


GNU_HINT = "apt-get install coreutils grep sed"

# Every command-line peer, with the versions its table's options need: one found with
# another (e.g. Debian's sd 0.7.6 first on PATH, which has no -F) is shown as n/a with
# the version found, never run.
PEERS = {
    "rg": Peer("ripgrep", (15,), TOOLS_HINT),
    "sd": Peer("sd", (1,), TOOLS_HINT),
    "grep": Peer("grep (GNU grep)", (3,), GNU_HINT),
    "sed": Peer("sed (GNU sed)", (4, 8), GNU_HINT),
    "wc": Peer("wc (GNU coreutils)", (8,), GNU_HINT),
    "tr": Peer("tr (GNU coreutils)", (8,), GNU_HINT),
}


def peer_available(name: str) -> Callable[[], str | None]:
    """An ``available()`` check for a contender that runs the peer ``name`` (of
    :data:`PEERS`): None when it is found with a version its table fits, else why not."""
    peer = PEERS[name]
    wanted = f"{peer.family} {'.'.join(map(str, peer.minimum))} or later"

    def check() -> str | None:
        path = tool(name)
        if path is None:
            return f"{name} not installed ({peer.hint})"
        line = tool_version([path, "--version"], ENV)
        # GNU tools name themselves by the path they were run as.
        m = re.match(rf"(?:\S*/)?{re.escape(peer.family)} v?(\d+(?:\.\d+)*)", line)
        if m is None:
            return f"{path} is not {wanted} (its --version says {line!r}; {peer.hint})"
        if tuple(int(x) for x in m.group(1).split(".")) < peer.minimum:
            return f"{path} is {peer.family} {m.group(1)}, not {wanted} ({peer.hint})"
        return None

    return check


# --------------------------------------------------------------------------- mmapkit


def mmapkit_bin() -> Path:
    """The mmapkit CLI measured: $MMAPKIT_BIN, default target/release/mmapkit."""
    return Path(os.environ.get("MMAPKIT_BIN") or DEFAULT_MMAPKIT)


def mmapkit_cli_available() -> str | None:
    """None when the release build of the ``mmapkit`` CLI exists, else how to build it."""
    exe = mmapkit_bin()
    if not exe.is_file():
        return (
            f"{exe} not built (make cli)"
            if exe == DEFAULT_MMAPKIT
            else f"MMAPKIT_BIN={exe} does not exist"
        )
    try:
        p = subprocess.run(
            [str(exe), "count", "--lines", str(REPO_DIR / "Cargo.toml")],
            capture_output=True,
            text=True,
            timeout=30,
            env=ENV,
            check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{exe} does not run ({exc})"
    if p.returncode != 0 or not p.stdout.strip().isdigit():
        msg = " ".join((p.stderr or p.stdout).split())[:120]
        return f"this mmapkit has no `count --lines` (exit {p.returncode}: {msg})"
    return None


def mmapkit_module(*submodules: str) -> Any:
    """The mmapkit Python package (and its `submodules`), or Unavailable."""
    try:
        import importlib

        import mmapkit

        for sub in submodules:
            importlib.import_module(f"mmapkit.{sub}")
    except Exception as exc:
        raise Unavailable(f"mmapkit not importable ({type(exc).__name__}: {exc})") from exc
    return mmapkit


def mmapkit_has(*names: str, submodules: Sequence[str] = ()) -> Callable[[], str | None]:
    """Contender.available: the mmapkit package imports and has all of `names`."""

    def available() -> str | None:
        try:
            mk = mmapkit_module(*submodules)
        except Unavailable as exc:
            return str(exc)
        gone = [n for n in names if not hasattr(mk, n)]
        return f"mmapkit has no {', '.join(gone)} (not built on this branch)" if gone else None

    return available


# --------------------------------------------------------------------------- command tables

# task -> (runner, arguments after the program); the runner gets the argv (placeholders
# filled in) and the path the task works on, runs it and returns the answer
Runner = Callable[[list[str], Path], Any]
Table = dict[str, tuple[Runner, Sequence[str]]]


def command_contender(
    name: str,
    program: str | Callable[[], str],
    table: Table,
    *,
    fill: Callable[[str, Path], str],
    shown: str | None = None,
    commands: dict[str, str] | None = None,
    available: Callable[[], str | None] = lambda: None,
    note: str = "",
) -> Contender:
    """A contender that runs one command per task.

    `program` is the executable (or a factory of its path, called once the contender is
    available); `fill(arg, path)` replaces the placeholders of the arguments (e.g.
    FILE) for the path of a run. The report shows each command as `shown` (the
    program's short name, default `name`) + the arguments with their placeholders;
    `commands` overrides that for tasks whose command is not just argv (redirections).
    """

    def impls() -> dict[str, Callable[[Path], Any]]:
        exe = program() if callable(program) else program

        def bind(run: Runner, args: Sequence[str]) -> Callable[[Path], Any]:
            return lambda p: run([exe, *(fill(a, p) for a in args)], p)

        return {task: bind(run, args) for task, (run, args) in table.items()}

    shown_cmds = {task: shlex.join([shown or name, *args]) for task, (_run, args) in table.items()}
    return Contender(
        name, impls, available=available, note=note, commands={**shown_cmds, **(commands or {})}
    )


# --------------------------------------------------------------------------- in-process contenders


class Registry:
    """In-process contenders declared where they are implemented: ``@reg.add(name,
    task, note=...)`` on the function that does the task for that contender. The
    contenders come out in the order they were first named."""

    def __init__(self) -> None:
        self._specs: dict[str, dict[str, Any]] = {}

    def add(
        self,
        name: str,
        task: str,
        note: str = "",
        available: Callable[[], str | None] | None = None,
    ) -> Callable[[Callable], Callable]:
        """A decorator registering its function as contender ``name``'s implementation of ``task``
        (a given ``note`` or ``available`` replaces the earlier one).
        """

        def register(fn: Callable[[Path], Any]) -> Callable[[Path], Any]:
            spec = self._specs.setdefault(name, {"impls": {}, "note": "", "available": None})
            spec["impls"][task] = fn
            spec["note"] = note or spec["note"]
            spec["available"] = available or spec["available"]
            return fn

        return register

    def contenders(self) -> tuple[Contender, ...]:
        """The registered contenders, in registration order."""
        return tuple(
            Contender(
                name, dict(s["impls"]), available=s["available"] or (lambda: None), note=s["note"]
            )
            for name, s in self._specs.items()
        )

"""The bench harness checks every command-line peer's version (`bench.contenders.PEERS`):
one found with another version than its command table is written for is shown as n/a
with the version found, and never run, so it cannot fail the suite (Debian's sd 0.7.6
first on PATH has no -F)."""

import os
from pathlib import Path

import pytest

from bench import contenders
from bench.harness import RunOptions, failures, run_suite
from bench.suites.files import FilesSuite


@pytest.fixture
def fake_first_on_path(tmp_path, monkeypatch):
    """Puts fake tools first on PATH (and hides .venv/tools): each prints `line` for
    --version and fails on anything else, as a tool without the table's options does."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    monkeypatch.setattr(contenders, "TOOLS_DIR", tmp_path / "no-tools")
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def install(name: str, line: str) -> Path:
        exe = bin_dir / name
        exe.write_text(
            f"#!/bin/sh\n[ \"$1\" = --version ] && echo '{line}' && exit 0\n"
            f"echo 'error: unexpected argument' >&2\nexit 2\n"
        )
        exe.chmod(0o755)
        return exe

    return install


@pytest.mark.parametrize(
    ("line", "why"),
    [
        ("sd 0.7.6", "is sd 0.7.6, not sd 1 or later"),
        ("sd-tool 2.0 (another program)", "is not sd 1 or later"),
    ],
)
def test_a_peer_of_another_version_is_shown_na_not_run(fake_first_on_path, tmp_path, line, why):
    exe = fake_first_on_path("sd", line)
    doc = run_suite(
        FilesSuite(),
        RunOptions(
            repeat=1,
            caches=("warm",),
            sizes=["small"],
            tasks=["replace_same"],
            contenders=["sd"],
            data_dir=tmp_path / "data",
        ),
    )
    cells = [c for c in doc["results"] if c["contender"] == "sd" and c["cache"] == "warm"]
    assert [(c["status"], f"{exe} {why}" in c["reason"]) for c in cells] == [("n/a", True)], cells
    assert not failures(doc)


def test_a_peer_of_a_fitting_version_is_available(fake_first_on_path):
    fake_first_on_path("sd", "sd 1.0.0")
    fake_first_on_path("rg", "ripgrep 15.1.0 (rev abc)")
    assert contenders.peer_available("sd")() is None
    assert contenders.peer_available("rg")() is None
    fake_first_on_path("rg", "ripgrep 14.1.1")
    assert "is ripgrep 14.1.1, not ripgrep 15 or later" in (contenders.peer_available("rg")() or "")

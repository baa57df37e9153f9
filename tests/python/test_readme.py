"""The README's quick-starts must really run."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_readme_starts_with_the_two_commands():
    first = blocks("sh")[0]
    assert first.splitlines()[0].startswith("make run") and "make test" in first.splitlines()[1]


def test_python_quickstart_runs():
    (code,) = blocks("python")
    exec(compile(code, "README.md", "exec"), {})


def test_cli_quickstart_runs():
    (console,) = blocks("console")
    for line in console.splitlines():
        cmd = line.removeprefix("$ ").split("#")[0].strip()
        if cmd.startswith("cargo build"):
            continue  # make test builds the CLI before pytest runs
        r = subprocess.run(cmd, shell=True, cwd=ROOT, capture_output=True, text=True)
        assert r.returncode == 0, (cmd, r.stderr)
        assert "Cargo.toml" in r.stdout

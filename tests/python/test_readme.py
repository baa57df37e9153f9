"""The README's quick-starts must really run."""

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.DOTALL)


def test_readme_starts_with_the_two_commands():
    first = blocks("sh")[0]
    assert first.splitlines()[0].startswith("make run") and "make test" in first.splitlines()[1]


def test_python_quickstart_runs():
    (code,) = blocks("python")
    exec(compile(code, "README.md", "exec"), {})


def run_cli_quickstart(cwd, mmapkit: str, env=None) -> None:
    """Runs the README's `console` block in `cwd` with `mmapkit` for the CLI, and checks it."""
    (console,) = blocks("console")
    outputs = []
    for line in console.splitlines():
        cmd = line.removeprefix("$ ").split("  #")[0].strip()
        if cmd.startswith("cargo build"):
            continue  # make test builds the CLI before pytest runs
        cmd = cmd.replace("target/release/mmapkit", mmapkit)
        r = subprocess.run(
            cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, (cmd, r.stderr)
        outputs.append(r.stdout)
    assert outputs[1] == "4\n"  # count --lines
    assert outputs[2] == "3:2,bob\n4:3,bea\n"  # grep -n
    assert (Path(cwd) / "demo.csv").read_text() == "id;name\n1;ann\n"


def test_cli_quickstart_runs(tmp_path):
    run_cli_quickstart(tmp_path, str(ROOT / "target" / "release" / "mmapkit"))

"""The wheel of `make dist`, installed into a fresh venv, runs the README's quick-starts:
`import mmapkit` and the `mmapkit` command it puts on PATH, with no source tree in sight."""

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from test_readme import ROOT, blocks, run_cli_quickstart

WHEELS = ROOT / "target" / "wheels"


def newest_wheel() -> Path | None:
    wheels = sorted(WHEELS.glob("mmapkit-*.whl"), key=lambda p: p.stat().st_mtime)
    return wheels[-1] if wheels else None


@pytest.fixture(scope="module")
def wheel() -> Path:
    # `make test` runs `make dist` first; a bare pytest run builds it once.
    if newest_wheel() is None:
        subprocess.run(["make", "dist"], cwd=ROOT, check=True)
    found = newest_wheel()
    assert found is not None, f"make dist left no wheel in {WHEELS}"
    return found


@pytest.fixture(scope="module")
def venv(wheel, tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages) with the wheel and, from pip, numpy."""
    root = tmp_path_factory.mktemp("wheel") / "venv"
    subprocess.run([sys.executable, "-m", "venv", root], check=True)
    subprocess.run(
        [
            root / "bin" / "python",
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            wheel,
        ],
        check=True,
        env=clean_env(root),
    )
    return root


def clean_env(venv: Path) -> dict[str, str]:
    """The environment of a user of that venv: its bin/ first, nothing of this checkout."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def test_wheel_is_abi3_with_the_cli_as_a_script(wheel):
    assert "-cp311-abi3-" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    scripts = [n for n in names if ".data/scripts/" in n]
    assert [n.rsplit("/", 1)[1] for n in scripts] == ["mmapkit"], names
    assert any(n.startswith("mmapkit/_native") and n.endswith(".so") for n in names), names
    # The binary is executable inside the wheel (pip keeps the mode bits).
    info = zipfile.ZipFile(wheel).getinfo(scripts[0])
    assert (info.external_attr >> 16) & 0o111, oct(info.external_attr >> 16)


def test_installed_package_is_the_wheels_not_the_source_tree(venv, tmp_path):
    code = "import mmapkit, sys; print(mmapkit.__file__); print(*sys.path, sep='\\n')"
    r = subprocess.run(
        [venv / "bin" / "python", "-I", "-c", code],
        cwd=tmp_path,
        env=clean_env(venv),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr
    module, *path = r.stdout.splitlines()
    assert Path(module).is_relative_to(venv), module
    assert not any(p and Path(p).resolve().is_relative_to(ROOT) for p in path), path


def test_python_quickstart_runs_from_the_wheel(venv, tmp_path):
    (code,) = blocks("python")
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    # -I: neither the script's directory nor PYTHONPATH nor user site on sys.path.
    r = subprocess.run(
        [venv / "bin" / "python", "-I", script],
        cwd=tmp_path,
        env=clean_env(venv),
        capture_output=True,
        text=True,
        check=False,
    )
    assert r.returncode == 0, r.stderr


def test_cli_quickstart_runs_from_the_wheel(venv, tmp_path):
    env = clean_env(venv)
    assert shutil.which("mmapkit", path=env["PATH"]) == str(venv / "bin" / "mmapkit")
    run_cli_quickstart(tmp_path, "mmapkit", env=env)

"""What a user installs, each into a fresh venv, runs the README's quick-starts as written:
the wheel of `make dist`, its sdist (`pip install mmapkit-*.tar.gz`) and the checkout
(`pip install .`): `import mmapkit`, and the `mmapkit` command pip puts on PATH, with no
source tree in sight and no development dependency installed.

The two builds from source run as a user's do (pip's isolated build env, maturin from
PyPI, the build backend in build_backend/), with the checkout's cargo target dir, so they
reuse what `make dist` compiled: cargo hashes path crates relative to the workspace root,
so even the sdist, unpacked elsewhere, finds its crates fresh (a file it lacked would
still fail the build: cargo checks every source file the build read). About 1.5 minutes
for the whole module on 2 busy cores, mostly pip.
"""

import os
import shutil
import subprocess
import sys
import tarfile
import time
import tomllib
import zipfile
from pathlib import Path

import pytest
from test_readme import ROOT, blocks, run_cli_quickstart

WHEELS = ROOT / "target" / "dist"


def newest(pattern: str) -> Path | None:
    found = sorted(WHEELS.glob(pattern), key=lambda p: p.stat().st_mtime)
    return found[-1] if found else None


@pytest.fixture(scope="module")
def dist() -> tuple[Path, Path]:
    """The wheel and the sdist of `make dist` (`make test` runs it first; a bare pytest
    run builds them once)."""
    if newest("mmapkit-*.whl") is None or newest("mmapkit-*.tar.gz") is None:
        subprocess.run(["make", "dist"], cwd=ROOT, check=True)
    wheel, sdist = newest("mmapkit-*.whl"), newest("mmapkit-*.tar.gz")
    assert wheel is not None and sdist is not None, f"make dist left no wheel or sdist in {WHEELS}"
    return wheel, sdist


@pytest.fixture(scope="module")
def wheel(dist) -> Path:
    return dist[0]


@pytest.fixture(scope="module")
def sdist(dist) -> Path:
    return dist[1]


def clean_env(venv: Path) -> dict[str, str]:
    """The environment of a user of that venv: its bin/ first, nothing of this checkout."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")
    }
    env["PATH"] = os.pathsep.join([str(venv / "bin"), "/usr/local/bin", "/usr/bin", "/bin"])
    env["VIRTUAL_ENV"] = str(venv)
    return env


def build_env(venv: Path) -> dict[str, str]:
    """The user's environment, with cargo (a user building from source has Rust) and this
    checkout's cargo target dir, whose dependencies are built already."""
    env = clean_env(venv)
    cargo = shutil.which("cargo")
    assert cargo is not None, "building from source needs cargo on PATH"
    env["PATH"] = os.pathsep.join([env["PATH"], str(Path(cargo).parent)])
    env.setdefault("CARGO_TARGET_DIR", str(ROOT / "target"))
    return env


@pytest.fixture(scope="module", params=["wheel", "sdist", "checkout"])
def venv(request, dist, tmp_path_factory) -> Path:
    """A fresh venv (no system site-packages) with mmapkit from the wheel, the sdist or
    the checkout, and numpy from pip."""
    what = {"wheel": dist[0], "sdist": dist[1], "checkout": ROOT}[request.param]
    root = tmp_path_factory.mktemp(request.param) / "venv"
    subprocess.run([sys.executable, "-m", "venv", root], check=True)
    pip = [
        root / "bin" / "python",
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
    ]
    if request.param != "wheel":
        # pip caches the wheel it builds from an sdist, keyed by the file's path: without
        # this, a later run would install the last run's build instead of building.
        pip.append("--no-cache-dir")
    start = time.monotonic()
    subprocess.run(
        [*pip, what],
        check=True,
        cwd=root,
        env=build_env(root),
    )
    print(f"pip install {request.param}: {time.monotonic() - start:.0f} s")
    return root


def run(venv: Path, *args, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        args, cwd=cwd, env=clean_env(venv), input=stdin, capture_output=True, text=True, check=False
    )


def test_wheel_is_abi3_with_the_cli_as_a_script(wheel):
    assert "-cp311-abi3-" in wheel.name, wheel.name
    names = zipfile.ZipFile(wheel).namelist()
    scripts = [n for n in names if ".data/scripts/" in n]
    assert [n.rsplit("/", 1)[1] for n in scripts] == ["mmapkit"], names
    assert any(n.startswith("mmapkit/_native") and n.endswith(".so") for n in names), names
    # The binary is executable inside the wheel (pip keeps the mode bits).
    info = zipfile.ZipFile(wheel).getinfo(scripts[0])
    assert (info.external_attr >> 16) & 0o111, oct(info.external_attr >> 16)


def test_sdist_builds_the_cli_too(sdist):
    with tarfile.open(sdist) as tar:
        top = tar.getnames()[0].split("/", 1)[0]
        names = set(tar.getnames())
        manifest = tar.extractfile(f"{top}/Cargo.toml")
        assert manifest is not None
        members = tomllib.loads(manifest.read().decode())["workspace"]["members"]
    assert "crates/mmapkit-cli" in members, members
    for name in ("crates/mmapkit-cli/src/main.rs", "build_backend/mmapkit_build.py"):
        assert f"{top}/{name}" in names, sorted(names)


def test_installed_package_is_not_the_source_tree(venv, tmp_path):
    code = "import mmapkit, sys; print(mmapkit.__file__); print(*sys.path, sep='\\n')"
    r = run(venv, venv / "bin" / "python", "-I", "-c", code, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    module, *path = r.stdout.splitlines()
    assert Path(module).is_relative_to(venv), module
    assert not any(p and Path(p).resolve().is_relative_to(ROOT) for p in path), path


def test_no_development_dependency_is_installed(venv, tmp_path):
    r = run(venv, venv / "bin" / "python", "-m", "pip", "list", "--format=freeze", cwd=tmp_path)
    installed = {line.split("==")[0].lower() for line in r.stdout.split()}
    assert installed.isdisjoint({"pytest", "hypothesis", "mypy", "matplotlib", "maturin"}), (
        installed
    )


def test_python_quickstart_runs(venv, tmp_path):
    (code,) = blocks("python")
    script = tmp_path / "quickstart.py"
    script.write_text(code)
    # -I: neither the script's directory nor PYTHONPATH nor user site on sys.path.
    r = run(venv, venv / "bin" / "python", "-I", script, cwd=tmp_path)
    assert r.returncode == 0, r.stderr


def test_cli_quickstart_runs(venv, tmp_path):
    env = clean_env(venv)
    assert shutil.which("mmapkit", path=env["PATH"]) == str(venv / "bin" / "mmapkit")
    run_cli_quickstart(tmp_path, env)


def test_python_m_mmapkit_is_the_command(venv, tmp_path):
    """`python -m mmapkit` execs the installed binary: same output, same exit codes."""
    (tmp_path / "a.txt").write_text("one\ntwo\n")
    python = venv / "bin" / "python"
    for args in (["count", "--lines", "a.txt"], ["grep", "x", "a.txt"], ["count", "x", "missing"]):
        direct = run(venv, "mmapkit", *args, cwd=tmp_path)
        through = run(venv, python, "-m", "mmapkit", *args, cwd=tmp_path)
        assert (through.returncode, through.stdout) == (direct.returncode, direct.stdout), args
        assert through.stderr == direct.stderr, args
    # The exit codes are the CLI's: 0 found, 1 none, 2 an error.
    assert [
        run(venv, python, "-m", "mmapkit", *a, cwd=tmp_path).returncode
        for a in (["grep", "one", "a.txt"], ["grep", "x", "a.txt"], ["count", "x", "missing"])
    ] == [0, 1, 2]
    # The process becomes the binary (its signals and terminal are the binary's own):
    # while it waits on stdin, /proc shows the binary, not Python.
    proc = subprocess.Popen(
        [python, "-m", "mmapkit", "count", "--lines", "-"],
        cwd=tmp_path,
        env=clean_env(venv),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    binary = (venv / "bin" / "mmapkit").resolve()
    deadline = time.monotonic() + 60
    while Path(f"/proc/{proc.pid}/exe").resolve() != binary and time.monotonic() < deadline:
        time.sleep(0.01)
    assert Path(f"/proc/{proc.pid}/exe").resolve() == binary
    out, _ = proc.communicate("a\nb\nc\n", timeout=60)
    assert (proc.returncode, out) == (0, "3\n")

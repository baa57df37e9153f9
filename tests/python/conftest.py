import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def small_tmpfs():
    """A 1 MiB tmpfs mount (needs root); skips where mounting is not allowed."""
    d = tempfile.mkdtemp(prefix="mmapkit_tmpfs_")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d], capture_output=True)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield Path(d)
    finally:
        subprocess.run(["umount", d], check=False)
        os.rmdir(d)


@pytest.fixture
def run_bench(tmp_path: Path):
    """Runs one benchmark suite (`python -m bench SUITE ... --repeat 1 --cache warm`)
    with its data and results under `tmp_path`; asserts it exited 0 and returns
    the suite's JSON document."""
    root = Path(__file__).resolve().parents[2]

    def run(suite: str, *args: str, env: dict[str, str] | None = None) -> dict:
        r = subprocess.run(
            [sys.executable, "-m", "bench", suite, *args, "--repeat", "1", "--cache", "warm",
             "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path)],
            cwd=root, capture_output=True, text=True, timeout=600,
            env=None if env is None else {**os.environ, **env},
        )
        assert r.returncode == 0, r.stderr[-3000:]
        return json.loads((tmp_path / f"{suite}.json").read_text())

    return run

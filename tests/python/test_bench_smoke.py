"""The benchmark harness runs end to end (tiny size, one repeat) and checks answers."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_pyio_suite_runs_and_verifies(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench", "pyio", "--quick", "--sizes", "small", "--repeat", "1",
         "--cache", "warm", "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "pyio.json").read_text())
    cells = [c for c in doc["results"] if c["size"] == "small" and c["cache"] == "warm"]
    assert len(cells) == 5 * 4 and all(c["status"] == "ok" for c in cells), cells
    assert (tmp_path / "pyio.md").read_text().startswith("# `pyio`")
    assert (tmp_path / "pyio.png").stat().st_size > 10_000


def test_files_suite_runs_and_verifies(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench", "files", "--sizes", "small", "--repeat", "1", "--cache", "warm",
         "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "files.json").read_text())
    mine = [c for c in doc["results"]
            if c["contender"].startswith("mmapkit") and c["size"] == "small" and c["cache"] == "warm"]
    bad = [c for c in mine if c["status"] != "ok" and "no implementation" not in c.get("reason", "")]
    assert not bad, bad
    assert sum(c["status"] == "ok" for c in mine) >= 10

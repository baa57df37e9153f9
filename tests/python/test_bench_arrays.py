"""The `arrays` benchmark suite runs end to end at its small size (one repeat,
warm cache) and every contender that is built gives a verified answer."""

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_arrays_suite_runs_and_verifies(tmp_path):
    r = subprocess.run(
        [sys.executable, "-m", "bench", "arrays", "--sizes", "small", "--repeat", "1", "--cache", "warm",
         "--data-dir", str(tmp_path / "data"), "--results-dir", str(tmp_path)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads((tmp_path / "arrays.json").read_text())
    cells = [c for c in doc["results"] if c["size"] == "small" and c["cache"] == "warm"]
    bad = [c for c in cells if c["status"] in ("error", "wrong")]
    assert not bad, bad
    ok = {(c["task"], c["contender"]) for c in cells if c["status"] == "ok"}
    # The numpy peers, the article's estimator and mmapkit.stats always run.
    for want in [("open_sum", "np.loadtxt"), ("open_sum", "mmapkit.stats"), ("read", "read loop"),
                 ("median", "np.median"), ("median", "pool median of medians"),
                 ("median", "mmapkit.stats.median"), ("handoff", "pickle"),
                 ("handoff", "shared_memory"), ("sparse", "np.memmap w+")]:
        assert want in ok, (want, sorted(ok))
    median = next(c for c in cells if c["task"] == "median" and c["contender"] == "pool median of medians")
    assert median["metrics"]["error"]["max"] <= 64
    assert (tmp_path / "arrays.md").read_text().startswith("# `arrays`")

"""The benchmark suites run end to end (small sizes, one repeat, warm cache) through
`python -m bench`, and every contender that is built gives a verified answer."""

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def run_bench(tmp_path: Path, suite: str, *args: str, env: dict | None = None) -> dict:
    """Runs one suite into tmp_path; returns its results document."""
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench",
            suite,
            *args,
            "--repeat",
            "1",
            "--cache",
            "warm",
            "--data-dir",
            str(tmp_path / "data"),
            "--results-dir",
            str(tmp_path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, **(env or {})},
        check=False,
    )
    assert r.returncode == 0, r.stderr[-3000:]
    assert (tmp_path / f"{suite}.md").read_text().startswith(f"# `{suite}`")
    return json.loads((tmp_path / f"{suite}.json").read_text())


def warm(doc: dict, size: str | None = None) -> list[dict]:
    return [c for c in doc["results"] if c["cache"] == "warm" and size in (None, c["size"])]


def not_ok(cells: list[dict]) -> list[dict]:
    """Cells that failed (a contender without this task is not a failure)."""
    return [
        c for c in cells if c["status"] != "ok" and "no implementation" not in c.get("reason", "")
    ]


def ran_right(cells: list[dict], *wanted: tuple[str, str]) -> None:
    """No cell failed or answered wrong (an unavailable peer is n/a, not a
    failure), and each ``(task, contender)`` of ``wanted`` ran ok."""
    bad = [c for c in cells if c["status"] in ("error", "wrong")]
    assert not bad, bad
    ok = {(c["task"], c["contender"]) for c in cells if c["status"] == "ok"}
    for want in wanted:
        assert want in ok, (want, sorted(ok))


def test_pyio_suite_runs_and_verifies(tmp_path):
    doc = run_bench(tmp_path, "pyio", "--quick", "--sizes", "small")
    cells = warm(doc, "small")
    assert len(cells) == 5 * 4 and all(c["status"] == "ok" for c in cells), cells
    assert (tmp_path / "pyio.png").stat().st_size > 10_000


def test_files_suite_runs_and_verifies(tmp_path):
    doc = run_bench(tmp_path, "files", "--sizes", "small")
    mine = [c for c in warm(doc, "small") if c["contender"].startswith("mmapkit")]
    assert not not_ok(mine), not_ok(mine)
    assert sum(c["status"] == "ok" for c in mine) >= 10


def test_arrays_suite_runs_and_verifies(tmp_path):
    doc = run_bench(tmp_path, "arrays", "--sizes", "small")
    cells = warm(doc, "small")
    # The numpy peers, the article's estimator and mmapkit.stats always run.
    ran_right(
        cells,
        ("open_sum", "np.loadtxt"),
        ("open_sum", "mmapkit.stats"),
        ("read", "read loop"),
        ("median", "np.median"),
        ("median", "pool median of medians"),
        ("median", "mmapkit.stats.median"),
        ("handoff", "pickle"),
        ("handoff", "shared_memory"),
        ("sparse", "np.memmap w+"),
    )
    median = next(
        c for c in cells if c["task"] == "median" and c["contender"] == "pool median of medians"
    )
    assert median["metrics"]["error"]["max"] <= 64


def test_kmers_suite_runs_and_verifies(tmp_path):
    doc = run_bench(tmp_path, "kmers", env={"KMERS_BENCH_READS": "2000"})
    cells = warm(doc)
    assert not not_ok(cells), not_ok(cells)
    # 5 mmapkit variants x 2 tasks + kmertools x2 (csv) + pykmertools, numpy (npy), x 2 sizes
    assert sum(c["status"] == "ok" for c in cells) == 2 * (10 + 2 + 2)
    ok = [c for c in cells if c["status"] == "ok"]
    assert all(c["metrics"]["peak_rss"]["max"] > 1 << 20 for c in ok)
    assert len(doc["targets"]) == 4
    assert (tmp_path / "kmers.png").stat().st_size > 10_000
    assert not list((tmp_path / "data" / "kmers-out").iterdir()), "outputs are deleted after checks"


def test_features_suite_runs_and_verifies(tmp_path):
    # q64 (training, DataLoader) and the 64 MiB dask median; contenders whose library
    # (torch, dask, scikit-learn) is missing are n/a, never failures.
    doc = run_bench(tmp_path, "features", "--quick", "--sizes", "q64,qdask")
    cells = warm(doc)
    ran_right(
        cells,
        ("train", "np.memmap + numpy"),
        ("train", "text store (article)"),
        ("train", "mmapkit sequential"),
        ("train", "mmapkit shuffled"),
    )
    train = [c for c in cells if c["task"] == "train" and c["status"] == "ok"]
    assert all(c["metrics"]["accuracy"]["max"] > 0.6 for c in train)
    assert (tmp_path / "features.png").stat().st_size > 10_000

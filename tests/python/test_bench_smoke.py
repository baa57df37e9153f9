"""The benchmark harness runs end to end (tiny size, one repeat) and checks answers."""


def test_pyio_suite_runs_and_verifies(tmp_path, run_bench):
    doc = run_bench("pyio", "--quick", "--sizes", "small")
    cells = [c for c in doc["results"] if c["size"] == "small" and c["cache"] == "warm"]
    assert len(cells) == 5 * 4 and all(c["status"] == "ok" for c in cells), cells
    assert (tmp_path / "pyio.md").read_text().startswith("# `pyio`")
    assert (tmp_path / "pyio.png").stat().st_size > 10_000


def test_files_suite_runs_and_verifies(tmp_path, run_bench):
    doc = run_bench("files", "--sizes", "small")
    mine = [c for c in doc["results"]
            if c["contender"].startswith("mmapkit") and c["size"] == "small" and c["cache"] == "warm"]
    bad = [c for c in mine if c["status"] != "ok" and "no implementation" not in c.get("reason", "")]
    assert not bad, bad
    assert sum(c["status"] == "ok" for c in mine) >= 10

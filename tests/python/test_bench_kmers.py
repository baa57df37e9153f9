"""The `kmers` benchmark suite runs end to end on a tiny input and verifies every answer."""


def test_kmers_suite_runs_and_verifies(tmp_path, run_bench):
    doc = run_bench("kmers", env={"KMERS_BENCH_READS": "2000"})
    warm = [c for c in doc["results"] if c["cache"] == "warm"]
    bad = [c for c in warm if c["status"] != "ok" and "no implementation" not in c.get("reason", "")]
    assert not bad, bad
    # 5 mmapkit variants x 2 tasks + kmertools x2 (csv) + pykmertools, numpy (npy), x 2 sizes
    assert sum(c["status"] == "ok" for c in warm) == 2 * (10 + 2 + 2)
    ok = [c for c in warm if c["status"] == "ok"]
    assert all(c["metrics"]["peak_rss"]["max"] > 1 << 20 for c in ok)
    assert len(doc["targets"]) == 4
    assert (tmp_path / "kmers.md").read_text().startswith("# `kmers`")
    assert (tmp_path / "kmers.png").stat().st_size > 10_000
    assert not list((tmp_path / "data" / "kmers-out").iterdir()), "outputs are deleted after checks"

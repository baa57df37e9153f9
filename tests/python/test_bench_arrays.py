"""The `arrays` benchmark suite runs end to end at its small size (one repeat,
warm cache) and every contender that is built gives a verified answer."""


def test_arrays_suite_runs_and_verifies(tmp_path, run_bench):
    doc = run_bench("arrays", "--sizes", "small")
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

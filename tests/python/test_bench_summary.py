"""The benchmarks' headline (summary line, README table) and where quick runs write."""

import json
from pathlib import Path

import pytest

import bench.__main__ as cli
from bench.report import README_END, README_START, headline, headline_text, update_readme

SPEC = {
    "capability": "write-ahead log",
    "label": "append",
    "task": "append",
    "contender": "mmapkit",
    "peers": ["slow", "fast", "broken"],
    "sizes": ["big"],
}


def _doc(times: dict[str, float | None], mode: str = "full") -> dict:
    results = []
    for size in ("tiny", "big"):
        for name, t in times.items():
            cell = {
                "size": size,
                "task": "append",
                "contender": name,
                "cache": "warm",
                "status": "ok" if t is not None else "error",
                "reason": "",
            }
            if t is not None:
                cell["median"] = t * (100 if size == "tiny" else 1)  # tiny must not be used
            results.append(cell)
    return {
        "suite": "log",
        "title": "commit log",
        "mode": mode,
        "headline_spec": SPEC,
        "sizes": [
            {"label": "tiny", "nbytes": 1000, "human": "1 kB"},
            {"label": "big", "nbytes": 5_000_000, "human": "5 MB"},
        ],
        "machine": {"date": "2026-11-22T10:00:00+00:00", "cores": 2},
        "results": results,
    }


def test_headline_is_mmapkit_vs_the_fastest_measured_peer():
    h = headline(
        _doc({"mmapkit": 0.0173, "slow": 0.05, "fast": 0.0183, "broken": None, "baseline": 0.001})
    )
    assert (h["peer"], h["size"], h["cache"]) == ("fast", "big", "warm")
    assert h["ratio"] == pytest.approx(0.0173 / 0.0183)
    assert headline_text(h) == (
        "log: append (5 MB, warm) — mmapkit 17.3 ms vs best peer fast 18.3 ms (0.95×)"
    )


def test_headline_without_a_measured_side_says_why():
    h = headline(_doc({"mmapkit": None, "slow": 0.05}))
    assert h["ratio"] is None and "mmapkit not measured" in headline_text(h)
    h = headline(_doc({"mmapkit": 0.01, "broken": None}))
    assert h["ratio"] is None and "no peer measured" in headline_text(h)


def test_readme_section_is_one_headline_table(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "log.json").write_text(json.dumps(_doc({"mmapkit": 0.0173, "fast": 0.0183})))
    old = _doc({"mmapkit": 2.0, "fast": 1.0})
    del old["headline_spec"]  # written before the runner stored the spec
    old["suite"] = "arrays"
    (results / "arrays.json").write_text(json.dumps(old))
    for name in ("arrays", "log", "kmers"):  # kmers: plotted, but has no results here
        (results / f"{name}.png").write_bytes(b"png")
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n{README_START}\nold tables\n{README_END}\n\nafter\n")
    assert update_readme(readme, results, {"arrays": SPEC})
    text = readme.read_text()
    section = text.split(README_START)[1].split(README_END)[0]
    assert "old tables" not in section and text.endswith(f"{README_END}\n\nafter\n")
    rows = [line for line in section.splitlines() if line.startswith("| ")]
    assert rows[0].startswith("| capability | measured | mmapkit | best peer | ratio |")
    assert len(rows) == 3  # header + one row per suite, no per-suite tables
    assert "`mmapkit` 2.00 s | `fast` 1.00 s | **2.00×** | [bench/results/arrays.md]" in section
    assert "**0.95×**" in section
    # only the chosen plots (README_PLOTS) of suites that have results
    assert section.count("![") == 1 and "![arrays](bench/results/arrays.png)" in section


def test_quick_run_writes_beside_the_full_results_and_ends_with_the_summary(
    tmp_path, monkeypatch, capsys
):
    full, quick = tmp_path / "results", tmp_path / "results" / "quick"
    monkeypatch.setattr(cli, "RESULTS_DIR", full)
    monkeypatch.setattr(cli, "QUICK_RESULTS_DIR", quick)
    readme = Path(cli.REPO_DIR / "README.md")
    before = readme.read_text()
    rc = cli.main(
        [
            "pyio",
            "--quick",
            "--sizes",
            "small",
            "--repeat",
            "1",
            "--data-dir",
            str(tmp_path / "data"),
        ]
    )
    assert rc == 0
    assert (quick / "pyio.json").exists() and (quick / "pyio.md").exists()
    assert not (full / "pyio.json").exists()
    doc = json.loads((quick / "pyio.json").read_text())
    assert doc["mode"] == "quick" and {
        r["cache"] for r in doc["results"] if r["status"] == "ok"
    } == {"warm"}
    out = capsys.readouterr().out
    summary = out[out.rindex("summary") :]
    assert headline_text(headline(doc)) in summary
    assert f"{quick}/SUITE.md" in summary or "quick/SUITE.md" in summary
    assert readme.read_text() == before  # quick numbers never reach the README


def test_summary_names_the_suites_that_failed():
    doc = _doc({"mmapkit": 0.0173, "fast": 0.0183})
    text = cli._summary({"log": doc}, ["log", "kmers"], Path("/r"), 1.0)
    assert headline_text(headline(doc)) in text
    assert "log: FAILED: wrong answers" in text and "kmers: FAILED to run" in text

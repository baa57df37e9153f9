"""Command line: python -m bench SUITE|all [--quick] [--repeat N] ... | --list"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback
from pathlib import Path

from . import suites
from .harness import (
    CACHES,
    DATA_DIR,
    QUICK_RESULTS_DIR,
    REPO_DIR,
    RESULTS_DIR,
    RunOptions,
    failures,
    run_suite,
)
from .report import headline, headline_text, render, text_tables, update_readme, write_all


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description="mmapkit benchmarks. Each suite generates its own seeded data in "
        "bench/data/ and writes bench/results/SUITE.{md,json,png} (--quick: "
        "bench/results/quick/, so quick numbers never replace the full run's).",
    )
    p.add_argument("suite", nargs="?", help="suite name, or 'all' for every registered suite")
    p.add_argument("--list", action="store_true", help="list the registered suites and exit")
    p.add_argument(
        "--quick",
        action="store_true",
        help="small sizes, 3 repeats instead of 5, warm cache only (unless --cache "
        "is given): every suite in a few minutes",
    )
    p.add_argument(
        "--repeat",
        type=int,
        metavar="N",
        help="timed runs per cell and cache state (default 5, --quick 3)",
    )
    p.add_argument("--sizes", metavar="A,B", help="only these size labels (e.g. small)")
    p.add_argument("--tasks", metavar="A,B", help="only these tasks")
    p.add_argument(
        "--contenders",
        metavar="A,B",
        help="only these contenders (the baseline and reference always run)",
    )
    p.add_argument(
        "--cache",
        choices=("both", *CACHES),
        help="measure warm, cold or both cache states (default: both; --quick: warm)",
    )
    p.add_argument("--data-dir", type=Path, default=DATA_DIR, help="default: bench/data")
    p.add_argument(
        "--results-dir", type=Path, help="default: bench/results (--quick: bench/results/quick)"
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="with --tasks: keep the other tasks' results already in SUITE.json "
        "(from an earlier run; each task's run is named in the report) "
        "instead of replacing the file",
    )
    p.add_argument(
        "--render",
        action="store_true",
        help="do not run: re-render SUITE.md and SUITE.png from SUITE.json",
    )
    return p


def _split(value: str | None) -> list[str] | None:
    return [v.strip() for v in value.split(",") if v.strip()] if value else None


def _show(path: Path) -> str:
    try:
        return str(path.resolve().relative_to(REPO_DIR))
    except ValueError:
        return str(path)


def _spec(name: str) -> dict | None:
    """The suite's headline spec (for results written before the runner stored it)."""
    try:
        return suites.load(name).headline
    except Exception:  # noqa: BLE001 - a suite that cannot load has no headline row
        return None


def _refresh_readme(results_dir: Path) -> None:
    """Feeds the README's results section from bench/results/ (the full runs' directory only)."""
    readme = REPO_DIR / "README.md"
    if results_dir.resolve() == RESULTS_DIR.resolve():
        specs = {p.stem: spec for p in RESULTS_DIR.glob("*.json") if (spec := _spec(p.stem))}
        if update_readme(readme, results_dir, specs):
            print(f"updated {_show(readme)}")


def _summary(docs: dict[str, dict], failed: list[str], results_dir: Path, seconds: float) -> str:
    """One screen: each suite's headline against its best peer, and where the reports are."""
    out = [
        "",
        "=" * 78,
        f"summary ({seconds:.0f} s): mmapkit vs the best peer, median times; "
        "ratio below 1 is faster",
    ]
    for name, doc in docs.items():
        h = headline(doc)
        out.append(f"  {headline_text(h)}" if h else f"  {name}: (no headline declared)")
        if name in failed:
            out.append(f"  {name}: FAILED: wrong answers or errors (see above)")
    out += [
        f"  {name}: FAILED to run (see the traceback above)" for name in failed if name not in docs
    ]
    shown = _show(results_dir)
    out += [
        "",
        f"full reports and plots: {shown}/SUITE.md and {shown}/SUITE.png ({', '.join(docs)})",
    ]
    if any(d["mode"] == "quick" for d in docs.values()):
        out.append(
            f"quick sizes (a smoke run); the full runs' results (make bench) are in "
            f"{_show(RESULTS_DIR)}/ and the README"
        )
    out.append("=" * 78)
    return "\n".join(out)


def merge_docs(path: Path, doc: dict, suite) -> dict:
    """`doc` (a run of some tasks) with the other tasks' results of the document at
    `path` (an earlier run of the same suite) kept: sizes, tasks and contenders are
    the union (this run's description wins), and ``runs`` says which run measured
    which tasks (date, revision, machine)."""
    if not path.exists():
        return doc
    old = json.loads(path.read_text())
    mine = {t["name"] for t in doc["tasks"]}
    kept = [t for t in old["tasks"] if t["name"] not in mine]
    if not kept:
        return doc

    def run_of(d: dict, tasks: list[str]) -> dict:
        m = d["machine"]
        return {
            "tasks": tasks,
            "date": m.get("date"),
            "git": m.get("git"),
            "elapsed_s": d.get("elapsed_s"),
            "mode": d.get("mode"),
        }

    runs = [
        r
        for r in old.get("runs", [run_of(old, [t["name"] for t in old["tasks"]])])
        if r["tasks"] and not set(r["tasks"]) <= mine
    ]
    for r in runs:
        r["tasks"] = [t for t in r["tasks"] if t not in mine]
    out = dict(doc)
    labels = {s["label"] for s in doc["sizes"]}
    out["sizes"] = [s for s in old["sizes"] if s["label"] not in labels] + doc["sizes"]
    order = [t.name for t in suite.tasks]
    out["tasks"] = sorted(
        kept + doc["tasks"], key=lambda t: order.index(t["name"]) if t["name"] in order else 99
    )
    names = {c["name"] for c in doc["contenders"]}
    out["contenders"] = doc["contenders"] + [c for c in old["contenders"] if c["name"] not in names]
    out["results"] = [r for r in old["results"] if r["task"] not in mine] + doc["results"]
    out["repeats"] = {**old.get("repeats", {}), **doc["repeats"]}
    out["versions"] = {**old.get("versions", {}), **doc["versions"]}
    out["runs"] = [*runs, run_of(doc, sorted(mine))]
    out["targets"] = suite.targets(out)
    return out


def main(argv: list[str] | None = None) -> int:
    """Runs the suites named on the command line (``python -m bench --help``); returns the exit
    status.
    """
    args = _parser().parse_args(argv)
    if args.results_dir is None:
        args.results_dir = QUICK_RESULTS_DIR if args.quick else RESULTS_DIR
    if args.cache is None:
        args.cache = "warm" if args.quick else "both"
    if args.list:
        for name in suites.names():
            try:
                suite = suites.load(name)
                print(f"{name:10s} {suite.title}")
            except Exception as exc:  # noqa: BLE001
                print(f"{name:10s} (cannot load: {type(exc).__name__}: {exc})")
        return 0
    if not args.suite:
        _parser().print_usage(sys.stderr)
        print("error: give a suite name, 'all', or --list", file=sys.stderr)
        return 2
    names = suites.names() if args.suite == "all" else [args.suite]
    for name in names:
        if name not in suites.SUITES:
            print(f"unknown suite {name!r}; known: {', '.join(suites.names())}", file=sys.stderr)
            return 2

    if args.render:
        for name in names:
            doc = json.loads((args.results_dir / f"{name}.json").read_text())
            print(text_tables(doc))
            for path in render(doc, name, args.results_dir):
                print(f"wrote {_show(path)}")
        _refresh_readme(args.results_dir)
        return 0

    if args.repeat is not None and args.repeat < 1:
        print("--repeat must be at least 1", file=sys.stderr)
        return 2
    opts = RunOptions(
        quick=args.quick,
        repeat=args.repeat,
        sizes=_split(args.sizes),
        tasks=_split(args.tasks),
        contenders=_split(args.contenders),
        caches=CACHES if args.cache == "both" else (args.cache,),
        data_dir=args.data_dir,
    )
    failed: list[str] = []
    docs: dict[str, dict] = {}
    started = time.perf_counter()
    for name in names:
        try:
            suite = suites.load(name)
            doc = run_suite(suite, opts)
        except SystemExit:
            raise
        except Exception:  # noqa: BLE001 - one broken suite must not hide the others
            traceback.print_exc()
            print(
                f"\n!!! suite {name} FAILED to run (see the traceback above)\n",
                file=sys.stderr,
                flush=True,
            )
            failed.append(name)
            continue
        if args.merge:
            doc = merge_docs(args.results_dir / f"{name}.json", doc, suite)
        docs[name] = doc
        print(text_tables(doc), flush=True)
        for path in write_all(doc, name, args.results_dir):
            print(f"wrote {_show(path)}")
        bad = failures(doc)
        if bad:
            failed.append(name)
            print(
                f"\n!!! suite {name} FAILED: {len(bad)} cell(s) with a wrong answer or an error:",
                file=sys.stderr,
            )
            for r in bad:
                print(
                    f"!!!   {r['contender']} / {r['task']} @ {r['size']} ({r['cache']}): "
                    f"{r['status'].upper()}: {r['reason']}",
                    file=sys.stderr,
                )
            sys.stderr.flush()
    if not args.quick:
        _refresh_readme(args.results_dir)
    if docs or failed:
        print(_summary(docs, failed, args.results_dir, time.perf_counter() - started), flush=True)
    if failed:
        print(f"FAILED: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Rendering of a suite's results document: stdout table, markdown, JSON, PNG.

Everything is rendered from the JSON document alone, so `python -m bench SUITE
--render` can regenerate bench/results/SUITE.md and SUITE.png without running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .harness import CACHES, fmt_ratio, fmt_seconds
from .suite import human_bytes


def _index(doc: dict[str, Any]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {(r["size"], r["task"], r["contender"], r["cache"]): r for r in doc["results"]}


def _baseline(doc: dict[str, Any], task: str) -> str:
    """The contender the task's ratios are against (the suite's unless the task has its own)."""
    for t in doc["tasks"]:
        if t["name"] == task:
            return t.get("baseline") or doc["baseline"]
    return doc["baseline"]


def _per_task_baselines(doc: dict[str, Any]) -> bool:
    return any((t.get("baseline") or doc["baseline"]) != doc["baseline"] for t in doc["tasks"])


def _baseline_phrase(doc: dict[str, Any]) -> str:
    """'`file`' or 'each task's baseline (marked ◆)' for the explanatory texts."""
    if _per_task_baselines(doc):
        return "each task's baseline, marked ◆"
    return f"`{doc['baseline']}`"


def _short_reason(reason: str, limit: int = 60) -> str:
    """The reason's summary: up to the first " (" (details are in the notes)."""
    reason = " ".join(reason.split())
    if " (" in reason:
        reason = reason.split(" (", 1)[0]
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def _cell(
    doc: dict[str, Any], idx: dict, size: str, task: str, contender: str, cache: str, markdown: bool
) -> str:
    r = idx.get((size, task, contender, cache))
    if r is None:
        return "–"
    status = r["status"]
    if status == "n/a":
        return f"n/a ({_short_reason(r['reason'])})" if markdown else "n/a"
    if status == "wrong":
        return "**WRONG ANSWER**" if markdown else "WRONG"
    if status == "error":
        return f"**ERROR** ({_short_reason(r['reason'])})" if markdown else "ERROR"
    if "median" not in r:
        return "–"
    med = r["median"]
    base = idx.get((size, task, _baseline(doc, task), cache))
    ratio = ""
    if base and base["status"] == "ok" and base.get("median"):
        ratio = fmt_ratio(med / base["median"])
    if markdown:
        return f"{fmt_seconds(med)} s (×{ratio})" if ratio else f"{fmt_seconds(med)} s"
    return f"{fmt_seconds(med)} s ×{ratio}" if ratio else f"{fmt_seconds(med)} s"


def _repeats_text(doc: dict[str, Any], task: str, size: str) -> int:
    return doc["repeats"].get(task, {}).get(size, doc["default_repeats"])


# --------------------------------------------------------------------------- stdout


def text_tables(doc: dict[str, Any]) -> str:
    """The suite's results as plain-text tables (the terminal's report)."""
    if doc.get("layout") == "rows":
        return _text_rows(doc)
    idx = _index(doc)
    names = [c["name"] for c in doc["contenders"]]
    tasks = doc["tasks"]
    out: list[str] = []
    out.append(f"== {doc['suite']}: {doc['title']} ({doc['mode']}) ==")
    out.append(
        f"median wall time of the timed runs; ×r = median / median of "
        f"'{doc['baseline']}' (below 1 is faster); cache drop: {doc['cache_drop']['method']}"
    )
    footnotes: dict[str, str] = {}
    for size in doc["sizes"]:
        for cache in CACHES:
            cache_rows = [
                r for r in doc["results"] if r["size"] == size["label"] and r["cache"] == cache
            ]
            if cache_rows and all("not measured" in r["reason"] for r in cache_rows):
                continue
            rows = [["task", *names]]
            for t in tasks:
                n = _repeats_text(doc, t["name"], size["label"])
                label = t["name"] + (f" (n={n})" if n != doc["default_repeats"] else "")
                rows.append(
                    [label]
                    + [_cell(doc, idx, size["label"], t["name"], c, cache, False) for c in names]
                )
                for c in names:
                    r = idx.get((size["label"], t["name"], c, cache))
                    if r and r["status"] != "ok":
                        footnotes.setdefault(f"{c}: {r['reason']}", "")
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            out.append("")
            out.append(f"{size['label']} ({size['human']}), {cache} cache")
            for j, row in enumerate(rows):
                out.append(
                    "  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip()
                )
                if j == 0:
                    out.append("  ".join("-" * w for w in widths))
    if footnotes:
        out.append("")
        out.append("not measured / failed:")
        out.extend(f"  - {k}" for k in footnotes)
    out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- rows layout
#
# For suites whose tasks each have their own set of contenders (e.g. `files`: wc for
# counting lines, sed for replacing): one row per (task, contender that implements
# it), columns per size and cache state.


def _size_caches(doc: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(size, cache) pairs that were measured."""
    out = []
    for size in doc["sizes"]:
        for cache in CACHES:
            rows = [r for r in doc["results"] if r["size"] == size["label"] and r["cache"] == cache]
            if rows and not all("not measured" in r["reason"] for r in rows):
                out.append((size, cache))
    return out


def _row_pairs(doc: dict[str, Any]) -> list[tuple[dict[str, Any], str]]:
    """(task, contender) pairs to show: the contender implements the task (its cells
    are not all 'no implementation'), baseline first."""
    names = [c["name"] for c in doc["contenders"]]
    pairs = []
    for t in doc["tasks"]:
        base = _baseline(doc, t["name"])
        order = ([base] if base in names else []) + [c for c in names if c != base]
        for c in order:
            cells = [r for r in doc["results"] if r["task"] == t["name"] and r["contender"] == c]
            if cells and all(
                r["reason"] == "no implementation of this task" or "not measured" in r["reason"]
                for r in cells
            ):
                continue
            if cells:
                pairs.append((t, c))
    return pairs


def _command(doc: dict[str, Any], task: str, contender: str) -> str:
    for c in doc["contenders"]:
        if c["name"] == contender:
            return c.get("commands", {}).get(task, "")
    return ""


def _mib(x: float) -> str:
    return f"{x / (1 << 20):.1f} MiB" if x >= (1 << 20) else f"{x / 1024:.0f} KiB"


def _metric_text(doc: dict[str, Any], name: str, value: float) -> str:
    unit = doc.get("metrics", {}).get(name, {}).get("unit", "")
    return _mib(value) if unit == "bytes" else f"{value:g}"


def _gbps(doc: dict[str, Any], size: dict[str, Any], r: dict[str, Any] | None) -> float | None:
    if not r or r["status"] != "ok" or not r.get("median"):
        return None
    return size.get("bytes", size["nbytes"]) / r["median"] / 1e9


def _task_doc(doc: dict[str, Any], task: str) -> dict[str, Any]:
    return next(t for t in doc["tasks"] if t["name"] == task)


def _rows_summary(doc: dict[str, Any], markdown: bool) -> list[list[str]]:
    """Header + one row per (task, contender): the time cells of every size and cache."""
    idx = _index(doc)
    sc = _size_caches(doc)
    head = ["task", "contender", "command"] + [f"{s['label']} {cache}" for s, cache in sc]
    rows = [head]
    last_task = None
    for t, c in _row_pairs(doc):
        n = {s["label"]: _repeats_text(doc, t["name"], s["label"]) for s, _ in sc}
        reps = sorted({v for v in n.values() if v != doc["default_repeats"]})
        title = t["title"] if markdown else t["name"]
        label = title + (
            f" (n={','.join(map(str, reps))} on "
            f"{','.join(k for k, v in n.items() if v != doc['default_repeats'])})"
            if reps
            else ""
        )
        base = " ◆" if c == _baseline(doc, t["name"]) else ""
        cmd = _command(doc, t["name"], c)
        if markdown:
            row = [
                label if t["name"] != last_task else "",
                f"`{c}`{base}",
                f"`{cmd}`" if cmd else "",
            ]
        else:
            row = [label if t["name"] != last_task else "", c + base, cmd]
        row += [_cell(doc, idx, s["label"], t["name"], c, cache, markdown) for s, cache in sc]
        rows.append(row)
        last_task = t["name"]
    return rows


def _rows_limit(doc: dict[str, Any], idx: dict, size: dict[str, Any], cache: str) -> float | None:
    """GB/s of the limit: its contender's, or the limit task's fastest contender's."""
    lim = doc.get("limit")
    if not lim:
        return None
    names = [lim[1]] if lim[1] else [c["name"] for c in doc["contenders"]]
    rates = [
        r
        for c in names
        if (r := _gbps(doc, size, idx.get((size["label"], lim[0], c, cache)))) is not None
    ]
    return max(rates) if rates else None


def _rows_throughput(doc: dict[str, Any], size: dict[str, Any]) -> list[list[str]]:
    """Header + rows: GB/s (and % of the limit) per cache, and the declared metrics."""
    idx = _index(doc)
    caches = [cache for s, cache in _size_caches(doc) if s["label"] == size["label"]]
    metric_names = list(doc.get("metrics", {}))
    head = ["task", "contender"]
    for cache in caches:
        head += [f"{cache} GB/s"] + (["% of limit"] if doc.get("limit") else [])
    head += [doc["metrics"][m].get("title", m) + " (max)" for m in metric_names]
    rows = [head]
    last_task = None
    for t, c in _row_pairs(doc):
        row = [t["name"] if t["name"] != last_task else "", c]
        for cache in caches:
            r = idx.get((size["label"], t["name"], c, cache))
            g = _gbps(doc, size, r) if t.get("throughput", True) else None
            row.append(f"{g:.2f}" if g is not None else "–")
            if doc.get("limit"):
                lim = _rows_limit(doc, idx, size, cache)
                row.append(f"{100 * g / lim:.0f} %" if g is not None and lim else "–")
        for m in metric_names:
            vals = [
                idx[(size["label"], t["name"], c, cache)].get("metrics", {}).get(m, {}).get("max")
                for cache in caches
                if (size["label"], t["name"], c, cache) in idx
            ]
            vals = [v for v in vals if v is not None]
            row.append(_metric_text(doc, m, max(vals)) if vals else "–")
        # Tasks not measured at this size (another part of the suite) add nothing.
        if any(cell != "–" for cell in row[2:]):
            rows.append(row)
            last_task = t["name"]
    return rows


def _plain(rows: list[list[str]]) -> list[str]:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    out = []
    for j, row in enumerate(rows):
        out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip())
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    return out


def _md_table(rows: list[list[str]], numeric_from: int) -> list[str]:
    out = [
        "| " + " | ".join(rows[0]) + " |",
        "|" + "---|" * numeric_from + "---:|" * (len(rows[0]) - numeric_from),
    ]
    out += ["| " + " | ".join(_md_escape(c) for c in row) + " |" for row in rows[1:]]
    return out


def targets_rows(doc: dict[str, Any], markdown: bool) -> list[list[str]]:
    """Header + one row per target: measured speed-up (and metric) vs the goal.

    A target compares its contender with another one (``versus``, ``min_speedup``),
    and/or bounds its median time (``max_seconds``; with ``net_of``, net of that contender's
    median in the same cell) or a metric (``max_metric``)."""
    idx = _index(doc)
    plain = all(g.get("versus") and g.get("max_seconds") is None for g in doc.get("targets", []))
    rows = [["target", "measured at", "speed-up" if plain else "measured", "goal", "met?"]]
    for g in doc.get("targets", []):
        size = next((s for s in doc["sizes"] if s["label"] == g["size"]), None)
        where = f"{g['size']} ({size['human']}), {g['cache']}" if size else g["size"]
        mine = idx.get((g["size"], g["task"], g["contender"], g["cache"]))
        versus = g.get("versus")
        other = idx.get((g["size"], g["task"], versus, g["cache"])) if versus else None
        goals = []
        if versus:
            goals.append(
                f"≥ {g['min_speedup']:g}× {versus}"
                if g.get("name_versus")
                else f"≥ {g['min_speedup']:g}×"
            )
        if g.get("max_seconds") is not None:
            goals.append(f"≤ {fmt_seconds(g['max_seconds'])} s")
        goal = ", ".join(goals)
        if mine is None or (versus and other is None):
            rows.append([g["label"], where, "–", goal, "n/a (not measured)"])
            continue
        ok_m = mine["status"] == "ok" and mine.get("median")
        ok_o = not versus or (other["status"] == "ok" and other.get("median"))
        if not (ok_m and ok_o):
            bad_name, bad = (g["contender"], mine) if not ok_m else (versus, other)
            rows.append([g["label"], where, "–", goal, f"n/a ({bad_name} {bad['status']})"])
            continue
        met = True
        parts = []
        if versus:
            speedup = other["median"] / mine["median"]
            met = speedup >= g["min_speedup"]
            parts.append(f"{speedup:.2f}×")
        if g.get("max_seconds") is not None:
            t = mine["median"]
            if g.get("net_of"):
                # net of another row's median (e.g. a driver's own loop without the tool)
                o = idx.get((g["size"], g["task"], g["net_of"], g["cache"]))
                if o is None or o["status"] != "ok" or o.get("median") is None:
                    rows.append([g["label"], where, "–", goal, f"n/a ({g['net_of']} not measured)"])
                    continue
                t -= o["median"]
                parts.append(
                    f"{fmt_seconds(t)} s net ({fmt_seconds(mine['median'])} s − "
                    f"{fmt_seconds(o['median'])} s {g['net_of']})"
                )
            else:
                parts.append(f"{fmt_seconds(mine['median'])} s")
            met = met and t <= g["max_seconds"]
        measured = ", ".join(parts)
        for m, limit in g.get("max_metric", {}).items():
            v = mine.get("metrics", {}).get(m, {}).get("max")
            goal += (
                ", " if goal else ""
            ) + f"{doc['metrics'].get(m, {}).get('title', m)} ≤ {_metric_text(doc, m, limit)}"
            if v is None:
                measured += f", {m} not measured"
                met = False
            else:
                measured += (", " if measured else "") + _metric_text(doc, m, v)
                met = met and v <= limit
        rows.append(
            [
                g["label"],
                where,
                measured,
                goal,
                ("**met**" if met else "**missed**") if markdown else ("met" if met else "MISSED"),
            ]
        )
    return rows


def _text_rows(doc: dict[str, Any]) -> str:
    out = [
        f"== {doc['suite']}: {doc['title']} ({doc['mode']}) ==",
        f"median wall time of the timed runs; ×r = median / median of the task's baseline "
        f"(◆; below 1 is faster); cache drop: {doc['cache_drop']['method']}",
        "",
    ]
    out += _plain(_rows_summary(doc, False))
    for size in doc["sizes"]:
        out += [
            "",
            f"{size['label']} ({size['human']}): throughput"
            + (f" (limit: {doc['limit'][0]})" if doc.get("limit") else "")
            + (
                " and " + ", ".join(v.get("title", k) for k, v in doc["metrics"].items())
                if doc.get("metrics")
                else ""
            ),
        ]
        out += _plain(_rows_throughput(doc, size))
    if doc.get("targets"):
        out += ["", "targets"]
        out += _plain(targets_rows(doc, False))
    footnotes = dict.fromkeys(
        f"{r['contender']} / {r['task']} @ {r['size']}: {r['reason']}"
        for r in doc["results"]
        if r["status"] != "ok"
        and r["reason"] != "no implementation of this task"
        and "not measured" not in r["reason"]
    )
    if footnotes:
        out += ["", "not measured / failed:"] + [f"  - {k}" for k in footnotes]
    out.append("")
    return "\n".join(out)


def _md_rows_results(doc: dict[str, Any], heading: str) -> list[str]:
    lines = [*_md_table(_rows_summary(doc, True), 3), ""]
    for size in doc["sizes"]:
        table = _rows_throughput(doc, size)
        if len(table) == 1:
            continue
        lim = doc.get("limit")
        lines += [
            f"{heading} {size['label']} ({size['human']}): throughput"
            + (" and memory" if doc.get("metrics") else ""),
            "",
            "GB/s = bytes of the data file / median time"
            + (
                "; % of limit = that throughput as a share of "
                + (f"`{lim[1]}`'s" if lim[1] else "the fastest")
                + f" in task `{lim[0]}` in the same cache state"
                if lim
                else ""
            )
            + "".join(
                f"; {v.get('title', k)} (max): the largest over the timed runs"
                for k, v in doc.get("metrics", {}).items()
            )
            + ".",
            "",
        ]
        lines += [*_md_table(table, 2), ""]
    if doc.get("targets"):
        lines += [
            f"{heading} Targets",
            "",
            "Speed-up = the other tool's median time / mmapkit's, same size and cache; "
            "times are medians.",
            "",
        ]
        lines += [*_md_table(targets_rows(doc, True), 2), ""]
    return lines


# --------------------------------------------------------------------------- markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _results_table(
    doc: dict[str, Any], idx: dict, size: dict[str, Any], cache: str, heading: str
) -> list[str]:
    """One markdown table (tasks × contenders) for a size and cache state."""
    names = [c["name"] for c in doc["contenders"]]
    cache_rows = [r for r in doc["results"] if r["size"] == size["label"] and r["cache"] == cache]
    if not cache_rows or all("not measured" in r["reason"] for r in cache_rows):
        return []
    lines = [f"{heading} {size['label']} ({size['human']}), {cache} cache", ""]
    lines.append("| task | " + " | ".join(f"`{c}`" for c in names) + " |")
    lines.append("|---|" + "---:|" * len(names))
    for t in doc["tasks"]:
        n = _repeats_text(doc, t["name"], size["label"])
        label = t["title"] + (f" (n={n})" if n != doc["default_repeats"] else "")
        cells = [
            _md_escape(_cell(doc, idx, size["label"], t["name"], c, cache, True)) for c in names
        ]
        lines.append(f"| {_md_escape(label)} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


README_START = "<!-- bench:results:start -->"
README_END = "<!-- bench:results:end -->"


# The plots the README shows under its headline table (at most two; the others are
# linked from the table through each suite's report).
README_PLOTS = ("arrays", "kmers")


def fmt_time(t: float) -> str:
    """A median time with its unit: 1.23 s, 17.3 ms, 85.2 µs."""
    if t >= 1:
        return f"{fmt_seconds(t)} s"
    if t >= 1e-3:
        return f"{t * 1e3:.3g} ms"
    return f"{t * 1e6:.3g} µs"


def headline(doc: dict[str, Any], spec: dict[str, Any] | None = None) -> dict[str, Any] | None:
    """The suite's headline comparison, derived from its results: mmapkit's median vs
    the fastest of the named peers (same task, size and cache state).

    `spec` defaults to the document's ``headline_spec`` (written by the runner from
    ``Suite.headline``); None when the suite declares none. ``ratio`` is mmapkit's
    median / the best peer's (below 1 is faster), None with a ``reason`` when either
    side has no measurement."""
    spec = spec or doc.get("headline_spec")
    if not spec:
        return None
    labels = [s["label"] for s in doc["sizes"]]
    wanted = [lab for lab in labels if lab in spec.get("sizes", labels)] or labels[-1:]
    size = next(s for s in doc["sizes"] if s["label"] == wanted[-1])
    cache = spec.get("cache", "warm")
    idx = _index(doc)

    def median(contender: str) -> float | None:
        r = idx.get((size["label"], spec["task"], contender, cache))
        return r["median"] if r and r["status"] == "ok" and r.get("median") else None

    out: dict[str, Any] = {
        "suite": doc["suite"],
        "capability": spec.get("capability", doc["title"]),
        "label": spec.get("label", spec["task"]),
        "task": spec["task"],
        "size": size["label"],
        "size_human": human_bytes(size["nbytes"]),
        "cache": cache,
        "mode": doc["mode"],
        "contender": spec["contender"],
        "seconds": median(spec["contender"]),
        "peer": None,
        "peer_seconds": None,
        "ratio": None,
        "reason": "",
    }
    peers = [(t, p) for p in spec["peers"] if (t := median(p)) is not None]
    if peers:
        out["peer_seconds"], out["peer"] = min(peers)
    if out["seconds"] is None:
        out["reason"] = f"{spec['contender']} not measured"
    elif out["peer"] is None:
        out["reason"] = "no peer measured"
    else:
        out["ratio"] = out["seconds"] / out["peer_seconds"]
    return out


def headline_text(h: dict[str, Any]) -> str:
    """One line: 'log: append ... — mmapkit 17.3 ms vs best peer commitlog 18.3 ms (0.95×)'."""
    where = f"{h['label']} ({h['size_human']}, {h['cache']})"
    if h["ratio"] is None:
        return f"{h['suite']}: {where}: n/a ({h['reason']})"
    return (
        f"{h['suite']}: {where} — {h['contender']} {fmt_time(h['seconds'])} vs best peer "
        f"{h['peer']} {fmt_time(h['peer_seconds'])} ({fmt_ratio(h['ratio'])}×)"
    )


def readme_section(results_dir: Path, specs: dict[str, dict[str, Any]] | None = None) -> str:
    """The README's results: one headline row per suite, and up to two plots.

    `specs` (suite -> Suite.headline) serves documents written before the runner
    stored the spec in them."""
    rows = [["capability", "measured", "mmapkit", "best peer", "ratio", "full report"]]
    modes: set[str] = set()
    dates: set[str] = set()
    cores: set[str] = set()
    names = []
    for js in sorted(results_dir.glob("*.json")):
        doc = json.loads(js.read_text())
        name = js.stem
        names.append(name)
        rel = f"bench/results/{name}"
        modes.add(doc["mode"])
        # a merged document (--merge) holds runs of several dates
        runs = doc.get("runs") or [doc["machine"]]
        dates.update((r.get("date") or "?")[:10] for r in runs)
        cores.add(str(doc["machine"].get("cores", "?")))
        h = headline(doc, (specs or {}).get(name))
        link = f"[{rel}.md]({rel}.md)"
        if h is None:
            rows.append([doc["title"], "", "", "", "", link])
            continue
        what = f"{h['label']} ({h['size_human']}, {h['cache']})"
        if h["ratio"] is None:
            rows.append([h["capability"], what, "n/a", h["reason"], "", link])
            continue
        rows.append(
            [
                h["capability"],
                what,
                f"`{h['contender']}` {fmt_time(h['seconds'])}",
                f"`{h['peer']}` {fmt_time(h['peer_seconds'])}",
                f"**{fmt_ratio(h['ratio'])}×**",
                link,
            ]
        )
    out = [
        "Ratio = mmapkit's median time / the fastest peer's, same data, size and cache "
        "state (below 1 is faster). From the "
        + " and ".join(sorted(modes))
        + " runs of "
        + ", ".join(sorted(dates))
        + " on "
        + "/".join(sorted(cores))
        + " cores. Every "
        "suite's report has the tables for all sizes, warm and cold, every contender and "
        "the baseline.",
        "",
    ]
    out += [*_md_table(rows, 2), ""]
    for name in README_PLOTS:
        if name in names and (results_dir / f"{name}.png").exists():
            out += [f"![{name}](bench/results/{name}.png)", ""]
    return "\n".join(out).rstrip() + "\n"


def update_readme(
    readme: Path, results_dir: Path, specs: dict[str, dict[str, Any]] | None = None
) -> bool:
    """Replaces the README's results section (between the markers) in place."""
    if not readme.exists():
        return False
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    new = f"{head}{README_START}\n{readme_section(results_dir, specs)}{README_END}{tail}"
    if new != text:
        readme.write_text(new)
    return True


def markdown(doc: dict[str, Any], suite_name: str) -> str:
    """The suite's full report as Markdown (``bench/results/SUITE.md``)."""
    idx = _index(doc)
    names = [c["name"] for c in doc["contenders"]]
    m = doc["machine"]
    cmd = f"python -m bench {suite_name}" + (" --quick" if doc["mode"] == "quick" else "")
    lines: list[str] = [f"# `{suite_name}`: {doc['title']}", ""]
    if doc.get("description"):
        lines += [doc["description"], ""]
    lines += [
        f"Produced by `{cmd}` (mode: **{doc['mode']}**). Raw numbers: "
        f"[`{suite_name}.json`]({suite_name}.json) "
        f"(re-render this page with `python -m bench {suite_name} --render`).",
        "",
        f"![{suite_name} chart]({suite_name}.png)",
        "",
    ]

    lines += ["## Machine and set-up", "", "| | |", "|---|---|"]
    cores = f"{m.get('cores')}" + (
        f" ({m['cores_usable']} usable)"
        if m.get("cores_usable") not in (None, m.get("cores"))
        else ""
    )
    rows = [
        ("CPU", m.get("cpu", "?")),
        ("cores", cores),
        ("RAM", m.get("ram", "?")),
        ("kernel", m.get("kernel", "?")),
        ("Python", m.get("python", "?")),
    ]
    rows += [(k, v) for k, v in doc.get("versions", {}).items()]
    rows += [
        ("data filesystem", m.get("filesystem", "?")),
        ("git revision", m.get("git", "?")),
        ("date (UTC)", m.get("date", "?")),
    ]
    if doc.get("runs"):  # merged from runs of some tasks each (python -m bench --merge)
        rows += [
            (
                "runs merged",
                "; ".join(
                    f"{', '.join(r['tasks'])}: {r.get('date', '?')} (git {r.get('git', '?')}, "
                    f"{r.get('mode', '?')})"
                    for r in doc["runs"]
                ),
            )
        ]
    rows += [
        ("cache drop (cold runs)", doc["cache_drop"]["description"]),
        (
            "sizes",
            ", ".join(f"{s['label']} = {s['human']} ({s['nbytes']:,} bytes)" for s in doc["sizes"]),
        ),
    ]
    exceptions = [
        f"{t} @ {s}: {n}"
        for t, per in doc["repeats"].items()
        for s, n in per.items()
        if n != doc["default_repeats"]
    ]
    rep = f"{doc['default_repeats']} timed runs per cell and cache state" + (
        f"; except {', '.join(exceptions)}" if exceptions else ""
    )
    rows += [
        ("repeats", rep),
        (
            "warm cache",
            "one untimed warm-up run of every contender, then the timed runs"
            + "".join(
                f"; {t['name']} @ {s}: data files read once instead of a warm-up run"
                for t in doc["tasks"]
                for s, w in t.get("warmup", {}).items()
                if w == "prime"
            ),
        ),
        ("order", f"contenders in a fresh random order every round (seed {doc['seed']})"),
        (
            "verification",
            (
                f"every run's answer compared with `{doc['reference']}`'s"
                if not any(
                    t.get("reference", doc["reference"]) != doc["reference"] for t in doc["tasks"]
                )
                else "every run's answer compared with the task's reference contender's (see Tasks)"
            )
            + "; a mismatch fails the suite",
        ),
        ("total run time", f"{doc.get('elapsed_s', '?')} s"),
    ]
    lines += [f"| {k} | {_md_escape(str(v))} |" for k, v in rows]
    lines.append("")

    ratio_text = (
        (
            f"the ratio to `{doc['baseline']}` (median / median of `{doc['baseline']}`; "
            "**below 1 is faster**)"
        )
        if not _per_task_baselines(doc)
        else (
            "the ratio to the task's baseline (marked ◆; median / median of the baseline's, "
            "**below 1 is faster**)"
        )
    )
    lines += [
        "## Results",
        "",
        f"Cells: median {doc.get('timing') or 'wall time (`time.perf_counter`)'} of "
        f"the timed runs, and in "
        f"brackets {ratio_text}. Min and max of every cell are "
        f"in the details below and in the JSON.",
        "",
    ]
    if doc.get("layout") == "rows":
        lines += _md_rows_results(doc, "###")
    else:
        for size in doc["sizes"]:
            for cache in CACHES:
                lines += _results_table(doc, idx, size, cache, "###")
    lines += ["<details><summary>min – max of every cell (seconds)</summary>", ""]
    if doc.get("layout") == "rows":
        sc = _size_caches(doc)
        lines.append(
            "| task | contender | " + " | ".join(f"{s['label']} {c}" for s, c in sc) + " |"
        )
        lines.append("|---|---|" + "---:|" * len(sc))
        for t, c in _row_pairs(doc):
            cells = []
            for s_, cache in sc:
                r = idx.get((s_["label"], t["name"], c, cache))
                cells.append(
                    f"{fmt_seconds(r['min'])} – {fmt_seconds(r['max'])}"
                    if r and r["status"] == "ok" and "min" in r
                    else "–"
                )
            lines.append(f"| {t['name']} | `{c}` | " + " | ".join(cells) + " |")
        lines.append("")
    for size in doc["sizes"] if doc.get("layout") != "rows" else []:
        lines.append("| size | cache | task | " + " | ".join(f"`{c}`" for c in names) + " |")
        lines.append("|---|---|---|" + "---:|" * len(names))
        for cache in CACHES:
            for t in doc["tasks"]:
                cells = []
                for c in names:
                    r = idx.get((size["label"], t["name"], c, cache))
                    cells.append(
                        f"{fmt_seconds(r['min'])} – {fmt_seconds(r['max'])}"
                        if r and r["status"] == "ok" and "min" in r
                        else "–"
                    )
                lines.append(
                    f"| {size['label']} | {cache} | {t['name']} | " + " | ".join(cells) + " |"
                )
        lines.append("")
    lines += ["</details>", ""]

    lines += ["## Tasks", ""]
    per_task = _per_task_baselines(doc) or any(
        t.get("reference", doc["reference"]) != doc["reference"] for t in doc["tasks"]
    )
    for t in doc["tasks"]:
        who = ""
        if per_task:
            b, r = _baseline(doc, t["name"]), t.get("reference") or doc["reference"]
            who = f" — baseline `{b}`" + (f", reference answer `{r}`" if r != b else "")
        lines.append(
            f"- **{t['title']}** (`{t['name']}`){who}" + (f": {t['note']}" if t["note"] else "")
        )
    lines += ["", "## Contenders", ""]
    for c in doc["contenders"]:
        base = " — baseline" if c["name"] == doc["baseline"] and not per_task else ""
        ref = " — reference answer" if c["name"] == doc["reference"] and not per_task else ""
        lines.append(f"- **`{c['name']}`**{base}{ref}" + (f": {c['note']}" if c["note"] else ""))
    lines.append("")

    problems = []
    seen = set()
    for r in doc["results"]:
        if (
            r["status"] != "ok"
            and "not measured" not in r["reason"]
            and r["reason"] != "no implementation of this task"
        ):
            key = (r["contender"], r["status"], r["reason"])
            if key in seen:
                continue
            seen.add(key)
            where = sorted(
                {
                    f"{x['task']} @ {x['size']}"
                    for x in doc["results"]
                    if (x["contender"], x["status"], x["reason"]) == key
                }
            )
            problems.append(
                f"- `{r['contender']}` **{r['status']}** ({', '.join(where)}): "
                f"{_md_escape(' '.join(r['reason'].split()))}"
            )
    notes = list(doc.get("notes", []))
    if problems or notes:
        lines += ["## Notes", ""]
        lines += problems
        lines += [f"- {n}" for n in notes]
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- chart


def _chart_rows(doc: dict[str, Any], path: Path) -> None:
    """Rows layout: per size and cache, one horizontal bar per (task, contender): the
    median time relative to the task's baseline (log scale; left of 1 is faster)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = _index(doc)
    pairs = _row_pairs(doc)
    sc = _size_caches(doc)
    ncol = 2
    nrow = (len(sc) + ncol - 1) // ncol
    fig, axes = plt.subplots(
        nrow, ncol, figsize=(14, 0.24 * len(pairs) * nrow + 1.5), squeeze=False
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    task_names = [t["name"] for t in doc["tasks"]]

    def measured(size: dict[str, Any], task: str, cache: str) -> bool:
        return any(
            r["status"] != "n/a"
            for (s, t, _c, ca), r in idx.items()
            if s == size["label"] and t == task and ca == cache
        )

    for k, (size, cache) in enumerate(sc):
        ax = axes[k // ncol][k % ncol]
        # A task not measured at this size (another part of the suite) gets no rows here.
        shown = [(t, c) for t, c in pairs if measured(size, t["name"], cache)] or pairs
        labels = [f"{t['name']}: {c}" for t, c in shown]
        for i, (t, c) in enumerate(shown):
            r = idx.get((size["label"], t["name"], c, cache))
            base = idx.get((size["label"], t["name"], _baseline(doc, t["name"]), cache))
            color = colors[task_names.index(t["name"]) % len(colors)]
            if r and r["status"] == "ok" and r.get("median") and base and base.get("median"):
                ratio = r["median"] / base["median"]
                ax.barh(i, ratio - 1, color=color, left=1)  # from 1: faster left, slower right
                ax.text(
                    r["median"] / base["median"],
                    i,
                    f" {fmt_seconds(r['median'])} s",
                    va="center",
                    fontsize=6,
                )
            else:
                status = r["status"] if r else "n/a"
                ax.text(
                    1,
                    i,
                    status if status == "n/a" else status.upper(),
                    va="center",
                    fontsize=6,
                    color="grey" if status == "n/a" else "red",
                )
        ax.axvline(1, color="black", linewidth=0.8)
        ax.set_xscale("log")
        ax.set_yticks(range(len(shown)))
        same = len(shown) == len(
            pairs
        )  # every panel lists the same rows: labels on the left ones only
        ax.set_yticklabels(labels if k % ncol == 0 or not same else [""] * len(labels), fontsize=7)
        ax.invert_yaxis()
        ax.set_xlabel("median time / task baseline's (log; left of 1 is faster)")
        ax.set_title(f"{size['label']} ({size['human']}), {cache} cache")
        ax.grid(axis="x", which="both", alpha=0.3)
    for k in range(len(sc), nrow * ncol):
        axes[k // ncol][k % ncol].axis("off")
    fig.suptitle(f"{doc['suite']}: {doc['title']} ({doc['mode']})")
    fig.tight_layout(rect=(0, 0, 1, 1 - 0.5 / fig.get_figheight()))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def chart(doc: dict[str, Any], path: Path) -> None:
    """Draws the suite's chart to ``path`` (PNG)."""
    if doc.get("layout") == "rows":
        _chart_rows(doc, path)
        return
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = _index(doc)
    names = [c["name"] for c in doc["contenders"]]
    tasks = doc["tasks"]
    sizes = doc["sizes"]
    # only the cache states measured (a --quick run measures warm only)
    caches = [
        c for c in CACHES if any(r["cache"] == c and r["status"] == "ok" for r in doc["results"])
    ] or list(CACHES)
    fig, axes = plt.subplots(
        len(sizes), len(caches), figsize=(6.5 * len(caches), 4.2 * len(sizes)), squeeze=False
    )
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / max(1, len(names))
    for row, size in enumerate(sizes):
        for col, cache in enumerate(caches):
            ax = axes[row][col]
            for k, name in enumerate(names):
                for i, t in enumerate(tasks):
                    x = i - 0.4 + width * (k + 0.5)
                    r = idx.get((size["label"], t["name"], name, cache))
                    if r and r["status"] == "ok" and "median" in r:
                        ax.bar(
                            x,
                            r["median"],
                            width,
                            color=colors[k % len(colors)],
                            label=name if i == 0 else None,
                            yerr=[[r["median"] - r["min"]], [r["max"] - r["median"]]],
                            error_kw={"elinewidth": 0.8, "capsize": 2},
                        )
                    else:
                        status = r["status"] if r else "n/a"
                        ax.text(
                            x,
                            0.02,
                            "n/a" if status == "n/a" else status.upper(),
                            rotation=90,
                            ha="center",
                            va="bottom",
                            fontsize=7,
                            transform=ax.get_xaxis_transform(),
                            color="grey" if status == "n/a" else "red",
                        )
                        ax.bar(
                            x,
                            0,
                            width,
                            color=colors[k % len(colors)],
                            label=name if i == 0 else None,
                        )
            ax.set_yscale("log")
            ax.set_xticks(range(len(tasks)))
            ax.set_xticklabels([t["name"] for t in tasks])
            ax.set_ylabel("seconds (median, log scale)")
            ax.set_title(f"{size['label']} ({size['human']}), {cache} cache")
            ax.grid(axis="y", which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    top = 1 - 0.75 / fig.get_figheight()
    fig.suptitle(f"{doc['suite']}: {doc['title']} ({doc['mode']})", y=0.995)
    fig.legend(
        handles,
        labels,
        loc="upper center",
        ncol=len(names),
        frameon=False,
        bbox_to_anchor=(0.5, 1 - 0.3 / fig.get_figheight()),
    )
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- files


def write_all(doc: dict[str, Any], suite_name: str, results_dir: Path) -> list[Path]:
    """Writes the suite's JSON, Markdown report and chart into ``results_dir``; returns the paths
    written.
    """
    results_dir.mkdir(parents=True, exist_ok=True)
    written = []
    jpath = results_dir / f"{suite_name}.json"
    jpath.write_text(json.dumps(doc, indent=1) + "\n")
    written.append(jpath)
    written += render(doc, suite_name, results_dir)
    return written


def render(doc: dict[str, Any], suite_name: str, results_dir: Path) -> list[Path]:
    """Re-renders the Markdown report and chart from a suite's JSON (``--render``); returns the
    paths written.
    """
    results_dir.mkdir(parents=True, exist_ok=True)
    mpath = results_dir / f"{suite_name}.md"
    mpath.write_text(markdown(doc, suite_name))
    written = [mpath]
    ppath = results_dir / f"{suite_name}.png"
    try:
        chart(doc, ppath)
        written.append(ppath)
    except ImportError as exc:
        print(f"warning: no chart ({exc}); install matplotlib", flush=True)
    return written

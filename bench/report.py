"""Rendering of a suite's results document: stdout table, markdown, JSON, PNG.

Everything is rendered from the JSON document alone, so `python -m bench SUITE
--render` can regenerate bench/results/SUITE.md and SUITE.png without running.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .harness import CACHES, fmt_ratio, fmt_seconds


def _index(doc: dict[str, Any]) -> dict[tuple[str, str, str, str], dict[str, Any]]:
    return {(r["size"], r["task"], r["contender"], r["cache"]): r for r in doc["results"]}


def _short_reason(reason: str, limit: int = 60) -> str:
    """The reason's summary: up to the first " (" (details are in the notes)."""
    reason = " ".join(reason.split())
    if " (" in reason:
        reason = reason.split(" (", 1)[0]
    return reason if len(reason) <= limit else reason[: limit - 1] + "…"


def _cell(doc: dict[str, Any], idx: dict, size: str, task: str, contender: str,
          cache: str, markdown: bool) -> str:
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
    base = idx.get((size, task, doc["baseline"], cache))
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
    idx = _index(doc)
    names = [c["name"] for c in doc["contenders"]]
    tasks = doc["tasks"]
    out: list[str] = []
    out.append(f"== {doc['suite']}: {doc['title']} ({doc['mode']}) ==")
    out.append(f"median wall time of the timed runs; ×r = median / median of "
               f"'{doc['baseline']}' (below 1 is faster); cache drop: {doc['cache_drop']['method']}")
    footnotes: dict[str, str] = {}
    for size in doc["sizes"]:
        for cache in CACHES:
            cache_rows = [r for r in doc["results"]
                          if r["size"] == size["label"] and r["cache"] == cache]
            if cache_rows and all("not measured" in r["reason"] for r in cache_rows):
                continue
            rows = [["task", *names]]
            for t in tasks:
                n = _repeats_text(doc, t["name"], size["label"])
                label = t["name"] + (f" (n={n})" if n != doc["default_repeats"] else "")
                rows.append([label] + [_cell(doc, idx, size["label"], t["name"], c, cache, False)
                                       for c in names])
                for c in names:
                    r = idx.get((size["label"], t["name"], c, cache))
                    if r and r["status"] != "ok":
                        footnotes.setdefault(f"{c}: {r['reason']}", "")
            widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
            out.append("")
            out.append(f"{size['label']} ({size['human']}), {cache} cache")
            for j, row in enumerate(rows):
                out.append("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
                if j == 0:
                    out.append("  ".join("-" * w for w in widths))
    if footnotes:
        out.append("")
        out.append("not measured / failed:")
        out.extend(f"  - {k}" for k in footnotes)
    out.append("")
    return "\n".join(out)


# --------------------------------------------------------------------------- markdown


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|")


def _results_table(doc: dict[str, Any], idx: dict, size: dict[str, Any], cache: str,
                   heading: str) -> list[str]:
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
        cells = [_md_escape(_cell(doc, idx, size["label"], t["name"], c, cache, True))
                 for c in names]
        lines.append(f"| {_md_escape(label)} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines


README_START = "<!-- bench:results:start -->"
README_END = "<!-- bench:results:end -->"


def readme_section(results_dir: Path) -> str:
    """Every suite's result tables (all sizes, warm and cold), for the README."""
    out: list[str] = []
    for js in sorted(results_dir.glob("*.json")):
        doc = json.loads(js.read_text())
        name = js.stem
        rel = f"bench/results/{name}"
        out += [f"### `{name}`: {doc['title']}", "",
                f"{doc['mode']} run of {doc['machine'].get('date', '?')[:10]} on "
                f"{doc['machine'].get('cores', '?')} cores; ratios are against "
                f"`{doc['baseline']}` (below 1 is faster). Full report: [{rel}.md]({rel}.md).",
                "", f"![{name}]({rel}.png)", ""]
        idx = _index(doc)
        for size in doc["sizes"]:
            for cache in CACHES:
                out += _results_table(doc, idx, size, cache, "####")
    return "\n".join(out).rstrip() + "\n"


def update_readme(readme: Path, results_dir: Path) -> bool:
    """Replaces the README's results section (between the markers) in place."""
    if not readme.exists():
        return False
    text = readme.read_text()
    if README_START not in text or README_END not in text:
        return False
    head, rest = text.split(README_START, 1)
    _, tail = rest.split(README_END, 1)
    new = f"{head}{README_START}\n{readme_section(results_dir)}{README_END}{tail}"
    if new != text:
        readme.write_text(new)
    return True


def markdown(doc: dict[str, Any], suite_name: str) -> str:
    idx = _index(doc)
    names = [c["name"] for c in doc["contenders"]]
    m = doc["machine"]
    cmd = f"python -m bench {suite_name}" + (" --quick" if doc["mode"] == "quick" else "")
    lines: list[str] = [f"# `{suite_name}`: {doc['title']}", ""]
    if doc.get("description"):
        lines += [doc["description"], ""]
    lines += [f"Produced by `{cmd}` (mode: **{doc['mode']}**). Raw numbers: "
              f"[`{suite_name}.json`]({suite_name}.json) "
              f"(re-render this page with `python -m bench {suite_name} --render`).", "",
              f"![{suite_name} chart]({suite_name}.png)", ""]

    lines += ["## Machine and set-up", "", "| | |", "|---|---|"]
    cores = f"{m.get('cores')}" + (f" ({m['cores_usable']} usable)"
                                   if m.get("cores_usable") not in (None, m.get("cores")) else "")
    rows = [("CPU", m.get("cpu", "?")), ("cores", cores), ("RAM", m.get("ram", "?")),
            ("kernel", m.get("kernel", "?")), ("Python", m.get("python", "?"))]
    rows += [(k, v) for k, v in doc.get("versions", {}).items()]
    rows += [("data filesystem", m.get("filesystem", "?")), ("git revision", m.get("git", "?")),
             ("date (UTC)", m.get("date", "?")),
             ("cache drop (cold runs)", doc["cache_drop"]["description"]),
             ("sizes", ", ".join(f"{s['label']} = {s['human']} ({s['nbytes']:,} bytes)"
                                 for s in doc["sizes"]))]
    exceptions = [f"{t} @ {s}: {n}" for t, per in doc["repeats"].items() for s, n in per.items()
                  if n != doc["default_repeats"]]
    rep = (f"{doc['default_repeats']} timed runs per cell and cache state"
           + (f"; except {', '.join(exceptions)}" if exceptions else ""))
    rows += [("repeats", rep),
             ("warm cache", "one untimed warm-up run of every contender, then the timed runs"
              + "".join(f"; {t['name']} @ {s}: data files read once instead of a warm-up run"
                        for t in doc["tasks"] for s, w in t.get("warmup", {}).items()
                        if w == "prime")),
             ("order", f"contenders in a fresh random order every round (seed {doc['seed']})"),
             ("verification", f"every run's answer compared with `{doc['reference']}`'s; "
              "a mismatch fails the suite"),
             ("total run time", f"{doc.get('elapsed_s', '?')} s")]
    lines += [f"| {k} | {_md_escape(str(v))} |" for k, v in rows]
    lines.append("")

    lines += ["## Results", "",
              f"Cells: median wall time (`time.perf_counter`) of the timed runs, and in "
              f"brackets the ratio to `{doc['baseline']}` (median / median of "
              f"`{doc['baseline']}`; **below 1 is faster**). Min and max of every cell are "
              f"in the details below and in the JSON.", ""]
    for size in doc["sizes"]:
        for cache in CACHES:
            lines += _results_table(doc, idx, size, cache, "###")
    lines += ["<details><summary>min – max of every cell (seconds)</summary>", ""]
    for size in doc["sizes"]:
        lines.append("| size | cache | task | " + " | ".join(f"`{c}`" for c in names) + " |")
        lines.append("|---|---|---|" + "---:|" * len(names))
        for cache in CACHES:
            for t in doc["tasks"]:
                cells = []
                for c in names:
                    r = idx.get((size["label"], t["name"], c, cache))
                    cells.append(f"{fmt_seconds(r['min'])} – {fmt_seconds(r['max'])}"
                                 if r and r["status"] == "ok" and "min" in r else "–")
                lines.append(f"| {size['label']} | {cache} | {t['name']} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += ["</details>", ""]

    lines += ["## Tasks", ""]
    for t in doc["tasks"]:
        lines.append(f"- **{t['title']}** (`{t['name']}`)" + (f": {t['note']}" if t["note"] else ""))
    lines += ["", "## Contenders", ""]
    for c in doc["contenders"]:
        base = " — baseline" if c["name"] == doc["baseline"] else ""
        ref = " — reference answer" if c["name"] == doc["reference"] else ""
        lines.append(f"- **`{c['name']}`**{base}{ref}" + (f": {c['note']}" if c["note"] else ""))
    lines.append("")

    problems = []
    seen = set()
    for r in doc["results"]:
        if r["status"] != "ok" and "not measured" not in r["reason"]:
            key = (r["contender"], r["status"], r["reason"])
            if key in seen:
                continue
            seen.add(key)
            where = sorted({f"{x['task']} @ {x['size']}" for x in doc["results"]
                            if (x["contender"], x["status"], x["reason"]) == key})
            problems.append(f"- `{r['contender']}` **{r['status']}** ({', '.join(where)}): "
                            f"{_md_escape(' '.join(r['reason'].split()))}")
    notes = list(doc.get("notes", []))
    if problems or notes:
        lines += ["## Notes", ""]
        lines += problems
        lines += [f"- {n}" for n in notes]
        lines.append("")
    return "\n".join(lines)


# --------------------------------------------------------------------------- chart


def chart(doc: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = _index(doc)
    names = [c["name"] for c in doc["contenders"]]
    tasks = doc["tasks"]
    sizes = doc["sizes"]
    fig, axes = plt.subplots(len(sizes), 2, figsize=(13, 4.2 * len(sizes)), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    width = 0.8 / max(1, len(names))
    for row, size in enumerate(sizes):
        for col, cache in enumerate(CACHES):
            ax = axes[row][col]
            for k, name in enumerate(names):
                for i, t in enumerate(tasks):
                    x = i - 0.4 + width * (k + 0.5)
                    r = idx.get((size["label"], t["name"], name, cache))
                    if r and r["status"] == "ok" and "median" in r:
                        ax.bar(x, r["median"], width, color=colors[k % len(colors)],
                               label=name if i == 0 else None,
                               yerr=[[r["median"] - r["min"]], [r["max"] - r["median"]]],
                               error_kw={"elinewidth": 0.8, "capsize": 2})
                    else:
                        status = r["status"] if r else "n/a"
                        ax.text(x, 0.02, "n/a" if status == "n/a" else status.upper(),
                                rotation=90, ha="center", va="bottom", fontsize=7,
                                transform=ax.get_xaxis_transform(),
                                color="grey" if status == "n/a" else "red")
                        ax.bar(x, 0, width, color=colors[k % len(colors)],
                               label=name if i == 0 else None)
            ax.set_yscale("log")
            ax.set_xticks(range(len(tasks)))
            ax.set_xticklabels([t["name"] for t in tasks])
            ax.set_ylabel("seconds (median, log scale)")
            ax.set_title(f"{size['label']} ({size['human']}), {cache} cache")
            ax.grid(axis="y", which="both", alpha=0.3)
    handles, labels = axes[0][0].get_legend_handles_labels()
    top = 1 - 0.75 / fig.get_figheight()
    fig.suptitle(f"{doc['suite']}: {doc['title']} ({doc['mode']})", y=0.995)
    fig.legend(handles, labels, loc="upper center", ncol=len(names), frameon=False,
               bbox_to_anchor=(0.5, 1 - 0.3 / fig.get_figheight()))
    fig.tight_layout(rect=(0, 0, 1, top))
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --------------------------------------------------------------------------- files


def write_all(doc: dict[str, Any], suite_name: str, results_dir: Path) -> list[Path]:
    results_dir.mkdir(parents=True, exist_ok=True)
    written = []
    jpath = results_dir / f"{suite_name}.json"
    jpath.write_text(json.dumps(doc, indent=1) + "\n")
    written.append(jpath)
    written += render(doc, suite_name, results_dir)
    return written


def render(doc: dict[str, Any], suite_name: str, results_dir: Path) -> list[Path]:
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

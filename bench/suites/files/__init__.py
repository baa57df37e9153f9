"""Suite `files`: mmapkit's whole-file command-line tools against the classic ones.

On a seeded CSV of numbers (100 columns, like the article "Memory-Mapped I/O vs
Standard File I/O"), every task is done by the classic Unix tool (the task's
baseline), its modern peer (ripgrep, sd) and the `mmapkit` CLI, all in one run:

1. ``count_lines``    wc -l, grep -c '', rg -c '', a naive byte loop (Rust, the
                      article's style), Python ``for line in f``, and mmapkit count
                      --lines with each strategy (auto, mmap, read), 1 and all threads
2. ``count_absent``   a string that never occurs: grep -c -F, rg -c -F, mmapkit count
3. ``find_first``     first offset of a string near the start: grep/rg -m1 -b -o -F,
                      mmapkit find
4. ``regex_literal``  matching lines of a literal-prefixed regex: grep -c -E, rg -c,
                      mmapkit grep -c
5. ``regex_class``    the same for a regex that starts with a character class
   ``regex_*``        eight more pattern classes (search.CLASSES: pure literal, classes
                      only, alternation, -i, anchored, word boundaries, many matches
                      per line, Unicode), warm only, 3 runs on the large size
6. ``replace_same``   "," -> ";" in place: sed -i, sd -F, tr (to a new file),
                      mmapkit replace -F (with and without --sync)
7. ``replace_grow``   "," -> ", ": sed -i, sd -F, mmapkit replace -F; peak RSS
8. ``keep_first``     keep the first line: sed -i 1q, the article's read-everything-
                      then-rewrite (Rust), mmapkit keep-lines 1
9. ``tree_*``        ``grep -r`` with -l, -c, -n and a common literal, a rare literal
                      and a regex over /usr/include and the Python standard library,
                      and -l over a tree of tiny files: grep -r, rg -uuu, mmapkit
                      grep -r (all cores and -j 1); see trees.py
   ``stream_latency`` a live pipe: the median time from writing a matching line to
                      reading it from ``--line-buffered`` output; see stream.py
10. ``bandwidth``     the machine's limit in the same run: every core summing its share
                      of the mapped file (Rust); the report shows each row's GB/s as a
                      share of it

Every command runs as a subprocess (stdout captured, peak RSS from wait4), with
LC_ALL=C. Counts are parsed from each tool's output and must agree; modified files
must be byte-identical (SHA-1) across contenders. The mmapkit binary is
$MMAPKIT_BIN, default target/release/mmapkit (``make cli``); ripgrep and sd come
from .venv/tools/bin (``make bench-tools``) or PATH (see bench/contenders.py).

Modules: ``data`` (the CSV), ``search`` and ``rewrite`` (the tasks and each
contender's commands, by tool family), ``commands`` (running a command, reading its
answer), ``helper`` (the compiled Rust helper, helper.rs).
"""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...contenders import (
    ENV,
    Table,
    command_contender,
    mmapkit_bin,
    mmapkit_cli_available,
    need_tool,
    peer_available,
    tool,
)
from ...harness import above, capped, file_digest, fresh_copy, primed, tool_version, usable_cores
from ...suite import Contender, Dataset, Size, Suite, Task
from . import rewrite, search, stream, trees
from .data import ensure_csv
from .helper import helper, rss_wrapper
from .search import FILE, FIND_FIELD, FIND_LINE, NEEDLE

LARGE = 64 << 20  # sizes above this get fewer repeats for the slow tasks


def _python_count_lines(path: Path) -> int:
    n = 0
    with open(path, "rb") as f:
        for _line in f:
            n += 1
    return n


class FilesSuite(Suite):
    """The ``files`` suite: mmapkit's whole-file tools against wc, grep, ripgrep, sed and sd."""

    name = "files"
    title = "mmapkit's whole-file tools vs wc, grep, ripgrep, sed, sd"
    description = (
        "The whole-file command-line tools of mmapkit (`mmapkit count`, `find`, `grep -c`, "
        "`replace`, `keep-lines`) against the classic Unix tools (`wc`, `grep`, `sed`), "
        "their modern peers (`rg`, `sd`) and the article *Memory-Mapped I/O vs Standard "
        "File I/O*'s approaches, on a seeded CSV of 100 numeric columns at ~200 kB (the "
        "article's small file) and at a large size, with a warm and a cold page cache. "
        "Every tool runs as a subprocess with its output captured; counts must agree and "
        "rewritten files must be byte-identical, on every run. Each task's classic tool is "
        "its baseline (◆); a bandwidth reference measured in the same run shows how close "
        "each tool gets to the machine's limit."
    )
    baseline = "wc"
    layout = "rows"
    metrics = {"peak_rss": {"title": "peak RSS", "unit": "bytes"}}
    limit = ("bandwidth", None)  # the fastest contender of the task
    headline = {
        "capability": "command-line tools on big files",
        "label": "count lines",
        "task": "count_lines",
        "contender": "mmapkit",
        "peers": ["wc", "grep", "rg"],
        "sizes": ["large"],
    }

    def __init__(self) -> None:
        self._info: dict[str, dict[str, Any]] = {}
        self.tasks = self._tasks()
        self.contenders = self._contenders()

    # ----------------------------------------------------------------- sizes and data

    def sizes(self, quick: bool) -> list[Size]:
        # --quick (make run) keeps every contender but with a 16 MiB "large" file
        return [Size("small", 200_000), Size("large", (16 << 20) if quick else (4 << 30))]

    def prepare(self, size: Size, data_dir: Path, log: Callable[[str], None]) -> Dataset:
        rss_wrapper()  # compile the helper now, not in a timed run
        path, info = ensure_csv(data_dir, size.nbytes, log)
        with open(path, "rb") as f:
            head = f.read(1 << 16)
        lines = head.split(b"\n")
        fields = lines[FIND_LINE].split(b",")
        needle = b"," + b",".join(fields[FIND_FIELD : FIND_FIELD + 3]) + b","
        first = head.find(needle)
        if not 0 <= first < len(head):
            raise RuntimeError(f"{path}: no {needle!r} in the first 64 KiB")
        info = {
            **info,
            "find_needle": needle.decode(),
            "find_expected": first,
            "generator": "bench/suites/files",
        }
        self._info[size.label] = info
        log(f"  {path.name}: {info['bytes']:,} bytes, {info['lines']:,} lines")
        return Dataset(size, path, [path], info)

    def _about(self, path: Path, key: str) -> Any:
        """What prepare() found out about the dataset a (working copy of a) file is of."""
        for info in self._info.values():
            if path.name.startswith(f"files-csv-{info['nbytes']}-"):
                return info[key]
        raise RuntimeError(f"no dataset for {path}")

    # ----------------------------------------------------------------- working copies

    @staticmethod
    def _work(ds: Dataset) -> Path:
        return ds.path.with_name(ds.path.stem + ".work.csv")

    def _restore(self, ds: Dataset) -> Path:
        """Fresh, fsync'ed working copy (untimed, before every run of a modifying task)."""
        rewrite.tr_output(self._work(ds)).unlink(missing_ok=True)
        for stale in ds.path.parent.glob(ds.path.stem + ".work.csv?*"):  # tools' temp files
            stale.unlink(missing_ok=True)
        return fresh_copy(ds.path, self._work(ds))

    def _cleanup(self, ds: Dataset) -> None:
        self._work(ds).unlink(missing_ok=True)
        rewrite.tr_output(self._work(ds)).unlink(missing_ok=True)

    # ----------------------------------------------------------------- tasks

    def _tasks(self) -> tuple[Task, ...]:
        few, big = capped(1, above(LARGE)), primed(above(LARGE))  # CPU-bound on the large size

        def rewritten(path: Path, result: Any) -> Any:
            return file_digest(result if isinstance(result, Path) else path)

        three = capped(3, above(LARGE))
        return (
            *search.tasks(few, big, three),
            *rewrite.tasks(few, big, self._restore, self._cleanup, rewritten),
            *trees.tasks("small"),
            stream.task("small"),
            search.bandwidth(usable_cores()),
        )

    # ----------------------------------------------------------------- contenders

    def _fill(self, arg: str, path: Path) -> str:
        if arg == FILE:
            return str(path)
        if (tree := trees.fill(arg, path)) is not None:
            return tree
        return self._about(path, "find_needle") if arg == NEEDLE else arg

    def _contenders(self) -> tuple[Contender, ...]:
        tables = {**search.tables(usable_cores()), **rewrite.tables()}
        tables["grep"] = {**tables["grep"], **trees.table(["-r"]), **stream.table([])}
        tables["rg"] = {**tables["rg"], **trees.table(["-uuu"]), **stream.table([])}

        def cli(
            name: str,
            program: str | Callable[[], str],
            note: str,
            shown: str | None = None,
            **kw: Any,
        ) -> Contender:
            return command_contender(
                name, program, tables[name], fill=self._fill, shown=shown, note=note, **kw
            )

        def peer(name: str, note: str, **kw: Any) -> Contender:
            """A command-line peer: found, and its version checked, by `peer_available`."""
            return cli(name, lambda: need_tool(name), note, available=peer_available(name), **kw)

        def compiled() -> str:
            return str(helper())

        def mk(
            name: str,
            strategy: str | None,
            threads: int | None,
            note: str,
            sync: bool = False,
            only: tuple[str, ...] | None = None,
        ) -> Contender:
            opts = (["--strategy", strategy] if strategy else []) + (
                ["--threads", str(threads)] if threads else []
            )
            table: Table = {
                **search.mmapkit_table(opts),
                **rewrite.mmapkit_table(opts, sync, lambda p: self._about(p, "commas")),
                **trees.table(["grep", "-r", *opts]),
                **stream.table(["grep", *opts]),
            }
            table = {k: v for k, v in table.items() if only is None or k in only}
            return command_contender(
                name,
                lambda: str(mmapkit_bin()),
                table,
                fill=self._fill,
                shown="mmapkit",
                available=mmapkit_cli_available,
                note=note,
            )

        variants = [
            mk(
                f"mmapkit {strategy}" + (" -t1" if threads else ""),
                strategy,
                threads,
                f"`--strategy {strategy}`"
                + (", one thread" if threads else ", all cores")
                + " (count lines only).",
                only=("count_lines",),
            )
            for strategy in ("mmap", "read")
            for threads in (None, 1)
        ]
        return (
            peer("wc", "GNU coreutils `wc -l`."),
            peer(
                "grep",
                "GNU grep (LC_ALL=C, its fastest mode); output to a pipe, never /dev/null "
                "(GNU grep stops at the first match when it sees /dev/null).",
            ),
            peer(
                "rg",
                "ripgrep 15 (`make bench-tools`: `cargo install --locked ripgrep@^15` "
                "into .venv/tools), default options; it searches one file with one "
                "thread. `rg -c` prints nothing for no match (= 0).",
            ),
            peer(
                "sed",
                "GNU sed `-i`: writes a temporary file in the same directory and renames it "
                "over the original (no fsync).",
            ),
            peer(
                "sd",
                "sd 1.0 (`make bench-tools`), in place: it maps the input, builds the "
                "output in memory and renames a temporary file over the original.",
            ),
            peer(
                "tr",
                "GNU `tr` from the file to a new file (stdin/stdout redirected by the "
                "harness, no shell); its output file is what is hashed.",
                commands={"replace_same": f"tr , ';' < {FILE} > NEW"},
            ),
            cli(
                "copy limit",
                compiled,
                shown="files-helper",
                commands={"replace_grow": "files-helper copy GROWN NEW"},
                note="the write limit of the grown replace (compiled helper): "
                "`copy_file_range` of a file holding the expected result (same size, "
                "same bytes; made once, untimed) to a new file, then fsync: what `cp` "
                "+ `sync` would do, with no transformation. Its time is the helper's "
                "run only.",
            ),
            cli(
                "naive loop",
                compiled,
                shown="files-helper",
                note="the article's style in Rust (compiled by the suite with `rustc -O` into "
                "bench/data/tools/): `File::read` into a 64 KiB buffer, a plain "
                "`for &b in &buf[..n] { if b == b'\\n' { count += 1 } }`.",
            ),
            Contender(
                "python",
                {"count_lines": _python_count_lines},
                commands={"count_lines": 'for line in open(FILE, "rb"): n += 1'},
                note="in-process Python (no process start, no RSS measured): "
                "`for line in f` over the file opened in binary mode, at every "
                "size (the lines are ~570 bytes long, so it is not as slow as "
                "it is on short lines).",
            ),
            cli(
                "read+rewrite",
                compiled,
                shown="files-helper",
                note="the article's standard-I/O truncation in Rust (compiled helper, not "
                "Python, so that it is not slowed down by the language): `read_to_end` "
                "the whole file, `position` of the first `\\n`, copy that line, "
                "`File::create` (truncates) and `write_all` it. Its peak RSS is the "
                "file's size.",
            ),
            mk(
                "mmapkit",
                None,
                None,
                "the mmapkit CLI ($MMAPKIT_BIN, default target/release/mmapkit) with its "
                "defaults: `--strategy auto`, `--threads` = all cores.",
            ),
            mk(
                "mmapkit -t1",
                None,
                1,
                "`--threads 1`: what one core does (grep, rg, wc, sed use one).",
                only=(
                    "count_lines",
                    "count_absent",
                    "regex_literal",
                    "regex_class",
                    *(c[0] for c in search.CLASSES),
                    *(c[0] for c in trees.CASES),
                ),
            ),
            *variants,
            mk(
                "mmapkit --sync",
                None,
                None,
                "`replace --sync`: the in-place result is flushed to disk (msync/fsync) before "
                "the command returns; the issue's target for the same-length replace is "
                "about this one.",
                sync=True,
                only=("replace_same",),
            ),
            cli(
                "mmap scan",
                compiled,
                shown="files-helper",
                note="bandwidth reference (compiled helper): one thread per core maps its "
                "contiguous share of the file read-only with `MAP_POPULATE` (no page "
                "faults) and sums it as `u64` words (wrapping add).",
            ),
            cli(
                "read scan",
                compiled,
                shown="files-helper",
                note="bandwidth reference (compiled helper): one thread per core `pread`s "
                "its share into a 256 KiB buffer and sums it the same way (same answer "
                "as `mmap scan`).",
            ),
        )

    # ----------------------------------------------------------------- report

    def versions(self) -> dict[str, str]:
        v = {
            "mmapkit CLI": f"{tool_version([str(mmapkit_bin()), '--version'], ENV)} "
            f"({mmapkit_bin()})"
        }
        for name in ("wc", "grep", "sed", "tr", "rg", "sd"):
            v[name] = tool_version([tool(name) or name, "--version"], ENV)
        v["rustc (helpers)"] = tool_version([shutil.which("rustc") or "rustc", "--version"], ENV)
        return v

    def targets(self, doc: dict[str, Any]) -> list[dict[str, Any]]:
        tree_goals = [
            {
                "label": f"{title}: mmapkit {label}",
                "task": task,
                "contender": "mmapkit",
                "versus": versus,
                "min_speedup": speedup,
                "size": "small",
                "cache": cache,
            }
            for task, title, _f, _p, tree in trees.CASES
            for cache in ("warm", "cold")
            for label, versus, speedup in (
                (("≤ 1.1× -j 1's time", "mmapkit -t1", 1 / 1.1),)
                if tree == "tiny"
                else (("≤ 1.0× rg's time", "rg", 1.0), ("≤ 0.7× GNU grep's time", "grep", 1 / 0.7))
            )
        ]
        large = next((s for s in doc["sizes"] if s["label"] == "large"), None)
        if large is None:
            return tree_goals
        at = (
            ""
            if large["nbytes"] >= (4 << 30)
            else f" (stated for 4 GiB; this run: {large['human']})"
        )

        def goal(
            label: str, task: str, contender: str, versus: str, speedup: float, **extra: Any
        ) -> dict[str, Any]:
            return {
                "label": label + at,
                "task": task,
                "contender": contender,
                "versus": versus,
                "min_speedup": speedup,
                "size": "large",
                "cache": "warm",
                **extra,
            }

        medians = {
            (r["task"], r["contender"]): r.get("median")
            for r in doc["results"]
            if r["size"] == "large" and r["cache"] == "warm" and r["status"] == "ok"
        }

        def faster_peer(task: str) -> str:
            """grep or rg, whichever was faster on the task in this run (issue 14: ≥ 1.2×
            the faster of the two)."""
            g, r = medians.get((task, "grep")), medians.get((task, "rg"))
            return "rg" if r is not None and (g is None or r < g) else "grep"

        classes = [
            ("regex_literal", "literal prefix"),
            ("regex_class", "no literal prefix"),
            *((c[0], c[1]) for c in search.CLASSES),
        ]
        per_class = [
            g
            for task, title in classes
            for g in (
                goal(
                    f"regex {title}: mmapkit ≥ 1.2× the faster of grep and rg",
                    task,
                    "mmapkit",
                    faster_peer(task),
                    1.2,
                    name_versus=True,
                ),
                goal(
                    f"regex {title}: mmapkit -t1 ≥ 1.0× the faster of grep and rg",
                    task,
                    "mmapkit -t1",
                    faster_peer(task),
                    1.0,
                    name_versus=True,
                ),
            )
        ]
        return [
            goal("count lines: mmapkit ≥ 2× wc -l", "count_lines", "mmapkit", "wc", 2),
            goal("absent-string count: mmapkit ≥ 1.8× rg -F", "count_absent", "mmapkit", "rg", 1.8),
            goal(
                "regex count, literal prefix: mmapkit ≥ 1.6× rg",
                "regex_literal",
                "mmapkit",
                "rg",
                1.6,
            ),
            goal(
                "regex count, no literal prefix: mmapkit never below 0.95× rg",
                "regex_class",
                "mmapkit",
                "rg",
                0.95,
            ),
            goal(
                "same-length replace incl. fsync: mmapkit --sync ≥ 50× sed -i",
                "replace_same",
                "mmapkit --sync",
                "sed",
                50,
            ),
            goal(
                "different-length replace: mmapkit ≥ 5× sd, in ≤ 64 MiB",
                "replace_grow",
                "mmapkit",
                "sd",
                5,
                max_metric={"peak_rss": 64 << 20},
            ),
            goal(
                "different-length replace: mmapkit ≥ 0.9× a plain copy of the output "
                "(copy limit), in ≤ 64 MiB",
                "replace_grow",
                "mmapkit",
                "copy limit",
                0.9,
                max_metric={"peak_rss": 64 << 20},
            ),
            goal("keep the first line: mmapkit ≥ 2× sed -i 1q", "keep_first", "mmapkit", "sed", 2),
            *per_class,
            *tree_goals,
        ]

    notes = (
        "Data: `bench/suites/files/data.py` generates the CSV with numpy from a fixed seed: 100 "
        "columns, each either integers of 1–6 digits or decimals with 1–4 integer digits and "
        "two decimals, some columns with negative values; ~570 bytes per line; a quarter of "
        "the lines end with a 101st field of one to three words (ASCII in three cases, and "
        "non-ASCII UTF-8: Zürich, Москва, 東京, ...) for the case-insensitive and Unicode "
        "regex classes. The first "
        "65,536 lines are generated row by row; every later line joins the first 50 fields of "
        "one of them with the last 50 of another (seeded picks), which keeps generation at "
        "disk speed. The small file is a prefix of the large one; both end with a newline "
        "(sizes are the nominal ones: the file stops at the last whole line that fits).",
        "All commands run with LC_ALL=C, as subprocesses started from Python (`Popen`, "
        "~1 ms each, included in every CLI contender's time: on the small size that start-up "
        "is most of what is measured).",
        "Peak RSS is measured for the tasks that rewrite the file (replaces, keep the first "
        "line): those commands run under a tiny compiled wrapper (`files-helper rss CMD`) "
        "that reports the child's `ru_maxrss` from `wait4` (started directly from Python, a "
        "child's figure would include the Python process's own memory). The wrapper adds "
        "one more process start (~0.5 ms) to every contender of those tasks alike. RSS counts "
        "the pages of the file a process maps and touches.",
        "Cold runs drop the whole page cache (when root), which includes the tools' own "
        "binaries: on the small size a cold run mostly measures loading the program.",
        "Repeats: the regex tasks and the replaces run once per cache state on the large size "
        "(their slow contenders take tens of seconds per run there), with a plain read of "
        "the data as the warm-up; the eight other regex classes run warm only, 3 times on "
        "the large size; all other cells use the default number of runs.",
        "Trees (`tree_*`, issue 25): `grep -r` over /usr/include, the Python standard "
        "library (`sysconfig`'s stdlib directory: with its site-packages and `__pycache__`) "
        "and a generated tree of 5,000 tiny files; ripgrep as `rg -uuu` (no ignore "
        "rules, hidden and binary files searched: the files `grep -r` searches; "
        "`rg -uuu --files` lists as many files as `find -type f`). They run at the small "
        "size only (the CSV is not used); the trees' pages are dropped with the rest for "
        "cold runs. Goals: mmapkit ≤ 1.0× rg's time and ≤ 0.7× GNU grep's on each real "
        "tree, ≤ 1.1× mmapkit -j 1's on the tiny files. `bench/trees_run.sh` runs this "
        "part alone. Patterns (issue 40): a common literal (`size_t`, `self`), a rare one "
        "(`EHWPOISON`, `getpeercert`) and the regex `[a-z]+_[0-9]+\\(` (spelled "
        "`[a-z][a-z]*_[0-9][0-9]*[(]`, the same in GNU's basic syntax and rg's).",
        "Live pipe (`stream_latency`, issue 40): each tool reads a pipe the driver writes "
        "(`... | grep --line-buffered ERR`); a sample is the time from writing a matching "
        "line (after one that does not match) to reading it from the tool's output; the "
        f"cell's time is the median of {stream.LINES} samples in one process, without the "
        "tool's start-up.",
        "Run time on a 2-core VM: `--quick` (16 MiB, warm cache only) ~1 min, full (4 GiB) "
        "~55 min (estimated: the eight regex classes add ~13 min), most of it in `sed -i` "
        "and `sd` on the large file and in restoring (copy "
        "+ fsync) the file before every run of the rewriting tasks. The large size needs 3x "
        "its size of free disk (checked before generating).",
        "The targets are the issue's, for a warm cache and the 4 GiB file; speed-up = the "
        "other tool's median time / mmapkit's (mmapkit with its defaults, except "
        "`mmapkit --sync` for the same-length replace). For every regex class: mmapkit ≥ 1.2× "
        "and mmapkit -t1 ≥ 1.0× the faster of grep and rg on that class in the same run (the "
        "goal names it).",
    )

"""The `files` suite's reading tools: count lines, count a string, find the first
occurrence, count the lines matching a regex; and the bandwidth reference. Their
tasks and, per contender, the command of each task."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ...contenders import Table
from ...harness import Task
from .commands import count, offset

ABSENT = "31415926535"  # 11 digits: the data never has more than 6 digits in a row
REGEX_LITERAL = r"7[0-9]{3}\.5"  # literal prefix "7"
REGEX_CLASS = r"[0-9]{4},[0-9]{4}\.[0-9]5"  # starts with a class: no literal prefix
FIND_LINE, FIND_FIELD = 9, 40  # "find first": fields 40..42 of line 10, with their commas

FILE, NEEDLE = "FILE", "NEEDLE"  # placeholders in the commands


def _count(argv: list[str], _p: Path) -> int:
    return count(argv)


def _strict(argv: list[str], _p: Path) -> int:
    return count(argv, strict=True)


def _offset(argv: list[str], _p: Path) -> int:
    return offset(argv)


def tasks(few: Callable[[Any, int], int], big: Callable[[Any], str]) -> tuple[Task, ...]:
    # CPU-bound: once per cache state on the large size
    regex: dict[str, Any] = {"baseline": "grep", "repeats": few, "warmup": big}
    return (
        Task("count_lines", "count lines", baseline="wc",
             note="the number of `\\n` bytes (the file ends with one, so also the number "
                  "of lines for `grep -c ''`, `rg -c ''` and Python)."),
        Task("count_absent", f'count "{ABSENT}" (absent)', baseline="grep",
             note=f"occurrences of `{ABSENT}`, which never occurs (no field has more "
                  "than 6 digits in a row): the whole file is searched. All digits, like "
                  "the data, so prefilters on rare bytes find many candidates."),
        Task("find_first", "find the first occurrence (near the start)", baseline="grep",
             throughput=False,
             note="byte offset of the first occurrence of three fields of line 10 with "
                  "their commas (a string within the first few kB; see the sizes' "
                  "`find_needle` in the JSON); every tool stops at the first match."),
        Task("regex_literal", f"regex count `{REGEX_LITERAL}` (literal prefix)", **regex,
             note=f"lines matching `{REGEX_LITERAL}` (GNU `grep -c` semantics: matching "
                  "lines, not matches; ~14 % of the lines). Its literal prefix lets a "
                  "search jump between candidates. CPU-bound, so on the large size it "
                  "is timed once per cache state after reading the file once."),
        Task("regex_class", f"regex count `{REGEX_CLASS}` (no literal prefix)", **regex,
             note=f"lines matching `{REGEX_CLASS}` (~20 % of the lines): it starts with "
                  "a character class and its only literals (`,` `.`) are in every "
                  "field, so the regex engine itself does the work. Once per cache "
                  "state on the large size, like the other regex."),
    )


def bandwidth(threads: int) -> Task:
    """The machine's limit, measured in the same run (not a contest)."""
    return Task("bandwidth", "bandwidth reference: all-core sum of the file",
                baseline="mmap scan",
                note=f"not a contest: a compiled helper sums the file as 64-bit words with "
                     f"one thread per core ({threads} here), through a populated mapping "
                     "or through pread, in the same run and cache state as the others; the "
                     "faster one's GB/s is the \"limit\" the throughput tables compare with "
                     "(memory bandwidth with a warm cache, the disk with a cold one; cold, it "
                     "is only indicative: the helpers do nothing about readahead, so a tool "
                     "can beat it, > 100 %).")


def grep_like(extended: list[str]) -> Table:
    """GNU grep and ripgrep: the same options (`extended`: grep needs -E for the regexes)."""
    return {
        "count_lines": (_count, ["-c", "", FILE]),
        "count_absent": (_count, ["-c", "-F", ABSENT, FILE]),
        "find_first": (_offset, ["-m1", "-b", "-o", "-F", NEEDLE, FILE]),
        "regex_literal": (_count, ["-c", *extended, REGEX_LITERAL, FILE]),
        "regex_class": (_count, ["-c", *extended, REGEX_CLASS, FILE]),
    }


def tables(threads: int) -> dict[str, Table]:
    """The classic tools' and the helpers' commands, per contender."""
    return {
        "wc": {"count_lines": (_count, ["-l", FILE])},
        "grep": grep_like(["-E"]),
        "rg": grep_like([]),
        "naive loop": {"count_lines": (_count, ["count-lines", FILE])},
        "mmap scan": {"bandwidth": (_count, ["scan-mmap", FILE, str(threads)])},
        "read scan": {"bandwidth": (_count, ["scan-read", FILE, str(threads)])},
    }


def mmapkit_table(opts: list[str]) -> Table:
    """The mmapkit CLI's commands with the options `opts` (strategy, threads)."""
    return {
        "count_lines": (_strict, ["count", "--lines", *opts, FILE]),
        "count_absent": (_strict, ["count", *opts, ABSENT, FILE]),
        "find_first": (_offset, ["find", *opts, NEEDLE, FILE]),
        "regex_literal": (_strict, ["grep", "-c", *opts, REGEX_LITERAL, FILE]),
        "regex_class": (_strict, ["grep", "-c", *opts, REGEX_CLASS, FILE]),
    }

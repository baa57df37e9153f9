"""The `files` suite's reading tools: count lines, count a string, find the first
occurrence, count the lines matching a regex; and the bandwidth reference. Their
tasks and, per contender, the command of each task."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from ...contenders import Table
from ...suite import Task
from .commands import count, offset

ABSENT = "31415926535"  # 11 digits: the data never has more than 6 digits in a row
REGEX_LITERAL = r"7[0-9]{3}\.5"  # literal prefix "7"
REGEX_CLASS = r"[0-9]{4},[0-9]{4}\.[0-9]5"  # starts with a class: no literal prefix
# The other pattern classes (issue 14): (task, title, options, pattern, note). Counted
# with -c by every tool, warm only, on the data's numbers and its text field (a quarter
# of the lines end with words; data.py). No pattern here makes the tools disagree: no
# `\w`/`.`/non-ASCII classes (bytes for grep -E and mmapkit, characters for rg), and no
# uppercase non-ASCII letters in the data for -i.
CLASSES: tuple[tuple[str, str, tuple[str, ...], str, str], ...] = (
    (
        "regex_pure",
        "pure literal",
        (),
        "31415",
        "a plain string of digits (~0.03 % of the lines): a literal search (memchr-like).",
    ),
    (
        "regex_nolit",
        "character classes only",
        (),
        "[7-9][0-9]{4}[0-3]",
        "no literal at all: six digits from three classes (~40 % of the lines).",
    ),
    (
        "regex_alt",
        "alternation of literals",
        (),
        "31415|27182|16180|14142|17320",
        "five digit strings (~0.1 % of the lines): a multi-literal search.",
    ),
    (
        "regex_icase",
        "case-insensitive",
        ("-i",),
        "warning|timeout",
        '`-i` on the words of the text field ("Warning", "timeout"; ~8 % of the lines).',
    ),
    (
        "regex_anchored",
        "anchored ^ and $",
        (),
        r"^[0-9]{3}\.[0-9]{2},|,-[0-9]$",
        "a first field with 3 integer digits and 2 decimals, or a negative one-digit last "
        "field (~94 % of the lines).",
    ),
    (
        "regex_word",
        "word boundaries",
        (),
        r"\b4[0-9]\.[0-9]0\b",
        "`\\b` around a decimal of two integer digits (~18 % of the lines).",
    ),
    (
        "regex_many",
        "many matches per line",
        (),
        r"[0-9]+\.[0-9]5",
        "a decimal ending in 5: many per line, in nearly every line; a count stops at "
        "each line's first.",
    ),
    (
        "regex_unicode",
        "Unicode (UTF-8) literals",
        (),
        "Москва|Ελλάδα [a-z]",
        "non-ASCII words of the text field (~3.5 % of the lines).",
    ),
)
FIND_LINE, FIND_FIELD = 9, 40  # "find first": fields 40..42 of line 10, with their commas

FILE, NEEDLE = "FILE", "NEEDLE"  # placeholders in the commands


def _count(argv: list[str], _p: Path) -> int:
    return count(argv)


def _strict(argv: list[str], _p: Path) -> int:
    return count(argv, strict=True)


def _offset(argv: list[str], _p: Path) -> int:
    return offset(argv)


def tasks(
    few: Callable[[Any, int], int], big: Callable[[Any], str], three: Callable[[Any, int], int]
) -> tuple[Task, ...]:
    # CPU-bound: once per cache state on the large size
    """The counting and searching tasks, given the suite's helpers for patterns."""
    regex: dict[str, Any] = {"baseline": "grep", "repeats": few, "warmup": big}
    # the other classes: warm only (the goal is warm), 3 runs on the large size
    classes = tuple(
        Task(
            name,
            f"regex count `{pattern}`{' ' + ' '.join(flags) if flags else ''} ({title})",
            baseline="grep",
            repeats=three,
            warmup=big,
            caches=("warm",),
            note=f"lines matching `{pattern}`{' with ' + ' '.join(flags) if flags else ''}: "
            f"{note} Warm only; 3 runs on the large size, after reading the file once.",
        )
        for name, title, flags, pattern, note in CLASSES
    )
    return (
        Task(
            "count_lines",
            "count lines",
            baseline="wc",
            note="the number of `\\n` bytes (the file ends with one, so also the number "
            "of lines for `grep -c ''`, `rg -c ''` and Python).",
        ),
        Task(
            "count_absent",
            f'count "{ABSENT}" (absent)',
            baseline="grep",
            note=f"occurrences of `{ABSENT}`, which never occurs (no field has more "
            "than 6 digits in a row): the whole file is searched. All digits, like "
            "the data, so prefilters on rare bytes find many candidates.",
        ),
        Task(
            "find_first",
            "find the first occurrence (near the start)",
            baseline="grep",
            throughput=False,
            note="byte offset of the first occurrence of three fields of line 10 with "
            "their commas (a string within the first few kB; see the sizes' "
            "`find_needle` in the JSON); every tool stops at the first match.",
        ),
        Task(
            "regex_literal",
            f"regex count `{REGEX_LITERAL}` (literal prefix)",
            **regex,
            note=f"lines matching `{REGEX_LITERAL}` (GNU `grep -c` semantics: matching "
            "lines, not matches; ~14 % of the lines). Its literal prefix lets a "
            "search jump between candidates. CPU-bound, so on the large size it "
            "is timed once per cache state after reading the file once.",
        ),
        Task(
            "regex_class",
            f"regex count `{REGEX_CLASS}` (no literal prefix)",
            **regex,
            note=f"lines matching `{REGEX_CLASS}` (~20 % of the lines): it starts with "
            "a character class and its only literals (`,` `.`) are in every "
            "field, so the regex engine itself does the work. Once per cache "
            "state on the large size, like the other regex.",
        ),
        *classes,
    )


def bandwidth(threads: int) -> Task:
    """The machine's limit, measured in the same run (not a contest)."""
    return Task(
        "bandwidth",
        "bandwidth reference: all-core sum of the file",
        baseline="mmap scan",
        note=f"not a contest: a compiled helper sums the file as 64-bit words with "
        f"one thread per core ({threads} here), through a populated mapping "
        "or through pread, in the same run and cache state as the others; the "
        'faster one\'s GB/s is the "limit" the throughput tables compare with '
        "(memory bandwidth with a warm cache, the disk with a cold one; cold, it "
        "is only indicative: the helpers do nothing about readahead, so a tool "
        "can beat it, > 100 %).",
    )


def grep_like(extended: list[str]) -> Table:
    """GNU grep and ripgrep: the same options (`extended`: grep needs -E for the regexes)."""
    return {
        "count_lines": (_count, ["-c", "", FILE]),
        "count_absent": (_count, ["-c", "-F", ABSENT, FILE]),
        "find_first": (_offset, ["-m1", "-b", "-o", "-F", NEEDLE, FILE]),
        "regex_literal": (_count, ["-c", *extended, REGEX_LITERAL, FILE]),
        "regex_class": (_count, ["-c", *extended, REGEX_CLASS, FILE]),
        **{
            name: (_count, ["-c", *extended, *flags, "-e", pattern, FILE])
            for name, _t, flags, pattern, _n in CLASSES
        },
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
        **{
            name: (_strict, ["grep", "-c", *opts, *flags, "-e", pattern, FILE])
            for name, _t, flags, pattern, _n in CLASSES
        },
    }

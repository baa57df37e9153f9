"""The `files` suite's data: a seeded CSV of 100 numeric columns (~570 bytes a line),
a quarter of the lines with a 101st field of text (words in several cases and scripts,
for the case-insensitive, word and Unicode regex classes)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from ...harness import generated_file, need_space
from ...suite import human_bytes

DATA_SEED = 20
GENERATOR_VERSION = 2  # 2: the text field
COLUMNS = 100
SPLIT_AT = 50  # lines past the pool are half a pool line + the other half of another
POOL_LINES = 1 << 16

_PAD = 0
_W = 11  # bytes per field slot: sign, 6 integer digits, '.', 2 decimals, separator
_POW = 10 ** np.arange(5, -1, -1, dtype=np.int64)
TEXT_EVERY = 4  # one pool line in 4 ends with a text field
# ASCII words in three cases and non-ASCII ones (UTF-8; no uppercase non-ASCII letters,
# so ASCII-only and Unicode case folding agree on what matches).
WORDS = (
    "error",
    "Error",
    "ERROR",
    "warning",
    "Warning",
    "timeout",
    "ok",
    "retry",
    "Zürich",
    "São Paulo",
    "naïve café",
    "Gödel",
    "Москва",
    "東京",
    "Ελλάδα",
    "jalapeño",
)


def _column_formats(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per column: decimal (True) or integer, number of integer digits, may be negative."""
    rng = np.random.default_rng([seed, 0xC5F])
    decimal = rng.random(COLUMNS) < 0.6
    digits = np.where(decimal, rng.integers(1, 5, COLUMNS), rng.integers(1, 7, COLUMNS))
    negative = rng.random(COLUMNS) < 0.15
    return decimal, digits, negative


def _rows(rng: np.random.Generator, n: int, cols: slice, formats: tuple, last: bool) -> list[bytes]:
    """`n` CSV row pieces for the columns `cols`, each ending with ',' (or '\\n' if
    `last`): numbers with a column-specific number of integer digits (no leading
    zeros), two decimals in decimal columns, a '-' on half the values of negative
    columns. Vectorised: fixed-width slots padded with NUL, then compacted."""
    decimal, digits, negative = (a[cols] for a in formats)
    k = len(decimal)
    value = (rng.random((n, k)) * (10**digits)).astype(np.int64)
    dec = rng.integers(0, 100, (n, k), dtype=np.int64)
    sign = negative & (rng.random((n, k)) < 0.5)
    a = np.zeros((n, k, _W), np.uint8)
    a[:, :, 0] = np.where(sign, ord("-"), _PAD)
    lead = (value[:, :, None] < _POW) & (_POW > 1)
    a[:, :, 1:7] = np.where(lead, _PAD, (value[:, :, None] // _POW) % 10 + 48)
    a[:, :, 7] = np.where(decimal, ord("."), _PAD)
    a[:, :, 8] = np.where(decimal, dec // 10 + 48, _PAD)
    a[:, :, 9] = np.where(decimal, dec % 10 + 48, _PAD)
    a[:, :, 10] = ord(",")
    if last:
        a[:, -1, 10] = ord("\n")
    flat = a.reshape(n, k * _W)
    ends = np.cumsum(np.count_nonzero(flat, axis=1))
    blob = flat[flat != _PAD].tobytes()
    starts = np.concatenate(([0], ends[:-1]))
    return [blob[s:e] for s, e in zip(starts.tolist(), ends.tolist(), strict=True)]


def _write_csv(path: Path, seed: int, nbytes: int) -> dict[str, int]:
    """Writes the CSV (at most `nbytes`, whole lines); returns its line count.

    A pool of 65,536 lines is generated with numpy and written first, in order;
    every further line joins the first 50 fields of one pool line with the last 50
    of another (both picked by a seeded RNG per 16,384-line block), so lines do not
    repeat in practice, and it runs at disk speed. Every size is a prefix of the
    larger ones.
    """
    formats = _column_formats(seed)
    left: list[bytes] = []
    right: list[bytes] = []
    step = 8192
    for b in range(0, POOL_LINES, step):
        rng = np.random.default_rng([seed, 1, b])
        left += _rows(rng, step, slice(0, SPLIT_AT), formats, last=False)
        right += _rows(rng, step, slice(SPLIT_AT, COLUMNS), formats, last=True)
    _add_text(right, seed)
    written = lines = commas = 0
    with open(path, "wb") as f:
        block_no = 0
        while written < nbytes:
            if block_no == 0:
                pieces = [x for pair in zip(left, right, strict=True) for x in pair]
            else:
                rng = np.random.default_rng([seed, 2, block_no])
                n = 16384
                li = rng.integers(0, POOL_LINES, n).tolist()
                ri = rng.integers(0, POOL_LINES, n).tolist()
                pieces = [None] * (2 * n)  # type: ignore[list-item]
                pieces[0::2] = [left[i] for i in li]
                pieces[1::2] = [right[i] for i in ri]
            block = b"".join(pieces)  # type: ignore[arg-type]
            room = nbytes - written
            if len(block) > room:
                cut = block.rfind(b"\n", 0, room) + 1
                block = block[:cut]
                if not block:
                    break
                room = -1  # last block
            f.write(block)
            written += len(block)
            lines += block.count(b"\n")
            commas += block.count(b",")
            block_no += 1
            if room < 0:
                break
    return {"lines": lines, "commas": commas}


def _add_text(right: list[bytes], seed: int) -> None:
    """Appends ",TEXT" to one right half in TEXT_EVERY: one to three seeded words."""
    rng = np.random.default_rng([seed, 3])
    for i in range(0, len(right), TEXT_EVERY):
        k = int(rng.integers(1, 4))
        words = " ".join(WORDS[j] for j in rng.integers(0, len(WORDS), k).tolist())
        right[i] = right[i][:-1] + b"," + words.encode() + b"\n"


def ensure_csv(data_dir: Path, nbytes: int, log: Callable[[str], None]) -> tuple[Path, dict]:
    """The CSV of (at most) `nbytes`, generated unless already in `data_dir`; its info
    (bytes, lines, seed). The large tasks need the data, a working copy and a
    rewritten copy: 3x its size of free disk, checked first."""
    data_dir.mkdir(parents=True, exist_ok=True)
    path = data_dir / f"files-csv-{nbytes}-s{DATA_SEED}.csv"
    existing = path.stat().st_size if path.exists() else 0
    need_space(
        data_dir,
        3 * nbytes - existing,
        f"the {human_bytes(nbytes)} `files` data",
        "3x the size: the data file, a working copy and a rewritten copy; free some "
        "space, or run a smaller size: --quick, or --sizes small",
    )
    want = {"nbytes": nbytes, "seed": DATA_SEED, "generator": GENERATOR_VERSION}
    info = generated_file(
        path,
        want,
        lambda tmp: _write_csv(tmp, DATA_SEED, nbytes),
        log,
        f"~{nbytes:,} bytes, seed {DATA_SEED}",
    )
    return path, info

"""Deterministic English-like text for the text benchmarks (pyio, later others).

A fixed vocabulary of 3,000 words (about 120 common English words plus
pronounceable made-up ones, fixed seed), drawn with Zipf-like frequencies so
that " the " is very frequent (~6 % of words), arranged in sentences
(capitalised, commas, full stops, question marks), wrapped at 72 columns, in
paragraphs separated by blank lines -- roughly the shape of a Project Gutenberg
novel such as Don Quixote.

Large files are produced without holding them in memory: one ~4 MiB base block
is generated word by word from the seed, then every further block is that
block's lines in a different seeded order (numpy permutation), so blocks differ
but cost almost nothing to produce.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from ..harness import generated_file

GENERATOR_VERSION = 2
BLOCK_BYTES = 4 << 20
_VOCAB_SEED = 0x5EED_70CA
_VOCAB_SIZE = 3000
_LINE_WIDTH = 72

_COMMON = """
the of and to a in that he was it his with as i for had you not be her is on at
by which him this they but my all she from so have were me said what or one there
would their we if no when an been could more them then who now will did out up
into your some any its do our these than very about other only time great over
upon after before first never such little good made shall might must where should
while much those being again every house night found think still under place
thought whole world small heart though among words light young three right years
water people
""".split()


@lru_cache(maxsize=1)
def vocabulary() -> tuple[tuple[str, ...], tuple[float, ...]]:
    """The fixed vocabulary and its cumulative weights (for random.choices)."""
    rng = random.Random(_VOCAB_SEED)
    onsets = [
        "",
        "",
        "b",
        "c",
        "d",
        "f",
        "g",
        "h",
        "l",
        "m",
        "n",
        "p",
        "r",
        "s",
        "t",
        "v",
        "w",
        "b",
        "d",
        "l",
        "m",
        "r",
        "s",
        "t",
        "br",
        "ch",
        "cr",
        "dr",
        "fl",
        "gr",
        "pl",
        "pr",
        "sh",
        "st",
        "th",
        "tr",
        "wh",
    ]
    vowels = ["a", "e", "i", "o", "u", "a", "e", "i", "o", "ea", "ai", "ou", "ee"]
    codas = [
        "",
        "",
        "",
        "",
        "",
        "n",
        "r",
        "s",
        "t",
        "l",
        "d",
        "m",
        "n",
        "r",
        "s",
        "t",
        "ng",
        "nd",
        "st",
        "ck",
        "ll",
        "th",
    ]
    words: list[str] = []
    seen: set[str] = set()
    for w in _COMMON:
        if w not in seen:
            seen.add(w)
            words.append(w)
    while len(words) < _VOCAB_SIZE:
        nsyl = rng.choices((1, 2, 3, 4), weights=(35, 50, 13, 2))[0]
        w = "".join(
            rng.choice(onsets) + rng.choice(vowels) + rng.choice(codas) for _ in range(nsyl)
        )
        if not 2 <= len(w) <= 10 or w in seen:
            continue
        seen.add(w)
        # a few proper nouns, always capitalised
        words.append(w.capitalize() if rng.random() < 0.03 else w)
    # Zipf-Mandelbrot weights by rank; "the" (rank 0) pinned at ~6 % of words.
    weights = [1.0 / (rank + 2.7) for rank in range(len(words))]
    rest = sum(weights[1:])
    weights[0] = rest * 0.06 / 0.94
    cum: list[float] = []
    acc = 0.0
    for wt in weights:
        acc += wt
        cum.append(acc)
    return tuple(words), tuple(cum)


def text_block(seed: int, nbytes: int) -> bytes:
    """Exactly `nbytes` of English-like ASCII text, deterministic in `seed`."""
    words, cum = vocabulary()
    rng = random.Random(seed)
    rand = rng.random
    parts: list[str] = []
    total = 0
    while total < nbytes:
        para: list[str] = []
        for _ in range(rng.randint(2, 9)):
            ws = rng.choices(words, cum_weights=cum, k=rng.randint(3, 28))
            ws[0] = ws[0][0].upper() + ws[0][1:]
            for i in range(len(ws) - 1):
                r = rand()
                if r < 0.06:
                    ws[i] += ","
                elif r < 0.07:
                    ws[i] += ";"
            r = rand()
            ws[-1] += "." if r < 0.84 else "?" if r < 0.92 else "!"
            if rand() < 0.08:  # a line of dialogue
                ws[0] = '"' + ws[0]
                ws[-1] += '"'
            para.extend(ws)
        # wrap at _LINE_WIDTH columns
        lines: list[str] = []
        line: list[str] = []
        width = 0
        for w in para:
            if line and width + 1 + len(w) > _LINE_WIDTH:
                lines.append(" ".join(line))
                line, width = [w], len(w)
            else:
                width += len(w) + (1 if line else 0)
                line.append(w)
        if line:
            lines.append(" ".join(line))
        text = "\n".join(lines) + "\n\n"
        parts.append(text)
        total += len(text)
    return "".join(parts).encode("ascii")[:nbytes]


def _write_text(path: Path, seed: int, nbytes: int) -> dict[str, Any]:
    base = text_block(seed, min(nbytes, BLOCK_BYTES))
    lines = base.splitlines(keepends=True)
    with open(path, "wb") as f:
        written = 0
        block_no = 0
        while written < nbytes:
            if block_no == 0:
                block = base
            else:
                perm = np.random.default_rng([seed, block_no]).permutation(len(lines))
                block = b"".join([lines[i] for i in perm.tolist()])
            block = block[: nbytes - written]
            f.write(block)
            written += len(block)
            block_no += 1
    return {}


def ensure_text_file(
    data_dir: Path, stem: str, seed: int, nbytes: int, log: Callable[[str], None] = lambda msg: None
) -> Path:
    """Path of the seeded text file of `nbytes`, generated unless already there
    (see harness.generated_file)."""
    path = data_dir / f"{stem}-{nbytes}-s{seed}.txt"
    want = {"nbytes": nbytes, "seed": seed, "generator": GENERATOR_VERSION}
    generated_file(
        path,
        want,
        lambda tmp: _write_text(tmp, seed, nbytes),
        log,
        f"{nbytes:,} bytes, seed {seed}",
    )
    return path

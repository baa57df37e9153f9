"""Truncation at random moments is an error or documented zeros, never a
crash (README: "Truncation is an error, not a crash"): another process
truncates (to a random smaller size, 0 included), grows, replaces or
deletes a file while random mmapkit operations run over it: ``mmapkit.open``
maps and their raw numpy views, FeatureStore writers and readers
(``add``, ``get``, ``take``, ``batches``, ``mmapkit.torch.data_loader``
with a forked worker, reopening), ArrayStore, CommitLog, and a torch
DataLoader worker (fork) reading a raw view. ``faulthandler.enable()`` is
called after the first mappings exist in odd seeds. The oracle and its
outcomes are in ``_truncation_child.py``; a failure names its seed, round
and step, and ``python tests/python/_truncation_child.py SEED 1 0 DIR
ROUND`` replays that round (the mutation's moment aside).

The children run in parallel, each for about ``BUDGET_S`` seconds
(``MMAPKIT_TRUNCATION_SECONDS`` overrides; torch's import is on top)."""

from __future__ import annotations

import json
import os
import re
from collections import Counter
from pathlib import Path

from _children import Children

CHILD = Path(__file__).with_name("_truncation_child.py")
#: Seeds of the children (odd: faulthandler enabled), run in parallel.
SEEDS = [1, 2]
MAX_ROUNDS = 400
BUDGET_S = float(os.environ.get("MMAPKIT_TRUNCATION_SECONDS", "35"))
#: The hang breaker, for a loaded machine.
TIMEOUT_S = 300


def test_truncation_at_random_moments_is_an_error_or_zeros_never_a_crash(tmp):
    # The odd seeds enable faulthandler themselves, after mapping.
    with Children(tmp, unset=("PYTHONFAULTHANDLER",)) as kids:
        for seed in SEEDS:
            kids.start(
                seed, [str(CHILD), str(seed), str(MAX_ROUNDS), str(BUDGET_S), str(kids.base)]
            )
        per_seed, problems = [], []
        for c in kids.wait(TIMEOUT_S):
            if c.timed_out:
                problems.append(f"seed {c.seed}: still running after {TIMEOUT_S} s (killed)")
            m = re.search(r"^COUNTS (.*)$", c.out, re.MULTILINE)
            if m:
                per_seed.append(json.loads(m.group(1)))
            if c.died:
                problems.append(
                    f"seed {c.seed}: killed by signal {-c.returncode} (or a fatal error); "
                    f"its last steps:\n{c.last_steps}"
                )
            elif c.returncode != 0 or not m:
                # The child lists its violations (seed, round, step) on stdout.
                problems.append(
                    f"seed {c.seed}: exit {c.returncode}\n{c.out}" + ("" if m else c.last_steps)
                )
        total: dict[str, Counter[str]] = {k: Counter() for k in ("mutations", "outcomes")}
        for c in per_seed:
            print("truncation-random, seed", c["seed"], json.dumps(c))
            for k in total:
                total[k].update(c[k])
        ops = sum(c["ops"] for c in per_seed)
        rounds = sum(c["rounds"] for c in per_seed)
        print(
            f"truncation-random, all seeds: {rounds} rounds, {ops} operations, "
            f"mutations {dict(total['mutations'])}, outcomes {dict(total['outcomes'])}"
        )
        assert not problems, "\n\n".join(problems)
        assert total["mutations"]["truncate"] > 0, per_seed
        assert total["outcomes"]["error"] > 0, per_seed
        assert total["outcomes"]["right"] > 0, per_seed

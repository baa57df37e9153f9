"""Syncs per FeatureStore.add (issue 24: "an add costs about eight syncs").

The commit needs four: one msync per array (rows and header together),
then meta.json's replacement (fsync of the temp file, fsync of the
directory after the rename). Counted with strace in a child process, as the
difference between a run with many adds and one with few, so opening,
creating and closing do not count."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

SYNCS = ("fsync", "fdatasync", "msync", "sync_file_range", "syncfs", "sync")

pytestmark = pytest.mark.skipif(shutil.which("strace") is None, reason="needs strace")


def _syncs(tmp: Path, adds: int, rows: int) -> int:
    code = textwrap.dedent(
        f"""
        import numpy as np, mmapkit
        fs = mmapkit.FeatureStore({str(tmp / f"s{adds}")!r}, "w", dim=8)
        X, y = np.ones(({rows}, 8), np.float32), np.zeros({rows}, np.float32)
        for _ in range({adds}):
            fs.add(X, y)
        fs.close()
        """
    )
    out = tmp / f"strace{adds}.txt"
    trace = ["strace", "-f", "-c", "-o", str(out), "-e", "trace=" + ",".join(SYNCS)]
    r = subprocess.run(
        [*trace, sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    calls = 0
    for line in out.read_text().splitlines():
        m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)$", line)
        if m and m.group(2) in SYNCS:
            calls += int(m.group(1))
    return calls


@pytest.mark.parametrize("rows", [1, 5000])
def test_an_add_costs_at_most_four_syncs(tmp_path, rows):
    few, many = _syncs(tmp_path, 2, rows), _syncs(tmp_path, 12, rows)
    per_add = (many - few) / 10
    # Before the core's FeatureStore (the Python commit): 6 for one row
    # (the data's msync is skipped while the rows fit in the header's
    # page), 8 for more.
    assert per_add <= 4, (few, many)

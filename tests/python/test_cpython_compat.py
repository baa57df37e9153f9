"""CPython's own test_mmap must give the same outcomes with mmapkit.mmap."""

import subprocess
import sys
from pathlib import Path

RUNNER = Path(__file__).with_name("run_cpython_test_mmap.py")


def outcomes(which: str) -> tuple[int, dict[str, str]]:
    r = subprocess.run(
        [sys.executable, str(RUNNER), which],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = [ln.split() for ln in r.stdout.splitlines() if ln.startswith("test.")]
    return r.returncode, dict(lines)


def test_cpython_test_mmap_passes_with_mmapkit():
    code_std, std = outcomes("stdlib")
    code_kit, kit = outcomes("mmapkit")
    assert code_std == 0 and std, "the stdlib run itself must pass"
    assert len(std) >= 40, "test_mmap seems not to have run"
    assert kit == std, {
        t: (std.get(t), kit.get(t)) for t in std.keys() | kit.keys() if std.get(t) != kit.get(t)
    }
    assert code_kit == 0

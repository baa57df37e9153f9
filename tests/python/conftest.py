import os
import subprocess
import tempfile
from pathlib import Path

import pytest


@pytest.fixture
def tmp(tmp_path: Path) -> Path:
    return tmp_path


@pytest.fixture
def small_tmpfs():
    """A 1 MiB tmpfs mount (needs root); skips where mounting is not allowed."""
    d = tempfile.mkdtemp(prefix="mmapkit_tmpfs_")
    r = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", d], capture_output=True, check=False
    )
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    try:
        yield Path(d)
    finally:
        subprocess.run(["umount", d], check=False)
        os.rmdir(d)

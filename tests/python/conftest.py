import os
import subprocess
import tempfile
from pathlib import Path

import pytest

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # the tests that need it skip
    pass
else:
    # No property test depends on time: no deadlines, and no health check
    # that times data generation (on a loaded machine it fails a correct
    # test: issue 27). Tests that pass their own settings keep them.
    settings.register_profile(
        "mmapkit", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("mmapkit")


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

"""Importing an adapter whose extra is not installed says which extra to install
(simulated in a subprocess: a None entry in sys.modules makes the import fail)."""

import subprocess
import sys

import pytest


@pytest.mark.parametrize(
    ("missing", "module", "extra"),
    [
        ("torch", "mmapkit.torch", "mmapkit[torch]"),
        ("dask", "mmapkit.dask", "mmapkit[dask]"),
        ("dask.array", "mmapkit.dask", "mmapkit[dask]"),
    ],
)
def test_missing_extra_names_the_pip_install(missing, module, extra):
    code = (
        "import sys\n"
        f"sys.modules[{missing!r}] = None\n"
        "try:\n"
        f"    import {module}\n"
        "except ImportError as e:\n"
        "    print('ImportError:', e)\n"
        "else:\n"
        "    print('imported')\n"
        "import mmapkit\n"  # the package itself still imports
        "print('mmapkit', mmapkit.FeatureStore.__name__)\n"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert f"pip install '{extra}'" in r.stdout, r.stdout + r.stderr
    assert r.stdout.startswith("ImportError:"), r.stdout
    assert "mmapkit FeatureStore" in r.stdout

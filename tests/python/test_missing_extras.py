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


def test_the_token_samplers_need_no_torch(tmp_path):
    # Without torch there is no process group: rank 0 of 1, batches as numpy arrays.
    code = (
        "import sys\n"
        "sys.modules['torch'] = None\n"
        "import numpy as np\n"
        "from mmapkit import TokenStore\n"
        "from mmapkit.tokens import PackedSampler, WindowSampler\n"
        f"ts = TokenStore({str(tmp_path / 'ts')!r}, 'w')\n"
        "ts.extend([np.arange(50), np.arange(70)])\n"
        "for s in (WindowSampler(ts, 8, 4), PackedSampler(ts, 8, 4, eos=0)):\n"
        "    print(s.rank, s.world_size, sum(len(x) for x, _ in s.batches()))\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split("\n")[:2] == ["0 1 14", "0 1 15"]

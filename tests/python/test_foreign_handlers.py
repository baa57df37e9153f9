"""A SIGBUS handler installed after mmapkit's never turns the truncation
guard off (issue 36, defect 1): ``faulthandler.enable()`` after a mapping
exists, torch elastic's ``@record``, and PyTorch's DataLoader workers (which
reset SIGBUS to the default action). Each case runs in a child process:
another process truncates the mapped file, then a raw numpy view is read;
the child must live and read zeros. Faults that are not a truncated mmapkit
mapping's still reach the later handler (faulthandler's report) and kill."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PRELUDE = """
import os, subprocess, sys
import numpy as np
import mmapkit

def truncate_elsewhere(path, size=0):
    code = f"import os; os.truncate({str(path)!r}, {size})"
    subprocess.run([sys.executable, "-c", code], check=True)

path = sys.argv[1]
with open(path, "wb") as f:
    f.write(np.arange(1 << 16, dtype=np.float64).tobytes())
"""


def run_child(
    tmp: Path, body: str, *args: str, timeout: float = 240
) -> subprocess.CompletedProcess[str]:
    code = PRELUDE + textwrap.dedent(body)
    return subprocess.run(
        [sys.executable, "-c", code, str(tmp / "data.bin"), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
        env={**os.environ, "PYTHONFAULTHANDLER": ""},
    )


def assert_lived(r: subprocess.CompletedProcess[str], expect: str) -> None:
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stdout}\n{r.stderr[-3000:]}"
    assert expect in r.stdout, r.stdout + r.stderr
    assert "Fatal Python error" not in r.stderr, r.stderr


def test_faulthandler_enabled_after_the_mapping_does_not_kill(tmp):
    r = run_child(
        tmp,
        """
        import faulthandler
        m = mmapkit.open(path, "r")
        v = m.numpy(np.float64)
        faulthandler.enable()
        truncate_elsewhere(path)
        print("sum", v.sum(), "enabled", faulthandler.is_enabled())
        try:
            m[0:1]
        except mmapkit.FileTruncatedError as e:
            print("reported", e.filename == os.path.abspath(path) or e.filename == path)
        """,
    )
    assert_lived(r, "sum 0.0 enabled True")
    assert "reported True" in r.stdout


def test_a_handler_that_restores_ours_and_reraises_does_not_kill(tmp):
    # faulthandler's own enable, not the wrapped one: its handler sees the
    # fault first, restores the guard's handler and re-raises the signal
    # (SI_TKILL, no address); the guard finds the truncated mapping itself.
    r = run_child(
        tmp,
        """
        import faulthandler
        m = mmapkit.open(path, "r")
        v = m.numpy(np.float64)
        faulthandler.enable.__wrapped__()
        truncate_elsewhere(path, 4096)
        print("sum", v.sum(), "head", v[:512].sum() == np.arange(512).sum())
        """,
    )
    assert r.returncode == 0, f"exit {r.returncode}\n{r.stderr[-3000:]}"
    assert "sum 130816.0 head True" in r.stdout, r.stdout + r.stderr


def test_torch_elastic_record_does_not_turn_the_guard_off(tmp):
    pytest.importorskip("torch.distributed.elastic.multiprocessing.errors")
    r = run_child(
        tmp,
        """
        from torch.distributed.elastic.multiprocessing.errors import record
        m = mmapkit.open(path, "r")
        v = m.numpy(np.float64)

        @record
        def main():
            truncate_elsewhere(path)
            print("sum", v.sum())

        main()
        """,
    )
    assert_lived(r, "sum 0.0")


@pytest.mark.parametrize("context", ["fork", "spawn"])
def test_a_dataloader_worker_reading_a_truncated_view_lives(tmp, context):
    pytest.importorskip("torch")
    # A nanoGPT-style dataset: a view made in __init__ (or, with spawn,
    # when the pickled dataset is rebuilt in the worker), read in the worker.
    (tmp / "ds.py").write_text(
        textwrap.dedent(
            """
            import subprocess, sys
            import numpy as np
            import torch
            import mmapkit

            class Blocks(torch.utils.data.Dataset):
                def __init__(self, path):
                    self.path = path
                    self._open()

                def _open(self):
                    self.m = mmapkit.open(self.path, "r")
                    self.v = self.m.numpy(np.float64)

                def __getstate__(self):
                    return {"path": self.path}

                def __setstate__(self, state):
                    self.path = state["path"]
                    self._open()

                def __len__(self):
                    return 4

                def __getitem__(self, i):
                    if i == 0:  # another process truncates, the worker's handlers set
                        code = f"import os; os.truncate({self.path!r}, 0)"
                        subprocess.run([sys.executable, "-c", code], check=True)
                    return torch.tensor(float(self.v[i * 16384 : (i + 1) * 16384].sum()))
            """
        )
    )
    r = run_child(
        tmp,
        f"""
        import torch
        sys.path.insert(0, {str(tmp)!r})
        from ds import Blocks
        ds = Blocks(path)
        dl = torch.utils.data.DataLoader(ds, batch_size=None, num_workers=1,
                                         multiprocessing_context={context!r})
        print("sums", [float(x) for x in dl])
        """,
    )
    assert_lived(r, "sums [0.0, 0.0, 0.0, 0.0]")


def test_faulthandler_disable_gives_foreign_faults_their_default_again(tmp):
    # After enable + disable, a foreign SIGBUS is not passed to the disabled
    # faulthandler (which would return and let the fault run forever).
    r = run_child(
        tmp,
        """
        import faulthandler, mmap, signal
        m = mmapkit.open(path, "r")
        faulthandler.enable()
        faulthandler.disable()
        f = open(path, "rb")
        plain = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        truncate_elsewhere(path)
        print("reading", flush=True)
        np.frombuffer(plain, np.float64).sum()
        print("survived a foreign fault")
        """,
        timeout=60,
    )
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "reading" in r.stdout and "survived" not in r.stdout


@pytest.mark.parametrize("how", ["fault", "kill"])
def test_foreign_sigbus_still_reaches_faulthandler_and_kills(tmp, how):
    # The negative control: a fault on a plain stdlib mapping (not
    # mmapkit's) and a SIGBUS sent with kill are not the guard's: the
    # handler installed after it reports them and the process dies.
    r = run_child(
        tmp,
        f"""
        import faulthandler, mmap, signal
        m = mmapkit.open(path, "r")
        v = m.numpy(np.float64)
        faulthandler.enable()
        if {how!r} == "kill":
            os.kill(os.getpid(), signal.SIGBUS)
        else:
            f = open(path, "rb")
            plain = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            truncate_elsewhere(path)
            np.frombuffer(plain, np.float64).sum()
        print("survived")
        """,
        timeout=60,
    )
    assert r.returncode == -signal.SIGBUS, (r.returncode, r.stdout, r.stderr[-2000:])
    assert "survived" not in r.stdout
    assert "Fatal Python error: Bus error" in r.stderr, r.stderr

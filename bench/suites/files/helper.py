"""The `files` suite's compiled helper (helper.rs: the article's approaches in Rust,
the bandwidth reference and the peak-RSS wrapper), built once with rustc -O into
bench/data/tools/, keyed by its source."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from ...harness import REPO_DIR
from ...suite import Unavailable

SOURCE = Path(__file__).with_name("helper.rs")
_path: Path | None = None


def helper() -> Path:
    """The compiled helper (built on first use)."""
    global _path
    if _path is not None:
        return _path
    rustc = shutil.which("rustc") or shutil.which("rustc", path=str(Path.home() / ".cargo" / "bin"))
    if not rustc:
        raise Unavailable("rustc not found (needed to compile the helper programs)")
    source = SOURCE.read_text()
    tools = REPO_DIR / "bench" / "data" / "tools"
    tools.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(source.encode(), usedforsecurity=False).hexdigest()[:12]
    exe = tools / f"files-helper-{digest}"
    if not exe.exists():
        src = tools / f"files-helper-{digest}.rs"
        src.write_text(source)
        p = subprocess.run(
            [rustc, "-O", "--edition", "2021", "-o", str(exe) + ".tmp", str(src)],
            capture_output=True,
            text=True,
            check=False,
        )
        if p.returncode != 0:
            raise Unavailable(f"compiling the helper failed: {p.stderr.strip()[-300:]}")
        os.replace(str(exe) + ".tmp", exe)
    _path = exe
    return exe


def rss_wrapper() -> str | None:
    """The helper's path for `rss` runs, or None (no rustc: peak RSS not measured)."""
    try:
        return str(helper())
    except Unavailable:
        return None

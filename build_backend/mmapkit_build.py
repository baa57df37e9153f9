"""mmapkit's PEP 517 build backend: maturin's, plus the `mmapkit` command in every wheel.

pyproject.toml names this module (`backend-path`), so `pip install .`, `pip install
mmapkit-*.tar.gz` and `make dist` all build through it. maturin builds the extension and
the package. Before it runs, this module builds the CLI (`cargo build --release -p
mmapkit-cli`, in the same cargo target dir as maturin's build, so the core is compiled
once) and stages the binary in maturin's wheel data directory, `mmapkit._native.data/`
beside pyproject.toml: its `scripts/` go to the environment's `bin/`, as ruff and uv ship
their binaries. The directory exists only for the length of one build, so `maturin
develop` never picks up a stale copy. The installed command is the cargo-built binary
itself: its exit codes, signal handling and terminal detection are the CLI's own.

The sdist is maturin's plus what building the CLI needs: maturin keeps only the
extension's path dependencies as workspace members, so the CLI crate's files (as `cargo
package --list` names them) are added and listed as a member, with this module.
"""

from __future__ import annotations

import gzip
import importlib
import io
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# The hooks run with the source tree (a checkout or an unpacked sdist) as the working
# directory (PEP 517); maturin reads pyproject.toml from there too.
CLI_CRATE = "crates/mmapkit-cli"
CLI_PACKAGE = "mmapkit-cli"
CLI_BIN = "mmapkit"
# maturin's default wheel data directory: `<module-name>.data` (pyproject's tool.maturin).
WHEEL_DATA = Path("mmapkit._native.data")
BACKEND_DIR = Path(__file__).resolve().parent

_maturin = importlib.import_module("maturin")

Settings = Mapping[str, Any] | None


# maturin's hooks that need nothing more.
def get_requires_for_build_wheel(config_settings: Settings = None) -> list[str]:
    return list(_maturin.get_requires_for_build_wheel(config_settings))


def get_requires_for_build_editable(config_settings: Settings = None) -> list[str]:
    return list(_maturin.get_requires_for_build_editable(config_settings))


def get_requires_for_build_sdist(config_settings: Settings = None) -> list[str]:
    return list(_maturin.get_requires_for_build_sdist(config_settings))


def prepare_metadata_for_build_wheel(
    metadata_directory: str, config_settings: Settings = None
) -> str:
    return str(_maturin.prepare_metadata_for_build_wheel(metadata_directory, config_settings))


def build_wheel(
    wheel_directory: str, config_settings: Settings = None, metadata_directory: str | None = None
) -> str:
    with _cli_staged():
        return str(_maturin.build_wheel(wheel_directory, config_settings, metadata_directory))


def build_editable(
    wheel_directory: str, config_settings: Settings = None, metadata_directory: str | None = None
) -> str:
    # The command is a copy of the binary built now (rebuild: install again, or `make`,
    # which links .venv/bin/mmapkit to cargo's binary instead).
    with _cli_staged():
        return str(_maturin.build_editable(wheel_directory, config_settings, metadata_directory))


def build_sdist(sdist_directory: str, config_settings: Settings = None) -> str:
    name = str(_maturin.build_sdist(sdist_directory, config_settings))
    _add_cli_sources(Path(sdist_directory) / name)
    return name


def _cargo() -> str:
    return os.environ.get("CARGO", "cargo")


def _build_cli() -> Path:
    """`cargo build --release -p mmapkit-cli`; the binary's path, wherever the target dir is."""
    command = [
        _cargo(),
        "build",
        "--release",
        "-p",
        CLI_PACKAGE,
        "--message-format=json-render-diagnostics",
    ]
    print("Running `{}`".format(" ".join(command)), flush=True)
    # stdout: cargo's JSON messages; stderr (progress, diagnostics): the user's.
    result = subprocess.run(command, stdout=subprocess.PIPE, check=False)
    if result.returncode != 0:
        sys.exit(f"building the mmapkit command failed: {command} exited {result.returncode}")
    for line in result.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-artifact" and message["target"]["name"] == CLI_BIN:
            executable = message.get("executable")
            if executable:
                return Path(executable)
    sys.exit(f"cargo built no `{CLI_BIN}` executable: {command}")


@contextmanager
def _cli_staged() -> Iterator[None]:
    binary = _build_cli()
    scripts = WHEEL_DATA / "scripts"
    shutil.rmtree(WHEEL_DATA, ignore_errors=True)
    scripts.mkdir(parents=True)
    try:
        shutil.copy2(binary, scripts / CLI_BIN)
        yield
    finally:
        shutil.rmtree(WHEEL_DATA, ignore_errors=True)


def _cli_files() -> list[Path]:
    """The CLI crate's files as cargo packages them (those on disk: not the generated ones)."""
    listed = subprocess.run(
        [_cargo(), "package", "--list", "--allow-dirty", "--quiet", "-p", CLI_PACKAGE],
        stdout=subprocess.PIPE,
        text=True,
        check=True,
    ).stdout.split()
    crate = Path(CLI_CRATE)
    return [crate / f for f in listed if f != "Cargo.lock" and (crate / f).is_file()]


def _with_cli_member(manifest: str) -> str:
    """The workspace manifest maturin wrote, with the CLI crate among its members."""
    members = tomllib.loads(manifest)["workspace"]["members"]
    if CLI_CRATE in members:
        return manifest
    pattern = re.compile(r"^members\s*=\s*\[.*?\]", flags=re.MULTILINE | re.DOTALL)
    new, count = pattern.subn(
        lambda _: "members = " + json.dumps([*members, CLI_CRATE]), manifest, count=1
    )
    if count != 1 or tomllib.loads(new)["workspace"]["members"] != [*members, CLI_CRATE]:
        sys.exit("could not add the CLI crate to the sdist's workspace members")
    return new


def _add_cli_sources(sdist: Path) -> None:
    """Rewrites maturin's sdist with the CLI crate and this backend in it."""
    members: list[tuple[tarfile.TarInfo, bytes | None]] = []
    with tarfile.open(sdist, "r:gz") as old:
        for info in old:
            file = old.extractfile(info) if info.isfile() else None
            members.append((info, file.read() if file is not None else None))
    top = members[0][0].name.split("/", 1)[0]
    have = {m.name for m, _ in members}
    added = [*_cli_files(), *sorted(BACKEND_DIR.glob("*.py"))]
    buffer = io.BytesIO()
    # gzip with mtime 0, as maturin writes it: the same tree gives the same bytes.
    with (
        gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0) as zipped,
        tarfile.open(fileobj=zipped, mode="w", format=tarfile.PAX_FORMAT) as new,
    ):
        for info, data in members:
            content = data
            if info.name == f"{top}/Cargo.toml" and data is not None:
                content = _with_cli_member(data.decode()).encode()
                info.size = len(content)
            new.addfile(info, io.BytesIO(content) if content is not None else None)
        for path in added:
            relative = path.resolve().relative_to(Path.cwd().resolve())
            name = f"{top}/{relative.as_posix()}"
            if name in have:
                continue
            info = new.gettarinfo(path, arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = members[0][0].mtime  # maturin's fixed time: the same bytes each build
            with path.open("rb") as f:
                new.addfile(info, f)
    sdist.write_bytes(buffer.getvalue())

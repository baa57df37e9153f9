"""The README's quick-starts must really run."""

import os
import re
import shlex
import shutil
import socket
import subprocess
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.DOTALL)


def test_readme_starts_with_the_two_commands():
    first = blocks("sh")[0]
    assert first.splitlines()[0].startswith("make run") and "make test" in first.splitlines()[1]


def test_python_quickstart_runs():
    (code,) = blocks("python")
    exec(compile(code, "README.md", "exec"), {})


def run_cli_quickstart(cwd, env) -> None:
    """Runs the README's `console` block as written in `cwd`, with `env`'s PATH finding the
    `mmapkit` command, and checks it."""
    (console,) = blocks("console")
    outputs = []
    for line in console.splitlines():
        cmd = line.removeprefix("$ ").split("  #")[0].strip()
        r = subprocess.run(
            cmd, shell=True, cwd=cwd, env=env, capture_output=True, text=True, check=False
        )
        assert r.returncode == 0, (cmd, r.stderr)
        outputs.append(r.stdout)
    assert outputs[1] == "4\n"  # count --lines
    assert outputs[2] == "3:2,bob\n4:3,bea\n"  # grep -n
    assert (Path(cwd) / "demo.csv").read_text() == "id;name\n1;ann\n"


def test_cli_quickstart_runs(tmp_path):
    # `make` links the venv's bin/mmapkit to cargo's build (`pip install .` puts the
    # wheel's copy there): in the venv, the README's lines run as written.
    scripts = Path(sysconfig.get_path("scripts"))
    env = {**os.environ, "PATH": os.pathsep.join([str(scripts), os.environ.get("PATH", "")])}
    assert shutil.which("mmapkit", path=env["PATH"]) == str(scripts / "mmapkit")
    run_cli_quickstart(tmp_path, env)


def kv_quickstart() -> list[str]:
    """The README's `mmapkit-kv` lines (an indented block in the replication bullet)."""
    (block,) = re.findall(r"\n  ```\n(  mmapkit-kv .*?)\n  ```", README, flags=re.DOTALL)
    return [line.strip() for line in block.splitlines()]


KV_INSTALL = "cargo install --locked --path crates/mmapkit-raft"


def test_kv_quickstart_runs_from_cargo_install(tmp_path):
    """`cargo install` as the README says (into a scratch root; the checkout's target dir,
    where `make test` built mmapkit-kv already, so it takes seconds), then the README's
    three-node cluster lines as written, on their ports."""
    assert f"\n{KV_INSTALL}  " in README
    for port in (7001, 7002, 7003):
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                pytest.skip(f"port {port}, which the README's cluster uses, is taken")
    root = tmp_path / "cargo"
    env = {
        **os.environ,
        "CARGO_TARGET_DIR": os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target")),
    }
    subprocess.run([*KV_INSTALL.split(), "--root", root], cwd=ROOT, env=env, check=True)
    env = {**os.environ, "PATH": os.pathsep.join([str(root / "bin"), os.environ.get("PATH", "")])}
    assert shutil.which("mmapkit-kv", path=env["PATH"]) == str(root / "bin" / "mmapkit-kv")

    serve, *commands = kv_quickstart()
    serve, comment = serve.split("&")
    assert comment.split("#")[1].strip() == "and 2, 3"
    nodes = []
    try:
        for i in (1, 2, 3):
            node = serve.replace("--id 1", f"--id {i}").replace("n1", f"n{i}")
            args = shlex.split(node.replace(":7001", f":700{i}"))
            nodes.append(
                subprocess.Popen(args, cwd=tmp_path, env=env, stdout=subprocess.PIPE, text=True)
            )
        for i, node in enumerate(nodes, 1):
            assert node.stdout is not None
            assert f"node {i} listening on 127.0.0.1:700{i}" in node.stdout.readline()
        outputs = []
        for cmd in commands:
            r = subprocess.run(
                cmd, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, check=False
            )
            assert r.returncode == 0, (cmd, r.stdout, r.stderr)
            outputs.append(r.stdout)
        assert outputs[-1] == "bye\n"  # get, through a follower, after the cas
    finally:
        for node in nodes:
            node.terminate()
        for node in nodes:
            node.wait(timeout=60)

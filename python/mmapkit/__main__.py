"""``python -m mmapkit ARGS...`` runs the ``mmapkit`` command with ARGS.

The command is the CLI binary installed with this package (pip puts the wheel's
script into the environment's ``bin/``; ``make`` links ``.venv/bin/mmapkit`` to
cargo's build). This process *becomes* it (``exec``), so exit codes, signals, the
terminal and stdout are the binary's own, exactly as when it is run by name.
"""

import os
import signal
import sys
import sysconfig
from pathlib import Path

NAME = "mmapkit"


def find_cli() -> Path:
    """The ``mmapkit`` binary of this installation (raises ``FileNotFoundError``)."""
    schemes = [sysconfig.get_path("scripts")]
    user = sysconfig.get_preferred_scheme("user")
    schemes.append(sysconfig.get_path("scripts", user))  # pip install --user
    # pip install --target DIR: the package in DIR/mmapkit, scripts in DIR/bin.
    schemes.append(str(Path(__file__).resolve().parents[1] / "bin"))
    for scripts in schemes:
        path = Path(scripts) / NAME
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise FileNotFoundError(
        f"no {NAME} command installed with this package (looked in {', '.join(schemes)})"
    )


def main() -> None:
    """Replaces this process with the ``mmapkit`` binary, passing on ``sys.argv[1:]``
    (exit status 1 with a message when no binary is installed)."""
    try:
        path = find_cli()
    except FileNotFoundError as e:
        sys.exit(f"{NAME}: {e}")
    # Python ignores SIGPIPE and SIGXFSZ, and ignored signals stay ignored across
    # exec: give the binary the dispositions a shell would.
    for sig in (signal.SIGPIPE, signal.SIGXFSZ):
        signal.signal(sig, signal.SIG_DFL)
    sys.stdout.flush()
    sys.stderr.flush()
    os.execv(path, [NAME, *sys.argv[1:]])  # noqa: S606 (argv as given, no shell)


if __name__ == "__main__":
    main()

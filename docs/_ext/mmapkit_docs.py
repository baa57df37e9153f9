"""mmapkit's Sphinx extension: the CLI reference from the built CLI, links to rustdoc.

``.. mmapkit-cli-help::`` runs the CLI named by ``mmapkit_cli`` with ``--help``, then
each subcommand it lists (recursively), and emits one section per command with its
help as a literal block: the reference is what the binary prints, never a copy.
``:rustdoc:`crate``` links to ``rust/CRATE/index.html``, which the build copies from
``mmapkit_rustdoc`` (``cargo doc --no-deps``); a missing rustdoc fails the build.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

from docutils import nodes
from docutils.parsers.rst import Directive
from sphinx.application import Sphinx
from sphinx.errors import ExtensionError

# A subcommand line of clap's help: two spaces, the name, two or more spaces, its summary.
_SUBCOMMAND = re.compile(r"^  ([a-z][a-z-]*)\s{2,}\S")


def subcommands(help_text: str) -> list[str]:
    """The subcommands a clap ``--help`` lists (before its Options section), not ``help``."""
    names = []
    for line in help_text.splitlines():
        if line.startswith("Options:"):
            break
        m = _SUBCOMMAND.match(line)
        if m and m.group(1) != "help":
            names.append(m.group(1))
    return names


def _help(cli: str, args: list[str]) -> str:
    try:
        out = subprocess.run(  # noqa: S603 (the project's own CLI)
            [cli, *args, "--help"], capture_output=True, text=True, check=True, timeout=60
        )
    except (OSError, subprocess.CalledProcessError) as e:
        raise ExtensionError(
            f"cannot run {cli!r} {' '.join(args)} --help ({e}): build the CLI first "
            "(`make cli`) or set MMAPKIT_CLI"
        ) from e
    return out.stdout


class CliHelp(Directive):
    """Sections with ``mmapkit [SUB...] --help`` for every (sub)command."""

    has_content = False

    def run(self) -> list[nodes.Node]:
        """Runs the CLI and returns one section per command."""
        env = self.state.document.settings.env
        cli = env.config.mmapkit_cli
        env.note_dependency(cli)
        return self._sections(cli, [])

    def _sections(self, cli: str, args: list[str]) -> list[nodes.Node]:
        text = _help(cli, args)
        title = " ".join(["mmapkit", *args])
        section = nodes.section(
            ids=[nodes.make_id(title)], names=[nodes.fully_normalize_name(title)]
        )
        section += nodes.title(text=title)
        section += nodes.literal_block(text, text, language="text")
        self.state.document.note_implicit_target(section)
        out: list[nodes.Node] = [section]
        for name in subcommands(text):
            out.extend(self._sections(cli, [*args, name]))
        return out


def rustdoc_role(
    _name: str,
    rawtext: str,
    text: str,
    _lineno: int,
    inliner: Any,
    _options: Any = None,
    _content: Any = None,
) -> tuple[list[nodes.Node], list[nodes.Node]]:
    """``:rustdoc:`crate``` → a link to that crate's rustdoc in the built site."""
    docname = inliner.document.settings.env.docname
    uri = "../" * docname.count("/") + f"rust/{text}/index.html"
    return [nodes.reference(rawtext, text, refuri=uri, classes=["rustdoc"])], []


def copy_rustdoc(app: Sphinx, exception: Exception | None) -> None:
    """Copies the crates' rustdoc into ``OUTDIR/rust`` (html builds only)."""
    if exception is not None or app.builder.format != "html":
        return
    src = Path(app.config.mmapkit_rustdoc)
    missing = [c for c in app.config.mmapkit_rust_crates if not (src / c / "index.html").is_file()]
    if missing:
        raise ExtensionError(
            f"no rustdoc for {', '.join(missing)} in {src}: run `cargo doc --no-deps` "
            "(`make docs` does)"
        )
    dest = Path(app.outdir) / "rust"
    shutil.rmtree(dest, ignore_errors=True)
    shutil.copytree(src, dest)


def setup(app: Sphinx) -> dict[str, Any]:
    """Registers the directive, the role, their settings and the rustdoc copy."""
    app.add_config_value("mmapkit_cli", "mmapkit", "env")
    app.add_config_value("mmapkit_rustdoc", "target/doc", "env")
    app.add_config_value("mmapkit_rust_crates", [], "env")
    app.add_directive("mmapkit-cli-help", CliHelp)
    app.add_role("rustdoc", rustdoc_role)
    app.connect("build-finished", copy_rustdoc)
    return {"parallel_read_safe": True, "parallel_write_safe": True}

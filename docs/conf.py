"""Sphinx configuration of mmapkit's documentation site (``make docs``).

Prose pages are MyST Markdown (the project's prose is Markdown); the Python API
reference is autodoc over the package's docstrings. They are plain reST with Sphinx's
roles (``:class:``, ``:func:``), no Google/NumPy sections, so there is no napoleon
(it would misread a property's ``Rows so far: ...`` as a type); the CLI reference is
the built CLI's ``--help``, run at build time (``_ext/mmapkit_docs.py``); the crates'
rustdoc is copied in under ``rust/``.

Sphinx rather than MkDocs: the docstrings are already reST with Sphinx roles, which
mkdocstrings would show as literal text; autodoc imports the compiled ``_native``
module and documents what it really exports (mkdocstrings reads source, here only a
stub); ``-W -n`` turns every unresolved reference into a build failure; and the
search index and a custom directive (the CLI's help) need no extra plugin stack.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).parent / "_ext"))
# The package from the checkout (with its built extension) when not installed.
sys.path.insert(0, str(ROOT / "python"))

import mmapkit  # noqa: E402

project = "mmapkit"
author = "the mmapkit authors"
copyright = "the mmapkit authors"
release = version = mmapkit.__version__

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "mmapkit_docs",
]
source_suffix = {".rst": "restructuredtext", ".md": "markdown"}
exclude_patterns = ["_build", "README.md"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3

html_theme = "alabaster"
html_title = f"mmapkit {release}"
html_static_path: list[str] = []
# A page without an icon makes browsers request /favicon.ico (a 404 on most hosts).
html_favicon = "_static/favicon.svg"
html_theme_options = {"description": "Memory-mapped I/O that is safe on real files"}

autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
# Types go into the descriptions, where an unresolvable numpy/torch/dask type is text.
autodoc_typehints = "description"
autodoc_typehints_format = "short"

# Every reference must resolve, except to the third-party and stdlib types the
# annotations name (no intersphinx: the build needs no network).
nitpicky = True
nitpick_ignore_regex = [
    (
        r"py:.*",
        (
            r"(np|npt|numpy|torch|dask|da|distributed|sklearn|os|io|collections|typing|"
            r"concurrent|multiprocessing|pathlib|mmap|builtins|_?types?|abc)\..*"
        ),
    ),
    (
        r"py:class",
        (
            r"(Any|Callable|Iterator|Iterable|Sequence|Mapping|Self|PathLike|Source|"
            r"ArrayLike|DTypeLike|NDArray|Buffer|ReadableBuffer|T|mmap|Tensor|Array)"
        ),
    ),
    # The native cores behind the facades, private bases, type variables.
    (
        r"py:class",
        (
            r"(ArrayStoreCore|FeatureStoreCore|SharedSegment|LogServer|CommitLogIter|"
            r"mmapkit\._\w+\..*|mmapkit\.\w+\._\w+|.*\.T)"
        ),
    ),
    (
        r"py:(class|exc|obj)",
        (
            r"(int|str|bytes|float|bool|None|object|tuple|list|dict|type|"
            r"slice|memoryview|bytearray|OSError|ValueError|TypeError|RuntimeError|BufferError|"
            r"Exception|IndexError|KeyError|StopIteration|Warning|RuntimeWarning)"
        ),
    ),
]

# The CLI whose --help the CLI reference shows: $MMAPKIT_CLI, else the release build.
mmapkit_cli = os.environ.get("MMAPKIT_CLI") or str(
    Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "release" / "mmapkit"
)
# The crates' rustdoc (`cargo doc --no-deps`), copied to rust/ in the built site.
mmapkit_rustdoc = str(Path(os.environ.get("CARGO_TARGET_DIR", ROOT / "target")) / "doc")
mmapkit_rust_crates = ["mmapkit", "mmapkit_replicate", "mmapkit_raft"]

"""A module with exactly the stdlib ``mmap`` module's names, backed by mmapkit.

``sys.modules["mmap"] = mmapkit.compat`` swaps mmapkit in for code that
imports ``mmap`` itself (this is how CPython's test_mmap is run against it).
"""

from mmap import *  # noqa: F403 - every platform constant (PAGESIZE, ACCESS_*, MAP_*, ...)

# The class, replacing the stdlib one of the same name on purpose.
from . import mmap  # type: ignore[assignment]  # noqa: F401

error = OSError

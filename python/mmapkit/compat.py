"""A module with exactly the stdlib ``mmap`` module's names, backed by mmapkit.

``sys.modules["mmap"] = mmapkit.compat`` swaps mmapkit in for code that
imports ``mmap`` itself (this is how CPython's test_mmap is run against it).
"""

from mmap import *  # noqa: F401,F403 - every platform constant
from mmap import __dict__ as _stdlib

from . import mmap  # noqa: F401 - the class, replacing the stdlib one

error = OSError
PAGESIZE = _stdlib["PAGESIZE"]
ALLOCATIONGRANULARITY = _stdlib["ALLOCATIONGRANULARITY"]
ACCESS_DEFAULT = _stdlib["ACCESS_DEFAULT"]
ACCESS_READ = _stdlib["ACCESS_READ"]
ACCESS_WRITE = _stdlib["ACCESS_WRITE"]
ACCESS_COPY = _stdlib["ACCESS_COPY"]

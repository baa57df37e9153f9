"""Type aliases the package's modules share."""

from __future__ import annotations

import os
from typing import TypeAlias

PathLike: TypeAlias = str | os.PathLike[str]
"""A file system path, as ``open`` takes it."""

"""Type aliases the package's modules share."""

from __future__ import annotations

import os
from typing import Literal, TypeAlias

PathLike: TypeAlias = str | os.PathLike[str]
"""A file system path, as ``open`` takes it."""

StatsStrategy: TypeAlias = Literal["auto", "mmap", "read"]
"""How :mod:`mmapkit.stats` reads a path: by page-cache residency, mapped, or with ``pread``."""

QuantileMethod: TypeAlias = Literal["linear", "inverted_cdf"]
"""The quantile methods of numpy's that :mod:`mmapkit.stats` computes exactly."""

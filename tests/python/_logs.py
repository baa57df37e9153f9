"""Commit logs the Python tests build."""

from __future__ import annotations

from pathlib import Path

import mmapkit


def damaged_log(d: Path) -> Path:
    """A commit log at ``d`` of 200 entries ``b"entry 00000"``, ... over
    4 KiB segments, entry 1's payload flipped in its first segment, whose
    path it returns."""
    with mmapkit.CommitLog(d, segment_size=4096, sync="never") as log:
        for i in range(200):
            log.append([b"entry %05d" % i])
    seg = min(d.glob("*.seg"))
    b = bytearray(seg.read_bytes())
    b[32 + 16 + 2] ^= 0xFF  # entry 1's payload
    seg.write_bytes(bytes(b))
    return seg

"""Serve a commit log over HTTP and follow it from another node.

>>> import mmapkit, mmapkit.replicate as rep
>>> with mmapkit.CommitLog("wal") as wal:
...     wal.append([b"x"] * 1000)                   # the first new index
1
>>> with rep.serve("wal") as server:  # doctest: +NORMALIZE_WHITESPACE
...     rep.follow(server.url, "copy")              # catch up once
{'appended': 1000, 'bytes': 1000, 'truncated': 0, 'retries': 0,
 'first_index': 1, 'last_index': 1000}

``serve`` opens the log read-only (another process may append meanwhile),
serves only the entries its writer has synced (``serve_unsynced=True``
serves the rest too), and listens on loopback by default; binding any
other address requires a bearer ``token``. ``follow`` resumes from the follower's own last entry,
records which log it copies (the leader's log id) and refuses another,
truncates its own entries only where the leader's truncation history says
they were cut, checks every entry's CRC32C before appending, and retries
dropped connections. It raises :class:`SnapshotRequiredError` when the
leader purged entries the follower needs, :class:`DivergedError` when the
leader serves another log or one that differs in a way its history does not
explain (nothing is truncated; ``reset=True`` discards the follower's
entries and copies the log again), and :class:`ReplicationError` for other
failures (the message names the URL and directory). The GIL is released
while they work. The protocol is documented in the ``mmapkit-replicate``
crate.
"""

from __future__ import annotations

import os
from types import TracebackType
from typing import Self

from ._native import DivergedError, LogServer, ReplicationError, SnapshotRequiredError, log_follow
from ._types import PathLike

__all__ = [
    "DivergedError",
    "ReplicationError",
    "Server",
    "SnapshotRequiredError",
    "follow",
    "serve",
]


class Server:
    """A running log server; a context manager that closes it on exit."""

    def __init__(self, native: LogServer) -> None:
        self._native = native

    @property
    def url(self) -> str:
        """``http://HOST:PORT`` (the chosen port when bound to port 0)."""
        return self._native.url

    @property
    def closed(self) -> bool:
        """Whether the server was stopped."""
        return self._native.closed

    def close(self) -> None:
        """Stops the server (idempotent)."""
        self._native.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "closed" if self.closed else "serving"
        return f"<mmapkit.replicate.Server {self.url} ({state})>"


def serve(
    dir: PathLike,
    bind: str = "127.0.0.1:0",
    token: str | None = None,
    serve_unsynced: bool = False,
) -> Server:
    """Serves the log in ``dir`` on ``bind`` (``HOST:PORT``; port 0 picks a free one).

    Only entries the writer has synced are served (a power loss of this
    machine cannot take them back), unless ``serve_unsynced``: then
    followers get entries as soon as they are appended, and drop and copy
    again those the writer had not synced once it reopens the log.
    """
    return Server(LogServer(os.fspath(dir), bind, token, serve_unsynced))


def follow(
    url: str,
    dir: PathLike,
    *,
    once: bool = True,
    sync: str | float | None = "batch",
    token: str | None = None,
    reset: bool = False,
) -> dict[str, int]:
    """Copies the log served at ``url`` into ``dir`` (created if missing).

    With ``once`` (the default) it returns when caught up; otherwise it keeps
    following until interrupted (KeyboardInterrupt stops it cleanly and is
    re-raised). ``sync`` is the follower log's durability: ``"batch"``,
    ``"never"`` or an interval in milliseconds. ``dir`` records which log it
    copies and refuses another one (a replaced leader directory, an empty
    leader) unless ``reset``, which discards its entries first (counted in
    ``truncated``). Returns a report:
    ``appended``, ``bytes``, ``truncated``, ``retries``, ``first_index``,
    ``last_index``.
    """
    return log_follow(url, os.fspath(dir), once, sync, token, reset)

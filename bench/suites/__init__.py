"""Registry of benchmark suites.

A suite lives in its own module here and is registered below as
``name -> "module:ClassName"``; modules are imported lazily, so one suite
failing to import does not break the others. To add a suite, write a subclass
of :class:`bench.harness.Suite` and add one line to ``SUITES``.
"""

from __future__ import annotations

import importlib

from ..suite import Suite

SUITES: dict[str, str] = {
    "pyio": "bench.suites.pyio:PyioSuite",
    "files": "bench.suites.files:FilesSuite",
    "log": "bench.suites.log:LogSuite",
    "arrays": "bench.suites.arrays:ArraysSuite",
    "kmers": "bench.suites.kmers:KmersSuite",
    "replication": "bench.suites.replication:ReplicationSuite",
    "features": "bench.suites.features:FeaturesSuite",
}


def names() -> list[str]:
    """The suites' names, in the order ``all`` runs them."""
    return list(SUITES)


def load(name: str) -> Suite:
    """A new instance of the suite called ``name`` (``SystemExit`` naming the known ones)."""
    try:
        target = SUITES[name]
    except KeyError:
        raise SystemExit(f"unknown suite {name!r}; known: {', '.join(SUITES)}") from None
    module, _, cls = target.partition(":")
    suite = getattr(importlib.import_module(module), cls)()
    if suite.name != name:
        raise RuntimeError(f"suite registered as {name!r} calls itself {suite.name!r}")
    return suite

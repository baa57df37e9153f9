"""Keeps mmapkit's SIGBUS guard in front of handlers installed after it.

The guard (the core's ``map`` module) turns a fault on a truncated mapped
file into zero pages and a ``FileTruncatedError``. A handler installed
later sees the fault first:

* ``faulthandler.enable()`` (also called by torch elastic's ``@record``)
  would print "Fatal Python error: Bus error" and re-raise (the guard then
  still recovers, but the message is a lie and faulthandler is off for
  SIGBUS afterwards);
* PyTorch's DataLoader workers reset SIGBUS to the default action and
  re-raise: the worker dies.

So this module wraps ``faulthandler.enable``/``disable`` and PyTorch's
``_set_worker_signal_handlers`` (now, or when
``torch.utils.data._utils.signal_handling`` is first imported) to put the
guard back in front afterwards; the guard passes every fault that is not a
truncated mmapkit mapping's on to them, so their own reports still work.
"""

from __future__ import annotations

import faulthandler
import functools
import importlib.abc
import importlib.machinery
import sys
from collections.abc import Callable, Sequence
from types import ModuleType
from typing import Any

from ._native import guard_below_removed, guard_on_top

_TORCH_SIGNALS = "torch.utils.data._utils.signal_handling"


def _wrap_faulthandler() -> None:
    enable, disable = faulthandler.enable, faulthandler.disable
    if getattr(enable, "_mmapkit_guard", False):
        return

    @functools.wraps(disable)
    def disable_() -> None:
        was = faulthandler.is_enabled()
        disable()
        if was:
            guard_below_removed()

    @functools.wraps(enable)
    def enable_(*args: Any, **kwargs: Any) -> None:
        if faulthandler.is_enabled():
            # Re-enabling keeps faulthandler's first handler; unwind it so
            # the layers stay known (its new file and options still apply).
            disable_()
        enable(*args, **kwargs)
        guard_on_top()

    enable_._mmapkit_guard = True  # type: ignore[attr-defined]
    faulthandler.enable = enable_
    faulthandler.disable = disable_


def _wrap_torch_workers(module: ModuleType) -> None:
    original = getattr(module, "_set_worker_signal_handlers", None)
    if original is None or getattr(original, "_mmapkit_guard", False):
        return

    @functools.wraps(original)
    def set_handlers(*args: Any, **kwargs: Any) -> Any:
        r = original(*args, **kwargs)
        guard_on_top()
        return r

    set_handlers._mmapkit_guard = True  # type: ignore[attr-defined]
    module._set_worker_signal_handlers = set_handlers  # type: ignore[attr-defined]


class _Loader(importlib.abc.Loader):
    """A module's own loader, then ``patch(module)``."""

    def __init__(self, inner: importlib.abc.Loader, patch: Callable[[ModuleType], None]) -> None:
        self.inner, self.patch = inner, patch

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self.inner.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        self.inner.exec_module(module)
        self.patch(module)

    def __getattr__(self, name: str) -> Any:
        # get_source, get_filename, is_package, ...: the module's own loader's.
        return getattr(self.inner, name)


class _OnImport(importlib.abc.MetaPathFinder):
    """Calls ``patch(module)`` once module ``name`` has been imported."""

    def __init__(self, name: str, patch: Callable[[ModuleType], None]) -> None:
        self.name, self.patch = name, patch

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname != self.name:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None and spec.loader is not None:
                spec.loader = _Loader(spec.loader, self.patch)
                return spec
        return None


def install() -> None:
    """Wraps faulthandler now and PyTorch's worker set-up now or on import."""
    _wrap_faulthandler()
    module = sys.modules.get(_TORCH_SIGNALS)
    if module is not None:
        _wrap_torch_workers(module)
    elif not any(isinstance(f, _OnImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _OnImport(_TORCH_SIGNALS, _wrap_torch_workers))

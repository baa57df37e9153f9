"""The child program of test_no_crash.py: a hypothesis state machine that
runs random sequences of public mmapkit operations, in one process.

``python _no_crash_machine.py SEED EXAMPLES STEPS DIR``. Python exceptions
are expected (closed objects, read-only views, bad arguments) and ignored;
what the parent checks is that this process is not killed by a signal.
Each step is written to stderr before it runs, so a death names its
sequence; the last line is ``examples=N steps=M raised=K``.
"""

from __future__ import annotations

import gc
import itertools
import os
import shutil
import sys
import tempfile
from typing import Any

import hypothesis.core
import numpy as np
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule, run_state_machine_as_test

import mmapkit
import mmapkit.compat

try:
    import torch

    import mmapkit.torch as mtorch
except ImportError:  # without torch the torch rules do nothing
    torch = None  # type: ignore[assignment]
    mtorch = None  # type: ignore[assignment]

BASE = sys.argv[4] if len(sys.argv) > 4 else tempfile.gettempdir()
COUNT = {"examples": 0, "steps": 0, "raised": 0}
UNIQUE = itertools.count()

ARG = st.one_of(
    st.integers(-3, 9),
    st.sampled_from([0, 1, 4095, 4096, 1 << 20, -1, None]),
    st.binary(max_size=12),
)
ARGS = st.lists(ARG, max_size=3)

# Public methods per kind of object, called with random arguments.
METHODS = {
    "mapped": [
        "read",
        "read_byte",
        "readline",
        "write",
        "write_byte",
        "seek",
        "tell",
        "move",
        "find",
        "rfind",
        "count",
        "find_all",
        "flush",
        "advise",
        "madvise",
        "populate",
        "residency",
        "resize",
        "grow",
        "refresh",
        "size",
        "numpy",
        "__len__",
        "__getitem__",
        "__setitem__",
    ],
    "array": ["append", "extend", "refresh", "flush", "trim", "reserve", "numpy", "__len__"],
    "features": [
        "add",
        "refresh",
        "get",
        "take",
        "describe",
        "median",
        "quantile",
        "mean",
        "min",
        "num_batches",
    ],
    "log": [
        "append",
        "read",
        "get",
        "term",
        "truncate_after",
        "purge_before",
        "sync",
        "refresh",
        "verify",
        "stat",
        "first_index",
        "last_index",
    ],
    "shared": ["numpy", "snapshot", "unlink", "__len__"],
    "writer": ["write", "write_many", "release", "finish", "abort", "records"],
}


def log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


class Ops(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        COUNT["examples"] += 1
        log(f"--- example {COUNT['examples']}")
        self.dir = tempfile.mkdtemp(dir=BASE)
        self.objs: list[tuple[str, Any]] = []
        self.views: list[Any] = []
        self.files: list[Any] = []

    def path(self, name: str) -> str:
        return os.path.join(self.dir, name)

    def do(self, what: str, fn: Any) -> Any:
        COUNT["steps"] += 1
        log(what)
        try:
            return fn()
        except Exception as e:  # noqa: BLE001 - exceptions are fine; signals are not
            COUNT["raised"] += 1
            log(f"  -> {type(e).__name__}: {str(e)[:120]}")
            return None

    def add(self, kind: str, obj: Any) -> None:
        if obj is not None:
            self.objs.append((kind, obj))

    def pick(self, i: int) -> tuple[str, Any]:
        return self.objs[i % len(self.objs)]

    # ----- making objects -------------------------------------------------

    @rule(mode=st.sampled_from(["r", "r+", "w+", "c"]), size=st.sampled_from([0, 1, 100, 8192]))
    def new_mapped(self, mode: str, size: int) -> None:
        # A file of its own: another handle shrinking a file under a numpy
        # view is a SIGBUS no library can catch (out of scope here).
        p = self.path(f"m{next(UNIQUE)}")
        with open(p, "wb") as f:
            f.write(bytes(range(256)) * (size // 256) + b"x" * (size % 256))
        self.add("mapped", self.do(f"open({mode!r}, {size})", lambda: mmapkit.open(p, mode)))

    @rule(
        access=st.sampled_from(["ACCESS_READ", "ACCESS_WRITE", "ACCESS_COPY", "ACCESS_DEFAULT"]),
        compat=st.booleans(),
    )
    def new_mmap(self, access: str, compat: bool) -> None:
        p = self.path(f"s{next(UNIQUE)}")
        with open(p, "wb") as f:
            f.write(b"abc\n" * 2000)
        f = open(p, "r+b")  # noqa: SIM115 - kept open beside the map
        self.files.append(f)
        mod: Any = mmapkit.compat if compat else mmapkit
        self.add(
            "mapped",
            self.do(
                f"mmap({access})",
                lambda: mod.mmap(f.fileno(), 0, access=getattr(mmapkit, access)),
            ),
        )

    @rule(how=st.sampled_from(["create", "r", "r+"]), name=st.sampled_from(["a0", "a1"]))
    def new_array(self, how: str, name: str) -> None:
        p = self.path(name + ".npy")
        if how == "create":

            def fn() -> Any:
                a = mmapkit.ArrayStore.create(p, "f4", (3,))
                a.extend(np.ones((4, 3)))
                return a

        else:
            fn = lambda: mmapkit.ArrayStore.open(p, how)  # noqa: E731
        self.add("array", self.do(f"ArrayStore.{how}({name})", fn))

    @rule(mode=st.sampled_from(["w", "r+", "r", "a"]), name=st.sampled_from(["fs0", "fs1"]))
    def new_features(self, mode: str, name: str) -> None:
        p = self.path(name)

        def make() -> Any:
            fs = mmapkit.FeatureStore(p, mode, dim=3)
            if mode == "w":
                fs.add(np.arange(15, dtype=np.float32).reshape(5, 3), np.arange(5))
            return fs

        self.add("features", self.do(f"FeatureStore({name}, {mode!r})", make))

    @rule(read_only=st.booleans(), name=st.sampled_from(["log0", "log1"]))
    def new_log(self, read_only: bool, name: str) -> None:
        p = self.path(name)
        self.add(
            "log",
            self.do(
                f"CommitLog({name}, read_only={read_only})",
                lambda: mmapkit.CommitLog(p, segment_size=1 << 16, read_only=read_only),
            ),
        )

    @rule(how=st.sampled_from(["create", "anonymous", "attach", "attach_ro", "from_array"]))
    def new_shared(self, how: str) -> None:
        name = f"mmapkit-nocrash-{os.getpid()}-{os.path.basename(self.dir)}"

        def make() -> Any:
            if how == "create":
                return mmapkit.SharedArray.create(name, (4, 2), "f8")
            if how == "anonymous":
                return mmapkit.SharedArray.anonymous(5, "i4")
            if how == "from_array":
                return mmapkit.SharedArray.from_array(name, np.arange(6.0))
            return mmapkit.SharedArray.attach(name, readonly=how == "attach_ro")

        self.add("shared", self.do(f"SharedArray.{how}", make))

    @rule(width=st.sampled_from([1, 4, 8]), n=st.sampled_from([None, 0, 3, 100]))
    def new_writer(self, width: int, n: int | None) -> None:
        p = self.path(f"r{next(UNIQUE)}")
        self.add(
            "writer",
            self.do(f"RecordWriter({width}, {n})", lambda: mmapkit.RecordWriter(p, width, n)),
        )

    @rule(
        tool=st.sampled_from(["count", "find", "find_all", "grep_count", "keep_lines"]),
        which=st.integers(0, 50),
    )
    def tool(self, tool: str, which: int) -> None:
        # The whole-file tools over files that mapped objects may hold.
        files = sorted(os.listdir(self.dir))
        if not files:
            return
        p = self.path(files[which % len(files)])
        arg: Any = 1 if tool == "keep_lines" else "a"
        self.do(f"{tool}({os.path.basename(p)})", lambda: getattr(mmapkit, tool)(p, arg))

    # ----- using them -----------------------------------------------------

    @precondition(lambda self: self.objs)
    @rule(i=st.integers(0, 50), j=st.integers(0, 50), args=ARGS)
    def call(self, i: int, j: int, args: list[Any]) -> None:
        kind, obj = self.pick(i)
        name = METHODS[kind][j % len(METHODS[kind])]
        if kind == "features" and name == "add":
            n = abs(args[0]) % 5 if args and isinstance(args[0], int) else 2
            args = [np.full((n, 3), 1.5, np.float32), np.ones(n)]
        if kind == "array" and name in ("append", "extend"):
            args = [np.ones((2, 3)) if name == "extend" else np.ones(3)]
        if kind == "log" and name == "append" and args:
            args = [[bytes(a) if isinstance(a, bytes) else b"e" for a in args]]
        r = self.do(f"{kind}.{name}{tuple(args)!r:.80}", lambda: getattr(obj, name)(*args))
        if isinstance(r, (np.ndarray, memoryview)):
            self.views.append(r)

    @precondition(lambda self: self.objs)
    @rule(i=st.integers(0, 50), how=st.integers(0, 4))
    def view(self, i: int, how: int) -> None:
        kind, obj = self.pick(i)

        def make() -> list[Any]:
            if kind == "features":
                if how == 0:
                    return list(obj.get())
                if how == 1:
                    return list(next(iter(obj.batches(2, shuffle=how == 1, seed=0))))
                if mtorch is not None and how == 2:
                    return list(mtorch.FeatureDataset(obj, 2)[0])
                if mtorch is not None and how == 3:
                    return [t for X, y in mtorch.data_loader(obj, 3) for t in (X, y)]
                return [obj.features, obj.labels]
            if kind == "log":
                return [memoryview(e) for e in obj.read(obj.first_index(), obj.last_index() + 1)]
            if how == 0:
                return [memoryview(obj)]
            if how == 1 and torch is not None and kind in ("array", "shared"):
                a = np.asarray(obj)
                return [torch.from_numpy(a)] if a.flags.writeable else [a]
            return [obj.numpy() if kind != "mapped" else obj.numpy("u1")]

        got = self.do(f"view {kind} #{how}", make)
        if got:
            self.views.extend(got)

    @precondition(lambda self: self.objs and mtorch is not None)
    @rule(i=st.integers(0, 50), shuffle=st.booleans())
    def train(self, i: int, shuffle: bool) -> None:
        # The loop of issue 24's defect 1: centre each batch in place.
        kind, obj = self.pick(i)

        def loop() -> None:
            for X, y in mtorch.data_loader(obj.path, 2, shuffle=shuffle, seed=0):
                X.sub_(X.mean(0))
                y.add_(1)

        if kind == "features":
            self.do(f"train shuffle={shuffle}", loop)

    @precondition(lambda self: self.views)
    @rule(j=st.integers(0, 50), write=st.booleans())
    def use_view(self, j: int, write: bool) -> None:
        v = self.views[j % len(self.views)]

        def use() -> Any:
            if torch is not None and isinstance(v, torch.Tensor):
                if write:
                    v.sub_(1)  # read-only mappings under a tensor are private copies
                return float(v.double().sum()) if v.numel() else 0.0
            if isinstance(v, memoryview):
                if write and not v.readonly and v.nbytes:
                    v.cast("B")[0] = 7
                return bytes(v[:16])
            if write:
                v[...] = 3  # a read-only view raises
            return float(np.asarray(v, dtype=np.float64).sum()) if v.size else 0.0

        self.do(f"use view {type(v).__name__} write={write}", use)

    @precondition(lambda self: self.objs)
    @rule(i=st.integers(0, 50))
    def close(self, i: int) -> None:
        kind, obj = self.pick(i)
        self.do(f"close {kind}", lambda: obj.close())  # noqa: PLW0108 - a RecordWriter has no close: raise in do()

    @precondition(lambda self: self.objs)
    @rule(i=st.integers(0, 50))
    def forget(self, i: int) -> None:
        # Views outlive their store: drop the last reference to the object.
        kind, _ = self.objs.pop(i % len(self.objs))
        self.do(f"forget {kind}", gc.collect)

    @precondition(lambda self: self.views)
    @rule(j=st.integers(0, 50))
    def drop_view(self, j: int) -> None:
        self.views.pop(j % len(self.views))
        self.do("drop view", gc.collect)

    def teardown(self) -> None:
        for v in self.views:  # views outliving closed and dropped stores
            self.do("final read of a view", lambda v=v: bytes(memoryview(np.asarray(v)))[:8])
        self.views.clear()
        for _, obj in self.objs:
            self.do("teardown close", lambda obj=obj: obj.close())
        self.objs.clear()
        for f in self.files:
            f.close()
        gc.collect()
        shutil.rmtree(self.dir, ignore_errors=True)


def main() -> None:
    seed, examples, steps = (int(a) for a in sys.argv[1:4])
    hypothesis.core.global_force_seed = seed  # what pytest's --hypothesis-seed sets
    run_state_machine_as_test(
        Ops,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            database=None,
            deadline=None,
            suppress_health_check=list(HealthCheck),
            print_blob=False,
        ),
    )
    print(f"examples={COUNT['examples']} steps={COUNT['steps']} raised={COUNT['raised']}")


if __name__ == "__main__":
    main()

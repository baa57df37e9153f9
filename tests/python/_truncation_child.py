"""The child program of test_truncation_random.py: rounds of random mmapkit
operations while another process truncates, grows, replaces or deletes the
file under them (issue: "truncation is an error, not a crash", checked at
random moments).

``python _truncation_child.py SEED ROUNDS BUDGET_S DIR [ROUND]`` runs rounds
0..ROUNDS-1 of seed SEED in fresh directories under DIR, starting no new
round once BUDGET_S seconds have passed, or only round ROUND (to replay a
failure). Every choice comes from ``random.Random(f"{SEED}/{round}")``;
only the moment the mutation lands is left to timing. The mutator is one
long-lived process (``python -c MUTATOR``): per round it gets one command,
sleeps its 0-20 ms, creates the round's ``start`` marker, does the action
(``os.truncate`` smaller, incl. 0; ``os.truncate`` larger; a new file
renamed over the path; ``os.unlink``) and creates the ``done`` marker. Each
operation is judged by what the markers say about it: ``pre`` (no
``start`` after it: the file was untouched throughout), ``post`` (``done``
before it began) or ``during`` (either order), so the verdict never
depends on timing. An outcome is

* ``right``: exactly the data the file held (stores' rows are
  ``features[i] = i + column``, ``labels[i] = i``; other files are random
  non-zero bytes, so a zero byte is never right unless it was grown in);
* ``error``: a documented error: ``FileTruncatedError`` (``CorruptError``
  from a commit log) once a truncation began; OSError/FormatError from
  opening the file again (a store, a second map, a DataLoader worker that
  opens the store by path) once a truncation, replacement or deletion
  began. Existing maps of a replaced or deleted file keep the old inode:
  only the right (old) data is expected from them;
* ``raw_zeros``: a raw view (``m.numpy()``, a memoryview, a store's
  zero-copy ``get``/views) that reads zeros exactly where a truncation
  that began cut the file (every differing byte is 0 and at a file offset
  past the new end), without dying;
* ``zeros_then_error``: an mmapkit iterator (``batches``,
  ``mmapkit.torch.data_loader``) that yielded such zeros and then raised
  FileTruncatedError before its epoch ended;
* a VIOLATION otherwise: wrong bytes, zeros from a copying API call, a
  success over lost bytes (``flush``, ``add``, ``extend``, a reopen
  claiming rows past the new end), an epoch that completes after zeros or
  without every row, an error with nothing truncated, any other exception
  type, a dead DataLoader worker.

``faulthandler.enable()`` is called in odd seeds, after the first round's
mappings exist. Each step is written to stderr before it runs (a death
names it); the last line of stdout is ``COUNTS {json}``; exit status 1
lists the violations (seed, round, step).
"""

from __future__ import annotations

import faulthandler
import gc
import json
import os
import random
import select
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

import mmapkit

try:
    import torch
    import torch.utils.data

    import mmapkit.torch as mtorch

    torch.set_num_threads(1)
except ImportError:  # without torch the torch operations are not drawn
    torch = None  # type: ignore[assignment]
    mtorch = None  # type: ignore[assignment]

FTE = mmapkit.FileTruncatedError
PAGE = mmapkit.page_size()
KINDS = ["truncate", "grow", "replace", "delete"]
#: Outcomes counted per operation (a violation is counted and listed too).
OUTCOMES = ["right", "error", "raw_zeros", "zeros_then_error"]

COUNT: Counter[str] = Counter()
MUTATIONS: Counter[str] = Counter()
OUT: Counter[str] = Counter()
STATES: Counter[str] = Counter()
SCENARIOS: Counter[str] = Counter()
VIOLATIONS: list[str] = []

MUTATOR = r"""
import json, os, sys, time
for line in sys.stdin:
    c = json.loads(line)
    time.sleep(c["delay"])
    with open(c["start"], "w"):
        pass
    try:
        kind, path = c["kind"], c["path"]
        if kind == "truncate":
            os.truncate(path, c["size"])
        elif kind == "grow":
            os.truncate(path, os.path.getsize(path) + c["size"])
        elif kind == "delete":
            os.unlink(path)
        else:
            with open(c["tmp"], "wb") as f:
                f.write(b"\xa5" * c["size"])
            os.rename(c["tmp"], path)
        reply = "ok"
    except OSError as e:
        reply = "error " + repr(e)
    with open(c["done"], "w"):
        pass
    print(reply, flush=True)
"""


def stop_workers(it: Any) -> None:
    """Ends the worker of a DataLoader iterator whose epoch stopped early:
    torch's shutdown would wait 5 s for it after any error
    (``MP_STATUS_CHECK_INTERVAL``). Its pid is unregistered first, so
    torch's SIGCHLD handler does not report the kill as a worker's death."""
    workers = getattr(it, "_workers", None)
    if not workers:
        return
    if getattr(it, "_worker_pids_set", False):
        from torch.utils.data._utils import signal_handling

        signal_handling._remove_worker_pids(id(it))
        it._worker_pids_set = False
    for w in workers:
        w.terminate()


def log(msg: str) -> None:
    sys.stderr.write(msg + "\n")
    sys.stderr.flush()


class ViolationError(Exception):
    """An outcome the documented behaviour does not allow."""


#: A step's judge: ``judge(result, exception, state)`` is its outcome, or
#: raises ViolationError.
Judge = Callable[[Any, Any, str], str]
#: ``check(result, state)``: the outcome of a step that returned ``result``.
Check = Callable[[Any, str], str]
#: A way to draw a truncation's new size.
Cut = Callable[[], int]


class Mutator:
    """The other process: one action per round, at a seeded delay."""

    def __init__(self) -> None:
        self.p = subprocess.Popen(
            [sys.executable, "-c", MUTATOR],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            bufsize=1,
        )

    def send(self, cmd: dict[str, Any]) -> None:
        assert self.p.stdin is not None
        self.p.stdin.write(json.dumps(cmd) + "\n")
        self.p.stdin.flush()

    def wait(self, timeout: float = 60) -> str:
        assert self.p.stdout is not None
        ready, _, _ = select.select([self.p.stdout], [], [], timeout)
        if not ready:
            raise ViolationError(f"the mutator did not finish its action within {timeout} s")
        return self.p.stdout.readline().strip()

    def close(self) -> None:
        if self.p.stdin is not None:
            self.p.stdin.close()
        try:
            self.p.wait(10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()


def nonzero_bytes(rng: random.Random, n: int) -> np.ndarray:
    """``n`` random bytes, none of them zero (a zero read back is never right)."""
    return np.random.default_rng(rng.getrandbits(64)).integers(1, 256, n, dtype=np.uint8)


def short(b: Any) -> str:
    r = repr(b)
    return r if len(r) < 90 else r[:87] + "..."


def file_cuts(rng: random.Random, size: int) -> list[Cut]:
    """Cuts of a file of ``size`` bytes: to 0, anywhere, at a page boundary."""
    return [lambda: 0, lambda: rng.randrange(size), lambda: rng.randrange(0, size, PAGE)]


def into_last_pages(rng: random.Random, end: int) -> Cut:
    """A cut into the two pages before ``end``."""
    return lambda: max(0, end - rng.randint(1, 2 * PAGE))


def first_diff(got: bytes, exp: bytes) -> str:
    n = min(len(got), len(exp))
    i = next((i for i in range(n) if got[i] != exp[i]), n)
    return (
        f"{len(got)} bytes where the file held {len(exp)}; first difference at {i}: "
        f"got {short(got[i : i + 8])}, expected {short(exp[i : i + 8])}; "
        f"{got.count(0)} zero bytes (expected {exp.count(0)})"
    )


class Round:
    """One round: fresh files, one planned mutation, random operations."""

    scenario = "?"

    def __init__(self, seed: int, rnd: int, base: str, mutator: Mutator) -> None:
        self.seed, self.rnd, self.mutator = seed, rnd, mutator
        self.rng = random.Random(f"{seed}/{rnd}")
        self.dir = tempfile.mkdtemp(dir=base, prefix=f"s{seed}r{rnd}-")
        ctl = os.path.join(self.dir, "ctl")
        os.mkdir(ctl)
        self.start_marker = os.path.join(ctl, "start")
        self.done_marker = os.path.join(ctl, "done")
        self.tmp = os.path.join(ctl, "replacement")
        self.step_no = 0
        self.kind = ""
        self.cut = -1  # the truncation's new size
        self.cmd: dict[str, Any] = {}
        self.armed = False  # the mutation is to be sent now (iterators: at a batch)
        self.sent = False
        self.writer_failed = False  # a store's writer raised: FailedError is owed from now

    # ----- the mutation ---------------------------------------------------

    def plan(self, path: str, cuts: list[Cut]) -> None:
        """Draws the round's mutation of ``path``; a truncation's new size
        from one of ``cuts``."""
        rng = self.rng
        self.kind = rng.choices(KINDS, weights=[4, 2, 2, 2])[0]
        cmd: dict[str, Any] = {
            "kind": self.kind,
            "path": path,
            "delay": rng.uniform(0, 0.020),
            "start": self.start_marker,
            "done": self.done_marker,
            "tmp": self.tmp,
        }
        size = os.path.getsize(path)
        if self.kind == "truncate":
            self.cut = cmd["size"] = rng.choice(cuts)()
        elif self.kind == "grow":
            cmd["size"] = rng.randint(1, 4 * PAGE)
        elif self.kind == "replace":
            cmd["size"] = rng.randint(0, 2 * size)
        self.cmd = cmd
        MUTATIONS[self.kind] += 1

    def send(self) -> None:
        if not self.sent:
            self.sent = True
            self.mutator.send(self.cmd)

    def started(self) -> bool:
        return os.path.exists(self.start_marker)

    def done(self) -> bool:
        return os.path.exists(self.done_marker)

    def state_since(self, before_done: bool) -> str:
        return "post" if before_done else "during" if self.started() else "pre"

    # ----- judging --------------------------------------------------------

    def truncated(self, state: str) -> bool:
        return self.kind == "truncate" and state != "pre"

    def cut_below(self, end: int, state: str) -> bool:
        """The file was cut to below ``end`` before the operation began: a
        success that needs the bytes up to ``end`` is over lost bytes."""
        return self.kind == "truncate" and state == "post" and self.cut < end

    def error(
        self, exc: BaseException, state: str, *, reopen: bool = False, writer: bool = False
    ) -> str:
        """``error`` if ``exc`` is documented for this mutation and state.
        ``writer``: an operation of a store's writer, which after an error
        (its sync failed) refuses writes with FailedError until reopened."""
        if writer and isinstance(exc, mmapkit.FailedError) and self.writer_failed:
            return "error"
        if isinstance(exc, FTE) and self.truncated(state):
            self.writer_failed |= writer
            return "error"
        if (
            reopen
            and isinstance(exc, (OSError, mmapkit.FormatError))
            and self.kind != "grow"
            and state != "pre"
        ):
            return "error"
        raise ViolationError(f"raised {type(exc).__name__}: {str(exc)[:200]}")

    def zeros(self, got: np.ndarray, exp: np.ndarray, offsets: np.ndarray, state: str) -> str:
        """Raw-view bytes: ``right``, ``raw_zeros`` (zeros only past the
        truncation's new end), else a violation. ``offsets``: each byte's
        file offset."""
        got, exp = got.reshape(-1).view(np.uint8), exp.reshape(-1).view(np.uint8)
        diff = got != exp
        if not diff.any():
            return "right"
        bad = diff & ((got != 0) | (offsets.reshape(-1) < self.cut) | (not self.truncated(state)))
        if bad.any():
            i = int(np.argmax(bad))
            raise ViolationError(
                f"byte at file offset {int(offsets.reshape(-1)[i])} read {int(got[i])}, the file "
                f"held {int(exp[i])} ({int(diff.sum())} bytes differ, "
                f"{int((got[diff] == 0).sum())} of them zeros; new end {self.cut})"
            )
        return "raw_zeros"

    def judge_result(
        self, check: Check | None = None, *, reopen: bool = False, writer: bool = False
    ) -> Judge:
        """The judge of a step that may raise a documented error (``reopen``,
        ``writer``: as in :meth:`error`): its result is ``check(result,
        state)``, or ``right`` without a check."""

        def judge(res: Any, exc: Any, state: str) -> str:
            if exc is not None:
                return self.error(exc, state, reopen=reopen, writer=writer)
            return "right" if check is None else check(res, state)

        return judge

    def judge_raw(self, what: str, check: Check) -> Judge:
        """The judge of a read through a raw view, which never raises (``what``
        names it): its bytes are ``check(result, state)``."""

        def judge(res: Any, exc: Any, state: str) -> str:
            if exc is not None:
                raise ViolationError(f"{what} raised {type(exc).__name__}: {exc}")
            return check(res, state)

        return judge

    # ----- steps ----------------------------------------------------------

    def where(self) -> str:
        return f"seed {self.seed} round {self.rnd} step {self.step_no}"

    def begin(self, name: str) -> str:
        """Counts an operation and logs it before it runs (a death names
        it); returns its name, the scenario's first."""
        self.step_no += 1
        COUNT["ops"] += 1
        what = f"{self.scenario} {name}"
        log(f"[{self.where()}] {what} (mutation {self.kind} {self.cmd.get('size', '')})")
        return what

    def judged(
        self, what: str, before: bool, judge: Callable[[str], str]
    ) -> tuple[str, str | None]:
        """The state since ``before`` (counted) and ``judge(state)``, the
        outcome; None once a violation is listed."""
        state = self.state_since(before)
        STATES[state] += 1
        try:
            return state, judge(state)
        except ViolationError as v:
            self.violation(what, state, str(v))
            return state, None

    def count(self, outcome: str, note: str) -> None:
        """Counts an outcome and logs it, with ``note``."""
        OUT[outcome] += 1
        log(f"  -> {outcome} {note}")

    def step(self, name: str, fn: Callable[[], Any], judge: Judge) -> Any:
        """Runs ``fn``, then ``judge(result, exception, state)``."""
        what = self.begin(name)
        if self.armed:
            self.send()
        before = self.done()
        try:
            res, exc = fn(), None
        except Exception as e:  # noqa: BLE001 - judged below
            res, exc = None, e
        state, outcome = self.judged(what, before, lambda state: judge(res, exc, state))
        if outcome is None:
            return None
        self.count(outcome, f"({state})")
        return res if exc is None else None

    def violation(self, what: str, state: str, msg: str) -> None:
        OUT["violation"] += 1
        text = (
            f"{self.where()}: {what}: mutation {self.kind} {self.cmd.get('size', '')} "
            f"of {os.path.basename(self.cmd.get('path', '?'))} ({state}): {msg}"
        )
        VIOLATIONS.append(text)
        log("  -> VIOLATION " + text)

    def iterate(
        self,
        name: str,
        make: Callable[[], Iterator[Any]],
        check: Callable[[Any, Callable[[], str]], str],
        writer: bool = False,
        reopens: bool = False,
    ) -> None:
        """One epoch of an mmapkit iterator: ``check(item, state)`` each
        item as it arrives (``right`` or ``zeros``, else a violation;
        ``state()`` once it copied the item); zeros are fine only if the
        same iterator then raises FileTruncatedError. ``make`` may raise
        as a reopen would; with ``reopens`` so may ``next`` (a DataLoader
        worker opens the store by path). Some epochs wait a little before
        reading each batch, as a training step would."""
        what = self.begin(name)
        send_at = self.rng.randint(0, 6) if self.armed else -1
        lag = self.rng.choice([0, 0, 0.0002, 0.001])

        def raised(e: Exception, before: bool, where: str, zeros_at: int = -1) -> None:
            """Judges what making the iterator or ``next`` (after zeros at
            item ``zeros_at``, if not -1) raised."""

            def judge(state: str) -> str:
                outcome = self.error(e, state, reopen=reopens, writer=writer)
                if zeros_at < 0:
                    return outcome
                if not isinstance(e, FTE):
                    raise ViolationError(
                        f"yielded zeros at item {zeros_at}, then raised "
                        f"{type(e).__name__} (not FileTruncatedError): {str(e)[:200]}"
                    )
                return "zeros_then_error"

            state, outcome = self.judged(f"{what} {where}", before, judge)
            if outcome is not None:
                self.count(outcome, f"{where} ({state}): {type(e).__name__}")

        before = self.done()
        try:
            it = make()
        except Exception as e:  # noqa: BLE001 - judged
            raised(e, before, "(making it)")
            return
        zeros_at = -1
        k = 0
        state = "pre"
        completed = False
        try:
            while True:
                if k == send_at:
                    self.send()
                before = self.done()
                try:
                    item = next(it)
                except StopIteration:
                    state = self.state_since(before)
                    break
                except Exception as e:  # noqa: BLE001 - judged
                    raised(e, before, f"at item {k}", zeros_at)
                    return
                if lag:
                    time.sleep(lag)
                seen = [before]

                def state_now(seen: list[bool] = seen) -> str:
                    return self.state_since(seen[0])

                try:
                    if check(item, state_now) == "zeros" and zeros_at < 0:
                        zeros_at = k
                        log(f"  zeros at item {k} ({state_now()})")
                except ViolationError as v:
                    self.violation(f"{what} at item {k}", state_now(), str(v))
                    return
                state = state_now()
                k += 1
            completed = True
            STATES[state] += 1
            if zeros_at >= 0:
                self.violation(
                    what,
                    state,
                    f"the epoch completed ({k} items) after yielding zeros at item {zeros_at}",
                )
                return
            try:
                self.complete(name)
            except ViolationError as v:
                self.violation(what, state, str(v))
                return
            self.count("right", f"({k} items, {state})")
        finally:
            if not completed:
                stop_workers(it)
            del it
            gc.collect()

    def complete(self, name: str) -> None:
        """Checks what a completed epoch covered (a scenario's own)."""

    # ----- the round ------------------------------------------------------

    def setup(self) -> None:
        raise NotImplementedError

    def data_file(self, n: int) -> None:
        """``data``: ``n`` random non-zero bytes, the file at ``path``."""
        self.data = nonzero_bytes(self.rng, n)
        self.path = os.path.join(self.dir, "data.bin")
        with open(self.path, "wb") as f:
            f.write(self.data.tobytes())

    def ops(self) -> list[tuple[float, Callable[[], None]]]:
        """The operations drawn, with their weights (see :meth:`weighted`)."""
        raise NotImplementedError

    def weighted(self, **weights: float) -> list[tuple[float, Callable[[], None]]]:
        """The methods ``op_NAME`` with their weights, in this order (the
        order is part of what a seed draws)."""
        return [(w, getattr(self, f"op_{name}")) for name, w in weights.items()]

    def close(self) -> None:
        """Closes the round's objects (judged: a close may flush)."""

    def run(self) -> None:
        SCENARIOS[self.scenario] += 1
        rng = self.rng
        self.setup()
        maybe_enable_faulthandler()
        ops = self.ops()
        weights = [w for w, _ in ops]
        n = rng.randint(6, 24)
        send_at = rng.randint(0, n)
        for i in range(n):
            self.armed = i >= send_at
            rng.choices(ops, weights)[0][1]()
        self.armed = True
        self.send()
        reply = self.mutator.wait()
        log(f"  mutator: {reply}")
        if reply != "ok":
            raise ViolationError(f"the mutator failed: {reply}")
        for _ in range(rng.randint(3, 8)):  # after the mutation, for sure
            rng.choices(ops, weights)[0][1]()
        self.close()


# ----- mmapkit.open maps and their raw views ----------------------------------


class MapRound(Round):
    scenario = "map"

    def setup(self) -> None:
        rng = self.rng
        self.L = L = max(8, rng.randint(1, 40) * PAGE - 8 * rng.randrange(PAGE // 8))
        self.data_file(L)
        self.full = self.data  # the expected byte at each offset (grown: zeros after)
        self.mode = rng.choice(["r", "r+"])
        self.m = mmapkit.open(self.path, self.mode)
        self.cur = L  # the map's length
        self.views: list[np.ndarray] = [self.m.numpy(np.uint8), self.m.numpy(np.int64)]
        self.plan(self.path, [*file_cuts(rng, L), into_last_pages(rng, L)])

    def exp(self, a: int, b: int) -> bytes:
        return self.full[a:b].tobytes()

    def span(self, n: int) -> tuple[int, int]:
        rng = self.rng
        r = rng.random()
        if r < 0.3:
            a = rng.randrange(n + 1)
            return a, min(n, a + rng.randint(0, 64))
        if r < 0.5:
            return max(0, n - rng.randint(1, 2 * PAGE)), n
        if r < 0.6:
            return 0, n
        a, b = sorted((rng.randrange(n + 1), rng.randrange(n + 1)))
        return a, b

    def api(self, expected: Any) -> Judge:
        def check(res: Any, state: str) -> str:
            if res != expected:
                if isinstance(res, bytes):
                    raise ViolationError("success over lost bytes: " + first_diff(res, expected))
                raise ViolationError(
                    f"returned {short(res)}, the file's bytes give {short(expected)}"
                )
            return "right"

        return self.judge_result(check)

    def op_getitem(self) -> None:
        a, b = self.span(self.cur)
        self.step(f"m[{a}:{b}]", lambda: self.m[a:b], self.api(self.exp(a, b)))

    def op_read(self) -> None:
        a, b = self.span(self.cur)

        def read() -> bytes:
            self.m.seek(a)
            return self.m.read(b - a)

        self.step(f"seek({a}); read({b - a})", read, self.api(self.exp(a, b)))

    def op_bytes(self) -> None:
        self.step("bytes(m)", lambda: bytes(self.m), self.api(self.exp(0, self.cur)))

    def op_find(self) -> None:
        rng, n = self.rng, self.cur
        a = rng.randrange(n + 1)
        sub = self.exp(a, a + rng.randint(1, 6)) or b"\x01"
        start = rng.randrange(n + 1)
        whole = self.exp(0, n)
        # Explicit starts: as in mmap, the default start is the position.
        if rng.random() < 0.5:
            self.step(
                f"find({sub!r}, {start})",
                lambda: self.m.find(sub, start),
                self.api(whole.find(sub, start)),
            )
        else:
            self.step(
                f"rfind({sub!r}, 0)", lambda: self.m.rfind(sub, 0), self.api(whole.rfind(sub))
            )

    def op_count(self) -> None:
        sub = bytes([self.rng.choice([0, self.rng.randrange(1, 256)])])
        whole = self.exp(0, self.cur)
        self.step(f"count({sub!r})", lambda: self.m.count(sub), self.api(whole.count(sub)))

    def op_raw(self) -> None:
        rng = self.rng
        v = rng.choice(self.views)
        size = v.itemsize
        a, b = self.span(v.size)

        def check(res: Any, state: str) -> str:
            offsets = np.arange(a * size, b * size)
            return self.zeros(res, self.full[a * size : b * size], offsets, state)

        self.step(f"raw {v.dtype}[{a}:{b}]", v[a:b].copy, self.judge_raw("a raw view read", check))

    def op_memoryview(self) -> None:
        a, b = self.span(self.cur)

        def read() -> np.ndarray:
            with memoryview(self.m) as mv:
                return np.frombuffer(mv[a:b].tobytes(), np.uint8)

        judge = self.judge_raw(
            "a memoryview read",
            lambda res, state: self.zeros(res, self.full[a:b], np.arange(a, b), state),
        )
        self.step(f"memoryview(m)[{a}:{b}]", read, judge)

    def op_new_view(self) -> None:
        def check(res: Any, state: str) -> str:
            self.views.append(res)
            return "right"

        self.step("m.numpy(uint8)", lambda: self.m.numpy(np.uint8), self.judge_result(check))

    def op_refresh(self) -> None:
        post = {"truncate": self.cut, "grow": self.L + self.cmd.get("size", 0)}.get(
            self.kind, self.cur
        )

        def check(res: Any, state: str) -> str:
            if res != self.cur and not (state != "pre" and res == post):
                raise ViolationError(
                    f"refresh() gave length {res}: was {self.cur}, the file {post}"
                )
            if res > self.full.size:
                self.full = np.concatenate([self.full, np.zeros(res - self.full.size, np.uint8)])
            self.cur = res
            return "right"

        self.step("refresh()", self.m.refresh, self.judge_result(check))

    def op_flush(self) -> None:
        cur = self.cur

        def check(res: Any, state: str) -> str:
            if self.cut_below(cur, state):
                raise ViolationError(f"flush() succeeded with the file cut to {self.cut} of {cur}")
            return "right"

        self.step("flush()", self.m.flush, self.judge_result(check))

    def op_write_same(self) -> None:
        a, b = self.span(self.cur)
        data = self.exp(a, b)

        def write() -> None:
            self.m[a:b] = data

        self.step(f"m[{a}:{b}] = (the same bytes)", write, self.judge_result())

    def op_reopen(self) -> None:
        pre = self.data.tobytes()
        post = {
            "truncate": pre[: max(self.cut, 0)],
            "grow": pre + bytes(self.cmd.get("size", 0)),
            "replace": b"\xa5" * self.cmd.get("size", 0),
        }.get(self.kind)

        def read() -> bytes:
            with mmapkit.open(self.path, "r") as m2:
                return bytes(m2)

        def judge(res: Any, exc: Any, state: str) -> str:
            if exc is not None:
                if isinstance(exc, FileNotFoundError) and self.kind == "delete" and state != "pre":
                    return "error"
                return self.error(exc, state)
            if (state != "post" and res == pre) or (state != "pre" and res == post):
                return "right"
            raise ViolationError(
                "a new map's bytes: " + first_diff(res, pre if state == "pre" else post or b"")
            )

        self.step("open(path, 'r') again; bytes()", read, judge)

    def ops(self) -> list[tuple[float, Callable[[], None]]]:
        ops = self.weighted(getitem=3, read=2, bytes=1, find=1, count=1, raw=4, memoryview=1)
        ops += self.weighted(new_view=0.5, refresh=1, reopen=1)
        if self.mode == "r+":
            ops += self.weighted(flush=1.5, write_same=1)
        return ops

    def close(self) -> None:
        self.views.clear()
        self.step("close()", self.m.close, self.judge_result())


# ----- the stores (FeatureStore, ArrayStore): a writer and a reader ---------


class StoreRound(Round):
    """A store's round: its writer ``W`` has committed ``n`` rows, its
    reader ``R`` sees ``Rn``; :meth:`end` is where rows end in the file that
    is mutated."""

    W: Any
    R: Any
    n: int
    Rn: int

    def end(self, rows: int) -> int:
        """The file offset where ``rows`` rows end in the mutated file."""
        raise NotImplementedError

    def store_cuts(self, off: int, rb: int, n: int, size: int, header: bool) -> list[Cut]:
        """Cuts of a file of ``size`` bytes holding ``n`` rows of ``rb`` bytes
        from ``off``: to 0, into the header (if ``header``), at a row
        boundary, anywhere in the rows, into the reserved capacity only
        (where there is some; else as the next), into the last pages."""
        rng, end = self.rng, off + n * rb
        last_pages = into_last_pages(rng, end)
        return [
            lambda: 0,
            *([lambda: rng.randrange(off)] if header else []),
            lambda: off + rng.randrange(n) * rb,
            lambda: rng.randrange(end),
            lambda: rng.randrange(end, size) if size > end else last_pages(),
            last_pages,
        ]

    def store(self) -> tuple[str, Any, int]:
        if self.rng.random() < 0.6:
            return "R", self.R, len(self.R)
        return "W", self.W, len(self.W)

    def commit(self, new_len: int, what: str, returns: bool = True) -> Judge:
        """The judge of a writer's operation that makes ``new_len`` rows
        durable (``returns``: and returns that length)."""

        def check(res: Any, state: str) -> str:
            if returns and res != new_len:
                raise ViolationError(f"{what} returned {res}, expected {new_len}")
            end = self.end(new_len)
            if self.cut_below(end, state):
                raise ViolationError(
                    f"{what} committed {new_len} rows ({end} bytes) into a file cut to {self.cut}"
                )
            self.n = new_len
            return "right"

        return self.judge_result(check, writer=True)

    def op_refresh(self) -> None:
        def check(res: Any, state: str) -> str:
            if not 0 <= res <= self.n:
                raise ViolationError(f"refresh() claims {res} rows; the writer committed {self.n}")
            self.Rn = res
            return "right"

        self.step("R.refresh()", self.R.refresh, self.judge_result(check, reopen=True))

    def reopened(self, check: Callable[[int, Any, str], str]) -> Judge:
        """The judge of opening the store again by path, which returns its
        length and rows: no more rows than committed, then ``check(length,
        rows, state)``."""

        def check_length(res: Any, state: str) -> str:
            n2, rows = res
            if n2 > self.n:
                raise ViolationError(f"a reopened store claims {n2} rows; {self.n} were committed")
            return check(n2, rows, state)

        return self.judge_result(check_length, reopen=True)


# ----- FeatureStore: the writer, a reader, iterators, torch ------------------


def feature_rows(lo: int, hi: int, dim: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.arange(lo, hi)
    return (ids[:, None] + np.arange(dim)).astype(np.float32), ids.astype(np.float32)


class FeatureRound(StoreRound):
    scenario = "features"

    def setup(self) -> None:
        rng = self.rng
        self.dim = d = rng.choice([2, 3, 8, 16, 64])
        self.sdir = os.path.join(self.dir, "store")
        self.W = mmapkit.FeatureStore(self.sdir, "w", dim=d)
        n = rng.randint(1, 3000 if d <= 16 else 1200)
        lo = 0
        while lo < n:
            hi = min(n, lo + rng.randint(1, n))
            self.W.add(*feature_rows(lo, hi, d))
            lo = hi
        self.n = len(self.W)  # committed by the writer
        assert self.n == n
        self.R = mmapkit.FeatureStore(self.sdir, "r")
        self.Rn = len(self.R)
        self.rb = {"X": 4 * d, "y": 4}
        self.off = {}
        for key, name in (("X", "features.npy"), ("y", "labels.npy")):
            with mmapkit.ArrayStore.open(os.path.join(self.sdir, name), "r") as a:
                self.off[key] = a.data_offset
        self.target = rng.choice(["X", "y"])
        path = os.path.join(self.sdir, "features.npy" if self.target == "X" else "labels.npy")
        off, rb = self.off[self.target], self.rb[self.target]
        self.plan(path, self.store_cuts(off, rb, n, os.path.getsize(path), header=True))

    def end(self, rows: int) -> int:
        return self.off[self.target] + rows * self.rb[self.target]

    def check_rows(self, ids: np.ndarray, X: np.ndarray, y: np.ndarray, state: str) -> str:
        """``right`` or ``zeros`` (raw-view zeros past the cut, in the
        mutated array only), else a violation."""
        d = self.dim
        if X.shape != (len(ids), d) or y.shape != (len(ids),):
            raise ViolationError(f"shapes {X.shape} {y.shape} for {len(ids)} rows")
        eX = (ids[:, None] + np.arange(d)).astype(np.float32)
        ey = ids.astype(np.float32)
        got = {"X": np.ascontiguousarray(X), "y": np.ascontiguousarray(y)}
        exp = {"X": eX, "y": ey}
        other = "y" if self.target == "X" else "X"
        if not np.array_equal(got[other].view(np.uint8), exp[other].view(np.uint8)):
            bad = np.nonzero((got[other] != exp[other]).reshape(len(ids), -1).any(1))[0]
            raise ViolationError(
                f"the array that was not mutated differs at {len(bad)} rows, "
                f"e.g. row {int(ids[bad[0]])}: {got[other][bad[0]]!r}"
            )
        t = self.target
        rb = self.rb[t]
        offsets = self.off[t] + ids[:, None].astype(np.int64) * rb + np.arange(rb)
        r = self.zeros(got[t].view(np.uint8), exp[t].view(np.uint8), offsets, state)
        return "zeros" if r == "raw_zeros" else "right"

    def ids_of(self, X: np.ndarray, y: np.ndarray, n: int) -> np.ndarray:
        """A shuffled batch's rows, read off the array that was not mutated."""
        key = X[:, 0] if self.target == "y" else y
        ids = key.astype(np.int64)
        if not (np.array_equal(ids, key) and ((ids >= 0) & (ids < n)).all()):
            raise ViolationError(f"rows {key[:8]!r}... are not rows of a store of {n}")
        return ids

    def op_add(self) -> None:
        m = self.rng.randint(1, 300)
        before = len(self.W)
        self.step(
            f"W.add({m} rows)",
            lambda: self.W.add(*feature_rows(before, before + m, self.dim)),
            self.commit(before + m, "add()"),
        )

    def op_get(self) -> None:
        rng = self.rng
        who, s, n = self.store()
        a = rng.randrange(n + 1)
        b = rng.randint(a, min(n, a + rng.choice([1, 10, 300, n])))
        touch = rng.random() < 0.5

        def get() -> tuple[np.ndarray, np.ndarray]:
            X, y = s.get(a, b, touch=touch)
            return X.copy(), y.copy()

        def check(res: Any, state: str) -> str:
            r = self.check_rows(np.arange(a, b), *res, state)
            if r == "zeros" and state == "post":
                raise ViolationError(
                    "get() succeeded over rows the file no longer holds (views of zeros)"
                )
            return "raw_zeros" if r == "zeros" else "right"

        judge = self.judge_result(check, writer=who == "W")
        self.step(f"{who}.get({a}, {b}, touch={touch})", get, judge)

    def op_take(self) -> None:
        rng = self.rng
        who, s, n = self.store()
        rows = np.random.default_rng(rng.getrandbits(32)).integers(0, n, rng.randint(1, 300))

        def check(res: Any, state: str) -> str:
            if self.check_rows(rows, *res, state) != "right":
                raise ViolationError("take() (a copy) returned rows of zeros")
            return "right"

        judge = self.judge_result(check, writer=who == "W")
        self.step(f"{who}.take({len(rows)} rows)", lambda: s.take(rows), judge)

    def epoch(self, n: int, shuffle: bool, bs: int) -> Callable[[Any, str], str]:
        """The per-batch check of an epoch over ``n`` rows."""
        self.seen: list[np.ndarray] = []
        self.epoch_rows = n
        self.next_lo = 0

        def check(item: Any, state_now: Callable[[], str]) -> str:
            X, y = (np.array(t) for t in item)  # copies (tensors too)
            state = state_now()
            if shuffle:
                ids = self.ids_of(X, y, n)
            else:
                ids = np.arange(self.next_lo, self.next_lo + len(y))
                self.next_lo += len(y)
            if len(ids) > bs or not len(ids):
                raise ViolationError(f"a batch of {len(ids)} rows (batch size {bs})")
            self.seen.append(ids)
            return self.check_rows(ids, X, y, state)

        return check

    def complete(self, name: str) -> None:
        ids = np.concatenate(self.seen) if self.seen else np.zeros(0, np.int64)
        if not np.array_equal(np.sort(ids), np.arange(self.epoch_rows)):
            raise ViolationError(
                f"the epoch yielded {len(ids)} rows ({len(np.unique(ids))} distinct), "
                f"not each of the {self.epoch_rows} once"
            )

    def op_batches(self) -> None:
        rng = self.rng
        who, s, n = self.store()
        bs = max(rng.choice([1, 7, 64, 256, 1000]), -(-n // 300))
        shuffle = rng.random() < 0.5
        prefetch = rng.choice([0, 2])
        seed = rng.randrange(1000)
        self.iterate(
            f"{who}.batches({bs}, shuffle={shuffle}, prefetch={prefetch})",
            lambda: iter(s.batches(bs, shuffle=shuffle, seed=seed, prefetch=prefetch)),
            self.epoch(n, shuffle, bs),
            writer=who == "W",
        )

    def op_data_loader(self) -> None:
        rng = self.rng
        who, s, n = self.store()
        src = s if rng.random() < 0.5 else self.sdir
        bs = max(rng.choice([1, 16, 256]), -(-n // 40))  # a batch costs ~1 ms through a worker
        shuffle = rng.random() < 0.5
        workers = rng.choice([0, 1])
        kw: dict[str, Any] = (
            {"num_workers": 1, "multiprocessing_context": "fork", "timeout": 120} if workers else {}
        )
        holder: dict[str, Any] = {}

        def make() -> Iterator[Any]:
            dl = mtorch.data_loader(src, bs, shuffle=shuffle, seed=rng.randrange(1000), **kw)
            holder["check"] = self.epoch(dl.dataset.rows, shuffle, bs)
            return iter(dl)

        self.iterate(
            f"data_loader({who if src is s else 'path'}, {bs}, {shuffle=}, {workers=})",
            make,
            lambda item, state_now: holder["check"](item, state_now),  # noqa: PLW0108 - made by make()
            reopens=True,
        )

    def op_reopen(self) -> None:
        def reopen() -> tuple[int, Any]:
            with mmapkit.FeatureStore(self.sdir, "r") as s2:
                n2 = len(s2)
                return n2, s2.take(np.arange(n2)) if n2 else None

        def check(n2: int, rows: Any, state: str) -> str:
            if rows is not None and self.check_rows(np.arange(n2), *rows, state) != "right":
                raise ViolationError(f"a reopened store claims {n2} rows, some are zeros")
            return "right"

        self.step("FeatureStore(dir, 'r') again; take(all)", reopen, self.reopened(check))

    def ops(self) -> list[tuple[float, Callable[[], None]]]:
        ops = self.weighted(add=2, refresh=1.5, get=3, take=2, batches=2, reopen=1)
        if mtorch is not None:
            ops += self.weighted(data_loader=1)
        return ops

    def close(self) -> None:
        for name, s in (("W", self.W), ("R", self.R)):
            self.step(f"{name}.close()", s.close, self.judge_result(writer=name == "W"))


# ----- ArrayStore --------------------------------------------------------------


def array_rows(lo: int, hi: int, k: int) -> np.ndarray:
    return np.arange(lo * k, hi * k, dtype=np.int64).reshape(hi - lo, k) + 1


class ArrayRound(StoreRound):
    scenario = "array"

    def setup(self) -> None:
        rng = self.rng
        self.k = k = rng.choice([1, 3, 8, 32])
        self.path = os.path.join(self.dir, "a.npy")
        self.W = mmapkit.ArrayStore.create(
            self.path, "i8", (k,), chunk_bytes=rng.choice([4096, 1 << 16])
        )
        n = rng.randint(1, 4000)
        self.W.extend(array_rows(0, n, k))
        self.n = len(self.W)
        self.R = mmapkit.ArrayStore.open(self.path, "r")
        self.Rn = len(self.R)
        self.off, self.rb = self.W.data_offset, 8 * k
        size = os.path.getsize(self.path)
        self.plan(self.path, self.store_cuts(self.off, self.rb, n, size, header=False))

    def end(self, rows: int) -> int:
        return self.off + rows * self.rb

    def raw(self, lo: int, got: np.ndarray, state: str) -> str:
        hi = lo + len(got)
        offsets = self.off + np.arange(lo * self.rb, hi * self.rb)
        return self.zeros(got, array_rows(lo, hi, self.k), offsets, state)

    def op_extend(self) -> None:
        m = self.rng.randint(1, 300)
        n = self.n
        self.step(
            f"W.extend({m} rows)",
            lambda: self.W.extend(array_rows(n, n + m, self.k)),
            self.commit(n + m, "extend()"),
        )

    def op_append(self) -> None:
        n = self.n
        self.step(
            "W.append(row)",
            lambda: self.W.append(array_rows(n, n + 1, self.k)[0]),
            self.commit(n + 1, "append()"),
        )

    def op_flush(self) -> None:
        self.step("W.flush()", self.W.flush, self.commit(self.n, "flush()", returns=False))

    def op_view(self) -> None:
        rng = self.rng
        who, s, n = self.store()
        a = rng.randrange(n + 1)
        b = rng.randint(a, n)
        judge = self.judge_raw("a view read", lambda res, state: self.raw(a, res, state))
        self.step(f"{who}[{a}:{b}] (a view)", lambda: np.array(s[a:b]), judge)

    def op_reopen(self) -> None:
        def reopen() -> tuple[int, np.ndarray]:
            with mmapkit.ArrayStore.open(self.path, "r") as s2:
                return len(s2), np.array(s2.numpy())

        def check(n2: int, rows: Any, state: str) -> str:
            end = self.end(n2)
            if self.cut_below(end, state):
                raise ViolationError(
                    f"a reopened store claims {n2} rows ({end} bytes) of a file cut to {self.cut}"
                )
            return self.raw(0, rows, state)

        self.step("ArrayStore.open(path, 'r') again; its rows", reopen, self.reopened(check))

    def ops(self) -> list[tuple[float, Callable[[], None]]]:
        return self.weighted(extend=2, append=1, flush=1.5, refresh=1, view=3, reopen=1)

    def close(self) -> None:
        self.step("W.close()", self.W.close, self.commit(self.n, "close()", returns=False))
        self.step("R.close()", self.R.close, self.judge_result())


# ----- CommitLog ---------------------------------------------------------------


class LogRound(Round):
    scenario = "log"

    def setup(self) -> None:
        rng = self.rng
        self.ldir = os.path.join(self.dir, "log")
        self.log = mmapkit.CommitLog(self.ldir, segment_size=1 << 16)
        n = rng.randint(20, 1500)
        gen = np.random.default_rng(rng.getrandbits(64))
        self.entries = [
            gen.integers(1, 256, int(gen.integers(1, 400)), dtype=np.uint8).tobytes()
            for _ in range(n)
        ]
        for lo in range(0, n, 100):
            self.log.append(self.entries[lo : lo + 100])
        self.log.sync()
        self.first = self.log.first_index()
        segs = sorted(f for f in os.listdir(self.ldir) if f.endswith(".seg"))
        path = os.path.join(self.ldir, rng.choice(segs))
        self.plan(path, file_cuts(rng, os.path.getsize(path)))

    def reads(self, exp: list[bytes], reopen: bool = False) -> Judge:
        def judge(res: Any, exc: Any, state: str) -> str:
            if exc is not None:
                # Recovery refuses a segment whose size its header does not
                # record (cut, grown or replaced): CorruptError, documented.
                if isinstance(exc, mmapkit.CorruptError) and (
                    self.truncated(state) or (reopen and state != "pre")
                ):
                    return "error"
                return self.error(exc, state, reopen=reopen)
            if res != exp:
                bad = next(
                    i
                    for i in range(max(len(res), len(exp)))
                    if i >= len(res) or i >= len(exp) or res[i] != exp[i]
                )
                got_b = res[bad] if bad < len(res) else None
                exp_b = exp[bad] if bad < len(exp) else None
                raise ViolationError(
                    f"{len(res)} entries read, {len(exp)} expected; entry {bad} differs: "
                    f"{short(got_b)} vs {short(exp_b)}"
                )
            return "right"

        return judge

    def op_get(self) -> None:
        i = self.rng.randrange(len(self.entries))
        self.step(
            f"log.get({self.first + i})",
            lambda: [self.log.get(self.first + i)],
            self.reads([self.entries[i]]),
        )

    def op_read(self) -> None:
        rng, n = self.rng, len(self.entries)
        a = rng.randrange(n)
        b = rng.randint(a + 1, n)
        self.step(
            f"log.read({self.first + a}, {self.first + b})",
            lambda: self.log.read(self.first + a, self.first + b),
            self.reads(self.entries[a:b]),
        )

    def op_iter(self) -> None:
        self.step("list(log)", lambda: list(self.log), self.reads(self.entries))

    def op_reopen(self) -> None:
        def reopen() -> list[bytes]:
            ro = mmapkit.CommitLog(self.ldir, read_only=True)
            try:
                first, last = ro.first_index(), ro.last_index()
                if first != self.first or last > self.first + len(self.entries) - 1:
                    raise ViolationError(f"a reopened log claims entries {first}..{last}")
                return ro.read(first, last + 1) if last >= first else []
            finally:
                ro.close()

        def judge(res: Any, exc: Any, state: str) -> str:
            if isinstance(exc, ViolationError):
                raise exc
            got = res if exc is None else None
            if got is not None and state == "pre" and len(got) != len(self.entries):
                raise ViolationError(
                    f"a reopened log of an intact directory has {len(got)} entries"
                )
            return self.reads(self.entries[: len(got)] if got is not None else [], reopen=True)(
                got, exc, state
            )

        self.step("CommitLog(dir, read_only=True); read all", reopen, judge)

    def ops(self) -> list[tuple[float, Callable[[], None]]]:
        return self.weighted(get=3, read=2, iter=1, reopen=1)

    def close(self) -> None:
        self.step(
            "log.close()",
            self.log.close,
            lambda r, e, s: "right" if e is None else self.reads([])(None, e, s),
        )


# ----- a torch DataLoader worker reading a raw view ---------------------------

if torch is not None:

    class ViewDataset(torch.utils.data.Dataset[Any]):
        """Chunks of a mapped file: a copy of the raw numpy view (zeros past a
        truncation) or, for API items, ``m[a:b]`` (FileTruncatedError)."""

        def __init__(self, m: Any, chunks: list[tuple[int, int, bool]]) -> None:
            self.m, self.v, self.chunks = m, m.numpy(np.uint8), chunks

        def __len__(self) -> int:
            return len(self.chunks)

        def __getitem__(self, i: int) -> Any:
            a, b, api = self.chunks[i]
            data = np.frombuffer(self.m[a:b], np.uint8).copy() if api else self.v[a:b].copy()
            return i, torch.from_numpy(data)


class TorchViewRound(Round):
    scenario = "torch_view"

    def setup(self) -> None:
        rng = self.rng
        self.L = L = rng.randint(8, 160) * PAGE - rng.randrange(PAGE)
        self.data_file(L)
        self.m = mmapkit.open(self.path, "r")
        step = rng.choice([PAGE, 3 * PAGE, 5000])
        api_share = rng.choice([0.0, 0.1, 0.5])
        self.chunks = [(a, min(L, a + step), rng.random() < api_share) for a in range(0, L, step)]
        self.plan(self.path, file_cuts(rng, L))

    def op_loader(self) -> None:
        ds = ViewDataset(self.m, self.chunks)
        seen: list[int] = []

        def make() -> Iterator[Any]:
            dl = torch.utils.data.DataLoader(
                ds, batch_size=None, num_workers=1, multiprocessing_context="fork", timeout=120
            )
            return iter(dl)

        def check(item: Any, state_now: Callable[[], str]) -> str:
            i, t = item  # the worker's copy
            a, b, api = self.chunks[int(i)]
            seen.append(int(i))
            r = self.zeros(t.numpy(), self.data[a:b], np.arange(a, b), state_now())
            if r != "right" and api:
                raise ViolationError(f"m[{a}:{b}] in the worker returned zeros without an error")
            if r == "raw_zeros":
                OUT[r] += 1  # this item's own outcome
            return "right"  # raw zeros are fine: no later error is owed

        self.seen = seen
        self.iterate(f"DataLoader(view of {len(self.chunks)} chunks, fork worker)", make, check)

    def complete(self, name: str) -> None:
        if sorted(self.seen) != list(range(len(self.chunks))):
            raise ViolationError(
                f"the loader yielded items {self.seen[:10]}... not each chunk once"
            )

    def op_raw(self) -> None:
        v = self.m.numpy(np.uint8)
        a = self.rng.randrange(self.L)
        b = self.rng.randint(a, self.L)
        judge = self.judge_result(
            lambda res, state: self.zeros(res, self.data[a:b], np.arange(a, b), state)
        )
        self.step(f"raw view [{a}:{b}] in this process", v[a:b].copy, judge)

    def ops(self) -> list[tuple[float, Callable[[], None]]]:
        return self.weighted(loader=1, raw=1)

    def run(self) -> None:
        # Fewer, longer operations: a loader's worker takes a while to start.
        SCENARIOS[self.scenario] += 1
        self.setup()
        maybe_enable_faulthandler()
        self.armed = True
        self.op_loader()
        self.send()
        reply = self.mutator.wait()
        log(f"  mutator: {reply}")
        self.op_raw()
        self.op_loader()
        self.step("close()", self.m.close, self.judge_result())


# ----- main --------------------------------------------------------------------

FAULTHANDLER = [False]


def maybe_enable_faulthandler() -> None:
    """Odd seeds: faulthandler.enable() once the first mappings exist."""
    if FAULTHANDLER[0] and not faulthandler.is_enabled():
        faulthandler.enable()
        log("faulthandler enabled")


def run_round(seed: int, rnd: int, base: str, mutator: Mutator) -> None:
    rng = random.Random(f"{seed}/{rnd}/scenario")
    kinds: list[tuple[float, type[Round]]] = [
        (3, MapRound),
        (3.5, FeatureRound),
        (1.5, ArrayRound),
        (1, LogRound),
    ]
    if torch is not None:
        kinds.append((1, TorchViewRound))
    cls = rng.choices([c for _, c in kinds], [w for w, _ in kinds])[0]
    r = cls(seed, rnd, base, mutator)
    try:
        r.run()
    except ViolationError as v:
        r.violation("round", "?", str(v))
    finally:
        gc.collect()
        shutil.rmtree(r.dir, ignore_errors=True)


def main() -> None:
    seed, rounds = int(sys.argv[1]), int(sys.argv[2])
    budget, base = float(sys.argv[3]), sys.argv[4]
    only = int(sys.argv[5]) if len(sys.argv) > 5 else None
    FAULTHANDLER[0] = seed % 2 == 1
    mutator = Mutator()
    t0 = time.monotonic()
    done = 0
    try:
        for rnd in [only] if only is not None else range(rounds):
            if only is None and time.monotonic() - t0 > budget:
                break
            log(f"--- seed {seed} round {rnd}")
            run_round(seed, rnd, base, mutator)
            done += 1
    finally:
        mutator.close()
    counts = {
        "seed": seed,
        "rounds": done,
        "seconds": round(time.monotonic() - t0, 1),
        "faulthandler": FAULTHANDLER[0],
        "torch": torch is not None,
        "ops": COUNT["ops"],
        "mutations": {k: MUTATIONS[k] for k in KINDS},
        "outcomes": {k: OUT[k] for k in [*OUTCOMES, "violation"]},
        "states": dict(STATES),
        "scenarios": dict(SCENARIOS),
    }
    print("COUNTS " + json.dumps(counts), flush=True)
    if VIOLATIONS:
        print(f"{len(VIOLATIONS)} violations:", *VIOLATIONS[:40], sep="\n", flush=True)
        sys.exit(1)


if __name__ == "__main__":
    main()

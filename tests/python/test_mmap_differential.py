"""Differential test: ``mmapkit.mmap`` against the stdlib ``mmap.mmap``.

Hypothesis generates a map (anonymous or over a file, every access mode)
and a sequence of operations (every method, indexing and slicing with
steps and negative indexes, iteration, ``in``, resize, exports, close and
use after close); both implementations run it on their own copy of the
same content. Results, exception types, the bytes seen through the map
after every step and the file's bytes at the end must agree.

The deliberate differences (documented in ``mmapkit.mmap``'s docstring
and the README) are listed in ``DELIBERATE`` below and are the only ones
tolerated.
"""

from __future__ import annotations

import contextlib
import mmap as std
import os
import pickle
import tempfile

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import mmapkit

# Deliberate differences from the stdlib, in one place:
DELIBERATE = {
    # mmapkit pickles a file-backed map by path (the receiver maps the file
    # again); the stdlib refuses. Anonymous maps: TypeError in both.
    "pickle": "file-backed maps pickle by path",
    # mmapkit maps empty regions; the stdlib raises OSError(EINVAL).
    "zero_length": "mmapkit.mmap(-1, 0) and resize(0) are allowed",
    # Growing never moves mmapkit's memory, so resize() may grow while a
    # buffer is exported; the stdlib raises BufferError for any resize.
    "grow_while_exported": "resize() to a larger size with exports is allowed",
    # Shrinking then growing an anonymous map gives zeros in mmapkit; the
    # stdlib shows the old bytes again (its shared memory object is never
    # shrunk). The test zeroes the cut-off tail in both before a shrink.
    "anonymous_regrow": "bytes cut off by a shrink come back as zeros",
    # Methods the stdlib lacks (advise, count, find_all, grow, numpy, ...)
    # are additions, not differences, and are not exercised here.
}

SIZE = st.integers(1, 48)
SMALL = st.integers(-60, 60)
NEEDLE = st.binary(max_size=3).map(lambda b: bytes(c % 3 + 97 for c in b))  # b"a".."c"
OPTIONAL = st.none() | SMALL


def _slices():
    return st.builds(slice, OPTIONAL, OPTIONAL, st.none() | st.integers(-5, 5))


_value_for_item = st.one_of(
    st.integers(-2, 258), st.just(b"a"), st.just("a"), st.just(1.5), st.just(None)
)
_bytes_like = st.one_of(
    NEEDLE,
    st.binary(max_size=60),
    NEEDLE.map(bytearray),
    NEEDLE.map(memoryview),
    st.just("abc"),
    st.just(5),
    st.just(None),
)
_contains_probe = st.one_of(
    st.integers(-1, 256),
    NEEDLE,
    NEEDLE.map(bytearray),
    NEEDLE.map(memoryview),
    st.just("a"),
    st.just(None),
    st.just(1.0),
)

OPS = st.one_of(
    st.tuples(st.just("read"), st.none() | st.integers(-2, 60)),
    st.tuples(st.just("read_byte")),
    st.tuples(st.just("readline")),
    st.tuples(st.just("write"), _bytes_like),
    st.tuples(st.just("write_byte"), _value_for_item),
    st.tuples(st.just("seek"), SMALL, st.integers(0, 3)),
    st.tuples(st.just("seek1"), SMALL),
    st.tuples(st.just("tell")),
    st.tuples(
        st.just("find"),
        st.one_of(NEEDLE, NEEDLE.map(bytearray), st.just("a"), st.just(97)),
        OPTIONAL,
        OPTIONAL,
    ),
    st.tuples(
        st.just("rfind"), st.one_of(NEEDLE, NEEDLE.map(bytearray), st.just("a")), OPTIONAL, OPTIONAL
    ),
    st.tuples(st.just("find1"), NEEDLE, SMALL),
    st.tuples(st.just("flush")),
    st.tuples(st.just("flush2"), st.integers(-1, 60), st.none() | st.integers(-1, 60)),
    st.tuples(st.just("move"), SMALL, SMALL, SMALL),
    st.tuples(st.just("resize"), st.integers(-1, 80).filter(bool)),  # 0: DELIBERATE zero_length
    st.tuples(st.just("size")),
    st.tuples(st.just("len")),
    st.tuples(st.just("closed")),
    st.tuples(st.just("close")),
    st.tuples(
        st.just("madvise"),
        st.sampled_from([std.MADV_NORMAL, std.MADV_RANDOM, std.MADV_WILLNEED, 12345]),
        SMALL,
        st.none() | SMALL,
    ),
    st.tuples(
        st.just("getitem"), st.one_of(SMALL, _slices(), st.just("a"), st.just(1.5), st.just(None))
    ),
    st.tuples(st.just("setitem"), st.one_of(SMALL, st.just("a")), _value_for_item),
    st.tuples(st.just("setslice"), _slices(), _bytes_like),
    st.tuples(st.just("delitem"), st.one_of(SMALL, _slices())),
    st.tuples(st.just("iter")),
    st.tuples(st.just("contains"), _contains_probe),
    st.tuples(st.just("eq")),
    st.tuples(st.just("bytes")),
    st.tuples(st.just("export_resize"), st.integers(0, 80)),
    st.tuples(st.just("export_close")),
    st.tuples(st.just("export_write"), st.integers(0, 60)),
    st.tuples(st.just("with")),
    st.tuples(st.just("pickle")),
)


def _run(m, op):
    name, *a = op
    if name == "read":
        return m.read(a[0]) if a[0] is not None else m.read()
    if name == "seek":
        return m.seek(a[0], a[1])
    if name == "seek1":
        return m.seek(a[0])
    if name in ("find", "rfind"):
        sub, start, end = a
        f = getattr(m, name)
        if start is None and end is None:
            return f(sub)
        if end is None:
            return f(sub, start)
        return f(sub, 0 if start is None else start, end)
    if name == "find1":
        return m.find(a[0], a[1])
    if name == "flush2":
        return m.flush(a[0]) if a[1] is None else m.flush(a[0], a[1])
    if name == "madvise":
        return m.madvise(a[0], a[1]) if a[2] is None else m.madvise(*a)
    if name == "len":
        return len(m)
    if name == "closed":
        return m.closed
    if name == "getitem":
        return m[a[0]]
    if name in ("setitem", "setslice"):
        m[a[0]] = a[1]
        return None
    if name == "delitem":
        del m[a[0]]
        return None
    if name == "iter":
        return list(m)
    if name == "contains":
        return a[0] in m
    if name == "eq":
        return (m == m, m != m, m == b"", m == bytes(10))
    if name == "bytes":
        return bytes(m)
    if name == "export_resize":
        with memoryview(m) as mv:
            if a[0] >= len(mv):
                return "skip: grow_while_exported"  # DELIBERATE
            m.resize(a[0])
        return None
    if name == "export_close":
        with memoryview(m) as mv:
            mv_len = len(mv)
            m.close()
        return mv_len
    if name == "export_write":
        with memoryview(m) as mv:
            mv[a[0]] = 65
        return None
    if name == "with":
        with m as inner:
            return inner is m
    if name == "pickle":
        pickle.dumps(m)
        return "skip: pickle"  # DELIBERATE for file-backed maps
    return getattr(m, name)(*a)


def _outcome(m, op):
    try:
        r = _run(m, op)
    except Exception as e:  # noqa: BLE001 - the type is what is compared
        return ("raise", type(e).__name__)
    if isinstance(r, (bytes, bytearray)):
        r = bytes(r)
    return ("ok", r)


def _view(m):
    """What the map holds now (or why not)."""
    try:
        return bytes(m[:]), m.tell()
    except Exception as e:  # noqa: BLE001
        return type(e).__name__


CASE = st.tuples(
    st.sampled_from(["anon", "file", "file_offset"]),
    st.sampled_from([None, std.ACCESS_READ, std.ACCESS_WRITE, std.ACCESS_COPY]),
    st.binary(min_size=1, max_size=48).map(lambda b: bytes(c % 4 + 97 if c % 5 else 10 for c in b)),
    st.lists(OPS, min_size=10, max_size=40),
)


def _make(impl, kind, access, content, d, tag):
    kw = {} if access is None else {"access": access}
    if kind == "anon":
        m = impl.mmap(-1, len(content), **kw)
        if access != std.ACCESS_READ:
            m[:] = content
        return m, None
    path = os.path.join(d, tag)
    offset = std.ALLOCATIONGRANULARITY if kind == "file_offset" else 0
    with open(path, "wb") as f:
        f.write(b"p" * offset + content)
    fd = os.open(path, os.O_RDONLY if access == std.ACCESS_READ else os.O_RDWR)
    try:
        return impl.mmap(fd, 0, offset=offset, **kw), path
    finally:
        os.close(fd)


def _skip(op, kind, r_std, r_kit):
    """True when the outcomes differ only by a DELIBERATE difference."""
    if op[0] == "pickle" and kind != "anon":
        return r_std[0] == "raise" and r_std[1] == "TypeError"
    return bool(op[0] == "export_resize" and r_kit == ("ok", "skip: grow_while_exported"))


COUNT = {"sequences": 0, "ops": 0}


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(CASE)
def test_mmapkit_mmap_behaves_like_the_stdlib(case):
    kind, access, content, ops = case
    COUNT["sequences"] += 1
    with tempfile.TemporaryDirectory() as d:
        try:
            s, ps = _make(std, kind, access, content, d, "std")
        except Exception as e:  # noqa: BLE001
            with pytest.raises(type(e)):
                _make(mmapkit, kind, access, content, d, "kit")
            return
        k, pk = _make(mmapkit, kind, access, content, d, "kit")
        assert isinstance(k, mmapkit.mmap)
        trace = []
        for op in ops:
            COUNT["ops"] += 1
            if op[0] == "export_resize" and not s.closed and not k.closed and op[1] >= len(s):
                continue  # DELIBERATE: grow_while_exported
            if kind == "anon" and op[0] == "resize" and not s.closed and 0 < op[1] < len(s):
                # DELIBERATE: anonymous_regrow
                for m in (s, k):
                    with contextlib.suppress(TypeError):  # read-only: resize fails in both
                        m[op[1] :] = bytes(len(m) - op[1])
            r_std, r_kit = _outcome(s, op), _outcome(k, op)
            trace.append((op, r_std))
            if not _skip(op, kind, r_std, r_kit):
                assert r_kit == r_std, (op, trace)
            assert _view(k) == _view(s), (op, trace)
        for m in (s, k):
            m.close()
        if ps is not None:
            with open(ps, "rb") as f1, open(pk, "rb") as f2:
                assert f2.read() == f1.read(), trace


def test_iteration_and_in_match_the_stdlib():
    """Iteration yields 1-byte bytes, ``in`` compares items."""
    for impl in (std, mmapkit):
        m = impl.mmap(-1, 6)
        m[:] = b"a\nb\nc\n"
        assert list(m) == [b"a", b"\n", b"b", b"\n", b"c", b"\n"], impl
        assert b"\n" in m and bytearray(b"c") in m
        assert 5 not in m and 10 not in m and b"a\n" not in m and "a" not in m
        m.close()
        with pytest.raises(ValueError):
            b"a" in m  # noqa: B015
        with pytest.raises(ValueError):
            list(m)


def test_deliberate_differences_are_documented():
    doc = mmapkit.mmap.__doc__ or ""
    assert "pickle" in doc.lower() and "zero-length" in doc.lower() and "grow" in doc.lower()

"""Property tests: mmapkit's fast paths against naive Python references."""

import re

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import mmapkit

small_bytes = st.binary(min_size=0, max_size=3 * mmapkit.PAGESIZE)
alphabet_bytes = st.lists(st.sampled_from(b"ab\n"), max_size=600).map(bytes)
needles = st.lists(st.sampled_from(b"ab\n"), min_size=1, max_size=4).map(bytes)


def naive_find_all(hay: bytes, needle: bytes) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(needle), hay)]  # non-overlapping, leftmost


@settings(max_examples=200, deadline=None)
@given(hay=alphabet_bytes, needle=needles, start=st.integers(-700, 700), end=st.integers(-700, 700))
def test_search_matches_bytes(hay, needle, start, end):
    m = mmapkit.mmap(-1, len(hay))
    if hay:
        m[:] = hay
    assert m.find(needle, start, end) == hay.find(needle, start, end)
    assert m.rfind(needle, start, end) == hay.rfind(needle, start, end)
    assert m.count(needle) == hay.count(needle)
    assert m.find_all(needle).tolist() == naive_find_all(hay, needle)
    m.close()


@settings(max_examples=100, deadline=None)
@given(
    data=small_bytes,
    start=st.integers(-5000, 5000) | st.none(),
    stop=st.integers(-5000, 5000) | st.none(),
    step=st.integers(-300, 300).filter(bool) | st.none(),
)
def test_slicing_matches_bytes(data, start, stop, step):
    m = mmapkit.mmap(-1, len(data))
    if data:
        m[:] = data
    assert m[start:stop:step] == data[start:stop:step]
    target = bytearray(data)
    sl = slice(start, stop, step)
    repl = bytes(reversed(target[sl]))
    target[sl] = repl
    m[sl] = repl
    assert m[:] == bytes(target)
    m.close()


@settings(max_examples=50, deadline=None)
@given(
    data=small_bytes,
    offset=st.integers(0, 3 * mmapkit.PAGESIZE),
    length=st.integers(0, 5000) | st.none(),
)
def test_any_offset_view_matches_file(tmp_path_factory, data, offset, length):
    p = tmp_path_factory.mktemp("prop") / "f.bin"
    p.write_bytes(data)
    offset = min(offset, len(data))
    if length is not None:
        length = min(length, len(data) - offset)
    with mmapkit.open(p, offset=offset, length=length) as m:
        expect = data[offset : None if length is None else offset + length]
        assert m[:] == expect
        assert m.numpy().tobytes() == expect
        np.testing.assert_array_equal(
            m.find_all(b"\x00"), [i for i, b in enumerate(expect) if b == 0]
        )

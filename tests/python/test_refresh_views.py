"""refresh() re-syncs with the file while views exist (issue 10, defect 14).

The reserve-then-MAP_FIXED layout lets refresh map the file again over the
same addresses: numpy views and memoryviews keep their address, pages a
truncation replaced with zeros show the file again, and nothing raises
BufferError.
"""

import mmap as stdmap
import os

import mmapkit

PAGE = stdmap.PAGESIZE


def test_refresh_with_views_alive_shows_the_file_again(tmp_path):
    p = tmp_path / "f.bin"
    p.write_bytes(b"a" * (4 * PAGE))
    m = mmapkit.open(p)
    view = m.numpy()
    mv = memoryview(m)
    addr = view.__array_interface__["data"][0]
    os.truncate(p, PAGE)
    # The lost pages read as zeros through the view (the guard), and the
    # map reports the truncation.
    assert not view[2 * PAGE :].any()
    try:
        m[:1]
        raise AssertionError("FileTruncatedError expected")
    except mmapkit.FileTruncatedError as e:
        # Python says how to recover; the core's (CLI's) text names no Python method.
        assert "refresh()" in str(e)
    # Another process writes the file back, longer.
    with open(p, "r+b") as f:
        f.seek(PAGE)
        f.write(b"b" * (3 * PAGE))
    assert m.refresh() == 4 * PAGE  # no BufferError with views alive
    assert view.__array_interface__["data"][0] == addr
    assert bytes(view[2 * PAGE : 2 * PAGE + 3]) == b"bbb"  # not zeros any more
    assert mv[3 * PAGE] == ord("b")
    assert m[PAGE - 1 : PAGE + 1] == b"ab"
    mv.release()
    del view
    m.close()


def test_refresh_after_a_shrink_keeps_views_readable(tmp_path):
    p = tmp_path / "g.bin"
    p.write_bytes(b"c" * (3 * PAGE))
    m = mmapkit.open(p)
    view = m.numpy()
    os.truncate(p, 100)
    assert m.refresh() == 100  # shorter now, views still mapped
    assert len(m) == 100 and m[:] == b"c" * 100
    assert view[:100].tobytes() == b"c" * 100
    assert not view[PAGE:].any()  # past the end: zeros, no SIGBUS
    m.count(b"c")  # no FileTruncatedError any more
    del view
    m.close()


def test_stdlib_class_refresh_with_exported_buffer(tmp_path):
    p = tmp_path / "h.bin"
    p.write_bytes(b"d" * (2 * PAGE))
    with open(p, "r+b") as f:
        m = mmapkit.mmap(f.fileno(), 0)
    mv = memoryview(m)
    os.truncate(p, PAGE)
    with open(p, "r+b") as f:
        f.seek(PAGE)
        f.write(b"e" * PAGE)
    assert m.refresh() == 2 * PAGE
    assert mv[PAGE] == ord("e")
    mv.release()
    m.close()

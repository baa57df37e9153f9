"""mmapkit.count / find / find_all / grep / replace / keep_lines from Python."""

import os
import re
import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import mmapkit

STRATEGIES = ("auto", "mmap", "read", "stream")


def naive_all(data: bytes, sub: bytes) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(sub), data)]


@settings(max_examples=60, deadline=None)
@given(
    data=st.lists(st.sampled_from(b"ab\n\r,"), max_size=3000).map(bytes),
    sub=st.lists(st.sampled_from(b"ab\n,"), min_size=1, max_size=4).map(bytes),
)
def test_count_find_match_naive_for_every_strategy(tmp_path_factory, data, sub):
    p = tmp_path_factory.mktemp("tools") / "d.bin"
    p.write_bytes(data)
    want = naive_all(data, sub)
    for strategy in STRATEGIES:
        for threads in (1, 2):
            kw = {"strategy": strategy, "threads": threads}
            assert mmapkit.count(p, sub, **kw) == len(want) == data.count(sub)
            assert mmapkit.find_all(p, sub, **kw).tolist() == want
            assert mmapkit.find(p, sub, **kw) == data.find(sub)
            assert mmapkit.find(p, sub, last=True, **kw) == data.rfind(sub)
            assert mmapkit.find_all(p, sub, max=1, **kw).tolist() == want[:1]


def test_lines_and_str_patterns(tmp_path):
    p = tmp_path / "t.csv"
    p.write_bytes(b"a,b\nc,d\r\n\nlast")
    assert mmapkit.count(p, "\n") == 3
    assert mmapkit.count(p, ",") == 2
    offs = mmapkit.find_all(p, ",")
    assert offs.dtype == np.int64 and offs.tolist() == [1, 5]
    assert mmapkit.find(p, "zz") == -1


def test_find_near_the_start_of_a_big_file_returns_early(tmp_path):
    p = tmp_path / "big.bin"
    with open(p, "wb") as f:
        f.write(b"xx needle")
        # 256 GiB, sparse: scanning it all would take minutes (page faults
        # over zero pages), so a bound 100 times what an early return
        # takes holds on a loaded machine and still fails without one (a
        # 2 GiB file and a 50 ms bound did not: issue 27).
        f.truncate(256 << 30)
    for threads in (1, 2):
        t0 = time.perf_counter()
        assert mmapkit.find(p, b"needle", threads=threads) == 3
        assert time.perf_counter() - t0 < 5


def test_errors(tmp_path):
    with pytest.raises(FileNotFoundError) as ei:
        mmapkit.count(tmp_path / "missing", b"x")
    assert ei.value.filename == str(tmp_path / "missing")
    with pytest.raises(IsADirectoryError):
        mmapkit.count(tmp_path, b"x")
    (tmp_path / "e").write_bytes(b"")
    assert mmapkit.count(tmp_path / "e", b"x") == 0
    assert mmapkit.find(tmp_path / "e", b"x") == -1
    with pytest.raises(ValueError, match="empty"):
        mmapkit.count(tmp_path / "e", b"")
    with pytest.raises(ValueError, match="strategy"):
        mmapkit.count(tmp_path / "e", b"x", strategy="fast")
    with pytest.raises(TypeError):
        mmapkit.count(tmp_path / "e", 5)


def test_grep_from_python(tmp_path):
    p = tmp_path / "log.txt"
    p.write_bytes(b"ok 1\nERR 42 disk\nok 2\nerr 7\nERR 9")
    assert mmapkit.grep(p, r"ERR \d+") == [(2, 5, b"ERR 42 disk"), (5, 28, b"ERR 9")]
    assert mmapkit.grep(p, "err", ignore_case=True, only_matching=True) == [
        (2, 5, b"ERR"),
        (4, 22, b"err"),
        (5, 28, b"ERR"),
    ]
    assert mmapkit.grep_count(p, "ok", invert=True) == 3
    assert mmapkit.grep_count(p, "ERR", max_count=1) == 1
    assert mmapkit.grep_count(p, "(", fixed=True) == 0
    with pytest.raises(ValueError, match="regex"):
        mmapkit.grep(p, "(")
    for strategy in STRATEGIES:
        for threads in (1, 2):
            assert mmapkit.grep_count(p, r"\d", strategy=strategy, threads=threads) == 5


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_replace_and_keep_lines_from_python(tmp_path, strategy):
    p = tmp_path / "d.csv"
    data = b"a,b,c\n1,2,3\n" * 1000
    p.write_bytes(data)
    assert mmapkit.replace(p, b",", b";", dry_run=True, strategy=strategy) == 4000
    assert p.read_bytes() == data
    assert mmapkit.replace(p, ",", ";", fixed=True, strategy=strategy) == 4000  # in place
    assert p.read_bytes() == data.replace(b",", b";")
    assert mmapkit.replace(p, ";", ", ", fixed=True, backup=".orig", strategy=strategy) == 4000
    assert p.read_bytes() == data.replace(b",", b", ")
    assert (tmp_path / "d.csv.orig").read_bytes() == data.replace(b",", b";")
    assert mmapkit.replace(p, rb"(\d), (\d)", rb"$2|$1", strategy=strategy) == 1000
    assert p.read_bytes().startswith(b"a, b, c\n2|1, 3\n")
    assert mmapkit.keep_lines(p, 1) == len(b"a, b, c\n")
    assert p.read_bytes() == b"a, b, c\n"
    os.chmod(p, 0o640)
    mmapkit.replace(p, "a", "AA")
    assert os.stat(p).st_mode & 0o777 == 0o640, "permissions kept across the rewrite"


def test_replace_rejects_unknown_capture_groups(tmp_path):
    p = tmp_path / "g"
    p.write_bytes(b"foo bar\n")
    for rep in (b"$2", b"${2}", b"${name}", b"$1a"):
        with pytest.raises(ValueError, match="invalid reference"):
            mmapkit.replace(p, rb"(foo)", rep)
        assert p.read_bytes() == b"foo bar\n"
    assert mmapkit.replace(p, rb"(foo)", rb"<$1|${0}>") == 1
    assert p.read_bytes() == b"<foo|foo> bar\n"


def test_scans_read_proc_files_and_fifos(tmp_path):
    # /proc/meminfo reports size 0 but has content: read it as a stream.
    assert mmapkit.find("/proc/meminfo", b"MemTotal") == 0
    assert mmapkit.grep_count("/proc/meminfo", "^MemTotal") == 1
    fifo = tmp_path / "ff"
    os.mkfifo(fifo)
    import threading

    t = threading.Thread(target=lambda: fifo.write_bytes(b"a\nb\na\n"))
    t.start()
    assert mmapkit.count(fifo, b"a") == 2
    t.join()


def test_threads_mean_the_same_everywhere(tmp_path):
    """None and 0 are one per core, 1 sequential, n workers; out of range
    (negative, over 1024) is a ValueError naming threads, in every function."""
    p = tmp_path / "t.txt"
    p.write_bytes(b"alpha,1\nbeta,22\n" * 5000)
    fa = tmp_path / "r.fa"
    fa.write_bytes(b">r1\nACGTACGTTT\n>r2\nGGGCCCAAATTT\n" * 50)
    log = mmapkit.CommitLog(tmp_path / "wal", segment_size=4096)  # several segments
    for i in range(100):
        log.append([b"entry %d" % i * 40])
    calls = {
        "count": lambda t: mmapkit.count(p, b",", threads=t),
        "find": lambda t: mmapkit.find(p, b"22\nalpha", last=True, threads=t),
        "find_all": lambda t: mmapkit.find_all(p, b"beta", threads=t).tolist(),
        "grep": lambda t: mmapkit.grep(p, r"a,\d$", threads=t),
        "grep_count": lambda t: mmapkit.grep_count(p, "beta", threads=t),
        "replace": lambda t: mmapkit.replace(p, b"alpha", b"gamma", dry_run=True, threads=t),
        "kmers": lambda t: mmapkit.kmers(fa, 3, threads=t).tolist(),
        "verify": lambda t: log.verify(threads=t),
    }
    assert log.verify()["segments"] > 2
    for name, call in calls.items():
        want = call(1)
        for t in (None, 0, 2, 3):
            assert call(t) == want, (name, t)
        for bad in (-1, 1025):
            with pytest.raises(ValueError, match="threads"):
                call(bad)
    log.close()


def test_replace_is_a_regex_by_default_like_grep_and_the_cli(tmp_path):
    # One meaning per flag across front ends (issue 25, defect 6): a regex
    # unless fixed=True, matched as bytes like grep (defect 5).
    p = tmp_path / "u"
    p.write_bytes(b"Re\xaderve e\xff x\n")
    assert mmapkit.replace(p, b"e.", b"E", dry_run=True) == 4
    assert len(mmapkit.grep(p, b"e.", only_matching=True)) == 4
    assert mmapkit.replace(p, b"e.", b"E", fixed=True, dry_run=True) == 0
    q = tmp_path / "k"
    q.write_bytes("K\u00f6the the\n".encode())
    assert mmapkit.replace(q, rb"\bthe\b", b"X") == 2
    assert q.read_bytes() == "K\u00f6X X\n".encode()

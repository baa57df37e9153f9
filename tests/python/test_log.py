"""mmapkit.CommitLog from Python: API, model, crashes (SIGKILL), corruption,
a full file system, readers in threads and in other processes."""

import errno
import io
import pickle
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from _logs import damaged_log
from hypothesis import given, settings
from hypothesis import strategies as st

import mmapkit


def test_append_read_and_friends(tmp_path):
    with mmapkit.CommitLog(tmp_path / "wal", sync="never") as log:
        assert (log.first_index(), log.last_index(), len(log)) == (1, 0, 0)
        assert log.append([b"a", b"bb"], term=3) == 1
        assert log.append([(4, b"c"), (5, b"x")]) == 3
        assert log.append([]) == 5
        assert len(log) == 4 and log.last_index() == 4
        assert log.read(1, 5) == [b"a", b"bb", b"c", b"x"]
        assert log.read(2, 4) == [b"bb", b"c"]
        assert log.read(1, 5, max_bytes=3) == [b"a", b"bb"]
        assert log.read(1, 5, max_bytes=0) == [b"a"]  # at least one
        assert log.read_entries(3, 5) == [(3, 4, b"c"), (4, 5, b"x")]
        assert log.get(2) == b"bb" and log.term(2) == 3 and log.term(4) == 5
        assert list(log) == [b"a", b"bb", b"c", b"x"]
        assert isinstance(log.read(1, 2)[0], bytes)
        log.truncate_after(2)
        assert list(log) == [b"a", b"bb"]
        assert log.append([b"new"], term=9) == 3
        assert log.verify() == {"segments": 1, "entries": 3, "bytes": 6, "unreadable_tail": None}
        st_ = log.stat()
        assert (st_["first_index"], st_["last_index"], st_["entries"]) == (1, 3, 3)
        assert log.recovery["dropped_entries"] == 0
        assert "CommitLog" in repr(log)
    assert log.closed
    with pytest.raises(ValueError, match="closed"):
        log.append([b"x"])
    log.close()  # twice is fine


def test_bad_arguments(tmp_path):
    with mmapkit.CommitLog(tmp_path / "wal", sync="never") as log:
        log.append([b"a"])
        with pytest.raises(ValueError, match="not in the log"):
            log.read(1, 3)
        with pytest.raises(ValueError):
            log.get(0)
        with pytest.raises(TypeError):
            log.append(["text"])
        with pytest.raises(TypeError):
            log.append([(1, "text")])
    for bad in ("sometimes", -1.0):
        with pytest.raises(ValueError):
            mmapkit.CommitLog(tmp_path / "x", sync=bad)
    with pytest.raises(TypeError):
        mmapkit.CommitLog(tmp_path / "x", sync=True)
    with pytest.raises(ValueError, match="segment_size"):
        mmapkit.CommitLog(tmp_path / "y", segment_size=100)


@pytest.mark.parametrize("sync", ["batch", "never", 5.0, "interval:10ms", None])
def test_sync_modes(tmp_path, sync):
    with mmapkit.CommitLog(tmp_path / "wal", sync=sync) as log:
        for _ in range(5):
            log.append([b"x"])
        n = log.sync_count()
        if sync in ("batch", None):
            assert n == 5
        elif sync == "never":
            assert n == 0
        else:
            assert n <= 5
        log.sync()


def test_first_index_and_segments_and_reopen(tmp_path):
    d = tmp_path / "wal"
    with mmapkit.CommitLog(d, segment_size=4096, first_index=1000, sync="never") as log:
        for i in range(300):
            log.append([i.to_bytes(8, "little") * 4])
        assert log.stat()["segments"][0]["first_index"] == 1000
        assert len(log.stat()["segments"]) > 3
        log.purge_before(1100)
        first = log.first_index()
        assert 1000 < first <= 1100
    with mmapkit.CommitLog(d, segment_size=4096, sync="never") as log:
        assert (log.first_index(), log.last_index()) == (first, 1299)
        assert log.get(1299) == (299).to_bytes(8, "little") * 4


def test_second_writer_refused_reader_follows(tmp_path):
    d = tmp_path / "wal"
    with mmapkit.CommitLog(d, segment_size=4096, sync="never") as log:
        log.append([b"one"])
        # Same process: said so (the flock cannot tell).
        with pytest.raises(ValueError, match="already open for writing in this process"):
            mmapkit.CommitLog(d)
        ro = mmapkit.CommitLog(d, read_only=True)
        # What writing to a file opened read-only raises.
        with pytest.raises(io.UnsupportedOperation):
            ro.append([b"x"])
        for i in range(100):
            log.append([b"%d" % i])
        assert len(ro) == 1
        ro.refresh()
        assert len(ro) == 101 and ro.get(101) == b"99"


def test_pickle_by_path(tmp_path):
    d = tmp_path / "wal"
    log = mmapkit.CommitLog(d, segment_size=8192, sync="never", first_index=5)
    log.append([b"a", b"b"])
    ro = mmapkit.CommitLog(d, read_only=True)
    ro2 = pickle.loads(pickle.dumps(ro))
    assert ro2.read(5, 7) == [b"a", b"b"]
    data = pickle.dumps(log)
    log.close()
    log2 = pickle.loads(data)
    assert log2.path == str(d) and log2.read(5, 7) == [b"a", b"b"]
    log2.append([b"c"])
    assert log2.stat()["segments"][0]["size"] == 8192
    log2.close()


def test_omitted_options_take_the_cores_defaults(tmp_path):
    with mmapkit.CommitLog(tmp_path / "wal", segment_size=None, sync=None, first_index=None) as log:
        assert log.first_index() == 1 and 'sync="batch"' in repr(log)
        # Pickled with the options the core opened it with.
        assert log.__reduce__()[1][1:] == (64 << 20, "batch", 1, False)


def test_corruption_raises_corrupt_error(tmp_path):
    d = tmp_path / "wal"
    seg = damaged_log(d)
    with mmapkit.CommitLog(d, segment_size=4096, sync="never") as log:
        with pytest.raises(mmapkit.CorruptError) as ei:
            log.verify()
        assert isinstance(ei.value, OSError) and ei.value.errno == errno.EIO
        assert "entry 1" in str(ei.value) and seg.name in str(ei.value)
        with pytest.raises(mmapkit.CorruptError):
            log.read(1, 3)
        assert log.get(200) == b"entry 00199"


def test_torn_tail_is_dropped(tmp_path):
    d = tmp_path / "wal"
    with mmapkit.CommitLog(d, sync="never") as log:
        log.append([b"kept"])
        log.append([b"torn", b"too"])
        end = log.stat()["segments"][0]["size"]
    seg = next(d.glob("*.seg"))
    b = bytearray(seg.read_bytes())
    # Zero the last commit record (32 bytes, with the durable watermark):
    # the second batch is torn.
    pos = 32 + 32 + 32 + 32 + 32
    assert b[pos + 4 : pos + 8] == b"\xfe\xff\xff\xff"
    b[pos : pos + 32] = bytes(32)
    seg.write_bytes(bytes(b))
    assert len(b) == end
    with mmapkit.CommitLog(d, sync="never") as log:
        assert list(log) == [b"kept"]
        assert log.recovery["dropped_entries"] == 2


def test_verify_reports_an_unreadable_last_batch(tmp_path):
    # The core's VerifyReport.unreadable_tail: a read-only open leaves a
    # last batch that does not read back in place, and verify says so
    # (a torn write and damage after its sync look the same).
    d = tmp_path / "wal"
    with mmapkit.CommitLog(d, sync="never") as log:
        log.append([b"kept"])
        log.append([b"torn", b"too"])
        assert log.verify()["unreadable_tail"] is None
    seg = next(d.glob("*.seg"))
    b = bytearray(seg.read_bytes())
    pos = 32 + 32 + 32 + 32 + 32  # the second batch's commit record
    b[pos : pos + 32] = bytes(32)
    seg.write_bytes(bytes(b))
    with mmapkit.CommitLog(d, read_only=True) as log:
        r = log.verify()
    assert (r["segments"], r["entries"], r["bytes"]) == (1, 1, 4)
    tail = r["unreadable_tail"]
    assert tail is not None and tail["first_index"] == 2 and tail["bytes"] > 0, r
    assert set(tail) == {"first_index", "entries", "bytes"}
    # A writable open moves the tail to the quarantine: a clean end again.
    with mmapkit.CommitLog(d, sync="never") as log:
        assert log.verify()["unreadable_tail"] is None


@settings(max_examples=25, deadline=None)
@given(
    ops=st.lists(
        st.one_of(
            st.tuples(st.just("append"), st.lists(st.binary(max_size=200), max_size=5)),
            st.tuples(st.just("truncate"), st.integers(0, 60)),
            st.tuples(st.just("purge"), st.integers(0, 60)),
            st.tuples(st.just("reopen"), st.none()),
        ),
        max_size=25,
    )
)
def test_matches_a_list_model(tmp_path_factory, ops):
    d = tmp_path_factory.mktemp("logmodel") / "wal"
    log = mmapkit.CommitLog(d, segment_size=4096, sync="never")
    first, model = 1, []
    try:
        for op, arg in ops:
            if op == "append":
                assert log.append(arg) == first + len(model)
                model += arg
            elif op == "truncate":
                if arg + 1 < first:
                    with pytest.raises(ValueError):
                        log.truncate_after(arg)
                else:
                    log.truncate_after(arg)
                    del model[arg + 1 - first :]
            elif op == "purge":
                log.purge_before(arg)
                nf = log.first_index()
                assert first <= nf <= max(arg, first)
                del model[: nf - first]
                first = nf
            else:
                log.close()
                log = mmapkit.CommitLog(d, segment_size=4096, sync="never")
            assert log.first_index() == first and len(log) == len(model)
            assert list(log) == model
    finally:
        log.close()


def test_threads_group_commit_and_whole_batches(tmp_path):
    log = mmapkit.CommitLog(tmp_path / "wal", segment_size=1 << 16, sync="batch")
    stop = threading.Event()
    errors = []

    def reader():
        while not stop.is_set():
            n = log.last_index()
            if n % 5:
                errors.append(f"partial batch visible: last={n}")
            if n:
                es = log.read_entries(1, n + 1)
                for i, term, data in es:
                    if data != b"%d" % i or term != (i - 1) // 5:
                        errors.append(f"bad entry {i}")

    def writer(k):
        for _ in range(40):
            with lock:
                first = log.last_index() + 1
                # Appends are serialised here only to make the payload
                # predictable; the sync happens outside the lock.
                batch = [(((first - 1) // 5), b"%d" % (first + j)) for j in range(5)]
                log.append(batch)

    lock = threading.Lock()
    readers = [threading.Thread(target=reader) for _ in range(2)]
    for t in readers:
        t.start()
    writers = [threading.Thread(target=writer, args=(k,)) for k in range(4)]
    for t in writers:
        t.start()
    for t in writers:
        t.join()
    stop.set()
    for t in readers:
        t.join()
    assert not errors, errors[:3]
    assert len(log) == 4 * 40 * 5
    log.close()


def test_group_commit_shares_syncs(tmp_path):
    log = mmapkit.CommitLog(tmp_path / "wal", sync="batch")
    batches = 4 * 50

    def writer():
        for _ in range(50):
            log.append([b"x" * 64] * 4)

    ts = [threading.Thread(target=writer) for _ in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    assert len(log) == batches * 4
    # Concurrent appenders share syncs: never more syncs than batches.
    assert 0 < log.sync_count() <= batches
    log.close()


def test_full_filesystem(small_tmpfs):
    d = small_tmpfs / "wal"
    log = mmapkit.CommitLog(d, segment_size=128 << 10, sync="never")
    acked = 0
    with pytest.raises(mmapkit.DiskFullError) as ei:
        while True:
            log.append([bytes([acked % 256]) * 1000])
            acked += 1
    assert ei.value.errno == errno.ENOSPC
    assert acked > 100 and len(log) == acked
    assert log.read(1, acked + 1)[-1] == bytes([(acked - 1) % 256]) * 1000
    log.close()
    with mmapkit.CommitLog(d, segment_size=128 << 10, sync="never") as log:
        assert len(log) == acked
        assert log.verify()["entries"] == acked


CHILD = textwrap.dedent(
    """
    import sys, mmapkit
    log = mmapkit.CommitLog(sys.argv[1], segment_size=16384, sync="batch")
    i = log.last_index() + 1
    print("R", flush=True)
    while True:
        n = 1 + i % 4
        batch = [(i + k) .to_bytes(8, "little") * (1 + (i + k) % 9) for k in range(n)]
        assert log.append(batch) == i
        i += n
        print(i - 1, flush=True)
    """
)


def test_sigkill_while_appending_loses_nothing_acknowledged(tmp_path):
    """CI-sized: 30 kills here (the Rust crash matrix does 120, with
    truncations and purges)."""
    d = tmp_path / "wal"
    rng = random.Random(7)
    acked = 0
    for _ in range(30):
        p = subprocess.Popen(
            [sys.executable, "-c", CHILD, str(d)], stdout=subprocess.PIPE, text=True
        )
        assert p.stdout.readline().strip() == "R"
        # Killed within 30 ms of its first acknowledgement (timed from
        # start, a loaded machine may give it no time to append: issue 27).
        first = p.stdout.readline()
        time.sleep(rng.uniform(0.001, 0.03))
        p.send_signal(signal.SIGKILL)
        out = first + p.communicate()[0]
        for line in out.split():
            acked = max(acked, int(line))
        with mmapkit.CommitLog(d, segment_size=16384, sync="never") as log:
            last = log.last_index()
            assert last >= acked, f"acknowledged {acked} but only {last} survived"
            for i, data in enumerate(log, start=1):
                assert data == i.to_bytes(8, "little") * (1 + i % 9), f"entry {i}"
            acked = last
    assert acked >= 30  # at least one acknowledged append per kill


def test_cli_and_python_share_the_format(tmp_path):
    exe = Path(__file__).resolve().parents[2] / "target" / "release" / "mmapkit"
    if not exe.exists():
        pytest.skip("build the CLI first (make cli)")
    d = tmp_path / "wal"
    with mmapkit.CommitLog(d, sync="never") as log:
        log.append([b"from python"], term=7)
    subprocess.run([exe, "log", "append", d, "--term", "8"], input=b"from the cli\n", check=True)
    with mmapkit.CommitLog(d, sync="never") as log:
        assert log.read_entries(1, 3) == [(1, 7, b"from python"), (2, 8, b"from the cli")]


READER = textwrap.dedent(
    """
    import sys, mmapkit
    log = mmapkit.CommitLog(sys.argv[1], read_only=True)
    seen = 0
    for _ in range(300):
        log.refresh()
        n = log.last_index()
        assert n % 3 == 0, f"partial batch visible: {n}"
        for i, term, data in log.read_entries(max(1, n - 30), n + 1) if n else []:
            assert data == b"%d" % i and term == (i - 1) // 3, (i, term, data)
        seen = max(seen, n)
    print(seen)
    """
)


def test_reader_in_another_process_sees_whole_batches(tmp_path):
    d = tmp_path / "wal"
    log = mmapkit.CommitLog(d, segment_size=64 << 10, sync="never")
    log.append([(0, b"1"), (0, b"2"), (0, b"3")])
    p = subprocess.Popen(
        [sys.executable, "-c", READER, str(d)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    i = 4
    while p.poll() is None and i < 60_000:
        log.append([((i - 1) // 3, b"%d" % (i + k)) for k in range(3)])
        i += 3
    out, err = p.communicate()
    assert p.returncode == 0, err
    assert int(out) > 3  # it saw the log grow
    log.close()


def five_batches_entry_2_damaged(d: Path, sync: str) -> bytes:
    """A log of five one-entry batches written with `sync`, then a payload
    byte of entry 2 flipped (64 B per batch; batches 3..5 follow); the
    damaged segment's bytes."""
    with mmapkit.CommitLog(d, sync=sync) as log:
        for i in range(5):
            log.append([b"entry %d" % i])
    seg = next(d.glob("*.seg"))
    b = bytearray(seg.read_bytes())
    b[32 + 64 + 16 + 1] ^= 1
    seg.write_bytes(bytes(b))
    return bytes(b)


def test_damaged_tail_refuses_to_open_unless_repair(tmp_path):
    d = tmp_path / "wal"
    # Synced: later batches record entry 2 as durable, so its damage is
    # corruption (unsynced, it would be a torn tail).
    b = five_batches_entry_2_damaged(d, "batch")
    with pytest.raises(mmapkit.CorruptError, match="entry 2"):
        mmapkit.CommitLog(d, sync="never")
    with mmapkit.CommitLog(d, sync="never", repair=True) as log:
        assert list(log) == [b"entry 0"]
        assert log.recovery["dropped_entries"] == 4
        # What was cut is kept beside the log, byte for byte.
        q = Path(log.recovery["quarantine"])
        assert q.parent == d / "quarantine"
        cut = q.read_bytes()
        assert cut == bytes(b[32 + 64 : 32 + 64 + len(cut)]) and len(cut) >= 4 * 64
        assert log.append([b"again"]) == 2


def test_damage_in_unsynced_batches_is_a_torn_tail(tmp_path):
    # sync="never": no batch was ever known durable, so damage followed by
    # valid batches may be a power loss writing pages out of order.
    d = tmp_path / "wal"
    b = five_batches_entry_2_damaged(d, "never")
    with mmapkit.CommitLog(d, sync="never") as log:
        assert list(log) == [b"entry 0"]
        assert log.recovery["dropped_entries"] == 4
        cut = Path(log.recovery["quarantine"]).read_bytes()
        assert cut == bytes(b[32 + 64 : 32 + 64 + len(cut)]) and len(cut) >= 4 * 64


def test_batch_bigger_than_the_empty_segment_reopens(tmp_path):
    # Made a second segment starting at index 1: unopenable forever.
    d = tmp_path / "w"
    with mmapkit.CommitLog(d, segment_size=4096) as log:
        assert log.append([b"x" * 5000]) == 1
    with mmapkit.CommitLog(d) as log:
        assert list(log) == [b"x" * 5000]
        # The 4 KiB segment size is remembered (not the 64 MiB default).
        for _ in range(60):
            log.append([b"y" * 100])
        sizes = [s["size"] for s in log.stat()["segments"]]
        assert sizes[-1] == 4096, sizes
        log.verify()


def test_read_only_log_refuses_writes_like_a_read_only_file(tmp_path):
    d = tmp_path / "wal"
    with mmapkit.CommitLog(d, sync="never") as log:
        log.append([b"one"])
    ro = mmapkit.CommitLog(d, read_only=True)
    for write in (
        lambda: ro.append([b"x"]),
        lambda: ro.truncate_after(0),
        lambda: ro.purge_before(1),
    ):
        with pytest.raises(io.UnsupportedOperation) as ei:
            write()
        assert isinstance(ei.value, OSError) and isinstance(ei.value, ValueError)
        assert "read_only" in str(ei.value)
    assert list(ro) == [b"one"]


def test_second_writer_in_another_process_is_told_so(tmp_path):
    d = tmp_path / "wal"
    code = (
        "import sys, mmapkit\n"
        "try:\n"
        "    mmapkit.CommitLog(sys.argv[1])\n"
        "except ValueError as e:\n"
        "    print(e)\n"
    )
    with mmapkit.CommitLog(d, sync="never"):
        out = subprocess.run(
            [sys.executable, "-c", code, str(d)], capture_output=True, text=True, check=True
        ).stdout
    assert "another process" in out, out

"""mmapkit.replicate: serve a log, follow it, errors."""

from __future__ import annotations

import signal
import subprocess
import sys
import threading
import time

import pytest

import mmapkit
import mmapkit.replicate as rep


def _entries(path):
    log = mmapkit.CommitLog(path, read_only=True)
    return log.read_entries(log.first_index(), log.last_index() + 1)


def _wait_copied(copy, last: int, seconds: float) -> None:
    """Waits, at most ``seconds``, until the log at ``copy`` (which a follower
    may not have created yet) holds entry ``last``; the caller checks."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            if mmapkit.CommitLog(copy, read_only=True).last_index() == last:
                return
        except Exception:  # noqa: BLE001 (not created yet)
            pass
        time.sleep(0.02)


def test_serve_follow_resume_and_close(tmp_path):
    wal, copy = tmp_path / "wal", tmp_path / "copy"
    log = mmapkit.CommitLog(wal)
    log.append([(1, b"x" * (i % 300)) for i in range(2000)])
    with rep.serve(wal) as server:
        assert server.url.startswith("http://127.0.0.1:")
        report = rep.follow(server.url, copy)
        assert report["appended"] == 2000 and report["last_index"] == 2000
        log.append([(2, b"more"), (2, b"again")])
        report = rep.follow(server.url, copy, sync="never")
        assert report["appended"] == 2
        assert _entries(copy) == _entries(wal)
        url = server.url
    assert server.closed
    assert "closed" in repr(server) and url in repr(server)
    log.close()


def test_follow_without_once_runs_in_a_thread_with_the_gil_released(tmp_path):
    wal, copy = tmp_path / "wal", tmp_path / "copy"
    log = mmapkit.CommitLog(wal)
    log.append([(1, b"a")] * 10)
    with rep.serve(wal) as server:
        errors = []

        def run():
            try:
                rep.follow(server.url, copy, once=False)
            except BaseException as e:  # noqa: BLE001
                errors.append(e)

        t = threading.Thread(target=run, daemon=True)
        t.start()
        # The main thread keeps running Python while the follower works.
        log.append([(1, b"b")] * 5)
        _wait_copied(copy, 15, seconds=20)
        assert mmapkit.CommitLog(copy, read_only=True).last_index() == 15
        assert not errors


def test_errors(tmp_path):
    wal = tmp_path / "wal"
    log = mmapkit.CommitLog(wal, segment_size=4096)
    for _ in range(100):  # one segment per batch of three
        log.append([(1, b"y" * 1000)])
    with pytest.raises(ValueError, match="without a token"):
        rep.serve(wal, bind="0.0.0.0:0")
    with rep.serve(wal, token="t") as server:
        with pytest.raises(rep.ReplicationError, match="401"):
            rep.follow(server.url, tmp_path / "a")
        assert rep.follow(server.url, tmp_path / "a", token="t")["appended"] == 100
    log.purge_before(50)
    with (
        rep.serve(wal) as server,
        pytest.raises(rep.SnapshotRequiredError, match="snapshot required"),
    ):
        rep.follow(server.url, tmp_path / "b")
    with pytest.raises(ValueError, match="not a URL"):
        rep.follow("nonsense", tmp_path / "c")
    assert issubclass(rep.SnapshotRequiredError, rep.ReplicationError)
    assert issubclass(rep.ReplicationError, OSError)


def test_follow_forever_stops_on_ctrl_c(tmp_path):
    wal, copy = tmp_path / "wal", tmp_path / "copy"
    log = mmapkit.CommitLog(wal)
    log.append([(1, b"z")] * 100)
    with rep.serve(wal) as server:
        code = (
            "import mmapkit.replicate as rep, signal, sys\n"
            # SIGINT ignored when the tests run in the background: restore it
            "signal.signal(signal.SIGINT, signal.default_int_handler)\n"
            "try:\n"
            f"    rep.follow({server.url!r}, {str(copy)!r}, once=False)\n"
            "except KeyboardInterrupt:\n"
            "    print('interrupted', flush=True); sys.exit(0)\n"
        )
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        _wait_copied(copy, 100, seconds=30)
        p.send_signal(signal.SIGINT)
        out, _ = p.communicate(timeout=20)
        assert p.returncode == 0 and "interrupted" in out
    assert _entries(copy) == _entries(wal)


def test_another_log_is_refused_until_reset(tmp_path):
    """Issue 22: a follower knows which log it copies (DivergedError, nothing
    truncated); reset=True discards its entries and says how many."""
    a, b, copy = tmp_path / "a", tmp_path / "b", tmp_path / "copy"
    la = mmapkit.CommitLog(a)
    la.append([(1, b"a%d" % i) for i in range(50)])
    lb = mmapkit.CommitLog(b)
    lb.append([(2, b"b%d" % i) for i in range(20)])
    with rep.serve(a) as sa, rep.serve(b) as sb:
        rep.follow(sa.url, copy)
        with pytest.raises(rep.DivergedError, match="reset"):
            rep.follow(sb.url, copy)
        assert _entries(copy) == _entries(a)
        report = rep.follow(sb.url, copy, reset=True)
        assert (report["truncated"], report["appended"]) == (50, 20)
        assert _entries(copy) == _entries(b)
    la.close()
    lb.close()

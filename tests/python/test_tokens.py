"""mmapkit.TokenStore (variable-length records as values.npy + offsets.npy) and
its samplers: append and reopen, numpy reading the files directly, crash safety
(files cut anywhere, a killed writer, an append whose offsets never came), and
the window and packing samplers' determinism, coverage and resume."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from mmapkit import FormatError, TokenStore
from mmapkit.store import ArrayStore
from mmapkit.tokens import PackedSampler, WindowSampler, gather_windows


def record(i):
    """Record ``i`` of the test stores: ``1 + 7i mod 50`` copies of ``i``."""
    return np.full(1 + (7 * i) % 50, i % 60000, dtype=np.uint16)


def make(path, n, **kw):
    with TokenStore(path, "w", **kw) as ts:
        ts.extend(record(i) for i in range(n))
    return path


def whole_prefix(ts):
    """The store holds records 0..len-1 exactly, values and offsets agreeing."""
    assert ts.offsets[0] == 0 and ts.offsets[-1] == ts.num_tokens == len(ts.tokens)
    for i in range(len(ts)):
        assert np.array_equal(ts[i], record(i)), i


# -- the store -----------------------------------------------------------------


def test_append_reopen_and_views(tmp_path):
    p = tmp_path / "ts"
    ts = TokenStore(p, "w")
    assert len(ts) == 0 and ts.num_tokens == 0 and ts.dtype == np.uint16
    assert ts.append([1, 2, 3]) == 1
    assert ts.extend([[4], [], [5, 6]]) == 4
    assert ts[0].tolist() == [1, 2, 3] and ts[2].tolist() == [] and ts[-1].tolist() == [5, 6]
    assert ts.range(1, 4).tolist() == [4, 5, 6] and ts.lengths.tolist() == [3, 1, 0, 2]
    r = TokenStore(p)  # a reader, while the writer has it open
    view = r[0]
    assert len(r) == 4 and not view.flags.writeable
    ts.extend(record(i) for i in range(100))
    assert len(r) == 4 and r.refresh() == 104 and np.array_equal(r[103], record(99))
    assert view.tolist() == [1, 2, 3]  # views taken before stay valid
    with pytest.raises(BlockingIOError):
        TokenStore(p, "r+")  # one writer
    with pytest.raises(OSError, match="read-only"):
        r.append([1])
    with pytest.raises(IndexError):
        r[104]
    with pytest.raises(ValueError, match="1-D"):
        ts.append([[1, 2]])
    ts.close()
    r.close()
    a = TokenStore(p, "a")  # the store exists: its writer
    assert len(a) == 104 and a.append([7]) == 105
    a.close()
    fl = TokenStore(tmp_path / "f", "w", dtype=np.float32)
    fl.extend([np.linspace(0, 1, 5)])
    assert TokenStore(tmp_path / "f")[0].dtype == np.float32
    with pytest.raises(ValueError, match="integer or floating-point"):
        TokenStore(tmp_path / "c", "w", dtype=np.complex64)
    with pytest.raises(FileNotFoundError):
        TokenStore(tmp_path / "missing")


def test_numpy_reads_the_files_without_mmapkit(tmp_path):
    p = make(tmp_path / "ts", 300, dtype=np.uint16)
    offsets = np.load(p / "offsets.npy")
    values = np.load(p / "values.npy", mmap_mode="r")
    assert offsets.dtype == np.int64 and offsets.shape == (301,) and values.dtype == np.uint16
    for i in (0, 1, 150, 299):
        assert np.array_equal(values[offsets[i] : offsets[i + 1]], record(i))
    assert len(values) == offsets[-1]


def test_values_without_their_offsets_are_never_seen_and_a_writer_cuts_them(tmp_path):
    p = make(tmp_path / "ts", 20)
    # An append that wrote its values but died before its offsets.
    with ArrayStore.open(p / "values.npy", "r+") as v:
        v.extend(np.full(33, 9, np.uint16))
    r = TokenStore(p)
    assert len(r) == 20 and len(r.tokens) == r.offsets[-1]
    whole_prefix(r)
    w = TokenStore(p, "r+")
    assert len(w) == 20 and len(ArrayStore.open(p / "values.npy")) == r.num_tokens
    w.extend(record(i) for i in range(20, 25))
    w.close()
    whole_prefix(TokenStore(p))


@pytest.mark.parametrize("name", ["values.npy", "offsets.npy"])
def test_a_file_cut_anywhere_gives_whole_records_or_a_format_error(tmp_path, name):
    # Copied while the writer is open: past the published rows, both files
    # hold capacity, and values.npy an append whose offsets never came.
    src = tmp_path / "src"
    ts = TokenStore(src, "w")
    ts.extend(record(i) for i in range(200))
    ts._values.extend(np.full(40, 9, np.uint16))
    copies = {f: (src / f).read_bytes() for f in ("values.npy", "offsets.npy")}
    ts.close()
    with ArrayStore.open(src / name, "r") as a:
        published = a.data_offset + len(a) * a.dtype.itemsize
    size = len(copies[name])
    assert size > published + 1000  # capacity past the published rows
    outcomes = collections.Counter()
    for cut in sorted(
        {
            0,
            10,
            127,
            128,
            129,
            published // 2,
            published - 1,
            published,
            published + 1,
            published + 999,
            size - 1,
        }
    ):
        p = tmp_path / f"cut{cut}"
        p.mkdir()
        for f, data in copies.items():
            (p / f).write_bytes(data)
        with open(p / name, "r+b") as f:
            f.truncate(cut)
        for mode in ("r", "r+"):
            try:
                ts = TokenStore(p, mode)
            except FormatError as e:  # rows the header published are gone: damage, named
                assert name in str(e), e
                assert cut < published
                outcomes["format error"] += 1
                continue
            assert cut >= published and len(ts) == 200
            whole_prefix(ts)  # never a partial record, never zeros
            ts.close()
            outcomes["whole"] += 1
    assert outcomes["whole"] and outcomes["format error"]


def test_a_damaged_index_is_a_format_error_naming_the_file(tmp_path):
    def store_with(name, array):
        p = make(tmp_path / f"s{len(list(tmp_path.iterdir()))}", 10)
        np.save(p / name, array)
        return p

    good = np.load(make(tmp_path / "ref", 10) / "offsets.npy")
    for name, bad, why in [
        ("offsets.npy", good.astype(np.float64), "int64"),
        ("offsets.npy", good.reshape(-1, 1), "1-D"),
        ("offsets.npy", good[1:], "start with 0"),
        ("offsets.npy", np.array([0, 5, 3, 9], np.int64), "decrease"),
        ("values.npy", np.zeros((4, 2), np.uint16), "1-D"),
    ]:
        p = store_with(name, bad)
        for mode in ("r", "r+"):
            with pytest.raises(FormatError, match=why) as e:
                TokenStore(p, mode)
            assert name in str(e.value)


def test_offsets_past_the_values_give_the_records_the_values_hold(tmp_path):
    p = make(tmp_path / "ts", 30)
    offsets = np.load(p / "offsets.npy")
    np.save(p / "values.npy", np.load(p / "values.npy")[: offsets[20] + 3])  # records 20.. cut
    r = TokenStore(p)
    assert len(r) == 20
    whole_prefix(r)
    with TokenStore(p, "r+") as w:  # the writer cuts the index back, then appends
        assert len(w) == 20 and len(np.load(p / "offsets.npy")) == 21
        w.append(record(20))
    whole_prefix(TokenStore(p))


def test_a_killed_writer_leaves_whole_records(tmp_path):
    p = make(tmp_path / "ts", 1)
    child = (
        "import sys, numpy as np\n"
        "from mmapkit import TokenStore\n"
        "ts = TokenStore(sys.argv[1], 'r+')\n"
        "i = len(ts)\n"
        "while True:\n"
        "    ts.extend([np.full(1 + (7 * k) % 50, k, np.uint16) for k in range(i, i + 3)],"
        " sync=False)\n"
        "    i += 3\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-c", child, str(p)], env=env)
        r = TokenStore(p)
        before = len(r)
        while r.refresh() < before + 200 and proc.poll() is None:
            time.sleep(0.01)  # until the child has appended (no timing asserted)
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        r.close()
        for mode in ("r", "r+"):
            with TokenStore(p, mode) as ts:
                assert len(ts) > before
                whole_prefix(ts)


# -- samplers ------------------------------------------------------------------


def unique_store(path, lens, dtype=np.uint32):
    """Records of the given lengths whose values are all distinct (1, 2, ...)."""
    with TokenStore(path, "w", dtype=dtype) as ts:
        at = 1
        for n in lens:
            ts.append(np.arange(at, at + n))
            at += n
    return path


def flat(batches):
    return [(x.tolist(), y.tolist()) for x, y in batches]


def test_window_batches_are_nanogpt_windows_and_deterministic(tmp_path):
    p = unique_store(tmp_path / "ts", [100, 50, 300])  # 450 tokens, values 1..450
    s = WindowSampler(p, 16, 4)
    assert len(s) == 7  # 28 windows (449 // 16), 4 a batch
    got = list(s.batches())
    assert [x.shape for x, _ in got] == [(4, 16)] * 7 and got[0][0].dtype == np.int64
    for x, y in got:
        assert np.array_equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
        assert (np.diff(x, axis=1) == 1).all() and x.min() >= 1 and y.max() <= 450
    assert flat(got) == flat(WindowSampler(p, 16, 4).batches())  # default seed: fixed
    assert flat(s.batches()) != flat(got)  # the next epoch
    assert flat(WindowSampler(p, 16, 4, seed=1).batches()) != flat(got)
    assert len(WindowSampler(p, 16, 4, samples=10)) == 3
    assert len(list(WindowSampler(unique_store(tmp_path / "s", [5]), 16, 4).batches())) == 0


def packed_stream(ts, order, eos):
    out = []
    for d in order:
        out += ts[d].tolist() + ([eos] if eos is not None else [])
    return out


@pytest.mark.parametrize("eos", [None, 0])
def test_packed_windows_cut_the_records_stream(tmp_path, eos):
    p = unique_store(tmp_path / "ts", [30, 1, 0, 17, 64, 5, 40])
    ts = TokenStore(p)
    s = PackedSampler(p, 8, 3, eos=eos, shuffle=False)
    stream = packed_stream(ts, range(len(ts)), eos)
    n_win = (len(stream) - 1) // 8
    want = [stream[w * 8 : w * 8 + 9] for w in range(n_win)]
    got = [row for x, y in s.batches() for row in np.concatenate([x, y[:, -1:]], 1).tolist()]
    assert got == want
    # Shuffled: records in a seeded order, windows too; every token in one x.
    sh = PackedSampler(p, 8, 3, eos=eos)
    xs = [t for x, _ in sh.batches() for t in x.reshape(-1).tolist()]
    body = collections.Counter(t for t in xs if t != eos)
    assert max(body.values()) == 1 and len(xs) == n_win * 8
    assert len(ts.tokens) - len(body) < 9  # only the stream's tail is left out
    assert flat(PackedSampler(p, 8, 3, eos=eos).batches()) == flat(
        PackedSampler(p, 8, 3, eos=eos).batches()
    )


def test_gather_windows_reads_pieces_and_eos(tmp_path):
    tokens = np.arange(100, dtype=np.uint16)
    pieces = np.array([[0, 10, 3], [3, -1, 1], [4, 50, 1], [5, 0, 5]], dtype=np.int64)
    x, y = gather_windows(tokens, pieces, 4, eos=7)
    assert x.tolist() == [[10, 11, 12, 7], [0, 1, 2, 3]]
    assert y.tolist() == [[11, 12, 7, 50], [1, 2, 3, 4]]


def shards(make_sampler, world):
    return [make_sampler(rank=r, world_size=world) for r in range(world)]


@pytest.mark.parametrize("kind", ["windows", "packed"])
def test_ranks_share_one_epoch_with_equal_counts(tmp_path, kind):
    p = unique_store(tmp_path / "ts", [37 + (13 * i) % 90 for i in range(40)])
    cls = WindowSampler if kind == "windows" else PackedSampler
    whole = flat(cls(p, 16, 5).batches())
    ranks = [flat(s.batches()) for s in shards(lambda **kw: cls(p, 16, 5, **kw), 3)]
    g = len(whole)
    assert [len(r) for r in ranks] == [-(-g // 3)] * 3
    for r in range(3):  # rank r: global batches r, r + 3, ..., wrapped around
        assert ranks[r] == [whole[j % g] for j in range(r, 3 * len(ranks[0]), 3)]
    dropped = [
        len(list(s.batches())) for s in shards(lambda **kw: cls(p, 16, 5, drop_last=True, **kw), 3)
    ]
    assert dropped == [len(cls(p, 16, 5, drop_last=True)) // 3] * 3


@pytest.mark.parametrize("kind", ["windows", "packed"])
@pytest.mark.parametrize("world2", [3, 2, 1])
def test_resume_equals_an_uninterrupted_epoch(tmp_path, kind, world2):
    p = unique_store(tmp_path / "ts", [37 + (13 * i) % 90 for i in range(60)])
    cls = WindowSampler if kind == "windows" else PackedSampler

    def make_sampler(**kw):
        s = cls(p, 16, 4, **kw)
        s.set_epoch(2)
        return s

    full = flat(make_sampler().batches())  # world 1, epoch 2: the global order
    old = shards(make_sampler, 3)
    head = []
    for s in old:
        it = s.batches()
        head += [next(it) for _ in range(3)]
    state = json.loads(json.dumps(old[0].state_dict()))
    assert state["epoch"] == 2 and state["consumed"] == 9
    assert all(s.state_dict() == state for s in old)
    new = shards(lambda **kw: cls(p, 16, 4, **kw), world2)
    for s in new:
        list(s.batches())  # a probing epoch first: the loaded state decides
        s.load_state_dict(state)
    rest = [flat(s.batches()) for s in new]
    # The 9 global batches consumed, then the others, shared out anew (the
    # padding wraps around to the epoch's first batches).
    assert sorted(map(str, flat(head))) == sorted(map(str, full[:9]))
    g = len(full)
    per = -(-(g - 9) // world2)
    for r in range(world2):
        assert rest[r] == [full[(9 + j) % g] for j in range(r, per * world2, world2)]
    with pytest.raises(ValueError, match="seq_len"):
        cls(p, 8, 4).load_state_dict(state)

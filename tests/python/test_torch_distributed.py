"""mmapkit.torch under torch.distributed: rank sharding
from the process group, one default shuffle for every rank, equal batch counts
per rank (wrap-around padding or drop_last), mid-epoch resume through
state_dict/load_state_dict (same and another world size, workers too), and
block_size on the loaders; the same for the token loaders (random windows and
packed records). Multi-rank runs use 3 (then 2) gloo ranks on CPU."""

from __future__ import annotations

import collections
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from mmapkit import FeatureStore, TokenStore  # noqa: E402
from mmapkit.features import batch_order  # noqa: E402
from mmapkit.tokens import PackedSampler, WindowSampler  # noqa: E402
from mmapkit.torch import (  # noqa: E402
    FeatureBatchSampler,
    FeatureDataset,
    data_loader,
    device_loader,
    token_loader,
)

CHILD = Path(__file__).with_name("_dist_child.py")


def make_store(path, n, d=3):
    with FeatureStore(path, "w", dim=d, label_dtype=np.int64) as fs:
        fs.add(np.zeros((n, d), np.float32), np.arange(n))
    return path


def labels(loader):
    return [y.tolist() for _, y in loader]


def keys_rows(sampler):
    rows = np.arange(sampler.rows)
    return [rows[k].tolist() for k in sampler]


def sampler(p, bs=10, **kw):
    return FeatureBatchSampler(FeatureDataset(p), bs, **kw)


# -- multi-rank (gloo, CPU) ---------------------------------------------------


def _launch(tmp, store, world, mode):
    init = f"file://{tmp}/init-{mode}-{world}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    procs = [
        subprocess.Popen(
            [sys.executable, str(CHILD), str(store), str(tmp), init, str(world), str(r), mode],
            env=env,
        )
        for r in range(world)
    ]
    for p in procs:
        assert p.wait(timeout=120) == 0
    return [json.loads((tmp / f"rank{r}.json").read_text()) for r in range(world)]


def test_gloo_ranks_share_epochs_and_resume(tmp_path):
    n = 1000  # the child's batches of 64: 16 (the last of 40 rows), 6 a rank at world 3
    store = make_store(tmp_path / "fs", n)
    out = _launch(tmp_path, store, 3, "run")
    assert [o["rank_world"] for o in out] == [[r, 3] for r in range(3)]
    for epoch in ("epoch0", "epoch1"):
        per_rank = [o[epoch] for o in out]
        assert [len(b) for b in per_rank] == [6, 6, 6]  # equal counts: no DDP hang
        seen = collections.Counter(r for b in per_rank for batch in b for r in batch)
        assert set(seen) == set(range(n))  # every row, in one shuffle for all ranks
        # Repeats: only the 2 padding batches (wrapped around to the epoch's first).
        pad = [row for batch in per_rank[1][-1:] + per_rank[2][-1:] for row in batch]
        assert sum(seen.values()) - n == len(pad) and all(seen[r] == 2 for r in pad)
    assert out[0]["epoch0"] != out[0]["epoch1"]
    # Stopped after 2 batches a rank, resumed in fresh loaders: the same batches.
    for o in out:
        assert o["head"] == o["epoch1"][:2]
        assert o["rest"] == o["epoch1"][2:]
    state = out[0]["state"]
    assert state["epoch"] == 1 and state["consumed"] == 6
    assert all(o["state"] == state for o in out)  # one state for every rank
    # Resumed at world size 2: the epoch's other 10 global batches, 5 a rank.
    (tmp_path / "state.json").write_text(json.dumps(state))
    two = _launch(tmp_path, store, 2, "resume")
    assert [len(o["rest"]) for o in two] == [5, 5]
    head = [row for o in out for batch in o["head"] for row in batch]
    rest = [row for o in two for batch in o["rest"] for row in batch]
    assert sorted(head + rest) == list(range(n))  # no row lost or repeated (no padding)


# -- one process, a test per gap ----------------------------------------------


def test_gap1_rank_sharding(tmp_path):
    p = make_store(tmp_path / "fs", 95)  # 10 batches, the last of 5 rows
    for shuffle in (False, True):
        whole = keys_rows(sampler(p, shuffle=shuffle))
        shards = [sampler(p, shuffle=shuffle, rank=r, world_size=3) for r in range(3)]
        got = [keys_rows(s) for s in shards]
        for r in range(3):
            assert got[r] == [whole[j % 10] for j in range(r, 12, 3)]
        loaders = [data_loader(p, 10, shuffle=shuffle, rank=r, world_size=3) for r in range(3)]
        assert [labels(dl) for dl in loaders] == got
        dev = [device_loader(p, 10, shuffle, device="cpu", rank=r, world_size=3) for r in range(3)]
        assert [labels(dl) for dl in dev] == got
    assert sampler(p).rank == 0 and sampler(p).world_size == 1  # no process group
    with pytest.raises(ValueError, match="rank"):
        sampler(p, rank=3, world_size=3)


def test_gap2_one_default_seed(tmp_path):
    p = make_store(tmp_path / "fs", 500)
    a, b = keys_rows(sampler(p, shuffle=True)), keys_rows(sampler(p, shuffle=True))
    assert a == b == keys_rows(sampler(p, shuffle=True, seed=0))
    assert labels(data_loader(p, 10, shuffle=True)) == a
    assert labels(device_loader(p, 10, shuffle=True, device="cpu")) == a
    assert a != keys_rows(sampler(p, shuffle=True, seed=1))


@pytest.mark.parametrize("drop_last", [False, True])
def test_gap3_equal_batch_counts(tmp_path, drop_last):
    p = make_store(tmp_path / "fs", 395)  # 40 batches (39 whole)
    counts = [
        len(keys_rows(sampler(p, rank=r, world_size=3, drop_last=drop_last))) for r in range(3)
    ]
    want = 13 if drop_last else 14
    assert counts == [want] * 3
    assert [len(sampler(p, rank=r, world_size=3, drop_last=drop_last)) for r in range(3)] == counts
    if drop_last:  # 39 whole batches, 13 a rank: each row once at most, none short
        rows = [
            r
            for s in range(3)
            for b in keys_rows(sampler(p, rank=s, world_size=3, drop_last=True))
            for r in b
        ]
        assert sorted(rows) == list(range(390))


def test_gap4_resume_mid_epoch(tmp_path):
    p = make_store(tmp_path / "fs", 1000)
    for kw in ({"shuffle": True}, {"shuffle": False}, {"shuffle": True, "block_size": 1}):
        ref = data_loader(p, 64, **kw)
        ref.set_epoch(3)
        want = labels(ref)
        dl = data_loader(p, 64, **kw)
        dl.set_epoch(3)
        it = iter(dl)
        got = [next(it)[1].tolist() for _ in range(5)]
        state = dl.state_dict()
        assert all(isinstance(v, int) for v in state.values())
        assert state["epoch"] == 3 and state["consumed"] == 5
        fresh = data_loader(p, 64, **kw)
        list(fresh.sampler)  # a probing iteration (gap 4's trap): the state decides
        fresh.load_state_dict(json.loads(json.dumps(state)))
        assert got + labels(fresh) == want
        # The loader's next epoch is the one after: 4, from its start.
        assert fresh.state_dict()["epoch"] == 4 and fresh.state_dict()["consumed"] == 0
        nxt = data_loader(p, 64, **kw)
        nxt.set_epoch(4)
        assert labels(fresh) == labels(nxt)


def test_gap4_resume_with_workers_and_device_loader(tmp_path):
    p = make_store(tmp_path / "fs", 1000)
    want = labels(data_loader(p, 50, shuffle=True))
    dl = data_loader(p, 50, shuffle=True, num_workers=2)
    it = iter(dl)
    got = [next(it)[1].tolist() for _ in range(7)]  # the workers took keys ahead
    state = dl.state_dict()
    assert state["consumed"] == 7 and dl.sampler.state_dict()["consumed"] > 7
    del it
    fresh = data_loader(p, 50, shuffle=True, num_workers=2)
    fresh.load_state_dict(state)
    assert got + labels(fresh) == want
    dev = device_loader(p, 50, shuffle=True, device="cpu", prefetch=3)
    it2 = iter(dev)
    got = [next(it2)[1].tolist() for _ in range(4)]
    state = dev.state_dict()
    assert state["consumed"] == 4
    it2.close()
    dev2 = device_loader(p, 50, shuffle=True, device="cpu")
    dev2.load_state_dict(state)
    assert got + labels(dev2) == want


@pytest.mark.parametrize("drop_last", [False, True])
def test_gap4_resume_at_another_world_size(tmp_path, drop_last):
    p = make_store(tmp_path / "fs", 1000)  # 100 global batches
    old = [sampler(p, shuffle=True, rank=r, world_size=3, drop_last=drop_last) for r in range(3)]
    head = []
    for s in old:
        it = iter(s)
        head += [np.arange(1000)[next(it)].tolist() for _ in range(7)]
    state = old[0].state_dict()
    assert state["consumed"] == 21 and all(s.state_dict() == state for s in old)
    new = [sampler(p, shuffle=True, rank=r, world_size=2, drop_last=drop_last) for r in range(2)]
    for s in new:
        s.load_state_dict(state)
    rest = [keys_rows(s) for s in new]
    assert len(rest[0]) == len(rest[1]) == (39 if drop_last else 40)
    seen = sorted(r for b in head for r in b) + sorted(r for s in rest for b in s for r in b)
    counts = collections.Counter(seen)
    if drop_last:  # 79 global batches left, 78 taken: one batch of rows not seen
        assert len(counts) == 990 and max(counts.values()) == 1
    else:  # every row; the one padding batch repeated
        assert set(counts) == set(range(1000)) and sum(counts.values()) == 1010


def test_gap5_block_size_on_the_loaders(tmp_path):
    p = make_store(tmp_path / "fs", 1000)
    seed = np.random.SeedSequence(0, spawn_key=(0,))
    order = batch_order(1000, 100, seed, block_size=1).view(np.int64)
    want = [order[s : s + 100].tolist() for s in range(0, 1000, 100)]
    assert labels(data_loader(p, 100, shuffle=True, block_size=1)) == want
    assert labels(device_loader(p, 100, shuffle=True, device="cpu", block_size=1)) == want
    assert labels(data_loader(p, 100, shuffle=True, block_size=1000)) == [
        list(range(s, s + 100)) for s in range(0, 1000, 100)
    ]
    with pytest.raises(ValueError, match="block_size"):
        data_loader(p, 100, shuffle=True, block_size=0)


def test_gap4_state_edges(tmp_path):
    empty = data_loader(make_store(tmp_path / "e", 0), 8, shuffle=True)
    assert empty.state_dict()["epoch"] == 0 and labels(empty) == []
    assert empty.state_dict()["epoch"] == 1
    p = make_store(tmp_path / "fs", 100)
    dl = data_loader(p, 10, shuffle=True)
    it = iter(dl)
    next(it)
    it.close()  # abandoned after one batch of epoch 0
    assert dl.state_dict()["consumed"] == 1
    it = iter(dl)  # epoch 1 started, nothing delivered yet
    assert dl.state_dict()["epoch"] == 0  # (the generator runs at the first next)
    next(it)
    assert (dl.state_dict()["epoch"], dl.state_dict()["consumed"]) == (1, 1)


# -- token data (mmapkit.tokens) under gloo and through token_loader -----------


def make_token_store(path, records=40):
    """Records of 5..94 tokens whose values are all distinct (1, 2, ...)."""
    with TokenStore(path, "w", dtype=np.uint32) as ts:
        at = 1
        for i in range(records):
            n = 5 + (37 * i) % 90
            ts.append(np.arange(at, at + n))
            at += n
    return path


def token_batches(sampler):
    return [x.tolist() for x, _ in sampler.batches()]


def test_gloo_ranks_share_token_epochs_and_resume(tmp_path):
    store = make_token_store(tmp_path / "ts")
    T, TB, world = 16, 4, 3  # as _dist_child.py
    out = _launch(tmp_path, store, world, "tokens")
    states = {}
    for kind, packed in (("windows", False), ("packed", True)):
        assert [o[f"{kind}_rank_world"] for o in out] == [[r, world] for r in range(world)]

        def whole(epoch, packed=packed):
            s = PackedSampler(store, T, TB, eos=0) if packed else WindowSampler(store, T, TB)
            s.set_epoch(epoch)
            return token_batches(s)

        want = whole(0)  # one process, the default seed: the epoch's global batches
        g, per = len(want), -(-len(want) // world)
        assert g > 30
        for r, o in enumerate(out):
            got = o[f"{kind}_epoch0"]
            assert len(got) == per  # equal counts on every rank
            assert got == [want[j % g] for j in range(r, per * world, world)]
        if packed:  # every token of the packed stream in exactly one x, padding aside
            pad = per * world - g  # the last batches of the last `pad` ranks
            batches = [
                b
                for r, o in enumerate(out)
                for b in o[f"{kind}_epoch0"][: per - 1 if r >= world - pad else per]
            ]
            seen = collections.Counter(t for b in batches for row in b for t in row if t != 0)
            assert max(seen.values()) == 1
            assert len(TokenStore(store).tokens) - len(seen) <= T  # the stream's tail only
        # Stopped after 2 batches a rank, resumed in fresh loaders: the same batches.
        for o in out:
            assert o[f"{kind}_head"] + o[f"{kind}_rest"] == o[f"{kind}_epoch1"]
        state = states[kind] = out[0][f"{kind}_state"]
        assert state["epoch"] == 1 and state["consumed"] == 2 * world
        assert all(o[f"{kind}_state"] == state for o in out)
    # Resumed at world size 2: the epoch's other global batches, shared anew.
    (tmp_path / "state.json").write_text(json.dumps(states))
    two = _launch(tmp_path, store, 2, "tokens-resume")
    for kind, packed in (("windows", False), ("packed", True)):
        s = PackedSampler(store, T, TB, eos=0) if packed else WindowSampler(store, T, TB)
        s.set_epoch(1)
        full = token_batches(s)
        head = sorted(map(str, (b for o in out for b in o[f"{kind}_head"])))
        assert head == sorted(map(str, full[: 2 * world]))
        rest = [o[f"{kind}_rest"] for o in two]
        g, left = len(full), len(full) - 2 * world
        per = -(-left // 2)
        for r in range(2):
            assert rest[r] == [full[(2 * world + j) % g] for j in range(r, per * 2, 2)]


def test_token_loader_tensors_workers_and_resume(tmp_path):
    store = make_token_store(tmp_path / "ts")
    for packed in (False, True):
        kw = {"packed": packed, "eos": 0 if packed else None}
        s = PackedSampler(store, 16, 4, eos=0) if packed else WindowSampler(store, 16, 4)
        want = token_batches(s)
        dl = token_loader(store, 16, 4, **kw)
        got = list(dl)
        assert [x.tolist() for x, _ in got] == want
        x, y = got[0]
        assert x.dtype == y.dtype == torch.int64 and x.shape == (4, 16)
        assert torch.equal(x[:, 1:], y[:, :-1])
        assert y.data_ptr() == x.data_ptr() + 8  # views of one buffer, one token apart
        dl = token_loader(store, 16, 4, num_workers=2, **kw)
        it = iter(dl)
        head = [next(it)[0].tolist() for _ in range(5)]  # the workers took keys ahead
        state = dl.state_dict()
        assert state["consumed"] == 5
        del it
        fresh = token_loader(store, 16, 4, num_workers=2, **kw)
        fresh.load_state_dict(state)
        assert head + [x.tolist() for x, _ in fresh] == want
        assert fresh.state_dict()["epoch"] == 1 and fresh.state_dict()["consumed"] == 0
    with pytest.raises(ValueError, match="packed"):
        token_loader(store, 16, 4, eos=0)

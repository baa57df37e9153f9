"""The `features` suite's loader task compares against the strongest simple peers
(issue 24, defect 9): a batch-aware `np.memmap` Dataset and in-RAM tensors with
`torch.randperm` gathers, sequential and shuffled. The per-row Dataset may only appear
as a row labelled as an extra, never as the baseline, so the strawman cannot come back
silently."""

import json

import numpy as np
import pytest

from bench.suites import features as fsuite


def loader_contenders():
    return {c.name: c for c in fsuite.CONTENDERS.contenders() if "loader" in c.impls}


def test_loader_peers_include_the_batch_aware_memmap_and_in_ram_randperm():
    names = set(loader_contenders())
    for want in (
        fsuite.MEMMAP_SEQ,
        fsuite.MEMMAP_SHUF,
        fsuite.RAM_SEQ,
        fsuite.RAM_SHUF,
        fsuite.MK_SEQ,
        fsuite.MK_SHUF,
    ):
        assert want in names, (want, sorted(names))
    notes = {n: c.note for n, c in loader_contenders().items()}
    assert "BatchSampler" in notes[fsuite.MEMMAP_SHUF]
    assert "randperm" in notes[fsuite.RAM_SHUF]
    # Every peer's ratio to mmapkit is reported, in both orders.
    pairs = set(fsuite.LOADER_PEERS)
    for peer, mk in [
        (fsuite.MEMMAP_SEQ, fsuite.MK_SEQ),
        (fsuite.RAM_SEQ, fsuite.MK_SEQ),
        (fsuite.MEMMAP_SHUF, fsuite.MK_SHUF),
        (fsuite.RAM_SHUF, fsuite.MK_SHUF),
    ]:
        assert (peer, mk) in pairs


def test_the_per_row_dataset_is_only_an_extra_row():
    task = next(t for t in fsuite.FeaturesSuite.tasks if t.name == "loader")
    assert task.baseline == task.reference == fsuite.MEMMAP_SEQ
    per_row = [n for n, c in loader_contenders().items() if "MemmapRows" in c.note]
    assert per_row == [fsuite.PER_ROW]
    assert "extra" in fsuite.PER_ROW and "not a peer" in fsuite.PER_ROW


def test_every_loader_contender_reads_the_same_rows(tmp_path):
    pytest.importorskip("torch")
    import mmapkit

    rows, dim = 1000, 8
    rng = np.random.default_rng(0)
    with mmapkit.FeatureStore(tmp_path / "store", "w", dim=dim) as fs:
        fs.add(rng.standard_normal((rows + 24, dim)), rng.integers(0, 2, rows + 24))
    (tmp_path / "ok.json").write_text(
        json.dumps({"params": {"rows": rows + 24, "dim": dim, "loader_rows": rows}})
    )
    want = None
    try:
        for name, c in loader_contenders().items():
            if ", 2 workers" in name:
                continue  # the same Datasets; forking workers here only costs time
            m = c.impls["loader"](tmp_path)
            assert m.metrics["rows_per_s"] > 0 and m.metrics["gb_per_s"] > 0
            want = want or m.value
            assert m.value == want, name
            assert m.value[0] == rows
    finally:
        fsuite._drop_loaders(None)


def test_gpu_part_runs_its_code_on_the_cpu(tmp_path, monkeypatch):
    # The gpu part runs once on a rented GPU host: its code is dry-run here on the CPU
    # (device "cpu", CUDA calls stubbed) so that a typo cannot cost that run.
    torch = pytest.importorskip("torch")
    import mmapkit

    rows, dim = 3000, 8
    rng = np.random.default_rng(1)
    X = rng.standard_normal((rows, dim)).astype(np.float32)
    with mmapkit.FeatureStore(tmp_path / "store", "w", dim=dim) as fs:
        fs.add(X, (X @ fsuite._true_weights(dim) > 0).astype(np.float32))
    params = {"rows": rows, "dim": dim, "loader_rows": 0, "batch": 512}
    (tmp_path / "ok.json").write_text(json.dumps({"params": params}))
    monkeypatch.setattr(fsuite, "GPU_DEVICE", "cpu")
    monkeypatch.setattr(fsuite, "_has_cuda", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.Tensor, "pin_memory", lambda self, *a: self)
    monkeypatch.setattr(torch.utils.data.DataLoader, "__init__", _no_pin(torch))
    gpu = {c.name: c for c in fsuite.CONTENDERS.contenders() if "gpu" in c.impls}
    assert len(gpu) == 11
    try:
        for name, c in gpu.items():
            m = c.impls["gpu"](tmp_path)
            assert m.value == (rows, True), name
            assert m.metrics["gb_per_s"] > 0, name
    finally:
        fsuite._drop_gpu(None)
    task = next(t for t in fsuite.FeaturesSuite.tasks if t.name == "gpu")
    assert task.reference in gpu and task.sizes == fsuite.GPU_SIZES
    assert [s.label for s in fsuite.FeaturesSuite().sizes(quick=False)][-1] == "gpu"


def _no_pin(torch):
    init = torch.utils.data.DataLoader.__init__

    def unpinned(self, *a, **kw):
        kw["pin_memory"] = False  # no CUDA to pin for
        init(self, *a, **kw)

    return unpinned

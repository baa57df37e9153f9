"""One gloo rank of test_torch_distributed (run as a script): loads epochs with
rank and world size from the process group, stops one mid-epoch and resumes
(here, in a fresh loader, or from a saved state at another world size), and
writes each batch's rows (labels) to ``OUT/rank{r}.json``. Modes ``run`` and
``resume``: a FeatureStore's ``data_loader``; ``tokens`` and ``tokens-resume``:
a TokenStore's ``token_loader``, random windows and packed records (each batch
written as its ``x`` tokens)."""

from __future__ import annotations

import json
import os
import sys

import torch.distributed as dist

from mmapkit.torch import data_loader, token_loader

STORE, OUT, INIT, WORLD, RANK, MODE = sys.argv[1:7]
BS, K = 64, 2  # batch size; batches per rank before the stop
T, TB, EOS = 16, 4, 0  # token loaders: sequence length, batch size, separator


def rows(loader):
    return [y.tolist() for _, y in loader]


def tokens(loader):
    return [x.tolist() for x, _ in loader]


def token_loaders(packed):
    """A fresh loader of each kind: default seed, rank and world."""
    return token_loader(STORE, T, TB, packed=packed, eos=EOS if packed else None)


def run_tokens(out):
    for kind, packed in (("windows", False), ("packed", True)):
        loader = token_loaders(packed)
        out[f"{kind}_rank_world"] = [loader.sampler.rank, loader.sampler.world_size]
        out[f"{kind}_epoch0"] = tokens(loader)
        loader = token_loaders(packed)
        loader.set_epoch(1)
        it = iter(loader)
        out[f"{kind}_head"] = [next(it)[0].tolist() for _ in range(K)]
        state = out[f"{kind}_state"] = loader.state_dict()
        fresh = token_loaders(packed)
        fresh.load_state_dict(state)
        out[f"{kind}_rest"] = tokens(fresh)
        whole = token_loaders(packed)
        whole.set_epoch(1)
        out[f"{kind}_epoch1"] = tokens(whole)


def resume_tokens(out):
    with open(os.path.join(OUT, "state.json")) as f:
        states = json.load(f)
    for kind, packed in (("windows", False), ("packed", True)):
        loader = token_loaders(packed)
        loader.load_state_dict(states[kind])
        out[f"{kind}_rest"] = tokens(loader)


def main() -> None:
    dist.init_process_group("gloo", init_method=INIT, world_size=int(WORLD), rank=int(RANK))
    out: dict[str, object] = {}
    if MODE == "run":
        loader = data_loader(STORE, BS, shuffle=True)  # default seed, rank, world
        out["rank_world"] = [loader.sampler.rank, loader.sampler.world_size]
        out["epoch0"] = rows(loader)  # iter() without set_epoch: epoch 0, then 1
        out["epoch1"] = rows(loader)
        # Stopped mid-epoch 1 and resumed in a fresh loader at this world size.
        loader = data_loader(STORE, BS, shuffle=True)
        loader.set_epoch(1)
        it = iter(loader)
        out["head"] = [next(it)[1].tolist() for _ in range(K)]
        state = loader.state_dict()
        out["state"] = state
        fresh = data_loader(STORE, BS, shuffle=True)
        list(fresh)  # a probing epoch first: no effect on the resume
        fresh.load_state_dict(state)
        fresh.set_epoch(state["epoch"])  # as a training loop would
        out["rest"] = rows(fresh)
    elif MODE == "tokens":
        run_tokens(out)
    elif MODE == "tokens-resume":
        resume_tokens(out)
    else:  # resume a state saved at another world size
        with open(os.path.join(OUT, "state.json")) as f:
            state = json.load(f)
        loader = data_loader(STORE, BS, shuffle=True)
        loader.load_state_dict(state)
        out["rest"] = rows(loader)
    dist.barrier()
    with open(os.path.join(OUT, f"rank{RANK}.json"), "w") as f:
        json.dump(out, f)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

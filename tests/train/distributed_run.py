"""Tiny Medusa and EAGLE runs for test_distributed.py, the same code on one process or several.

Under torchrun, every rank trains its slice of each global batch and rank 0 saves what came out:

    python -m torch.distributed.run --standalone --nproc_per_node 2 distributed_run.py OUT_DIR

Imported, :func:`run` with one process's :class:`World` is the reference. The data are a tiny
random Llama's greedy replies, computed the same way in every process (one thread).
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

from specbook.models import LlamaConfig, LlamaModel
from specbook.train.distributed import Checkpoints, World, launched
from specbook.train.eagle import train_eagle
from specbook.train.features import features_from_ids, validation_indices
from specbook.train.medusa import train_medusa

MEDUSA = dict(num_heads=2, epochs=8, batch_size=33, lr=3e-2)  # 33 positions: slices of 16 and 17
EAGLE = dict(epochs=6, batch_sequences=4, lr=3e-3, unroll_steps=2, w_cls=1.0)  # 9 sequences: 4, 4, then 1
CHECKPOINT_EVERY = 5


def tiny_setup():
    """(model, features, fit, validation, draft vocabulary): 12 replies of a 2-layer Llama, V = 12."""
    cfg = LlamaConfig(vocab_size=12, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=64,
                      max_position_embeddings=256, rope_theta=500.0)
    model = LlamaModel(cfg).init_weights(std=0.5, generator=torch.Generator().manual_seed(0)).requires_grad_(False)
    g = torch.Generator().manual_seed(30)
    prompts = [torch.randint(0, 12, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g).tolist()
               for _ in range(12)]
    fs = features_from_ids(model, prompts, max_new_tokens=24, eos_id=0, batch_size=6)
    fit, val = validation_indices(fs, every=4)
    vocab = torch.randperm(12, generator=torch.Generator().manual_seed(1))[:9]
    return model, fs, fit, val, vocab


def run(world: World, checkpoint_dir: Path | None = None, *, resume: bool = False,
        max_steps: int | None = None) -> dict:
    """Train both heads; {name: {"state": weights, "loss": the log's loss curve, "log": the log}}."""
    model, fs, fit, val, vocab = tiny_setup()
    out = {}
    for name, train, kwargs in (("medusa", train_medusa, MEDUSA), ("eagle", train_eagle, {**EAGLE, "val_seqs": val})):
        ckpt = None
        if checkpoint_dir is not None:
            ckpt = Checkpoints(Path(checkpoint_dir) / f"{name}.pt", every=CHECKPOINT_EVERY, resume=resume)
        head, log = train(fs, model, fit, vocab=vocab, progress=False, world=world, checkpoints=ckpt,
                          max_steps=max_steps, **kwargs)
        out[name] = {"state": {k: v.clone() for k, v in head.state_dict().items()},
                     "loss": [entry[1] for entry in log["loss"]], "log": log}
    return out


if __name__ == "__main__":
    torch.set_num_threads(1)
    target = Path(sys.argv[1])
    with launched("cpu") as world:
        result = run(world, target)
        if world.main:
            result["world_size"] = world.world_size
            torch.save(result, target / "result.pt")

"""What the Medusa and EAGLE trainers' command lines share: arguments, data, metadata, output.

Both heads learn from the same self-distilled data (:func:`specbook.train.features.heads_training_data`)
of SmolLM2-135M, frozen, in float32, and record the same facts about the run beside their weights:
the command that rewrites them, the prompts of every split, and the run's size and time.

The same command runs on one process or under torchrun (:mod:`specbook.train.distributed`):
every rank loads the data (rank 0 first, so that only it generates and caches missing replies),
trains its slice of each batch, and rank 0 alone evaluates, prints and writes.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cliargs import device, existing_file, nonnegative_int, positive_float, positive_int, threads, writable_file
from ..drafters.medusa import WEIGHTS_DIR, save_head
from . import recorded_command
from .distributed import Checkpoints, World
from .features import FeatureSet, draft_vocabulary, validation_indices

SHARED_ARGUMENTS = {
    "--train-prompts": dict(type=positive_int, default=240, help="prompts of the training mix"),
    "--heldout-prompts": dict(type=positive_int, default=24, help="held-out prompts (never trained on)"),
    "--max-new-tokens": dict(type=positive_int, default=160, help="length of each target reply"),
    "--draft-vocab": dict(type=positive_int, default=8192, help="tokens the head can propose"),
    "--epochs": dict(type=positive_float, default=3.0, help="passes over the training positions"),
    "--lr": dict(type=positive_float, default=2e-3, help="peak learning rate"),
    "--time-limit": dict(type=positive_float, default=None, help="stop training after this many seconds"),
    "--max-steps": dict(type=positive_int, default=None,
                        help="stop training after this many steps (the schedule still spans --epochs)"),
}
RUN_ARGUMENTS = {  # where and how a run goes; none of them changes the weights it writes
    "--device": dict(type=device, default=None,
                     help="cpu or cuda (default: cuda where available; under torchrun each process takes its "
                          "local GPU)"),
    "--checkpoint": dict(type=writable_file, default=None, help="checkpoint file (model, optimizer, schedule, "
                         "step, random states); also written when --time-limit or --max-steps stops a run"),
    "--checkpoint-every": dict(type=nonnegative_int, default=0, help="save the checkpoint every N steps"),
    "--resume": dict(action="store_true", help="continue from --checkpoint"),
}


def heads_parser(prog: str, description: str, arguments: list, *, shipped: str,
                 default_name: str) -> argparse.ArgumentParser:
    """The parser of a head trainer: ``arguments`` in order, each a name of :data:`SHARED_ARGUMENTS`
    or a (name, keywords of ``add_argument``) pair, then --prompt-set, --threads, :data:`RUN_ARGUMENTS` and --out
    (``shipped``: what the shipped files hold; ``default_name``: their name in the weights folder)."""
    ap = argparse.ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for arg in arguments:
        name, keywords = (arg, SHARED_ARGUMENTS[arg]) if isinstance(arg, str) else arg
        ap.add_argument(name, **keywords)
    ap.add_argument("--prompt-set", type=existing_file, default=None,
                    help="a JSON-lines prompt set (id, category, prompt token ids) instead of the mix: the exact "
                         f"data of the shipped {shipped} is the one its json names (training.prompt_set)")
    ap.add_argument("--threads", type=threads, default=None, help="torch threads (1 is best on a shared CPU)")
    for name, keywords in RUN_ARGUMENTS.items():
        ap.add_argument(name, **keywords)
    ap.add_argument("--out", type=writable_file, default=str(WEIGHTS_DIR / default_name),
                    help="path prefix of the written <out>.safetensors and <out>.json")
    return ap


def parse_heads_args(ap: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """``ap.parse_args(argv)``, refusing --checkpoint-every or --resume without --checkpoint."""
    args = ap.parse_args(argv)
    if (args.checkpoint_every or args.resume) and not args.checkpoint:
        ap.error("--checkpoint-every and --resume need --checkpoint PATH")
    return args


def checkpoints_from(args: argparse.Namespace) -> Checkpoints | None:
    """The run's checkpoints, as its arguments ask (None without --checkpoint)."""
    if not args.checkpoint:
        return None
    return Checkpoints(args.checkpoint, every=args.checkpoint_every, resume=args.resume)


@dataclass(frozen=True)
class HeadsData:
    """The frozen target and its self-distilled data: ``fs`` split into ``fit`` and ``val``
    sequences, ``held`` the held-out prompts, ``vocab`` the draft vocabulary chosen on ``fit``."""

    model: object
    fs: FeatureSet
    held: FeatureSet
    fit: list[int]
    val: list[int]
    vocab: torch.Tensor
    started: float  # time.perf_counter() before the model was loaded


def load_heads_data(args: argparse.Namespace, world: World | None = None) -> HeadsData:
    """Load SmolLM2-135M in float32 (training and recorded figures), frozen, and the data ``args``
    name; the replies are generated (and cached) on the CPU by rank 0 before the other ranks read
    them, then the model moves to ``world.device``."""
    from ..models.smollm2 import load_smollm2
    from .features import heads_training_data

    world = world or World()
    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model, tok = load_smollm2(dtype=torch.float32)
    model.requires_grad_(False)
    with world.main_first():
        held, fs = heads_training_data(model, tok, prompt_set=args.prompt_set, train_prompts=args.train_prompts,
                                       heldout_prompts=args.heldout_prompts, max_new_tokens=args.max_new_tokens)
    fit, val = validation_indices(fs)
    vocab = draft_vocabulary(fs.select(fit), args.draft_vocab, always=(tok.eos_token_id,))
    return HeadsData(model.to(world.device), fs, held, fit, val, vocab, started)


def training_record(module: str, argv: list[str] | None, args: argparse.Namespace, data: HeadsData, log: dict,
                    size: str, **figures) -> dict:
    """The "training" entry of the weights' metadata: the command, the arguments, the prompts of
    each split, the run's ``size`` (a key of ``log``), steps and times, then ``figures``."""
    fs = data.fs
    kept = {k: v for k, v in vars(args).items() if "--" + k.replace("_", "-") not in RUN_ARGUMENTS}
    return {"command": recorded_command(module, argv),
            **{**kept, "out": Path(args.out).name},
            "device": str(data.model.lm_head.weight.device),
            "train_prompt_ids": [fs.prompt_ids[i] for i in data.fit],
            "validation_prompt_ids": [fs.prompt_ids[i] for i in data.val],
            "heldout_prompt_ids": data.held.prompt_ids,
            "train_sequences": len(data.fit), "validation_sequences": len(data.val),
            "heldout_sequences": data.held.num_sequences, size: log[size], "steps": log["steps"],
            "train_seconds": round(log["train_seconds"], 1),
            "total_seconds": round(time.perf_counter() - data.started, 1),
            "final_loss": log["loss"][-1][1] if log["loss"] else None,
            **figures,
            "stopped_early_at_step": log.get("stopped_early_at_step")}


def write_heads(head: torch.nn.Module, out: str, meta: dict) -> None:
    """Save ``head`` with ``meta`` at ``out`` and print its held-out report."""
    save_head(head, out, meta)
    print(f"wrote {out}.safetensors / .json")
    for k, v in meta["heldout"].items():
        print(f"  {k}: {v}")

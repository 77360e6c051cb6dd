"""What the Medusa and EAGLE trainers' command lines share: arguments, data, metadata, output.

Both heads learn from the same self-distilled data (:func:`specbook.train.features.heads_training_data`)
of SmolLM2-135M, frozen, in float32, and record the same facts about the run beside their weights:
the command that rewrites them, the prompts of every split, and the run's size and time.
"""
from __future__ import annotations

import argparse
import time
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cliargs import existing_file, positive_float, positive_int, threads, writable_file
from ..drafters.medusa import WEIGHTS_DIR, save_head
from . import recorded_command
from .features import FeatureSet, draft_vocabulary, validation_indices

SHARED_ARGUMENTS = {
    "--train-prompts": dict(type=positive_int, default=240, help="prompts of the training mix"),
    "--heldout-prompts": dict(type=positive_int, default=24, help="held-out prompts (never trained on)"),
    "--max-new-tokens": dict(type=positive_int, default=160, help="length of each target reply"),
    "--draft-vocab": dict(type=positive_int, default=8192, help="tokens the head can propose"),
    "--epochs": dict(type=positive_float, default=3.0, help="passes over the training positions"),
    "--lr": dict(type=positive_float, default=2e-3, help="peak learning rate"),
    "--time-limit": dict(type=positive_float, default=None, help="stop training after this many seconds"),
}


def heads_parser(prog: str, description: str, arguments: list, *, shipped: str,
                 default_name: str) -> argparse.ArgumentParser:
    """The parser of a head trainer: ``arguments`` in order, each a name of :data:`SHARED_ARGUMENTS`
    or a (name, keywords of ``add_argument``) pair, then --prompt-set, --threads and --out
    (``shipped``: what the shipped files hold; ``default_name``: their name in the weights folder)."""
    ap = argparse.ArgumentParser(prog=prog, description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    for arg in arguments:
        name, keywords = (arg, SHARED_ARGUMENTS[arg]) if isinstance(arg, str) else arg
        ap.add_argument(name, **keywords)
    ap.add_argument("--prompt-set", type=existing_file, default=None,
                    help="a JSON-lines prompt set (id, category, prompt token ids) instead of the mix: the exact "
                         f"data of the shipped {shipped}: specbook/data/eagle_prompts.jsonl")
    ap.add_argument("--threads", type=threads, default=None, help="torch threads (1 is best on a shared CPU)")
    ap.add_argument("--out", type=writable_file, default=str(WEIGHTS_DIR / default_name),
                    help="path prefix of the written <out>.safetensors and <out>.json")
    return ap


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


def load_heads_data(args: argparse.Namespace) -> HeadsData:
    """Load SmolLM2-135M in float32 (training and recorded figures), frozen, and the data ``args`` name."""
    from ..models.smollm2 import load_smollm2
    from .features import heads_training_data

    if args.threads:
        torch.set_num_threads(args.threads)
    started = time.perf_counter()
    model, tok = load_smollm2(dtype=torch.float32)
    model.requires_grad_(False)
    held, fs = heads_training_data(model, tok, prompt_set=args.prompt_set, train_prompts=args.train_prompts,
                                   heldout_prompts=args.heldout_prompts, max_new_tokens=args.max_new_tokens)
    fit, val = validation_indices(fs)
    vocab = draft_vocabulary(fs.select(fit), args.draft_vocab, always=(tok.eos_token_id,))
    return HeadsData(model, fs, held, fit, val, vocab, started)


def training_record(module: str, argv: list[str] | None, args: argparse.Namespace, data: HeadsData, log: dict,
                    size: str, **figures) -> dict:
    """The "training" entry of the weights' metadata: the command, the arguments, the prompts of
    each split, the run's ``size`` (a key of ``log``), steps and times, then ``figures``."""
    fs = data.fs
    return {"command": recorded_command(module, argv),
            **{**vars(args), "out": Path(args.out).name},
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

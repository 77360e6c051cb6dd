"""Distil SmolLM2-135M into the small draft model shipped in ``specbook/weights``, on a CPU.

Shape legend: B batch, T sequence, k teacher top-k, Vd draft vocab, V target vocab.

    python -m specbook.train.distill          # the shipped weights: data + training, one command

1. Data (:mod:`specbook.train.data`): the target's greedy replies to prompts built from the
   Python standard library, with its top-k next-token probabilities at every position;
   cached under ``~/.cache/specbook/distill`` so a second run skips it.
2. Draft vocabulary: the ``draft_vocab`` most frequent target tokens of the training split
   (ties to the lower id, i.e. the earlier BPE merge), plus the special tokens.
3. Training: the draft (:mod:`specbook.drafters.small_model`) starts as copies of target
   blocks and minimises the cross-entropy to the teacher's distribution restricted to the
   draft vocabulary, i.e. KL(p_target || q_draft) up to a constant (Hinton et al. 2015;
   for drafts, DistillSpec, Zhou et al. 2024).  AdamW, warm-up then cosine decay; every
   random choice comes from one seeded ``torch.Generator``.
4. Report: on the held-out prompts, greedy acceptance (draft argmax == target's next token
   along the target's own reply: exactly the per-token acceptance of greedy speculative
   decoding) and the sampling acceptance sum_x min(p(x), q(x)) at temperature 1, before
   and after training, per category; written with the weights into ``<name>.json``.

Bit-identical weights need the same Python (its standard library is the prompt source),
torch version and thread count; elsewhere the run reproduces a draft of the same quality.
"""
from __future__ import annotations

import argparse
import math
import platform
import sys
import time
from dataclasses import asdict, dataclass

import torch
from tqdm.auto import tqdm

from ..cliargs import file_name, int_list, nonnegative_float, positive_float, positive_int, threads, writable_dir
from ..drafters.small_model import WEIGHTS_DIR, DEFAULT_NAME, DraftConfig, build_draft_model, save_draft
from ..models.llama import LlamaModel
from . import recorded_command
from .data import all_prompts, check_disjoint, distillation_set
from .prompts import benchmark_texts, prompts_digest
from .schedule import warmup_cosine


@dataclass(frozen=True)
class DistillConfig:
    epochs: int = 2
    lr: float = 5e-4
    warmup: float = 0.05  # share of the steps
    batch_tokens: int = 3072  # tokens per optimisation step (sequences padded to the longest of the batch)
    prompt_weight: float = 0.5  # loss weight of prompt positions (reply positions weigh 1)
    grad_clip: float = 1.0
    seed: int = 0


def choose_vocab(sequences: list[torch.Tensor], size: int, vocab_size: int, always: list[int]) -> torch.Tensor:
    """The ``size`` most frequent ids in ``sequences`` (ties: lower id first), ``always`` included. (size,) long."""
    counts = torch.zeros(vocab_size, dtype=torch.float64)
    for s in sequences:
        counts += torch.bincount(s.long(), minlength=vocab_size).double()
    # lower ids are earlier BPE merges, i.e. more frequent in the tokenizer's corpus: a fair tie-break
    score = counts - torch.arange(vocab_size, dtype=torch.float64) / vocab_size
    score[torch.tensor(always, dtype=torch.long)] = math.inf
    return score.topk(size).indices.sort().values


def _targets(example: dict, lut: torch.Tensor, prompt_weight: float):
    """(tokens (T,), target indices (T-1, k) in draft vocab (-1 = outside), probs (T-1, k), weights (T-1,))."""
    ids = lut[example["topk_ids"].long()]  # (T-1, k)
    probs = example["topk_probs"].float() * (ids >= 0)
    mass = probs.sum(-1, keepdim=True)  # (T-1, 1)
    probs = probs / mass.clamp_min(1e-12)  # the teacher, conditioned on the draft vocabulary
    weight = torch.ones(ids.shape[0])
    weight[: example["prompt_length"] - 1] = prompt_weight
    weight = weight * (mass[:, 0] > 0)
    return example["tokens"].long(), ids, probs, weight


def _batches(examples: list[dict], batch_tokens: int, generator: torch.Generator) -> list[list[int]]:
    """Length-sorted groups of at most ``batch_tokens`` padded tokens, in a seeded random order."""
    order = sorted(range(len(examples)), key=lambda i: len(examples[i]["tokens"]))
    groups, cur = [], []
    for i in order:
        longest = len(examples[i]["tokens"])
        if cur and longest * (len(cur) + 1) > batch_tokens:
            groups.append(cur)
            cur = []
        cur.append(i)
    if cur:
        groups.append(cur)
    return [groups[j] for j in torch.randperm(len(groups), generator=generator).tolist()]


def _collate(items, pad: int):
    T = max(t.shape[0] for t, *_ in items)
    k = items[0][1].shape[1]
    B = len(items)
    tokens = torch.full((B, T), pad, dtype=torch.long)
    idx = torch.full((B, T - 1, k), -1, dtype=torch.long)
    probs = torch.zeros(B, T - 1, k)
    weight = torch.zeros(B, T - 1)
    for b, (t, i, p, w) in enumerate(items):
        n = t.shape[0]
        tokens[b, :n], idx[b, :n - 1], probs[b, :n - 1], weight[b, :n - 1] = t, i, p, w
    return tokens, idx, probs, weight


def distill_loss(draft: LlamaModel, tokens, idx, probs, weight) -> torch.Tensor:
    """Weighted mean over positions of -sum_k p_k log q(idx_k): cross-entropy to the restricted teacher."""
    _, hidden = draft(tokens, return_hidden=True, logits_to_keep=0)  # (B, T, D)
    logq = draft.lm_head.reduced(draft.norm(hidden[:, :-1])).float().log_softmax(-1)  # (B, T-1, Vd)
    picked = logq.gather(-1, idx.clamp_min(0))  # (B, T-1, k)
    per_pos = -(probs * picked).sum(-1)  # (B, T-1)
    return (per_pos * weight).sum() / weight.sum().clamp_min(1e-12)


@torch.no_grad()
def evaluate(draft: LlamaModel, examples: list[dict]) -> dict:
    """Per category and overall: greedy acceptance and sum_x min(p, q) on reply positions."""
    stats: dict[str, list[float]] = {}
    for ex in examples:
        tokens = ex["tokens"].long()[None]
        P = ex["prompt_length"]
        logits = draft(tokens)[0, P - 1:-1].float()  # (R, V), -inf outside the draft vocab
        nxt = tokens[0, P:]
        greedy = (logits.argmax(-1) == nxt).double()
        q = logits.softmax(-1).gather(-1, ex["topk_ids"][P - 1:].long())  # (R, k)
        overlap = torch.minimum(q, ex["topk_probs"][P - 1:].float()).sum(-1).double()  # top-k part: a lower bound
        for key in (ex.get("category", "all"), "all") if ex.get("category") else ("all",):
            s = stats.setdefault(key, [0.0, 0.0, 0])
            s[0] += float(greedy.sum()); s[1] += float(overlap.sum()); s[2] += greedy.numel()
    return {k: {"greedy_acceptance": g / n, "sampling_acceptance": o / n, "positions": n}
            for k, (g, o, n) in sorted(stats.items())}


def train_draft(target: LlamaModel, train: list[dict], draft_config: DraftConfig, config: DistillConfig,
                special_tokens: list[int], pad: int, progress: bool = True):
    """Build the draft from ``target`` and distil it on ``train``; returns (draft, loss per step)."""
    generator = torch.Generator().manual_seed(config.seed)
    vocab_ids = choose_vocab([e["tokens"] for e in train], draft_config.draft_vocab, target.config.vocab_size,
                             special_tokens)
    draft = build_draft_model(target, draft_config, vocab_ids).train()
    params = [p for n, p in draft.named_parameters() if not n.startswith("embed.")]
    draft.embed.weight.requires_grad_(False)
    for p in params:
        p.requires_grad_(True)
    lut = torch.full((target.config.vocab_size,), -1, dtype=torch.long)
    lut[vocab_ids] = torch.arange(vocab_ids.numel())
    prepared = [_targets(e, lut, config.prompt_weight) for e in train]
    steps_per_epoch = len(_batches(train, config.batch_tokens, torch.Generator().manual_seed(0)))
    total = steps_per_epoch * config.epochs
    warm = max(1, int(config.warmup * total))
    opt = torch.optim.AdamW(params, lr=config.lr, betas=(0.9, 0.95), weight_decay=0.0)
    sched = warmup_cosine(opt, total, warm, cosine_after_warmup=True)
    losses = []
    bar = tqdm(total=total, disable=not progress, desc="distill", unit="step")
    for _ in range(config.epochs):
        for group in _batches(train, config.batch_tokens, generator):
            loss = distill_loss(draft, *_collate([prepared[i] for i in group], pad))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, config.grad_clip)
            opt.step()
            sched.step()
            losses.append(loss.item())
            bar.update(1)
            bar.set_postfix(loss=f"{sum(losses[-20:]) / len(losses[-20:]):.3f}")
    bar.close()
    draft.embed.weight.requires_grad_(True)  # leave the shared target embedding as we found it
    for p in params:
        p.requires_grad_(False)
    return draft.eval(), losses


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specbook train distill", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    d, c = DraftConfig(), DistillConfig()
    parser.add_argument("--per-category", type=positive_int, default=40, help="prompts per category (train + held-out)")
    parser.add_argument("--max-new-tokens", type=positive_int, default=96, help="length of each teacher reply")
    parser.add_argument("--top-k", type=positive_int, default=16, help="teacher probabilities kept per position")
    parser.add_argument("--layers", type=int_list, default=d.init_layers,
                        help="comma-separated target blocks the draft's blocks start from (their number = draft "
                             f"depth; default {','.join(map(str, d.init_layers))})")
    parser.add_argument("--draft-vocab", type=positive_int, default=d.draft_vocab,
                        help="size of the draft's vocabulary")
    parser.add_argument("--epochs", type=positive_int, default=c.epochs, help="passes over the training replies")
    parser.add_argument("--lr", type=positive_float, default=c.lr, help="peak learning rate")
    parser.add_argument("--batch-tokens", type=positive_int, default=c.batch_tokens, help="tokens per step")
    parser.add_argument("--prompt-weight", type=nonnegative_float, default=c.prompt_weight,
                        help="loss weight of prompt positions (reply positions weigh 1)")
    parser.add_argument("--seed", type=int, default=c.seed, help="seed of the shuffling and initialisation")
    parser.add_argument("--threads", type=threads, default=None, help="torch threads (default: torch's own)")
    parser.add_argument("--out", type=writable_dir, default=str(WEIGHTS_DIR),
                        help="directory for <name>.safetensors and <name>.json")
    parser.add_argument("--name", type=file_name, default=DEFAULT_NAME, help="file name of the draft, no suffix")
    args = parser.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from ..models.smollm2 import load_smollm2

    init = args.layers
    draft_config = DraftConfig(n_layers=len(init), init_layers=init, draft_vocab=args.draft_vocab)
    config = DistillConfig(epochs=args.epochs, lr=args.lr, batch_tokens=args.batch_tokens,
                           prompt_weight=args.prompt_weight, seed=args.seed)
    target, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    target.requires_grad_(False)
    prompts = all_prompts(args.per_category)
    check_disjoint(prompts, benchmark_texts())  # evaluation prompts must never be training text
    t0, c0 = time.perf_counter(), time.process_time()
    data = distillation_set(target, tokenizer, prompts, max_new_tokens=args.max_new_tokens, top_k=args.top_k)
    t1, c1 = time.perf_counter(), time.process_time()
    train = [e for e, p in zip(data, prompts) if not p.heldout]
    held = [e for e, p in zip(data, prompts) if p.heldout]
    special = sorted({tokenizer.eos_token_id, *tokenizer.all_special_ids})
    draft, losses = train_draft(target, train, draft_config, config, special, pad=tokenizer.eos_token_id)
    t2, c2 = time.perf_counter(), time.process_time()
    before = evaluate(build_draft_model(target, draft_config, draft.lm_head.vocab_ids), held)
    after = evaluate(draft, held)
    coverage = float(torch.isin(torch.cat([e["tokens"][e["prompt_length"]:] for e in held]).long(),
                                draft.lm_head.vocab_ids).double().mean())
    meta = {
        "command": recorded_command("specbook.train.distill", argv),
        "distill": asdict(config), "per_category": args.per_category, "max_new_tokens": args.max_new_tokens,
        "top_k": args.top_k, "prompts_digest": prompts_digest(prompts),
        "train_sequences": len(train), "heldout_sequences": len(held),
        "train_tokens": sum(len(e["tokens"]) for e in train), "steps": len(losses),
        "final_loss": sum(losses[-20:]) / max(1, len(losses[-20:])),
        "heldout_reply_coverage": coverage, "heldout_before": before, "heldout_after": after,
        "data_seconds": round(t1 - t0, 1), "train_seconds": round(t2 - t1, 1), "threads": torch.get_num_threads(),
        "data_cpu_seconds": round(c1 - c0, 1), "train_cpu_seconds": round(c2 - c1, 1),
        "python": platform.python_version(), "torch": torch.__version__,
    }
    path = save_draft(draft, draft_config, meta, args.out, args.name)
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB); data {t1 - t0:.0f} s, training {t2 - t1:.0f} s "
          f"(CPU time {c1 - c0:.0f} s and {c2 - c1:.0f} s on {torch.get_num_threads()} threads)")
    print(f"held-out reply tokens inside the draft vocabulary: {coverage:.3f}")
    for key in after:
        b, a = before[key], after[key]
        print(f"  {key:13s} greedy acceptance {b['greedy_acceptance']:.3f} -> {a['greedy_acceptance']:.3f}, "
              f"sampling acceptance {b['sampling_acceptance']:.3f} -> {a['sampling_acceptance']:.3f} "
              f"({a['positions']} positions)")
    return 0


if __name__ == "__main__":
    sys.exit(main())

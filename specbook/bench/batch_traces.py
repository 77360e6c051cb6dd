"""Reasoning traces: acceptance along long step-by-step solutions, batch 1 to 8, with and without speculation.

Shape legend: B batch, W window (new tokens per point of the acceptance curve).

Reasoning models write long chains of thought that they alone have seen: nothing in the prompt
to copy, yet each step is predictable from the previous ones (restated quantities, repeated
equations, "so", "therefore").  Those traces shift the balance back towards speculation even in a
batch (the course text's last caveat).  ``specbook/data/reasoning_prompts.jsonl`` holds eight
step-by-step problems written for this project (arithmetic, algebra, induction, a logic grid,
probability) whose solutions run past 512 tokens; each trace is decoded to exactly
``--trace-tokens`` new tokens (no end token: the curve needs the whole length).

The acceptance curve: for each window of W emitted tokens, accepted drafts over drafts verified
(:attr:`specbook.decode.DecodeStats.acceptance_rate`), over every row whose step began in it.
"""
from __future__ import annotations

from importlib.resources import files
from itertools import cycle, islice

import torch
from tqdm.auto import tqdm

from ..decode import DecodeStep, generate, speculative_generate
from ..models.chat import chat_ids
from .batch_costs import now
from .workloads import load_prompts

REASONING_PROMPTS = files("specbook") / "data" / "reasoning_prompts.jsonl"
TRACE_BATCH_SIZES = (1, 2, 4, 8)


class WindowAcceptance:
    """``on_step`` hook: accepted and verified drafts per window of each row's emitted tokens."""

    def __init__(self, window: int, tokens: int):
        self.window = window
        n = -(-tokens // window)
        self.accepted, self.verified = [0] * n, [0] * n
        self.position: dict[int, int] = {}  # row -> tokens it has emitted so far

    def __call__(self, step: DecodeStep) -> None:
        K = step.draft.num_tokens
        for r, n, kept in zip(step.rows, step.num_emitted.tolist(), step.kept.tolist()):
            w = min(self.position.get(r, 0) // self.window, len(self.accepted) - 1)
            if K:
                self.accepted[w] += n - 1
                self.verified[w] += min(n, K)  # drafts tested: up to and including the first rejection
            self.position[r] = self.position.get(r, 0) + kept

    def curve(self) -> list[float | None]:
        return [a / v if v else None for a, v in zip(self.accepted, self.verified)]


def run_traces(target, drafters: dict, tokenizer, args, params, progress: bool = True) -> dict:
    """Decode the reasoning workload at the listed batch sizes up to 8 with every drafter (fixed gamma) and plainly."""
    prompts = [chat_ids(tokenizer, p.prompt) for p in load_prompts(REASONING_PROMPTS)]
    sizes = [B for B in args.batch_sizes if B <= max(TRACE_BATCH_SIZES)] or [1]
    names = ["none"] + [d for d in drafters if d != "none"]
    runs = []
    bar = tqdm(total=len(sizes) * len(names), desc="traces", disable=not progress)
    for B in sizes:
        batch = list(islice(cycle(prompts), B))
        for name in names:
            g = torch.Generator().manual_seed(args.seed)
            hook = WindowAcceptance(args.trace_window, args.trace_tokens)
            start = now()
            if name == "none":
                out = generate(target, batch, args.trace_tokens, params=params, generator=g)
            else:
                out = speculative_generate(target, drafters[name], batch, args.trace_tokens, params=params, gamma=args.gamma,
                                           generator=g, on_step=hook)
            seconds = now() - start
            total = int(out.lengths.sum())
            runs.append({"drafter": name, "batch_size": B, "new_tokens": total, "seconds": seconds,
                         "tokens_per_s": total / seconds, "tau": out.stats.tau,
                         "acceptance_rate": out.stats.acceptance_rate if name != "none" else None,
                         "window_acceptance": hook.curve() if name != "none" else None})
            bar.update(1)
    bar.close()
    return {"prompts": str(REASONING_PROMPTS.name), "tokens": args.trace_tokens, "window": args.trace_window,
            "gamma": args.gamma, "runs": runs}


def format_traces(traces: dict) -> str:
    lines = [f"reasoning traces, {traces['tokens']} new tokens, acceptance per {traces['window']}-token window"]
    for r in traces["runs"]:
        curve = " ".join("-" if a is None else f"{a:.2f}" for a in (r["window_acceptance"] or []))
        lines.append(f"{r['drafter']:<6} B={r['batch_size']:<2} {r['tokens_per_s']:7.1f} tok/s {r['seconds']:7.1f} s  {curve}")
    return "\n".join(lines)

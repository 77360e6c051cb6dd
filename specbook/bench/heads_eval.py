"""Measure the shipped Medusa and EAGLE heads on SmolLM2: tau per category, speedup, verify cost.

    python -m specbook.bench.heads_eval --curve            # target forward time vs tree size (this CPU)
    python -m specbook.bench.heads_eval --tau              # tau per benchmark category, chain vs tree,
                                                           # Medusa vs EAGLE, temperature 0 and 1
    python -m specbook.bench.heads_eval --speed --nodes 8 16 24 32   # wall clock vs plain decoding

Prompts are the benchmark's (``specbook/data/bench_prompts.jsonl``), disjoint from the heads'
training prompts (checked here).  tau = emitted tokens / target passes, summed over a
category's prompts.  Wall-clock figures depend on the machine and its load; the command
prints the torch thread count and the time of a plain decode alongside.
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from ..decode import generate, speculative_generate
from ..drafters.eagle import DynamicTree, EagleDrafter
from ..drafters.medusa import MedusaDrafter
from ..models import LlamaTarget
from ..models.chat import chat_ids
from ..sampling import SamplingParams
from ..train.heads_data import overlaps
from .timing import verify_cost_curve
from .workloads import load_prompts

TREE_SIZES = (1, 2, 4, 8, 16, 24, 32, 48, 64)  # nodes verified in one pass, for --curve


def bench_prompts(tokenizer, per_category: int):
    prompts = load_prompts()
    shared = overlaps([p.prompt for p in prompts])
    if shared:
        raise ValueError(f"benchmark prompts overlap the heads' training prompts: {shared[:2]}")
    by_cat: dict[str, list] = {}
    for p in prompts:
        by_cat.setdefault(p.category, [])
        if len(by_cat[p.category]) < per_category:
            by_cat[p.category].append(torch.tensor(chat_ids(tokenizer, p.prompt)))
    return by_cat


def configs(model, nodes: int | None = None, medusa_nodes: int | None = None):
    eagle_tree = DynamicTree(depth=6, top_k=4, num_nodes=nodes) if nodes else "default"
    return {
        "medusa-chain": MedusaDrafter.shipped(model, tree=None),
        "medusa-tree": MedusaDrafter.shipped(model, tree=medusa_nodes or "default"),
        "eagle-chain": EagleDrafter.shipped(model, tree=None),
        "eagle-tree": EagleDrafter.shipped(model, tree=eagle_tree),
    }


def tau_table(target, drafters: dict, by_cat: dict, new_tokens: int, temperatures, gamma: int, seed: int = 0):
    rows = {}
    for temp in temperatures:
        params = SamplingParams(temperature=temp)
        for name, drafter in drafters.items():
            for cat, prompts in by_cat.items():
                gen = torch.Generator().manual_seed(seed)
                emitted = passes = 0
                for prompt in prompts:
                    out = speculative_generate(target, drafter, prompt, new_tokens, params=params, gamma=gamma, generator=gen)
                    emitted += out.stats.emitted
                    passes += out.stats.target_passes
                rows[(name, temp, cat)] = emitted / passes
                print(f"  {name:13s} T={temp:g} {cat:16s} tau {emitted / passes:.2f}", flush=True)
    return rows


def speed_table(target, model, by_cat: dict, new_tokens: int, node_sizes, gamma: int):
    """Seconds per category: plain greedy decoding vs EAGLE trees of each size vs the chains."""
    greedy = SamplingParams(temperature=0.0)
    out = {}
    for cat, prompts in by_cat.items():
        t0 = time.perf_counter()
        refs = [generate(target, p, new_tokens, params=greedy).new_tokens for p in prompts]
        plain = time.perf_counter() - t0
        out[(cat, "plain")] = plain
        candidates = {f"eagle-tree-{n}": EagleDrafter.shipped(model, tree=DynamicTree(6, 4, n)) for n in node_sizes}
        candidates["eagle-chain"] = EagleDrafter.shipped(model, tree=None)
        candidates["medusa-tree"] = MedusaDrafter.shipped(model)
        for name, drafter in candidates.items():
            t0 = time.perf_counter()
            for p, ref in zip(prompts, refs):
                res = speculative_generate(target, drafter, p, new_tokens, params=greedy, gamma=gamma)
                if not torch.equal(res.new_tokens, ref):
                    print(f"  note: {name} differs from plain greedy on a {cat} prompt (near tie?)")
            out[(cat, name)] = time.perf_counter() - t0
            print(f"  {cat:16s} {name:14s} {out[(cat, name)]:6.1f} s  speedup {plain / out[(cat, name)]:.2f}x", flush=True)
    return out


def main(argv: list[str] | None = None) -> None:
    from ..models.smollm2 import load_smollm2

    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--curve", action="store_true")
    ap.add_argument("--tau", action="store_true")
    ap.add_argument("--speed", action="store_true")
    ap.add_argument("--per-category", type=int, default=3)
    ap.add_argument("--new-tokens", type=int, default=96)
    ap.add_argument("--gamma", type=int, default=5, help="chain length")
    ap.add_argument("--nodes", type=int, nargs="*", default=[16, 24, 32])
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--json", default=None, help="write the figures here")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    target = LlamaTarget(model, max_length=2048)
    print(f"torch threads: {torch.get_num_threads()}")
    report = {}
    if args.curve:
        context = torch.randint(0, 1000, (300,), generator=torch.Generator().manual_seed(0)).tolist()
        curve = verify_cost_curve(target, context, sizes=TREE_SIZES, reps=7, tree=True)
        for n, s, v in zip(curve["n"], curve["seconds"], curve["v"]):
            print(f"  {n:3d} nodes: {1000 * s:7.1f} ms  ({v:.2f}x one token)")
        report["verify_cost_ms"] = {n: round(1000 * s, 2) for n, s in zip(curve["n"], curve["seconds"])}
    by_cat = bench_prompts(tokenizer, args.per_category) if (args.tau or args.speed) else {}
    if args.tau:
        rows = tau_table(target, configs(model), by_cat, args.new_tokens, (0.0, 1.0), args.gamma)
        report["tau"] = {f"{n}|T={t:g}|{c}": round(v, 3) for (n, t, c), v in rows.items()}
        for temp in (0.0, 1.0):
            print(f"mean over categories, T={temp:g}:")
            for name in configs(model):
                vals = [v for (n, t, c), v in rows.items() if n == name and t == temp]
                print(f"  {name:13s} {sum(vals) / len(vals):.2f}")
    if args.speed:
        rows = speed_table(target, model, by_cat, args.new_tokens, args.nodes, args.gamma)
        report["seconds"] = {f"{c}|{n}": round(v, 2) for (c, n), v in rows.items()}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()

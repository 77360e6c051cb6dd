"""Which exit layer should layer-skip drafting use?  alpha(L), c(L) and the predicted speedup per L.

Shape legend: L exit layer, gamma draft length.

Draft & Verify (Zhang et al., 2023) and LayerSkip (Elhoushi et al., 2024) draft with the
target's first L blocks.  On the target's greedy trajectory the greedy acceptance of exit
layer L is the share of positions where the exit-L argmax equals the full model's
(:func:`specbook.drafters.layer_skip.exit_layer_agreement`); its cost c(L) and the verify
cost v(n) are timed on this machine (:mod:`specbook.bench.timing`); Leviathan et al. (2023,
Thm 3.8) turn the three into a predicted speedup (:func:`~specbook.drafters.layer_skip.choose_exit_layer`).

    python -m specbook.bench.exit_layers --sequences 60
"""
from __future__ import annotations

import argparse

import torch

from ..drafters.layer_skip import choose_exit_layer, exit_layer_agreement
from ..train.data import all_prompts, distillation_set
from .timing import exit_layer_costs, machine_verify_cost


def main(argv: list[str] | None = None) -> int:
    """Print alpha(L), c(L) and the predicted speedup per exit layer for SmolLM2-135M; name the best."""
    from ..models.smollm2 import load_smollm2

    p = argparse.ArgumentParser(prog="python -m specbook.bench.exit_layers", description=main.__doc__)
    p.add_argument("--sequences", type=int, default=60, help="training-split greedy replies to score")
    p.add_argument("--threads", type=int, default=0)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    prompts = all_prompts()
    data = distillation_set(model, tokenizer, prompts)  # the distillation data (cached): greedy replies
    train = [d for d, q in zip(data, prompts) if not q.heldout]
    train = train[:: max(1, len(train) // args.sequences)][: args.sequences]
    layers = list(range(2, model.config.n_layers, 2)) + [model.config.n_layers - 1]
    agreement = exit_layer_agreement(model, [d["tokens"].long() for d in train], [d["prompt_length"] - 1 for d in train],
                                     layers=layers)
    costs = exit_layer_costs(model, layers)
    v = machine_verify_cost(model, max_positions=9, reps=5)
    best, L, gamma, table = choose_exit_layer(agreement, costs, v)
    print(f"{'L':>3} {'alpha':>6} {'c':>6} {'speedup':>8} {'gamma':>6}")
    for layer in layers:
        print(f"{layer:>3} {agreement[layer]:>6.3f} {costs[layer]:>6.3f} {table[layer][0]:>8.3f} {table[layer][1]:>6}")
    print("verify cost " + "  ".join(f"v({n})={x:.2f}" for n, x in enumerate(v, start=1)))
    print(f"best: L={L}, gamma={gamma}, predicted speedup {best:.3f}" + ("" if best > 1 else " (below 1: no exit layer pays)"))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""The learning-rate schedule of every trainer here: linear warm-up, then cosine decay to zero.

Shape legend: none (a schedule maps a step index to a learning-rate factor).

Warm-up from Goyal et al. (2017, "Accurate, Large Minibatch SGD", sec. 2.2); cosine decay
from Loshchilov & Hutter (2017, "SGDR", eq. 5, one cycle, no restart).  Two ways to join
them are in use, and both are kept so that rerunning a trainer reproduces its shipped
weights: the Medusa and EAGLE trainers multiply a warm-up ramp into a cosine that spans all
steps; the distilled draft starts its cosine where the warm-up ends.
"""
from __future__ import annotations

import math

import torch


def warmup_cosine_factor(step: int, total: int, warmup: int, *, cosine_after_warmup: bool = False) -> float:
    """The learning-rate factor at 0-based ``step`` of ``total`` steps with ``warmup`` warm-up steps.

    cosine_after_warmup=False: min(1, (step + 1) / warmup) * (1 + cos(pi min(step, total) / total)) / 2.
    cosine_after_warmup=True:  (step + 1) / warmup during the warm-up, then
                               (1 + cos(pi (step - warmup) / max(1, total - warmup))) / 2.
    """
    if cosine_after_warmup:
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    return min(1.0, (step + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(step, total) / total))


def warmup_cosine(optimizer: torch.optim.Optimizer, total: int, warmup: int, *,
                  cosine_after_warmup: bool = False) -> torch.optim.lr_scheduler.LambdaLR:
    """A ``LambdaLR`` over :func:`warmup_cosine_factor` (call ``step()`` once per optimizer step)."""
    if not isinstance(total, int) or total < 1:
        raise ValueError(f"total must be an int >= 1, got {total!r}")
    if not isinstance(warmup, int) or warmup < 1:
        raise ValueError(f"warmup must be an int >= 1, got {warmup!r}")
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_cosine_factor(step, total, warmup, cosine_after_warmup=cosine_after_warmup))

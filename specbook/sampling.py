"""Sampling parameters and the one function that turns logits into probabilities.

Shape legend: B batch, K positions, V vocab.  ``...`` = any leading dims.

The same :func:`logits_to_probs` must process the target's logits *and* the
draft's logits.  The lossless proof (Leviathan et al. 2023, Appendix A.1) is a
statement about the two distributions you actually sample from; applying
temperature or top-p to one side only silently breaks it (the output still
reads fine, only a distribution test notices).

Order of operations follows common practice (and transformers' default
processors): temperature, then top-k, then top-p.  Temperature 0 means greedy:
a one-hot vector on the argmax (the first index among ties, like
``torch.argmax``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class SamplingParams:
    """temperature >= 0 (0 = greedy); top_k >= 0 (0 = off); top_p in (0, 1] (1 = off)."""

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        t = self.temperature
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        k = self.top_k
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {k!r}")
        p = self.top_p
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not (0 < p <= 1):
            raise ValueError(f"top_p must be in (0, 1], got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = SamplingParams(temperature=0.0)


def logits_to_probs(logits: torch.Tensor, params: SamplingParams = SamplingParams()) -> torch.Tensor:
    """Apply temperature, top-k and top-p to ``logits`` (..., V); return probabilities (..., V).

    Computed in float32 (float64 stays float64).  ``-inf`` logits are allowed
    (probability 0); NaN or ``+inf`` logits are rejected.  Ties at the top-k
    threshold are all kept, so the result never depends on sort order.
    """
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
    if logits.ndim < 1 or logits.shape[-1] < 1:
        raise ValueError(f"logits must have a vocabulary dimension, got shape {tuple(logits.shape)}")
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logits = logits.to(dtype)
    if torch.isnan(logits).any() or (logits == math.inf).any():
        raise ValueError("logits contain NaN or +inf")
    if (logits == -math.inf).all(dim=-1).any():
        raise ValueError("logits: some row has every entry -inf (no token possible)")

    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(dtype)  # (..., V)

    logits = logits / params.temperature
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = logits.topk(params.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = logits.softmax(-1)  # (..., V)
    if params.top_p < 1.0:
        # Keep the smallest set of most likely tokens whose mass reaches top_p.
        # A token is dropped when the mass strictly above it already reaches top_p;
        # ties are kept together so the result is order-independent.
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # (..., V)
        mass_before = sorted_probs.cumsum(-1) - sorted_probs  # (..., V)
        drop_sorted = mass_before >= params.top_p
        # threshold = smallest kept probability; keep everything >= it
        kept_min = sorted_probs.masked_fill(drop_sorted, math.inf).amin(-1, keepdim=True)  # (..., 1)
        probs = probs.masked_fill(probs < kept_min, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from ``probs`` (..., V); returns long (...).

    Rows need not be normalised (only proportional); each must have positive mass.
    """
    flat = probs.reshape(-1, probs.shape[-1]).to(torch.float64 if probs.dtype == torch.float64 else torch.float32)
    tokens = torch.multinomial(flat, 1, generator=generator).squeeze(-1)  # (B*,)
    return tokens.reshape(probs.shape[:-1])

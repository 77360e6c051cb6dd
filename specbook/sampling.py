"""Sampling parameters and the one function that turns logits into probabilities.

Shape legend: B batch, K positions, V vocab.  ``...`` = any leading dims.

The same :func:`logits_to_probs` must process the target's logits *and* the draft's: the lossless
proof (Leviathan et al. 2023, Appendix A.1) is about the two laws actually sampled from, and
temperature or top-p applied to one side only breaks it silently (only a distribution test sees
it).  Order, as in transformers' default processors: temperature, top-k, top-p; temperature 0 is
greedy (one-hot on the first argmax).  A positive temperature below :data:`MIN_TEMPERATURE` is
refused rather than floored (it underflows in float32), and overflowing scaled logits are shifted
by their row maximum first, so they give the right answer, not NaN.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .validate import check_logits, describe

MIN_TEMPERATURE = 1e-30  # it and its inverse stay normal float32 numbers (subnormals start below 1.2e-38)


@dataclass(frozen=True)
class SamplingParams:
    """temperature 0 (greedy) or in [MIN_TEMPERATURE, inf); top_k >= 0 (0 = off); top_p in (0, 1] (1 = off).

    Bools are refused for every field (``True`` is not a temperature or a count).
    """

    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0

    def __post_init__(self) -> None:
        t = self.temperature
        if not isinstance(t, (int, float)) or isinstance(t, bool) or not math.isfinite(t) or t < 0:
            raise ValueError(f"temperature must be a finite number >= 0, got {t!r}")
        if 0 < t < MIN_TEMPERATURE:
            raise ValueError(f"temperature must be 0 (greedy) or at least {MIN_TEMPERATURE:g} "
                             f"(smaller ones underflow in float32), got {t!r}")
        k = self.top_k
        if not isinstance(k, int) or isinstance(k, bool) or k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {k!r}")
        p = self.top_p
        if not isinstance(p, (int, float)) or isinstance(p, bool) or not (0 < p <= 1):  # NaN fails too
            raise ValueError(f"top_p must be in (0, 1], got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


GREEDY = SamplingParams(temperature=0.0)


def logits_to_probs(logits: torch.Tensor, params: SamplingParams = SamplingParams()) -> torch.Tensor:
    """Apply temperature, top-k and top-p to ``logits`` (..., V); return probabilities (..., V).

    Computed in float32 (float64 stays float64).  ``-inf`` logits are allowed (probability 0);
    NaN or ``+inf`` logits, a row of only ``-inf``, and bool or integer tensors are refused with
    ``ValueError``.  Ties at the top-k threshold are all kept, so the result never depends on sort
    order.  The decode loop checks the target's logits at its door and calls :func:`warp`.
    """
    if not isinstance(params, SamplingParams):
        raise ValueError(f"params must be a SamplingParams, got {type(params).__name__}")
    check_logits("logits", logits)
    return warp(logits, params)


def warp(logits: torch.Tensor, params: SamplingParams) -> torch.Tensor:
    """:func:`logits_to_probs` on logits already checked."""
    dtype = torch.float64 if logits.dtype == torch.float64 else torch.float32
    logits = logits.to(dtype)
    if params.greedy:
        return torch.nn.functional.one_hot(logits.argmax(-1), logits.shape[-1]).to(dtype)  # (..., V)
    scaled = logits / params.temperature  # (..., V)
    if (torch.isinf(scaled) & torch.isfinite(logits)).any():
        # Overflow: shift every row so its maximum is 0 (softmax is shift-invariant), then scale;
        # finite entries can now only round to -inf (probability 0).  Only when needed, so ordinary
        # logits give the same bits as logits / temperature.
        scaled = (logits - logits.amax(-1, keepdim=True)) / params.temperature  # (..., V)
    logits = scaled
    if params.top_k and params.top_k < logits.shape[-1]:
        kth = logits.topk(params.top_k, dim=-1).values[..., -1:]  # (..., 1)
        logits = logits.masked_fill(logits < kth, -math.inf)
    probs = logits.softmax(-1)  # (..., V)
    if params.top_p < 1.0:
        # Keep the smallest set of most likely tokens whose mass reaches top_p: a token is dropped when
        # the mass strictly above it already reaches top_p; ties are kept together (order-independent).
        sorted_probs, order = probs.sort(dim=-1, descending=True)  # (..., V)
        drop_sorted = sorted_probs.cumsum(-1) - sorted_probs >= params.top_p  # (..., V)
        kept_min = sorted_probs.masked_fill(drop_sorted, math.inf).amin(-1, keepdim=True)  # (..., 1)
        probs = probs.masked_fill(probs < kept_min, 0.0)
        probs = probs / probs.sum(-1, keepdim=True)
    return probs


def sample(probs: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """Draw one token per row from ``probs`` (..., V); returns long (...).

    Rows need not be normalised (only proportional); each must be finite, non-negative
    and have positive mass, else ``ValueError`` (before any draw).
    """
    if not isinstance(probs, torch.Tensor) or not probs.is_floating_point() or probs.ndim < 1:
        raise ValueError(f"probs must be a floating-point tensor (..., V), got {describe(probs)}")
    flat = probs.reshape(-1, probs.shape[-1]).to(torch.float64 if probs.dtype == torch.float64 else torch.float32)
    if flat.numel() == 0:
        return torch.zeros(probs.shape[:-1], dtype=torch.long, device=probs.device)
    if not torch.isfinite(flat).all() or (flat < 0).any():
        bad = flat[~(torch.isfinite(flat) & (flat >= 0))][0].item()
        raise ValueError(f"probs must be finite and non-negative, got an entry {bad!r}")
    if (flat.amax(-1) == 0).any():
        raise ValueError(f"probs: row {int((flat.amax(-1) == 0).nonzero()[0])} (flattened) has no mass")
    tokens = torch.multinomial(flat, 1, generator=generator).squeeze(-1)  # (B*,)
    return tokens.reshape(probs.shape[:-1])

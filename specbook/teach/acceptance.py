"""Acceptance, exactly: a toy pair with constant acceptance, the law of accepted counts, the
per-context overlap, and the trace's per-context estimate of it.

Shape legend: S states (contexts), V vocab.

The yield lesson checks Leviathan et al. 2023's E[tokens] = (1 - alpha^(gamma+1)) / (1 - alpha)
(Sec. 3.1) on a pair where its i.i.d. assumption holds exactly, and then on a pair where it does
not (acceptance varies by context, Definition 3.1).
"""
from __future__ import annotations

import torch

from ..sampling import SamplingParams, logits_to_probs
from ..toy import MarkovLM
from .trace import Trace


def constant_acceptance_pair(vocab_size: int = 8, alpha: float = 0.7, seed: int = 0) -> tuple[MarkovLM, MarkovLM]:
    """A target and draft whose acceptance probability is exactly ``alpha`` in every context.

    In each context the target p lives on half the vocabulary, and the draft is
    q = alpha * p + (1 - alpha) * o with o on the other half, so sum_z min(p, q) = alpha
    whatever the context: the i.i.d. acceptance assumption behind E[tokens]
    (Leviathan et al. 2023, Sec. 3.1) holds exactly at temperature 1.
    """
    if not isinstance(vocab_size, int) or vocab_size < 2 or vocab_size % 2:
        raise ValueError(f"vocab_size must be an even int >= 2, got {vocab_size!r}")
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    g = torch.Generator().manual_seed(seed)
    V, half = vocab_size, vocab_size // 2
    order = torch.stack([torch.randperm(V, generator=g) for _ in range(V)])  # (V, V)
    w = -torch.rand(V, V, generator=g, dtype=torch.float64).clamp_min(1e-12).log() + 0.05  # (V, V) > 0
    inside = torch.zeros(V, V, dtype=torch.bool).scatter(1, order[:, :half], True)  # (V, V) p's support
    p = torch.where(inside, w, 0.0)
    p = p / p.sum(-1, keepdim=True)
    o = torch.where(inside, 0.0, w)
    o = o / o.sum(-1, keepdim=True)
    q = alpha * p + (1 - alpha) * o
    return MarkovLM(p, 1), MarkovLM(q / q.sum(-1, keepdim=True), 1)


def accepted_count_law(alpha: float, gamma: int) -> list[float]:
    """P(k drafts accepted in one step), k = 0..gamma, when each survives independently with alpha.

    Truncated geometric: alpha^k (1 - alpha) for k < gamma, alpha^gamma for k = gamma.  Its
    mean plus one (the corrected or bonus token) is E[tokens] = (1 - alpha^(gamma+1)) / (1 - alpha).
    """
    if not 0 <= alpha <= 1:
        raise ValueError(f"alpha must be in [0, 1], got {alpha!r}")
    if not isinstance(gamma, int) or gamma < 0:
        raise ValueError(f"gamma must be an int >= 0, got {gamma!r}")
    return [alpha**k * (1 - alpha) for k in range(gamma)] + [alpha**gamma]


def overlap(target: MarkovLM, draft: MarkovLM, params: SamplingParams = SamplingParams()) -> torch.Tensor:
    """sum_z min(p(z|s), q(z|s)) for every state s: (S,).  The acceptance probability of a draft
    sampled from q in context s (Leviathan et al. 2023, Definition 3.1 and Lemma 3.3)."""
    if target.order != draft.order or target.vocab_size != draft.vocab_size:
        raise ValueError("target and draft must have the same order and vocabulary")
    p = logits_to_probs(target.log_transitions, params)  # (S, V)
    q = logits_to_probs(draft.log_transitions, params)  # (S, V)
    return torch.minimum(p, q).sum(-1)  # (S,)


def acceptance_by_previous_token(trace: Trace) -> tuple[list[int], list[int]]:
    """Per context (the token just before each draft): how many drafts were verified and accepted.

    For an order-1 Markov pair the previous token is the whole context, so ``accepted[s] / verified[s]``
    estimates sum_z min(p(z|s), q(z|s)) (see :func:`overlap`).  Drafts after a rejection are not counted.
    """
    if not trace.steps:
        raise ValueError("trace has no steps")
    V = int(trace.steps[0].target_probs.shape[-1])
    verified, accepted = [0] * V, [0] * V
    history = list(trace.prompt)
    for step in trace.steps:
        previous = history[-1]
        for i, x in enumerate(step.draft_tokens[: step.num_accepted + 1]):
            verified[previous] += 1
            accepted[previous] += int(i < step.num_accepted)
            previous = x
        history.extend(step.emitted)
    return verified, accepted

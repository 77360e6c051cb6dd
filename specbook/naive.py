"""Acceptance rules that look reasonable and are wrong, kept for teaching.

Shape legend: V vocab.

Each rule comes as a sampler with the same signature as
:func:`specbook.verify.verify_token` (so the grading checker and the
statistical tests can run it) and as its exact emitted law, which differs
from the target p.  The lesson text puts the root cause in one line: a naive
rule lets the draft veto which tokens are even considered, or double-counts
the mass that p and q already agree on.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from .laws import accept_prob, as_list, like, residual_list, zero
from .sampling import sample
from .verify import residual


def _uniform(p: torch.Tensor, generator) -> torch.Tensor:
    return torch.rand((), generator=generator, device=p.device, dtype=torch.float64)


# --- rule 1: accept with probability p(x), otherwise sample from p -----------------------------
def accept_p_then_p(target_probs, draft_probs, draft_token: int, generator=None) -> int:
    """"Keep the draft if the target would also pick it" (prob. p(x)); else draw from p."""
    p = target_probs.to(torch.float64)
    if _uniform(p, generator) < p[draft_token]:
        return draft_token
    return int(sample(p, generator))


def accept_p_then_p_law(target_probs, draft_probs):
    p, q = as_list(target_probs), as_list(draft_probs)
    reject = 1 - sum(qi * pi for qi, pi in zip(q, p))
    return like([qi * pi + reject * pi for qi, pi in zip(q, p)], target_probs)


# --- rule 2: the right acceptance test, but resample from p instead of the residual ------------
def resample_from_p(target_probs, draft_probs, draft_token: int, generator=None) -> int:
    """Accept with min(1, p/q) (correct) but on rejection draw from p (double-counts min(p, q))."""
    p, q = target_probs.to(torch.float64), draft_probs.to(torch.float64)
    if _uniform(p, generator) * q[draft_token] < p[draft_token]:
        return draft_token
    return int(sample(p, generator))


def resample_from_p_law(target_probs, draft_probs):
    p, q = as_list(target_probs), as_list(draft_probs)
    overlap = [min(pi, qi) for pi, qi in zip(p, q)]
    reject = 1 - sum(overlap)
    return like([o + reject * pi for o, pi in zip(overlap, p)], target_probs)


# --- rule 3: accept iff p(x) >= q(x), deterministic; residual on rejection ---------------------
def accept_if_target_prefers(target_probs, draft_probs, draft_token: int, generator=None) -> int:
    """Accept exactly when the target likes x at least as much as the draft; else the residual."""
    p, q = target_probs.to(torch.float64), draft_probs.to(torch.float64)
    if p[draft_token] >= q[draft_token]:
        return draft_token
    return int(sample(residual(p, q), generator))


def accept_if_target_prefers_law(target_probs, draft_probs):
    p, q = as_list(target_probs), as_list(draft_probs)
    reject = sum(qi for pi, qi in zip(p, q) if pi < qi)
    r = residual_list(p, q)
    return like([(qi if pi >= qi else zero(pi)) + reject * ri for pi, qi, ri in zip(p, q, r)], target_probs)


@dataclass(frozen=True)
class NaiveRule:
    name: str
    description: str
    sampler: Callable
    law: Callable


NAIVE_RULES = (
    NaiveRule("accept w.p. p(x), else sample p", "keep the draft with the target's probability of it; otherwise draw from p",
              accept_p_then_p, accept_p_then_p_law),
    NaiveRule("min(1,p/q), resample from p", "correct acceptance test, but rejection draws from p, not the residual",
              resample_from_p, resample_from_p_law),
    NaiveRule("accept iff p(x) >= q(x)", "deterministic acceptance; tokens the draft over-proposes are never emitted",
              accept_if_target_prefers, accept_if_target_prefers_law),
)

__all__ = ["NaiveRule", "NAIVE_RULES", "accept_p_then_p", "resample_from_p", "accept_if_target_prefers",
           "accept_p_then_p_law", "resample_from_p_law", "accept_if_target_prefers_law", "accept_prob"]

"""Exact laws: what a verifier emits, computed by enumeration instead of sampling.

Shape legend: K draft length, V vocab.

These are the oracles the tests compare samplers against.  Every function works
on ``torch`` tensors (computed in float64) *and* on plain Python sequences of
``fractions.Fraction`` (computed exactly), so a claim like "P(emit z) = p(z)" can
be checked to the last bit on small cases.

The identities (Leviathan et al. 2023, Appendix A.1), for draft x ~ q:

    P(draft z and accept)   = q(z) * min(1, p(z)/q(z)) = min(p(z), q(z))
    P(reject)               = 1 - sum_w min(p(w), q(w)) = sum_w max(0, p(w) - q(w))
    P(emit z)               = min(p(z), q(z)) + max(0, p(z) - q(z)) = p(z)
"""
from __future__ import annotations

from fractions import Fraction
from itertools import product
from typing import Sequence

import torch

Number = float | Fraction


def as_list(probs) -> list:
    """A probability vector as a plain list: a 1-D tensor in float64, a sequence (of Fractions) as is."""
    if isinstance(probs, torch.Tensor):
        if probs.ndim != 1:
            raise ValueError(f"expected a 1-D probability vector, got shape {tuple(probs.shape)}")
        return probs.to(torch.float64).tolist()
    return list(probs)


def like(values: list, template):
    """Return ``values`` as a float64 tensor when ``template`` is a tensor, else as a list."""
    if isinstance(template, torch.Tensor):
        return torch.tensor(values, dtype=torch.float64)
    return values


def zero(x: Number) -> Number:
    """The zero of ``x``'s number type (0.0 for floats, Fraction(0) for Fractions)."""
    return x * 0


def accept_prob(p_x: Number, q_x: Number) -> Number:
    """min(1, p(x)/q(x)), with q(x) = 0 read as "accept iff p(x) > 0" (what verify_chain does)."""
    if q_x == 0:
        return 1 if p_x > 0 else 0
    return min(p_x / q_x, 1)


def residual_list(p: list, q: list) -> list:
    """max(0, p - q) normalised; p itself when the residual has no mass (as in verify.residual)."""
    diff = [max(pi - qi, zero(pi)) for pi, qi in zip(p, q)]
    mass = sum(diff)
    return [d / mass for d in diff] if mass > 0 else list(p)


def conditional_emission_law(target_probs, draft_probs, draft_token: int):
    """P(emit z | the draft token is x) for the single-position rule: (V,)."""
    p, q = as_list(target_probs), as_list(draft_probs)
    a = accept_prob(p[draft_token], q[draft_token])
    r = residual_list(p, q)
    law = [(1 - a) * rz for rz in r]
    law[draft_token] += a
    return like(law, target_probs)


def emission_law(target_probs, draft_probs):
    """P(emit z) when x ~ q and the modified rejection sampler runs: (V,).  Equals p."""
    p, q = as_list(target_probs), as_list(draft_probs)
    if len(p) != len(q):
        raise ValueError(f"target_probs has {len(p)} entries but draft_probs has {len(q)}")
    law = [zero(pi) for pi in p]
    for x, qx in enumerate(q):
        if qx == 0:
            continue
        cond = conditional_emission_law(p, q, x)
        law = [l + qx * c for l, c in zip(law, cond)]
    return like(law, target_probs)


def _rows(probs) -> list[list]:
    if isinstance(probs, torch.Tensor):
        if probs.ndim != 2:
            raise ValueError(f"expected a (positions, V) tensor, got shape {tuple(probs.shape)}")
        return probs.to(torch.float64).tolist()
    return [list(r) for r in probs]


def block_law(target_probs, draft_probs=None, draft_tokens: Sequence[int] | None = None) -> dict[tuple[int, ...], Number]:
    """Exact law of the whole block that :func:`specbook.verify.verify_chain` emits for one row.

    target_probs: (K+1, V) p at each draft position and the bonus position (position-dependent).
    draft_probs:  (K, V) q at each position, or None for one-hot drafts (then draft_tokens is required).
    draft_tokens: if given, the law is conditional on these drafts; if None, drafts are x_i ~ q_i
                  independently and the law is the marginal over them.

    Returns {emitted block (tuple of 1..K+1 tokens): probability}, zero-probability blocks omitted.
    Enumerates the accept/reject paths: accept the first m drafts, then either reject at m+1 and emit
    from the residual, or (m = K) emit the bonus from p_{K+1}.
    """
    p = _rows(target_probs)
    K = len(p) - 1
    V = len(p[0])
    if draft_probs is None:
        if draft_tokens is None:
            raise ValueError("draft_probs=None (one-hot drafts) needs draft_tokens")
        q = [[int(v == x) for v in range(V)] for x in draft_tokens]
    else:
        q = _rows(draft_probs)
    if len(q) != K:
        raise ValueError(f"draft_probs has {len(q)} positions but target_probs has {K + 1} (expected K+1)")
    law: dict[tuple[int, ...], Number] = {}

    if draft_tokens is not None:
        if len(draft_tokens) != K:
            raise ValueError(f"draft_tokens has {len(draft_tokens)} entries, expected K = {K}")
        prefix_prob: Number = 1
        for m in range(K + 1):
            if m == K:
                tail = p[K]
                stop = 1
            else:
                a = accept_prob(p[m][draft_tokens[m]], q[m][draft_tokens[m]])
                tail, stop = residual_list(p[m], q[m]), 1 - a
            for z, rz in enumerate(tail):
                w = prefix_prob * stop * rz
                if w > 0:
                    law[tuple(draft_tokens[:m]) + (z,)] = w
            if m < K:
                prefix_prob = prefix_prob * accept_prob(p[m][draft_tokens[m]], q[m][draft_tokens[m]])
                if prefix_prob == 0:
                    break
        return law

    # Marginal over drafts: P(a_1..a_m accepted) = prod_i min(p_i, q_i)(a_i); then the unnormalised
    # residual max(0, p - q) (= P(reject) * normalised residual) or, at m = K, the bonus law p_{K+1}.
    support = [[v for v in range(V) if min(p[i][v], q[i][v]) > 0] for i in range(K)]
    for m in range(K + 1):
        tail = p[K] if m == K else [max(pv - qv, zero(pv)) for pv, qv in zip(p[m], q[m])]
        if m < K and sum(tail) == 0:
            continue
        for prefix in product(*support[:m]):
            w: Number = 1
            for i, a in enumerate(prefix):
                w = w * min(p[i][a], q[i][a])
            for z, tz in enumerate(tail):
                if tz > 0:
                    law[prefix + (z,)] = w * tz
    return law


def to_fractions(probs: Sequence[float], denominator: int = 1000) -> list[Fraction]:
    """Round floats to Fractions with a common denominator that sum to exactly 1 (for exact tests)."""
    fr = [Fraction(round(float(x) * denominator), denominator) for x in probs]
    fr[max(range(len(fr)), key=lambda i: fr[i])] += 1 - sum(fr)
    if any(f < 0 for f in fr):
        raise ValueError("probabilities too small for this denominator")
    return fr

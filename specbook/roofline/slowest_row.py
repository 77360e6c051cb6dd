"""Rows that accept different numbers of drafts: how many rounds one row needs, and how long a
static batch runs until its slowest row is done.

A round of speculative decoding gives a row 1 to gamma + 1 tokens: it stops at the first
rejected draft.  With every draft accepted with probability alpha, independently (the i.i.d.
model of Leviathan et al. 2023, sec. 3.1), the rounds R a row needs for ``new_tokens`` tokens
have an exact law (:func:`rounds_needed_cdf`).  A batch that keeps its rows until all are done
runs E[max_i R_i] rounds (:func:`expected_slowest_rounds`), so it gains fewer tokens per row
per round than E(alpha, gamma) (:func:`slowest_row_yield`); :func:`alpha_for_yield` turns a
measured yield back into the acceptance that gives it.  :mod:`specbook.roofline.serving` prices
a static batch with these.
"""
from __future__ import annotations

import functools

from .. import theory
from ._checks import _alpha, _int, _items, _positive

__all__ = ["rounds_needed_cdf", "expected_slowest_rounds", "slowest_row_yield", "alpha_for_yield"]


def _round_law(alpha: float, gamma: int) -> list[float]:
    """P(T = k) for k = 1 .. gamma + 1: the tokens one row gains in one round (i.i.d. acceptance)."""
    return [alpha ** (k - 1) * (1.0 - alpha) for k in range(1, gamma + 1)] + [alpha ** gamma]


def rounds_needed_cdf(alpha, gamma, new_tokens) -> list[float]:
    """P(R <= r) for r = 0, 1, ..., new_tokens, where R is the number of rounds one row needs to emit
    ``new_tokens`` tokens when each draft is accepted with probability alpha (the i.i.d. model of
    Leviathan et al. 2023, sec. 3.1) and a round stops at the first rejection.

    A round emits at least one token, so R <= new_tokens.  A loop that drafts fewer tokens near the
    budget (as :func:`specbook.decode.speculative_generate` does) needs the same number of rounds:
    with m tokens left, either loop finishes this round with probability alpha^(m - 1).
    """
    return list(_rounds_cdf(_alpha(alpha), _int(gamma, "gamma", 0), _int(new_tokens, "new_tokens", 1)))


@functools.lru_cache(maxsize=256)
def _rounds_cdf(a: float, g: int, n: int) -> tuple[float, ...]:
    law = _round_law(a, g)
    have = [0.0] * (n + 1)  # have[t] = P(S_r = t) for t < n; have[n] = P(S_r >= n)
    have[0] = 1.0
    cdf = [0.0]
    for r in range(1, n + 1):
        if have[n] >= 1.0 - 1e-15:  # done with certainty, to rounding: the rest of the cdf is 1
            cdf.extend([1.0] * (n + 1 - r))
            break
        nxt = [0.0] * (n + 1)
        nxt[n] = have[n]
        for t in range(r - 1, n):  # after r - 1 rounds a row holds at least r - 1 tokens
            mass = have[t]
            if mass == 0.0:
                continue
            for k, pk in enumerate(law, start=1):
                nxt[min(t + k, n)] += mass * pk
        have = nxt
        cdf.append(min(1.0, have[n]))
    return tuple(cdf)


def expected_slowest_rounds(alphas, gamma, new_tokens) -> float:
    """E[max_i R_i]: the rounds a static batch runs until its slowest row has ``new_tokens`` tokens,
    with row i accepting drafts with probability ``alphas[i]`` (rows independent).

    E[max] = sum over r >= 0 of (1 - prod_i P(R_i <= r)).  One row with a low acceptance sets the
    pace: a row that accepts nothing needs ``new_tokens`` rounds whatever the others do.
    """
    rows = _items(alphas, "alphas", "acceptance rates in [0, 1], one per row")
    n = _int(new_tokens, "new_tokens", 1)
    counts: dict[float, int] = {}
    for a in rows:
        a = _alpha(a)
        counts[a] = counts.get(a, 0) + 1
    all_done = [1.0] * (n + 1)  # P(max R <= r)
    for a, count in counts.items():
        cdf = _rounds_cdf(a, _int(gamma, "gamma", 0), n)
        all_done = [p * c ** count for p, c in zip(all_done, cdf)]
    return sum(1.0 - p for p in all_done[:n])


def slowest_row_yield(alphas, gamma, new_tokens) -> float:
    """Tokens per row per round of a static batch that waits for its slowest row:
    new_tokens / E[max_i R_i] (:func:`expected_slowest_rounds`); E(alpha, gamma) for a single row
    and a long generation, less for a wider batch."""
    return _int(new_tokens, "new_tokens", 1) / expected_slowest_rounds(alphas, gamma, new_tokens)


def alpha_for_yield(tokens_per_round, gamma) -> float:
    """The acceptance alpha at which E(alpha, gamma) equals ``tokens_per_round``: turns a row's measured
    tokens per pass (which also counts the passes where its drafter had nothing to propose) into the
    i.i.d. acceptance that yields as much.  Bisection; E is increasing in alpha on [0, 1]."""
    g = _int(gamma, "gamma", 0)
    y = _positive(tokens_per_round, "tokens_per_round")
    if not 1.0 <= y <= g + 1.0:
        raise ValueError(f"tokens_per_round must lie in [1, gamma + 1] = [1, {g + 1}], got {tokens_per_round!r}")
    if g == 0 or y == 1.0:
        return 0.0
    if y == g + 1.0:
        return 1.0
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2
        if float(theory.expected_tokens(mid, g)) < y:
            low = mid
        else:
            high = mid
    return (low + high) / 2

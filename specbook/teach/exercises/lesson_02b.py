"""Graders of the statistics primer: exercises ``02b.1``-``02b.4``, concept checks ``02b.c1``-``02b.c5``.

What is right is computed with :mod:`specbook.stats` (pooling, Holm, power and sample size),
:mod:`specbook.naive` (the broken rule's exact law) and plain arithmetic on the primer's counts.
"""
from __future__ import annotations

import numpy as np

from specbook import naive, stats

from . import Wrong, grader, register
from ._answers import count, near, number, pick, whole

LEVEL = 0.01  # the primer's level throughout


def _near(value: float, target: float, rel: float) -> bool:
    return abs(value - target) <= rel * abs(target)


@grader("02b.1")
def statistic_of_scaled_counts(answer, counts, expected) -> None:
    """X² after dividing the counts and the expected counts by 10."""
    value = number(answer, "X²")
    counts, expected = np.asarray(counts, dtype=float), np.asarray(expected, dtype=float)
    raw = float(np.sum((counts - expected) ** 2 / expected))
    right = float(np.sum((counts / 10 - expected / 10) ** 2 / (expected / 10)))
    if _near(value, right, 0.01):
        return
    if _near(value, raw, 0.01):
        raise Wrong("that is X² of the raw counts: what happens to each term (O − E)²/E when O and E both "
                    "shrink ten times?")
    if _near(value, raw / 100, 0.01):
        raise Wrong("the numerator of each term shrinks 100 times, but so does something in the denominator")
    raise Wrong(f"{value:.1f} is not it: take X² of the raw counts (printed in section 1) and follow one term "
                "(O − E)²/E through the division")


def _bins(n: int, probs) -> int:
    counts = np.zeros(len(probs), dtype=np.int64)
    counts[0] = n  # pooling depends on the total only (expected counts n p)
    return stats.pool_bins(counts, probs)[0].size


@grader("02b.2")
def own_bin(n_answer, bins_answer, probs) -> None:
    """The smallest n at which the rarest token gets a bin of its own, and the number of bins then."""
    probs = np.asarray(probs, dtype=float)
    n, bins = whole(n_answer, "n"), whole(bins_answer, "the number of bins")
    full = int(np.count_nonzero(probs))
    lo, hi = 1, 1
    while _bins(hi, probs) < full:  # the smallest n with every bin alone, by doubling then bisection
        hi *= 2
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if _bins(mid, probs) >= full else (mid + 1, hi)
    right_n = lo
    if n != right_n:
        rare = float(probs[probs > 0].min())
        if _near(n, 1 / rare, 0.01):
            raise Wrong("at that n the rare token is expected once; how many expected draws does a bin need?")
        if n < right_n:
            raise Wrong(f"at n = {n} the rare token's expected count is {n * rare:.4g}: below the rule's minimum, "
                        "so it is still merged")
        raise Wrong(f"at n = {n} the bin stands alone, but it already did at smaller n: find the smallest")
    if bins != _bins(right_n, probs):
        raise Wrong("n is right; how many bins does the test have once nothing is merged any more?")


@grader("02b.3")
def many_tests(uncorrected, with_holm) -> None:
    """30 honest, independent tests at 0.01: P(some false alarm) without correction, and with Holm."""
    k = 30
    value = number(uncorrected, "the chance without correction")
    right = 1 - (1 - LEVEL) ** k
    if abs(value - right) > 0.005:
        if abs(value - k * LEVEL) < 0.005:
            raise Wrong("30 × 0.01 is the union bound, which overshoots: compute the chance that none of 30 "
                        "independent tests raises an alarm, then take the complement")
        if abs(value - (1 - LEVEL) ** k) < 0.005:
            raise Wrong("that is the chance that no test raises an alarm")
        raise Wrong("each honest test stays quiet with probability 1 − 0.01, independently of the others")
    holm = number(with_holm, "the chance with Holm")
    if abs(holm - LEVEL) > 0.0006:
        if holm > LEVEL:
            raise Wrong("Holm's procedure exists to keep the whole family's false-alarm rate at its level")
        if abs(holm - LEVEL / k) < 1e-6:
            raise Wrong("ℓ/k is Holm's first threshold, for one test; the question is about the whole family")
        raise Wrong("the family-wise rate Holm guarantees is its level; give that bound")


def _law_at_match(p, q, match: float):
    import torch

    p, q = torch.as_tensor(p, dtype=torch.float64), torch.as_tensor(q, dtype=torch.float64)
    return naive.resample_from_p_law(p, match * p + (1 - match) * q).numpy()


@grader("02b.4")
def draws_for_a_better_draft(answer, p, q) -> None:
    """How many times more draws the test needs at match 0.9 than at match 0 (power 0.99)."""
    value = number(answer, "the ratio")
    p_np = np.asarray(p, dtype=float)
    needed = {m: stats.sample_size_for_power(p_np, _law_at_match(p, q, m), alpha=LEVEL, power=0.99)
              for m in (0.0, 0.9)}
    right = needed[0.9] / needed[0.0]
    if _near(value, right, 0.1):
        return
    if value < 1:
        raise Wrong("a better draft rejects less often, so the bug shows less: more draws, not fewer")
    if _near(value, np.sqrt(right), 0.15):
        raise Wrong("the deviation a − p shrinks ten times; λ/n depends on it more steeply than linearly")
    raise Wrong("how does the deviation a − p scale with the rejection mass Σ max(0, p − q), and λ with the "
                "deviation? (Pooling changes a little too, but the first answer is most of it.)")


# ---------------------------------------------------------------------------- concept check

_C2_PVALUES = [0.001, 0.004, 0.02, 0.3]


def _draws_for_half_the_bias() -> float:
    """c3: how many times the draws for the same power (0.9) when the deviation is halved."""
    null = np.array([0.4, 0.3, 0.2, 0.1])
    shift = np.array([0.04, -0.02, -0.01, -0.01])
    n_full = stats.sample_size_for_power(null, null + shift, alpha=LEVEL, power=0.9)
    n_half = stats.sample_size_for_power(null, null + shift / 2, alpha=LEVEL, power=0.9)
    return n_half / n_full


register({
    "02b.c1": pick("b", a="scipy accepts proportions without a word (section 1 shows it); specbook.stats refuses "
                          "them for a reason",
                   c="the degrees of freedom depend on the number of bins, which dividing does not change"),
    # p-values (0.001, 0.004, 0.02, 0.3) at family-wise level 0.01: how many rejected by Holm?
    "02b.c2": count(sum(stats.holm(_C2_PVALUES, LEVEL)), "the number of rejections", traps={
        sum(p <= LEVEL for p in _C2_PVALUES): "that is every test at level 0.01 on its own; Holm compares the "
                                              "smallest p-value with ℓ/4, the next with ℓ/3, and so on, stopping "
                                              "at the first that is not small enough",
    }, hint="sort the p-values and walk up: ℓ/4 for the smallest, ℓ/3 for the next, … stop at the first failure"),
    # A deviation half as large: how many times the draws for the same power (pooling unchanged)?
    "02b.c3": near(_draws_for_half_the_bias, "the factor", tol=0.1, rel=True,
                   traps=lambda right: {np.sqrt(right): "λ = n Σ (a − p)²/p: halve a − p and see what happens to λ "
                                                        "at a fixed n"},
                   hint="the power depends on n only through λ = n Σ (a − p)²/p: keep λ fixed"),
    "02b.c4": pick("b", a="the level bounds false alarms on correct samplers; it says nothing about how often a "
                          "bug slips through",
                   c="power is a property of the test against a given bug, not a probability that the sampler "
                     "is buggy"),
    "02b.c5": pick("b", a="merging by the observed counts lets the data choose the test; what does "
                          "specbook.stats.pool_bins read?",
                   c="a test whose bins are chosen to raise the p-value would pass anything"),
})

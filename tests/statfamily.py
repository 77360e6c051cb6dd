"""The statistical family of this test suite and its stated false-alarm rate.

Every chi-square test of *correct* code in tests/ calls :func:`check_fit`, which
uses the Bonferroni level FAMILY_ALPHA / FAMILY_BUDGET.  Whatever the seeds, the
probability that a correct implementation fails any of them is at most
FAMILY_ALPHA (union bound), provided no more than FAMILY_BUDGET such tests exist;
``conftest.py`` counts them and fails the session if the budget is exceeded.

Broken twins are tested at the same level and must be *rejected* (each twin's
p-value is typically below 1e-30); ``python scripts/power_report.py --seeds 20``
reports each twin's detection rate over many seeds and its noncentral-chi-square
power at this level.
"""
from __future__ import annotations

import numpy as np

from specbook.stats import chisquare_gof

FAMILY_ALPHA = 1e-3
FAMILY_BUDGET = 60
PER_TEST_ALPHA = FAMILY_ALPHA / FAMILY_BUDGET

USED: list[str] = []


def encode_blocks(tokens, num_emitted, vocab_size: int) -> list[tuple[int, ...]]:
    """Rows of (tokens (B, K+1), num_emitted (B,)) as tuples of the emitted tokens."""
    return [tuple(row[:n]) for row, n in zip(tokens.tolist(), num_emitted.tolist())]


def law_and_counts(law: dict, observed: list) -> tuple[np.ndarray, np.ndarray, list]:
    """Align an exact law {outcome: prob} with observed outcomes; unseen-by-law outcomes get prob 0."""
    outcomes = sorted(set(law) | set(observed), key=lambda o: (len(o), o) if isinstance(o, tuple) else (0, o))
    index = {o: i for i, o in enumerate(outcomes)}
    counts = np.zeros(len(outcomes), dtype=np.int64)
    for o in observed:
        counts[index[o]] += 1
    probs = np.array([float(law.get(o, 0.0)) for o in outcomes], dtype=np.float64)
    return counts, probs / probs.sum(), outcomes


def fit_pvalue(law: dict, observed: list) -> float:
    counts, probs, _ = law_and_counts(law, observed)
    return chisquare_gof(counts, probs).pvalue


def check_fit(name: str, law: dict, observed: list) -> float:
    """Assert that ``observed`` follows ``law`` at the family's per-test level; return the p-value."""
    USED.append(name)
    p = fit_pvalue(law, observed)
    assert p > PER_TEST_ALPHA, f"{name}: chi-square p = {p:.3g} <= {PER_TEST_ALPHA:g} (observed outcomes do not follow the exact law)"
    return p


def check_rejects(name: str, law: dict, observed: list) -> float:
    """Assert that a broken twin is caught: p-value below the per-test level."""
    p = fit_pvalue(law, observed)
    assert p <= PER_TEST_ALPHA, f"broken twin {name!r} was NOT caught: p = {p:.3g} > {PER_TEST_ALPHA:g}"
    return p

"""The statistical family of this test suite: its bookkeeping under pytest.

Every chi-square test of *correct* code in tests/ calls :func:`check_fit`, which uses the
Bonferroni level ``PER_TEST_ALPHA = FAMILY_ALPHA / FAMILY_BUDGET`` (the level, the block-law
helpers and the broken twins live in :mod:`specbook.grading.twins`, which
scripts/power_report.py shares).  Whatever the seeds, the probability that a correct
implementation fails any of them is at most FAMILY_ALPHA (union bound), provided no more than
FAMILY_BUDGET such tests exist; ``conftest.py`` counts them (``USED``) and fails the session if
the budget is exceeded.

Broken twins are tested at the same level and must be *rejected* (each twin's p-value is
typically below 1e-30); ``python scripts/power_report.py --seeds 20`` reports each twin's
detection rate over many seeds and its noncentral-chi-square power at this level.
"""
from __future__ import annotations

from specbook.grading.twins import PER_TEST_ALPHA, fit_pvalue

USED: list[str] = []


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

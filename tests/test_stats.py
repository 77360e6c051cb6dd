"""Tests for specbook.stats: pooling, exactness against scipy, Holm, power, and broken twins.

Simulations use a seeded ``numpy.random.Generator`` and binomial tolerances of
about 4 standard errors, so each is deterministic and a failure is a real one.
"""
import math

import numpy as np
import pytest
import scipy.stats as sps
from hypothesis import given, settings
from hypothesis import strategies as st

from specbook import stats as sb

PROPS = settings(derandomize=True, max_examples=150, deadline=None)
SKEWED = np.array([0.3, 0.2, 0.15, 0.1, 0.1, 0.05, 0.04, 0.03, 0.02, 0.01])


def _rejection_rate(rng, n, truth, null, trials, alpha=0.05, **kw):
    draws = rng.multinomial(n, truth, size=trials)  # (trials, V)
    return float(np.mean([sb.chisquare_gof(x, null, **kw).pvalue <= alpha for x in draws]))


# --------------------------------------------------------------------------- pooling

def test_pooling_merges_small_bins_into_rest():
    counts = np.array([58, 41, 23, 23, 24, 11, 11, 3, 4, 2])
    observed, expected = sb.pool_bins(counts, SKEWED)  # n = 200: expected 60 40 30 20 20 10 8 6 4 2
    assert np.array_equal(expected, [60, 40, 30, 20, 20, 10, 8, 6, 6])
    assert np.array_equal(observed, [58, 41, 23, 23, 24, 11, 11, 3, 6])


def test_pooling_absorbs_smallest_large_bins_when_rest_too_small():
    probs = np.array([0.5, 0.3, 0.15, 0.03, 0.02])
    observed, expected = sb.pool_bins([20, 14, 4, 1, 1], probs)  # n = 40: 20 12 6 1.2 0.8
    # rest 1.2 + 0.8 = 2 < 5, so the smallest large bin (6) joins it
    assert np.allclose(expected, [20, 12, 8])
    assert np.array_equal(observed, [20, 14, 6])


def test_no_pooling_when_min_expected_zero():
    counts = np.array([5, 1, 0, 2])
    observed, expected = sb.pool_bins(counts, [0.5, 0.2, 0.2, 0.1], min_expected=0)
    assert np.array_equal(observed, counts) and np.allclose(expected, 8 * np.array([0.5, 0.2, 0.2, 0.1]))


def test_degenerate_single_bin():
    r = sb.chisquare_gof([3, 1, 0], [0.5, 0.3, 0.2])  # n = 4: everything pools into one bin
    assert (r.bins, r.dof, r.pvalue, r.statistic, r.impossible) == (1, 0, 1.0, 0.0, 0)
    r = sb.chisquare_gof([7], [1.0])
    assert (r.bins, r.dof, r.pvalue) == (1, 0, 1.0)


@PROPS
@given(st.lists(st.floats(0.0, 1.0), min_size=1, max_size=30), st.integers(1, 500),
       st.floats(0.0, 20.0))
def test_pooling_invariants(weights, n, min_expected):
    w = np.array(weights)
    if w.sum() == 0:
        w[0] = 1.0
    probs = w / w.sum()
    counts = np.random.default_rng(0).multinomial(n, probs)
    observed, expected = sb.pool_bins(counts, probs, min_expected)
    assert observed.sum() == counts[probs > 0].sum()
    assert expected.sum() == pytest.approx(n)
    if expected.size > 1:
        assert np.all(expected >= min_expected - 1e-9)
    # pooling looks at the null only: other data, same bins
    other = np.random.default_rng(1).multinomial(n, probs)
    assert np.allclose(sb.pool_bins(other, probs, min_expected)[1], expected)


# --------------------------------------------------------------------------- exactness

def test_chisquare_equals_scipy_unpooled():
    counts = np.random.default_rng(0).multinomial(2000, SKEWED)
    r = sb.chisquare_gof(counts, SKEWED)
    ref = sps.chisquare(counts, 2000 * SKEWED)
    assert r.bins == 10 and r.dof == 9 and r.n == 2000 and r.method == "chi2"
    assert r.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-12)


def test_gtest_equals_scipy_unpooled():
    counts = np.random.default_rng(1).multinomial(2000, SKEWED)
    counts[3] = 0  # an empty (possible) bin contributes 0 to G
    r = sb.gtest_gof(counts, SKEWED)
    ref = sps.power_divergence(counts, counts.sum() * SKEWED, lambda_="log-likelihood")
    assert r.method == "g"
    assert r.statistic == pytest.approx(ref.statistic, rel=1e-12)
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-12)


def test_pooled_statistic_is_chisquare_on_pooled_bins():
    counts = np.random.default_rng(2).multinomial(150, SKEWED)
    observed, expected = sb.pool_bins(counts, SKEWED)
    r = sb.chisquare_gof(counts, SKEWED)
    ref = sps.chisquare(observed, expected)
    assert r.bins == observed.size < 10
    assert r.pvalue == pytest.approx(ref.pvalue, rel=1e-12)


def test_probs_renormalised_within_tolerance():
    counts = [30, 30, 40]
    a = sb.chisquare_gof(counts, [0.3, 0.3, 0.4 + 5e-7])
    b = sb.chisquare_gof(counts, [0.3, 0.3, 0.4])
    assert a.pvalue == pytest.approx(b.pvalue, rel=1e-5)
    probs = np.array([0.3, 0.3, 0.4 + 5e-7])
    exact = sps.chisquare(counts, 100 * probs / probs.sum())
    assert a.statistic == pytest.approx(exact.statistic, rel=1e-12)
    assert sb.pool_bins(counts, probs)[1].sum() == pytest.approx(100, rel=1e-14)


# --------------------------------------------------------------------------- impossible outcomes

@pytest.mark.parametrize("test", [sb.chisquare_gof, sb.gtest_gof])
def test_impossible_observation_gives_p_zero(test):
    probs = [0.5, 0.5, 0.0]
    r = test([500, 500, 1], probs)
    assert r.pvalue == 0.0 and r.statistic == math.inf and r.impossible == 1 and r.n == 1001
    ok = test([500, 500, 0], probs)
    assert ok.pvalue == 1.0 and ok.impossible == 0 and ok.bins == 2  # zero bin not counted
    # even when everything else pools to a single bin
    assert test([1, 0, 2], [0.6, 0.4, 0.0]).pvalue == 0.0


# --------------------------------------------------------------------------- Holm

def test_holm_hand_worked():
    # sorted: 0.005 <= .05/4 reject; 0.01 <= .05/3 reject; 0.03 > .05/2 stop (0.04 kept too)
    assert sb.holm([0.01, 0.04, 0.03, 0.005], 0.05) == [True, False, False, True]
    # step-down stops at the first acceptance even if a later p would pass its own threshold
    assert sb.holm([0.001, 0.04, 0.049], 0.05) == [True, False, False]
    assert sb.holm([0.001, 0.02, 0.04], 0.05) == [True, True, True]  # .001<=.0167, .02<=.025, .04<=.05
    assert sb.holm([], 0.05) == []
    assert sb.holm([0.05], 0.05) == [True]


@PROPS
@given(st.lists(st.floats(0.0, 1.0), max_size=12), st.floats(0.001, 0.2))
def test_holm_between_bonferroni_and_unadjusted(pvalues, alpha):
    flags = sb.holm(pvalues, alpha)
    k = len(pvalues)
    for p, f in zip(pvalues, flags):
        if p <= alpha / k:
            assert f  # at least Bonferroni's rejections
        if f:
            assert p <= alpha  # never more than unadjusted
    rejected = [p for p, f in zip(pvalues, flags) if f]
    kept = [p for p, f in zip(pvalues, flags) if not f]
    assert not rejected or not kept or max(rejected) <= min(kept)


def test_run_family():
    fam = sb.run_family({"a": 0.001, "b": 0.3, "c": 0.03}, 0.05)  # .03 > .05/2
    assert fam.rejected == ("a",) and not fam.passed and fam.alpha == 0.05
    assert "REJECT" in str(fam) and "1 rejected" in str(fam)
    assert sb.run_family({"a": 0.5}, 0.05).passed


# --------------------------------------------------------------------------- false alarms and power

def test_false_alarm_rate_under_null_is_alpha():
    rate = _rejection_rate(np.random.default_rng(10), 300, SKEWED, SKEWED, trials=4000)
    assert abs(rate - 0.05) < 4 * math.sqrt(0.05 * 0.95 / 4000) + 0.005


def test_broken_twin_unpooled_small_bins_inflate_false_alarms():
    # many bins with expected count 0.1: without pooling the chi2 approximation fails
    null = np.r_[0.4, 0.4, np.full(200, 0.2 / 200)]
    rng = np.random.default_rng(11)
    draws = rng.multinomial(100, null, size=2000)
    pooled = np.mean([sb.chisquare_gof(x, null).pvalue <= 0.05 for x in draws])
    unpooled = np.mean([sb.chisquare_gof(x, null, min_expected=0).pvalue <= 0.05 for x in draws])
    assert abs(pooled - 0.05) < 0.025
    assert unpooled > 0.12  # the twin raises false alarms on a true null


def test_power_matches_simulation():
    alt = SKEWED.copy()
    alt[0] -= 0.03
    alt[9] += 0.03
    n = sb.sample_size_for_power(SKEWED, alt, alpha=0.05, power=0.6)
    predicted = sb.chisquare_power(SKEWED, alt, n, alpha=0.05)
    assert predicted >= 0.6 > sb.chisquare_power(SKEWED, alt, n - 1, alpha=0.05)
    rate = _rejection_rate(np.random.default_rng(12), n, alt, SKEWED, trials=2000)
    assert abs(rate - predicted) < 0.05  # ~4 MC standard errors plus approximation error


def test_power_with_pooling_matches_simulation():
    alt = SKEWED * np.r_[np.ones(7), 2.5, 2.5, 2.5]
    alt /= alt.sum()
    n = 120  # the three last bins pool at this n
    predicted = sb.chisquare_power(SKEWED, alt, n, alpha=0.05)
    rate = _rejection_rate(np.random.default_rng(13), n, alt, SKEWED, trials=2000)
    assert 0.2 < predicted < 0.95
    assert abs(rate - predicted) < 0.06


def test_power_edge_cases():
    assert sb.chisquare_power(SKEWED, SKEWED, 500, alpha=0.05) == pytest.approx(0.05)
    # mass 0.01 on a null-impossible token: caught with probability 1 - 0.99^n at least
    null = np.array([0.5, 0.5, 0.0])
    alt = np.array([0.495, 0.495, 0.01])
    assert sb.chisquare_power(null, alt, 300, alpha=0.05) >= 1 - 0.99**300
    assert sb.chisquare_power([1.0, 0.0], [0.9, 0.1], 10, alpha=0.05) == pytest.approx(1 - 0.9**10)
    # off the impossible token this alternative IS the null: only the impossible draws reject
    for n in (10, 100):
        power = sb.chisquare_power(null, [0.45, 0.45, 0.1], n, alpha=0.05)
        assert power == pytest.approx(1 - 0.9**n * 0.95, rel=1e-9)
    assert sb.sample_size_for_power([1.0, 0.0], [0.9, 0.1], alpha=0.05, power=0.99) == 44
    powers = [sb.chisquare_power(SKEWED, np.roll(SKEWED, 1), n, alpha=0.05) for n in (20, 50, 100, 200)]
    assert powers == sorted(powers)


# --------------------------------------------------------------------------- the proportions mistake

def test_broken_twin_proportions_cannot_detect_a_loaded_die():
    fair = np.full(6, 1 / 6)
    loaded = np.array([0.15, 0.15, 0.15, 0.15, 0.15, 0.25])
    n = 6000
    counts = np.random.default_rng(20).multinomial(n, loaded)
    right = sb.chisquare_gof(counts, fair)
    assert right.pvalue < 1e-20  # the correct test sees it at once
    # the mistake: proportions passed where counts belong (as in scipy's own sampling tests)
    wrong = sps.chisquare(counts / n, fair)
    assert wrong.pvalue > 0.99
    assert wrong.statistic == pytest.approx(right.statistic / n)
    # and this library refuses the mistake outright
    with pytest.raises(ValueError, match="not proportions"):
        sb.chisquare_gof(counts / n, fair)


# --------------------------------------------------------------------------- counts_of and bad input

def test_counts_of_inputs():
    assert np.array_equal(sb.counts_of([0, 2, 2, 3], 5), [1, 0, 2, 1, 0])
    assert np.array_equal(sb.counts_of(np.array([[1, 1], [0, 1]]), 2), [1, 3])
    assert sb.counts_of([], 3).tolist() == [0, 0, 0]
    torch = pytest.importorskip("torch")
    t = torch.tensor([4, 4, 1])
    out = sb.counts_of(t, 6)
    assert out.dtype == np.int64 and out.tolist() == [0, 1, 0, 0, 2, 0]


@pytest.mark.parametrize("call, text", [
    (lambda: sb.chisquare_gof([1, 2], [0.5, 0.3, 0.2]), "same length"),
    (lambda: sb.chisquare_gof([1, 2], [0.5, 0.4]), "sum to 1"),
    (lambda: sb.chisquare_gof([1, 2], [1.2, -0.2]), "non-negative"),
    (lambda: sb.chisquare_gof([1, 2], [float("nan"), 0.5]), "probs"),
    (lambda: sb.chisquare_gof([1, -2], [0.5, 0.5]), "counts"),
    (lambda: sb.chisquare_gof([1.5, 2], [0.5, 0.5]), "not proportions"),
    (lambda: sb.chisquare_gof([0, 0], [0.5, 0.5]), "at least one"),
    (lambda: sb.chisquare_gof([[1, 2]], [0.5, 0.5]), "1-D"),
    (lambda: sb.gtest_gof([1, 2], [0.5, 0.5], min_expected=-1), "min_expected"),
    (lambda: sb.holm([0.1, 1.2], 0.05), "pvalues"),
    (lambda: sb.holm([0.1, float("nan")], 0.05), "pvalues"),
    (lambda: sb.holm([0.1], 1.5), "alpha"),
    (lambda: sb.chisquare_power([0.5, 0.5], [0.4, 0.6], 0, alpha=0.05), "n must"),
    (lambda: sb.chisquare_power([0.5, 0.5], [0.4, 0.3, 0.3], 10, alpha=0.05), "same length"),
    (lambda: sb.chisquare_power([0.5, 0.5], [0.4, 0.6], 10, alpha=0.0), "alpha"),
    (lambda: sb.sample_size_for_power([0.5, 0.5], [0.5, 0.5], alpha=0.05, power=0.8), "equals"),
    (lambda: sb.sample_size_for_power([0.5, 0.5], [0.4, 0.6], alpha=0.05, power=0.01), "power"),
    (lambda: sb.counts_of([0, 3], 3), "samples"),
    (lambda: sb.counts_of([0.0, 1.0], 3), "integer"),
    (lambda: sb.counts_of([0], 0), "support_size"),
])
def test_bad_input_raises(call, text):
    with pytest.raises(ValueError, match=text):
        call()

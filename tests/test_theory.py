"""Tests for specbook.theory: the lesson's numbers, limits, round trips, bad input."""
import math
import re

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbook import theory as th

ALPHAS = st.floats(0.0, 1.0, allow_nan=False)
GAMMAS = st.integers(0, 40)
PROPS = settings(derandomize=True, max_examples=200, deadline=None)


# --------------------------------------------------------------------------- lesson numbers

@pytest.mark.parametrize("alpha, gamma, expected", [
    (0.5, 3, 1.875), (0.5, 10, 1.9990), (0.7, 4, 2.7731), (0.9, 4, 4.0951),
    (0.7, 10, 3.2674), (0.8, 4, 3.3616), (0.4, 4, 1.6496),
])
def test_expected_tokens_reference(alpha, gamma, expected):
    assert th.expected_tokens(alpha, gamma) == pytest.approx(expected, abs=5e-5)


def test_lesson_ratios():
    # "7% more tokens", "a 48% gain", "gains 18%"
    assert th.relative_gain(th.expected_tokens(0.5, 10), th.expected_tokens(0.5, 3)) == pytest.approx(0.066, abs=5e-3)
    assert th.relative_gain(th.expected_tokens(0.9, 4), th.expected_tokens(0.7, 4)) == pytest.approx(0.48, abs=5e-3)
    assert th.relative_gain(th.expected_tokens(0.7, 10), th.expected_tokens(0.7, 4)) == pytest.approx(0.18, abs=5e-3)


@pytest.mark.parametrize("alpha, c, expected", [
    (0.8, 0.05, 2.80), (0.8, 0.15, 2.10), (0.5, 0.15, 1.21), (0.4, 0.30, 0.75),
])
def test_speedup_reference(alpha, c, expected):
    assert th.speedup(alpha, 4, c) == pytest.approx(expected, abs=5e-3)


def test_return_types():
    assert type(th.expected_tokens(0.5, 3)) is float
    assert type(th.speedup(0.5, 3, 0.1)) is float
    out = th.expected_tokens(np.array([0.5, 0.9]), 4)
    assert isinstance(out, np.ndarray) and out.shape == (2,)
    assert np.allclose(out, [1.9375, 4.0951])


# --------------------------------------------------------------------------- limits

def test_alpha_one_and_zero_exact():
    for g in range(0, 12):
        assert th.expected_tokens(1.0, g) == g + 1
        assert th.expected_tokens(0.0, g) == 1.0
    assert th.expected_tokens_limit(1.0) == math.inf
    assert th.expected_tokens_limit(0.5) == 2.0


def test_near_one_has_no_cancellation():
    # 1 + a + ... + a^g evaluated as an explicit sum in exact-ish arithmetic
    for a in (1 - 1e-9, 1 - 1e-12, 1 - 2**-40):
        direct = math.fsum(a**k for k in range(8))
        assert th.expected_tokens(a, 7) == pytest.approx(direct, rel=1e-13)


def test_large_gamma_tends_to_limit():
    for a in (0.1, 0.5, 0.9):
        assert th.expected_tokens(a, 2000) == pytest.approx(th.expected_tokens_limit(a), rel=1e-12)


def test_yield_table_shape_and_values():
    table = th.yield_table([0.5, 0.7, 0.9], [3, 4, 10])
    assert table.shape == (3, 3)
    assert table[0, 0] == pytest.approx(1.875)
    assert table[2, 1] == pytest.approx(4.0951, abs=5e-5)
    assert np.all(np.diff(table, axis=0) > 0) and np.all(np.diff(table, axis=1) > 0)


# --------------------------------------------------------------------------- properties

@PROPS
@given(ALPHAS, GAMMAS)
def test_expected_tokens_bounds_and_geometric_sum(alpha, gamma):
    e = th.expected_tokens(alpha, gamma)
    assert 1.0 - 1e-12 <= e <= gamma + 1 + 1e-12
    assert e == pytest.approx(math.fsum(alpha**k for k in range(gamma + 1)), rel=1e-9)


@PROPS
@given(ALPHAS, st.one_of(GAMMAS, st.integers(0, 10**30)))
def test_expected_tokens_within_its_bounds_exactly_in_floats(alpha, gamma):
    # no slack: never below 1, above gamma + 1 or above the limit 1 / (1 - alpha), never NaN,
    # even where rounding would leave the true value by an ulp (gamma = 0) or gamma is huge
    e = th.expected_tokens(alpha, gamma)
    assert 1.0 <= e <= min(gamma + 1, th.expected_tokens_limit(alpha))
    table = th.yield_table([alpha], [gamma])
    assert table[0, 0] == e and not np.isnan(table).any()


@PROPS
@given(ALPHAS, st.integers(0, 10**30), st.floats(0.0, 1e6), st.floats(1e-300, 1e6))
def test_speedup_and_break_even_cost_are_numbers_for_legal_input(alpha, gamma, c, v):
    try:
        s = th.speedup(alpha, gamma, c, v)
    except ValueError as e:  # the one legal case that may not give a number: a tiny v overflows
        assert "overflows" in str(e) and "verify_cost" in str(e)
    else:
        assert math.isfinite(s) and s >= 0
    if gamma >= 1:
        assert math.isfinite(th.break_even_cost(alpha, gamma, v))


@PROPS
@given(ALPHAS, ALPHAS, GAMMAS)
def test_expected_tokens_increasing_in_alpha(a1, a2, gamma):
    lo, hi = sorted((a1, a2))
    assert th.expected_tokens(lo, gamma) <= th.expected_tokens(hi, gamma) * (1 + 1e-12)


@PROPS
@given(ALPHAS, GAMMAS)
def test_expected_tokens_increasing_in_gamma(alpha, gamma):
    assert th.expected_tokens(alpha, gamma + 1) >= th.expected_tokens(alpha, gamma) * (1 - 1e-12)
    assert th.expected_tokens(alpha, gamma) <= th.expected_tokens_limit(alpha) * (1 + 1e-12)


@PROPS
@given(ALPHAS, st.integers(1, 20), st.floats(0.0, 1.0), st.floats(0.2, 3.0))
def test_speedup_decreasing_in_costs(alpha, gamma, c, v):
    s = th.speedup(alpha, gamma, c, v)
    assert th.speedup(alpha, gamma, c + 0.1, v) < s
    assert th.speedup(alpha, gamma, c, v + 0.1) < s


@PROPS
@given(st.integers(1, 16), st.floats(0.0, 0.5), st.floats(0.5, 2.0))
def test_break_even_alpha_round_trip(gamma, c, v):
    a = th.break_even_alpha(gamma, c, v)
    if a == math.inf:
        assert th.speedup(1.0, gamma, c, v) < 1.0
    elif a == 0.0:
        assert th.speedup(0.0, gamma, c, v) >= 1.0
    else:
        assert 0.0 < a <= 1.0
        assert th.speedup(a, gamma, c, v) == pytest.approx(1.0, abs=1e-12)
        # pays above, loses below
        assert th.speedup(min(1.0, a + 1e-6), gamma, c, v) > 1.0 or a + 1e-6 > 1.0
        assert th.speedup(max(0.0, a - 1e-6), gamma, c, v) < 1.0


@PROPS
@given(ALPHAS, st.integers(1, 16), st.floats(0.5, 2.0))
def test_break_even_cost_round_trip(alpha, gamma, v):
    c = th.break_even_cost(alpha, gamma, v)
    if c >= 0:
        assert th.speedup(alpha, gamma, c, v) == pytest.approx(1.0, abs=1e-12)
    else:  # even a free draft loses
        assert th.speedup(alpha, gamma, 0.0, v) < 1.0


# --------------------------------------------------------------------------- break-even and optimal gamma

def test_break_even_examples():
    a = th.break_even_alpha(4, 0.30)
    assert 0.4 < a < 0.8  # the lesson's 0.4 loses at c = 0.3
    assert th.speedup(a, 4, 0.30) == pytest.approx(1.0, abs=1e-12)
    assert th.break_even_alpha(4, 0.0) == 0.0  # free draft, free verify: never loses
    assert th.break_even_alpha(4, 2.0) == math.inf  # 4*2+1 = 9 > 5 tokens at best
    assert th.break_even_alpha(4, 1.0) == 1.0  # 4*1+1 = 5 = gamma+1 exactly at alpha 1
    assert th.break_even_alpha(0, 0.3, verify_cost=1.2) == math.inf
    assert th.break_even_cost(0.4, 4) == pytest.approx((1.6496 - 1) / 4)
    assert th.break_even_cost(0.0, 4, verify_cost=1.5) == pytest.approx(-0.125)


def test_break_even_with_measured_curve():
    curve = lambda g: 1.0 + 0.05 * g  # noqa: E731
    a = th.break_even_alpha(4, 0.1, curve)
    assert th.speedup(a, 4, 0.1, curve) == pytest.approx(1.0, abs=1e-12)
    assert a > th.break_even_alpha(4, 0.1)


def _brute_optimum(alpha, c, v, m):
    best = (0, 1.0)
    for g in range(1, m + 1):
        s = th.speedup(alpha, g, c, v(g) if callable(v) else v)
        if s > best[1]:
            best = (g, s)
    return best


@pytest.mark.parametrize("alpha, c", [(0.8, 0.05), (0.8, 0.15), (0.5, 0.15), (0.4, 0.3), (0.95, 0.01), (0.1, 0.5)])
def test_optimal_gamma_matches_brute_force(alpha, c):
    g, s = th.optimal_gamma(alpha, c)
    assert (g, s) == pytest.approx(_brute_optimum(alpha, c, 1.0, 64))
    if g > 0:
        assert s >= th.speedup(alpha, g + 1, c) and (g == 1 or s >= th.speedup(alpha, g - 1, c))


def test_optimal_gamma_trends():
    gs_c = [th.optimal_gamma(0.8, c)[0] for c in (0.01, 0.05, 0.15, 0.3)]
    assert gs_c == sorted(gs_c, reverse=True) and gs_c[0] > gs_c[-1]
    gs_a = [th.optimal_gamma(a, 0.05)[0] for a in (0.5, 0.7, 0.9)]
    assert gs_a == sorted(gs_a) and gs_a[0] < gs_a[-1]
    assert th.optimal_gamma(0.1, 0.5) == (0, 1.0)  # do not speculate
    assert th.optimal_gamma(1.0, 0.0, max_gamma=16) == (16, 17.0)


def test_optimal_gamma_with_verify_curve():
    steep = lambda g: 1.0 + 0.25 * g  # noqa: E731  compute-bound: positions cost time
    g_flat, _ = th.optimal_gamma(0.8, 0.05)
    g_steep, s_steep = th.optimal_gamma(0.8, 0.05, verify_cost=steep)
    assert g_steep < g_flat
    assert (g_steep, s_steep) == pytest.approx(_brute_optimum(0.8, 0.05, steep, 64))


# --------------------------------------------------------------------------- bad input

@pytest.mark.parametrize("call, arg", [
    (lambda: th.expected_tokens(1.5, 3), "alpha"),
    (lambda: th.expected_tokens(-0.1, 3), "alpha"),
    (lambda: th.expected_tokens(float("nan"), 3), "alpha"),
    (lambda: th.expected_tokens([0.5, float("nan")], 3), "alpha"),
    (lambda: th.expected_tokens(0.5, -1), "gamma"),
    (lambda: th.expected_tokens(0.5, 2.5), "gamma"),
    (lambda: th.expected_tokens(0.5, float("inf")), "gamma"),
    (lambda: th.expected_tokens(0.5, True), "gamma"),
    (lambda: th.expected_tokens("x", 3), "alpha"),
    (lambda: th.expected_tokens_limit(2.0), "alpha"),
    (lambda: th.speedup(0.5, 3, -0.1), "c"),
    (lambda: th.speedup(0.5, 3, float("nan")), "c"),
    (lambda: th.speedup(0.5, 3, 0.1, 0.0), "verify_cost"),
    (lambda: th.speedup(0.5, 3, 0.1, -1.0), "verify_cost"),
    (lambda: th.speedup(0.5, 3, 0.1, lambda g: float("nan")), "verify_cost(3)"),
    (lambda: th.break_even_alpha(-1, 0.1), "gamma"),
    (lambda: th.break_even_alpha(4, -0.1), "c"),
    (lambda: th.break_even_alpha(4, 0.1, 0.0), "verify_cost"),
    (lambda: th.break_even_alpha([4, 5], 0.1), "scalar"),
    (lambda: th.break_even_cost(0.5, 0), "gamma"),
    (lambda: th.break_even_cost(1.1, 4), "alpha"),
    (lambda: th.optimal_gamma(0.5, 0.1, max_gamma=0), "max_gamma"),
    (lambda: th.optimal_gamma(0.5, -1.0), "c"),
    (lambda: th.optimal_gamma(float("nan"), 0.1), "alpha"),
    (lambda: th.yield_table([0.5, 2.0], [1]), "alphas"),
    (lambda: th.yield_table([0.5], [1.5]), "gammas"),
    (lambda: th.relative_gain(1.0, 0.0), "old"),
])
def test_bad_input_raises_naming_argument(call, arg):
    with pytest.raises(ValueError, match=re.escape(arg)):
        call()


@pytest.mark.parametrize("call, arg, value", [
    # gamma is a count: an int >= 0. A float is refused even when it looks whole: above 2**53
    # every float does, and expected_tokens(0.8, 1e19) used to answer 5.000000000000001.
    (lambda: th.expected_tokens(0.8, 1e19), "gamma", "1e+19"),
    (lambda: th.expected_tokens(0.8, 4.0), "gamma", "4.0"),
    (lambda: th.expected_tokens(0.8, np.float64(4.0)), "gamma", "4.0"),
    (lambda: th.expected_tokens(0.8, [1, 2.5]), "gamma", "2.5"),
    (lambda: th.expected_tokens(0.8, np.array([1.0, 2.0])), "gamma", "1.0"),
    (lambda: th.expected_tokens(0.8, [3, -2]), "gamma", "-2"),
    (lambda: th.expected_tokens(0.8, "3"), "gamma", "'3'"),
    (lambda: th.expected_tokens(0.8, None), "gamma", "None"),
    (lambda: th.expected_tokens(0.8, 10**400), "gamma", "1000"),
    (lambda: th.speedup(0.8, 1e19, 0.1), "gamma", "1e+19"),
    (lambda: th.break_even_alpha(4.0, 0.1), "gamma", "4.0"),
    (lambda: th.break_even_cost(0.8, 2.0), "gamma", "2.0"),
    (lambda: th.optimal_gamma(0.8, 0.1, max_gamma=16.0), "max_gamma", "16.0"),
    (lambda: th.yield_table([0.5], [1e19]), "gammas", "1e+19"),
    (lambda: th.speedup(0.5, 3, 0.0, 1e-310), "verify_cost", "1e-310"),
])
def test_bad_input_names_argument_and_value(call, arg, value):
    with pytest.raises(ValueError, match=f"{re.escape(arg)}.*{re.escape(value)}"):
        call()


def test_integer_gammas_of_every_kind_are_accepted():
    want = th.expected_tokens(0.8, 4)
    assert th.expected_tokens(0.8, np.int64(4)) == th.expected_tokens(0.8, np.uint8(4)) == want
    assert th.expected_tokens(0.8, np.array([4, 4]))[1] == th.expected_tokens(0.8, [4])[0] == want
    # a huge int gamma is legal: the answer is the limit, never above it
    assert th.expected_tokens(0.8, 10**19) == th.expected_tokens_limit(0.8)
    assert th.expected_tokens(0.8, 10**19) <= th.expected_tokens_limit(0.8)

"""specbook.roofline.slowest_row: the rounds one row needs (exact law), the slowest row of a static batch."""
import pytest

from specbook import roofline as rl
from specbook import theory


def _cdf_by_recursion(alpha, gamma, n, r, truncate=False):
    """P(a row finishes n tokens within r rounds), by recursion over the first round (exact, in floats)."""
    if n <= 0:
        return 1.0
    if r == 0:
        return 0.0
    g = min(gamma, n - 1) if truncate else gamma  # a loop that drafts at most what is left, minus the bonus
    law = [alpha ** (k - 1) * (1 - alpha) for k in range(1, g + 1)] + [alpha ** g]
    return sum(p * _cdf_by_recursion(alpha, gamma, n - k, r - 1, truncate) for k, p in enumerate(law, start=1))


@pytest.mark.parametrize("alpha, gamma, n", [(0.5, 2, 7), (0.8, 4, 9), (0.3, 1, 6), (0.9, 3, 8)])
def test_rounds_needed_cdf_by_recursion(alpha, gamma, n):
    cdf = rl.rounds_needed_cdf(alpha, gamma, n)
    assert len(cdf) == n + 1 and cdf[0] == 0.0 and cdf[-1] == pytest.approx(1.0)
    for r in range(n + 1):
        assert cdf[r] == pytest.approx(_cdf_by_recursion(alpha, gamma, n, r), abs=1e-12)
        # drafting fewer near the budget needs exactly as many rounds (the docstring's claim)
        assert cdf[r] == pytest.approx(_cdf_by_recursion(alpha, gamma, n, r, truncate=True), abs=1e-12)


def test_rounds_needed_edge_cases():
    assert rl.rounds_needed_cdf(1.0, 4, 12) == [0.0, 0.0, 0.0, 1.0] + [1.0] * 9  # 5 tokens a round: 3 rounds
    assert rl.rounds_needed_cdf(0.0, 4, 5) == [0.0] * 5 + [1.0]  # one token a round
    assert rl.rounds_needed_cdf(0.7, 0, 3) == [0.0, 0.0, 0.0, 1.0]  # gamma 0 is plain decoding
    assert rl.expected_slowest_rounds([0.8, 0.8, 0.0], 4, 20) == pytest.approx(20.0)  # the row that accepts nothing


def test_expected_slowest_rounds_is_the_mean_of_the_max():
    n, g = 12, 3
    cdfs = {a: rl.rounds_needed_cdf(a, g, n) for a in (0.5, 0.9)}
    pmf = {a: [c[r] - c[r - 1] for r in range(1, n + 1)] for a, c in cdfs.items()}  # P(R = r), r = 1..n
    mean_max = sum(max(r1, r2) * p1 * p2 for r1, p1 in enumerate(pmf[0.5], start=1)
                   for r2, p2 in enumerate(pmf[0.9], start=1))
    assert rl.expected_slowest_rounds([0.5, 0.9], g, n) == pytest.approx(mean_max, abs=1e-12)
    one = rl.expected_slowest_rounds([0.9], g, n)
    assert one == pytest.approx(sum(r * p for r, p in enumerate(pmf[0.9], start=1)), abs=1e-12)
    widths = [rl.expected_slowest_rounds([0.8] * b, 4, 64) for b in (1, 2, 8, 64, 512)]
    assert widths == sorted(widths) and widths[0] < widths[-1]  # the wider the batch, the longer it waits


def test_slowest_row_yield_tends_to_the_mean_for_one_long_row():
    e = float(theory.expected_tokens(0.8, 4))
    assert rl.slowest_row_yield([0.8], 4, 2000) == pytest.approx(e, rel=5e-3)
    assert rl.slowest_row_yield([0.8] * 64, 4, 256) < rl.slowest_row_yield([0.8] * 8, 4, 256) < e


@pytest.mark.parametrize("alpha, gamma", [(0.0, 4), (0.3, 2), (0.73, 4), (0.95, 8), (1.0, 3)])
def test_alpha_for_yield_inverts_the_expected_tokens(alpha, gamma):
    assert rl.alpha_for_yield(float(theory.expected_tokens(alpha, gamma)), gamma) == pytest.approx(alpha, abs=1e-9)


@pytest.mark.parametrize("call, name", [
    (lambda: rl.rounds_needed_cdf(1.5, 4, 10), "alpha"),
    (lambda: rl.rounds_needed_cdf(0.5, 4, 0), "new_tokens"),
    (lambda: rl.expected_slowest_rounds([], 4, 10), "alphas"),
    (lambda: rl.expected_slowest_rounds(0.8, 4, 10), "alphas"),
    (lambda: rl.alpha_for_yield(6.0, 4), "tokens_per_round"),
])
def test_bad_input_names_the_argument(call, name):
    with pytest.raises(ValueError, match=name):
        call()

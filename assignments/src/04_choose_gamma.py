# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 4: choose the draft length from measurements, and predict the speedup
#
# You are handed three measurements from one machine and one drafter, and must decide how many
# tokens to draft per round (gamma) and say how much faster decoding will be.
#
# * a **verify-cost curve**: the time of one target pass over n positions, relative to one
#   position, v(n).  Leviathan et al. (2023) assume v = 1 (extra positions ride along for free
#   while decoding is memory-bound); on a small CPU they do not (see `docs/drafters.md`);
# * the **draft cost** c: one draft step as a fraction of one target step;
# * a **histogram of accepted drafts** from a run at gamma = 4: how many rounds accepted
#   0, 1, 2, 3 or all 4 of their drafts.
#
# One round with gamma drafts costs gamma c + v(gamma + 1) target steps (gamma draft steps, then
# one verification pass over the pending token and the gamma drafts) and yields, on average,
#
# $$E(\alpha, \gamma) = \frac{1 - \alpha^{\gamma+1}}{1 - \alpha} = 1 + \alpha + \dots + \alpha^\gamma$$
#
# tokens, the last term being the bonus token (Leviathan et al. 2023, Eq. 1).  Here alpha is the
# probability that a draft which is *verified* is accepted (the course glossary calls it alpha;
# the share of *proposed* drafts that were accepted is a different, smaller number).
#
# **Grading.** 10 points: estimating alpha (2), the expected yield (2), the speedup with a
# measured curve (3) and the decision (3).  Hidden tests compare your functions with the
# reference on other inputs (tolerance 1e-6; 0.005 for the decision).  Each part is graded on its
# own: the tests of parts 3 and 4 use reference versions of the earlier parts while they run, so
# one mistake costs points once.  Write the arithmetic yourself: a function that calls
# `specbook.theory` scores nothing on its part (`numpy` and the standard library are enough).

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math

# The measurements (example figures; the verify-cost curve is this course's 2-core CPU, docs/drafters.md).
VERIFY_COST = {1: 1.00, 2: 1.13, 3: 1.18, 4: 1.35, 5: 1.47, 6: 1.53}  # n positions -> v(n)
TARGET_STEP_MS = 15.0  # one target step (one position)
DRAFT_STEP_MS = 3.3  # one draft step
RUN_GAMMA = 4  # the draft length of the measured run
ACCEPTED_HISTOGRAM = [212, 160, 121, 88, 319]  # [k]: rounds that accepted exactly k of their 4 drafts

# %% [markdown] nbgrader={"grade": false, "grade_id": "alpha_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: alpha from the histogram
#
# Write `estimate_alpha(histogram, gamma)`: the number of accepted drafts divided by the number of
# **verified** drafts.  A round that accepted k < gamma drafts verified k + 1 of them (the (k+1)-th
# was rejected, and the drafts after it were never tested); a round that accepted all gamma
# verified gamma.  This is the maximum-likelihood estimate of alpha under the formula's model
# (each verified draft survives independently with probability alpha).

# %% nbgrader={"grade": false, "grade_id": "estimate_alpha", "locked": false, "schema_version": 3, "solution": true}
def estimate_alpha(histogram: list[int], gamma: int) -> float:
    """accepted / verified, from histogram[k] = rounds with exactly k accepted drafts (k = 0..gamma)."""
    ### BEGIN SOLUTION
    accepted = sum(k * n for k, n in enumerate(histogram))
    verified = sum(min(k + 1, gamma) * n for k, n in enumerate(histogram))
    return accepted / verified
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "alpha_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert estimate_alpha([5, 0, 0], 2) == 0.0, "every first draft rejected: alpha = 0"
assert estimate_alpha([0, 0, 7], 2) == 1.0, "every draft accepted: alpha = 1"
assert isinstance(estimate_alpha(ACCEPTED_HISTOGRAM, RUN_GAMMA), float)
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
from specbook.grading.own_work import assert_own_work

_THEORY = tuple(f"specbook.theory.{f}" for f in ("expected_tokens", "_yield", "expected_tokens_limit", "speedup",
                                                 "break_even_cost", "break_even_alpha", "optimal_gamma"))
assert_own_work(estimate_alpha, forbidden=_THEORY, calls=[([3, 2, 1], 2)])


def _ref_alpha(h, g):
    return sum(k * n for k, n in enumerate(h)) / sum(min(k + 1, g) * n for k, n in enumerate(h))


for _h, _g in [([1, 1], 1), ([3, 2, 1], 2), ([212, 160, 121, 88, 319], 4), ([40, 0, 0, 0, 0, 0, 9], 6), ([2, 5, 0, 1], 3)]:
    assert abs(estimate_alpha(_h, _g) - _ref_alpha(_h, _g)) < 1e-9, (
        f"estimate_alpha({_h}, {_g}) = {estimate_alpha(_h, _g)!r}: alpha is accepted / verified, and a round that "
        "stopped at a rejection verified one draft more than it accepted")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "yield_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: the expected yield
#
# Write `expected_tokens(alpha, gamma)`: E(alpha, gamma) above, bonus token included.  It must work
# at alpha = 1 (where the fraction is 0/0 and the value is gamma + 1).

# %% nbgrader={"grade": false, "grade_id": "expected_tokens", "locked": false, "schema_version": 3, "solution": true}
def expected_tokens(alpha: float, gamma: int) -> float:
    """Mean tokens per verification pass: 1 + alpha + ... + alpha**gamma."""
    ### BEGIN SOLUTION
    return float(sum(alpha ** i for i in range(gamma + 1)))
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "yield_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert expected_tokens(0.0, 4) == 1.0, "alpha = 0: every round still emits one token"
assert abs(expected_tokens(1.0, 4) - 5.0) < 1e-12, "alpha = 1: gamma drafts plus the bonus token"
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
from specbook import theory as _theory

assert_own_work(expected_tokens, forbidden=_THEORY, calls=[(0.5, 3), (1.0, 4)])
for _a in (0.1, 0.5, 0.77, 0.9, 0.999):
    for _g in (1, 2, 3, 4, 7, 10):
        assert abs(expected_tokens(_a, _g) - _theory.expected_tokens(_a, _g)) < 1e-6, (
            f"expected_tokens({_a}, {_g}) = {expected_tokens(_a, _g)!r}, expected {_theory.expected_tokens(_a, _g)!r}: "
            "the sum runs from alpha**0 to alpha**gamma (the bonus token is the last term)")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "speedup_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 3: the speedup on this machine
#
# Write `predicted_speedup(alpha, gamma, c, verify_cost)`: expected tokens per round divided by the
# round's cost in target steps, gamma c + v(gamma + 1), with `verify_cost` a dict n -> v(n) like
# `VERIFY_COST`.  gamma = 0 means plain decoding: return 1.0.

# %% nbgrader={"grade": false, "grade_id": "predicted_speedup", "locked": false, "schema_version": 3, "solution": true}
def predicted_speedup(alpha: float, gamma: int, c: float, verify_cost: dict[int, float]) -> float:
    """E(alpha, gamma) / (gamma * c + v(gamma + 1)); 1.0 for gamma = 0."""
    ### BEGIN SOLUTION
    if gamma == 0:
        return 1.0
    return expected_tokens(alpha, gamma) / (gamma * c + verify_cost[gamma + 1])
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "speedup_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
# The speedup is graded alone: while this cell runs, `expected_tokens` is a reference version (a mistake in part 2 is not counted twice).
from specbook import theory as _theory


def _reference_expected_tokens(alpha, gamma):
    return float(_theory.expected_tokens(alpha, gamma))


_your_expected_tokens, expected_tokens = expected_tokens, _reference_expected_tokens
try:
    assert predicted_speedup(0.5, 0, 0.2, VERIFY_COST) == 1.0
    flat = {n: 1.0 for n in range(1, 8)}
    assert abs(predicted_speedup(0.8, 4, 0.05, flat) - 2.80) < 0.01, "the paper's worked case: 3.36 / 1.2"
    ### BEGIN HIDDEN TESTS
    from specbook import theory as _theory

    assert_own_work(predicted_speedup, forbidden=_THEORY, calls=[(0.6, 3, 0.1, VERIFY_COST)],
                    allowed=(_reference_expected_tokens,))
    _curve = {1: 1.0, 2: 1.05, 3: 1.4, 4: 1.41, 5: 1.9, 6: 2.5, 7: 2.6, 8: 3.0}
    for _a, _g, _c in [(0.77, 2, 0.22), (0.6, 3, 0.1), (0.9, 5, 0.0), (0.3, 1, 0.4), (0.95, 7, 0.05)]:
        _want = _theory.speedup(_a, _g, _c, lambda g: _curve[g + 1])
        _got = predicted_speedup(_a, _g, _c, _curve)
        assert abs(_got - _want) < 1e-6, (
            f"predicted_speedup({_a}, {_g}, {_c}, curve) = {_got!r}, expected {_want!r}: a round is gamma draft steps "
            "plus one pass over gamma + 1 positions, v(gamma + 1)")
    ### END HIDDEN TESTS
finally:
    expected_tokens = _your_expected_tokens

# %% [markdown] nbgrader={"grade": false, "grade_id": "answers_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 4: the decision
#
# Write `decide(alpha, c, verify_cost, max_gamma=5)`, using your `predicted_speedup`. It returns
# four numbers:
#
# * `best_gamma` in 1..max_gamma and `best_speedup`: the draft length with the largest predicted
#   speedup on the measured curve (ties to the shorter one), and that speedup;
# * `paper_gamma`: the draft length (1..max_gamma) you would have chosen assuming v = 1, and
#   `paper_gamma_speedup`: what it actually gives on the measured curve.
#
# Then set `C`, the draft cost measured above, and run the cell: it applies `decide` to this
# machine's measurements.  Before you compute: predict whether assuming v = 1 makes you draft
# longer or shorter than the measured curve does, and why.

# %% nbgrader={"grade": false, "grade_id": "answers", "locked": false, "schema_version": 3, "solution": true}
def decide(alpha: float, c: float, verify_cost: dict[int, float], max_gamma: int = 5) -> tuple[int, float, int, float]:
    """(best_gamma, best_speedup, paper_gamma, paper_gamma_speedup) on the measured curve."""
    ### BEGIN SOLUTION
    gammas = range(1, max_gamma + 1)
    measured = {g: predicted_speedup(alpha, g, c, verify_cost) for g in gammas}
    best = max(measured, key=lambda g: (measured[g], -g))
    flat = {n: 1.0 for n in verify_cost}
    paper = {g: predicted_speedup(alpha, g, c, flat) for g in gammas}
    chosen = max(paper, key=lambda g: (paper[g], -g))
    return best, measured[best], chosen, measured[chosen]
    ### END SOLUTION


### BEGIN SOLUTION
C = DRAFT_STEP_MS / TARGET_STEP_MS
### END SOLUTION
ALPHA = estimate_alpha(ACCEPTED_HISTOGRAM, RUN_GAMMA)
BEST_GAMMA, BEST_SPEEDUP, PAPER_GAMMA, PAPER_GAMMA_SPEEDUP = decide(ALPHA, C, VERIFY_COST)
print(f"alpha = {ALPHA:.3f}, c = {C:.3f}; best gamma {BEST_GAMMA} ({BEST_SPEEDUP:.3f}x); "
      f"with v = 1 you would pick {PAPER_GAMMA}, which gives {PAPER_GAMMA_SPEEDUP:.3f}x here")

# %% nbgrader={"grade": true, "grade_id": "answers_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
# The decision is graded alone: while this cell runs, `predicted_speedup` is a reference version.
from specbook import theory as _theory


def _reference_speedup(alpha, gamma, c, verify_cost):
    return float(_theory.speedup(alpha, gamma, c, lambda g: verify_cost[g + 1])) if gamma else 1.0


_your_speedup, predicted_speedup = predicted_speedup, _reference_speedup
try:
    _b, _bs, _p, _ps = decide(0.7, 0.2, VERIFY_COST)
    assert _b in range(1, 6) and _p in range(1, 6), "both draft lengths are in 1..max_gamma"
    assert _bs >= _ps, "the best choice on this machine cannot lose to another choice on it"
    ### BEGIN HIDDEN TESTS
    from specbook import theory as _theory

    assert abs(C - DRAFT_STEP_MS / TARGET_STEP_MS) < 0.005, f"C = {C!r}: the draft step's time over the target step's"
    assert_own_work(decide, forbidden=_THEORY, calls=[(0.7, 0.2, VERIFY_COST)], allowed=(_reference_speedup,))
    _curve = {1: 1.0, 2: 1.05, 3: 1.4, 4: 1.41, 5: 1.9, 6: 2.5, 7: 2.6, 8: 3.0}
    for _a, _c, _v, _m in [(0.8, 0.22, VERIFY_COST, 5), (0.9, 0.05, _curve, 7), (0.5, 0.1, _curve, 4), (0.95, 0.0, VERIFY_COST, 5)]:
        _best = _theory.optimal_gamma(_a, _c, lambda g: _v[g + 1], max_gamma=_m)
        _paper = _theory.optimal_gamma(_a, _c, 1.0, max_gamma=_m)
        _got = decide(_a, _c, _v, _m)
        assert _got[0] == _best[0] and abs(_got[1] - _best[1]) < 0.005, (
            f"decide({_a}, {_c}, curve, {_m}) chose gamma {_got[0]} ({_got[1]:.3f}x): not the best draft length on the "
            "measured curve")
        assert _got[2] == _paper[0], (
            f"decide({_a}, {_c}, curve, {_m}): paper_gamma = {_got[2]}, but with v = 1 another gamma maximises the speedup")
        assert abs(_got[3] - _theory.speedup(_a, _paper[0], _c, _v[_paper[0] + 1])) < 0.005, (
            f"decide({_a}, {_c}, curve, {_m}): paper_gamma_speedup = {_got[3]!r}; evaluate the paper's choice with the "
            "measured curve")
    ### END HIDDEN TESTS
finally:
    predicted_speedup = _your_speedup

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# The measured curve makes every extra draft more expensive than the paper assumes, so the best
# draft length is shorter, and choosing by the paper's formula gives away part of the speedup.
# The same reasoning, run each round on recent acceptance, is what an adaptive draft length does.

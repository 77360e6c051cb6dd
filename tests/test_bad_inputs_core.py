"""Bad and extreme inputs to the numeric core: sampling, theory, roofline, toy, stats, tree, greedy.

Each row of the tables below is one bad input.  It must end in a ValueError or TypeError
whose message names the argument (and, where given, the bad value) within TIME_LIMIT
seconds: a watchdog alarm turns a hang into a failure, and returning anything is a failure.
The property tests then throw generated inputs, legal and not, at the same functions: legal
but extreme ones must give finite, correct answers, illegal ones a clear error.
``test_refuses_can_fail`` shows the checker itself catching a silent, a vague and a hanging
function, so these tests can fail.
"""
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specbook import stats as sst
from specbook import roofline as rl
from specbook import theory as th
from specbook.sampling import MIN_TEMPERATURE, SamplingParams, logits_to_probs, sample
from specbook.toy import MarkovLM, make_toy_pair, random_transitions
from specbook.tree import children, depths, max_path_length
from specbook.tree_paths import ancestors, leaf_paths, path_table, path_to
from specbook.verify import verify_greedy

from support import TIME_LIMIT, refuses, watchdog

PROPS = settings(derandomize=True, max_examples=150, deadline=None)
INF, NAN = math.inf, math.nan
T = torch.tensor


def _lm(vocab_size: int = 6, batch: int = 1) -> MarkovLM:
    lm = MarkovLM(random_transitions(vocab_size, generator=torch.Generator().manual_seed(0)))
    lm.reset(batch)
    return lm


def _lm_after_forward() -> MarkovLM:
    lm = _lm()
    lm.forward(T([[1, 2]]))
    return lm


HALF = torch.full((2, 2), 0.5)
SAMPLING = [
    ("tiny temperature", lambda: SamplingParams(temperature=1e-39), "temperature", "1e-39"),
    ("subnormal temperature", lambda: SamplingParams(temperature=5e-324), "temperature", "5e-324"),
    ("bool temperature", lambda: SamplingParams(temperature=True), "temperature", "True"),
    ("str temperature", lambda: SamplingParams(temperature="0.7"), "temperature", "0.7"),
    ("inf temperature", lambda: SamplingParams(temperature=INF), "temperature", "inf"),
    ("bool top_k", lambda: SamplingParams(top_k=True), "top_k", "True"),
    ("bool top_p", lambda: SamplingParams(top_p=True), "top_p", "True"),
    ("nan top_p", lambda: SamplingParams(top_p=NAN), "top_p", "nan"),
    ("bool logits", lambda: logits_to_probs(T([True, False])), "logits", "bool"),
    ("int logits", lambda: logits_to_probs(T([1, 2])), "logits", "int64"),
    ("list logits", lambda: logits_to_probs([1.0, 2.0]), "logits", "list"),
    ("0-d logits", lambda: logits_to_probs(T(1.0)), "logits", "shape"),
    ("all -inf row", lambda: logits_to_probs(T([[0.0, 0.0], [-INF, -INF]])), "logits", "-inf"),
    ("+inf logit", lambda: logits_to_probs(T([0.0, INF])), "logits", "+inf"),
    ("nan logit greedy", lambda: logits_to_probs(T([0.0, NAN]), SamplingParams(0.0)), "logits", "NaN"),
    ("params not SamplingParams", lambda: logits_to_probs(T([0.0]), 0.5), "params", "float"),
    ("zero-mass row", lambda: sample(T([[0.5, 0.5], [0.0, 0.0]])), "probs", "row 1"),
    ("nan prob", lambda: sample(T([0.5, NAN])), "probs", "nan"),
    ("inf prob", lambda: sample(T([0.5, INF])), "probs", "inf"),
    ("negative prob", lambda: sample(T([-0.5, 1.5], dtype=torch.float64)), "probs", "-0.5"),
    ("bool probs", lambda: sample(T([True, False])), "probs", "bool"),
    ("list probs", lambda: sample([0.5, 0.5]), "probs", "list"),
]
THEORY = [
    ("bool alpha", lambda: th.expected_tokens(True, 3), "alpha", "True"),
    ("bool gamma", lambda: th.expected_tokens(0.5, True), "gamma", "True"),
    ("None alpha", lambda: th.expected_tokens(None, 3), "alpha", "None"),
    ("str alpha", lambda: th.expected_tokens("0.5", 3), "alpha", "0.5"),
    ("complex alpha", lambda: th.expected_tokens(0.5 + 0j, 3), "alpha", "0.5"),
    ("None in alphas", lambda: th.expected_tokens([0.5, None], 3), "alpha", "None"),
    ("alpha above 1", lambda: th.expected_tokens(1.5, 3), "alpha", "1.5"),
    ("nan alpha", lambda: th.expected_tokens(NAN, 3), "alpha", "nan"),
    ("fractional gamma", lambda: th.expected_tokens(0.5, 2.5), "gamma", "2.5"),
    ("negative gamma", lambda: th.expected_tokens(0.5, -1), "gamma", "-1"),
    ("inf gamma", lambda: th.expected_tokens(0.5, INF), "gamma", "inf"),
    ("gamma beyond float", lambda: th.expected_tokens(0.5, 10**400), "gamma", "1000"),
    ("bool alpha limit", lambda: th.expected_tokens_limit(True), "alpha", "True"),
    ("negative c", lambda: th.speedup(0.5, 4, -0.1), "c", "-0.1"),
    ("bool c", lambda: th.speedup(0.5, 4, True), "c", "True"),
    ("zero verify_cost", lambda: th.speedup(0.5, 4, 0.1, 0.0), "verify_cost", "0.0"),
    ("negative curve", lambda: th.speedup(0.5, 4, 0.1, lambda g: -1.0), "verify_cost(4)", "-1"),
    ("curve gives a list", lambda: th.speedup(0.5, 4, 0.1, lambda g: [1.0, 2.0]), "verify_cost(4)", "shape"),
    ("curve gives a bool", lambda: th.speedup(0.5, 4, 0.1, lambda g: True), "verify_cost(4)", "True"),
    ("bool gamma break-even", lambda: th.break_even_alpha(True, 0.1), "gamma", "True"),
    ("array gamma break-even", lambda: th.break_even_alpha([1, 2], 0.1), "gamma", "[1, 2]"),
    ("gamma 0 break-even cost", lambda: th.break_even_cost(0.5, 0), "gamma", "0"),
    ("huge max_gamma", lambda: th.optimal_gamma(0.5, 0.1, max_gamma=10**9), "max_gamma", "1000000000"),
    ("bool max_gamma", lambda: th.optimal_gamma(0.5, 0.1, max_gamma=True), "max_gamma", "True"),
    ("array alpha optimal", lambda: th.optimal_gamma([0.5], 0.1), "alpha", "[0.5]"),
    ("gain overflows", lambda: th.relative_gain(1e308, 1e-308), "relative_gain", "overflows"),
    ("gain over zero", lambda: th.relative_gain(1.0, 0), "old", "0"),
    ("2-D alphas", lambda: th.yield_table([[0.5]], [1]), "alphas", "(1, 1)"),
]
ROOFLINE = [
    ("bool peak", lambda: rl.Hardware("x", {"bfloat16": True}, 1e12, "s"), "flops['bfloat16']", "True"),
    ("ridge overflows", lambda: rl.Hardware("x", {"bfloat16": 1e308}, 1e-308, "s"), "ridge", "overflows"),
    ("name not str", lambda: rl.Hardware(3, {"bfloat16": 1e12}, 1e12, "s"), "name", "3"),
    ("zero bandwidth", lambda: rl.Hardware("x", {"bfloat16": 1e12}, 0, "s"), "bandwidth", "0"),
    ("zero batch", lambda: rl.step_intensity(0, 0, 1e9, 2), "batch", "0"),
    ("bool batch", lambda: rl.step_intensity(True, 0, 1e9, 2), "batch", "True"),
    ("unknown hardware", lambda: rl.roofline_rows(hw="H300"), "hw", "H300"),
    ("2-D batches", lambda: rl.roofline_rows(batches=[[1, 2]]), "batches", "[1, 2]"),
    ("zero positions", lambda: rl.verify_time_ratio(0), "n_positions", "0"),
    ("bool positions", lambda: rl.verify_time_ratio(True), "n_positions", "True"),
]
TOY = [
    ("bool table", lambda: MarkovLM(HALF.bool()), "transitions", "bool"),
    ("list table", lambda: MarkovLM([[0.5, 0.5], [0.5, 0.5]]), "transitions", "list"),
    ("empty table", lambda: MarkovLM(torch.zeros(0, 3)), "transitions", "(0, 3)"),
    ("nan table", lambda: MarkovLM(T([[NAN, 1.0], [0.5, 0.5]])), "transitions", "finite"),
    ("rows sum 0.9", lambda: MarkovLM(T([[0.5, 0.4], [0.5, 0.5]])), "transitions", "0.9"),
    ("bool order", lambda: MarkovLM(HALF, order=True), "order", "True"),
    ("float order", lambda: MarkovLM(HALF, order=1.0), "order", "1.0"),
    ("order 0", lambda: MarkovLM(HALF, order=0), "order", "0"),
    ("huge order", lambda: MarkovLM(HALF, order=10**9), "transitions", "1000000000"),
    ("context token too big", lambda: _lm().state([0, 7]), "context", "7"),
    ("bool context", lambda: _lm().state([True]), "context", "True"),
    ("bool context tensor", lambda: _lm().state(T([True])), "context", "bool"),
    ("float context", lambda: _lm().state([0.5]), "context", "0.5"),
    ("bool tokens", lambda: _lm().forward(T([[True]])), "tokens", "bool"),
    ("float tokens", lambda: _lm().forward(T([[1.0]])), "tokens", "float32"),
    ("token outside vocabulary", lambda: _lm().forward(T([[6]])), "tokens", "6"),
    ("1-D tokens", lambda: _lm().forward(T([1])), "tokens", "(1,)"),
    ("self-parent tree", lambda: _lm().forward(T([[1]]), T([0])), "parents[0]", "0"),
    ("parents too short", lambda: _lm().forward(T([[1, 2]]), T([-1])), "parents", "1 nodes"),
    ("bool batch_size", lambda: _lm().reset(True), "batch_size", "True"),
    ("negative batch_size", lambda: _lm().reset(-1), "batch_size", "-1"),
    ("bool rollback", lambda: _lm().rollback(T([True])), "rollback", "bool"),
    ("float rollback", lambda: _lm().rollback([1.5]), "rollback", "float"),
    ("keep beyond the tree", lambda: _lm_after_forward().keep([[5]]), "indices[0]", "[5]"),
    ("negative length", lambda: _lm().sequence_law([0], -1), "length", "-1"),
    ("bool length", lambda: _lm().sequence_law([0], True), "length", "True"),
    ("prompt outside vocabulary", lambda: _lm().sequence_law([9], 1), "prompt", "9"),
    ("law too large", lambda: _lm().sequence_law([0], 40), "length=40", "20000"),
    ("law params", lambda: _lm().sequence_law([0], 1, 0.5), "params", "float"),
    ("bool vocab_size", lambda: random_transitions(True), "vocab_size", "True"),
    ("vocab_size 0", lambda: random_transitions(0), "vocab_size", "0"),
    ("bool order table", lambda: random_transitions(4, order=True), "order", "True"),
    ("table too large", lambda: random_transitions(6, order=100), "order=100", "entries"),
    ("nan sharpness", lambda: random_transitions(4, sharpness=NAN), "sharpness", "nan"),
    ("zero sharpness", lambda: random_transitions(4, sharpness=0), "sharpness", "0"),
    ("bool zero_fraction", lambda: random_transitions(4, zero_fraction=True), "zero_fraction", "True"),
    ("zero_fraction 1", lambda: random_transitions(4, zero_fraction=1.0), "zero_fraction", "1.0"),
    ("nan match", lambda: make_toy_pair(match=NAN), "match", "nan"),
    ("bool match", lambda: make_toy_pair(match=True), "match", "True"),
    ("vocab_size 1 pair", lambda: make_toy_pair(vocab_size=1), "vocab_size", "1"),
    ("float vocab_size pair", lambda: make_toy_pair(vocab_size=4.0), "vocab_size", "4.0"),
    ("bool seed", lambda: make_toy_pair(seed=True), "seed", "True"),
]
P2 = [0.5, 0.5]
STATS = [
    ("negative count", lambda: sst.chisquare_gof([5, -1], P2), "counts", "-1"),
    ("nan count", lambda: sst.chisquare_gof([5, NAN], P2), "counts", "nan"),
    ("proportions", lambda: sst.chisquare_gof([0.5, 0.5], P2), "counts", "proportions"),
    ("zero total", lambda: sst.chisquare_gof([0, 0], P2), "counts", "all zeros"),
    ("length mismatch", lambda: sst.chisquare_gof([1, 2, 3], P2), "counts and probs", "3 and 2"),
    ("bool counts", lambda: sst.chisquare_gof([True, False], P2), "counts", "True"),
    ("str counts", lambda: sst.chisquare_gof(["1", "2"], P2), "counts", "'1'"),
    ("2-D counts", lambda: sst.chisquare_gof([[1, 2]], P2), "counts", "(1, 2)"),
    ("probs sum 1.1", lambda: sst.chisquare_gof([1, 2], [0.5, 0.6]), "probs", "1.1"),
    ("negative prob", lambda: sst.chisquare_gof([1, 2], [1.5, -0.5]), "probs", "-0.5"),
    ("nan prob", lambda: sst.chisquare_gof([1, 2], [0.5, NAN]), "probs", "nan"),
    ("bool probs", lambda: sst.chisquare_gof([1, 2], [True, False]), "probs", "True"),
    ("probs sum 0", lambda: sst.chisquare_gof([1, 2], [0.0, 0.0]), "probs", "sum 0"),
    ("None probs", lambda: sst.gtest_gof([1, 2], None), "probs", "None"),
    ("negative min_expected", lambda: sst.chisquare_gof([1, 2], P2, min_expected=-1), "min_expected", "-1"),
    ("nan min_expected", lambda: sst.chisquare_gof([1, 2], P2, min_expected=NAN), "min_expected", "nan"),
    ("str min_expected", lambda: sst.chisquare_gof([1, 2], P2, min_expected="5"), "min_expected", "'5'"),
    ("None min_expected", lambda: sst.pool_bins([1, 2], P2, min_expected=None), "min_expected", "None"),
    ("pvalue above 1", lambda: sst.holm([0.01, 1.5], 0.05), "pvalues", "1.5"),
    ("nan pvalue", lambda: sst.holm([0.01, NAN], 0.05), "pvalues", "nan"),
    ("bool pvalues", lambda: sst.holm([True], 0.05), "pvalues", "True"),
    ("alpha 1", lambda: sst.holm([0.01], 1.0), "alpha", "1.0"),
    ("bool alpha", lambda: sst.holm([0.01], True), "alpha", "True"),
    ("str alpha", lambda: sst.holm([0.01], "0.05"), "alpha", "0.05"),
    ("family not a dict", lambda: sst.run_family([0.01], 0.05), "pvalues", "list"),
    ("None in family", lambda: sst.run_family({"a": None}, 0.05), "pvalues", "None"),
    ("bool n", lambda: sst.chisquare_power(P2, [0.6, 0.4], True, alpha=0.05), "n", "True"),
    ("n 0", lambda: sst.chisquare_power(P2, [0.6, 0.4], 0, alpha=0.05), "n", "0"),
    ("float n", lambda: sst.chisquare_power(P2, [0.6, 0.4], 10.0, alpha=0.05), "n", "10.0"),
    ("alt length", lambda: sst.chisquare_power(P2, [0.3, 0.3, 0.4], 10, alpha=0.05), "alt_probs", "2 and 3"),
    ("alt equals null", lambda: sst.sample_size_for_power(P2, P2, alpha=0.05, power=0.8), "alt_probs", "null"),
    ("power below alpha", lambda: sst.sample_size_for_power(P2, [0.6, 0.4], alpha=0.05, power=0.01),
     "power", "0.01"),
    ("bool support_size", lambda: sst.counts_of([1, 2], True), "support_size", "True"),
    ("huge support_size", lambda: sst.counts_of([1], 10**12), "support_size", "1000000000000"),
    ("sample outside support", lambda: sst.counts_of([1, 5], 3), "samples", "5"),
    ("bool samples", lambda: sst.counts_of(np.array([True]), 2), "samples", "bool"),
    ("float samples", lambda: sst.counts_of([0.5], 2), "samples", "float64"),
    ("ragged samples", lambda: sst.counts_of([[1], [1, 2]], 3), "samples", "[[1], [1, 2]]"),
]
TREE = [
    ("own parent", lambda: ancestors(T([0]), 0), "parents[0]", "cycle"),
    ("two-cycle", lambda: ancestors(T([1, 0]), 0), "parents", "cycle"),
    ("cycle off the root", lambda: ancestors(T([-1, 2, 1]), 2), "parents", "cycle"),
    ("parent out of range", lambda: ancestors(T([-1, 5]), 1), "parents[1]", "5"),
    ("parent below -1", lambda: ancestors(T([-1, -2]), 1), "parents[1]", "-2"),
    ("node too big", lambda: ancestors(T([-1, 0]), 2), "node", "2"),
    ("negative node", lambda: ancestors(T([-1, 0]), -1), "node", "-1"),
    ("bool node", lambda: ancestors(T([-1, 0]), True), "node", "True"),
    ("float node", lambda: ancestors(T([-1, 0]), 1.0), "node", "1.0"),
    ("float parents", lambda: ancestors(T([-1.0, 0.0]), 1), "parents", "float32"),
    ("bool parents", lambda: ancestors(T([True]), 0), "parents", "bool"),
    ("2-D parents", lambda: ancestors(T([[-1]]), 0), "parents", "(1, 1)"),
    ("bool in parent list", lambda: ancestors([-1, True], 1), "parents", "True"),
    ("path_to own parent", lambda: path_to(T([0]), 0), "parents[0]", "cycle"),
    ("leaf_paths of a cycle", lambda: leaf_paths(T([1, 0])), "parents", "cycle"),
    ("leaf_paths own parent", lambda: leaf_paths(T([-1, 1])), "parents[1]", "cycle"),
    ("path_table of a cycle", lambda: path_table(T([-1, 2, 1])), "parents", "cycle"),
    ("children out of range", lambda: children(T([-1, 7])), "parents[1]", "7"),
    ("children below -1", lambda: children(T([-1, -3])), "parents[1]", "-3"),
    ("depths own parent", lambda: depths(T([0])), "parents[0]", "0"),
    ("max_path_length unordered", lambda: max_path_length(T([1, -1])), "parents[0]", "1"),
]
LOGITS = torch.zeros(1, 2, 3)
GREEDY = [
    ("bool logits", lambda: verify_greedy(LOGITS.bool(), T([[0]])), "target_logits", "bool"),
    ("int logits", lambda: verify_greedy(LOGITS.long(), T([[0]])), "target_logits", "int64"),
    ("nan logits", lambda: verify_greedy(T([[[0.0, NAN, 0.0], [0.0, 0.0, 0.0]]]), T([[0]])), "target_logits", "NaN"),
    ("-inf row", lambda: verify_greedy(T([[[0.0, 1.0, 0.0], [-INF] * 3]]), T([[1]])), "target_logits[0, 1]", "-inf"),
    ("list logits", lambda: verify_greedy([[[0.0]]], T([[0]])), "target_logits", "[[[0.0]]]"),
    ("2-D logits", lambda: verify_greedy(torch.zeros(2, 3), T([[0]])), "target_logits", "(2, 3)"),
    ("no positions", lambda: verify_greedy(torch.zeros(1, 0, 3), torch.zeros(1, 0, dtype=torch.long)),
     "target_logits", "(1, 0, 3)"),
    ("bool drafts", lambda: verify_greedy(LOGITS, T([[True]])), "draft_tokens", "bool"),
    ("float drafts", lambda: verify_greedy(LOGITS, T([[0.0]])), "draft_tokens", "float32"),
    ("draft outside vocabulary", lambda: verify_greedy(LOGITS, T([[3]])), "draft_tokens", "3"),
    ("drafts of the wrong shape", lambda: verify_greedy(LOGITS, T([0])), "draft_tokens", "(1,)"),
]
TABLES = {"sampling": SAMPLING, "theory": THEORY, "roofline": ROOFLINE, "toy": TOY, "stats": STATS,
          "tree": TREE, "verify_greedy": GREEDY}
CASES = [pytest.param(call, fragments, id=f"{module}: {name}")
         for module, table in TABLES.items() for name, call, *fragments in table]


@pytest.mark.parametrize("call, fragments", CASES)
def test_bad_input_is_refused_clearly(call, fragments):
    refuses(call, *fragments)


def test_refuses_can_fail():
    """The checker above is not vacuous: silence, a vague message and a hang all fail it."""
    with pytest.raises(AssertionError, match="silently"):
        refuses(lambda: 0.0, "x")
    with pytest.raises(AssertionError, match="does not mention"):
        refuses(lambda: math.sqrt(-1.0), "alpha")  # ValueError('math domain error')
    with pytest.raises(TimeoutError):
        refuses(lambda: [None for _ in iter(int, 1)], "x", limit=0.2)  # iter(int, 1) never ends


# --------------------------------------------------------------------------- legal extremes: right answers

def _reference_probs(logits: torch.Tensor, temperature: float) -> torch.Tensor:
    """softmax(logits / temperature) in float64, shifted by the row max (cannot overflow)."""
    x = logits.double()
    return torch.softmax((x - x.amax(-1, keepdim=True)) / temperature, -1)  # (..., V)


@pytest.mark.parametrize("logits, temperature, expected", [
    ([3e38, 1.0], 0.5, [1.0, 0.0]),            # was NaN: 3e38 / 0.5 overflows
    ([-3e38, -3.3e38], MIN_TEMPERATURE, [1.0, 0.0]),
    ([5.0, 5.0, 0.0], MIN_TEMPERATURE, [0.5, 0.5, 0.0]),  # ties share the mass at any temperature
    ([3e38, -3e38], 1.0, [1.0, 0.0]),
    ([1e30, 1e30 - 1e24, -INF], 1e6, None),    # huge but resolvable: compare with float64
])
def test_extreme_logits_give_the_right_probabilities(logits, temperature, expected):
    logits = T(logits)
    probs = logits_to_probs(logits, SamplingParams(temperature=temperature))
    want = _reference_probs(logits, temperature).float() if expected is None else T(expected)
    assert torch.isfinite(probs).all()
    torch.testing.assert_close(probs, want, atol=1e-6, rtol=1e-5)


def test_sample_takes_huge_unnormalised_rows_and_empty_batches():
    tokens = sample(T([[3e38, 0.0], [0.0, 3e38]]), torch.Generator().manual_seed(0))
    assert tokens.tolist() == [0, 1]
    assert sample(torch.ones(0, 4)).shape == (0,)


def test_theory_limits_for_huge_gamma():
    assert th.expected_tokens(0.8, 10**19) == pytest.approx(5.0)  # was -inf (a float gamma is now refused)
    assert th.expected_tokens(0.8, 10**30) == pytest.approx(5.0)
    assert th.expected_tokens(1.0, 10**19) == 1e19 + 1
    assert th.expected_tokens(0.0, 10**300) == 1.0
    assert th.speedup(0.8, 10**19, 0.0) == pytest.approx(5.0)
    assert th.break_even_alpha(10**18, 0.0, 2.0) == pytest.approx(0.5)
    assert th.optimal_gamma(1.0, 0.0, 1.0, max_gamma=th.MAX_GAMMA_SEARCH)[0] == th.MAX_GAMMA_SEARCH


def test_small_int_dtypes_are_read_as_token_ids():
    """uint8 and int16 ids stay valid when the vocabulary is larger than the dtype's range."""
    lm = _lm(vocab_size=300)
    expected = lm.forward(T([[250, 7]]))
    for dtype in (torch.uint8, torch.int16):
        lm.reset(1)
        torch.testing.assert_close(lm.forward(T([[250, 7]], dtype=dtype)), expected)
    assert lm.state(np.array([250], dtype=np.uint8)) == 250


def test_sharp_tables_are_one_hot_in_the_limit():
    table = random_transitions(5, sharpness=math.inf, generator=torch.Generator().manual_seed(1))
    assert torch.equal(table.sum(-1), torch.ones(5)) and set(table.unique().tolist()) == {0.0, 1.0}


def test_ancestors_of_an_unordered_forest():
    assert ancestors([2, -1, 1], 0) == [1, 2]  # any node order is fine as long as it is a forest
    assert leaf_paths(T([-1, 0, 0, 1])) == [[0, 2], [0, 1, 3]]


def test_greedy_takes_the_first_infinite_logit():
    tokens, emitted = verify_greedy(T([[[0.0, INF, INF], [1.0, 0.0, -INF]]]), T([[1]]))
    assert tokens.tolist() == [[1, 0]] and emitted.tolist() == [2]


# --------------------------------------------------------------------------- properties

FINITE_LOGIT = st.floats(-3e38, 3e38, allow_nan=False, allow_infinity=False)  # float32 range


@PROPS
@given(st.lists(st.one_of(FINITE_LOGIT, st.just(-INF)), min_size=1, max_size=8).filter(lambda x: max(x) > -INF),
       st.floats(MIN_TEMPERATURE, 1e30, allow_nan=False))
def test_any_finite_logits_and_temperature_give_a_distribution(logits, temperature):
    logits = T(logits)
    probs = logits_to_probs(logits, SamplingParams(temperature=temperature))
    assert torch.isfinite(probs).all() and (probs >= 0).all()
    assert float(probs.sum()) == pytest.approx(1.0, abs=1e-5)
    torch.testing.assert_close(probs, _reference_probs(logits, temperature).float(), atol=1e-4, rtol=0)


@PROPS
@given(st.floats(0.0, MIN_TEMPERATURE, exclude_min=True, exclude_max=True))
def test_temperatures_below_the_floor_are_refused(temperature):
    refuses(lambda: SamplingParams(temperature=temperature), "temperature", repr(temperature))


@PROPS
@given(st.floats(0.0, 1.0), st.integers(0, 10**40))  # gamma is an int: a float one is refused
def test_expected_tokens_is_finite_and_in_range_for_any_legal_input(alpha, gamma):
    value = th.expected_tokens(alpha, gamma)
    assert math.isfinite(value) and 1.0 <= value <= float(gamma) + 1.0


@PROPS
@given(st.one_of(st.floats(allow_nan=True).filter(lambda a: not 0.0 <= a <= 1.0), st.booleans(), st.none(),
                 st.text(max_size=3)))
def test_bad_alphas_are_refused(alpha):
    refuses(lambda: th.expected_tokens(alpha, 3), "alpha", repr(alpha))


@PROPS
@given(st.integers(2, 6), st.floats(1e-3, 1e6), st.floats(0.0, 0.9), st.integers(0, 2**31))
def test_random_tables_have_finite_rows_at_any_sharpness(vocab_size, sharpness, zero_fraction, seed):
    table = random_transitions(vocab_size, sharpness=sharpness, zero_fraction=zero_fraction,
                               generator=torch.Generator().manual_seed(seed))
    assert torch.isfinite(table).all() and (table >= 0).all()
    torch.testing.assert_close(table.sum(-1), torch.ones(vocab_size, dtype=torch.float64))
    MarkovLM(table)  # and the model accepts it


def _naive_ancestors(plist: list[int], node: int) -> list[int] | None:
    """Ancestors by a walk capped at N steps; None when the links never reach -1 or leave range."""
    out, j = [], node
    for _ in range(len(plist) + 1):
        j = plist[j]
        if j == -1:
            return out[::-1]
        if not 0 <= j < len(plist):
            return None
        out.append(j)
    return None


ANY_LINKS = st.integers(1, 12).flatmap(lambda n: st.lists(st.integers(-2, n), min_size=n, max_size=n))
FORESTS = st.integers(1, 12).flatmap(lambda n: st.tuples(*[st.integers(-1, i - 1) for i in range(n)]).map(list))


@PROPS
@given(st.one_of(ANY_LINKS, FORESTS), st.data())
def test_ancestors_of_any_parent_vector_end_or_refuse(plist, data):
    """Random links (self-parents, cycles, out-of-range parents included) never hang ancestors."""
    forest = all(_naive_ancestors(plist, i) is not None for i in range(len(plist)))
    node = data.draw(st.integers(0, len(plist) - 1))
    if forest:
        with watchdog(TIME_LIMIT):
            assert ancestors(T(plist), node) == _naive_ancestors(plist, node)
    else:
        refuses(lambda: ancestors(T(plist), node), "parents")
        refuses(lambda: leaf_paths(T(plist)), "parents")


@PROPS
@given(st.lists(st.integers(0, 50), min_size=2, max_size=6), st.integers(0, 5), st.sampled_from([-1, 0.5, NAN, INF]))
def test_one_bad_count_is_refused(counts, where, bad):
    counts[where % len(counts)] = bad
    probs = [1.0 / len(counts)] * len(counts)
    refuses(lambda: sst.chisquare_gof(counts, probs), "counts", repr(float(bad)))

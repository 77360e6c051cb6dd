"""Bad and extreme inputs to the numeric core: sampling, theory, toy, stats, tree, verify_greedy.

Each row of the tables below is one bad input.  It must end in a ValueError or TypeError
whose message names the argument (and, where given, the bad value) within TIME_LIMIT
seconds: a watchdog alarm turns a hang into a failure, and returning anything is a failure.
The property tests then throw generated inputs, legal and not, at the same functions: legal
but extreme ones must give finite, correct answers, illegal ones a clear error.
``test_refuses_can_fail`` shows the checker itself catching a silent, a vague and a hanging
function, so these tests can fail.
"""
import contextlib
import math
import signal

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from specbook import stats as sst
from specbook import theory as th
from specbook.sampling import MIN_TEMPERATURE, SamplingParams, logits_to_probs, sample
from specbook.toy import MarkovLM, make_toy_pair, random_transitions
from specbook.tree import ancestors, children, depths, leaf_paths, max_path_length, path_table, path_to
from specbook.verify import verify_greedy

TIME_LIMIT = 5.0  # seconds; every refusal here takes milliseconds
PROPS = settings(derandomize=True, max_examples=150, deadline=None)
INF, NAN = math.inf, math.nan
T = torch.tensor


@contextlib.contextmanager
def watchdog(seconds: float):
    """Raise TimeoutError in the main thread if the body runs longer than ``seconds``."""
    def on_alarm(signum, frame):
        raise TimeoutError(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def refuses(call, *fragments: str, limit: float = TIME_LIMIT) -> None:
    """Assert that ``call()`` raises ValueError or TypeError mentioning every fragment, in time."""
    with watchdog(limit):
        try:
            result = call()
        except (ValueError, TypeError) as err:
            message = str(err)
        else:
            raise AssertionError(f"accepted silently and returned {result!r}")
    for fragment in fragments:
        assert fragment in message, f"message {message!r} does not mention {fragment!r}"


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
    ("bool peak_flops", lambda: th.Hardware("x", True, 1e12), "peak_flops", "True"),
    ("ridge overflows", lambda: th.Hardware("x", 1e308, 1e-308), "ridge", "overflows"),
    ("name not str", lambda: th.Hardware(3, 1e12, 1e12), "name", "3"),
    ("zero bandwidth", lambda: th.ridge_point(1e12, 0), "bandwidth", "0"),
    ("zero batch", lambda: th.arithmetic_intensity(0), "batch", "0"),
    ("bool batch", lambda: th.arithmetic_intensity(True), "batch", "True"),
    ("unknown hardware", lambda: th.roofline_rows(hardware="H300"), "hardware", "H300"),
    ("2-D batches", lambda: th.roofline_rows(batches=[[1, 2]]), "batches", "(1, 2)"),
    ("zero positions", lambda: th.verify_time_ratio(0), "n_positions", "0"),
    ("bool positions", lambda: th.verify_time_ratio(True), "n_positions", "True"),
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
    ("law too large", lambda: _lm().sequence_law([0], 40), "length=40", "200000"),
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
TABLES = {"sampling": SAMPLING, "theory": THEORY, "toy": TOY, "stats": STATS, "tree": TREE,
          "verify_greedy": GREEDY}
CASES = [pytest.param(call, fragments, id=f"{module}: {name}")
         for module, table in TABLES.items() for name, call, *fragments in table]


@pytest.mark.parametrize("call, fragments", CASES)
def test_bad_input_is_refused_clearly(call, fragments):
    refuses(call, *fragments)

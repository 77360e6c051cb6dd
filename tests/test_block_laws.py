"""Block verification's exact laws (Fractions): lossless, never fewer drafts kept than token-wise
verification, the paper's example, and a broken twin the exact check catches."""
from fractions import Fraction as F

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from specbook import block_laws
from specbook.block_laws import completed_law, expected_kept, step_law, table, target_law
from specbook.laws import residual_list


def lossless(law, target, K):
    return completed_law(law, target, K) == target_law(target, K)


def test_the_papers_example_keeps_11_9_drafts_instead_of_10_9():
    """Sun et al. (ICLR 2025), section 2: p = (1/3, 2/3), q = (2/3, 1/3) at every position, K = 2."""
    target, draft = table([[F(1, 3), F(2, 3)]] * 3), table([[F(2, 3), F(1, 3)]] * 2)
    token, block = step_law(target, draft, 2, "token"), step_law(target, draft, 2, "block")
    assert expected_kept(token) == F(10, 9) and expected_kept(block) == F(11, 9)
    assert sum(block.values()) == 1 and lossless(block, target, 2) and lossless(token, target, 2)
    assert block != token  # a different law of the block, the same law once completed


def rows(*rows):
    return [[F(v) for v in r] for r in rows]


CORNER_CASES = {  # (target rows (K+1, V), draft rows (K, V))
    "q = 0 where p > 0": (rows(["1/2", "1/2", 0], ["1/4", "1/4", "1/2"], ["1/3", "1/3", "1/3"]),
                          rows([1, 0, 0], [0, "1/2", "1/2"])),
    "p = 0 where q > 0": (rows([0, 1, 0], ["1/2", 0, "1/2"], [1, 0, 0]), rows(["1/2", "1/2", 0], ["1/3", "1/3", "1/3"])),
    "one-hot drafts (an n-gram)": (rows(["1/5", "4/5", 0], ["1/2", "1/4", "1/4"], ["1/3", "1/3", "1/3"]),
                                   rows([0, 1, 0], [1, 0, 0])),
    "p == q": (rows(["1/5", "4/5"], ["1/2", "1/2"], ["1/3", "2/3"]), rows(["1/5", "4/5"], ["1/2", "1/2"])),
    "disjoint supports": (rows([1, 0, 0], [0, "1/2", "1/2"], [0, 0, 1]), rows([0, 1, 0], [1, 0, 0])),
    "one-hot target (temperature 0)": (rows([0, 1, 0], [0, 0, 1], [1, 0, 0]), rows(["1/3", "1/3", "1/3"], ["1/2", "1/2", 0])),
}


@pytest.mark.parametrize("case", CORNER_CASES)
def test_corner_cases_are_lossless_and_keep_at_least_as_much(case):
    p_rows, q_rows = CORNER_CASES[case]
    target, draft, K = table(p_rows), table(q_rows), len(q_rows)
    block, token = step_law(target, draft, K, "block"), step_law(target, draft, K, "token")
    assert sum(block.values()) == 1 and lossless(block, target, K)
    assert expected_kept(block) >= expected_kept(token)


def test_one_hot_drafts_keep_exactly_as_much_as_token_wise():
    """Deterministic drafts leave nothing to gain: both rules keep x_1..x_i with probability p_1(x_1)...p_i(x_i)."""
    p_rows, q_rows = CORNER_CASES["one-hot drafts (an n-gram)"]
    target, draft = table(p_rows), table(q_rows)
    assert expected_kept(step_law(target, draft, 2, "block")) == expected_kept(step_law(target, draft, 2, "token"))


def test_fixed_drafts_follow_the_conditional_rule():
    """draft=None: one-hot q on the given drafts; K = 1 is the token-wise rule itself."""
    p_rows = rows(["1/2", "1/2", 0], ["1/4", "1/4", "1/2"])
    law = step_law(table(p_rows), None, 1, "block", drafts=[1])
    assert law == step_law(table(p_rows), None, 1, "token", drafts=[1]) == {(1, 0): F(1, 8), (1, 1): F(1, 8),
                                                                              (1, 2): F(1, 4), (0,): F(1, 2)}


def fraction_model(draw, V):
    """A context-dependent model: an independent random law (with zeros) for every prefix."""
    laws = {}

    def model(prefix):
        if prefix not in laws:
            weights = draw(st.lists(st.integers(0, 6), min_size=V, max_size=V))
            weights[0] += sum(weights) == 0
            laws[prefix] = [F(w, sum(weights)) for w in weights]
        return laws[prefix]

    return model


@settings(max_examples=120, deadline=None, derandomize=True)
@given(st.data(), st.integers(2, 3), st.integers(1, 3))
def test_block_verification_is_lossless_and_never_keeps_less(data, V, K):
    target, draft = fraction_model(data.draw, V), fraction_model(data.draw, V)
    block, token = step_law(target, draft, K, "block"), step_law(target, draft, K, "token")
    assert sum(block.values()) == 1
    assert lossless(block, target, K), "block verification changed the target's law"
    assert expected_kept(block) >= expected_kept(token)


def test_a_broken_twin_fails_the_exact_check(monkeypatch):
    """Twin: after the kept prefix, sample the token-wise residual max(0, p - q) instead of the
    block residual max(0, w p - q) (the weight forgotten at the stopping position)."""
    target = table(rows([0, "5/6", "1/6"], ["1/2", "1/2", 0], ["1/4", "1/4", "1/2"]))
    draft = table(rows(["5/13", "1/13", "7/13"], ["1/8", "7/16", "7/16"]))
    assert lossless(step_law(target, draft, 2, "block"), target, 2)
    monkeypatch.setattr(block_laws, "residual_list", lambda scaled, q: residual_list([v / (sum(scaled) or 1)
                                                                                        for v in scaled], q))
    assert not lossless(step_law(target, draft, 2, "block"), target, 2)


def test_rule_must_be_named():
    with pytest.raises(ValueError, match="rule must be 'token' or 'block', got 'blocks'"):
        step_law(table([[1]]), table([[1]]), 1, "blocks")

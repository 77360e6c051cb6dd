"""Exact checks: the emitted law of the modified rejection sampler equals p (float64 and Fraction)."""
from fractions import Fraction as F

import pytest
import torch
from hypothesis import given, settings, strategies as st

from specbook.laws import block_law, conditional_emission_law, emission_law, to_fractions
from specbook.naive import NAIVE_RULES, accept_if_target_prefers_law, accept_p_then_p_law, resample_from_p_law

SETTINGS = settings(derandomize=True, max_examples=200, deadline=None)


@st.composite
def prob_vectors(draw, size=None, zeros=True):
    n = size or draw(st.integers(2, 8))
    w = draw(st.lists(st.floats(0.0, 1.0) if zeros else st.floats(0.01, 1.0), min_size=n, max_size=n))
    if zeros:
        # exact zeros are the interesting edge case; make them likely
        mask = draw(st.lists(st.booleans(), min_size=n, max_size=n))
        w = [0.0 if m or x < 1e-3 else x for x, m in zip(w, mask)]  # no denormal-sized entries
    if sum(w) == 0:
        w[draw(st.integers(0, n - 1))] = 1.0
    t = torch.tensor(w, dtype=torch.float64)
    return t / t.sum()


@st.composite
def pq_pairs(draw):
    n = draw(st.integers(2, 8))
    kind = draw(st.sampled_from(["random", "equal", "disjoint", "one-hot q", "one-hot p"]))
    p = draw(prob_vectors(n))
    if kind == "equal":
        return p, p.clone()
    if kind == "disjoint":
        q = torch.zeros(n, dtype=torch.float64)
        free = (p == 0).nonzero().flatten()
        if len(free) == 0:
            return p, draw(prob_vectors(n))
        q[free] = 1.0 / len(free)
        return p, q
    if kind == "one-hot q":
        q = torch.zeros(n, dtype=torch.float64)
        q[draw(st.integers(0, n - 1))] = 1.0
        return p, q
    if kind == "one-hot p":
        p = torch.zeros(n, dtype=torch.float64)
        p[draw(st.integers(0, n - 1))] = 1.0
    return p, draw(prob_vectors(n))


@SETTINGS
@given(pq_pairs())
def test_emission_law_is_target_float64(pq):
    p, q = pq
    assert torch.allclose(emission_law(p, q), p, rtol=0, atol=1e-12)


@SETTINGS
@given(pq_pairs())
def test_proof_identities(pq):
    p, q = pq
    overlap = torch.minimum(p, q)
    p_reject = 1 - overlap.sum()
    assert torch.isclose((p - q).clamp_min(0).sum(), p_reject, atol=1e-12)
    for z in range(len(p)):
        if q[z] > 0:  # P(draft z and accept z) = q(z) min(1, p/q) = min(p, q)
            accept = min(1.0, float(p[z] / q[z]))
            assert abs(q[z] * accept - overlap[z]) < 1e-12
    # P(emit z) = min(p, q) + P(reject) * residual(z) = p(z)
    residual = (p - q).clamp_min(0) / p_reject if p_reject > 0 else torch.zeros_like(p)
    assert torch.allclose(overlap + p_reject * residual, p, atol=1e-12)


@SETTINGS
@given(pq_pairs())
def test_conditional_laws_are_distributions(pq):
    p, q = pq
    for x in range(len(p)):
        law = conditional_emission_law(p, q, x)
        assert (law >= 0).all() and torch.isclose(law.sum(), torch.tensor(1.0, dtype=torch.float64))
        assert (law[p == 0] == 0).all()  # never a token the target forbids


CASES = [
    ([F(1, 2), F(1, 4), F(1, 4), F(0)], [F(1, 4), F(0), F(1, 4), F(1, 2)]),
    ([F(1, 3), F(1, 3), F(1, 3)], [F(1, 3), F(1, 3), F(1, 3)]),  # p == q: zero residual
    ([F(1), F(0), F(0)], [F(0), F(1, 2), F(1, 2)]),  # disjoint supports
    ([F(1, 10), F(9, 10), F(0)], [F(0), F(0), F(1)]),  # one-hot draft on a forbidden token
    ([F(1, 10**9), 1 - F(1, 10**9)], [F(1, 2), F(1, 2)]),  # tiny probabilities
]


@pytest.mark.parametrize("p, q", CASES)
def test_emission_law_exact_fractions(p, q):
    assert emission_law(p, q) == p


def test_emission_law_exact_random_fractions():
    g = torch.Generator().manual_seed(0)
    for _ in range(50):
        p = to_fractions(torch.rand(6, generator=g).pow(3).softmax(-1).tolist(), 997)
        q = to_fractions(torch.rand(6, generator=g).pow(3).softmax(-1).tolist(), 991)
        assert emission_law(p, q) == p


def test_block_law_exact_marginals():
    p = [[F(1, 2), F(1, 2), F(0)], [F(1, 5), F(3, 5), F(1, 5)], [F(0), F(1, 3), F(2, 3)]]
    q = [[F(1, 4), F(1, 4), F(1, 2)], [F(1, 5), F(3, 5), F(1, 5)]]
    law = block_law(p, q)
    assert sum(law.values()) == 1
    first = [sum(w for blk, w in law.items() if blk[0] == z) for z in range(3)]
    assert first == p[0]  # the first emitted token follows p_1 exactly
    # conditional on the drafts, too
    for x1 in range(3):
        for x2 in range(3):
            assert sum(block_law(p, q, [x1, x2]).values()) == 1


def test_block_law_one_hot_drafts():
    p = [[F(1, 2), F(1, 2)], [F(1, 4), F(3, 4)]]
    law = block_law(p, None, [1])
    assert law == {(0,): F(1, 2), (1, 0): F(1, 8), (1, 1): F(3, 8)}


# --- naive rules: biased exactly where theory says --------------------------------------------
def _differs(law, p):
    return not torch.allclose(law, p, atol=1e-12)


@SETTINGS
@given(pq_pairs())
def test_accept_p_then_p_biased_iff_q_not_flat_on_support(pq):
    p, q = pq
    support = p > 0
    flat = torch.allclose(q[support], q[support][0].expand(int(support.sum())), atol=1e-12)
    assert _differs(accept_p_then_p_law(p, q), p) == (not flat)


@SETTINGS
@given(pq_pairs())
def test_resample_from_p_biased_iff_residual_is_not_p(pq):
    p, q = pq
    diff = (p - q).clamp_min(0)
    reject = diff.sum()
    unbiased = reject < 1e-12 or torch.allclose(diff / reject, p, atol=1e-9)
    assert _differs(resample_from_p_law(p, q), p) == (not unbiased)


@SETTINGS
@given(pq_pairs())
def test_accept_if_prefers_biased_iff_partial_overlap(pq):
    p, q = pq
    biased = bool(((p > 0) & (p < q - 1e-12)).any())
    assert _differs(accept_if_target_prefers_law(p, q), p) == biased


def test_every_naive_rule_biased_on_a_generic_pair():
    p = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    q = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    for rule in NAIVE_RULES:
        law = rule.law(p, q)
        assert torch.isclose(law.sum(), torch.tensor(1.0, dtype=torch.float64))
        assert (law - p).abs().max() > 0.02, rule.name

"""Tests for specbook.teach (trace, rules, buggy, acceptance): the trace is the library's loop, the rule catalogue's
samplers follow their exact laws, the constant-acceptance pair keeps its promise."""
from fractions import Fraction

import pytest
import torch

from specbook import theory
from specbook.teach import acceptance, buggy, rules
from specbook.teach.trace import trace_speculative
from specbook.decode import speculative_generate
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.protocols import Draft
from specbook.sampling import GREEDY, SamplingParams
from specbook.toy import make_toy_pair
from support import check_fit, check_rejects

PARAMS = [SamplingParams(), SamplingParams(temperature=0.7, top_p=0.9), GREEDY]


# ----------------------------------------------------------------------------- traced loop

@pytest.mark.parametrize("params", PARAMS, ids=["t1", "t0.7-top_p", "greedy"])
@pytest.mark.parametrize("drafter", ["draft_model", "ngram"])
@pytest.mark.parametrize("gamma", [1, 4])
def test_trace_reproduces_speculative_generate(params, drafter, gamma):
    target, draft = make_toy_pair(6, 1, match=0.6, seed=3)
    make = (lambda: DraftModelDrafter(draft)) if drafter == "draft_model" else (lambda: NGramDrafter())
    for seed in range(2):
        trace = trace_speculative(target, make(), [1, 2, 1, 2], 30, params, gamma=gamma,
                                  generator=torch.Generator().manual_seed(seed))
        ref = speculative_generate(target, make(), torch.tensor([1, 2, 1, 2]), 30, params=params, gamma=gamma,
                                   generator=torch.Generator().manual_seed(seed))
        # same tokens, same counters: the trace is recorded on the loop itself, not re-run beside it
        assert trace.tokens == ref.new_tokens[0].tolist()
        assert trace.stats == ref.stats
        assert trace.accepted_per_step == ref.stats.accepted_per_step
        assert trace.target_passes == ref.stats.target_passes
        assert [t for s in trace.steps for t in s.emitted][:30] == trace.tokens


def test_trace_refuses_a_tree_drafter():
    class TreeDrafter:
        def propose(self, contexts, gamma, params, generator=None):
            return Draft(torch.tensor([[0, 1]]), None, torch.tensor([-1, -1]))

    target, _ = make_toy_pair(4, 1, seed=0)
    with pytest.raises(ValueError, match="chains only"):
        trace_speculative(target, TreeDrafter(), [0], 5)


class ObservingDrafter(DraftModelDrafter):
    """A draft-model drafter that records what the loop tells it after each target pass."""

    def __init__(self, model):
        super().__init__(model)
        self.seen = []

    def observe(self, target, kept):
        self.seen.append((target.cache_lengths.tolist(), kept))


def test_trace_calls_the_observe_hook_like_the_loop():
    target, draft = make_toy_pair(6, 1, match=0.6, seed=3)
    a, b = ObservingDrafter(draft), ObservingDrafter(draft)
    trace_speculative(target, a, [1, 2, 3], 25, gamma=3, generator=torch.Generator().manual_seed(0))
    speculative_generate(target, b, torch.tensor([1, 2, 3]), 25, gamma=3, generator=torch.Generator().manual_seed(0))
    assert a.seen == b.seen and len(a.seen) > 1


def test_trace_bookkeeping_and_html():
    target, draft = make_toy_pair(8, 1, match=0.7, seed=0)
    trace = trace_speculative(target, DraftModelDrafter(draft), [0], 50, gamma=4,
                              generator=torch.Generator().manual_seed(1), token_names="abcdefgh")
    emitted = [t for s in trace.steps for t in s.emitted]
    assert emitted[:50] == trace.tokens and len(emitted) >= 50
    assert trace.count("corrected") + trace.count("bonus") == trace.target_passes
    assert trace.count("accepted") == sum(trace.accepted_per_step)
    for s in trace.steps:
        kinds = [k for _, k in s.kinds()]
        assert len(kinds) == len(s.draft_tokens) + 1
        assert kinds[-1] == s.final_kind
        for i, a in enumerate(s.accept_probs):  # the recorded acceptance probabilities are min(1, p/q)
            x = s.draft_tokens[i]
            assert a == pytest.approx(min(1.0, float(s.target_probs[i, x] / s.draft_probs[i, x])))
    html = trace._repr_html_()
    assert html.count('data-kind="bonus"') == trace.count("bonus") + 1  # +1: the legend
    assert html.count('data-kind="rejected"') == trace.count("rejected") + 1
    assert "<table class=\"specbook-trace\">" in html


def test_trace_rejects_bad_input():
    target, draft = make_toy_pair(4, 1, seed=0)
    with pytest.raises(ValueError, match="prompt"):
        trace_speculative(target, DraftModelDrafter(draft), [[0, 1], [1, 0]], 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        trace_speculative(target, DraftModelDrafter(draft), [0], 0)
    with pytest.raises(ValueError, match="gamma"):
        trace_speculative(target, DraftModelDrafter(draft), [0], 5, gamma=-1)


def test_acceptance_by_previous_token_counts_checked_drafts_only():
    target, draft = make_toy_pair(8, 1, match=0.7, seed=0)
    trace = trace_speculative(target, DraftModelDrafter(draft), [0], 200, gamma=4,
                              generator=torch.Generator().manual_seed(0))
    verified, accepted = acceptance.acceptance_by_previous_token(trace)
    assert sum(accepted) == sum(trace.accepted_per_step)
    assert sum(verified) == sum(min(s.num_accepted + 1, len(s.draft_tokens)) for s in trace.steps)


# ----------------------------------------------------------------------------- rule catalogue

def test_rule_laws_exactness():
    setup = rules.position_setup(match=0.3, temperature=0.6, seed=2)
    p = setup.target_probs
    for name, r in rules.RULES.items():
        law = r.law(setup)
        assert float(law.sum()) == pytest.approx(1.0, abs=1e-12)
        tv = 0.5 * float((law - p).abs().sum())
        assert (tv < 1e-12) == r.lossless, (name, tv)
    # the sampling-parameter bug vanishes at temperature 1, where processed and raw q coincide
    cold = rules.position_setup(match=0.3, temperature=1.0, seed=2)
    assert torch.allclose(rules.rule(rules.TARGET_ONLY).law(cold), cold.target_probs, atol=1e-12)


@pytest.mark.parametrize("name", list(rules.RULES))
def test_rule_sampler_follows_its_own_law(name):
    setup = rules.position_setup(match=0.3, temperature=0.6, seed=2)
    r = rules.rule(name)
    law = r.law(setup).tolist()
    drawn = r.sample(setup, 6000, torch.Generator().manual_seed(11)).tolist()
    check_fit(f"lessons rule sampler: {name}", dict(enumerate(law)), drawn)
    if not r.lossless:  # broken twin: the same draws tested against p must fail
        check_rejects(f"{name} vs p", dict(enumerate(setup.target_probs.tolist())), drawn)


def test_rule_lookup_rejects_unknown_names():
    with pytest.raises(ValueError, match="rule must be one of"):
        rules.rule("accept everything")
    with pytest.raises(ValueError, match="temperature"):
        rules.position_setup(temperature=0.0)


def test_mismatched_draft_probs_biases_a_real_loop():
    target, draft = make_toy_pair(8, 1, match=0.3, seed=2)
    params = SamplingParams(temperature=0.6)
    law = target.sequence_law([0], 2, params)
    prompt = torch.zeros(3000, 1, dtype=torch.long)
    good = speculative_generate(target, DraftModelDrafter(draft), prompt, 2, params=params, gamma=3,
                                generator=torch.Generator().manual_seed(5))
    bad = speculative_generate(target, buggy.MismatchedDraftProbs(draft), prompt, 2, params=params, gamma=3,
                               generator=torch.Generator().manual_seed(5))
    check_fit("lessons: correct drafter at T=0.6", law, [tuple(r) for r in good.new_tokens.tolist()])
    check_rejects("MismatchedDraftProbs at T=0.6", law, [tuple(r) for r in bad.new_tokens.tolist()])


# ----------------------------------------------------------------------------- constant acceptance

@pytest.mark.parametrize("alpha", [0.0, 0.3, 0.7, 1.0])
def test_constant_acceptance_pair_has_the_same_overlap_everywhere(alpha):
    target, draft = acceptance.constant_acceptance_pair(8, alpha, seed=1)
    ov = acceptance.overlap(target, draft)
    assert torch.allclose(ov, torch.full_like(ov, alpha), atol=1e-12)
    # but not at other temperatures: heating pulls q towards uniform, so the overlap drifts towards
    # |support of p| / V = 1/2 and differs between contexts; the pair is "i.i.d." only at temperature 1
    hot = acceptance.overlap(target, draft, SamplingParams(temperature=2.0))
    if 0.5 < alpha < 1:
        assert float(hot.max()) < alpha
    elif 0 < alpha < 0.5:
        assert float(hot.min()) > alpha
    if 0 < alpha < 1:
        assert float(hot.max() - hot.min()) > 1e-3


def test_constant_acceptance_loop_matches_the_truncated_geometric_law():
    target, draft = acceptance.constant_acceptance_pair(8, 0.7, seed=0)
    prompt = torch.randint(0, 8, (300, 1), generator=torch.Generator().manual_seed(0))
    out = speculative_generate(target, DraftModelDrafter(draft), prompt, 20, gamma=4,
                               generator=torch.Generator().manual_seed(2))
    ks = out.stats.accepted_per_step
    check_fit("constant-acceptance pair: accepted per round", dict(enumerate(acceptance.accepted_count_law(0.7, 4))), ks)
    check_rejects("accepted per round vs alpha=0.76", dict(enumerate(acceptance.accepted_count_law(0.76, 4))), ks)


def test_accepted_count_law():
    for alpha in (Fraction(0), Fraction(1, 3), Fraction(9, 10), Fraction(1)):
        for gamma in (0, 1, 5):
            law = acceptance.accepted_count_law(alpha, gamma)
            assert len(law) == gamma + 1 and sum(law) == 1
            assert sum((k + 1) * pk for k, pk in enumerate(law)) == sum(alpha**k for k in range(gamma + 1))
    assert sum((k + 1) * pk for k, pk in enumerate(acceptance.accepted_count_law(0.7, 4))) == pytest.approx(
        theory.expected_tokens(0.7, 4))
    with pytest.raises(ValueError, match="alpha"):
        acceptance.accepted_count_law(1.5, 3)
    with pytest.raises(ValueError, match="gamma"):
        acceptance.accepted_count_law(0.5, -1)
    with pytest.raises(ValueError, match="vocab_size"):
        acceptance.constant_acceptance_pair(7, 0.5)

"""speculative_generate on toy models: whole generated sequences follow the target's exact law."""
import pytest
import torch

from specbook.decode import DecodeStep, generate, speculative_generate
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.protocols import CountsPasses, Draft, SupportsKeep, SupportsObserve, SupportsPrefill
from specbook.sampling import GREEDY, SamplingParams, logits_to_probs, sample
from specbook.toy import make_toy_pair
from support import check_fit, check_rejects

N = 12_000
L = 3  # generated tokens per sequence: 4**3 = 64 outcomes (order 1) per test


class MismatchedDrafter(DraftModelDrafter):
    """Draws drafts under ``sample_params`` but reports q under ``report_params`` to the verifier."""

    def __init__(self, model, sample_params, report_params):
        super().__init__(model)
        self.sample_params, self.report_params = sample_params, report_params

    def draw(self, logits, params, generator):
        nxt = sample(logits_to_probs(logits, self.sample_params), generator)
        return nxt, logits_to_probs(logits, self.report_params)


def sequences(result):
    return [tuple(r) for r in result.new_tokens.tolist()]


def run(drafter_name, params, gamma, order=1, seed=5, match=0.5):
    target, draft = make_toy_pair(4, order, match=match, seed=seed)
    prompt = torch.tensor([1, 2, 1, 2, 3])  # repetitive, so n-gram lookup finds matches
    if drafter_name == "draft model":
        drafter = DraftModelDrafter(draft)
    elif drafter_name == "n-gram":
        drafter = NGramDrafter(max_ngram=2)
    elif drafter_name == "target as its own draft":
        drafter = DraftModelDrafter(make_toy_pair(4, order, match=match, seed=seed)[0])
    elif drafter_name == "params on target only (raw q sampled and reported)":
        drafter = MismatchedDrafter(draft, SamplingParams(), SamplingParams())
    elif drafter_name == "twin: tempered draft, raw q reported":
        drafter = MismatchedDrafter(draft, params, SamplingParams())
    else:
        raise KeyError(drafter_name)
    g = torch.Generator().manual_seed(2024)
    result = speculative_generate(target, drafter, prompt.expand(N, -1), L, params=params, gamma=gamma, generator=g)
    return target.sequence_law(prompt.tolist(), L, params), sequences(result), result


SAMPLING_CASES = [
    ("draft model", SamplingParams(), 3, 1),
    ("draft model", SamplingParams(temperature=0.7, top_k=3), 2, 2),
    ("draft model", SamplingParams(temperature=1.3, top_p=0.8), 4, 1),
    ("n-gram", SamplingParams(), 3, 1),
    ("n-gram", SamplingParams(temperature=0.6), 2, 2),
    ("target as its own draft", SamplingParams(top_p=0.9), 3, 1),
    ("params on target only (raw q sampled and reported)", SamplingParams(temperature=0.5), 3, 1),
]


@pytest.mark.parametrize("drafter, params, gamma, order", SAMPLING_CASES)
def test_sequence_law_equals_target(drafter, params, gamma, order):
    law, observed, result = run(drafter, params, gamma, order)
    check_fit(f"speculative_generate {drafter} {params} gamma={gamma} order={order}", law, observed)


def test_plain_generate_law():
    target, _ = make_toy_pair(4, 1, seed=5)
    params = SamplingParams(temperature=0.8)
    out = generate(target, torch.tensor([1, 2]).expand(N, -1), L, params=params, generator=torch.Generator().manual_seed(1))
    check_fit("generate", target.sequence_law([1, 2], L, params), sequences(out))


@pytest.mark.parametrize("params", [SamplingParams(temperature=0.5), SamplingParams(top_p=0.7)])
def test_twin_q_not_the_sampling_distribution_is_caught(params):
    law, observed, _ = run("twin: tempered draft, raw q reported", params, 3)
    check_rejects(f"tempered draft, raw q ({params})", law, observed)


@pytest.mark.parametrize("order, match, gamma", [(1, 0.3, 4), (1, 0.9, 3), (2, 0.6, 5), (2, 0.0, 2)])
def test_greedy_speculative_equals_greedy_autoregressive(order, match, gamma):
    target, draft = make_toy_pair(6, order, match=match, seed=order * 10 + gamma)
    prompts = torch.randint(6, (16, 4), generator=torch.Generator().manual_seed(gamma))
    plain = generate(target, prompts, 25, params=GREEDY)
    for drafter in (DraftModelDrafter(draft), NGramDrafter()):
        spec = speculative_generate(target, drafter, prompts, 25, params=GREEDY, gamma=gamma)
        assert torch.equal(spec.tokens, plain.tokens)


def test_stats_bookkeeping():
    target, draft = make_toy_pair(5, 1, match=0.8, seed=0)
    r = speculative_generate(target, DraftModelDrafter(draft), torch.tensor([[0, 1]]), 40, params=SamplingParams(), gamma=4,
                             generator=torch.Generator().manual_seed(0))
    s = r.stats
    assert s.emitted == 40 and s.emitted == s.accepted + s.target_passes  # nothing past the budget is counted
    # gamma 4 per pass, except that no draft is asked for past the budget (the last passes ask for fewer)
    assert s.proposed == s.draft_passes and 4 * (s.target_passes - 3) < s.proposed <= 4 * s.target_passes
    assert abs(s.tau - s.emitted / s.target_passes) < 1e-12 and 0 <= s.draft_efficiency <= 1
    # every pass verifies depth 0, except a last pass asked for no drafts (one token of budget left)
    assert s.target_passes - 1 <= s.position_proposed[0] <= s.target_passes and sum(s.position_accepted) == s.accepted
    assert s.verified == sum(s.position_proposed) and s.draft_efficiency <= s.acceptance_rate
    plain = generate(target, torch.tensor([[0, 1]]), 10).stats
    assert plain.tau == 1.0 and plain.target_passes == 10


def test_identical_draft_accepts_everything():
    target, _ = make_toy_pair(5, 1, seed=3)
    r = speculative_generate(target, DraftModelDrafter(make_toy_pair(5, 1, seed=3)[0]), torch.tensor([0]), 30,
                             params=SamplingParams(), gamma=4, generator=torch.Generator().manual_seed(0))
    assert r.stats.draft_efficiency == 1.0 and r.stats.tau == 5.0


def test_bad_arguments():
    target, draft = make_toy_pair(4, 1)
    d = DraftModelDrafter(draft)
    with pytest.raises(ValueError, match="gamma"):
        speculative_generate(target, d, [1], 5, gamma=-1)
    with pytest.raises(ValueError, match="prompt"):
        speculative_generate(target, d, [], 5)
    with pytest.raises(ValueError, match="prompt"):
        generate(target, [7], 5)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(target, [1], 0)
    with pytest.raises(ValueError, match="min_ngram"):
        NGramDrafter(max_ngram=1, min_ngram=2)


# ----------------------------------------------------------------------------- the per-step hook

@pytest.mark.parametrize("params", [SamplingParams(), GREEDY], ids=["t1", "greedy"])
def test_on_step_sees_every_pass_and_changes_nothing(params):
    target, draft = make_toy_pair(6, 1, match=0.6, seed=3)
    prompts = torch.tensor([[1, 2], [3, 0]])
    steps: list[DecodeStep] = []
    hooked = speculative_generate(target, DraftModelDrafter(draft), prompts, 30, params=params, gamma=3,
                                  generator=torch.Generator().manual_seed(4), on_step=steps.append)
    plain = speculative_generate(target, DraftModelDrafter(draft), prompts, 30, params=params, gamma=3,
                                 generator=torch.Generator().manual_seed(4))
    assert torch.equal(hooked.tokens, plain.tokens) and hooked.stats == plain.stats
    assert len(steps) == hooked.stats.target_passes
    rows: list[list[int]] = [[], []]
    for step in steps:
        B = len(step.rows)  # a row that reached its budget has left the batch
        assert step.path is None and step.target_logits.shape == (B, step.draft.num_tokens + 1, 6)
        if params.greedy:
            assert step.target_probs is None
        else:
            assert torch.equal(step.target_probs, logits_to_probs(step.target_logits, params))
        for b, new, n in zip(step.rows, step.tokens.tolist(), step.kept.tolist()):
            rows[b].extend(new[:n])
    assert rows == hooked.new_tokens.tolist()
    with pytest.raises(TypeError, match="on_step"):
        speculative_generate(target, DraftModelDrafter(draft), prompts, 5, params=params, on_step="print")


class FixedTreeDrafter:
    """Always proposes the same deterministic tree: two root children, one grandchild under the first."""

    def propose(self, contexts, gamma, params, generator=None):
        return Draft(torch.tensor([[0, 1, 2]] * len(contexts)), None, torch.tensor([-1, -1, 0]))


class ChainOnlyTarget:
    """A target that declares the four required methods and nothing else (no keep, no prefill)."""

    def __init__(self, model):
        self.model, self.vocab_size = model, model.vocab_size

    def reset(self, batch_size):
        self.model.reset(batch_size)

    def forward(self, tokens, parents=None):
        return self.model.forward(tokens, parents)

    @property
    def cache_lengths(self):
        return self.model.cache_lengths

    def rollback(self, lengths):
        self.model.rollback(lengths)


def test_on_step_reports_the_tree_path_and_a_tree_needs_keep():
    target, _ = make_toy_pair(4, 1, match=0.6, seed=1)
    steps: list[DecodeStep] = []
    speculative_generate(target, FixedTreeDrafter(), [0, 1], 10, params=SamplingParams(), generator=torch.Generator().manual_seed(0),
                         on_step=steps.append)
    assert steps and all(s.path is not None and s.path.shape[0] == 1 for s in steps)
    with pytest.raises(ValueError, match="keep"):
        speculative_generate(ChainOnlyTarget(target), FixedTreeDrafter(), [0, 1], 5)


def test_optional_capabilities_are_declared_protocols():
    target, draft = make_toy_pair(5, 1, match=0.7, seed=2)
    assert isinstance(target, SupportsKeep) and not isinstance(ChainOnlyTarget(target), SupportsKeep)
    assert not isinstance(ChainOnlyTarget(target), SupportsPrefill)
    assert isinstance(DraftModelDrafter(draft), CountsPasses) and not isinstance(FixedTreeDrafter(), CountsPasses)
    assert not isinstance(DraftModelDrafter(draft), SupportsObserve)
    # a minimal target and a drafter that counts nothing still decode, the same tokens as the toy itself
    gen = lambda: torch.Generator().manual_seed(3)  # noqa: E731
    bare = speculative_generate(ChainOnlyTarget(target), NGramDrafter(), [0, 1, 0, 1], 20, params=SamplingParams(), gamma=3, generator=gen())
    full = speculative_generate(target, NGramDrafter(), [0, 1, 0, 1], 20, params=SamplingParams(), gamma=3, generator=gen())
    assert torch.equal(bare.tokens, full.tokens)
    r = speculative_generate(target, FixedTreeDrafter(), [0], 5, params=GREEDY)
    assert r.stats.draft_passes == 0


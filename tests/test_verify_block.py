"""verify_block, the code path: chi-square of its emitted blocks against block verification's exact
law, broken twins it catches, greedy and K = 1 reductions, per-row generators, and the decode loop
with ``chain_verifier=accept_block``."""
import pytest
import torch

from specbook.block_laws import step_law, table
from specbook.decode import generate, speculative_generate
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.grading.twins import N, encode_blocks, make_case
from specbook.sampling import GREEDY, SamplingParams, sample
from specbook.toy import make_toy_pair
from specbook.verify import emit, laws, residual, verify_chain, verify_greedy
from specbook.verify_block import accept_block, block_accepts, block_last_law, verify_block
from support import check_fit, check_rejects

CASES = ["position-dependent, K=3, V=4", "position-dependent, K=4, V=3", "p == q, K=2, V=5",
         "the weight matters, K=2, V=3", "disjoint supports, K=2, V=4", "one-hot drafts, K=4, V=4"]


# Where the block residual's weight changes the law (total variation 0.06 between the twin and the
# rule); in the cases above the weight never matters at a stop that can happen.
WEIGHT_MATTERS = (torch.tensor([[3 / 5, 2 / 5, 0], [1 / 9, 1 / 3, 5 / 9], [1 / 3, 1 / 9, 5 / 9]], dtype=torch.float64),
                  torch.tensor([[1 / 6, 5 / 6, 0], [5 / 7, 0, 2 / 7]], dtype=torch.float64), None)


def run(verifier, case, seed=11):
    """N rows of a case in one call: drafts x_i ~ q_i (or the case's fixed drafts), then ``verifier``."""
    target, draft, fixed = WEIGHT_MATTERS if case == "the weight matters, K=2, V=3" else make_case(case)
    K, V = target.shape[0] - 1, target.shape[1]
    g = torch.Generator().manual_seed(seed)
    if fixed is not None:
        tokens = torch.tensor(fixed).expand(N, K)
    else:
        tokens = torch.stack([torch.multinomial(draft[i], N, replacement=True, generator=g) for i in range(K)], 1)
    out, n = verifier(target.expand(N, K + 1, V), None if draft is None else draft.expand(N, K, V), tokens, g)
    law = step_law(table(target.tolist()), None if draft is None else table(draft.tolist()), K, "block", drafts=fixed)
    return law, encode_blocks(out, n, V)


@pytest.mark.parametrize("case", CASES)
def test_verify_block_follows_its_exact_law(case):
    law, observed = run(verify_block, case)
    check_fit(f"verify_block: {case}", law, observed)


def twin(stop_weight=True, longest=True):
    """A block verifier with one bug switched on: the block residual without its weight w_tau
    (``stop_weight=False``), or the shortest prefix whose coin came up instead of the longest."""

    def verifier(target_probs, draft_probs, draft_tokens, generator=None):
        p, q, x = laws(target_probs, draft_probs, draft_tokens)
        u = torch.rand(x.shape, generator=generator, dtype=p.dtype)
        tau, w = block_accepts(p, q, x, u)
        if not longest:
            from specbook.verify_block import stop_probs

            heads = (u < stop_probs(p, q, w)).long()
            first = heads.argmax(-1) + 1
            tau = torch.where(heads.any(-1), first, 0)
        if not stop_weight:
            w = torch.ones_like(w)
        return emit(x, tau, sample(block_last_law(p, q, w, tau), generator))

    return verifier


@pytest.mark.parametrize("name, bug, case", [
    ("token-wise residual at the stopping position", dict(stop_weight=False), "the weight matters, K=2, V=3"),
    ("the shortest prefix whose coin came up", dict(longest=False), "position-dependent, K=4, V=3")])
def test_broken_twins_are_caught(name, bug, case):
    law, observed = run(twin(**bug), case)
    check_rejects(name, law, observed)


def test_the_twin_helper_is_the_real_thing_when_no_bug_is_on():
    a = run(twin(), "position-dependent, K=3, V=4", seed=3)[1]
    b = run(verify_block, "position-dependent, K=3, V=4", seed=3)[1]
    assert a == b


def test_one_draft_is_token_wise_verification_draw_for_draw():
    target, draft, _ = make_case("position-dependent, K=3, V=4")
    p, q = target[:2].expand(500, 2, 4), draft[:1].expand(500, 1, 4)
    x = torch.multinomial(draft[0], 500, replacement=True, generator=torch.Generator().manual_seed(1))[:, None]
    a = verify_block(p, q, x, torch.Generator().manual_seed(2))
    b = verify_chain(p, q, x, torch.Generator().manual_seed(2))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_a_one_hot_target_is_greedy_matching():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(64, 5, 7, generator=g)
    draft_probs = torch.rand(64, 4, 7, generator=g).softmax(-1)
    drafts = torch.where(torch.rand(64, 4, generator=g) < 0.7, logits[:, :4].argmax(-1), sample(draft_probs, g))
    one_hot = torch.nn.functional.one_hot(logits.argmax(-1), 7).double()
    for q in (draft_probs, None):
        tokens, n = verify_block(one_hot, q, drafts, g)
        expected, n_expected = verify_greedy(logits, drafts)
        assert torch.equal(n, n_expected) and torch.equal(tokens, expected)


def test_per_row_generators_make_each_row_its_own():
    target, draft, _ = make_case("position-dependent, K=3, V=4")
    x = torch.tensor([[0, 1, 2], [3, 0, 1], [2, 2, 2]])
    p, q = target.expand(3, 4, 4), draft.expand(3, 3, 4)
    together = verify_block(p, q, x, [torch.Generator().manual_seed(s) for s in (5, 6, 7)])
    for b, s in enumerate((5, 6, 7)):
        alone = verify_block(p[b:b + 1], q[b:b + 1], x[b:b + 1], torch.Generator().manual_seed(s))
        assert together[0][b].tolist() == alone[0][0].tolist() and int(together[1][b]) == int(alone[1][0])


def test_no_drafts_is_one_token_from_the_target():
    target, _, _ = make_case("no drafts, K=0, V=6")
    tokens, n = verify_block(target.expand(3, 1, 6), None, torch.zeros(3, 0, dtype=torch.long))
    assert n.tolist() == [1, 1, 1] and (target[0, tokens[:, 0]] > 0).all()


def test_bad_inputs_are_refused_with_the_argument_named():
    target, draft, _ = make_case("position-dependent, K=3, V=4")
    p, q, x = target[None], draft[None], torch.tensor([[0, 1, 2]])
    with pytest.raises(ValueError, match="generator must be a torch.Generator, None, or a list of B = 1"):
        verify_block(p, q, x, [torch.Generator(), torch.Generator()])
    with pytest.raises(ValueError, match="draft_tokens"):
        verify_block(p, q, x[:, :2])
    with pytest.raises(ValueError, match="target_probs"):
        verify_block(p * 2, q, x)


# --------------------------------------------------------------------------- in the decode loop

@pytest.mark.parametrize("drafter, params", [("draft model", SamplingParams(temperature=0.8)),
                                             ("n-gram", SamplingParams())])
def test_the_loop_with_block_verification_keeps_the_target_law(drafter, params):
    target, draft = make_toy_pair(4, 1, match=0.5, seed=5)
    prompt = torch.tensor([1, 2, 1, 2, 3])
    d = DraftModelDrafter(draft) if drafter == "draft model" else NGramDrafter(max_ngram=2)
    out = speculative_generate(target, d, prompt.expand(12_000, -1), 3, params=params, gamma=3,
                               generator=torch.Generator().manual_seed(2024), chain_verifier=accept_block)
    check_fit(f"speculative_generate {drafter} {params} chain_verifier=accept_block",
              target.sequence_law(prompt.tolist(), 3, params), [tuple(r) for r in out.new_tokens.tolist()])


def test_the_loop_with_block_verification_is_greedy_at_temperature_0():
    target, draft = make_toy_pair(6, 1, match=0.6, seed=3)
    prompts = torch.randint(6, (8, 4), generator=torch.Generator().manual_seed(0))
    plain = generate(target, prompts, 20, params=GREEDY)
    spec = speculative_generate(target, DraftModelDrafter(draft), prompts, 20, params=GREEDY, chain_verifier=accept_block)
    assert torch.equal(spec.tokens, plain.tokens)


def test_the_loop_names_a_verifier_that_is_not_a_function():
    target, _ = make_toy_pair(4, 1, seed=5)
    with pytest.raises(TypeError, match="chain_verifier must be a function like accept_chain, got 'block'"):
        speculative_generate(target, NGramDrafter(), torch.tensor([1, 2]), 3, chain_verifier="block")


def test_residual_helper_is_the_shared_one():
    """block_last_law reuses verify.residual: with w = 1 it is token-wise verification's residual."""
    target, draft, _ = make_case("position-dependent, K=3, V=4")
    p, q = target[None], draft[None]
    w, tau = torch.ones(1, 4, dtype=p.dtype), torch.tensor([1])
    assert torch.allclose(block_last_law(p, q, w, tau)[0], residual(p[0, 1], q[0, 1]))

"""verify_chain / verify_token / verify_greedy: deterministic properties, edge cases, bad input."""
import pytest
import torch

from specbook.grading.twins import chain_verifier
from specbook.sampling import GREEDY, logits_to_probs
from specbook.laws import block_law
from specbook.verify import residual, verify_chain, verify_greedy, verify_token
from specbook.verify_serving import verify_chain_serving


def random_case(B=64, K=3, V=6, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    target = torch.randn(B, K + 1, V, generator=g, dtype=torch.float64).mul(2).softmax(-1).to(dtype)
    draft = torch.randn(B, K, V, generator=g, dtype=torch.float64).mul(2).softmax(-1).to(dtype)
    tokens = torch.multinomial(draft.reshape(-1, V).double(), 1, generator=g).reshape(B, K)
    return target, draft, tokens


def test_output_contract():
    target, draft, tokens = random_case()
    out, n = verify_chain(target, draft, tokens, torch.Generator().manual_seed(1))
    K = tokens.shape[1]
    assert out.shape == (64, K + 1) and n.shape == (64,)
    assert ((n >= 1) & (n <= K + 1)).all()
    for b in range(64):
        k = int(n[b])
        assert torch.equal(out[b, : k - 1], tokens[b, : k - 1])  # accepted prefix = drafts
        assert (out[b, k:] == -1).all() and (out[b, :k] >= 0).all()


def test_reference_variant_matches_library_draw_for_draw():
    """The configurable twin factory with no bug switched on IS verify_chain (same draws)."""
    target, draft, tokens = random_case(B=500)
    a = verify_chain(target, draft, tokens, torch.Generator().manual_seed(7))
    b = chain_verifier()(target, draft, tokens, torch.Generator().manual_seed(7))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_rows_are_independent():
    target, draft, tokens = random_case(B=8)
    # a row's outcome must not depend on which other rows are in the batch (given its own draws)
    out_all, _ = verify_chain(target, draft, tokens, torch.Generator().manual_seed(3))
    out_again, _ = verify_chain(target, draft, tokens, torch.Generator().manual_seed(3))
    assert torch.equal(out_all, out_again)


def test_p_equals_q_always_accepts_and_no_nan():
    target, _, tokens = random_case(B=2000)
    draft = target[:, :-1].clone()
    out, n = verify_chain(target, draft, tokens, torch.Generator().manual_seed(0))
    assert (n == tokens.shape[1] + 1).all()
    assert not torch.isnan(residual(target[:, 0], target[:, 0])).any()


def test_zero_probability_token_never_emitted():
    target, draft, tokens = random_case(B=3000, V=5)
    target = target.clone()
    target[..., 2] = 0
    target = target / target.sum(-1, keepdim=True)
    out, n = verify_chain(target, draft, tokens, torch.Generator().manual_seed(0))
    assert not (out == 2).any()


def test_uniform_exactly_zero_does_not_accept_forbidden_token(monkeypatch):
    """u == 0 and p(x) == 0: a rule written "u <= p/q" would accept; ours must not."""
    target = torch.tensor([[[0.0, 1.0], [0.5, 0.5]]], dtype=torch.float64)
    draft = torch.tensor([[[1.0, 0.0]]], dtype=torch.float64)
    real_rand = torch.rand
    monkeypatch.setattr(torch, "rand", lambda *a, **k: torch.zeros(*a[0]) if isinstance(a[0], tuple) else real_rand(*a, **k))
    out, n = verify_chain(target, draft, torch.tensor([[0]]), None)
    assert n.item() == 1 and out[0, 0].item() == 1


def test_draft_token_with_zero_draft_probability():
    """q(x) = 0 < p(x): min(1, p/0) = 1, accept; q(x) = 0 = p(x): reject."""
    target = torch.tensor([[[0.5, 0.5, 0.0], [1.0, 0.0, 0.0]]], dtype=torch.float64)
    draft = torch.tensor([[[0.0, 1.0, 0.0]]], dtype=torch.float64)
    out, n = verify_chain(target, draft, torch.tensor([[0]]), torch.Generator().manual_seed(0))
    assert out.tolist() == [[0, 0]]
    out, n = verify_chain(target, draft, torch.tensor([[2]]), torch.Generator().manual_seed(0))
    assert n.item() == 1 and out[0, 0].item() in (0, 1)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_low_precision_inputs(dtype):
    target, draft, tokens = random_case(B=2000, V=50, dtype=dtype)
    # renormalise in the low precision so the rows are valid probability vectors there
    out, n = verify_chain(target, draft, tokens, torch.Generator().manual_seed(0))
    emitted = out[out >= 0]
    assert emitted.max() < 50 and not torch.isnan(out.float()).any()


def test_tiny_probabilities():
    V = 1000
    target = torch.full((1, 2, V), 1e-12, dtype=torch.float64)
    target[0, :, 0] = 1 - 1e-12 * (V - 1)
    draft = torch.full((1, 1, V), 1.0 / V, dtype=torch.float64)
    out, n = verify_chain(target.expand(500, 2, V), draft.expand(500, 1, V), torch.arange(500)[:, None] % V,
                          torch.Generator().manual_seed(0))
    assert ((out[:, 0] == 0) | (out[:, 0] == torch.arange(500) % V)).all()


def test_zero_drafts_is_plain_sampling():
    target = torch.tensor([[[0.25, 0.75]]], dtype=torch.float64).expand(4000, 1, 2)
    out, n = verify_chain(target, None, torch.zeros(4000, 0, dtype=torch.long), torch.Generator().manual_seed(0))
    assert (n == 1).all() and abs((out[:, 0] == 1).double().mean().item() - 0.75) < 0.03


def test_greedy_verify_equals_chain_on_one_hot_probs():
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(200, 5, 7, generator=g)
    best = logits.argmax(-1)
    drafts = torch.where(torch.rand(200, 4, generator=g) < 0.7, best[:, :4], torch.randint(7, (200, 4), generator=g))
    a = verify_greedy(logits, drafts)
    b = verify_chain(logits_to_probs(logits, GREEDY), None, drafts, g)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_verify_token_matches_contract():
    p = torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64)
    q = torch.tensor([0.0, 0.5, 0.5], dtype=torch.float64)
    g = torch.Generator().manual_seed(0)
    outs = {verify_token(p, q, 2, g) for _ in range(200)}
    assert outs == {0}  # p(2) = 0: always rejected; residual is all on token 0
    assert {verify_token(p, q, 1, g) for _ in range(200)} == {1}  # p(1) >= q(1): always accepted


BAD = [
    (lambda t, d, x: (t * -1, d, x), "target_probs.*negative"),
    (lambda t, d, x: (t.clone().fill_(float("nan")), d, x), "target_probs.*non-finite"),
    (lambda t, d, x: (t * 1.1, d, x), "target_probs.*sum to 1"),
    (lambda t, d, x: (t, d[:, :, :3], x), "draft_probs has shape"),
    (lambda t, d, x: (t, d, x[:, :2]), "draft_tokens has shape"),
    (lambda t, d, x: (t, d, x + 100), "outside the vocabulary"),
    (lambda t, d, x: (t, d, x.double()), "integer"),
    (lambda t, d, x: (t[0], d, x), "target_probs must have 3 dims"),
    (lambda t, d, x: (t, d * float("inf"), x), "draft_probs.*non-finite"),
]


@pytest.mark.parametrize("mutate, message", BAD)
def test_bad_input_raises_value_error(mutate, message):
    target, draft, tokens = random_case(B=4)
    with pytest.raises(ValueError, match=message):
        verify_chain(*mutate(target, draft, tokens))


def test_bad_input_token_rule_and_greedy():
    p = torch.tensor([0.5, 0.5])
    with pytest.raises(ValueError, match="draft_token"):
        verify_token(p, p, 2)
    with pytest.raises(ValueError, match="draft_probs has shape"):
        verify_token(p, torch.tensor([1.0, 0.0, 0.0]), 0)
    with pytest.raises(ValueError, match="draft_tokens has shape"):
        verify_greedy(torch.zeros(1, 3, 4), torch.zeros(1, 3, dtype=torch.long))


# --------------------------------------------------------------------------- per-row generators, ragged drafts

def _one_row(target, draft, tokens, b, n, seed):
    """Row b verified alone, with its own n drafts and no padding, from a fresh generator."""
    return verify_chain_serving(target[b : b + 1, : n + 1], draft[b : b + 1, :n], tokens[b : b + 1, :n],
                        [torch.Generator().manual_seed(seed)])


def test_per_row_generators_make_each_row_depend_on_its_own_generator_only():
    target, draft, tokens = random_case(B=12, K=3, V=5)
    gens = lambda: [torch.Generator().manual_seed(100 + b) for b in range(12)]  # noqa: E731
    out, n = verify_chain_serving(target, draft, tokens, gens())
    for b in range(12):  # the same row alone, same generator: the same block, draw for draw
        alone, n_alone = _one_row(target, draft, tokens, b, 3, 100 + b)
        assert torch.equal(out[b, : n[b]], alone[0, : n_alone[0]]) and n[b] == n_alone[0]
    other = target.clone()
    other[1:] = other[1:].flip(-1)  # change every other row: row 0 must not move
    out2, n2 = verify_chain_serving(other, draft, tokens, gens())
    assert torch.equal(out2[0], out[0]) and n2[0] == n[0]


def test_ragged_drafts_equal_each_row_verified_alone_and_padding_is_never_read():
    target, draft, tokens = random_case(B=40, K=4, V=6, seed=3)
    num = torch.arange(40) % 5  # 0..4 drafts per row
    pad = torch.arange(4) >= num[:, None]  # (B, K)
    # Garbage in the padding: out-of-vocabulary tokens, NaN draft rows, and target rows past the bonus.
    tokens_g = tokens.masked_fill(pad, -7)
    draft_g = draft.masked_fill(pad[..., None], float("nan"))
    target_g = target.clone()
    target_g[torch.arange(5) > num[:, None]] = float("nan")
    gens = [torch.Generator().manual_seed(b) for b in range(40)]
    out, n = verify_chain_serving(target_g, draft_g, tokens_g, gens, num_drafts=num)
    assert ((n >= 1) & (n <= num + 1)).all()
    for b in range(40):
        alone, n_alone = _one_row(target, draft, tokens, b, int(num[b]), b)
        assert torch.equal(out[b, : n[b]], alone[0, : n_alone[0]]) and n[b] == n_alone[0]
        assert (out[b, n[b]:] == -1).all()


def test_ragged_block_law_exactly_on_deterministic_rows():
    """One-hot target rows make the block law a point mass: block_law's single block, every time."""
    V, K = 4, 3
    target = torch.nn.functional.one_hot(torch.tensor([[1, 2, 3, 0]] * 4), V).double()  # (4, K+1, V)
    draft = torch.full((4, K, V), 0.25, dtype=torch.float64)
    tokens = torch.tensor([[1, 2, 0], [1, 2, 3], [1, 0, 0], [3, 3, 3]])
    num = torch.tensor([3, 2, 1, 0])
    for seed in range(20):
        gen = [torch.Generator().manual_seed(seed * 10 + b) for b in range(4)] if seed % 2 else \
            torch.Generator().manual_seed(seed)
        out, n = verify_chain_serving(target, draft, tokens, gen, num_drafts=num)
        for b in range(4):
            k = int(num[b])
            law = block_law(target[b, : k + 1], draft[b, :k], tokens[b, :k].tolist())
            assert law == {tuple(out[b, : n[b]].tolist()): 1.0}


def test_full_num_drafts_and_one_generator_keep_the_old_draws():
    target, draft, tokens = random_case(B=300, K=3)
    a = verify_chain(target, draft, tokens, torch.Generator().manual_seed(5))
    b = verify_chain_serving(target, draft, tokens, torch.Generator().manual_seed(5), num_drafts=torch.full((300,), 3))
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("kwargs, message", [
    (dict(generator=[torch.Generator()] * 3), "list of B = 4 generators"),
    (dict(generator=[None] * 4), r"generator\[0\] must be a torch.Generator"),
    (dict(num_drafts=torch.tensor([0, 1, 2, 4])), "num_drafts contains 4"),
    (dict(num_drafts=torch.tensor([0, 1, 2])), "num_drafts must have shape"),
    (dict(num_drafts=torch.tensor([0.0, 1, 2, 3])), "num_drafts must be an integer tensor"),
])
def test_bad_generators_and_num_drafts(kwargs, message):
    target, draft, tokens = random_case(B=4)
    with pytest.raises(ValueError, match=message):
        verify_chain_serving(target, draft, tokens, **kwargs)

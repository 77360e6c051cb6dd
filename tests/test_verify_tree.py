"""Tree verification: the contract, exact laws (float64 and Fraction), chi-square on the code path,
and the decoding loop with tree drafters.  Broken twins (tree_variants.BROKEN_TWINS) and Medusa's
typical acceptance must fail the same tests the lossless rule passes.

Family tests (support.check_fit) added here: 4 block-law cases + 1 typical-acceptance
self-consistency + 4 whole-sequence cases = 9.
"""
from fractions import Fraction as F
from itertools import product

import pytest
import torch

import specbook.decode as decode_module
from specbook.decode import generate, speculative_generate
from specbook.laws import block_law
from specbook.protocols import Draft
from specbook.sampling import GREEDY, SamplingParams, logits_to_probs, sample
from specbook.toy import make_toy_pair
from specbook.tree import chain_parents, children, max_path_length
from specbook.tree_paths import from_paths, path_to
from specbook.tree_laws import (autoregressive_law, extend_law, total_variation, tree_block_law, tree_model_law,
                                typical_block_law)
from specbook.verify import verify_chain, verify_greedy
from specbook.typical import typical_acceptance
from specbook.verify_tree import keep_indices, verify_tree, verify_tree_greedy
from specbook.grading.twins import encode_blocks
from support import check_fit, check_rejects
from tree_variants import BROKEN_TWINS, tree_verifier

N_BLOCKS = 40_000  # rows per block-law case, drawn in one batched call
N_SEQ = 8_000  # sequences per whole-generation case (64 outcomes)
L = 3  # generated tokens per sequence

MEDUSA_LIKE = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]
BINARY = [[0], [1], [0, 0], [0, 1], [1, 0], [1, 1]]
WIDE = [[0], [1], [2], [3], [0, 0], [1, 0]]
SMALL = [[0], [1], [0, 0]]


def _probs(shape, g, zero_fraction=0.3):
    w = torch.rand(shape, generator=g, dtype=torch.float64) ** 2
    w = w.masked_fill(torch.rand(shape, generator=g) < zero_fraction, 0.0)
    w[..., 0] += (w.sum(-1) == 0).double()  # never an all-zero row
    return w / w.sum(-1, keepdim=True)


def _slots(parents):
    return [par + 1 for par in parents.tolist()]


# ================================================================ contract
def _random_case(B, parents, V, g, deterministic=False):
    N = len(parents)
    p = _probs((B, N + 1, V), g)
    q = _probs((B, N, V), g, 0.2)
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, N)
    return p, (None if deterministic else q), x


def test_chain_tree_equals_verify_chain_draw_for_draw():
    g = torch.Generator().manual_seed(0)
    parents = chain_parents(4)
    for deterministic in (False, True):
        p, q, x = _random_case(2000, parents, 5, g, deterministic)
        t1, n1 = verify_chain(p, q, x, torch.Generator().manual_seed(3))
        t2, n2, path = verify_tree(p, q, x, parents, torch.Generator().manual_seed(3))
        assert torch.equal(t1, t2) and torch.equal(n1, n2)
        steps = torch.arange(4).expand(2000, 4)
        assert torch.equal(path, torch.where(steps < (n2 - 1)[:, None], steps, -1))
    t1, n1 = verify_greedy(p, x)
    t2, n2, _ = verify_tree_greedy(p, x, parents)
    assert torch.equal(t1, t2) and torch.equal(n1, n2)


@pytest.mark.parametrize("choices", [MEDUSA_LIKE, BINARY, WIDE])
@pytest.mark.parametrize("deterministic", [False, True])
def test_output_contract(choices, deterministic):
    parents = from_paths(choices).parents
    B, V, D = 3000, 4, max_path_length(parents)
    g = torch.Generator().manual_seed(1)
    p, q, x = _random_case(B, parents, V, g, deterministic)
    tokens, n, path = verify_tree(p, q, x, parents, g)
    assert tokens.shape == (B, D + 1) and path.shape == (B, D) and tokens.dtype == path.dtype == torch.long
    assert ((1 <= n) & (n <= D + 1)).all()
    for b in range(0, B, 7):
        k = int(n[b]) - 1
        nodes = path[b, :k].tolist()
        assert (path[b, k:] == -1).all() and (tokens[b, k + 1:] == -1).all()
        if nodes:
            assert path_to(parents, nodes[-1]) == nodes  # a root-to-node path
        assert tokens[b, :k].tolist() == x[b, nodes].tolist()
        slots = [0] + [i + 1 for i in nodes]
        for s, i in zip(slots, nodes):
            assert p[b, s, x[b, i]] > 0  # never accept a token the target forbids
        assert p[b, slots[-1], tokens[b, k]] > 0  # the last token is possible under the target there


def test_greedy_walk_follows_argmax():
    parents = from_paths(MEDUSA_LIKE).parents
    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2000, len(parents) + 1, 3, generator=g)
    x = torch.randint(3, (2000, len(parents)), generator=g)  # V = 3: many agreements
    tokens, n, path = verify_tree_greedy(logits, x, parents)
    best = logits.argmax(-1)
    kids = children(parents)
    for b in range(0, 2000, 5):
        k = int(n[b]) - 1
        slots = [0] + [i + 1 for i in path[b, :k].tolist()]
        assert tokens[b, : k + 1].tolist() == best[b, slots].tolist()  # each token is the argmax after the ones before
        end_children = kids[path[b, k - 1]] if k else kids[len(parents)]
        assert all(x[b, c] != best[b, slots[-1]] for c in end_children)  # stopped only when no child agreed
    # ties go to the first index, as torch.argmax and greedy decoding do
    flat = torch.zeros(1, len(parents) + 1, 3)
    tied, n_tied, _ = verify_tree_greedy(flat, torch.tensor([[2, 0, 1, 0, 0, 0, 0]]), parents)
    assert tied[0, : int(n_tied[0])].tolist() == [0, 0, 0]  # node 1 (token 0), then node 5, then a bonus 0
    # the sampling rule with a one-hot target and deterministic drafts is the same walk
    one_hot = torch.nn.functional.one_hot(best, 3).double()
    t2, n2, path2 = verify_tree(one_hot, None, x, parents, g)
    assert torch.equal(t2, tokens) and torch.equal(n2, n) and torch.equal(path2, path)


def test_identical_draft_accepts_first_child_each_level():
    parents = from_paths(MEDUSA_LIKE).parents
    g = torch.Generator().manual_seed(4)
    B, V = 500, 5
    p = _probs((B, len(parents) + 1, V), g)
    q = p[:, _slots(parents)]  # each node drawn from the target's own law at its parent
    x = torch.multinomial(q.reshape(-1, V), 1, generator=g).reshape(B, -1)
    _, n, path = verify_tree(p, q, x, parents, g)
    assert (n == 4).all() and (path == torch.tensor([0, 3, 6])).all()


def test_empty_tree_emits_one_token_from_the_root():
    g = torch.Generator().manual_seed(5)
    p = _probs((3000, 1, 4), g)
    none = torch.zeros(0, dtype=torch.long)
    tokens, n, path = verify_tree(p, _probs((3000, 0, 4), g), torch.zeros(3000, 0, dtype=torch.long), none, g)
    assert tokens.shape == (3000, 1) and (n == 1).all() and path.shape == (3000, 0)
    assert (p[torch.arange(3000), 0, tokens[:, 0]] > 0).all()
    t, n, _ = verify_tree_greedy(p, torch.zeros(3000, 0, dtype=torch.long), none)
    assert torch.equal(t[:, 0], p[:, 0].argmax(-1))


def test_float32_inputs_and_no_nan_when_p_equals_q():
    parents = from_paths(SMALL).parents
    p = torch.tensor([[[0.5, 0.5, 0.0], [0.2, 0.3, 0.5], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]])  # (1, 4, 3)
    q = p[:, [0, 0, 1]].clone()
    x = torch.tensor([[0, 1, 1]])
    for _ in range(20):
        tokens, n, _ = verify_tree(p, q, x, parents)
        assert tokens.dtype == torch.long and not (tokens[0, : int(n)] < 0).any()


def test_bad_inputs_raise():
    parents = from_paths(SMALL).parents
    g = torch.Generator().manual_seed(6)
    p, q, x = _random_case(2, parents, 4, g)
    with pytest.raises(ValueError, match="N\\+1"):
        verify_tree(p[:, :3], q, x, parents)
    with pytest.raises(ValueError, match="draft_tokens"):
        verify_tree(p, q, x[:, :2], parents)
    with pytest.raises(ValueError, match="draft_tokens"):
        verify_tree(p, q, x + 4, parents)
    with pytest.raises(ValueError, match="draft_probs"):
        verify_tree(p, q[:, :2], x, parents)
    with pytest.raises(ValueError, match="parents"):
        verify_tree(p, q, x, torch.tensor([-1, 2, 0]))
    with pytest.raises(ValueError, match="target_probs"):
        verify_tree(p * 2, q, x, parents)
    with pytest.raises(ValueError, match="NaN"):
        verify_tree_greedy(p.masked_fill(p > 0.3, float("nan")), x, parents)
    with pytest.raises(ValueError, match="epsilon"):
        typical_acceptance(p, x, parents, epsilon=-1.0)
    with pytest.raises(ValueError, match="final"):
        typical_acceptance(p, x, parents, final="argmax")
    with pytest.raises(ValueError, match="draft_tokens"):
        tree_block_law(p[0], None, parents)


def test_keep_indices():
    path = torch.tensor([[0, 2, -1], [-1, -1, -1], [1, 4, 6]])
    assert keep_indices(path, torch.tensor([3, 1, 4])) == [[0, 1, 3], [0], [0, 2, 5, 7]]


# ================================================================ exact laws
def _toy_fns(target, draft, prompt, params, choices, mode):
    tree = from_paths(choices)
    target_fn = lambda pre: target.next_probs(prompt + list(pre), params)  # noqa: E731
    if mode == "sampled":
        return tree, target_fn, (lambda pre, node: draft.next_probs(prompt + list(pre), params))
    rank = tree.rank.tolist()
    ranked = lambda pre: draft.next_logits(prompt + list(pre)).argsort(descending=True, stable=True)  # noqa: E731
    return tree, target_fn, (lambda pre, node: int(ranked(pre)[rank[node]]))


@pytest.mark.parametrize("choices", [MEDUSA_LIKE, BINARY, WIDE, [[0], [0, 0], [0, 0, 0]]])
@pytest.mark.parametrize("mode", ["sampled", "top-k"])
@pytest.mark.parametrize("params, order", [(SamplingParams(), 1), (SamplingParams(temperature=0.7, top_k=2), 2)])
def test_tree_law_is_the_target_law_float64(choices, mode, params, order):
    target, draft = make_toy_pair(4, order, match=0.5, seed=3)
    tree, target_fn, draft_fn = _toy_fns(target, draft, [1, 2], params, choices, mode)
    law = tree_model_law(target_fn, tree.parents, draft_fn, deterministic=(mode == "top-k"))
    assert abs(sum(law.values()) - 1) < 1e-12
    D = max_path_length(tree.parents)
    for length in (1, D + 1):
        assert total_variation(extend_law(law, target_fn, length), autoregressive_law(target_fn, length)) < 1e-12


# an order-1 chain over 3 tokens with exact rational rows (zeros included)
T_FR = [[F(1, 2), F(1, 3), F(1, 6)], [F(0), F(3, 4), F(1, 4)], [F(2, 5), F(0), F(3, 5)]]
Q_FR = [[F(1, 5), F(1, 5), F(3, 5)], [F(1, 3), F(1, 3), F(1, 3)], [F(0), F(1, 2), F(1, 2)]]


@pytest.mark.parametrize("choices", [SMALL, [[0], [1], [2], [0, 0], [0, 1], [2, 0]]])
@pytest.mark.parametrize("mode", ["sampled", "top-k"])
def test_tree_law_is_the_target_law_exactly(choices, mode):
    tree = from_paths(choices)
    target_fn = lambda pre: T_FR[([0] + list(pre))[-1]]  # noqa: E731  context ends in token 0
    if mode == "sampled":
        law = tree_model_law(target_fn, tree.parents, lambda pre, node: Q_FR[([0] + list(pre))[-1]])
    else:
        rank = tree.rank.tolist()
        top = lambda pre, node: sorted(range(3), key=lambda v: -Q_FR[([0] + list(pre))[-1]][v])[rank[node]]  # noqa
        law = tree_model_law(target_fn, tree.parents, top, deterministic=True)
    assert all(isinstance(w, F) for w in law.values()) and sum(law.values()) == 1
    D = max_path_length(tree.parents)
    assert extend_law(law, target_fn, D + 1) == autoregressive_law(target_fn, D + 1)


def test_tree_block_law_of_a_chain_is_the_chain_block_law():
    g = torch.Generator().manual_seed(7)
    p, q = _probs((4, 3), g), _probs((3, 3), g)
    parents = chain_parents(3)
    for a, b in [(tree_block_law(p, q, parents), block_law(p, q)),
                 (tree_block_law(p, q, parents, [2, 0, 1]), block_law(p, q, [2, 0, 1])),
                 (tree_block_law(p, None, parents, [1, 1, 0]), block_law(p, None, [1, 1, 0]))]:
        assert total_variation(a, b) < 1e-12


def test_marginal_law_is_the_average_of_conditional_laws():
    g = torch.Generator().manual_seed(8)
    parents = from_paths(SMALL).parents
    p, q = _probs((4, 3), g), _probs((3, 3), g)
    mixed: dict = {}
    for xs in product(range(3), repeat=3):
        w = float(q[0, xs[0]] * q[1, xs[1]] * q[2, xs[2]])
        for blk, v in tree_block_law(p, q, parents, xs).items():
            mixed[blk] = mixed.get(blk, 0) + w * v
    assert total_variation(mixed, tree_block_law(p, q, parents)) < 1e-12


def test_siblings_from_different_rows_still_emit_p_exactly():
    # three independent candidates for one token, each from its own q: the first token's law is p
    p = [[F(1, 2), F(1, 4), F(1, 4), F(0)]] + [[F(1, 4)] * 4] * 3
    q = [[F(0), F(0), F(1, 2), F(1, 2)], [F(1, 10), F(7, 10), F(1, 10), F(1, 10)], [F(1), F(0), F(0), F(0)]]
    law = tree_block_law(p, q, torch.tensor([-1, -1, -1]))
    assert [sum(w for blk, w in law.items() if blk[0] == z) for z in range(4)] == p[0]


def test_sampled_drafts_verified_as_candidates_are_lossless_but_slower():
    """Verifying drafts as fixed candidates (q one-hot) is exact *whatever* produced them, as long as
    they do not depend on the verifier's randomness; it only accepts less: sum p q < sum min(p, q).
    (So it is no broken twin: the block law differs from verify_tree's, the output law does not.)"""
    p = [[F(1, 2), F(1, 4), F(1, 4)], [F(1, 3)] * 3, [F(1, 6), F(1, 6), F(2, 3)], [F(1, 2), F(1, 2), F(0)]]
    q = [[F(1, 5), F(3, 5), F(1, 5)], [F(1, 5), F(3, 5), F(1, 5)], [F(1, 2), F(0), F(1, 2)]]
    parents = from_paths(SMALL).parents
    as_candidates: dict = {}
    for xs in product(range(3), repeat=3):
        w = q[0][xs[0]] * q[1][xs[1]] * q[2][xs[2]]
        for blk, v in tree_block_law(p, None, parents, xs).items():
            as_candidates[blk] = as_candidates.get(blk, 0) + w * v
    exact = tree_block_law(p, q, parents)
    first = lambda law, z: sum(w for blk, w in law.items() if blk[0] == z)  # noqa: E731
    assert [first(as_candidates, z) for z in range(3)] == [first(exact, z) for z in range(3)] == p[0]
    longer = lambda law: sum(w for blk, w in law.items() if len(blk) > 1)  # noqa: E731  P(accept at the root)
    assert longer(as_candidates) < longer(exact)


def _tree_rows(target, prompt, params, parents, tokens):
    """Target rows along a tree with fixed tokens: (N+1, V)."""
    rows = [target.next_probs(prompt, params)]
    for i in range(len(parents)):
        rows.append(target.next_probs(prompt + [int(tokens[j]) for j in path_to(parents, i)], params))
    return torch.stack(rows)


def _topk_tree(draft, prompt, tree):
    tokens = []
    for i in range(tree.num_nodes):
        pre = [tokens[j] for j in path_to(tree.parents, i)[:-1]]
        tokens.append(int(draft.next_logits(prompt + pre).argsort(descending=True, stable=True)[tree.rank[i]]))
    return tokens


def test_typical_acceptance_is_biased_exactly():
    """At temperature 1 (p not peaked) the typical rule changes the law of the output; the lossless
    rule on the same tree and candidates does not."""
    target, draft = make_toy_pair(4, 1, match=0.5, seed=3)
    prompt, params = [1, 2], SamplingParams()
    tree = from_paths(BINARY)
    tokens = _topk_tree(draft, prompt, tree)
    rows = _tree_rows(target, prompt, params, tree.parents, tokens)
    target_fn = lambda pre: target.next_probs(prompt + list(pre), params)  # noqa: E731
    truth = autoregressive_law(target_fn, 3)
    lossless = extend_law(tree_block_law(rows, None, tree.parents, tokens), target_fn, 3)
    typical = extend_law(typical_block_law(rows, tokens, tree.parents), target_fn, 3)
    assert total_variation(lossless, truth) < 1e-12
    assert total_variation(typical, truth) > 0.05


# ================================================================ chi-square on the code path
def make_case(name, seed=0):
    """(parents, target rows (N+1, V), draft rows (N, V) or None, fixed tokens or None)."""
    g = torch.Generator().manual_seed(seed)
    if name == "sampled siblings, shared rows, V=4":
        parents = from_paths(MEDUSA_LIKE).parents
        per_slot = _probs((len(parents) + 1, 4), g, 0.2)
        return parents, _probs((len(parents) + 1, 4), g), per_slot[_slots(parents)], None
    if name == "sampled siblings, own rows, V=3":
        parents = torch.tensor([-1, -1, -1, 0, 0, 3])
        return parents, _probs((7, 3), g, 0.2), _probs((6, 3), g, 0.2), None
    if name == "top-k candidates, V=5":
        tree = from_paths(BINARY)
        q = _probs((len(tree.parents) + 1, 5), g)
        ranked = q.argsort(dim=-1, descending=True, stable=True)
        tokens = [int(ranked[s, r]) for s, r in zip(_slots(tree.parents), tree.rank.tolist())]
        return tree.parents, _probs((len(tree.parents) + 1, 5), g, 0.1), None, tokens
    if name == "candidates with repeats and forbidden tokens, V=4":
        parents = torch.tensor([-1, -1, -1, 0, 0, 1])
        p = _probs((7, 4), g, 0.0)
        p[0, 3] = 0  # candidate 2 at the root is impossible
        p[0] /= p[0].sum()
        return parents, p, None, [1, 1, 3, 0, 2, 2]  # nodes 0 and 1 repeat a token
    raise KeyError(name)


CASES = ["sampled siblings, shared rows, V=4", "sampled siblings, own rows, V=3", "top-k candidates, V=5",
         "candidates with repeats and forbidden tokens, V=4"]


def run_case(verifier, case, seed=11):
    parents, p, q, fixed = make_case(case)
    N, V = len(parents), p.shape[1]
    g = torch.Generator().manual_seed(seed)
    if fixed is not None:
        tokens = torch.tensor(fixed).expand(N_BLOCKS, N)
    else:
        tokens = torch.stack([torch.multinomial(q[i], N_BLOCKS, replacement=True, generator=g) for i in range(N)], 1)
    out, n, _ = verifier(p.expand(N_BLOCKS, N + 1, V), None if q is None else q.expand(N_BLOCKS, N, V),
                         tokens, parents, g)
    return tree_block_law(p, q, parents, fixed), encode_blocks(out, n, V)


@pytest.mark.parametrize("case", CASES)
def test_verify_tree_block_law(case):
    law, observed = run_case(verify_tree, case)
    check_fit(f"verify_tree: {case}", law, observed)


def test_variant_defaults_equal_the_library():
    for case in CASES:
        parents, p, q, fixed = make_case(case)
        N, V = len(parents), p.shape[1]
        g = torch.Generator().manual_seed(0)
        tokens = (torch.tensor(fixed).expand(500, N) if fixed is not None else
                  torch.stack([torch.multinomial(q[i], 500, replacement=True, generator=g) for i in range(N)], 1))
        args = (p.expand(500, N + 1, V), None if q is None else q.expand(500, N, V), tokens, parents)
        ours = verify_tree(*args, torch.Generator().manual_seed(1))
        variant = tree_verifier()(*args, torch.Generator().manual_seed(1))
        assert all(torch.equal(a, b) for a, b in zip(ours, variant))


TWIN_CASES = {
    "no residual between siblings (original p reused)": "sampled siblings, shared rows, V=4",
    "all siblings rejected: last token from p, not the residual": "top-k candidates, V=5",
    "bonus token from the parent's row": "top-k candidates, V=5",
    "one uniform shared by all siblings": "top-k candidates, V=5",
}


@pytest.mark.parametrize("twin", list(BROKEN_TWINS))
def test_broken_twin_is_caught(twin):
    law, observed = run_case(tree_verifier(**BROKEN_TWINS[twin]), TWIN_CASES[twin])
    check_rejects(twin, law, observed)


def test_every_twin_has_a_case():
    assert set(TWIN_CASES) == set(BROKEN_TWINS)


def test_twin_siblings_drawn_without_replacement_is_caught():
    """Deduplicating sampled siblings (drawing them without replacement) while reporting q breaks
    the independence the rule needs: the first token no longer follows p.  The same siblings drawn
    i.i.d. pass (exact: test_siblings_from_different_rows_still_emit_p_exactly; sampled:
    test_verify_tree_block_law)."""
    p_root = torch.tensor([0.1, 0.2, 0.3, 0.4], dtype=torch.float64)
    q = torch.tensor([0.4, 0.3, 0.2, 0.1], dtype=torch.float64)
    parents = torch.tensor([-1, -1, -1])
    g = torch.Generator().manual_seed(14)
    tokens = torch.multinomial(q.expand(N_BLOCKS, 4), 3, replacement=False, generator=g)  # (N, 3) distinct
    target = torch.cat([p_root[None], torch.full((3, 4), 0.25, dtype=torch.float64)]).expand(N_BLOCKS, 4, 4)
    out, _, _ = verify_tree(target, q.expand(N_BLOCKS, 3, 4), tokens, parents, g)
    first = {(z,): float(pz) for z, pz in enumerate(p_root)}
    check_rejects("siblings drawn without replacement", first, [(int(t),) for t in out[:, 0]])


def _typical_rows():
    target, draft = make_toy_pair(4, 1, match=0.5, seed=3)
    tree = from_paths(BINARY)
    tokens = _topk_tree(draft, [1, 2], tree)
    return tree, tokens, _tree_rows(target, [1, 2], SamplingParams(), tree.parents, tokens)


def test_typical_acceptance_follows_its_own_rule():
    tree, tokens, rows = _typical_rows()
    N = tree.num_nodes
    g = torch.Generator().manual_seed(12)
    out, n, _ = typical_acceptance(rows.expand(N_BLOCKS, N + 1, 4), torch.tensor(tokens).expand(N_BLOCKS, N),
                                   tree.parents, generator=g)
    check_fit("typical_acceptance vs typical_block_law", typical_block_law(rows, tokens, tree.parents),
              encode_blocks(out, n, 4))
    greedy, _, _ = typical_acceptance(rows[None], torch.tensor([tokens]), tree.parents, final="greedy")
    assert {tuple(greedy[0, : int(n[0])].tolist())} == set(typical_block_law(rows, tokens, tree.parents, final="greedy"))


def test_typical_acceptance_first_token_is_not_the_target_law():
    tree, tokens, rows = _typical_rows()
    N = tree.num_nodes
    out, _, _ = typical_acceptance(rows.expand(N_BLOCKS, N + 1, 4), torch.tensor(tokens).expand(N_BLOCKS, N),
                                   tree.parents, generator=torch.Generator().manual_seed(13))
    first = {(z,): float(pz) for z, pz in enumerate(rows[0]) if pz > 0}
    check_rejects("typical acceptance, first token", first, [(int(t),) for t in out[:, 0]])
    ok, _, _ = verify_tree(rows.expand(N_BLOCKS, N + 1, 4), None, torch.tensor(tokens).expand(N_BLOCKS, N),
                           tree.parents, torch.Generator().manual_seed(13))
    assert abs((ok[:, 0] == tokens[0]).double().mean() - rows[0, tokens[0]]) < 0.02  # lossless: P(first) = p


# ================================================================ the decoding loop with tree drafters
class ToyTreeDrafter:
    """Drafts a fixed tree from a toy MarkovLM.

    mode="sample": node i is drawn from the draft's law after its parent's path (siblings i.i.d.);
    mode="top-k":  node i takes the rank[i]-th most likely token under the draft (deterministic).
    report="auto": Draft.probs = those laws for sampled trees, None for top-k trees; "q": always
    the laws (for top-k candidates that is the bug "deterministic candidates passed off as samples").
    """

    def __init__(self, model, choices, mode="sample", report="auto"):
        self.model, self.tree, self.mode, self.report = model, from_paths(choices), mode, report
        self.parent_slot = _slots(self.tree.parents)
        self.passes = 0

    def propose(self, contexts, gamma, params, generator=None):
        m = self.model
        windows = [torch.stack([c[-m.order:] for c in contexts]).long()]  # per slot: (B, order) last tokens
        powers = m.vocab_size ** torch.arange(m.order - 1, -1, -1)
        laws = {}  # slot -> (raw logits, processed q), shared by the slot's children
        tokens, probs = [], []
        for i, slot in enumerate(self.parent_slot):
            if slot not in laws:
                logits = m.log_transitions[(windows[slot] * powers).sum(-1)]  # (B, V)
                laws[slot] = logits, logits_to_probs(logits, params)
            logits, q = laws[slot]
            if self.mode == "sample":
                x = sample(q, generator)  # an independent draw per sibling
            else:
                x = logits.argsort(dim=-1, descending=True, stable=True)[:, int(self.tree.rank[i])]
            tokens.append(x)
            probs.append(q)
            windows.append(torch.cat([windows[slot][:, 1:], x[:, None]], 1))
        self.passes += 1
        report = self.report == "q" or (self.report == "auto" and self.mode == "sample")
        return Draft(torch.stack(tokens, 1), torch.stack(probs, 1) if report else None, self.tree.parents)


def sequences(result):
    return [tuple(r) for r in result.new_tokens.tolist()]


def run_tree_decode(mode, choices, params, order, seed=5, match=0.5, own_draft=False, report="auto"):
    target, draft = make_toy_pair(4, order, match=match, seed=seed)
    if own_draft:
        draft = make_toy_pair(4, order, match=match, seed=seed)[0]
    prompt = torch.tensor([1, 2, 1, 2, 3])
    drafter = ToyTreeDrafter(draft, choices, mode, report)
    result = speculative_generate(target, drafter, prompt.expand(N_SEQ, -1), L, params=params, gamma=0,
                                  generator=torch.Generator().manual_seed(2024))
    return target.sequence_law(prompt.tolist(), L, params), sequences(result), result


SEQ_CASES = [
    ("sample", MEDUSA_LIKE, SamplingParams(), 1, False),
    ("top-k", BINARY, SamplingParams(temperature=0.7, top_k=3), 2, False),
    ("sample", WIDE, SamplingParams(temperature=1.3, top_p=0.8), 1, False),
    ("sample", SMALL, SamplingParams(top_p=0.9), 2, True),  # target as its own draft: bonus tokens
]


@pytest.mark.parametrize("mode, choices, params, order, own", SEQ_CASES)
def test_tree_sequence_law_equals_target(mode, choices, params, order, own):
    law, observed, result = run_tree_decode(mode, choices, params, order, own_draft=own)
    if own:
        assert result.stats.draft_efficiency > 0.5  # mostly accepted, so leaves' bonus tokens are exercised
    check_fit(f"speculative_generate tree {mode} {choices} {params} order={order}", law, observed)


def test_twin_top_k_candidates_reported_as_samples_is_caught():
    law, observed, _ = run_tree_decode("top-k", BINARY, SamplingParams(), 1, report="q")
    check_rejects("top-k tree drafts verified with the draft's q", law, observed)


def test_typical_acceptance_in_the_loop_is_caught(monkeypatch):
    def typical(target_probs, draft_probs, draft_tokens, parents, generator=None):
        return typical_acceptance(target_probs, draft_tokens, parents, generator=generator)

    monkeypatch.setattr(decode_module, "accept_tree", typical)
    law, observed, _ = run_tree_decode("top-k", BINARY, SamplingParams(), 1)
    check_rejects("typical acceptance in speculative_generate", law, observed)


@pytest.mark.parametrize("order, match, choices, mode", [(1, 0.3, MEDUSA_LIKE, "top-k"), (1, 0.9, WIDE, "sample"),
                                                         (2, 0.6, BINARY, "top-k"), (2, 0.0, SMALL, "sample")])
def test_greedy_tree_speculative_equals_greedy_autoregressive(order, match, choices, mode):
    target, draft = make_toy_pair(6, order, match=match, seed=order * 10 + len(choices))
    prompts = torch.randint(6, (16, 4), generator=torch.Generator().manual_seed(len(choices)))
    plain = generate(target, prompts, 25, params=GREEDY)
    spec = speculative_generate(target, ToyTreeDrafter(draft, choices, mode), prompts, 25, params=GREEDY)
    assert torch.equal(spec.tokens, plain.tokens)
    assert spec.stats.target_passes <= plain.stats.target_passes


def test_tree_stats_and_cache_hold_the_accepted_path_only():
    target, draft = make_toy_pair(5, 2, match=0.8, seed=0)
    tree = from_paths(MEDUSA_LIKE)
    prompt = torch.tensor([[0, 1, 3]])
    r = speculative_generate(target, ToyTreeDrafter(draft, MEDUSA_LIKE), prompt, 40, params=SamplingParams(), gamma=0,
                             generator=torch.Generator().manual_seed(0))
    s, N, D = r.stats, tree.num_nodes, max_path_length(tree.parents)
    assert s.proposed == N * s.target_passes and s.emitted == s.accepted + s.target_passes
    assert max(s.accepted_per_step) <= D and len(s.position_proposed) == D
    assert s.position_proposed[0] == s.target_passes and sum(s.position_accepted) == s.accepted
    assert s.verified == sum(s.position_proposed) and abs(s.tau - s.emitted / s.target_passes) < 1e-12
    # the target's cache holds the prompt and every emitted token but the pending last one, in place
    length = int(target.cache_lengths[0])
    assert length == 3 + s.emitted - 1
    shown = min(length, r.tokens.shape[1])
    assert torch.equal(target._history[0, :shown], r.tokens[0, :shown])


def test_greedy_tree_on_a_tiny_llama_compacts_the_kv_cache():
    """Real KV cache: rows out of step, the accepted path's entries packed into place (float64, so
    cached and uncached numerics cannot flip an argmax)."""
    from specbook.models import LlamaConfig, LlamaTarget
    from specbook.models.llama import LlamaModel

    cfg = LlamaConfig(vocab_size=11, dim=32, n_layers=2, n_heads=4, n_kv_heads=2, intermediate_size=48,
                      max_position_embeddings=128, tie_embeddings=False)
    g = torch.Generator().manual_seed(0)
    model = LlamaModel(cfg).init_weights(0.3, g).double()
    drafter_model = LlamaModel(cfg).double()
    with torch.no_grad():
        for (_, dst), (_, src) in zip(drafter_model.named_parameters(), model.named_parameters()):
            dst.copy_(src + 0.05 * torch.randn(src.shape, generator=g, dtype=torch.float64))
    tree = from_paths(MEDUSA_LIKE)

    class LlamaTopK:
        passes = 0

        def propose(self, contexts, gamma, params, generator=None):
            rows = []
            for ctx in contexts:
                seqs, tokens, ranked = {0: ctx.tolist()}, [], {}
                for i, slot in enumerate(_slots(tree.parents)):
                    if slot not in ranked:
                        with torch.no_grad():
                            logits = drafter_model(torch.tensor([seqs[slot]]))[0, -1]
                        ranked[slot] = logits.argsort(descending=True, stable=True)
                    tokens.append(int(ranked[slot][tree.rank[i]]))
                    seqs[i + 1] = seqs[slot] + [tokens[-1]]
                rows.append(tokens)
            return Draft(torch.tensor(rows), None, tree.parents)

    target = LlamaTarget(model, max_length=128)
    prompts = torch.randint(11, (2, 6), generator=g)
    plain = generate(target, prompts, 14, params=GREEDY)
    spec = speculative_generate(target, LlamaTopK(), prompts, 14, params=GREEDY)
    assert torch.equal(spec.tokens, plain.tokens)
    assert spec.stats.accepted > 0 and spec.stats.target_passes < 14

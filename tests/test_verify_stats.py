"""The code path, statistically: chi-square of verify_chain's emitted blocks against the exact block law.

Each case draws N independent rows in ONE batched call: drafts x_i ~ q_i, then verify.
The correct verifier must pass at the family level (statfamily.PER_TEST_ALPHA); each broken
twin (chain_variants.BROKEN_TWINS) must fail the same test.
"""
import pytest
import torch

from chain_variants import BROKEN_TWINS, chain_verifier
from specbook.laws import block_law
from specbook.verify import verify_chain
from specbook.verify_serving import verify_chain_serving
from statfamily import check_fit, check_rejects, encode_blocks

N = 40_000


def _probs(shape, g, zero_fraction=0.3):
    w = torch.rand(shape, generator=g, dtype=torch.float64) ** 2
    w = w.masked_fill(torch.rand(shape, generator=g) < zero_fraction, 0.0)
    w[..., 0] += (w.sum(-1) == 0).double()  # never an all-zero row
    return w / w.sum(-1, keepdim=True)


def make_case(name, seed=0):
    g = torch.Generator().manual_seed(seed)
    if name == "position-dependent, K=3, V=4":
        return _probs((4, 4), g), _probs((3, 4), g), None
    if name == "position-dependent, K=4, V=3":
        return _probs((5, 3), g, 0.2), _probs((4, 3), g, 0.2), None
    if name == "p == q, K=2, V=5":
        p = _probs((3, 5), g)
        return p, p[:2].clone(), None
    if name == "disjoint supports, K=2, V=4":
        p = torch.tensor([[0.6, 0.4, 0, 0], [0.1, 0.2, 0.7, 0], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
        q = torch.tensor([[0, 0, 0.5, 0.5], [0, 0, 0, 1.0]], dtype=torch.float64)
        return p, q, None
    if name == "one-hot drafts, K=4, V=4":
        return _probs((5, 4), g, 0.1), None, [1, 2, 0, 3]
    if name == "no drafts, K=0, V=6":
        return _probs((1, 6), g), _probs((0, 6), g), None
    raise KeyError(name)


CASES = ["position-dependent, K=3, V=4", "position-dependent, K=4, V=3", "p == q, K=2, V=5",
         "disjoint supports, K=2, V=4", "one-hot drafts, K=4, V=4", "no drafts, K=0, V=6"]


def run(verifier, case, seed):
    target, draft, fixed = make_case(case)
    K, V = target.shape[0] - 1, target.shape[1]
    g = torch.Generator().manual_seed(seed)
    if fixed is not None:
        tokens = torch.tensor(fixed).expand(N, K)
    elif K:
        tokens = torch.stack([torch.multinomial(draft[i], N, replacement=True, generator=g) for i in range(K)], 1)
    else:
        tokens = torch.zeros(N, 0, dtype=torch.long)
    out, n = verifier(target.expand(N, K + 1, V), None if draft is None else draft.expand(N, K, V), tokens, g)
    law = block_law(target, draft, fixed)
    return law, encode_blocks(out, n, V)


@pytest.mark.parametrize("case", CASES)
def test_verify_chain_block_law(case):
    law, observed = run(verify_chain, case, seed=11)
    check_fit(f"verify_chain: {case}", law, observed)


# Which case exposes which twin (a twin can be invisible in a degenerate case, e.g. any
# residual bug when p == q, where rejection never happens).
TWIN_CASES = {
    "resample from p, not the residual": "position-dependent, K=3, V=4",
    "residual max(0, q - p) (sides swapped)": "position-dependent, K=3, V=4",
    "bonus token from position K-1": "p == q, K=2, V=5",  # every draft accepted: always a bonus
    "no stop at the first rejection": "position-dependent, K=4, V=3",
    "one uniform shared by all positions": "position-dependent, K=4, V=3",
    "target position off by one": "position-dependent, K=3, V=4",
    "naive: accept w.p. p(x), resample from p": "position-dependent, K=3, V=4",
    "naive: accept iff p(x) >= q(x)": "position-dependent, K=3, V=4",
}


@pytest.mark.parametrize("twin", list(BROKEN_TWINS))
def test_broken_twin_is_caught(twin):
    law, observed = run(chain_verifier(**BROKEN_TWINS[twin]), TWIN_CASES[twin], seed=11)
    check_rejects(twin, law, observed)


def test_every_twin_has_a_case():
    assert set(TWIN_CASES) == set(BROKEN_TWINS)


# --------------------------------------------------------------------------- serving engines: ragged rows, own seeds

def run_ragged(seeds, case="position-dependent, K=3, V=4"):
    """N rows with 0..K drafts (row b has b % (K+1)), each drawing from its own generator seeds[b].

    Returns the law and the outcomes (num_drafts, block) of single rows, and of pairs of rows 2i, 2i+1
    (same inputs and the same number of drafts K, so a correct verifier makes them independent).
    """
    target, draft, _ = make_case(case)
    K, V = target.shape[0] - 1, target.shape[1]
    g = torch.Generator().manual_seed(12)
    tokens = torch.stack([torch.multinomial(draft[i], N, replacement=True, generator=g) for i in range(K)], 1)
    num = torch.arange(N) % (K + 1)  # (N,)
    num[: N // 2] = K  # the first half: full rows, paired for the independence test
    out, n = verify_chain_serving(target.expand(N, K + 1, V), draft.expand(N, K, V), tokens,
                                  [torch.Generator().manual_seed(s) for s in seeds], num_drafts=num)
    blocks = encode_blocks(out, n, V)
    laws = [block_law(target[: k + 1], draft[:k]) for k in range(K + 1)]
    half = N // 2
    single_law = {(k, b): pr * (1 / (K + 1)) for k in range(K + 1) for b, pr in laws[k].items()}
    singles = [(int(num[i]), blocks[i]) for i in range(half, N)]
    pair_law = {(a, b): pa * pb for a, pa in laws[K].items() for b, pb in laws[K].items()}
    pairs = [(blocks[i], blocks[i + 1]) for i in range(0, half, 2)]
    return single_law, singles, pair_law, pairs


def test_ragged_rows_with_their_own_generators_follow_the_block_law():
    single_law, singles, pair_law, pairs = run_ragged(range(1000, 1000 + N))
    check_fit("verify_chain ragged rows, per-row generators: (num_drafts, block)", single_law, singles)
    check_fit("verify_chain per-row generators: pairs of rows independent", pair_law, pairs)


def test_rows_sharing_one_uniform_stream_are_caught():
    """Broken twin: every row's generator has the same seed, so all rows draw the same uniforms."""
    _, _, pair_law, pairs = run_ragged([7] * N)
    check_rejects("rows sharing one uniform stream", pair_law, pairs)

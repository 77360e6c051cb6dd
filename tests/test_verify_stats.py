"""The code path, statistically: chi-square of verify_chain's emitted blocks against the exact block law.

Each case draws N independent rows in ONE batched call: drafts x_i ~ q_i, then verify.
The correct verifier must pass at the family level (twins.PER_TEST_ALPHA); each broken
twin (twins.BROKEN_TWINS, in specbook/grading/twins.py with the cases) must fail the same test.
"""
import pytest
import torch

from specbook.grading.twins import BROKEN_TWINS, CASES, N, TWIN_CASES, chain_verifier, encode_blocks, make_case, run
from specbook.laws import block_law
from specbook.verify import verify_chain
from specbook.verify_serving import verify_chain_serving
from support import check_fit, check_rejects


@pytest.mark.parametrize("case", CASES)
def test_verify_chain_block_law(case):
    law, observed = run(verify_chain, case, seed=11)
    check_fit(f"verify_chain: {case}", law, observed)


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

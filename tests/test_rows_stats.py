"""Batched sampling is exact jointly: chi-square of pairs of ragged rows against the product of their laws.

A batch decodes rows of two prompts of different lengths side by side (row 2i: the long prompt,
row 2i+1: the short one); rows stop at an end token and leave the batch.  Rows of a batch must be
independent draws from the target, so the law of each pair's (sequence, sequence) is the product
of the two rows' exact sequence laws (``MarkovLM.sequence_law``).  Two members of the statistical
family: fixed-gamma prompt lookup, and the load-aware adaptive policy over a draft model (its gamma
changes with the number of live rows, 0 included).

Broken twin: a verifier that reuses row 0's acceptance uniforms for every row.  Each row alone
still looks plausible step by step, but rows are no longer independent: the same test rejects it.
"""
from __future__ import annotations

import pytest
import torch

from specbook.decode import speculative_generate
from specbook.costs import BatchCosts
from specbook.drafters import AdaptiveGamma, DraftModelDrafter, GammaPolicy, NGramDrafter
from specbook.sampling import SamplingParams, sample
from specbook.toy import make_toy_pair
from specbook.verify import accept_chain, residual

from support import check_fit, check_rejects

PAIRS = 3_000
L = 2
EOS = 3
PROMPTS = [[0, 1, 1, 2, 1, 2], [2, 1, 2]]  # lengths 6 and 3; both look up the draft 1 (p = 0.58)
# one row: a position costs little; thousands of rows: a position costs a pass (speculation off)
COSTS = BatchCosts({1: (1.0, 1.05, 1.1, 1.15), 2 * PAIRS: (1.0, 2.0, 3.0, 4.0)}, 0.1)
# the policy as the batch command runs it: free to stop drafting, probing after 2 idle steps
POLICY = GammaPolicy(costs=COSTS, decay=0.95, min_gamma=0, margin=0.2, probe_every=2)


def pair_law(target, params):
    a, b = (target.sequence_law(p, L, params, eos_token_id=EOS) for p in PROMPTS)
    return {(x, y): pa * pb for x, pa in a.items() for y, pb in b.items()}


def pairs_of(result):
    seqs = [tuple(s) for s in result.sequences()]
    return [(seqs[2 * i], seqs[2 * i + 1]) for i in range(PAIRS)]


def run(kind, seed=5, chain_verifier=accept_chain):
    target, draft = make_toy_pair(4, 2, match=0.6, seed=7)
    params = SamplingParams(temperature=0.9)
    drafter = (NGramDrafter() if kind == "ngram"
               else AdaptiveGamma(DraftModelDrafter(draft), POLICY))
    batch = [PROMPTS[b % 2] for b in range(2 * PAIRS)]
    out = speculative_generate(target, drafter, batch, L, params=params, gamma=3, generator=torch.Generator().manual_seed(seed),
                               eos_token_id=EOS, chain_verifier=chain_verifier)
    return pair_law(target, params), pairs_of(out), drafter


@pytest.mark.parametrize("kind", ["ngram", "adaptive"])
def test_batched_ragged_rows_are_independent_draws_of_the_target(kind):
    law, observed, drafter = run(kind)
    check_fit(f"batched pairs of ragged rows, {kind}", law, observed)
    if kind == "adaptive":
        assert {s.gamma for s in drafter.steps} >= {0}  # the loaded batch turned speculation off at least once


def shared_row_uniforms(target_probs, draft_probs, draft_tokens, generator=None):
    """verify_chain, except that every row reuses row 0's acceptance uniforms (the broken twin)."""
    B, K1, V = target_probs.shape
    K = K1 - 1
    p = target_probs.double()  # (B, K+1, V)
    q = (torch.nn.functional.one_hot(draft_tokens.long(), V).double() if draft_probs is None
         else draft_probs.double())  # (B, K, V)
    p_x = p[:, :K].gather(-1, draft_tokens.long()[..., None])[..., 0]  # (B, K)
    q_x = q.gather(-1, draft_tokens.long()[..., None])[..., 0]  # (B, K)
    u = torch.rand((1, K), generator=generator, dtype=torch.float64).expand(B, K)  # THE BUG: one row's uniforms
    n_acc = (u * q_x < p_x).long().cumprod(-1).sum(-1)  # (B,)
    q_pad = torch.cat([q, q.new_zeros(B, 1, V)], 1)  # (B, K+1, V)
    rows = torch.arange(B)
    last = sample(residual(p[rows, n_acc], q_pad[rows, n_acc]), generator)  # (B,)
    drafts = torch.cat([draft_tokens.long(), draft_tokens.new_full((B, 1), -1).long()], 1)  # (B, K+1)
    tokens = torch.where(torch.arange(K1).expand(B, K1) < n_acc[:, None], drafts, -1)
    return tokens.scatter(1, n_acc[:, None], last[:, None]), n_acc + 1


def test_twin_rows_sharing_uniforms_is_caught():
    law, observed, _ = run("ngram", chain_verifier=shared_row_uniforms)
    check_rejects("rows sharing one set of uniforms", law, observed)

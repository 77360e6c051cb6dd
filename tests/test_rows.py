"""Rows that differ: prompts of different lengths, end tokens, rows that leave the batch.

Greedy speculation must equal plain greedy decoding of each row alone; sampled rows must follow
the target's exact law of sequences that stop at the end token (chi-square, in the statistical
family), and left-padding ragged prompts into a rectangle, the classic shortcut, is the broken
twin that the same test rejects.
"""
from __future__ import annotations

import pytest
import torch

from specbook.decode import PAD, generate, speculative_generate
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.sampling import GREEDY, SamplingParams
from specbook.toy import make_toy_pair

from support import check_fit, check_rejects
from support import WrappedTarget

PROMPTS = [[1, 2, 3, 1, 2], [4], [2, 2, 5, 1, 2, 3, 1, 2, 3], [3, 1]]


@pytest.mark.parametrize("order, gamma, eos", [(1, 3, None), (2, 4, 3), (2, 2, 0)])
def test_greedy_rows_equal_each_row_alone(order, gamma, eos):
    target, draft = make_toy_pair(6, order, match=0.7, seed=order + gamma)
    alone = [generate(target, [p], 30, params=GREEDY, eos_token_id=eos).sequences()[0] for p in PROMPTS]
    for drafter in (DraftModelDrafter(draft), NGramDrafter()):
        out = speculative_generate(target, drafter, PROMPTS, 30, params=GREEDY, gamma=gamma, eos_token_id=eos)
        assert out.sequences() == alone
        assert generate(target, PROMPTS, 30, params=GREEDY, eos_token_id=eos).sequences() == alone
        if eos is not None:
            for seq in out.sequences():
                assert len(seq) == 30 or seq[-1] == eos  # a row stops right after its end token
                assert eos not in seq[:-1]


def test_result_padding_and_lengths():
    target, draft = make_toy_pair(6, 1, match=0.7, seed=1)
    out = speculative_generate(target, DraftModelDrafter(draft), PROMPTS, 12, params=GREEDY, gamma=3, eos_token_id=2)
    for b, (prompt, seq) in enumerate(zip(PROMPTS, out.sequences())):
        n = len(prompt) + len(seq)
        assert out.tokens[b, :n].tolist() == prompt + seq and (out.tokens[b, n:] == PAD).all()
        assert int(out.lengths[b]) == len(seq)
        assert (out.new_tokens[b, len(seq):] == PAD).all()


class CountingTarget(WrappedTarget):
    """Counts the rows each forward pass computes (finished rows must cost nothing)."""

    rows_computed = 0

    def forward(self, tokens, parents=None):
        self.rows_computed += tokens.shape[0]
        return self.inner.forward(tokens, parents)


def test_finished_rows_leave_the_batch():
    target, _ = make_toy_pair(6, 1, match=0.7, seed=1)
    counting = CountingTarget(target)
    out = generate(counting, [[1], [1], [1]], 40, params=SamplingParams(), generator=torch.Generator().manual_seed(0), eos_token_id=2)
    lengths = out.lengths.tolist()
    assert min(lengths) < 40  # some row ended early
    # one pass per emitted token and live row, nothing for rows that have ended
    assert counting.rows_computed == sum(lengths)


N = 8_000
L = 4


def _row_sequences(result, row_of):
    seqs = result.sequences()
    return {r: [tuple(seqs[b]) for b in range(len(seqs)) if row_of[b] == r] for r in set(row_of)}


@pytest.mark.parametrize("drafter_name, params", [("draft model", SamplingParams(temperature=0.9)),
                                                  ("n-gram", SamplingParams(top_k=3))])
def test_ragged_rows_with_end_token_follow_the_target(drafter_name, params):
    """A batch of two interleaved prompts of different lengths, end token 3: each row's law is exact."""
    target, draft = make_toy_pair(4, 2, match=0.6, seed=7)
    prompts = [[1, 2, 1, 2, 0], [1]]
    batch = [prompts[b % 2] for b in range(N)]
    drafter = DraftModelDrafter(draft) if drafter_name == "draft model" else NGramDrafter()
    out = speculative_generate(target, drafter, batch, L, params=params, gamma=3, generator=torch.Generator().manual_seed(11), eos_token_id=3)
    per_row = _row_sequences(out, [b % 2 for b in range(N)])
    for r, prompt in enumerate(prompts):
        law = target.sequence_law(prompt, L, params, eos_token_id=3)
        check_fit(f"ragged rows, end token, {drafter_name}, row {r}", law, per_row[r])


def test_twin_left_padded_rectangle_is_caught():
    """The shortcut: left-pad ragged prompts into one tensor with the end token as padding (a common
    choice of pad token). The short row's context changes, and so does its law."""
    target, draft = make_toy_pair(4, 2, match=0.6, seed=7)
    padded = torch.tensor([[3, 3, 3, 3, 1]] * N)  # the prompt [1], left-padded to length 5
    params = SamplingParams(temperature=0.9)
    out = speculative_generate(target, DraftModelDrafter(draft), padded, L, params=params, gamma=3,
                               generator=torch.Generator().manual_seed(11), eos_token_id=3)
    law = target.sequence_law([1], L, params, eos_token_id=3)
    check_rejects("left-padded ragged prompts", law, [tuple(s) for s in out.sequences()])

"""specbook.metrics: the engines' acceptance figures against numbers worked out by hand."""
import math

import pytest
import torch

from specbook.decode import speculative_generate
from specbook.decode_stats import DecodeStats
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.metrics import engine_metrics
from specbook.toy import make_toy_pair


def hand_stats() -> DecodeStats:
    stats = DecodeStats()
    # pass 1, chain K=3, 2 rows: row 0 accepts all 3 (+ bonus: 4 emitted), row 1 rejects draft 0 (1 emitted)
    stats.record(3, torch.tensor([4, 1]))
    # pass 2, no drafts (K=0): each row emits one token; not a drafting step
    stats.record(0, torch.tensor([1, 1]))
    # pass 3, chain K=3: row 0 accepts 2 then a correction (3 emitted); row 1 accepts 3 + bonus (4 emitted)
    # but has room for 2 only: cut short, 2 accepted drafts kept
    stats.record(3, torch.tensor([3, 4]), num_kept=torch.tensor([3, 2]))
    # pass 4, a tree of 5 nodes and depth 2, 1 row: the path accepts 1 node, then a correction (2 emitted)
    stats.record(5, torch.tensor([2]), depth=2)
    return stats


def test_engine_metrics_by_hand():
    m = engine_metrics(hand_stats())
    # drafting row-steps: pass 1 (2 rows) + pass 3 (2 rows) + pass 4 (1 row) = 5; pass 2's rows drafted nothing
    assert m["drafting_steps"] == 5
    # draft tokens: 3*2 + 0*2 + 3*2 + 5 (tree nodes) = 17
    assert m["draft_tokens"] == 17
    # accepted: 3 + 0 + 0 + 0 + 2 + 2 (kept of the cut-short row) + 1 = 8
    assert m["accepted_tokens"] == 8
    # 1 + 8 / 5 = 2.6
    assert m["mean_acceptance_length"] == pytest.approx(2.6)
    # 8 / 17
    assert m["draft_acceptance_rate"] == pytest.approx(8 / 17)
    # accepted at position i (a tree level for pass 4): accepted lengths 3, 0, 2, 2, 1
    # position 0: 3, 2, 2, 1 -> 4; position 1: 3, 2, 2 -> 3; position 2: 3 -> 1
    assert m["accepted_tokens_per_position"] == [4, 3, 1]
    # verified at position i: verified lengths 3, 1, 3, 2 (cut short: its 2 kept), 2 (tree depth)
    # position 0: 5; position 1: 4 (all but row 1 of pass 1); position 2: 2 (the two 3s)
    # conditional: 4/5, 3/4, 1/2
    assert m["acceptance_per_position"] == pytest.approx([4 / 5, 3 / 4, 1 / 2])
    # unconditional: 4/5, 3/5, 1/5
    assert m["acceptance_per_position_unconditional"] == pytest.approx([4 / 5, 3 / 5, 1 / 5])
    # accepted lengths 3, 0, 2, 2, 1 -> one 0, one 1, two 2s, one 3
    assert m["accepted_length_histogram"] == [1, 1, 2, 1]


def test_engine_metrics_agree_with_decode_stats_names():
    stats = hand_stats()
    m = engine_metrics(stats)
    assert m["draft_acceptance_rate"] == stats.draft_efficiency
    assert m["acceptance_per_position"] == stats.position_acceptance
    # alpha (accepted / verified) is a different figure: 8 / (3 + 1 + 3 + 2 + 2) = 8 / 11
    assert stats.acceptance_rate == pytest.approx(8 / 11) != m["draft_acceptance_rate"]
    # the histogram's non-zero lengths are the drafting row-steps' entries of accepted_per_step
    drafted = [a for a in stats.accepted_per_step if a > 0]
    assert m["accepted_length_histogram"][1:] == [drafted.count(j) for j in range(1, 4)]


def test_no_drafting_steps_gives_nan_not_an_error():
    for stats in (DecodeStats(), hand_plain()):
        m = engine_metrics(stats)
        assert m["drafting_steps"] == 0 and m["accepted_tokens"] == 0
        assert math.isnan(m["mean_acceptance_length"]) and math.isnan(m["draft_acceptance_rate"])
        assert m["acceptance_per_position"] == m["acceptance_per_position_unconditional"] == []
        assert m["accepted_length_histogram"] == [0]


def hand_plain() -> DecodeStats:
    stats = DecodeStats()
    stats.record(0, torch.tensor([1, 1, 1]))  # plain decoding: one token per row, nothing drafted
    return stats


@pytest.mark.parametrize("drafter", ["draft model", "n-gram"])
def test_identities_on_a_generation(drafter):
    target, draft = make_toy_pair(4, 1, match=0.6, seed=3)
    d = DraftModelDrafter(draft) if drafter == "draft model" else NGramDrafter(max_ngram=2)
    prompt = torch.tensor([[1, 2, 1, 2, 3], [2, 1, 2, 1, 0]])
    stats = speculative_generate(target, d, prompt, 40, gamma=4, generator=torch.Generator().manual_seed(0)).stats
    m = engine_metrics(stats)
    steps, hist = m["drafting_steps"], m["accepted_length_histogram"]
    assert 0 < steps <= len(stats.accepted_per_step)
    assert m["mean_acceptance_length"] == pytest.approx(1 + m["accepted_tokens"] / steps)
    assert m["draft_acceptance_rate"] == pytest.approx(stats.accepted / stats.proposed)
    assert sum(hist) == steps
    assert sum(j * n for j, n in enumerate(hist)) == m["accepted_tokens"]
    assert all(n >= 0 for n in hist)
    unconditional = m["acceptance_per_position_unconditional"]
    assert all(a >= b for a, b in zip(unconditional, unconditional[1:]))
    assert sum(unconditional) == pytest.approx(m["mean_acceptance_length"] - 1)

"""The notebook streamer: every emitted token, in order, labelled by how the loop produced it."""
from __future__ import annotations

import io

import pytest
import torch

from specbook.decode import speculative_generate
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.protocols import Draft
from specbook.sampling import GREEDY, SamplingParams
from specbook.teach.streamer import TokenStreamer, step_kinds
from specbook.toy import make_toy_pair


class WrongDrafter:
    """Greedy: always drafts a token the target does not pick (its argmax + 1), K at a time."""

    def __init__(self, target):
        self.target = target

    def propose(self, contexts, gamma, params, generator=None):
        rows = []
        for c in contexts:
            best = int(self.target.next_logits(c.tolist()).argmax())
            rows.append([(best + 1) % self.target.vocab_size] * gamma)
        return Draft(torch.tensor(rows, dtype=torch.long).reshape(len(contexts), gamma), None)


class FixedTree:
    def propose(self, contexts, gamma, params, generator=None):
        return Draft(torch.tensor([[0, 1, 2]] * len(contexts)), None, torch.tensor([-1, -1, 0]))


def stream(target, drafter, prompt, n, params=GREEDY, gamma=3, **kw):
    s = TokenStreamer(None, mode="plain", out=io.StringIO(), **kw)
    out = speculative_generate(target, drafter, prompt, n, params=params, gamma=gamma, generator=torch.Generator().manual_seed(0), on_step=s)
    s.end()
    return s, out


def test_tokens_in_order_and_accepted_count_match_the_loop():
    target, draft = make_toy_pair(6, 1, match=0.6, seed=3)
    s, out = stream(target, DraftModelDrafter(draft), [1, 2], 40, SamplingParams())
    assert s.tokens == out.sequences()[0]
    assert s.counts()["accepted"] == out.stats.accepted
    # every pass that kept its last token ends in exactly one corrected or bonus token
    c = s.counts()
    assert c["corrected"] + c["bonus"] <= out.stats.target_passes and c["target"] == 0
    assert c["corrected"] > 0 and c["bonus"] > 0  # match=0.6: both happen


def test_a_perfect_draft_gives_bonus_tokens_and_a_wrong_one_corrections():
    target, _ = make_toy_pair(6, 1, match=0.6, seed=5)
    s, out = stream(target, DraftModelDrafter(target), [0], 17, gamma=3)  # the target drafts for itself
    assert s.counts()["corrected"] == 0 and s.counts()["bonus"] == 4  # 4 passes of 3 + 1, then 1 cut short
    assert s.kinds[:4] == ["accepted"] * 3 + ["bonus"]
    s, out = stream(target, WrongDrafter(target), [0], 6, gamma=2)
    # the last pass has room for no draft (the loop never drafts past the budget): a target token
    assert s.kinds == ["corrected"] * 5 + ["target"] and s.tokens == out.sequences()[0]


def test_no_draft_is_a_target_token_and_trees_are_labelled():
    target, _ = make_toy_pair(6, 1, seed=2)
    s, _ = stream(target, NGramDrafter(), [0, 1, 2, 3, 4, 5], 1)  # no repeated n-gram: nothing drafted
    assert s.kinds == ["target"]
    s, out = stream(target, FixedTree(), [0, 1], 12)
    assert s.tokens == out.sequences()[0] and s.counts()["accepted"] == out.stats.accepted


def test_step_kinds_reads_a_tree_leaf_as_bonus():
    class Step:  # a tree pass: root children 0 and 1, node 2 under node 0; path 0 -> 2 accepted
        rows, num_emitted, kept = (0,), torch.tensor([3]), torch.tensor([3])
        draft = Draft(torch.tensor([[4, 5, 6]]), None, torch.tensor([-1, -1, 0]))
        path = torch.tensor([[0, 2]])

    assert step_kinds(Step, 0) == ["accepted", "accepted", "bonus"]
    Step.path, Step.num_emitted, Step.kept = torch.tensor([[0, -1]]), torch.tensor([2]), torch.tensor([2])
    assert step_kinds(Step, 0) == ["accepted", "corrected"]  # node 0 has a child that was rejected


def test_ansi_plain_html_and_the_transformers_protocol():
    buf = io.StringIO()
    s = TokenStreamer(None, mode="ansi", out=buf)
    s.put(torch.tensor([[1, 2, 3]]))  # transformers sends the prompt first: skipped
    s.put(torch.tensor([7]))
    s.put([8])
    s.end()
    assert s.tokens == [7, 8] and s.text == "[7][8]" and "\033[" not in buf.getvalue().replace("\033[0m", "")
    assert s.ended and buf.getvalue().endswith("\n")
    target, draft = make_toy_pair(6, 1, match=0.9, seed=1)
    buf = io.StringIO()
    s = TokenStreamer(None, mode="ansi", out=buf)
    speculative_generate(target, DraftModelDrafter(draft), [1], 12, params=GREEDY, gamma=3, on_step=s)
    assert "\033[30;42m" in buf.getvalue()  # accepted drafts in green
    page = s.html()
    assert page.count("data-kind=") == len(s.segments) and "draft accepted" in page
    with pytest.raises(ValueError, match="mode"):
        TokenStreamer(None, mode="colour")
    with pytest.raises(ValueError, match="row"):
        TokenStreamer(None, row=-1)


def test_characters_split_across_tokens_are_held_back():
    class Bytes:  # token i is byte i; decode shows an unfinished UTF-8 character as U+FFFD
        def decode(self, ids):
            return bytes(ids).decode("utf-8", errors="replace")

    s = TokenStreamer(Bytes(), mode="plain", out=io.StringIO(), skip_prompt=False)
    s.put([0xC3])  # first byte of "é"
    assert s.segments == []
    s.put([0xA9, ord("x")])
    assert s.text == "éx" and [k for _, k in s.segments] == ["target", "target"]

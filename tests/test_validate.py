"""Bad inputs at the decode loop's doors: prompts, budgets, and whatever a drafter or a target hands back.

Each case must end in a ValueError or TypeError that names the culprit and the bad value, before the
target computes anything it would throw away (no hang, no NaN, no traceback from inside torch).
The broken drafters here are the ones a student writing a first drafter produces.
"""
from __future__ import annotations

import pytest
import torch

from specbook.decode import generate, speculative_generate
from specbook.drafters import DraftModelDrafter, NGramDrafter
from specbook.protocols import Draft
from specbook.sampling import GREEDY, SamplingParams
from specbook.toy import make_toy_pair

from support import refuses
from support import WrappedTarget

V = 6


class Counting(WrappedTarget):
    """A toy target that counts its forward passes and can be told to misbehave."""

    def __init__(self, inner, max_length=None, corrupt=None):
        super().__init__(inner)
        self.max_length, self.corrupt, self.forwards = max_length, corrupt, 0

    def forward(self, tokens, parents=None):
        self.forwards += 1
        logits = self.inner.forward(tokens, parents)
        if self.corrupt is None or self.forwards == 1:  # the first forward is the prompt's prefill
            return logits
        return self.corrupt(logits)


class Fixed:
    """A drafter that returns whatever it was given, whatever it is asked."""

    def __init__(self, make):
        self.make = make

    def propose(self, contexts, gamma, params, generator=None):
        return self.make(len(contexts))


def _pair():
    return make_toy_pair(V, 1, match=0.6, seed=3)


def _spec(drafter, prompt=((1, 2, 3),), target=None, **kw):
    target = target or Counting(_pair()[0])
    kw.setdefault("params", SamplingParams())
    return lambda: speculative_generate(target, drafter, [list(p) for p in prompt], kw.pop("max_new_tokens", 8),
                                        gamma=kw.pop("gamma", 3), generator=torch.Generator().manual_seed(0), **kw)


def _q(B, K):
    return torch.full((B, K, V), 1.0 / V)  # (B, K, V) uniform: every token has q > 0


BAD_DRAFTS = [
    ("not a Draft", lambda B: (torch.zeros(B, 2, dtype=torch.long), None), "Draft", "tuple"),
    ("None", lambda B: None, "Draft", "None"),
    ("a list of tokens", lambda B: Draft([[1, 2]] * B), "Draft.tokens", "list"),
    ("1-D tokens", lambda B: Draft(torch.tensor([1, 2])), "Draft.tokens", "(2,)"),
    ("wrong batch", lambda B: Draft(torch.zeros(B + 1, 2, dtype=torch.long)), "Draft.tokens", "B = 1"),
    ("float tokens", lambda B: Draft(torch.zeros(B, 2)), "Draft.tokens", "float32"),
    ("bool tokens", lambda B: Draft(torch.zeros(B, 2, dtype=torch.bool)), "Draft.tokens", "bool"),
    ("token past the vocabulary", lambda B: Draft(torch.full((B, 2), V)), "vocabulary", f"max {V}"),
    ("negative token", lambda B: Draft(torch.full((B, 2), -1)), "vocabulary", "min -1"),
    ("probs of the wrong shape", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), _q(B, 3)), "Draft.probs",
     "(1, 3, 6)"),
    ("probs as ints", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), torch.ones(B, 2, V, dtype=torch.long)),
     "Draft.probs", "int64"),
    ("NaN probs", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), _q(B, 2).index_fill(2, torch.tensor([0]), float("nan"))),
     "Draft.probs", "NaN"),
    ("probs summing to 2", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), 2 * _q(B, 2)), "Draft.probs", "summing to 2"),
    ("q(x) = 0 for the drafted token", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long),
                                                     torch.nn.functional.one_hot(torch.ones(B, 2, dtype=torch.long), V).float()),
     "probability 0", "Draft.tokens[0, 0] = 0"),
    ("a node that is its own parent", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), None, torch.tensor([-1, 1])),
     "Draft.parents[1] = 1", "earlier node"),
    ("a cycle", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), None, torch.tensor([1, 0])),
     "Draft.parents[0] = 1", "earlier node"),
    ("parents of the wrong length", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), None, torch.tensor([-1])),
     "Draft.parents", "(1,)"),
    ("float parents", lambda B: Draft(torch.zeros(B, 2, dtype=torch.long), None, torch.tensor([-1.0, 0.0])),
     "Draft.parents", "float32"),
]


@pytest.mark.parametrize("name, make, fragments", [pytest.param(c[0], c[1], c[2:], id=c[0]) for c in BAD_DRAFTS])
def test_bad_draft_is_refused_before_the_target_runs(name, make, fragments):
    target = Counting(_pair()[0])
    refuses(_spec(Fixed(make), target=target), "Fixed.propose()", *fragments)
    assert target.forwards == 1  # the prompt's prefill, and nothing after the bad draft


def test_q_zero_used_to_bias_the_output():
    """Why q(x) = 0 must be refused: min(1, p/q) is then infinite and x is always accepted."""
    target = Counting(_pair()[0])
    bad = Fixed(lambda B: Draft(torch.zeros(B, 1, dtype=torch.long),
                                torch.nn.functional.one_hot(torch.ones(B, 1, dtype=torch.long), V).float()))
    with pytest.raises(ValueError, match="probability 0"):
        _spec(bad, target=target)()


BAD_TARGET_OUTPUTS = [
    ("NaN logits", lambda l: l.masked_fill(torch.ones_like(l, dtype=torch.bool), float("nan")), "NaN"),
    ("missing a position", lambda l: l[:, :-1], "shape"),
    ("integer logits", lambda l: l.long(), "float logits"),
    ("a tuple", lambda l: (l,), "tuple"),
]


@pytest.mark.parametrize("name, corrupt, fragment", [pytest.param(*c, id=c[0]) for c in BAD_TARGET_OUTPUTS])
def test_bad_target_output_is_refused(name, corrupt, fragment):
    target = Counting(_pair()[0], corrupt=corrupt)
    refuses(_spec(NGramDrafter(), target=target), "Counting.forward()", fragment)
    refuses(lambda: generate(Counting(_pair()[0], corrupt=corrupt), [[1, 2, 3]], 4), "Counting.forward()", fragment)


BAD_CALLS = [
    ("bool prompt", dict(prompt=torch.tensor([True, False])), ("prompt", "bool")),
    ("float prompt", dict(prompt=torch.tensor([1.0, 2.0])), ("prompt", "float32")),
    ("empty prompt", dict(prompt=[]), ("prompt", "empty")),
    ("empty row", dict(prompt=[[1, 2], []]), ("prompt[1]", "empty")),
    ("token past the vocabulary", dict(prompt=[[1, 2], [3, V]]), ("prompt[1]", f"max {V}")),
    ("a string", dict(prompt="hello"), ("prompt", "str")),
    ("bool in a row", dict(prompt=[[1, True]]), ("prompt", "True")),
    ("3-D prompt", dict(prompt=torch.zeros(1, 2, 2, dtype=torch.long)), ("prompt", "(1, 2, 2)")),
    ("max_new_tokens=True", dict(max_new_tokens=True), ("max_new_tokens", "True")),
    ("max_new_tokens=0", dict(max_new_tokens=0), ("max_new_tokens", "0")),
    ("max_new_tokens=2.0", dict(max_new_tokens=2.0), ("max_new_tokens", "2.0")),
    ("gamma=True", dict(gamma=True), ("gamma", "True")),
    ("gamma=-1", dict(gamma=-1), ("gamma", "-1")),
    ("eos past the vocabulary", dict(eos_token_id=V), ("eos_token_id", str(V))),
    ("eos=True", dict(eos_token_id=True), ("eos_token_id", "True")),
    ("eos list with a bad id", dict(eos_token_id=[1, -1]), ("eos_token_id", "-1")),
    ("params a dict", dict(params={"temperature": 1.0}), ("params", "dict")),
    ("on_step a string", dict(on_step="print"), ("on_step", "str")),
]


@pytest.mark.parametrize("name, kwargs, fragments", [pytest.param(*c, id=c[0]) for c in BAD_CALLS])
def test_bad_call_is_refused_before_any_work(name, kwargs, fragments):
    target = Counting(_pair()[0])
    kw = dict(prompt=[[1, 2, 3]], max_new_tokens=8, gamma=3, params=SamplingParams())
    kw.update(kwargs)
    refuses(lambda: speculative_generate(target, NGramDrafter(), **kw), *fragments)
    assert target.forwards == 0
    if "gamma" not in kwargs and "on_step" not in kwargs:
        kw.pop("gamma"), kw.pop("on_step", None)
        refuses(lambda: generate(target, **kw), *fragments)
        assert target.forwards == 0


def test_budget_is_checked_before_any_work_and_says_what_to_change():
    target = Counting(_pair()[0], max_length=20)
    prompt = [list(range(V)) * 2]  # 12 tokens: 12 + 10 - 1 = 21 > 20
    for call in (lambda: generate(target, prompt, 10), lambda: speculative_generate(target, NGramDrafter(), prompt, 10)):
        refuses(call, "max_length=20", "max_new_tokens=10", "shorten the prompt")
    assert target.forwards == 0


def test_speculation_needs_no_more_context_than_plain_decoding():
    """A request that fits plain decoding exactly fits speculation too: no drafts are asked past the budget."""
    inner, draft = _pair()
    prompt = [[1, 2, 3, 4]]
    for gamma in (1, 4, 8):
        target = Counting(inner, max_length=4 + 12 - 1)
        out = speculative_generate(target, DraftModelDrafter(draft), prompt, 12, params=GREEDY, gamma=gamma)
        assert out.sequences() == generate(inner, prompt, 12, params=GREEDY).sequences()


def test_legal_unusual_prompts_work():
    """Rows of any lengths, narrow integer dtypes, a list of tensors: all legal."""
    target, draft = _pair()
    rows = [torch.tensor([1, 2, 3], dtype=torch.uint8), torch.tensor([4], dtype=torch.int16), [5, 0]]
    out = speculative_generate(target, DraftModelDrafter(draft), rows, 6, params=GREEDY, gamma=2)
    ref = [generate(target, [[int(t) for t in r]], 6, params=GREEDY).sequences()[0] for r in rows]
    assert out.sequences() == ref
    equal = [torch.tensor([1, 2]), torch.tensor([3, 4])]  # a list of equal-length tensors (once refused)
    assert generate(target, equal, 3, params=GREEDY).new_tokens.shape == (2, 3)

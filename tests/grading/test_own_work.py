"""specbook.grading.own_work finds a student's function that hands its work to the library, and
assert_verifier / assert_token_rule rerun a failed check once when given a second seed."""
from __future__ import annotations

import pytest
import torch

import specbook.grading.token_rule as token_rule
import specbook.verify as library
from specbook.grading.own_work import VERIFIERS, assert_own_work, library_calls
from specbook.tree_attention import tree_mask as library_tree_mask
from specbook.verify import verify_chain

P = torch.tensor([[0.4, 0.3, 0.2, 0.1], [0.1, 0.2, 0.3, 0.4], [0.25, 0.25, 0.25, 0.25]], dtype=torch.float64)
Q = P[:2].flip(-1).clone()
X = torch.tensor([3, 1])
CALLS = [(P, Q, X, torch.Generator().manual_seed(s)) for s in range(3)]


def honest(target_probs, draft_probs, draft_tokens, generator=None):
    out = []
    for j, x in enumerate(draft_tokens.tolist()):
        if torch.rand((), generator=generator, dtype=target_probs.dtype) * draft_probs[j, x] < target_probs[j, x]:
            out.append(x)
            continue
        rest = (target_probs[j] - draft_probs[j]).clamp(min=0)
        out.append(int(torch.multinomial(rest, 1, generator=generator)))
        return torch.tensor(out)
    return torch.tensor(out + [int(torch.multinomial(target_probs[-1], 1, generator=generator))])


def by_name(target_probs, draft_probs, draft_tokens, generator=None):
    tokens, n = verify_chain(target_probs[None], draft_probs[None], draft_tokens[None], generator)
    return tokens[0, : int(n[0])]


def by_module(target_probs, draft_probs, draft_tokens, generator=None):
    return _helper(target_probs, draft_probs, draft_tokens, generator)


def _helper(target_probs, draft_probs, draft_tokens, generator):  # one call deeper, through the module
    return [library.verify_token(target_probs[0], draft_probs[0], int(draft_tokens[0]), generator)]


def test_an_honest_function_calls_nothing_forbidden():
    assert library_calls(honest, VERIFIERS, CALLS) == []
    assert_own_work(honest, VERIFIERS, CALLS)


@pytest.mark.parametrize("fn, name", [(by_name, "verify_chain"), (by_module, "verify_token")])
def test_delegation_is_found_however_the_library_was_imported(fn, name):
    assert f"specbook.verify.{name}" in library_calls(fn, VERIFIERS, CALLS)
    with pytest.raises(AssertionError, match=f"{fn.__name__} calls specbook's own {name}.*write it yourself"):
        assert_own_work(fn, VERIFIERS, CALLS)


def test_the_graders_own_library_calls_do_not_count():
    verify_chain(P[None], Q[None], X[None])  # outside the student's function: not watched
    assert library_calls(honest, VERIFIERS, CALLS) == []


def test_a_failing_function_is_not_reported_as_delegating():
    def broken(*args):
        raise RuntimeError("bug")
    assert library_calls(broken, VERIFIERS, CALLS) == []


def test_allowed_reference_versions_are_exempt():
    def positions(parents, offset):  # uses the reference mask the grader handed in
        return offset + library_tree_mask(parents).sum(-1) - 1
    forbidden = ("specbook.tree.check_parents",)
    parents = torch.tensor([-1, 0, 0])
    assert library_calls(positions, forbidden, [(parents, 2)]) == ["specbook.tree.check_parents"]
    assert library_calls(positions, forbidden, [(parents, 2)], allowed=("specbook.tree_attention.tree_mask",)) == []


@pytest.mark.parametrize("bad, match", [
    (dict(fn=3), "fn must be callable"),
    (dict(forbidden=()), "forbidden must name"),
    (dict(forbidden=("specbook.no_such_module.f",)), "cannot import"),
    (dict(forbidden=("specbook.grading.own_work.VERIFIERS",)), "must name Python functions"),
])
def test_bad_arguments_are_named(bad, match):
    args = dict(fn=honest, forbidden=VERIFIERS, calls=CALLS) | bad
    with pytest.raises(ValueError, match=match):
        library_calls(**args)


class _Report:
    def __init__(self, passed):
        self.passed = passed

    def __str__(self):
        return "What went wrong: a report"


def test_retry_seed_reruns_a_failed_check_once(monkeypatch):
    seeds = []

    def fake_check(fn, **kwargs):
        seeds.append(kwargs["seed"])
        return _Report(passed=kwargs["seed"] == 2)

    monkeypatch.setattr(token_rule, "check_token_rule", fake_check)
    assert token_rule.assert_token_rule(honest, seed=1, retry_seed=2).passed and seeds == [1, 2]
    seeds.clear()
    with pytest.raises(AssertionError):
        token_rule.assert_token_rule(honest, seed=1)  # no second seed: the first verdict stands
    assert seeds == [1]
    seeds.clear()
    token_rule.assert_token_rule(honest, seed=2, retry_seed=3)  # passed first time: no rerun
    assert seeds == [2]

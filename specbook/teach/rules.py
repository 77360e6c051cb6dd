"""One position, many acceptance rules: the proof lesson's catalogue.

Shape legend: V vocab, N samples.

Each :class:`Rule` pairs an exact emitted law (float64, from :mod:`specbook.laws` and
:mod:`specbook.naive`) with a batched sampler, at one position of a toy pair
(:func:`position_setup`).  The correct rule is the modified rejection sampling of Leviathan et
al. 2023 (Algorithm 1, Theorem 3.5) and Chen et al. 2023, run through the library's own
:func:`specbook.verify.verify_chain`; the others are the tempting mistakes the lesson shows
failing: the naive rules of :mod:`specbook.naive`, and temperature applied to the target only.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from ..laws import conditional_emission_law
from ..naive import NAIVE_RULES
from ..sampling import SamplingParams
from ..toy import make_toy_pair
from ..verify import verify_chain


@dataclass(frozen=True)
class PositionSetup:
    """One position of a toy pair, after sampling parameters.

    target_probs: (V,) p at temperature T (what the output must follow)
    draft_probs:  (V,) q at temperature T (what the drafts are drawn from)
    raw_draft_probs: (V,) q before temperature (what a verifier that forgets the draft's
                  sampling parameters would divide by)
    """

    target_probs: torch.Tensor
    draft_probs: torch.Tensor
    raw_draft_probs: torch.Tensor


def position_setup(match: float = 0.3, temperature: float = 0.6, vocab_size: int = 8, seed: int = 2,
                   context: Sequence[int] = (0,)) -> PositionSetup:
    """p and q at one context of :func:`specbook.toy.make_toy_pair` (float64)."""
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0 for sampling, got {temperature!r}")
    target, draft = make_toy_pair(vocab_size, 1, match=match, seed=seed)
    params = SamplingParams(temperature=float(temperature))
    return PositionSetup(target.next_probs(list(context), params), draft.next_probs(list(context), params),
                         draft.next_probs(list(context)))


@dataclass(frozen=True)
class Rule:
    """A single-position acceptance rule: its exact emitted law and a batched sampler."""

    name: str
    description: str
    law: Callable[[PositionSetup], torch.Tensor]  # -> (V,)
    sample: Callable[[PositionSetup, int, torch.Generator | None], torch.Tensor]  # -> (N,) long
    lossless: bool


def _drafts(setup: PositionSetup, n: int, generator) -> torch.Tensor:
    return torch.multinomial(setup.draft_probs, n, replacement=True, generator=generator)  # (N,)


def _chain_first(target_probs, draft_probs, drafts, generator) -> torch.Tensor:
    """The first token verify_chain emits for K = 1 drafts, n rows at once."""
    n, V = drafts.shape[0], target_probs.shape[0]
    p = target_probs.expand(n, 2, V)  # (N, 2, V) (the bonus position is never the first token)
    q = draft_probs.expand(n, 1, V)  # (N, 1, V)
    tokens, _ = verify_chain(p, q, drafts[:, None], generator)
    return tokens[:, 0]  # (N,)


def _correct_law(s: PositionSetup) -> torch.Tensor:
    return s.target_probs.clone()


def _correct_sample(s: PositionSetup, n: int, generator) -> torch.Tensor:
    return _chain_first(s.target_probs, s.draft_probs, _drafts(s, n, generator), generator)


def _target_only_law(s: PositionSetup) -> torch.Tensor:
    law = torch.zeros_like(s.target_probs)
    for x, qx in enumerate(s.draft_probs.tolist()):
        if qx > 0:
            law += qx * conditional_emission_law(s.target_probs, s.raw_draft_probs, x)
    return law


def _target_only_sample(s: PositionSetup, n: int, generator) -> torch.Tensor:
    return _chain_first(s.target_probs, s.raw_draft_probs, _drafts(s, n, generator), generator)


def _naive(rule) -> Rule:
    def law(s: PositionSetup) -> torch.Tensor:
        return rule.law(s.target_probs, s.draft_probs)

    def sampler(s: PositionSetup, n: int, generator) -> torch.Tensor:
        drafts = _drafts(s, n, generator).tolist()
        return torch.tensor([rule.sampler(s.target_probs, s.draft_probs, x, generator) for x in drafts])

    return Rule(rule.name, rule.description, law, sampler, False)


CORRECT = "modified rejection sampling"
TARGET_ONLY = "temperature on target only"

RULES: dict[str, Rule] = {
    CORRECT: Rule(CORRECT, "accept with min(1, p/q), else draw from the residual max(0, p - q)",
                  _correct_law, _correct_sample, True),
    **{r.name: _naive(r) for r in NAIVE_RULES},
    TARGET_ONLY: Rule(TARGET_ONLY, "the draft is sampled at temperature T, but the verifier divides by "
                      "the draft's unprocessed q (temperature applied on the target side only)",
                      _target_only_law, _target_only_sample, False),
}


def rule(name: str) -> Rule:
    """The rule called ``name`` (a key of :data:`RULES`)."""
    if name not in RULES:
        raise ValueError(f"rule must be one of {list(RULES)}, got {name!r}")
    return RULES[name]

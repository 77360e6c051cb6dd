"""A step-by-step trace of speculative decoding, recorded from the library's one loop.

Shape legend: K draft length, V vocab.

:func:`trace_speculative` runs :func:`specbook.decode.speculative_generate` itself and listens
on its ``on_step`` hook; it never re-implements the loop, so its tokens and counts are the
loop's own.  It only *records* each step (the drafts, p and q at every position, the
acceptance probability min(1, p(x)/q(x)) of Leviathan et al. 2023, Algorithm 1, and the
verdicts) so a lesson can colour it: accepted, rejected, unverified, corrected, bonus.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from ..decode import DecodeStats, DecodeStep, speculative_generate
from ..laws import accept_prob
from ..protocols import Drafter, Target
from ..sampling import SamplingParams, logits_to_probs
from .html import trace_html


@dataclass(frozen=True)
class StepTrace:
    """One draft-verify-accept round of a single sequence.

    draft_tokens:  the K proposed tokens
    target_probs:  (K+1, V) p at each draft position and the bonus position
    draft_probs:   (K, V) q the drafts were sampled from (one-hot for deterministic drafts)
    accept_probs:  min(1, p(x_i) / q(x_i)) for each draft (the chance it survives, if reached)
    num_accepted:  drafts accepted (0..K); the next draft, if any, was rejected
    final_token:   the corrected token (after a rejection) or the bonus token (all accepted)
    """

    draft_tokens: tuple[int, ...]
    target_probs: torch.Tensor
    draft_probs: torch.Tensor
    accept_probs: tuple[float, ...]
    num_accepted: int
    final_token: int

    @property
    def final_kind(self) -> str:
        return "bonus" if self.num_accepted == len(self.draft_tokens) else "corrected"

    @property
    def emitted(self) -> tuple[int, ...]:
        return self.draft_tokens[: self.num_accepted] + (self.final_token,)

    def kinds(self) -> list[tuple[int, str]]:
        """Every token shown for this step, with its fate, in order."""
        out = [(t, "accepted") for t in self.draft_tokens[: self.num_accepted]]
        if self.num_accepted < len(self.draft_tokens):
            out.append((self.draft_tokens[self.num_accepted], "rejected"))
            out += [(t, "unverified") for t in self.draft_tokens[self.num_accepted + 1:]]
        out.append((self.final_token, self.final_kind))
        return out


@dataclass
class Trace:
    """A whole speculative generation, step by step.

    ``tokens`` are the new tokens (length max_new_tokens); ``stats`` are the loop's own counters.
    """

    prompt: list[int]
    steps: list[StepTrace]
    tokens: list[int]
    token_names: Sequence[str] | None = field(default=None, repr=False)
    stats: DecodeStats | None = field(default=None, repr=False)

    @property
    def target_passes(self) -> int:
        return len(self.steps)

    @property
    def accepted_per_step(self) -> list[int]:
        return [s.num_accepted for s in self.steps]

    def count(self, kind: str) -> int:
        return sum(k == kind for s in self.steps for _, k in s.kinds())

    def _repr_html_(self) -> str:
        return trace_html(self, self.token_names)


def step_trace(step: DecodeStep, params: SamplingParams) -> StepTrace:
    """What one loop step looked like for row 0 of a chain draft."""
    if step.draft.parents is not None:
        raise ValueError("trace_speculative traces chains only; this drafter proposed a tree")
    # the verifier's p; with greedy verification, the one-hot argmax the greedy rule follows
    target_probs = step.target_probs[0] if step.target_probs is not None else logits_to_probs(
        step.target_logits[0], params)  # (K+1, V)
    draft_tokens = step.draft.tokens[0].long()  # (K,)
    if step.draft.probs is None:  # deterministic drafts: q is one-hot
        draft_probs = torch.nn.functional.one_hot(draft_tokens.cpu(), target_probs.shape[-1]).to(target_probs)  # (K, V)
    else:
        draft_probs = step.draft.probs[0]  # (K, V)
    drafts = draft_tokens.tolist()
    acc = tuple(float(accept_prob(float(target_probs[i, x]), float(draft_probs[i, x]))) for i, x in enumerate(drafts))
    n = int(step.num_emitted[0])
    return StepTrace(tuple(drafts), target_probs.detach().cpu(), draft_probs.detach().cpu(), acc, n - 1,
                     int(step.tokens[0, n - 1]))


def trace_speculative(target: Target, drafter: Drafter, prompt, max_new_tokens: int,
                      params: SamplingParams = SamplingParams(), gamma: int = 4,
                      generator: torch.Generator | None = None, token_names: Sequence[str] | None = None) -> Trace:
    """Run :func:`specbook.decode.speculative_generate` on one sequence and record every step.

    ``prompt`` is a 1-D token sequence (one row); the other arguments are the loop's.  The
    trace's tokens and stats are the loop's result for the same seed, by construction.
    """
    prompt_t = torch.as_tensor(prompt, dtype=torch.long)
    if prompt_t.ndim != 1 or prompt_t.numel() == 0:
        raise ValueError(f"prompt must be a non-empty 1-D token sequence, got shape {tuple(prompt_t.shape)}")
    steps: list[StepTrace] = []
    result = speculative_generate(target, drafter, prompt_t, max_new_tokens, params=params, gamma=gamma, generator=generator,
                                  on_step=lambda step: steps.append(step_trace(step, params)))
    return Trace(prompt_t.tolist(), steps, result.new_tokens[0].tolist(), token_names, result.stats)

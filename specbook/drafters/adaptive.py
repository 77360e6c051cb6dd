"""Adaptive draft length: choose gamma each step from the acceptance seen so far.

Shape legend: B batch, K draft length, T context length.

A fixed gamma is tuned for one acceptance rate, but acceptance swings within one
generation: a drafter copying a quoted block is almost always right, the same drafter
in free-running prose almost never.  ``AdaptiveGamma`` wraps any chain drafter and asks
it for a different number of tokens each step.  It needs no hook in the decode loop:
the loop shows every drafter the full history, and the history that comes back after a
step is the previous context + the accepted drafts + one target token.  So the number
accepted is the length of the common prefix of the new tokens and the previous draft.
(The target token that follows a rejection never equals the rejected draft: greedy
verification emits the argmax, which differed, and the residual max(0, p - q) is zero at
a token with q(x) > p(x), the only kind that can be rejected.)

Two policies:

* ``"model"`` (default): estimate the per-token acceptance rate alpha from recent steps
  (exponentially weighted counts of accepted / verified drafts, a Beta-style prior of
  ``prior`` pseudo-drafts at ``prior_alpha``) and draft the gamma that maximises the
  predicted speedup E[tokens](alpha, gamma) / (gamma c + v(gamma)) of Leviathan et al.
  (2023, eq. 1 and Thm 3.8), with the drafter's cost c and the measured verify-cost curve
  v.  At least ``min_gamma`` tokens are always drafted, so acceptance stays observable.
* ``"heuristic"``: transformers' assisted-generation schedule (Hugging Face, 2023):
  +2 after a step whose drafts were all accepted, -1 otherwise.

The loop's ``gamma`` argument is the ceiling: the policy never asks for more.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch

from .. import theory
from ..protocols import Draft, Drafter, SupportsSelectRows
from ..sampling import SamplingParams


@dataclass(frozen=True)
class GammaPolicy:
    """Settings of the adaptive policy (see the module docstring)."""

    kind: str = "model"
    c: float = 0.0  # draft step cost / target step cost
    verify_cost: tuple[float, ...] = ()  # v(gamma) for gamma = 0, 1, ...; beyond the end, the last value; () = 1
    decay: float = 0.8  # weight of the past per step (0 = only the last step counts)
    prior: float = 1.0  # pseudo-drafts in the prior
    prior_alpha: float = 0.5
    min_gamma: int = 1
    start_gamma: int = 4  # first step of the heuristic

    def __post_init__(self):
        if self.kind not in ("model", "heuristic"):
            raise ValueError(f"kind must be 'model' or 'heuristic', got {self.kind!r}")
        if not self.c >= 0:
            raise ValueError(f"c must be >= 0, got {self.c!r}")
        if any(not v > 0 for v in self.verify_cost):
            raise ValueError(f"verify_cost entries must be > 0, got {self.verify_cost!r}")
        if not 0 <= self.decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {self.decay!r}")
        if not self.prior > 0 or not 0 < self.prior_alpha < 1:
            raise ValueError(f"need prior > 0 and 0 < prior_alpha < 1, got {self.prior!r}, {self.prior_alpha!r}")
        if self.min_gamma < 0 or self.start_gamma < self.min_gamma:
            raise ValueError(f"need 0 <= min_gamma <= start_gamma, got {self.min_gamma}, {self.start_gamma}")

    def v(self, gamma: int) -> float:
        if not self.verify_cost:
            return 1.0
        return self.verify_cost[min(gamma, len(self.verify_cost) - 1)]


def accepted_count(previous: list[int], draft: list[int], current: list[int]) -> int | None:
    """Drafts accepted in the last step, read off the histories; None if ``current`` does not extend ``previous``."""
    n = len(previous)
    if len(current) <= n or current[:n] != previous:
        return None
    new = current[n:]
    a = 0
    while a < len(draft) and a < len(new) - 1 and new[a] == draft[a]:
        a += 1
    return a


def revealed(previous: list[int], draft: list[int], current: list[int]) -> tuple[int, int]:
    """(right, judged): how many leading draft tokens the new history confirms, and how many it judged.

    Compares the draft with the tokens the step emitted; with a shadow draft longer than what
    was verified, the emitted target token after the accepted ones also judges one more draft.
    """
    new = current[len(previous):]
    right = 0
    while right < min(len(draft), len(new)) and new[right] == draft[right]:
        right += 1
    return right, min(right + 1, len(draft), len(new))


class AdaptiveGamma:
    """Wrap a chain drafter; draft a policy-chosen number of tokens (at most the loop's gamma) per step.

    shadow: for drafters whose drafts are free and deterministic (prompt lookup), always ask for the
            full ``gamma`` tokens, verify only the chosen number, and score the whole proposal against
            the tokens that come back.  Acceptance stays observable even at gamma 0, so the policy may
            stop drafting altogether (``min_gamma=0``) where lookups keep failing.  If the drafter
            reports ``match_lengths`` (one per row, as ``NGramDrafter`` does), acceptance is
            estimated separately for each match length: a 4-token match is a better bet than a 1-token
            one, and gets a longer draft.
    """

    def __init__(self, drafter: Drafter, policy: GammaPolicy = GammaPolicy(), shadow: bool = False):
        if not hasattr(drafter, "propose"):
            raise ValueError(f"drafter must have a propose method, got {type(drafter).__name__}")
        if policy.min_gamma == 0 and not shadow:
            raise ValueError("min_gamma=0 needs shadow=True: without drafts nothing would be observed again")
        self.drafter, self.policy, self.shadow = drafter, policy, shadow
        self.reset()

    def reset(self) -> None:
        """Forget the acceptance history (a new workload)."""
        self._counts: dict = {}  # bucket -> [accepted, verified], exponentially weighted per observation
        self._heuristic_gamma = self.policy.start_gamma
        self._last: list[tuple[list[int], list[int], int, object]] | None = None  # (context, proposal, verified, bucket)
        self.history: list[int] = []  # gamma chosen at each step, for plots and tests

    @property
    def passes(self) -> int:
        return int(getattr(self.drafter, "passes", 0))

    def alpha_estimate(self, bucket=None) -> float:
        p = self.policy
        acc, ver = self._counts.get(bucket, (0.0, 0.0))
        return (acc + p.prior * p.prior_alpha) / (ver + p.prior)

    def _observe(self, contexts: list[list[int]]) -> None:
        if self._last is None or len(self._last) != len(contexts):
            return
        accepted = [accepted_count(prev, prop[:k], cur) for (prev, prop, k, _), cur in zip(self._last, contexts)]
        if any(a is None for a in accepted):
            return  # not a continuation of the last step: nothing to learn from
        p = self.policy
        for a, (prev, prop, k, bucket), cur in zip(accepted, self._last, contexts):
            right, judged = revealed(prev, prop, cur) if self.shadow else (a, min(a + 1, k))
            if judged:
                acc, ver = self._counts.get(bucket, (0.0, 0.0))
                self._counts[bucket] = (p.decay * acc + right, p.decay * ver + judged)
        if p.kind == "heuristic" and any(k for _, _, k, _ in self._last):
            all_in = all(a == k for a, (_, _, k, _) in zip(accepted, self._last))
            self._heuristic_gamma = (self._heuristic_gamma + 2 if all_in
                                     else max(p.min_gamma, self._heuristic_gamma - 1))

    def choose(self, ceiling: int, bucket=None) -> int:
        """The draft length for the next step, in [min(min_gamma, ceiling), ceiling]."""
        p = self.policy
        if p.kind == "heuristic":
            self._heuristic_gamma = g = min(self._heuristic_gamma, ceiling)  # never climb far above the ceiling
        else:
            alpha = self.alpha_estimate(bucket)
            best, best_speedup = 0, 1.0 / p.v(0)
            for g in range(1, ceiling + 1):
                s = theory.speedup(alpha, g, p.c, p.v(g))
                if s > best_speedup:
                    best, best_speedup = g, s
            g = best
        return max(min(p.min_gamma, ceiling), min(g, ceiling))

    def select_rows(self, rows: list[int]) -> None:
        """Rows that ended leave the batch: forget their pending proposals, tell the inner drafter."""
        if self._last is not None:
            self._last = [self._last[r] for r in rows]
        if isinstance(self.drafter, SupportsSelectRows):
            self.drafter.select_rows(rows)

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        rows = [c.tolist() for c in contexts]
        self._observe(rows)
        if self.shadow:  # draft first (free), then decide how much of it to verify
            draft = self.drafter.propose(contexts, gamma, params, generator)
            buckets = list(getattr(self.drafter, "match_lengths", None) or [None] * len(rows))
            g = max(self.choose(min(gamma, draft.num_tokens), b) for b in buckets) if draft.num_tokens else 0
            proposals = draft.tokens.tolist()
            draft = Draft(draft.tokens[:, :g], None if draft.probs is None else draft.probs[:, :g])
        else:
            buckets = [None] * len(rows)
            g = self.choose(gamma)
            draft = self.drafter.propose(contexts, g, params, generator)
            proposals = draft.tokens.tolist()
        self.history.append(g)
        self._last = [(r, prop, draft.num_tokens, b) for r, prop, b in zip(rows, proposals, buckets)]
        return draft

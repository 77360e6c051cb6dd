"""A load-aware speculation scheduler: gamma chosen each step from the live batch size and recent acceptance.

Shape legend: B batch (live rows), K draft length, n positions per row in one target pass.

Speculation is free only while a decode step leaves arithmetic idle (the memory-bound side of
the roofline, Williams et al. 2009).  One target pass over B rows and n positions per row costs
t(B, n); its verify-cost ratio on this machine is

    v_B(n) = t(B, n) / t(B, 1)

which is close to 1 at small B (the weights are streamed once whatever n is) and grows towards n
once B * n positions saturate the arithmetic units.  Leviathan et al. (2023, eq. 1 and Thm 3.8)
then give the throughput of speculation relative to plain decoding *at the same batch size*:

    S_B(alpha, gamma) = E(alpha, gamma) / (gamma c_B + v_B(gamma + 1)),
    E(alpha, gamma)   = (1 - alpha^(gamma+1)) / (1 - alpha)

:class:`BatchScheduler` wraps a chain drafter, estimates alpha from the last steps (exponentially
weighted accepted / verified drafts, read off the histories the loop shows it, as
:class:`~specbook.drafters.adaptive.AdaptiveGamma` does), and each step drafts the gamma in
[0, ceiling] that maximises S_B at the current number of live rows; gamma = 0 (plain decoding)
whenever no gamma beats 1.  The costs are data (:class:`BatchCosts`), measured by the caller on
this machine (``specbook.bench.batch`` measures them), so the policy itself has no stopwatch.

Lossless whatever gamma it picks: every step is still verified by the loop's exact rule.
"""
from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import torch

from .. import theory
from ..protocols import Draft, Drafter, SupportsSelectRows
from ..sampling import SamplingParams
from .adaptive import accepted_count, revealed


def _interpolate(table: Mapping[int, float], batch: int) -> float:
    """Linear interpolation of ``table`` in log2(batch size); clamped at the measured ends."""
    sizes = sorted(table)
    if batch <= sizes[0]:
        return table[sizes[0]]
    if batch >= sizes[-1]:
        return table[sizes[-1]]
    hi = next(s for s in sizes if s >= batch)
    lo = max(s for s in sizes if s <= batch)
    if hi == lo:
        return table[lo]
    w = (math.log2(batch) - math.log2(lo)) / (math.log2(hi) - math.log2(lo))
    return (1 - w) * table[lo] + w * table[hi]


@dataclass(frozen=True)
class BatchCosts:
    """Measured costs of one machine, target and drafter.

    verify_cost: {B: (v_B(1), v_B(2), ..., v_B(n_max))} with v_B(1) = 1; a longer chain than measured
                 is priced by extrapolating the last step linearly.
    draft_cost:  {B: c_B}, one draft step over one target step at batch B, or one float for every B
                 (0 for a drafter without a model, such as prompt lookup).
    """

    verify_cost: Mapping[int, tuple[float, ...]]
    draft_cost: Mapping[int, float] | float = 0.0

    def __post_init__(self):
        if not isinstance(self.verify_cost, Mapping) or not self.verify_cost:
            raise ValueError(f"verify_cost must map batch sizes to curves, got {self.verify_cost!r}")
        for b, curve in self.verify_cost.items():
            if not isinstance(b, int) or b < 1:
                raise ValueError(f"verify_cost keys must be batch sizes >= 1, got {b!r}")
            if len(curve) < 1 or any(not v > 0 for v in curve):
                raise ValueError(f"verify_cost[{b}] must be a non-empty curve of positive ratios, got {curve!r}")
        costs = self.draft_cost.values() if isinstance(self.draft_cost, Mapping) else [self.draft_cost]
        if any(not c >= 0 for c in costs):
            raise ValueError(f"draft_cost must be >= 0, got {self.draft_cost!r}")

    def v(self, batch: int, positions: int) -> float:
        """v_B(n) at this batch size (interpolated between measured batch sizes)."""
        def at(curve):
            if positions <= len(curve):
                return curve[positions - 1]
            step = curve[-1] - curve[-2] if len(curve) > 1 else 1.0
            return curve[-1] + step * (positions - len(curve))

        return _interpolate({b: at(curve) for b, curve in self.verify_cost.items()}, batch)

    def c(self, batch: int) -> float:
        if isinstance(self.draft_cost, Mapping):
            return _interpolate(self.draft_cost, batch)
        return float(self.draft_cost)

    def speedup(self, alpha: float, gamma: int, batch: int) -> float:
        """S_B(alpha, gamma): speculation's throughput over plain decoding's at ``batch`` live rows."""
        if gamma == 0:
            return 1.0
        return float(theory.speedup(alpha, gamma, self.c(batch), self.v(batch, gamma + 1)))

    def best_gamma(self, alpha: float, batch: int, ceiling: int, margin: float = 0.0) -> int:
        """The gamma in [0, ceiling] with the highest S_B; 0 unless some gamma beats plain decoding
        by more than ``margin`` (S_B > 1 + margin)."""
        best, best_s = 0, 1.0 + margin
        for g in range(1, ceiling + 1):
            s = self.speedup(alpha, g, batch)
            if s > best_s:
                best, best_s = g, s
        return best


@dataclass
class SchedulerStep:
    batch: int  # live rows when the step was drafted
    alpha: float  # the acceptance estimate the choice used
    gamma: int  # drafts asked for


class BatchScheduler:
    """Wrap a chain drafter; each step draft the gamma that :class:`BatchCosts` says is fastest now.

    costs:       the measured :class:`BatchCosts` of this machine for this target and drafter.
    shadow:      for free deterministic drafters (prompt lookup): always draft the loop's full gamma,
                 verify only the chosen prefix, and score the whole proposal against what comes back,
                 so acceptance stays observable at gamma 0.
    probe_every: without shadow, after this many steps at gamma 0 draft one token, so that a
                 stale acceptance estimate is refreshed (0 = never probe).  A probe makes a model
                 drafter catch up on every token it skipped, in every row (the whole prompt if it
                 has not drafted in this generation): that prefill costs about c_B v_B(skipped)
                 target passes, so a probe is skipped when that exceeds ``probe_budget`` passes
                 (at a large batch the catch-up costs more than the probe could win back).
    margin:      speculate only where the model predicts S_B > 1 + margin (1 - 1/B).  The model
                 prices the target pass and the draft steps, not the loop's per-row work (drafting
                 in Python row by row, rows padded to the longest draft, masks for rows out of
                 step), which a small predicted gain cannot pay for once several rows share a
                 pass; one row has none of it, so at B = 1 the margin is 0.  Measured on a 2-core
                 CPU (SmolLM2-135M, prompt lookup): at B = 8, gamma 1 predicted at S_B = 1.03 ran
                 at 0.86 of plain decoding; with a margin of 0.1, B = 16 still ran at 0.78.
    decay, prior, prior_alpha: the acceptance estimate, (decayed accepted + prior * prior_alpha) /
                 (decayed verified + prior), as in :class:`~specbook.drafters.adaptive.GammaPolicy`.
    """

    def __init__(self, drafter: Drafter, costs: BatchCosts, *, shadow: bool = False, probe_every: int = 16,
                 decay: float = 0.8, prior: float = 1.0, prior_alpha: float = 0.5, margin: float = 0.2,
                 probe_budget: float = 1.0):
        if not hasattr(drafter, "propose"):
            raise ValueError(f"drafter must have a propose method, got {type(drafter).__name__}")
        if not isinstance(costs, BatchCosts):
            raise ValueError(f"costs must be a BatchCosts, got {type(costs).__name__}")
        if not isinstance(probe_every, int) or probe_every < 0:
            raise ValueError(f"probe_every must be an int >= 0, got {probe_every!r}")
        if not 0 <= decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {decay!r}")
        if not (isinstance(probe_budget, (int, float)) and probe_budget >= 0):
            raise ValueError(f"probe_budget must be a number >= 0, got {probe_budget!r}")
        if not (isinstance(margin, (int, float)) and 0 <= margin < 10):
            raise ValueError(f"margin must be a number in [0, 10), got {margin!r}")
        if not prior > 0 or not 0 < prior_alpha < 1:
            raise ValueError(f"need prior > 0 and 0 < prior_alpha < 1, got {prior!r}, {prior_alpha!r}")
        self.drafter, self.costs, self.shadow, self.probe_every = drafter, costs, shadow, probe_every
        self.decay, self.prior, self.prior_alpha, self.margin = decay, prior, prior_alpha, float(margin)
        self.probe_budget = float(probe_budget)
        self.reset()

    def reset(self) -> None:
        """Forget the acceptance history and the step log (a new workload)."""
        self._accepted, self._verified = 0.0, 0.0
        self._last: list[tuple[list[int], list[int], int]] | None = None  # (context, proposal, verified) per row
        self._idle = 0  # consecutive steps at gamma 0
        self._drafted = False  # whether any step of this generation drafted (the drafter saw its context)
        self.steps: list[SchedulerStep] = []

    @property
    def passes(self) -> int:
        return int(getattr(self.drafter, "passes", 0))

    @property
    def match_lengths(self) -> list[int]:
        """The inner drafter's per-row match lengths, if it reports them (prompt lookup does)."""
        return list(getattr(self.drafter, "match_lengths", None) or [])

    @property
    def alpha(self) -> float:
        return (self._accepted + self.prior * self.prior_alpha) / (self._verified + self.prior)

    def _observe(self, contexts: list[list[int]]) -> None:
        if self._last is None or len(self._last) != len(contexts):
            return
        right_total, judged_total = 0, 0
        for (prev, prop, k), cur in zip(self._last, contexts):
            a = accepted_count(prev, prop[:k], cur)
            if a is None:
                return  # not a continuation of the last step: nothing to learn
            right, judged = revealed(prev, prop, cur) if self.shadow else (a, min(a + 1, k))
            right_total += right
            judged_total += judged
        if judged_total:
            self._accepted = self.decay * self._accepted + right_total / len(contexts)
            self._verified = self.decay * self._verified + judged_total / len(contexts)

    def _probe_cost(self, batch: int, rows: list[list[int]]) -> float:
        """Target passes a probe's catch-up prefill costs: c_B v_B(tokens the drafter has not seen)."""
        unseen = self._idle + 1 if self._drafted else max(map(len, rows))
        return self.costs.c(batch) * self.costs.v(batch, unseen)

    def select_rows(self, rows: list[int]) -> None:
        """Rows that ended leave the batch: drop their pending proposals, tell the inner drafter."""
        if self._last is not None:
            self._last = [self._last[r] for r in rows]
        if isinstance(self.drafter, SupportsSelectRows):
            self.drafter.select_rows(rows)

    def observe(self, target, kept) -> None:
        """Forward the loop's observe call to a drafter that reads the target (EAGLE, Medusa); else nothing."""
        if hasattr(self.drafter, "observe"):
            self.drafter.observe(target, kept)

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        rows = [c.tolist() for c in contexts]
        self._observe(rows)
        B, alpha = len(rows), self.alpha
        g = self.costs.best_gamma(alpha, B, gamma, self.margin * (1 - 1 / B))
        if g == 0 and not self.shadow and self.probe_every and gamma > 0:
            self._idle += 1
            if self._idle >= self.probe_every and self._probe_cost(B, rows) <= self.probe_budget:
                g, self._idle = 1, 0
        elif g:
            self._idle = 0
        if self.shadow:  # draft the full gamma (free), verify only the chosen prefix
            draft = self.drafter.propose(contexts, gamma, params, generator)
            g = min(g, draft.num_tokens)
            proposals = draft.tokens.tolist()
            draft = Draft(draft.tokens[:, :g], None if draft.probs is None else draft.probs[:, :g])
        else:
            draft = self.drafter.propose(contexts, g, params, generator)
            proposals = draft.tokens.tolist()
        self._drafted = self._drafted or draft.num_tokens > 0
        self.steps.append(SchedulerStep(B, alpha, draft.num_tokens))
        self._last = [(r, prop, draft.num_tokens) for r, prop in zip(rows, proposals)]
        return draft

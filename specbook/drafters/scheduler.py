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
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import torch

from .. import theory
from ..protocols import Draft, Drafter, SupportsSelectRows
from ..sampling import SamplingParams
from .adaptive import revealed


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


def _extend(curve: tuple[float, ...], n: int) -> float:
    """curve[n - 1]; past its end, the last measured step extrapolated linearly."""
    if n <= len(curve):
        return curve[n - 1]
    step = curve[-1] - curve[-2] if len(curve) > 1 else 1.0
    return curve[-1] + step * (n - len(curve))


@dataclass(frozen=True)
class BatchCosts:
    """Measured costs of one machine, target and drafter.

    verify_cost: {B: (v_B(1), v_B(2), ..., v_B(n_max))} with v_B(1) = 1; a longer chain than measured
                 is priced by extrapolating the last step linearly.
    draft_cost:  {B: c_B}, one draft step over one target step at batch B, or one float for every B
                 (0 for a drafter without a model, such as prompt lookup).
    catch_up:    {B: target passes per token} a model drafter's prefill costs when it catches up on
                 tokens it has not seen (every row at once), or one float; 0 (not measured): a catch-up
                 of n tokens is priced c_B v_B(n), extrapolated past the measured curve.
    step_cost:   {B: (T_B(1), ..., T_B(g_max))} or None: the whole denominator gamma c_B + v_B(gamma + 1)
                 measured as one, a step of the real decode loop drafting gamma tokens over one
                 drafting none, at batch B.  The two ratios above time the model forwards alone; a step
                 of the loop also samples, accepts, moves caches and drafts row by row in Python, work
                 that is the same at every gamma and so dilutes the ratios (measured on a 2-core CPU,
                 SmolLM2-135M with its draft model at batch 1: gamma 3 priced 2.02 plain steps from the
                 forwards, 1.53 in the loop).  When given, it prices the steps and ``verify_cost`` /
                 ``draft_cost`` only the catch-up.
    """

    verify_cost: Mapping[int, tuple[float, ...]]
    draft_cost: Mapping[int, float] | float = 0.0
    catch_up: Mapping[int, float] | float = 0.0
    step_cost: Mapping[int, tuple[float, ...]] | None = None

    def __post_init__(self):
        if not isinstance(self.verify_cost, Mapping) or not self.verify_cost:
            raise ValueError(f"verify_cost must map batch sizes to curves, got {self.verify_cost!r}")
        for b, curve in self.verify_cost.items():
            if not isinstance(b, int) or b < 1:
                raise ValueError(f"verify_cost keys must be batch sizes >= 1, got {b!r}")
            if len(curve) < 1 or any(not v > 0 for v in curve):
                raise ValueError(f"verify_cost[{b}] must be a non-empty curve of positive ratios, got {curve!r}")
        if self.step_cost is not None:
            if not isinstance(self.step_cost, Mapping) or not self.step_cost:
                raise ValueError(f"step_cost must map batch sizes to curves or be None, got {self.step_cost!r}")
            for b, curve in self.step_cost.items():
                if not isinstance(b, int) or b < 1 or len(curve) < 1 or any(not t > 0 for t in curve):
                    raise ValueError(f"step_cost must map batch sizes >= 1 to non-empty curves of positive "
                                     f"ratios, got {b!r}: {curve!r}")
        for name in ("draft_cost", "catch_up"):
            value = getattr(self, name)
            if any(not c >= 0 for c in (value.values() if isinstance(value, Mapping) else [value])):
                raise ValueError(f"{name} must be >= 0, got {value!r}")

    def v(self, batch: int, positions: int) -> float:
        """v_B(n) at this batch size (interpolated between measured batch sizes)."""
        return _interpolate({b: _extend(curve, positions) for b, curve in self.verify_cost.items()}, batch)

    def step(self, batch: int, gamma: int) -> float:
        """One step drafting ``gamma`` tokens, in steps drafting none: gamma c_B + v_B(gamma + 1), or the
        loop's measured ratio T_B(gamma) where ``step_cost`` is given."""
        if gamma == 0:
            return 1.0
        if self.step_cost is not None:
            return _interpolate({b: _extend(curve, gamma) for b, curve in self.step_cost.items()}, batch)
        return gamma * self.c(batch) + self.v(batch, gamma + 1)

    def c(self, batch: int) -> float:
        if isinstance(self.draft_cost, Mapping):
            return _interpolate(self.draft_cost, batch)
        return float(self.draft_cost)

    def catch_up_cost(self, batch: int, tokens: int) -> float:
        """Target passes for a model drafter to feed ``tokens`` it has not seen, in every row."""
        per_token = _interpolate(self.catch_up, batch) if isinstance(self.catch_up, Mapping) else self.catch_up
        shortest = min(len(curve) for curve in self.verify_cost.values())
        if tokens <= shortest or not per_token:
            return self.c(batch) * self.v(batch, tokens)
        return float(per_token) * tokens

    def speedup(self, alpha: float, gamma: int, batch: int) -> float:
        """S_B(alpha, gamma): speculation's throughput over plain decoding's at ``batch`` live rows."""
        if gamma == 0:
            return 1.0
        return float(theory.expected_tokens(alpha, gamma)) / self.step(batch, gamma)

    def best_gamma(self, alpha: float, batch: int, ceiling: int, margin: float = 0.0) -> int:
        """The gamma in [0, ceiling] with the highest S_B; 0 unless some gamma beats plain decoding
        by more than ``margin`` (S_B > 1 + margin)."""
        return self.best(lambda g: float(theory.expected_tokens(alpha, g)), batch, ceiling, margin)

    def best(self, expected: Callable[[int], float], batch: int, ceiling: int, margin: float = 0.0,
             once: float = 0.0, horizon: float = float("inf")) -> int:
        """The best gamma for any law of tokens per step: ``expected(gamma)`` tokens a step yields.

        ``once``: target passes paid once if speculation starts now (a model drafter's catch-up on the
        context it has not seen), spread over the ``horizon`` tokens still to come.  Producing R tokens
        then takes once + (R / E)(gamma c + v) passes against R for plain decoding, so

            S = E / (gamma c + v_B(gamma + 1) + once * E / R)     (the first two terms: :meth:`step`).
        """
        best, best_s = 0, 1.0 + margin
        for g in range(1, ceiling + 1):
            e = expected(g)
            s = e / (self.step(batch, g) + once * e / max(horizon, 1.0))
            if s > best_s:
                best, best_s = g, s
        return best


@dataclass
class SchedulerStep:
    batch: int  # live rows when the step was drafted
    alpha: float  # the acceptance estimate the choice used (mean over the rows furthest behind)
    gamma: int  # drafts asked for


class BatchScheduler:
    """Wrap a chain drafter; each step draft the gamma that :class:`BatchCosts` says is fastest now.

    Which rows a step is for.  A batch is done when its last row is: speculation that speeds up the
    rows already ahead while the row furthest behind gains nothing makes every pass dearer and the
    batch no sooner done.  So the expected tokens of a step, E in S_B above, is the mean of
    E(alpha_r, gamma) over the rows furthest behind (fewest tokens so far), each with its own
    acceptance estimate alpha_r, shrunk towards the pooled one while a row has little history.
    With a free drafter in the shadow (below), a row whose lookup found no match this step
    contributes E = 1: its drafts would be padding.  Measured on a 2-core CPU (SmolLM2-135M,
    prompt lookup, batch 8), pooling one alpha over all rows had drafted gamma 2 for a quarter of
    the steps and run at 0.89 of plain decoding: the rows with a match accept long runs, the rows
    without accept nothing, and the latter set the pace.

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
    horizon:     tokens each row generates (the loop's max_new_tokens), if known.  When a model
                 drafter would first have to catch up, that one-time cost is spread over the tokens
                 the rows furthest behind still have to make (:meth:`BatchCosts.best`); None (unknown)
                 spreads it over ``DEFAULT_HORIZON`` tokens.
    margin:      speculate only where the model predicts S_B > 1 + margin (1 - 1/B).  Forward
                 timings alone price the target pass and the draft steps, not the loop's per-row
                 work (drafting in Python row by row, rows padded to the longest draft, masks for
                 rows out of step), which a small predicted gain cannot pay for once several rows
                 share a pass; one row has none of it, so at B = 1 the margin is 0.  Measured on a
                 2-core CPU (SmolLM2-135M, prompt lookup, forward-timed costs): at B = 8, gamma 1
                 predicted at S_B = 1.03 ran at 0.86 of plain decoding; with a margin of 0.1, B = 16
                 still ran at 0.78.  Costs timed in the loop (``BatchCosts.step_cost``) include
                 that work, but are themselves timed on a short calibration; the margin was kept.
    decay, prior, prior_alpha: the pooled acceptance estimate, (decayed accepted + prior * prior_alpha)
                 / (decayed verified + prior), as in :class:`~specbook.drafters.adaptive.GammaPolicy`;
                 a row's own estimate is (its decayed accepted + prior * pooled) / (its decayed
                 verified + prior), and each draft position has its own (:meth:`depth_alphas`).
                 decay 0.95 remembers about the last 20 steps; with 0.8 (about 5) a few rejections
                 in a row had dropped the estimate near 0.2 and switched a draft model off at batch 1
                 (measured: 0.88 of fixed gamma 4's throughput, against 0.96 with 0.95).
    """

    DEFAULT_HORIZON = 64

    def __init__(self, drafter: Drafter, costs: BatchCosts, *, shadow: bool = False, probe_every: int = 16,
                 decay: float = 0.95, prior: float = 1.0, prior_alpha: float = 0.5, margin: float = 0.2,
                 probe_budget: float = 1.0, horizon: int | None = None):
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
        if horizon is not None and (not isinstance(horizon, int) or horizon < 1):
            raise ValueError(f"horizon must be an int >= 1 or None, got {horizon!r}")
        self.drafter, self.costs, self.shadow, self.probe_every = drafter, costs, shadow, probe_every
        self.decay, self.prior, self.prior_alpha, self.margin = decay, prior, prior_alpha, float(margin)
        self.probe_budget = float(probe_budget)
        self.horizon = horizon
        self.pinned = None
        self.reset()

    @property
    def pinned(self) -> int | None:
        """None (the policy chooses), or the gamma every step drafts (capped at the loop's): how
        :func:`specbook.bench.batch.measure_loop_costs` times the loop at each gamma."""
        return self._pinned

    @pinned.setter
    def pinned(self, gamma: int | None) -> None:
        if gamma is not None and (not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 0):
            raise ValueError(f"pinned must be None or an int >= 0, got {gamma!r}")
        self._pinned = gamma

    def reset(self) -> None:
        """Forget the acceptance history and the step log (a new workload).

        A new generation does not need it: the scheduler sees one start (the contexts are not a
        continuation of the last step's) and starts its per-row state afresh, but keeps the pooled
        and per-position acceptance learnt on earlier generations, as a server keeps what it has
        learnt of its drafter on its traffic."""
        self._accepted, self._verified = 0.0, 0.0
        self._depth: list[list[float]] = []  # per draft position d = 1, 2, ...: [decayed accepted, decayed tested]
        self._last: list[tuple[torch.Tensor, list[int], int, bool]] | None = None  # (context, proposal, verified, matched)
        self._rows: list[list[float]] = []  # per row [start length, decayed accepted, decayed verified]
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
        """The pooled acceptance estimate (all rows, all draft positions)."""
        return (self._accepted + self.prior * self.prior_alpha) / (self._verified + self.prior)

    def row_alpha(self, r: int) -> float:
        """Row r's acceptance estimate, shrunk towards the pooled one while its own history is short."""
        _, accepted, verified = self._rows[r]
        return (accepted + self.prior * self.alpha) / (verified + self.prior)

    def depth_alphas(self, gamma: int) -> list[float]:
        """P(draft d accepted | drafts 1..d-1 accepted) for d = 1..gamma, pooled over rows.

        Acceptance is not the same at every position: a draft model that got the first token right
        is in an easy stretch and often gets the next ones too.  One rate for all positions, measured
        while the scheduler drafts one token, then undervalues long drafts, and the policy stays at
        gamma 1 (measured at batch 1: 1.16x where gamma 4 ran at 1.32x).  Each position's rate is
        shrunk towards the one before it (the first towards ``prior_alpha``), so a position not yet
        tested inherits the rate of the last one that was."""
        out, previous = [], self.prior_alpha
        for d in range(gamma):
            accepted, tested = self._depth[d] if d < len(self._depth) else (0.0, 0.0)
            previous = (accepted + self.prior * previous) / (tested + self.prior)
            out.append(previous)
        return out

    def _new_generation(self, contexts: list[torch.Tensor]) -> None:
        """Per-row state, idle count and catch-up flag afresh; the acceptance estimates kept."""
        self._rows = [[c.shape[0], 0.0, 0.0] for c in contexts]  # [start length, decayed accepted, verified]
        self._idle, self._drafted = 0, False

    def _observe(self, contexts: list[torch.Tensor]) -> None:
        if self._last is None or len(self._last) != len(contexts) or len(self._rows) != len(contexts):
            self._new_generation(contexts)
            return
        seen = []
        for (prev, prop, k, matched), cur in zip(self._last, contexts):
            n = prev.shape[0]
            if cur.shape[0] <= n or not torch.equal(cur[:n], prev):  # not a continuation: a new generation
                self._new_generation(contexts)
                return
            new = cur[n:n + len(prop) + 1].tolist()  # only the tail is read in Python
            right, judged = revealed([], prop, new)
            if not self.shadow:  # drafts past the verified k were never proposed
                right = min(right, k, len(new) - 1)
                judged = min(right + 1, k)
            seen.append((right, judged) if judged and matched else None)
        judged_rows = [x for x in seen if x is not None]
        if not judged_rows:
            return
        share = 1 / len(judged_rows)
        self._accepted = self.decay * self._accepted + share * sum(r for r, _ in judged_rows)
        self._verified = self.decay * self._verified + share * sum(j for _, j in judged_rows)
        deepest = max(j for _, j in judged_rows)
        self._depth += [[0.0, 0.0] for _ in range(deepest - len(self._depth))]
        for d, counts in enumerate(self._depth):  # position d + 1 was tested if judged > d, accepted if right > d
            counts[0] = self.decay * counts[0] + share * sum(r > d for r, _ in judged_rows)
            counts[1] = self.decay * counts[1] + share * sum(j > d for _, j in judged_rows)
        for row, x in zip(self._rows, seen):
            if x is not None:
                row[1] = self.decay * row[1] + x[0]
                row[2] = self.decay * row[2] + x[1]

    def _catch_up(self, batch: int, contexts: list[torch.Tensor]) -> float:
        """Target passes a model drafter's catch-up costs before it can draft: c_B v_B(tokens unseen)."""
        if self._drafted and self._idle == 0:
            return 0.0  # it drafted last step: the tokens since are part of every step's c_B
        unseen = self._idle + 1 if self._drafted else max(c.shape[0] for c in contexts)
        return self.costs.catch_up_cost(batch, unseen)

    def _choose(self, contexts: list[torch.Tensor], gamma: int, matched: list[bool]) -> tuple[int, float]:
        """(gamma, the mean acceptance it assumed) for the rows furthest behind."""
        made = [c.shape[0] - row[0] for c, row in zip(contexts, self._rows)]
        behind = [r for r, m in enumerate(made) if m == min(made)]
        pooled, depth = self.alpha, self.depth_alphas(gamma)
        scale = {r: self.row_alpha(r) / pooled for r in behind}  # a row's strength relative to the pool

        def expected(g: int) -> float:
            total = 0.0
            for r in behind:
                e, run = 1.0, 1.0
                for a in depth[:g] if matched[r] else ():
                    run *= min(a * scale[r], 0.999)  # P(drafts 1..d all accepted)
                    e += run
                total += e
            return total / len(behind)

        B = len(contexts)
        if self.pinned is not None:  # a calibration run (specbook.bench.batch.measure_loop_costs)
            return min(self.pinned, gamma), self.alpha
        left = self.DEFAULT_HORIZON if self.horizon is None else self.horizon - min(made)
        g = self.costs.best(expected, B, gamma, self.margin * (1 - 1 / B), once=self._catch_up(B, contexts),
                            horizon=left)
        return g, sum(self.row_alpha(r) for r in behind) / len(behind)

    def select_rows(self, rows: list[int]) -> None:
        """Rows that ended leave the batch: drop their pending proposals, tell the inner drafter."""
        if self._last is not None:
            self._last = [self._last[r] for r in rows]
        if len(self._rows) > max(rows, default=-1):
            self._rows = [self._rows[r] for r in rows]
        if isinstance(self.drafter, SupportsSelectRows):
            self.drafter.select_rows(rows)

    def observe(self, target, kept) -> None:
        """Forward the loop's observe call to a drafter that reads the target (EAGLE, Medusa); else nothing."""
        if hasattr(self.drafter, "observe"):
            self.drafter.observe(target, kept)

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        given, contexts = contexts, [c.detach().cpu() for c in contexts]  # the scheduler reads CPU copies
        self._observe(contexts)
        B = len(contexts)
        if self.shadow:  # draft the full gamma (free) first: this step's matches are known before choosing
            full = self.drafter.propose(given, gamma, params, generator)
            matches = self.match_lengths
            matched = [m > 0 for m in matches] if len(matches) == B else [True] * B
            g, alpha = self._choose(contexts, gamma, matched)
            g = min(g, full.num_tokens)
            proposals = full.tokens.tolist()
            draft = Draft(full.tokens[:, :g], None if full.probs is None else full.probs[:, :g])
        else:
            matched = [True] * B
            g, alpha = self._choose(contexts, gamma, matched)
            if g == 0 and gamma > 0 and self.pinned is None:
                self._idle += 1
                if (self.probe_every and self._idle >= self.probe_every
                        and self._catch_up(B, contexts) <= self.probe_budget):
                    g, self._idle = 1, 0
            elif g:
                self._idle = 0
            draft = self.drafter.propose(given, g, params, generator)
            proposals = draft.tokens.tolist()
        self._drafted = self._drafted or draft.num_tokens > 0
        self.steps.append(SchedulerStep(B, alpha, draft.num_tokens))
        self._last = [(c, prop, draft.num_tokens, m) for c, prop, m in zip(contexts, proposals, matched)]
        return draft

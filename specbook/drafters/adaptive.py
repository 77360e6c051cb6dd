"""Adaptive draft length: gamma chosen each step from the acceptance seen so far and what a step costs.

Shape legend: B batch (live rows), K draft length, T context length.

A fixed gamma is tuned for one acceptance rate and one machine load, but acceptance swings within
a generation (a drafter copying a quoted block is almost always right, the same drafter in
free-running prose almost never), and extra verified positions are free only while a step leaves
arithmetic idle (the memory-bound side of the roofline, Williams et al. 2009), which a larger
batch uses up.  :class:`AdaptiveGamma` wraps a chain drafter and, each step, drafts the gamma in
[0, ceiling] (the loop's ``gamma``) that maximises the speedup of Leviathan et al. (2023, eq. 1
and Thm 3.8) at the live batch size B:

    S_B(gamma) = E(gamma) / (gamma c_B + v_B(gamma + 1)),    E(gamma) = 1 + a_1 + a_1 a_2 + ... + a_1...a_gamma

with c_B and v_B from a cost model (:class:`specbook.costs.BatchCosts`; by default ``c`` and
``verify_cost`` at every batch size) and a_d the acceptance estimate of draft position d.
gamma = 0 (plain decoding) whenever no gamma beats 1.

It needs no hook in the decode loop: the history shown after a step is the previous context +
the accepted drafts + one target token, so the number accepted is the common prefix of the new
tokens and the previous draft.  (The target token after a rejection never equals the rejected
draft: greedy verification emits the argmax, which differed, and the residual max(0, p - q) is
zero at a token with q(x) > p(x), the only kind that can be rejected.)

Which rows, which acceptance.  A batch is done when its last row is: speculation that speeds up
the rows already ahead while the row furthest behind gains nothing makes every pass dearer and the
batch no sooner done.  So E is the mean over the rows furthest behind (fewest tokens so far), each
with its own acceptance estimate shrunk towards the pooled one while it has little history.  The
rows ahead still count where the cost model knows what a step costs with fewer rows
(``ahead_share``): a row that finishes sooner leaves the batch, and every later step is cheaper by
its share w = 1 - t(rows behind) / t(B).  The time to finish is then about
T(gamma) ((1 - w) / E_behind + w / E_ahead) steps per token, so E is that weighted harmonic mean
(on a 2-core CPU at batch 2, w = 0.37: counting only the row behind, the policy declined drafts
for the row ahead and ran at 0.91 of fixed gamma 4 on prompts it was never tuned on).  And
each draft position has its own rate, since a drafter that got the first token right is often in
an easy stretch (one rate for all positions, measured while drafting one token, undervalues long
drafts: at batch 1 a draft model stayed at gamma 1, 1.16x, where gamma 4 ran at 1.32x).  Measured
on a 2-core CPU (SmolLM2-135M, prompt lookup, batch 8), one alpha pooled over all rows had drafted
gamma 2 for a quarter of the steps and run at 0.89 of plain decoding: the rows with a match
accept long runs, the rows without accept nothing, and the latter set the pace.

``kind="heuristic"`` is transformers' assisted-generation schedule instead (Hugging Face, 2023):
+2 after a step whose drafts were all accepted, -1 otherwise.  Lossless whatever gamma it picks:
every step is still verified by the loop's exact rule.
"""
from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..costs import BatchCosts, CostCurve
from ..protocols import Draft, Drafter, SupportsSelectRows
from ..sampling import SamplingParams


@dataclass(frozen=True)
class GammaPolicy:
    """Settings of :class:`AdaptiveGamma`.

    c, verify_cost: one draft step over one target step, and v(1), v(2), ... (``verify_cost[gamma]``
                 prices gamma drafts; () = 1), at every batch size; or ``costs``, a cost model by batch
                 size (``step(batch, gamma)`` and ``catch_up_cost(batch, tokens)``, as
                 :class:`~specbook.costs.BatchCosts`), instead of both.
    decay, prior, prior_alpha: the pooled acceptance estimate is (decayed accepted + prior * prior_alpha)
                 / (decayed verified + prior); each draft position's estimate shrinks towards the one
                 before it the same way.  decay 0.8 remembers about the last 5 steps (0.95 about 20,
                 steadier where a few rejections in a row would otherwise switch a good drafter off).
    row_prior:   pseudo-drafts of the pooled estimate in each row's own: small where rows differ for a
                 reason (different prompts, one with text to copy and one without), ``math.inf`` where
                 they differ only by chance (independent samples of one kind of text: the rows furthest
                 behind are then merely the unlucky ones, and their own rates would underestimate).
    min_gamma:   drafts always asked for (1: acceptance stays observable); 0 needs ``shadow`` or probes.
    margin:      speculate only where S_B > 1 + margin (1 - 1/B): per-row work of a batched step that
                 the cost model leaves out (none at B = 1).
    probe_every, probe_budget: after ``probe_every`` steps at gamma 0 draft one token, so that a stale
                 estimate is refreshed (0 = never), unless a model drafter's catch-up on the tokens it
                 skipped would cost more than ``probe_budget`` target passes.
    horizon:     tokens each row generates (the loop's max_new_tokens), if known: a model drafter's
                 one-time catch-up is spread over the tokens still to come (None: ``DEFAULT_HORIZON``).
    start_gamma: the heuristic's first gamma.
    """

    kind: str = "model"
    c: float = 0.0
    verify_cost: tuple[float, ...] = ()
    costs: object | None = None
    decay: float = 0.8
    prior: float = 1.0
    prior_alpha: float = 0.5
    row_prior: float = 1.0
    min_gamma: int = 1
    start_gamma: int = 4
    margin: float = 0.0
    probe_every: int = 0
    probe_budget: float = 1.0
    horizon: int | None = None

    def __post_init__(self):
        if self.kind not in ("model", "heuristic"):
            raise ValueError(f"kind must be 'model' or 'heuristic', got {self.kind!r}")
        if not self.c >= 0:
            raise ValueError(f"c must be >= 0, got {self.c!r}")
        if self.verify_cost:
            CostCurve(self.verify_cost)  # refuses entries <= 0
        if self.costs is not None and (self.c or self.verify_cost or not hasattr(self.costs, "step")):
            raise ValueError(f"costs must be a cost model with step() given instead of c and verify_cost, "
                             f"got {self.costs!r}")
        if not 0 <= self.decay < 1:
            raise ValueError(f"decay must be in [0, 1), got {self.decay!r}")
        if not self.prior > 0 or not 0 < self.prior_alpha < 1:
            raise ValueError(f"need prior > 0 and 0 < prior_alpha < 1, got {self.prior!r}, {self.prior_alpha!r}")
        if not (isinstance(self.row_prior, (int, float)) and self.row_prior > 0):
            raise ValueError(f"row_prior must be a number > 0 (math.inf: one estimate for all rows), "
                             f"got {self.row_prior!r}")
        if self.min_gamma < 0 or self.start_gamma < self.min_gamma:
            raise ValueError(f"need 0 <= min_gamma <= start_gamma, got {self.min_gamma}, {self.start_gamma}")
        if not (isinstance(self.margin, (int, float)) and 0 <= self.margin < 10):
            raise ValueError(f"margin must be a number in [0, 10), got {self.margin!r}")
        if not isinstance(self.probe_every, int) or self.probe_every < 0:
            raise ValueError(f"probe_every must be an int >= 0, got {self.probe_every!r}")
        if not (isinstance(self.probe_budget, (int, float)) and self.probe_budget >= 0):
            raise ValueError(f"probe_budget must be a number >= 0, got {self.probe_budget!r}")
        if self.horizon is not None and (not isinstance(self.horizon, int) or self.horizon < 1):
            raise ValueError(f"horizon must be an int >= 1 or None, got {self.horizon!r}")

    def cost_model(self):
        """``costs``, or c and verify_cost at every batch size."""
        return self.costs if self.costs is not None else BatchCosts({1: self.verify_cost or (1.0,)}, self.c)


@dataclass
class GammaStep:
    batch: int  # live rows when the step was drafted
    alpha: float  # the acceptance estimate the choice used (mean over the rows furthest behind)
    gamma: int  # drafts asked for


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

    With a shadow draft longer than what was verified, the emitted target token after the accepted
    ones also judges one more draft."""
    new = current[len(previous):]
    right = 0
    while right < min(len(draft), len(new)) and new[right] == draft[right]:
        right += 1
    return right, min(right + 1, len(draft), len(new))


def best_gamma(costs, batch: int, ceiling: int, expected: Callable[[int], float], *, margin: float = 0.0,
               once: float = 0.0, horizon: float = math.inf) -> int:
    """The gamma in [0, ceiling] with the highest S = E / (gamma c_B + v_B(gamma + 1)); 0 unless some gamma
    beats plain decoding by more than ``margin``.  ``expected(gamma)``: tokens a step yields.

    ``once``: target passes paid once if speculation starts now (a model drafter's catch-up on the
    context it has not seen), spread over the ``horizon`` tokens still to come.  Producing R tokens
    then takes once + (R / E)(gamma c + v) passes against R for plain decoding, so

        S = E / (gamma c_B + v_B(gamma + 1) + once * E / R)     (the first two terms: ``costs.step``)."""
    best, best_s = 0, 1.0 + margin
    for g in range(1, ceiling + 1):
        e = expected(g)
        s = e / (costs.step(batch, g) + once * e / max(horizon, 1.0))
        if s > best_s:
            best, best_s = g, s
    return best


class AdaptiveGamma:
    """Wrap a chain drafter; each step draft the gamma the policy chooses (at most the loop's gamma).

    shadow: for free deterministic drafters (prompt lookup): always draft the loop's full gamma,
            verify only the chosen prefix, and score the whole proposal against what comes back, so
            acceptance stays observable at gamma 0.  A row whose lookup found no match this step (the
            drafter's ``match_lengths``) contributes E = 1: its drafts would be padding.

    ``steps`` logs every step (:class:`GammaStep`).  The acceptance learnt is kept across generations
    (a new prompt starts the rows' state afresh), as a server keeps what it has learnt of its drafter
    on its traffic; :meth:`reset` forgets it.
    """

    DEFAULT_HORIZON = 64

    def __init__(self, drafter: Drafter, policy: GammaPolicy = GammaPolicy(), shadow: bool = False):
        if not hasattr(drafter, "propose"):
            raise ValueError(f"drafter must have a propose method, got {type(drafter).__name__}")
        if not isinstance(policy, GammaPolicy):
            raise ValueError(f"policy must be a GammaPolicy, got {type(policy).__name__}")
        if policy.min_gamma == 0 and not shadow and not policy.probe_every:
            raise ValueError("min_gamma=0 needs shadow=True or probe_every > 0: without drafts nothing would "
                             "be observed again")
        self.drafter, self.policy, self.shadow = drafter, policy, shadow
        self.costs = policy.cost_model()
        self.reset()

    def reset(self) -> None:
        """Forget the acceptance history and the step log (a new workload)."""
        self._accepted, self._verified = 0.0, 0.0
        self._depth: list[list[float]] = []  # per draft position d = 1, 2, ...: [decayed accepted, decayed tested]
        # per row of the last step: (context, proposal, drafts verified, whether the lookup matched)
        self._last: list[tuple[torch.Tensor, list[int], int, bool]] | None = None
        self._rows: list[list[float]] = []  # per row [start length, decayed accepted, decayed verified]
        self._idle = 0  # consecutive steps at gamma 0
        self._drafted = False  # whether any step of this generation drafted (the drafter saw its context)
        self._heuristic_gamma = self.policy.start_gamma
        self.steps: list[GammaStep] = []

    @property
    def history(self) -> list[int]:
        """The gamma of every step in ``steps``."""
        return [s.gamma for s in self.steps]

    @property
    def passes(self) -> int:
        return int(getattr(self.drafter, "passes", 0))

    @property
    def match_lengths(self) -> list[int]:
        """The inner drafter's per-row match lengths, if it reports them (prompt lookup does)."""
        return list(getattr(self.drafter, "match_lengths", None) or [])

    def alpha_estimate(self) -> float:
        """The pooled acceptance estimate (all rows, all draft positions)."""
        p = self.policy
        return (self._accepted + p.prior * p.prior_alpha) / (self._verified + p.prior)

    def row_alpha(self, r: int) -> float:
        """Row r's acceptance estimate, shrunk towards the pooled one while its own history is short."""
        _, accepted, verified = self._rows[r]
        weight = self.policy.row_prior
        if math.isinf(weight):
            return self.alpha_estimate()
        return (accepted + weight * self.alpha_estimate()) / (verified + weight)

    def depth_alphas(self, gamma: int) -> list[float]:
        """P(draft d accepted | drafts 1..d-1 accepted) for d = 1..gamma, pooled over rows; a position not
        yet tested inherits the rate of the last one that was (the first: ``prior_alpha``)."""
        out, previous = [], self.policy.prior_alpha
        for d in range(gamma):
            accepted, tested = self._depth[d] if d < len(self._depth) else (0.0, 0.0)
            previous = (accepted + self.policy.prior * previous) / (tested + self.policy.prior)
            out.append(previous)
        return out

    def _new_generation(self, contexts: list[torch.Tensor]) -> None:
        """Per-row state, idle count and catch-up flag afresh; the acceptance estimates kept."""
        self._rows = [[c.shape[0], 0.0, 0.0] for c in contexts]
        self._idle, self._drafted = 0, False

    def _observe(self, contexts: list[torch.Tensor]) -> None:
        if self._last is None or len(self._last) != len(contexts) or len(self._rows) != len(contexts):
            self._new_generation(contexts)
            return
        seen, all_in = [], True
        for (prev, prop, k, matched), cur in zip(self._last, contexts):
            n = prev.shape[0]
            if cur.shape[0] <= n or not torch.equal(cur[:n], prev):  # not a continuation: a new generation
                self._new_generation(contexts)
                return
            new = cur[n:n + len(prop) + 1].tolist()  # only the tail is read in Python
            a = accepted_count([], prop[:k], new)  # of the k drafts verified
            right, judged = revealed([], prop, new) if self.shadow else (a, min(a + 1, k))
            all_in = all_in and a == k
            seen.append((right, judged) if judged and matched else None)
        p = self.policy
        if p.kind == "heuristic" and any(k for _, _, k, _ in self._last):
            self._heuristic_gamma = self._heuristic_gamma + 2 if all_in else max(p.min_gamma, self._heuristic_gamma - 1)
        judged_rows = [x for x in seen if x is not None]
        if not judged_rows:
            return
        share = 1 / len(judged_rows)
        self._accepted = p.decay * self._accepted + share * sum(r for r, _ in judged_rows)
        self._verified = p.decay * self._verified + share * sum(j for _, j in judged_rows)
        deepest = max(j for _, j in judged_rows)
        self._depth += [[0.0, 0.0] for _ in range(deepest - len(self._depth))]
        for d, counts in enumerate(self._depth):  # position d + 1 was tested if judged > d, accepted if right > d
            counts[0] = p.decay * counts[0] + share * sum(r > d for r, _ in judged_rows)
            counts[1] = p.decay * counts[1] + share * sum(j > d for _, j in judged_rows)
        for row, x in zip(self._rows, seen):
            if x is not None:
                row[1] = p.decay * row[1] + x[0]
                row[2] = p.decay * row[2] + x[1]

    def _catch_up(self, batch: int, contexts: list[torch.Tensor]) -> float:
        """Target passes a model drafter's catch-up costs before it can draft: c_B v_B(tokens unseen)."""
        if self._drafted and self._idle == 0:
            return 0.0  # it drafted last step: the tokens since are part of every step's c_B
        unseen = self._idle + 1 if self._drafted else max(c.shape[0] for c in contexts)
        return self.costs.catch_up_cost(batch, unseen)

    def _model_choice(self, contexts: list[torch.Tensor], gamma: int, matched: list[bool]) -> tuple[int, float]:
        """(gamma maximising S_B, the mean acceptance it assumed over the rows furthest behind)."""
        made = [c.shape[0] - row[0] for c, row in zip(contexts, self._rows)]
        behind = [r for r, m in enumerate(made) if m == min(made)]
        ahead = [r for r, m in enumerate(made) if m != min(made)]
        pooled, depth = self.alpha_estimate(), self.depth_alphas(gamma)
        scale = [self.row_alpha(r) / pooled for r in range(len(contexts))]  # a row's strength relative to the pool
        w = self.costs.ahead_share(len(contexts), len(behind)) if ahead and hasattr(self.costs, "ahead_share") else 0.0

        def row_expected(r: int, g: int) -> float:
            e, run = 1.0, 1.0
            for a in depth[:g] if matched[r] else ():
                run *= min(a * scale[r], 0.999)  # P(drafts 1..d all accepted)
                e += run
            return e

        def expected(g: int) -> float:  # the rows behind, and the rows ahead by the share of a step they cost
            e_behind = sum(row_expected(r, g) for r in behind) / len(behind)
            if not w:
                return e_behind
            e_ahead = sum(row_expected(r, g) for r in ahead) / len(ahead)
            return 1.0 / ((1 - w) / e_behind + w / e_ahead)

        B, p = len(contexts), self.policy
        left = self.DEFAULT_HORIZON if p.horizon is None else p.horizon - min(made)
        g = best_gamma(self.costs, B, gamma, expected, margin=p.margin * (1 - 1 / B),
                       once=self._catch_up(B, contexts), horizon=left)
        return g, sum(self.row_alpha(r) for r in behind) / len(behind)

    def decide(self, contexts: list[torch.Tensor], gamma: int, matched: list[bool]) -> tuple[int, float]:
        """(drafts this step, the acceptance estimate the choice assumed): the policy's choice, at least
        ``min_gamma``, and a probe after ``probe_every`` idle steps (not in the shadow)."""
        p = self.policy
        if p.kind == "heuristic":
            self._heuristic_gamma = g = min(self._heuristic_gamma, gamma)  # never climb far above the ceiling
            alpha = self.alpha_estimate()
        else:
            g, alpha = self._model_choice(contexts, gamma, matched)
        g = max(g, min(p.min_gamma, gamma))
        if not self.shadow and g == 0 and gamma > 0:
            self._idle += 1
            due = p.probe_every and self._idle >= p.probe_every
            if due and self._catch_up(len(contexts), contexts) <= p.probe_budget:
                g, self._idle = 1, 0
        elif g:
            self._idle = 0
        return g, alpha

    def select_rows(self, rows: list[int]) -> None:
        """Rows that ended leave the batch: drop their pending proposals, tell the inner drafter."""
        if self._last is not None:
            self._last = [self._last[r] for r in rows]
        if len(self._rows) > max(rows, default=-1):
            self._rows = [self._rows[r] for r in rows]
        if isinstance(self.drafter, SupportsSelectRows):
            self.drafter.select_rows(rows)

    def attach(self, target) -> None:
        """Forward the loop's attach call to a drafter that needs it (an EAGLE head reading earlier blocks)."""
        if hasattr(self.drafter, "attach"):
            self.drafter.attach(target)

    def observe(self, target, kept) -> None:
        """Forward the loop's observe call to a drafter that reads the target (EAGLE, Medusa); else nothing."""
        if hasattr(self.drafter, "observe"):
            self.drafter.observe(target, kept)

    def propose(self, contexts: list[torch.Tensor], gamma: int, params: SamplingParams,
                generator: torch.Generator | None = None) -> Draft:
        given, contexts = contexts, [c.detach().cpu() for c in contexts]  # the policy reads CPU copies
        self._observe(contexts)
        B = len(contexts)
        if self.shadow:  # draft the full gamma (free) first: this step's matches are known before choosing
            full = self.drafter.propose(given, gamma, params, generator)
            matches = self.match_lengths
            matched = [m > 0 for m in matches] if len(matches) == B else [True] * B
            g, alpha = self.decide(contexts, gamma, matched)
            g = min(g, full.num_tokens)
            proposals = full.tokens.tolist()
            draft = Draft(full.tokens[:, :g], None if full.probs is None else full.probs[:, :g])
        else:
            matched = [True] * B
            g, alpha = self.decide(contexts, gamma, matched)
            draft = self.drafter.propose(given, g, params, generator)
            proposals = draft.tokens.tolist()
        self._drafted = self._drafted or draft.num_tokens > 0
        self.steps.append(GammaStep(B, alpha, draft.num_tokens))
        self._last = [(c, prop, draft.num_tokens, m) for c, prop, m in zip(contexts, proposals, matched)]
        return draft

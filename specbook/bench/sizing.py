"""Drafts sized by the machine: gamma for chains and the node budget for trees.

Shape legend: n positions in one target forward (gamma + 1 for a chain, nodes + 1 for a tree).

How long a draft pays depends on two measurements, made here and now:

* the verify cost v(n) of this machine and dtype (:func:`specbook.bench.timing.verify_cost_curve`):
  one target forward over n positions, in one-position forwards, read past its measured end as
  :class:`specbook.costs.CostCurve` says.  Flat where the CPU multiplies the dtype natively
  (bfloat16 with AMX), steep where it does not;
* how well the drafter guesses on this workload: a short pilot run.

Chains follow Leviathan et al. (2023, eq. 1 and Thm 3.8): with per-token acceptance alpha, a
chain of gamma drafts yields E = (1 - alpha^(gamma+1)) / (1 - alpha) tokens per pass, and
the speedup is E / (gamma c + v(gamma + 1)); :func:`specbook.theory.optimal_gamma` picks the
best gamma.  Trees have no such closed form (EAGLE-2 reshapes its tree every step), so each
candidate budget is piloted and the one with the most tokens per pass per unit of cost,
tau(N) / (c(N) + v(N + 1)), wins, where c(N) is the pilot's drafting time per pass over the
target's one-position pass (a bigger tree needs more head passes).  Tokens per pass do not
depend on how busy the machine is; v and c do, and v is a ratio of interleaved medians.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from .. import theory
from ..costs import CostCurve
from ..decode import speculative_generate
from ..sampling import GREEDY
from .measure import TimedDrafter

PILOT_NEW_TOKENS = 32


@dataclass(frozen=True)
class Sizing:
    """What the benchmark chose for one drafter, and why (written to the JSON as is)."""

    kind: str  # "chain" (gamma) or "tree" (node budget)
    chosen: int  # gamma, or the tree's node budget
    predicted_speedup: float  # by the model above, from the pilot and the measured v
    pilot: dict  # chain: {"alpha": ...}; tree: {budget: tau}
    source: str  # how it was chosen
    draft_cost: dict = field(default_factory=dict)  # tree: {budget: c(N)}, drafting per pass over t(1)

    def as_json(self) -> dict:
        return {"kind": self.kind, "chosen": self.chosen, "predicted_speedup": round(self.predicted_speedup, 4),
                "pilot": {str(k): round(v, 4) for k, v in self.pilot.items()},
                "draft_cost": {str(k): round(v, 4) for k, v in self.draft_cost.items()}, "source": self.source}


def pilot(target, drafter, prompts: Sequence[list[int]], gamma: int, eos_token_id=None,
          new_tokens: int = PILOT_NEW_TOKENS) -> tuple[float, float, float]:
    """(acceptance rate accepted/verified, tokens per pass, drafting seconds per pass) of ``drafter``
    over ``prompts``, greedy."""
    timed = TimedDrafter(drafter)
    accepted = verified = emitted = passes = 0
    for ids in prompts:
        if hasattr(drafter, "reset"):
            drafter.reset()
        stats = speculative_generate(target, timed, [list(ids)], new_tokens, params=GREEDY, gamma=gamma,
                                     eos_token_id=eos_token_id).stats
        accepted, verified = accepted + stats.accepted, verified + stats.verified
        emitted, passes = emitted + stats.emitted, passes + len(stats.accepted_per_step)
    alpha = accepted / verified if verified else 0.0
    draft_seconds = sum(t for _, t in timed.log)
    return alpha, (emitted / passes if passes else 1.0), (draft_seconds / passes if passes else 0.0)


def choose_gamma(alpha: float, v: Sequence[float], c: float = 0.0, max_gamma: int = 16) -> tuple[int, float]:
    """(gamma >= 1, predicted speedup) maximising E(alpha, gamma) / (gamma c + v(gamma + 1)).

    At least one draft is kept even where speculation is predicted to lose, so that the
    benchmark still measures the drafter (the prediction then says < 1)."""
    alpha = min(max(float(alpha), 0.0), 0.999)
    cost = CostCurve(v).after
    gamma, best = theory.optimal_gamma(alpha, c, cost, max_gamma=max_gamma)
    if gamma == 0:
        gamma = 1
        best = float(theory.speedup(alpha, 1, c, cost))
    return gamma, best


def size_chain(target, drafter, prompts, v: Sequence[float], *, c: float = 0.0, max_gamma: int = 16,
               eos_token_id=None) -> Sizing:
    """Pilot ``drafter`` at ``max_gamma`` drafts (acceptance of the drafts it tests), then :func:`choose_gamma`."""
    alpha, _, _ = pilot(target, drafter, prompts, max_gamma, eos_token_id)
    gamma, predicted = choose_gamma(alpha, v, c, max_gamma)
    return Sizing("chain", gamma, predicted, {"alpha": alpha},
                  f"argmax of E(alpha, gamma) / (gamma c + v(gamma + 1)), c = {c:.3f}, alpha from a pilot of "
                  f"{len(prompts)} prompt(s) x {PILOT_NEW_TOKENS} tokens")


def best_tree(taus: dict, c: dict, v: Sequence[float]) -> tuple[int, float]:
    """(budget N, its score) maximising tau(N) / (c(N) + v(N + 1)); ties go to the smaller tree."""
    cost = CostCurve(v).after
    scores = {b: tau / (c.get(b, 0.0) + cost(b)) for b, tau in taus.items()}
    best = max(scores, key=lambda b: (scores[b], -b))
    return best, scores[best]


def size_tree(target, make: Callable[[int], object], budgets: Sequence[int], prompts, v: Sequence[float], *,
              eos_token_id=None, step_seconds: float | None = None) -> Sizing:
    """Pilot a drafter built by ``make(budget)`` for each node budget; keep the largest
    tau(N) / (c(N) + v(N + 1)).

    c(N) is the drafting time per pass over ``step_seconds``, the target's one-position pass
    (t(1) of the verify-cost curve), both measured here: a deeper tree costs more head passes.
    Without ``step_seconds`` drafting is taken as free (c = 0)."""
    if not budgets:
        raise ValueError("budgets must list at least one node budget")
    if step_seconds is not None and not step_seconds > 0:
        raise ValueError(f"step_seconds must be > 0, got {step_seconds!r}")
    runs = {int(b): pilot(target, make(int(b)), prompts, int(b), eos_token_id) for b in budgets}
    taus = {b: tau for b, (_, tau, _) in runs.items()}
    c = {b: (sec / step_seconds if step_seconds else 0.0) for b, (_, _, sec) in runs.items()}
    best, score = best_tree(taus, c, v)
    return Sizing("tree", best, score, taus,
                  f"argmax of tau(N) / (c(N) + v(N + 1)) over budgets {list(runs)}, tau and c (drafting time per "
                  f"pass over the target's t(1)) from a pilot of {len(prompts)} prompt(s) x {PILOT_NEW_TOKENS} tokens", c)


def padded_curve(curve: dict, n_max: int) -> list[float]:
    """v(1), ..., v(n_max) of an engine that runs a pass of n positions at the narrowest measured
    width W >= n (the compiled engine pads a pass to one of its compiled widths), from a curve
    measured at those widths only (``verify_cost_curve(..., sizes=widths)``): v(n) = v(W)."""
    at = dict(zip(curve["n"], curve["v"]))
    if n_max < 1 or max(at) < n_max:
        raise ValueError(f"n_max must lie in 1..{max(at)} (the widest width measured), got {n_max!r}")
    return [at[min(w for w in at if w >= n)] for n in range(1, n_max + 1)]


def resize(sizing: Sizing, v: Sequence[float], step_ratio: float = 1.0, max_gamma: int = 16) -> Sizing:
    """The same drafter sized for another engine: its pilot (alpha, or tau per budget, and the
    drafting time) kept, the choice made again under that engine's verify cost ``v``.

    step_ratio: the pilot engine's one-position pass over this engine's, t(1) / t'(1); drafting
    takes as long in either, so c'(N) = c(N) x step_ratio (a faster target step makes the same
    drafting a larger share of it)."""
    if not step_ratio > 0:
        raise ValueError(f"step_ratio must be > 0, got {step_ratio!r}")
    if sizing.kind == "chain":
        gamma, predicted = choose_gamma(sizing.pilot["alpha"], v, 0.0, max_gamma)
        return Sizing("chain", gamma, predicted, dict(sizing.pilot), sizing.source + "; v of this engine")
    c = {b: cb * step_ratio for b, cb in sizing.draft_cost.items()}
    best, score = best_tree(sizing.pilot, c, v)
    return Sizing("tree", best, score, dict(sizing.pilot),
                  sizing.source + f"; v of this engine, c scaled by its t(1) ({step_ratio:.3f})", c)

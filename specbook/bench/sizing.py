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
best gamma.  Prompt lookup breaks that model's one assumption: it drafts nothing where no suffix
of the context recurs and long runs that are accepted whole where one does, so its acceptance is
no single alpha (one pilot saw alpha 0.42 and tau 2.0 at gamma 4 on code, 1.1 on chat).  Its
drafts depend on the context alone, though, so at temperature 0 what it would have drafted at
every gamma can be replayed on the pilot's greedy text, pass by pass, without the target
(:func:`replay_chain`); the gamma with the most tokens per unit of verify cost wins.  Trees
have no such closed form (EAGLE-2 reshapes its tree every step), so each candidate budget is
piloted and the one with the most tokens per pass per unit of cost, tau(N) / (c(N) + v(N + 1)),
wins, where c(N) is the pilot's drafting time per pass over the target's one-position pass (a
bigger tree needs more head passes).  Tokens per pass do not
depend on how busy the machine is; v and c do, and v is a ratio of interleaved medians.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from .. import theory
from ..costs import CostCurve
from ..decode import speculative_generate
from ..sampling import GREEDY
from ..validate import check_count
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
    replay: dict = field(default_factory=dict)  # replayed chain: {gamma: (tokens, [positions of each pass])}

    def as_json(self) -> dict:
        out = {"kind": self.kind, "chosen": self.chosen, "predicted_speedup": round(self.predicted_speedup, 4),
               "pilot": {str(k): round(v, 4) for k, v in self.pilot.items()},
               "draft_cost": {str(k): round(v, 4) for k, v in self.draft_cost.items()}, "source": self.source}
        if self.replay:  # per gamma: tokens and how many passes fed n positions (index n - 1)
            out["replay"] = {str(g): {"tokens": tokens, "passes_by_positions": _histogram(widths)}
                             for g, (tokens, widths) in self.replay.items()}
        return out


def _histogram(widths: Sequence[int]) -> list[int]:
    """[passes of 1 position, of 2, ...] up to the widest."""
    counts = [0] * max(widths, default=0)
    for n in widths:
        counts[n - 1] += 1
    return counts


def pilot(target, drafter, prompts: Sequence[list[int]], gamma: int, eos_token_id=None,
          new_tokens: int = PILOT_NEW_TOKENS, texts: list | None = None) -> tuple[float, float, float]:
    """(acceptance rate accepted/verified, tokens per pass, drafting seconds per pass) of ``drafter``
    over ``prompts``, greedy; ``texts``, when given, receives each prompt's new tokens."""
    timed = TimedDrafter(drafter)
    accepted = verified = emitted = passes = 0
    for ids in prompts:
        if hasattr(drafter, "reset"):
            drafter.reset()
        out = speculative_generate(target, timed, [list(ids)], new_tokens, params=GREEDY, gamma=gamma,
                                   eos_token_id=eos_token_id)
        stats = out.stats
        if texts is not None:
            texts.append(out.new_tokens[0, : int(out.lengths[0])].tolist())
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


def replay_chain(drafter, prompt: Sequence[int], trace: Sequence[int], gamma: int, max_new_tokens: int) -> list[int]:
    """The positions fed to each target pass (drafts + 1) of a greedy speculative decode that emits ``trace``
    after ``prompt`` with ``drafter`` at ``gamma`` drafts, worked out without the target.

    Valid for a drafter whose proposal depends on the context alone (prompt lookup): at temperature
    0 the loop emits the greedy text whatever the drafts, so a pass at context x_<t accepts the
    drafts that repeat ``trace`` from t, emits one token more, and the next pass starts after
    them.  As the loop does (:mod:`specbook.decode`), a pass asks for no more drafts than the
    budget ``max_new_tokens`` leaves room for, and the decode ends where ``trace`` ends (its
    budget or its end token)."""
    if hasattr(drafter, "reset"):
        drafter.reset()
    prompt, trace, widths, t = list(prompt), list(trace), [], 0
    while t < len(trace):
        room = min(gamma, max_new_tokens - t - 1)
        draft = drafter.propose([torch.tensor(prompt + trace[:t])], room, GREEDY).tokens[0].tolist()
        k = 0
        while k < len(draft) and t + k < len(trace) and draft[k] == trace[t + k]:
            k += 1
        widths.append(len(draft) + 1)
        t += k + 1  # the last pass emits what is left: the loop stops at the end of `trace`
    return widths


def replay_score(tokens: int, widths: Sequence[int], v: Sequence[float]) -> float:
    """Speedup over plain decoding of passes of ``widths`` positions that emitted ``tokens``: plain decoding
    pays one one-position pass a token, the replay v(n) for each pass of n positions."""
    cost = CostCurve(v).after  # cost(K) = v(K + 1)
    return tokens / sum(cost(n - 1) for n in widths)


def size_replay(target, drafter, prompts, v: Sequence[float], *, max_gamma: int = 16, eos_token_id=None,
                new_tokens: int = PILOT_NEW_TOKENS) -> Sizing:
    """gamma for a drafter whose drafts depend on the context alone (prompt lookup), from what it would
    have drafted at each gamma on the greedy text of a pilot: :func:`replay_chain` gives every pass's
    width, and the gamma with the most tokens per unit of verify cost, tokens / sum v(n), wins (within
    1% of it: the shortest such chain).  Unlike :func:`size_chain` no law of acceptance is assumed:
    prompt lookup drafts nothing where no suffix matches and long runs where one does, which one
    alpha misreads.
    The pilot decodes once, speculatively at ``max_gamma`` (its text is greedy decoding's)."""
    check_count("max_gamma", max_gamma, 1)
    texts: list[list[int]] = []
    alpha, _, _ = pilot(target, drafter, prompts, max_gamma, eos_token_id, new_tokens, texts)
    replay = {}
    for gamma in range(1, max_gamma + 1):
        widths = [n for ids, text in zip(prompts, texts) for n in replay_chain(drafter, ids, text, gamma, new_tokens)]
        replay[gamma] = (sum(map(len, texts)), widths)
    return _replay_sizing(replay, v, alpha, f"argmax over gamma of tokens / sum of v(n) over the passes the "
                          f"drafter would have made, replayed on the greedy text of a pilot of {len(prompts)} "
                          f"prompt(s) x {new_tokens} tokens")


REPLAY_TIE = 0.01  # replayed gammas predicted within 1% of the best count as tied: v is measured to a few %


def _replay_sizing(replay: dict, v: Sequence[float], alpha: float, source: str, max_gamma: int | None = None) -> Sizing:
    """The shortest gamma predicted within :data:`REPLAY_TIE` of the best (prompt lookup's curve is flat past
    its typical match length, and the clock, not the replay, would break a tie there)."""
    scores = {g: replay_score(tokens, widths, v) for g, (tokens, widths) in replay.items()
              if max_gamma is None or g <= max_gamma}
    top = max(scores.values())
    best = min(g for g, score in scores.items() if score >= top * (1 - REPLAY_TIE))
    taus = {f"tau@{g}": tokens / len(widths) for g, (tokens, widths) in replay.items()}
    return Sizing("chain", best, scores[best], {"alpha": alpha, **taus}, source, replay=replay)


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
    if sizing.kind == "chain" and sizing.replay:
        return _replay_sizing(sizing.replay, v, sizing.pilot["alpha"], sizing.source + "; v of this engine", max_gamma)
    if sizing.kind == "chain":
        gamma, predicted = choose_gamma(sizing.pilot["alpha"], v, 0.0, max_gamma)
        return Sizing("chain", gamma, predicted, dict(sizing.pilot), sizing.source + "; v of this engine")
    c = {b: cb * step_ratio for b, cb in sizing.draft_cost.items()}
    best, score = best_tree(sizing.pilot, c, v)
    return Sizing("tree", best, score, dict(sizing.pilot),
                  sizing.source + f"; v of this engine, c scaled by its t(1) ({step_ratio:.3f})", c)

"""What a step of the decode loop itself costs at each gamma: the batch command's calibration.

Shape legend: B batch (rows decoded together), gamma drafts per row.

The adaptive policy prices a step drafting gamma tokens at gamma c_B + v_B(gamma + 1) target
passes (:class:`specbook.costs.BatchCosts`), from forwards timed alone.  A step of the loop also
samples, accepts, moves caches and drafts row by row in Python: work that is the same at every
gamma and so dilutes those ratios (measured on a 2-core CPU, SmolLM2-135M with its draft model at
batch 1: gamma 3 priced 2.02 plain steps from the forwards, 1.53 in the loop).  So the command
times the loop itself: one policy pinned to each gamma 0..G (:class:`PinnedGamma`), the G + 1
runs stepped side by side (:func:`measure_loop_costs`), each gamma priced from every pass's drafts
and seconds (:func:`step_ratios`: the plain passes apart, a line through the drafting ones), and the
policy's steps priced with it (:class:`LoopCosts`,
:func:`loop_priced`).
"""
from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from tqdm.auto import tqdm

from ..costs import BatchCosts, curves, interpolate
from ..drafters.adaptive import AdaptiveGamma, GammaPolicy
from ..sampling import SamplingParams
from .batch_runs import PrefillOnce, Run, side_by_side
from .timing import rotated


class PinnedGamma(AdaptiveGamma):
    """The adaptive policy drafting ``gamma`` tokens at every step (capped at the loop's), whatever its
    estimates say: everything else (the shadow, the acceptance it observes, the step log) as the policy
    it stands in for, so that a step costs what the policy's step at that gamma costs."""

    def __init__(self, drafter, policy: GammaPolicy, gamma: int, *, shadow: bool = False):
        if not isinstance(gamma, int) or isinstance(gamma, bool) or gamma < 0:
            raise ValueError(f"the pinned gamma must be an int >= 0, got {gamma!r}")
        super().__init__(drafter, policy, shadow)
        self.gamma = gamma

    def decide(self, contexts, gamma: int, matched) -> tuple[int, float]:
        return min(self.gamma, gamma), self.alpha_estimate()


@dataclass(frozen=True)
class LoopCosts(BatchCosts):
    """:class:`~specbook.costs.BatchCosts` whose steps are priced by the loop's own measured ratios.

    step_cost: {B: (T_B(1), ..., T_B(g_max))}, the whole denominator gamma c_B + v_B(gamma + 1)
               measured as one: a step of the real decode loop drafting gamma tokens over one drafting
               none, at batch B.  ``verify_cost`` and ``draft_cost`` then price only the catch-up."""

    step_cost: Mapping[int, Sequence[float]] | None = None

    def __post_init__(self):
        super().__post_init__()
        object.__setattr__(self, "step_cost", curves(self.step_cost, "step_cost"))

    def step(self, batch: int, gamma: int) -> float:
        if gamma == 0:
            return 1.0
        return interpolate({b: curve(gamma) for b, curve in self.step_cost.items()}, batch)


def measure_loop_costs(targets: list, pinned: dict, batches: dict, *, max_new_tokens: int, seed: int,
                       params: SamplingParams, eos: int | None = None, new_tokens: int = 16, rounds: int = 3,
                       progress: bool = False) -> dict:
    """{drafter: {"step": {B: [T_B(1) / T_B(0), ..., T_B(G) / T_B(0)]}, "step_raw": {B: the same ratios
    read off the passes that drafted exactly g tokens (None where none did)}, "seconds": {B: T_B(0)},
    "fitted": {B: whether a line could be fitted}}}.

    ``pinned``: {drafter: [PinnedGamma at 0, ..., at G]}, each with its own drafter instance;
    ``targets``: at least G + 1 targets (caches) of the model.  T_B(g) is one step of the real decode
    loop, drafter and policy included, verifying g drafts for each of the batch's B prompts.  The G + 1
    runs are stepped side by side (:func:`side_by_side`, in a rotated order each round), so a slow
    spell of the machine lands on all of them.  A pinned run does not draft its gamma at every pass
    (prompt lookup drafts nothing where no row finds a match; rows that end leave the batch), so each
    pass is priced by what it verified: every pass of every run with all B rows (:func:`full_passes`;
    the first, which pays a model drafter's catch-up on the prompt, excluded) is a point (K, seconds),
    and :func:`step_ratios` prices each gamma from them: the plain passes apart, a line through the
    passes that drafted; T_B(g) is the median over ``rounds`` rounds.  (The median of all passes of the run pinned to g, used
    before, priced gamma 4 at batch 8 at 1.30 plain steps on prompts the scheduler was never tuned on,
    where the passes that verified 8 x 5 positions cost 1.83.)  Where no round has passes of two
    draft lengths, the ratios of the runs' medians stand in, fitted with :func:`straight`."""
    new_tokens = min(new_tokens, max_new_tokens)
    size = max(len(p) for p in pinned.values())
    if len(targets) < size:
        raise ValueError(f"need {size} targets to time gammas 0..{size - 1} side by side, got {len(targets)}")
    targets = [t if isinstance(t, PrefillOnce) else PrefillOnce(t) for t in targets]
    out: dict = {}
    bar = tqdm(total=len(pinned) * len(batches) * rounds, desc="loop costs", disable=not progress)
    for d, policies in pinned.items():
        gammas = list(range(len(policies)))
        if [p.gamma for p in policies] != gammas:
            raise ValueError(f"pinned[{d!r}] must hold one PinnedGamma per gamma 0..{len(policies) - 1} in order, "
                             f"got gammas {[p.gamma for p in policies]}")
        out[d] = {"step": {}, "step_raw": {}, "seconds": {}, "fitted": {}}
        for B, batch in batches.items():
            fits, medians, points = [], {g: [] for g in gammas}, []
            for r in range(rounds):
                runs = {g: Run(targets[g], policies[g], batch, max_new_tokens=new_tokens, gamma=gammas[-1], seed=seed,
                               params=params, eos=eos) for g in gammas}
                side_by_side([runs[g] for g in rotated(gammas, r)])
                if any(len(run.passes) < 2 for run in runs.values()):
                    raise ValueError(f"too few steps to time the loop at batch {B}: raise --max-new-tokens "
                                     f"(got {max_new_tokens})")
                timed = [p for run in runs.values() for p in full_passes(run, len(batch))]
                points += timed
                fits.append(step_ratios(timed, gammas[-1]))
                for g, run in runs.items():
                    medians[g].append(statistics.median(run.passes[1:]))
                bar.update(1)
            fits = list(filter(None, fits))
            by_k = {k: statistics.median(s for kk, s in points if kk == k) for k in {k for k, _ in points}}
            out[d]["step_raw"][B] = [by_k[g] / by_k[0] if g in by_k and 0 in by_k else None for g in gammas[1:]]
            out[d]["fitted"][B] = bool(fits)
            if fits:
                out[d]["seconds"][B] = statistics.median(plain for plain, _ in fits)
                out[d]["step"][B] = [statistics.median(ratios[g - 1] for _, ratios in fits) for g in gammas[1:]]
            else:
                out[d]["seconds"][B] = statistics.median(medians[0])
                out[d]["step"][B] = straight([statistics.median(a / b for a, b in zip(medians[g], medians[0]))
                                              for g in gammas[1:]])
    bar.close()
    return out


def full_passes(run: Run, batch: int) -> list[tuple[int, float]]:
    """(K, seconds) of each of ``run``'s passes that verified every one of the ``batch`` rows, K the drafts
    per row; the first pass (the prefill's) left out."""
    return [(step[3], seconds) for step, seconds in list(zip(run.log.steps, run.passes))[1:] if len(step[0]) == batch]


def per_draft(points: list[tuple[int, float]]) -> tuple[float, float] | None:
    """(a, b) of the line seconds = a + b K through ``points`` (K, seconds), or None unless two K differ.

    Theil and Sen's line: b is the median of the slopes between every two points of different K, a the
    median of seconds - b K.  A pass slowed by other work on the machine moves a least-squares line; it
    moves these medians hardly at all."""
    slopes = [(s2 - s1) / (k2 - k1) for i, (k1, s1) in enumerate(points) for k2, s2 in points[i + 1:] if k2 != k1]
    if not slopes:
        return None
    b = statistics.median(slopes)
    return statistics.median(s - b * k for k, s in points), b


def step_ratios(points: list[tuple[int, float]], gamma_max: int) -> tuple[float, list[float]] | None:
    """(seconds of a plain step, [T(1), ..., T(gamma_max)]) from passes ``points`` (K, seconds); None
    without plain passes or without two draft lengths to draw a line through.

    A step that drafts costs more than a plain one by a jump, then by a little per draft: it verifies
    two positions or more, where the model's products switch from a one-row kernel to a matrix one,
    and the loop accepts and rolls back.  (Measured on a 2-core AVX2 CPU in float32, prompt lookup at
    batch 1: a step verifying 1, 2, 3 or 4 drafts took 1.60, 1.70, 1.56 and 1.74 plain steps, where one
    line through all the passes priced them 1.27, 1.54, 1.80 and 2.07: short drafts looked cheap, long
    ones dear, and the policy drafted 1 or 2 tokens where 4 paid.)  So the plain passes give their
    median a, a line a' + b' K goes through the passes that drafted (:func:`per_draft`), and
    T(g) = (a' + b' g) / a, never below 1 nor falling with g.  Without two draft lengths among the
    drafting passes one line through all the passes stands in."""
    plain = [s for k, s in points if k == 0]
    drafting = [(k, s) for k, s in points if k > 0]
    if not plain:
        return None
    a = statistics.median(plain)
    line = per_draft(drafting) or per_draft(points)
    if line is None or a <= 0:
        return None
    a1, b1 = line if line[1] >= 0 else (statistics.median(s for _, s in drafting or points), 0.0)
    ratios, floor = [], 1.0
    for g in range(1, gamma_max + 1):
        floor = max(floor, (a1 + b1 * g) / a)
        ratios.append(floor)
    return a, ratios


def straight(ratios: list[float]) -> list[float]:
    """The least-squares line a + b gamma through T(1), ..., T(G), kept above 1 and non-decreasing.

    Each further draft adds one draft-model step and one verified position, so the loop's step cost
    is close to a line in gamma; fitting one through all the gammas pools their timings, where the
    fastest round of each alone still wanders by 10-20% on a shared 2-core host."""
    n = len(ratios)
    if n < 2:
        return [max(r, 1.0) for r in ratios]
    xs = range(1, n + 1)
    mx, my = (n + 1) / 2, sum(ratios) / n
    b = max(sum((x - mx) * (y - my) for x, y in zip(xs, ratios)) / sum((x - mx) ** 2 for x in xs), 0.0)
    return [max(my + b * (x - mx), 1.0) for x in xs]


def loop_priced(costs: BatchCosts, loop: dict, t1_seconds: dict) -> LoopCosts:
    """``costs`` with the loop's measured step ratios; the catch-up (timed on forwards, in target
    passes) converted to loop steps."""
    catch_up = costs.catch_up
    if isinstance(catch_up, dict):
        catch_up = {B: c * t1_seconds[B] / loop["seconds"][B] for B, c in catch_up.items() if B in loop["seconds"]}
    return LoopCosts(costs.verify_cost, costs.draft_cost, catch_up, dict(loop["seconds"]),
                     step_cost=dict(loop["step"]))

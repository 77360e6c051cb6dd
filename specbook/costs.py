"""What a speculative step costs, in plain decoding steps: measured cost curves and the cost model by batch size.

Shape legend: B batch (live rows), n positions per row in one target pass, gamma drafts per row.

Leviathan et al. (2023, eq. 1 and Thm 3.8) price a step drafting gamma tokens at
gamma c + v(gamma + 1) plain steps: c is one draft step over one target step, and v(n), the
verify cost, is one target pass over n positions over a pass over one.  On real hardware v is
measured (``specbook.bench.timing.verify_cost_curve``), and so is only known up to the longest
pass that was timed.

:class:`CostCurve` holds such a curve, f(1), ..., f(N), and is the one place that says how to read
it past its measured end: the last measured step is repeated, f(n) = f(N) + max(f(N) - f(N-1), 0)
(n - N), because a pass over more positions never costs less (a one-point curve stays flat).
Every caller in specbook reads its curves through it: the adaptive-gamma policy, the benchmark's
sizing and its predictions.

:class:`BatchCosts` is the cost model of one machine, target and drafter by batch size: a verify
curve v_B and a draft cost c_B at each measured B, linearly interpolated in log2(B) between them
and clamped at the ends (Williams et al. 2009: extra positions are nearly free while a step is
memory-bound, and cost a full pass each once B n positions saturate the arithmetic units).
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, init=False)
class CostCurve:
    """A measured cost curve f(1), ..., f(N) (all > 0); ``curve(n)`` reads it at any n >= 1.

    The verify cost v(n) of n positions, or a whole loop step's cost T(gamma) of gamma drafts:
    either way, past the measured end the last step is repeated, never downwards."""

    values: tuple[float, ...]

    def __init__(self, values: Sequence[float]):
        values = tuple(float(v) for v in values)
        if not values or any(not v > 0 for v in values):
            raise ValueError(f"a cost curve must be a non-empty sequence of positive numbers, got {list(values)!r}")
        object.__setattr__(self, "values", values)

    def __len__(self) -> int:
        return len(self.values)

    def __call__(self, n: int) -> float:
        """f(n), n >= 1; past the measured end, the last measured step repeated (never negative)."""
        if n < 1:
            raise ValueError(f"a cost curve starts at n = 1, got {n!r}")
        last = len(self.values)
        if n <= last:
            return self.values[n - 1]
        step = max(self.values[-1] - self.values[-2], 0.0) if last > 1 else 0.0
        return self.values[-1] + step * (n - last)

    def after(self, gamma: int) -> float:
        """f(gamma + 1): a verify curve read as a function of the drafts, gamma + 1 positions."""
        return self(int(gamma) + 1)


def interpolate(table: Mapping[int, float], batch: int) -> float:
    """``table`` at ``batch``: linear in log2(batch) between measured batch sizes, clamped at the ends."""
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


def curves(table, name: str) -> dict[int, CostCurve]:
    """{B: CostCurve} from {B: sequence of positive costs}; ValueError naming ``name`` otherwise."""
    if not isinstance(table, Mapping) or not table:
        raise ValueError(f"{name} must map batch sizes to curves, got {table!r}")
    out = {}
    for b, curve in table.items():
        if not isinstance(b, int) or isinstance(b, bool) or b < 1:
            raise ValueError(f"{name} keys must be batch sizes >= 1, got {b!r}")
        try:
            out[b] = curve if isinstance(curve, CostCurve) else CostCurve(curve)
        except (TypeError, ValueError):
            raise ValueError(f"{name}[{b}] must be a non-empty curve of positive ratios, got {curve!r}") from None
    return out


@dataclass(frozen=True)
class BatchCosts:
    """Measured costs of one machine, target and drafter, by batch size.

    verify_cost: {B: (v_B(1), v_B(2), ..., v_B(n_max))} with v_B(1) = 1, read by :class:`CostCurve`.
    draft_cost:  {B: c_B}, one draft step over one target step at batch B, or one float for every B
                 (0 for a drafter without a model, such as prompt lookup).
    catch_up:    {B: target passes per token} a model drafter's prefill costs when it catches up on
                 tokens it has not seen (every row at once), or one float; 0 (not measured): a catch-up
                 of n tokens is priced c_B v_B(n), read past the measured curve by :class:`CostCurve`.
    plain_seconds: {B: seconds of one plain step at batch B}, if measured; it tells how much of a step
                 some of the rows cost (:meth:`ahead_share`).  None: not measured.
    """

    verify_cost: Mapping[int, Sequence[float]]
    draft_cost: Mapping[int, float] | float = 0.0
    catch_up: Mapping[int, float] | float = 0.0
    plain_seconds: Mapping[int, float] | None = None

    def __post_init__(self):
        object.__setattr__(self, "verify_cost", curves(self.verify_cost, "verify_cost"))
        for name in ("draft_cost", "catch_up"):
            value = getattr(self, name)
            if any(not c >= 0 for c in (value.values() if isinstance(value, Mapping) else [value])):
                raise ValueError(f"{name} must be >= 0, got {value!r}")
        seconds = self.plain_seconds
        if seconds is not None and (not isinstance(seconds, Mapping) or not seconds or any(
                not isinstance(b, int) or isinstance(b, bool) or b < 1 or not t > 0 for b, t in seconds.items())):
            raise ValueError(f"plain_seconds must map batch sizes >= 1 to seconds > 0, got {seconds!r}")

    def ahead_share(self, batch: int, behind: int) -> float:
        """The share of a plain step at ``batch`` rows that all but ``behind`` of them cost:
        1 - t(behind) / t(batch), in [0, 1); 0 where ``plain_seconds`` was not measured.

        Rows that finish sooner leave the batch, and each later step costs t(behind) instead of t(batch):
        on a 2-core CPU, SmolLM2-135M in float32, a plain step took 53 ms at batch 1 and 84 ms at batch 2,
        so one row's progress is worth 0.37 of a batch-2 step to the other."""
        if self.plain_seconds is None or behind >= batch:
            return 0.0
        share = 1.0 - interpolate(self.plain_seconds, behind) / interpolate(self.plain_seconds, batch)
        return min(max(share, 0.0), 0.99)

    def v(self, batch: int, positions: int) -> float:
        """v_B(n) at this batch size (interpolated between measured batch sizes)."""
        return interpolate({b: curve(positions) for b, curve in self.verify_cost.items()}, batch)

    def c(self, batch: int) -> float:
        if isinstance(self.draft_cost, Mapping):
            return interpolate(self.draft_cost, batch)
        return float(self.draft_cost)

    def step(self, batch: int, gamma: int) -> float:
        """One step drafting ``gamma`` tokens, in steps drafting none: gamma c_B + v_B(gamma + 1)."""
        if gamma == 0:
            return 1.0
        return gamma * self.c(batch) + self.v(batch, gamma + 1)

    def catch_up_cost(self, batch: int, tokens: int) -> float:
        """Target passes for a model drafter to feed ``tokens`` it has not seen, in every row."""
        per_token = interpolate(self.catch_up, batch) if isinstance(self.catch_up, Mapping) else self.catch_up
        shortest = min(len(curve) for curve in self.verify_cost.values())
        if tokens <= shortest or not per_token:
            return self.c(batch) * self.v(batch, tokens)
        return float(per_token) * tokens

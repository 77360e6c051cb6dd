"""Generations of a batch stepped side by side, one target pass at a time, each on its own clock.

Shape legend: B batch (rows decoded together), K draft length.

On a shared machine a run can be 20-30% slower than its twin a second later.  So the runs that
``python -m specbook batch`` compares are not timed one after the other: :func:`side_by_side`
advances them in turns, one pass at a time, the run furthest behind on its own clock first
(:class:`Run`), each on its own cache and drafter; a run's time is the sum of its own passes
(prefill excluded, :class:`PrefillOnce`).  A slow spell then lands on every run alike.
"""
from __future__ import annotations

import statistics

import torch

from ..decode import DecodeStep, generate_steps, speculative_steps
from ..drafters.adaptive import AdaptiveGamma
from ..metrics import engine_metrics
from ..sampling import SamplingParams
from .batch_costs import now


class StepLog:
    """An ``on_step`` hook that counts positions, waste and per-row finishing times of one run."""

    def __init__(self, drafter, start: float = 0.0, clock=None):
        self.drafter, self.start, self.clock = drafter, start, clock or now
        self.passes = self.positions = self.wasted = self.padding = 0
        self.finished: dict[int, float] = {}  # row -> seconds since start at its last step
        self.steps: list[tuple[tuple[int, ...], list[int], list[int], int]] = []  # (rows, accepted, kept, K)

    def __call__(self, step: DecodeStep) -> None:
        B, K = step.tokens.shape[0], step.draft.num_tokens
        accepted = (step.num_emitted - 1).tolist()
        self.passes += 1
        self.positions += B * (K + 1)
        self.wasted += sum(K - a for a in accepted)
        matches = list(getattr(self.drafter, "match_lengths", None) or [])
        if K and len(matches) == B:  # a row without a match drafted nothing: its K positions are padding
            self.padding += K * sum(m == 0 for m in matches)
        t = self.clock() - self.start
        for r in step.rows:
            self.finished[r] = t
        self.steps.append((step.rows, accepted, step.kept.tolist(), K))


class PrefillOnce:
    """A ``LlamaTarget`` whose prefill is timed (``seconds``, summed) and computed once per prompt batch.

    The prompts' prefill is the same work for every policy at one batch size and, on a CPU, can
    outweigh a short decode: a run's time excludes it (reported apart), and a prefill of the tokens
    this target prefilled last restores the cache saved then instead of recomputing it.  Every other
    call goes to the target unchanged."""

    def __init__(self, target):
        self.target, self.seconds = target, 0.0
        self._saved = None  # (tokens' key, copy of the cache) of the last prefill computed

    def __getattr__(self, name):  # last_hidden, max_length, cache, ...: the target's own
        return getattr(self.target, name)

    def prefill(self, tokens: torch.Tensor) -> None:
        t0 = now()
        key = (tuple(tokens.shape), hash(tuple(tokens.flatten().tolist())))
        cache = self.target.cache
        if (self._saved is not None and self._saved[0] == key and self._saved[1].k.shape == cache.k.shape
                and not cache.length_list()[0]):
            cache.copy_from(self._saved[1])
        else:
            self.target.prefill(tokens)
            self._saved = (key, self.target.cache.clone())
        self.seconds += now() - t0

    def reset(self, batch_size: int) -> None:
        self.target.reset(batch_size)

    def forward(self, tokens, parents=None):
        return self.target.forward(tokens, parents)

    @property
    def cache_lengths(self) -> torch.Tensor:
        return self.target.cache_lengths

    def rollback(self, lengths) -> None:
        self.target.rollback(lengths)

    def select_rows(self, rows: list[int]) -> None:
        self.target.select_rows(rows)

    def keep(self, indices) -> None:
        self.target.keep(indices)


class Run:
    """One generation of a batch, advanced one pass at a time; its clock counts its own passes only.

    Runs stepped in turns by :func:`side_by_side` share every slow spell of a shared machine, so the
    ratio of their times is far steadier than that of runs timed one after the other.  Each run needs
    its own target (cache) and drafter instance; a target already wrapped in :class:`PrefillOnce`
    keeps its saved prefill from one run to the next.  The prefill is timed apart and excluded."""

    def __init__(self, target, drafter, prompts, *, max_new_tokens: int, gamma: int, seed: int,
                 params: SamplingParams, eos: int | None = None):
        if hasattr(drafter, "reset") and not isinstance(drafter, AdaptiveGamma):
            drafter.reset()  # an adaptive policy keeps the acceptance it learnt on the run's earlier generations
        self.drafter, self.rows = drafter, len(prompts)
        self.logged = len(getattr(drafter, "steps", []))
        self.seconds = 0.0  # inside this run's own passes (its prefill included)
        self.passes: list[float] = []  # each pass's seconds, in order (the first pays the prefill)
        self.log = StepLog(drafter, clock=lambda: self.seconds)
        self.target = target if isinstance(target, PrefillOnce) else PrefillOnce(target)
        self._prefill_before = self.target.seconds
        g = torch.Generator().manual_seed(seed)
        if drafter is None:
            self.steps = generate_steps(self.target, prompts, max_new_tokens, params=params, generator=g,
                                        eos_token_id=eos)
        else:
            self.steps = speculative_steps(self.target, drafter, prompts, max_new_tokens, params=params, gamma=gamma,
                                           generator=g, eos_token_id=eos)
        self.result = None

    @property
    def prefill_seconds(self) -> float:
        return self.target.seconds - self._prefill_before

    def advance(self) -> bool:
        """One pass (the first also prefills); False once the generation has ended."""
        t0 = now()
        try:
            step = next(self.steps)
        except StopIteration as stop:
            self.seconds += now() - t0
            self.result = stop.value
            return False
        dt = now() - t0
        self.seconds += dt
        self.passes.append(dt)
        self.log(step)
        return True

    def close(self) -> None:
        """Stop the generation where it is (a run abandoned before its end)."""
        self.steps.close()

    def figures(self) -> dict:
        """The run's figures, prefill excluded from the times."""
        out, log, prefill = self.result, self.log, self.prefill_seconds
        seconds = self.seconds - prefill
        lengths = out.lengths.tolist()
        finished = [log.finished.get(r, self.seconds) - prefill for r in range(self.rows)]  # its last pass
        total = sum(lengths)
        positions = log.positions
        return {"seconds": seconds, "prefill_seconds": prefill, "new_tokens": total,
                "tokens_per_s": total / seconds,
                "ms_per_token": 1000 * statistics.mean(f / max(n, 1) for f, n in zip(finished, lengths)),
                "tau": out.stats.tau, "acceptance_rate": out.stats.acceptance_rate, **engine_metrics(out.stats),
                "positions_per_pass": (log.positions / log.passes) if log.passes else self.rows,
                "wasted_fraction": log.wasted / positions if positions else 0.0,
                "padding_fraction": log.padding / positions if positions else 0.0,
                "sequences": out.sequences(),
                "gammas": [s.gamma for s in getattr(self.drafter, "steps", [])[self.logged:]]}


def side_by_side(runs: list) -> None:
    """Advance ``runs`` until every one has ended, one pass at a time, always the run whose own clock is
    furthest behind (the first listed among equals).

    So the runs' clocks stay within one pass of each other: second s of one run's time and second s of
    another's fall at about the same moment, and a slow spell of the machine lands on all the runs
    alive then.  (Round after round of one pass each would not do that: a run with short passes
    would fall behind and spend its last seconds alone.)"""
    live = list(runs)
    try:
        while live:
            run = min(live, key=lambda r: r.seconds)  # min keeps the first of equals: the listed order
            if not run.advance():
                live.remove(run)
    finally:
        for r in live:
            r.close()

"""The loop both checkers share: run every case, judge the family, build the report.

A checker is described by a :class:`Plan`: its cases, how to collect outputs for
one case (the only place the function under test is called), how to analyse them
(vectorised, no calls), how many law tests each case contributes, and how to
replay a few calls for the reproducibility advice.

Seeds.  Case i uses two generators: one, seeded from (seed, i, "drafts"), draws the
drafts; the other, seeded from (seed, i, "fn"), is handed to the function.  A case's
data therefore does not depend on which cases ran before it, which is what makes
``fail_fast`` exact: the report fails iff some property fails or the smallest
p-value is at most alpha / m (Holm's first step), and once that has happened no
later case can undo it.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Sequence

import torch

from .calls import CallFailed, LimitedCaller
from .report import FAIL, NOT_RUN, PASS, WARN, Check, Report, judge_family

DEFAULT_ALPHA = 1e-3  # family-wise false-alarm rate of one report
DEFAULT_CALL_TIMEOUT = 5.0  # seconds per call
DEFAULT_TIME_BUDGET = 300.0  # seconds for a whole check


@dataclass(frozen=True)
class Plan:
    subject: str
    cases: Sequence[Any]
    collect: Callable  # (case, call, fn_gen, draft_gen, deadline) -> Collected
    analyse: Callable  # (case, Collected) -> list[Check]
    n_laws: Callable  # (case) -> int
    replay: Callable  # (call, fn_gen) -> list  (a few outputs, for the reproducibility advice)


@dataclass
class Collected:
    """What one case produced.  ``failure`` is a failed property check that stopped the case."""

    drafts: Any
    outputs: Any
    calls: int
    failure: Check | None = None


class Deadline:
    """The time budget of a whole check."""

    def __init__(self, seconds: float):
        if not (isinstance(seconds, (int, float)) and seconds > 0):
            raise ValueError(f"time_budget must be a positive number of seconds, got {seconds!r}")
        self.seconds = float(seconds)
        self.end = time.perf_counter() + self.seconds

    def expired(self) -> bool:
        return time.perf_counter() > self.end


def case_seed(seed: int, index: int, stream: int) -> int:
    return (seed * 1_000_003 + index * 101 + stream) % (2**63)


def call_failure(case_name: str, err: CallFailed, where: str, calls: int, planned: int) -> Check:
    """A failed call (the ``calls``-th of ``planned`` in its case) as a failed property check."""
    hints = {
        "raised": "Run the function by hand on these inputs and read the traceback.",
        "timeout": "Avoid Python loops over the vocabulary or unbounded while-loops; each call must be quick.",
        "bad output": "Check the return type against the contract in the docstring.",
        "modified input": "Work on copies (x = x.clone()) or out-of-place operations; callers reuse these tensors.",
    }
    return Check("function runs and returns well-formed output", case_name, "property", FAIL,
                 reason=f"{where}: {err.message}", hint=hints.get(err.kind, ""),
                 evidence=(("rare", 1, calls, planned),))


def too_slow(case_name: str, calls: int, budget: float, planned: int) -> Check:
    return Check("finishes within the time budget", case_name, "property", FAIL,
                 reason=f"only {calls} of {planned} calls done when the budget of {budget:g} s ran out",
                 hint="Make each call faster (vectorise; no Python loops over the vocabulary), "
                      "or pass a larger time_budget.")


def run_plan(plan: Plan, fn: Callable, *, seed: int, alpha: float, call_timeout: float,
             time_budget: float, fail_fast: bool) -> Report:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if not (isinstance(alpha, float | int) and 0 < alpha < 1):
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    threads = torch.get_num_threads()
    # The function under test works on vectors of at most 50k entries, where intra-op threads cost far
    # more than they give, and on a busy machine much more (cloning a 50k-float vector took 30 ms with
    # two threads and 0.04 ms with one, under load).  Run single-threaded; restore the setting after.
    torch.set_num_threads(1)
    try:
        return _run(plan, fn, seed, alpha, call_timeout, time_budget, fail_fast)
    finally:
        torch.set_num_threads(threads)


def _run(plan: Plan, fn: Callable, seed: int, alpha: float, call_timeout: float, time_budget: float,
         fail_fast: bool) -> Report:
    family = sum(plan.n_laws(c) for c in plan.cases)
    deadline = Deadline(time_budget)
    start = time.perf_counter()
    checks: list[Check] = []
    timings: dict[str, float] = {}
    calls = 0
    stopped = ""
    with LimitedCaller(fn, call_timeout) as call:
        for i, case in enumerate(plan.cases):
            if stopped:
                checks.append(Check("all checks of this case", case.name, "property", NOT_RUN, reason=stopped))
                continue
            t0 = time.perf_counter()
            draft_gen = torch.Generator().manual_seed(case_seed(seed, i, 0))
            fn_gen = torch.Generator().manual_seed(case_seed(seed, i, 1))
            data = plan.collect(case, call, fn_gen, draft_gen, deadline)
            calls += data.calls
            found = [data.failure] if data.failure is not None else plan.analyse(case, data)
            checks.extend(found)
            if plan.n_laws(case) and not any(c.kind == "law" for c in found):
                checks.append(Check("statistical tests", case.name, "law", NOT_RUN,
                                    reason="not run: the function failed a property check in this case"))
            timings[case.name] = time.perf_counter() - t0
            if call.hung:
                stopped = "not run: an earlier call ran past the per-call time limit"
            elif deadline.expired():
                stopped = "not run: the time budget is spent"
            elif fail_fast and _already_failed(checks, alpha / max(family, 1)):
                stopped = "not run (fail_fast): the check has already failed"
        checks = judge_family(checks, alpha, family)
        if not stopped and not any(c.failed for c in checks):
            checks.append(_reproducibility(plan, call, seed))
    return Report(plan.subject, getattr(fn, "__qualname__", repr(fn)), seed, float(alpha), tuple(checks), calls,
                  time.perf_counter() - start, timings, family)


def _already_failed(checks: list[Check], level: float) -> bool:
    return any(c.failed or (c.kind == "law" and c.pvalue is not None and c.pvalue <= level) for c in checks)


def _reproducibility(plan: Plan, call, seed: int) -> Check:
    """Advice only: the same generator state should give the same outputs."""
    name = "reproducible from `generator`"
    try:
        first = plan.replay(call, torch.Generator().manual_seed(case_seed(seed, 999, 1)))
        second = plan.replay(call, torch.Generator().manual_seed(case_seed(seed, 999, 1)))
    except CallFailed as err:
        return Check(name, "replay", "advice", WARN, reason=f"could not replay: {err.message}")
    if first == second:
        return Check(name, "replay", "advice", PASS, reason="the same generator state gave the same outputs")
    return Check(name, "replay", "advice", WARN,
                 reason="two runs from the same generator state gave different outputs, so the function draws "
                        "randomness from elsewhere (the global torch RNG, random, numpy). The statistics above are "
                        "still valid, but pass generator=generator to torch.rand / torch.multinomial so that runs "
                        "can be replayed.")

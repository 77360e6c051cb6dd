"""The loop both checkers share: run every case, judge the family, build the report.

A checker is described by a :class:`Plan`: its cases, how to draw one case's drafts,
how to collect outputs for one case (the only place the function under test is
called), how to analyse them (vectorised, no calls), how many law tests each case
contributes, and how to replay a few calls for the reproducibility advice.

Seeds.  Case i uses three generators: one, seeded from (seed, i, 0), draws the
drafts; another, seeded from (seed, i, 1), is handed to the function; a third,
(seed, i, 2), draws the checker's own completion of short blocks (see
:mod:`specbook.grading.verifier`).  A case's data therefore does not depend on
which cases ran before it, nor on where the calls ran (a worker process or this
one), which is what makes ``fail_fast`` exact: Holm's procedure is monotone (a
smaller p-value never un-rejects a test) and tests not yet run count as p = 1, so
a verdict that has failed on part of the family stays failed on all of it.

Where the calls run: in a worker process that is killed when a call overruns
``call_timeout`` (:mod:`specbook.grading.worker`), or, where no worker can take
the function, in this process under the weaker timer of :mod:`specbook.grading.calls`.
"""
from __future__ import annotations

import time
from contextlib import nullcontext
from dataclasses import dataclass, replace
from typing import Any, Callable, Sequence

import numpy as np
import torch

from .calls import CallFailed, LimitedCaller
from .report import FAIL, NOT_RUN, PASS, REQUIRE, WARN, Check, Report, judge_family
from .worker import normalise_limit, open_runner

DEFAULT_ALPHA = 1e-3  # family-wise false-alarm rate of one report
DEFAULT_CALL_TIMEOUT = 5.0  # seconds per call
DEFAULT_TIME_BUDGET = 300.0  # seconds for a whole check
FLOAT32_EPS = float(torch.finfo(torch.float32).eps)  # 1.2e-7: below this, a residual mass vanishes in float32
HINT_FLOAT32 = ("Every failure is in a case whose residual max(0, p - q) has total mass {mass:.0e}, below float32's "
                "resolution (eps = 1.2e-7 next to probabilities near 1): your code computes in float32 (a .float(), "
                "or torch.rand / torch.tensor without dtype=target_probs.dtype), where the residual here is "
                "{mass:.0e} and rounds away. Compute in the dtype of the inputs (float64 here).")


@dataclass(frozen=True)
class Plan:
    subject: str
    cases: Sequence[Any]
    draws: Callable  # (case, draft_gen) -> drafts (numpy array, one row or entry per call)
    collect: Callable  # (case, drafts, call, fn_gen, deadline) -> Collected
    analyse: Callable  # (case, Collected, rng: np.random.Generator) -> list[Check]
    n_laws: Callable  # (case) -> int
    replay: Callable  # (call, fn_gen) -> list  (a few outputs, for the reproducibility advice)
    where: Callable  # (drafts, i) -> "draft_tokens=[...]": the inputs of call i, for messages
    diagnose: Callable | None = None  # (case, Collected) -> the hint for its failed law checks, or None


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
        self.seconds = normalise_limit(seconds, "time_budget")
        self.end = time.monotonic() + self.seconds

    def expired(self) -> bool:
        return time.monotonic() > self.end

    def left(self) -> float:
        return self.end - time.monotonic()


def case_seed(seed: int, index: int, stream: int) -> int:
    return (seed * 1_000_003 + index * 101 + stream) % (2**63)


def call_failure(case_name: str, err: CallFailed, where: str, calls: int, planned: int) -> Check:
    """A failed call (the ``calls``-th of ``planned`` in its case) as a failed property check."""
    hints = {
        "raised": "Run the function by hand on these inputs and read the traceback.",
        "timeout": "Avoid Python loops over the vocabulary or unbounded while-loops; each call must be quick.",
        "bad output": "Check the return type against the contract in the docstring.",
        "modified input": "Work on copies (x = x.clone()) or out-of-place operations; callers reuse these tensors.",
        "crashed": "Run the function by hand on these inputs; look for native crashes (e.g. out-of-bounds indexing "
                   "in C extensions) or calls to os._exit.",
    }
    return Check("function runs and returns well-formed output", case_name, "property", FAIL,
                 reason=f"{where}: {err.message}", hint=hints.get(err.kind, ""),
                 evidence=(("rare", 1, calls, planned),))


def too_slow(case_name: str, calls: int, budget: float, planned: int) -> Check:
    return Check("finishes within the time budget", case_name, "property", FAIL,
                 reason=f"only {calls} of {planned} calls done when the budget of {budget:g} s ran out",
                 hint="Make each call faster (vectorise; no Python loops over the vocabulary), "
                      "or pass a larger time_budget.")


def collect_case(plan: Plan, index: int, call, seed: int, seconds_left: float) -> Collected:
    """Draw case ``index``'s drafts and collect the function's outputs (runs where the calls run)."""
    case = plan.cases[index]
    drafts = plan.draws(case, torch.Generator().manual_seed(case_seed(seed, index, 0)))
    fn_gen = torch.Generator().manual_seed(case_seed(seed, index, 1))
    return plan.collect(case, drafts, call, fn_gen, Deadline(max(seconds_left, 1e-9)))


def replay_twice(plan: Plan, call, seed: int) -> tuple:
    """("ok", first, second) from two replays with the same generator state, or ("failed", message)."""
    try:
        outs = [plan.replay(call, torch.Generator().manual_seed(case_seed(seed, 999, 1))) for _ in range(2)]
    except CallFailed as err:
        return ("failed", err.message)
    return ("ok", *outs)


def run_plan(plan: Plan, fn: Callable, *, seed: int, alpha: float, call_timeout: float,
             time_budget: float, fail_fast: bool, require: str = "standard", isolate: bool = True) -> Report:
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be a non-negative int, got {seed!r}")
    if isinstance(alpha, bool) or not (isinstance(alpha, float | int) and 0 < alpha < 1):
        raise ValueError(f"alpha must lie in (0, 1), got {alpha!r}")
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    if require not in REQUIRE:
        raise ValueError(f"require must be one of {REQUIRE}, got {require!r}")
    limit = normalise_limit(call_timeout)
    deadline = Deadline(time_budget)
    threads = torch.get_num_threads()
    # The function under test works on vectors of at most 50k entries, where intra-op threads cost far
    # more than they give, and on a busy machine much more (cloning a 50k-float vector took 30 ms with
    # two threads and 0.04 ms with one, under load).  Run single-threaded; restore the setting after.
    torch.set_num_threads(1)
    try:
        return _run(plan, fn, seed, alpha, limit, deadline, fail_fast, require, isolate)
    finally:
        torch.set_num_threads(threads)


def _run(plan: Plan, fn: Callable, seed: int, alpha: float, limit: float, deadline: Deadline, fail_fast: bool,
         require: str, isolate: bool) -> Report:
    family = sum(plan.n_laws(c) for c in plan.cases)
    start = time.perf_counter()
    checks: list[Check] = []
    collected: dict[int, Collected] = {}  # case index -> its data, for the diagnosis of a failed case
    timings: dict[str, float] = {}
    calls = 0
    stopped = ""
    notes = []
    runner, why = (open_runner(fn, plan, collect_case, replay_twice, limit, time.monotonic() + deadline.left())
                   if isolate else (None, "the calls ran in the checker's own process (isolate=False)"))
    if runner is None:
        notes.append(why)
    try:
        with (LimitedCaller(fn, limit) if runner is None else nullcontext()) as call:
            for i, case in enumerate(plan.cases):
                if stopped:
                    checks.append(Check("all checks of this case", case.name, "property", NOT_RUN, reason=stopped))
                    continue
                t0 = time.perf_counter()
                data = (collect_case(plan, i, call, seed, deadline.left()) if runner is None
                        else _collect_in_worker(plan, runner, i, seed, deadline))
                calls += data.calls
                collected[i] = data
                found = ([data.failure] if data.failure is not None
                         else plan.analyse(case, data, np.random.default_rng(case_seed(seed, i, 2))))
                checks.extend(found)
                if plan.n_laws(case) and not any(c.kind == "law" for c in found):
                    checks.append(Check("statistical tests", case.name, "law", NOT_RUN,
                                        reason="not run: the function failed a property check in this case"))
                timings[case.name] = time.perf_counter() - t0
                if (runner.dead if runner is not None else call.hung):
                    stopped = "not run: an earlier call ran past the per-call time limit or crashed"
                elif deadline.expired():
                    stopped = "not run: the time budget is spent"
                elif fail_fast and _already_failed(checks, alpha, family, require):
                    stopped = "not run (fail_fast): the check has already failed"
            checks = _precision_hints(plan, _diagnoses(plan, judge_family(checks, alpha, family), collected))
            if not stopped and not any(c.failed for c in checks):
                checks.append(_reproducibility(plan, call, runner, seed))
    finally:
        if runner is not None:
            runner.close()
    return Report(plan.subject, getattr(fn, "__qualname__", repr(fn)), seed, float(alpha), tuple(checks), calls,
                  time.perf_counter() - start, timings, family, require, tuple(notes))


def _collect_in_worker(plan: Plan, runner, index: int, seed: int, deadline: Deadline) -> Collected:
    case = plan.cases[index]
    try:
        return runner.run(("case", index, seed, deadline.left()))
    except CallFailed as err:
        i = max(runner.call_index, 1)
        if err.kind == "budget":
            return Collected(None, None, i, too_slow(case.name, i - 1, deadline.seconds, case.n))
        drafts = plan.draws(case, torch.Generator().manual_seed(case_seed(seed, index, 0)))
        where = f"call {i} ({plan.where(drafts, i - 1)})"
        return Collected(None, None, i, call_failure(case.name, err, where, i, case.n))


def _already_failed(checks: list[Check], alpha: float, family: int, require: str) -> bool:
    """Has the verdict ``require`` names failed already, whatever the tests not yet run give?"""
    judged = judge_family(checks, alpha, family)
    return any(c.failed and (require == "standard" or c.kind == "property" or c.scope == "lossless")
               for c in judged)


def _diagnoses(plan: Plan, checks: list[Check], collected: dict[int, Collected]) -> list[Check]:
    """The failed law checks of a case get the hint its data point to (:mod:`specbook.grading.diagnose`), if any."""
    hints = {}
    for i, data in collected.items():
        name = plan.cases[i].name
        if plan.diagnose and data.failure is None and any(c.failed and c.kind == "law" and c.case == name for c in checks):
            hints[name] = plan.diagnose(plan.cases[i], data)
    return [replace(c, hint=hints[c.case]) if c.failed and c.kind == "law" and hints.get(c.case) else c for c in checks]


def _precision_hints(plan: Plan, checks: list[Check]) -> list[Check]:
    """If every failure is a law test in a case whose residual is below float32's resolution, say so."""
    failed = [c for c in checks if c.failed]
    mass = {c.name: c.residual_mass for c in plan.cases}
    if not failed or any(c.kind != "law" or not 0 < mass.get(c.case, 1.0) < FLOAT32_EPS for c in failed):
        return checks
    return [replace(c, hint=HINT_FLOAT32.format(mass=mass[c.case])) if c.failed else c for c in checks]


def _reproducibility(plan: Plan, call, runner, seed: int) -> Check:
    """Advice only: the same generator state should give the same outputs."""
    name = "reproducible from `generator`"
    try:
        result = replay_twice(plan, call, seed) if runner is None else runner.run(("replay", seed))
    except CallFailed as err:
        result = ("failed", err.message)
    if result[0] == "failed":
        return Check(name, "replay", "advice", WARN, reason=f"could not replay: {result[1]}")
    if result[1] == result[2]:
        return Check(name, "replay", "advice", PASS, reason="the same generator state gave the same outputs")
    return Check(name, "replay", "advice", WARN,
                 reason="two runs from the same generator state gave different outputs, so the function draws "
                        "randomness from elsewhere (the global torch RNG, random, numpy). The statistics above are "
                        "still valid, but pass generator=generator to torch.rand / torch.multinomial so that runs "
                        "can be replayed.")

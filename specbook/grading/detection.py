"""How good is the checker?  Calibration under the null, power against the bug catalogue.

Three measurements, all printed by ``python -m specbook.grading``:

* **null simulation**: the checker's whole statistical family evaluated on data
  drawn from the exact lossless law (vectorised: the drafts as the checker draws
  them, the outputs by the modified rejection sampler vectorised over all
  calls at once, in numpy, independently of the library's verifier), many
  replicates: the fraction of reports that fail each verdict estimates its
  family-wise false-alarm rate, which Holm bounds by alpha = 1e-3;
* **correct implementations** (``catalogue.CORRECT_*``, and the lossless but
  non-standard ``catalogue.LOSSLESS_*``) checked over many seeds, both verdicts;
* **broken implementations** (``catalogue.BROKEN_*``) checked over many seeds,
  with a predicted power from a noncentral chi-square power calculation
  (Cohen 1988, ch. 7): each test's noncentrality is estimated from a full run as
  lambda = max(X^2 - dof, 0) and scaled linearly with the sample size.  The
  *margin* is default sample size / sample size needed for power 0.99.
"""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import stats as _sps

from ..laws import conditional_emission_law
from ..progress import progress_bar
from .engine import Collected, Plan, case_seed
from .report import Check, Report, judge_family

TARGET_POWER = 0.99


# --------------------------------------------------------------------------- power from a report

def _component_power(ev: tuple, scale: float, level: float) -> float:
    if ev[0] == "rare":
        _, k, n, planned = ev
        return 0.0 if k == 0 else 1.0 - (1.0 - k / n) ** (scale * planned)
    _, stat, dof, split = ev
    if dof < 1:
        return 0.0
    lam = max(stat - dof, 0.0) * scale
    crit = _sps.chi2.isf(level / split, dof)
    return float(_sps.ncx2.sf(crit, dof, lam)) if lam > 0 else float(_sps.chi2.sf(crit, dof))


def predicted_power(report: Report, scale: float = 1.0) -> float:
    """A lower bound on P(report fails) for the implementation that produced ``report``.

    The report fails whenever any single test falls below alpha / m (Holm's first step), so the
    best single test's power at that level bounds the family's detection probability from below.
    """
    level = report.alpha / max(report.family_size, 1)
    return max((_component_power(ev, scale, level) for c in report.checks for ev in c.evidence), default=0.0)


def needed_scale(report: Report, power: float = TARGET_POWER) -> float:
    """The smallest factor on every sample size at which :func:`predicted_power` reaches ``power``."""
    if predicted_power(report, 1e3) < power:
        return float("inf")
    lo, hi = 1e-4, 1e3
    for _ in range(60):
        mid = (lo * hi) ** 0.5
        lo, hi = (lo, mid) if predicted_power(report, mid) >= power else (mid, hi)
    return hi


# --------------------------------------------------------------------------- null simulation

def _inverse_cdf(rows: np.ndarray, u: np.ndarray) -> np.ndarray:
    """One draw per row of the unnormalised laws ``rows`` (n, V) from uniforms ``u`` (n,)."""
    cdf = rows.cumsum(1)  # (n, V)
    return (cdf <= (u * cdf[:, -1])[:, None]).sum(1)  # first index whose CDF exceeds u * total


def _null_token(case, rng: np.random.Generator) -> Collected:
    p, q = case.target_probs.double(), case.draft_probs.double()
    V = p.shape[0]
    if case.drafts == "sampled":
        drafts = rng.choice(V, size=case.n, p=q.numpy() / q.numpy().sum())  # (n,)
    else:
        support = np.flatnonzero(q.numpy() > 0)
        drafts = support[np.arange(case.n) % support.size]
    cond = np.stack([conditional_emission_law(p, q, x).numpy() if q[x] > 0 else p.numpy() for x in range(V)])  # (V, V)
    out = _inverse_cdf(cond[drafts], rng.random(case.n))  # (n,)
    return Collected(drafts, out, case.n)


def _null_chain(case, rng: np.random.Generator) -> Collected:
    """The modified rejection sampler run on all n calls at once (Leviathan et al. 2023, Algorithm 1)."""
    p, q = case.target_probs.double().numpy(), case.draft_probs.double().numpy()
    K, V = q.shape
    if case.draft_tokens is not None:
        drafts = np.tile(np.asarray(case.draft_tokens), (case.n, 1))  # (n, K)
    else:
        drafts = np.stack([rng.choice(V, size=case.n, p=q[j] / q[j].sum()) for j in range(K)], 1)  # (n, K)
    rows = np.arange(K)
    accept = np.where(q > 0, np.minimum(1.0, p[:K] / np.where(q > 0, q, 1.0)), (p[:K] > 0) * 1.0)  # (K, V)
    kept = rng.random((case.n, K)) < accept[rows, drafts]  # (n, K)
    m = np.cumprod(kept, 1).sum(1)  # (n,)
    last_law = np.vstack([np.clip(p[:K] - q, 0, None), p[K:]])  # (K+1, V): residuals, then the bonus row
    last = _inverse_cdf(last_law[m], rng.random(case.n))  # (n,)
    blocks = np.where(np.arange(K + 1) < m[:, None], np.pad(drafts, ((0, 0), (0, 1))), -1)  # (n, K+1)
    blocks[np.arange(case.n), m] = last
    return Collected(drafts, (blocks, m + 1), case.n)


def null_report(plan: Plan, seed: int, alpha: float = 1e-3) -> Report:
    """The report the checker would give an ideal lossless sampler, with all calls done in one batch."""
    rng = np.random.default_rng(case_seed(seed, 7, 3))
    checks: list[Check] = []
    simulate = _null_token if plan.subject == "token rule" else _null_chain
    for case in plan.cases:
        if plan.n_laws(case):
            checks.extend(plan.analyse(case, simulate(case, rng), rng))
    family = sum(plan.n_laws(c) for c in plan.cases)
    return Report(plan.subject, "exact law (simulated)", seed, alpha, tuple(judge_family(checks, alpha, family)),
                  0, 0.0, {}, family)


def null_simulation(plan: Plan, reps: int, alpha: float = 1e-3, progress: bool = True) -> dict:
    """How many of ``reps`` simulated null reports fail (each verdict), and the rejections at larger levels.

    ``progress``: a bar on a terminal (``SPECBOOK_PROGRESS=0`` turns it off everywhere)."""
    minp, fails, lossless_fails = [], 0, 0
    family = sum(plan.n_laws(c) for c in plan.cases)
    t0 = time.perf_counter()
    for r in progress_bar(range(reps), disable=not progress, desc="null simulation", unit="rep"):
        rep = null_report(plan, r, alpha)
        fails += not rep.standard
        lossless_fails += not rep.lossless
        ps = [c.pvalue for c in rep.checks if c.kind == "law" and c.pvalue is not None]
        minp.append(min(ps) * family)  # Bonferroni-adjusted smallest p: the report fails iff this <= alpha
    minp = np.asarray(minp)
    return {"reps": reps, "failed": fails, "failed_lossless": lossless_fails, "alpha": alpha, "family": family,
            "at_0.01": float(np.mean(minp <= 0.01)), "at_0.05": float(np.mean(minp <= 0.05)),
            "at_0.1": float(np.mean(minp <= 0.1)), "seconds": time.perf_counter() - t0}


# --------------------------------------------------------------------------- running the catalogue

@dataclass
class Row:
    name: str
    description: str
    failed: int  # seeds at which the standard verdict failed
    seeds: int
    seconds: float  # mean wall time of one check
    caught_by: str = ""  # most frequent first failing check
    power: float = float("nan")  # predicted (median over full runs)
    margin: float = float("nan")  # default n / n needed for power 0.99 (worst over full runs)
    failed_lossless: int = 0  # seeds at which the lossless verdict failed
    lossless_power: float = float("nan")  # predicted from the lossless tests and the properties alone
    failed_seeds: list[int] = field(default_factory=list)  # the seeds counted in ``failed``
    failed_lossless_seeds: list[int] = field(default_factory=list)  # the seeds counted in ``failed_lossless``
    first_failures: dict[int, str] = field(default_factory=dict)  # seed -> its first failing check ("case: name")
    lossless_margin: float = float("nan")  # as ``margin``, from the lossless tests and the properties alone
    first_hints: dict[int, str] = field(default_factory=dict)  # seed -> the hint of its first failing check


def lossless_only(report: Report) -> Report:
    """The report restricted to what the lossless verdict looks at (properties and lossless-scope laws)."""
    kept = tuple(c for c in report.checks if c.kind != "law" or c.scope == "lossless")
    return replace(report, checks=kept)


def run_entries(checker, entries, seeds: range, full_seeds: int = 0, fail_fast: bool = True) -> list[Row]:
    """Check every entry at every seed, both verdicts; ``full_seeds`` extra full runs feed the power calculation.

    The runs use ``require="lossless"``: with ``fail_fast`` a run stops once the lossless verdict has
    failed (then the standard one has too) and otherwise runs to the end, so both verdicts are exact.
    """
    rows = []
    for e in entries:
        failed, lossy, secs, first, hints = [], [], [], {}, {}
        for s in seeds:
            t0 = time.perf_counter()
            rep = checker(e.fn, seed=s, fail_fast=fail_fast, require="lossless")
            secs.append(time.perf_counter() - t0)
            if not rep.standard:
                failed.append(s)
            if not rep.lossless:
                lossy.append(s)
            if rep.failures:
                f = rep.failures[0]
                first[s], hints[s] = f"{f.case}: {f.name}", f.hint
        print(f"  {e.name}: standard failed {len(failed)}/{len(seeds)}, lossless failed {len(lossy)}/{len(seeds)}, "
              f"{statistics.fmean(secs):.2f} s/check", file=sys.stderr, flush=True)
        caught = list(first.values())
        row = Row(e.name, e.description, len(failed), len(seeds), statistics.fmean(secs),
                  max(set(caught), key=caught.count) if caught else "", failed_lossless=len(lossy),
                  failed_seeds=failed, failed_lossless_seeds=lossy, first_failures=first, first_hints=hints)
        if full_seeds:
            reps = [checker(e.fn, seed=10_000 + s) for s in range(full_seeds)]
            row.power = statistics.median(predicted_power(r) for r in reps)
            row.margin = min(1.0 / needed_scale(r) for r in reps)
            row.lossless_power = statistics.median(predicted_power(lossless_only(r)) for r in reps)
            row.lossless_margin = min(1.0 / needed_scale(lossless_only(r)) for r in reps)
        rows.append(row)
    return rows

"""The two statistical tests the checker uses, each returning a :class:`Check` with a readable reason.

* :func:`law_check`: Pearson chi-square goodness of fit of raw counts against an
  exact law (:func:`specbook.stats.chisquare_gof`, bins with expected count below
  ``MIN_EXPECTED`` pooled; an outcome of null probability 0 gives p = 0).
* :func:`acceptance_check`: for each draft token x, an exact two-sided binomial
  test of "kept k of n times" against the acceptance probability min(1, p(x)/q(x));
  the per-token p-values are combined by Bonferroni (p = m * min p), which stays
  exact and lets the message name the token whose acceptance is off.

The verdicts are left "not run": the report judges all p-values together (Holm).
"""
from __future__ import annotations

import numpy as np
from scipy import stats as _sps

from ..stats import chisquare_gof
from .report import Check

# Larger than Cochran's 5: the family is judged at levels near 1e-5, far in the tail,
# where the chi-square approximation needs more expected counts per bin to stay honest.
MIN_EXPECTED = 10.0


def _pct(x: float) -> str:
    return f"{100 * x:.3g}%"


def law_check(name: str, case: str, counts, probs, labels: list[str], *, what: str, hint: str,
              scope: str = "standard") -> Check:
    """Chi-square test of ``counts`` (M,) against ``probs`` (M,); ``labels`` name the outcomes.

    ``what`` says in words which law is expected ("the target p", "the residual ...").
    """
    counts = np.asarray(counts, dtype=np.int64)
    probs = np.asarray(probs, dtype=np.float64)
    n = int(counts.sum())
    if n == 0:
        return Check(name, case, "law", pvalue=1.0, n=0, reason=f"no observations to compare with {what}", hint=hint,
                     scope=scope)
    res = chisquare_gof(counts, probs / probs.sum(), min_expected=MIN_EXPECTED)
    freq = counts / n
    if res.impossible:
        bad = [i for i in np.flatnonzero((probs == 0) & (counts > 0))][:3]
        seen = ", ".join(f"{labels[i]} ({counts[i]} times)" for i in bad)
        reason = f"emitted outcomes that have probability 0 under {what}: {seen}"
    else:
        # The outcomes that contribute most to the statistic, with observed vs expected frequency.
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(probs > 0, (counts - n * probs) / np.sqrt(n * probs), 0.0)
        worst = np.argsort(-np.abs(z), kind="stable")[:3]
        parts = [f"{labels[i]}: {_pct(freq[i])} observed vs {_pct(probs[i])} expected" for i in worst if probs[i] > 0]
        reason = f"compared {n} outcomes with {what}; largest deviations: " + "; ".join(parts)
    evidence = (("rare", res.impossible, n, n),) if res.impossible else (("chi2", res.statistic, res.dof, 1),)
    return Check(name, case, "law", statistic=res.statistic, dof=res.dof, pvalue=res.pvalue, n=n,
                 reason=reason, hint=hint, evidence=evidence, scope=scope)


def _binom_p(k: int, n: int, a: float) -> float:
    if a <= 0:
        return 0.0 if k > 0 else 1.0
    if a >= 1:
        return 0.0 if k < n else 1.0
    return float(_sps.binomtest(k, n, a).pvalue)


def acceptance_check(name: str, case: str, kept: dict, tried: dict, accept_prob: dict, *,
                     where: str = "", hint: str) -> Check:
    """Binomial tests of how often each draft token is kept.

    kept[x], tried[x]: times draft x was kept / offered;  accept_prob[x]: min(1, p(x)/q(x)).
    ``where`` qualifies the tokens in messages (e.g. " at position 2").
    """
    xs = [x for x in tried if tried[x] > 0]
    n = int(sum(tried[x] for x in xs))
    if not xs:
        return Check(name, case, "law", pvalue=1.0, n=0, reason="no draft reached this test", hint=hint)
    pv = {x: _binom_p(int(kept[x]), int(tried[x]), float(accept_prob[x])) for x in xs}
    p = min(1.0, len(xs) * min(pv.values()))
    order = sorted(xs, key=lambda x: pv[x])
    shown = [x for x in order if pv[x] < 0.01][:3] or order[:1]
    parts = [f"draft {x}{where}: kept {kept[x]}/{tried[x]} = {_pct(kept[x] / tried[x])}, "
             f"expected min(1, p/q) = {_pct(accept_prob[x])}" for x in shown]
    evidence, stat, dof = [], 0.0, 0
    for x in xs:
        k, m, a = int(kept[x]), int(tried[x]), float(accept_prob[x])
        if 0 < a < 1:
            z2 = (k - m * a) ** 2 / (m * a * (1 - a))
            evidence.append(("chi2", z2, 1, len(xs)))
            stat, dof = stat + z2, dof + 1
        else:  # a = 0 or 1: a single contrary outcome refutes the rule
            evidence.append(("rare", k if a == 0 else m - k, m, m))
    return Check(name, case, "law", statistic=stat, dof=dof, pvalue=p, n=n,
                 reason="; ".join(parts), hint=hint, evidence=tuple(evidence))

"""Goodness-of-fit machinery: chi-square and G tests on raw counts against an exact law.

The statistical suite asks one question over and over: "are these sampled
tokens drawn from exactly this distribution?"  This module answers it the way a
test that can actually fail must:

* on **raw counts**, never proportions.  Dividing counts by N before a
  chi-square test shrinks the statistic by a factor N, and the test then
  passes almost anything (the "broken twin" in ``tests/test_stats.py``).
  Non-integer counts are refused here for that reason;
* with **pooling** of bins whose expected count is below ``min_expected``
  (5 by default; Cochran 1954), decided from the null law alone, so the binning
  never peeks at the data;
* with **impossible outcomes** (observations in a bin of null probability 0)
  reported as a p-value of exactly 0: one such token refutes the law outright;
* with **Holm's step-down** correction across a family of tests (Holm 1979),
  so a suite of k tests has a stated family-wise false-alarm rate alpha;
* with a **power** calculation from the noncentral chi-square approximation
  (Cohen 1988, Sec. 7; noncentrality lambda = n * sum (a - p)^2 / p over pooled
  bins), so a suite can state which deviations it would catch.

Shape legend: V support size (bins before pooling), M pooled bins.

Every argument is checked before any work; bools, strings and None are refused
wherever a number is expected (numpy would read True as 1 and "5" as 5.0), with a
``ValueError`` naming the argument and the value.
"""
from __future__ import annotations

import math
import numbers
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as _sps

__all__ = [
    "GofResult", "FamilyResult", "pool_bins", "chisquare_gof", "gtest_gof", "holm",
    "run_family", "chisquare_power", "sample_size_for_power", "counts_of",
]


@dataclass(frozen=True)
class GofResult:
    """Outcome of one goodness-of-fit test.

    statistic: Pearson X^2 or G on the pooled bins (``inf`` if impossible > 0)
    dof:       pooled bins - 1 (0 for a degenerate, single-bin test)
    pvalue:    upper tail of chi2(dof); exactly 0 if impossible > 0, 1 if degenerate
    n:         total observations
    bins:      pooled bins the statistic was computed on (M)
    method:    "chi2" or "g"
    impossible: observations that fell in bins whose null probability is 0
    """

    statistic: float
    dof: int
    pvalue: float
    n: int
    bins: int
    method: str
    impossible: int = 0


# counts_of refuses supports larger than this (the histogram alone would take 800 MB).
MAX_SUPPORT = 10**8


# --------------------------------------------------------------------------- validation

def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def _reals(value, name: str) -> np.ndarray:
    """``value`` as a float64 array; bools, strings, None and complex numbers are refused."""
    bad = ValueError(f"{name} must be real numbers, got {value!r}")
    if hasattr(value, "detach"):  # torch.Tensor, without importing torch here
        value = value.detach().cpu().numpy()
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise bad from None
    if raw.dtype.kind not in "iufO" or (raw.dtype.kind == "O" and not all(_is_real(x) for x in raw.reshape(-1))):
        raise bad
    try:
        return raw.astype(np.float64)
    except OverflowError:
        raise ValueError(f"{name} holds a number too large for a float, got {value!r}") from None


def _scalar(value, name: str) -> float:
    if not _is_real(value):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(value)


def _probs(probs, name: str = "probs") -> np.ndarray:
    arr = _reals(probs, name)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"{name} must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        bad = arr[~(np.isfinite(arr) & (arr >= 0))][0]
        raise ValueError(f"{name} must be finite and non-negative, got an entry {bad!r}")
    total = math.fsum(arr.tolist())
    if abs(total - 1.0) > 1e-6:
        raise ValueError(f"{name} must sum to 1 (within 1e-6), got sum {total!r}")
    return arr / total  # (V,)


def _counts(counts, size: int | None = None) -> np.ndarray:
    arr = _reals(counts, "counts")
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(f"counts must be a non-empty 1-D array, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0) or np.any(arr != np.floor(arr)):
        bad = arr[~(np.isfinite(arr) & (arr >= 0) & (arr == np.floor(arr)))][0]
        raise ValueError(
            f"counts must be raw non-negative integer counts (not proportions), got an entry {bad!r}")
    if size is not None and arr.size != size:
        raise ValueError(f"counts and probs must have the same length, got {arr.size} and {size}")
    if arr.sum() == 0:
        raise ValueError("counts must contain at least one observation, got all zeros")
    return arr  # (V,)


def _min_expected(value) -> float:
    v = _scalar(value, "min_expected")
    if not (math.isfinite(v) and v >= 0):
        raise ValueError(f"min_expected must be finite and >= 0, got {value!r}")
    return v


def _level(alpha, name: str = "alpha") -> float:
    a = _scalar(alpha, name)
    if not (0.0 < a < 1.0):
        raise ValueError(f"{name} must lie in (0, 1), got {alpha!r}")
    return a


# --------------------------------------------------------------------------- pooling

def _groups(expected: np.ndarray, min_expected: float) -> np.ndarray:
    """Pooled-bin label for every bin (-1 for bins of expected count 0).

    Depends on the expected counts only, never on the data.  Bins with expected
    >= min_expected keep their own label (in index order); all smaller bins go
    into one trailing "rest" bin, and if the rest is still below min_expected
    the smallest large bins join it one by one until it is not (or nothing is left).
    """
    labels = np.full(expected.shape, -1, dtype=np.int64)  # (V,)
    live = np.flatnonzero(expected > 0)
    small = live[expected[live] < min_expected]
    large = live[expected[live] >= min_expected]
    rest = list(small)
    rest_total = float(expected[small].sum())
    large = large[np.argsort(expected[large], kind="stable")]  # ascending: smallest first
    k = 0
    while rest and rest_total < min_expected and k < len(large):
        rest.append(large[k])
        rest_total += float(expected[large[k]])
        k += 1
    kept = np.sort(large[k:])
    labels[kept] = np.arange(len(kept))
    if rest:
        labels[np.asarray(rest, dtype=np.int64)] = len(kept)
    return labels


def _pool(values: np.ndarray, labels: np.ndarray) -> np.ndarray:
    live = labels >= 0
    return np.bincount(labels[live], weights=values[live], minlength=int(labels.max()) + 1)  # (M,)


def pool_bins(counts, probs, min_expected: float = 5.0) -> tuple[np.ndarray, np.ndarray]:
    """Pooled ``(observed, expected)`` counts, each of shape (M,).

    Bins with null probability exactly 0 are left out (their observations are
    "impossible" and handled by the tests).  Expected counts are n * probs with n
    the total of ``counts``.  See :func:`_groups` for the pooling rule.
    """
    probs = _probs(probs)
    counts = _counts(counts, probs.size)
    expected = counts.sum() * probs  # (V,)
    labels = _groups(expected, _min_expected(min_expected))
    return _pool(counts, labels), _pool(expected, labels)


def _gof(counts, probs, min_expected: float, method: str) -> GofResult:
    probs = _probs(probs)
    counts = _counts(counts, probs.size)
    n = int(counts.sum())
    impossible = int(counts[probs == 0].sum())
    observed, expected = pool_bins(counts, probs, min_expected)
    bins = observed.size
    if impossible > 0:
        # o^2 / 0 and o log(o / 0) are both infinite: the law is refuted outright.
        return GofResult(math.inf, max(bins - 1, 0), 0.0, n, bins, method, impossible)
    if bins <= 1:
        return GofResult(0.0, 0, 1.0, n, bins, method, 0)
    if method == "chi2":
        statistic = float(np.sum((observed - expected) ** 2 / expected))
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            terms = np.where(observed > 0, observed * np.log(observed / expected), 0.0)
        statistic = max(0.0, 2.0 * float(terms.sum()))
    dof = bins - 1
    return GofResult(statistic, dof, float(_sps.chi2.sf(statistic, dof)), n, bins, method, 0)


def chisquare_gof(counts, probs, *, min_expected: float = 5.0) -> GofResult:
    """Pearson's chi-square goodness-of-fit test of raw ``counts`` (V,) against ``probs`` (V,).

    X^2 = sum (O - E)^2 / E over pooled bins, referred to chi2(M - 1).
    Agrees exactly with ``scipy.stats.chisquare(counts, n * probs)`` when no
    pooling happens.
    """
    return _gof(counts, probs, min_expected, "chi2")


def gtest_gof(counts, probs, *, min_expected: float = 5.0) -> GofResult:
    """Likelihood-ratio (G) goodness-of-fit test: G = 2 sum O ln(O / E), chi2(M - 1).

    Same pooling and impossible-outcome rule as :func:`chisquare_gof`.
    """
    return _gof(counts, probs, min_expected, "g")


# --------------------------------------------------------------------------- multiple testing

def holm(pvalues, alpha) -> list[bool]:
    """Holm-Bonferroni step-down: True where the hypothesis is rejected.

    Sort p-values ascending; reject p_(i) while p_(i) <= alpha / (k - i) (i from 0),
    and stop at the first one that is not.  Controls the family-wise error rate at
    alpha for any dependence between the tests (Holm 1979).
    """
    level = _level(alpha)
    p = _reals(pvalues, "pvalues").reshape(-1)
    if np.any(~((p >= 0) & (p <= 1))):
        raise ValueError(f"pvalues must lie in [0, 1], got {p[~((p >= 0) & (p <= 1))][0]!r}")
    k = p.size
    rejected = [False] * k
    for rank, idx in enumerate(np.argsort(p, kind="stable")):
        if p[idx] > level / (k - rank):
            break
        rejected[int(idx)] = True
    return rejected


@dataclass(frozen=True)
class FamilyResult:
    """A family of tests judged together under Holm at family-wise level alpha.

    pvalues:  name -> p-value, as given;  rejected: names rejected, in input order.
    ``passed`` is True when nothing was rejected.
    """

    alpha: float
    pvalues: dict = field(hash=False)
    rejected: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return not self.rejected

    def __str__(self) -> str:
        lines = [f"{len(self.pvalues)} tests, Holm family-wise alpha = {self.alpha:g}: "
                 + ("all pass" if self.passed else f"{len(self.rejected)} rejected")]
        for name, p in self.pvalues.items():
            lines.append(f"  {'REJECT' if name in self.rejected else 'ok    '} p = {p:.3g}  {name}")
        return "\n".join(lines)


def run_family(pvalues: dict[str, float], alpha) -> FamilyResult:
    """Apply :func:`holm` to named p-values; see :class:`FamilyResult`."""
    if not isinstance(pvalues, Mapping):
        raise ValueError(f"pvalues must be a dict of name -> p-value, got {type(pvalues).__name__}")
    names = list(pvalues)
    flags = holm([pvalues[k] for k in names], alpha)
    return FamilyResult(float(alpha), dict(pvalues), tuple(k for k, r in zip(names, flags) if r))


# --------------------------------------------------------------------------- power

def chisquare_power(null_probs, alt_probs, n, *, alpha, min_expected: float = 5.0) -> float:
    """Probability that :func:`chisquare_gof` at level alpha rejects ``null_probs``
    when ``n`` samples are really drawn from ``alt_probs`` (both (V,)).

    Pooling is the test's own (from n * null_probs).  Off the impossible bins the
    statistic is approximated by a noncentral chi2(M - 1, lambda) with
    lambda = n * sum_M (a - p)^2 / p, a being the alternative conditioned on
    possible bins.  Mass z that the alternative puts on null-impossible bins adds
    certain rejection whenever one such sample appears:

        power = 1 - (1 - z)^n * (1 - P[ncx2 >= critical value])
    """
    level = _level(alpha)
    null = _probs(null_probs, "null_probs")
    alt = _probs(alt_probs, "alt_probs")
    if alt.size != null.size:
        raise ValueError(f"null_probs and alt_probs must have the same length, got {null.size} and {alt.size}")
    if isinstance(n, bool) or not (isinstance(n, (int, np.integer)) and n >= 1):
        raise ValueError(f"n must be a positive integer, got {n!r}")
    z = float(alt[null == 0].sum())
    p_no_impossible = (1.0 - z) ** n
    labels = _groups(n * null, _min_expected(min_expected))
    bins = int(labels.max()) + 1
    if bins <= 1 or z >= 1.0:
        return 1.0 - p_no_impossible
    pooled_null = _pool(null, labels)
    pooled_alt = _pool(alt, labels) / (1.0 - z)
    nc = n * float(np.sum((pooled_alt - pooled_null) ** 2 / pooled_null))
    dof = bins - 1
    crit = _sps.chi2.isf(level, dof)
    reject = _sps.chi2.sf(crit, dof) if nc == 0 else _sps.ncx2.sf(crit, dof, nc)
    return float(1.0 - p_no_impossible * (1.0 - reject))


def sample_size_for_power(null_probs, alt_probs, *, alpha, power, min_expected: float = 5.0) -> int:
    """Smallest n at which :func:`chisquare_power` reaches ``power``.

    Found by doubling then bisection.  Pooling changes with n, so power is only
    nearly monotone in n; the n returned reaches the target and n - 1 does not.
    Raises ValueError when the alternative equals the null (no n suffices).
    """
    level = _level(alpha)
    target = _level(power, "power")
    if target <= level:
        raise ValueError(f"power must exceed alpha ({level!r}), got {power!r}")
    null = _probs(null_probs, "null_probs")
    alt = _probs(alt_probs, "alt_probs")
    if alt.size == null.size and np.array_equal(alt, null):
        raise ValueError("alt_probs equals null_probs: no sample size gives power above alpha")

    def pw(m: int) -> float:
        return chisquare_power(null, alt, m, alpha=level, min_expected=min_expected)

    hi = 1
    while pw(hi) < target:
        hi *= 2
        if hi > 2**62:
            raise ValueError("alt_probs is too close to null_probs: power not reached below 2**62 samples")
    lo = hi // 2  # pw(lo) < target (or lo == 0)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if pw(mid) >= target:
            hi = mid
        else:
            lo = mid
    return int(hi)


# --------------------------------------------------------------------------- counting

def counts_of(samples, support_size: int) -> np.ndarray:
    """Histogram of integer samples over 0..support_size-1: int64 array (V,).

    Accepts a torch tensor (any device), a numpy array or a list, of any shape.
    """
    if isinstance(support_size, bool) or not (isinstance(support_size, (int, np.integer))
                                              and 1 <= support_size <= MAX_SUPPORT):
        raise ValueError(f"support_size must be an integer in [1, {MAX_SUPPORT}], got {support_size!r}")
    if hasattr(samples, "detach"):  # torch.Tensor, without importing torch here
        samples = samples.detach().cpu().numpy()
    try:
        arr = np.asarray(samples).reshape(-1)
    except (TypeError, ValueError):
        raise ValueError(f"samples must be integer token ids, got {samples!r}") from None
    if arr.size and not np.issubdtype(arr.dtype, np.integer):
        raise ValueError(f"samples must be integer token ids, got dtype {arr.dtype}")
    if arr.size and (arr.min() < 0 or arr.max() >= support_size):
        bad = arr[(arr < 0) | (arr >= support_size)][0]
        raise ValueError(f"samples must lie in [0, {support_size}), got {bad.item()!r}")
    return np.bincount(arr.astype(np.int64), minlength=support_size).astype(np.int64)

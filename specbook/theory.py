"""Back-of-the-envelope theory of speculative decoding: yield, speedup, break-even, best gamma.

Everything here is closed-form arithmetic on floats (numpy broadcasting where it
is natural), so lessons can tabulate, plot and check the numbers they quote.  Where
the verify cost v and the draft cost c come from on real hardware (the roofline,
hardware presets) is :mod:`specbook.roofline`.

Symbols follow Leviathan, Kalman & Matias, "Fast Inference from Transformers
via Speculative Decoding" (ICML 2023):

* ``alpha``  acceptance rate: probability that one draft token survives
  verification, assumed i.i.d. across positions (the paper's simplifying
  assumption behind its Theorem 3.8 / Eq. 1);
* ``gamma``  draft length: tokens proposed per verification pass;
* ``c``      cost of one draft step as a fraction of one target step
  (Section 3.4, "cost coefficient");
* ``verify_cost``  v = cost(target pass over gamma+1 positions) / cost(target
  pass over 1 position).  The paper takes v = 1 (memory-bound decode: the extra
  positions ride along for free).  On real hardware v is a measurement, and it
  may be given as a callable ``gamma -> v`` (a measured verify-cost curve).

Shape legend: A number of alphas, G number of gammas.

Scalars in give a Python ``float`` out; any array input gives an ``np.ndarray``.
Bad input (alpha outside [0, 1], gamma not an int >= 0, c < 0, verify_cost <= 0,
NaN or inf; a bool, string, None or complex number anywhere) raises ``ValueError``
naming the argument and the bad value.  A count (gamma, max_gamma) is an ``int``
(Python or numpy, or an array of them): a float is refused even when it looks
whole, since above 2**53 every float does (``1e19`` names no count).  Counts are
computed as floats, so a huge int gamma gives the limit, not an integer
overflow.  No result is NaN or inf for legal input (a result that would overflow
raises), and E[tokens] stays within [1, min(gamma + 1, 1 / (1 - alpha))].
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Union

import numpy as np

VerifyCost = Union[float, Callable[[int], float]]

# optimal_gamma tries every gamma in 1..max_gamma; beyond this the search would take too long.
MAX_GAMMA_SEARCH = 100_000

__all__ = [
    "expected_tokens", "expected_tokens_limit", "speedup", "break_even_alpha",
    "break_even_cost", "optimal_gamma", "relative_gain", "yield_table",
]


# --------------------------------------------------------------------------- validation

def _first_bad(arr: np.ndarray, bad: np.ndarray):
    """The first offending element, as a plain Python number for the message."""
    return arr.reshape(-1)[np.flatnonzero(bad.reshape(-1))[0]].item()


def _is_real(x) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, (bool, np.bool_))


def _floats(value, name: str) -> np.ndarray:
    """``value`` as a float64 array; bools, strings, None and complex numbers are refused
    (numpy would silently read True as 1.0, "0.5" as 0.5 and None as NaN)."""
    bad = ValueError(f"{name} must be a real number or array of them, got {value!r}")
    try:
        raw = np.asarray(value)
    except (TypeError, ValueError, OverflowError):
        raise bad from None
    if raw.dtype.kind == "O" and not all(_is_real(x) for x in raw.reshape(-1)):
        raise bad
    if raw.dtype.kind not in "iufO":
        raise bad
    try:
        return raw.astype(np.float64)
    except OverflowError:  # a Python int beyond the float range
        raise ValueError(f"{name} is too large to be a float, got {value!r}") from None


def _alpha(value, name: str = "alpha") -> np.ndarray:
    arr = _floats(value, name)
    bad = ~((arr >= 0.0) & (arr <= 1.0))  # NaN compares False, so it is caught here too
    if bad.any():
        raise ValueError(f"{name} must lie in [0, 1], got {_first_bad(arr, bad)!r}")
    return arr


def _is_int(x) -> bool:
    return isinstance(x, numbers.Integral) and not isinstance(x, (bool, np.bool_))


def _gamma(value, name: str = "gamma") -> np.ndarray:
    """A count: an int >= 0 (or an array of them), returned as float64 (no int64 overflow)."""
    def refuse(bad):
        return ValueError(f"{name} must be an int >= 0 (a count, not a float), got {bad!r}")

    try:
        raw = np.asarray(value, dtype=object)  # each element as given (numpy ones as Python numbers)
    except (TypeError, ValueError):  # ragged nesting
        raise refuse(value) from None
    bad = [x for x in raw.reshape(-1).tolist() if not _is_int(x) or x < 0]
    if bad:
        raise refuse(bad[0] if raw.ndim else value)
    return _floats(value, name)  # an int beyond the float range is refused there, by name


def _nonneg(value, name: str) -> np.ndarray:
    arr = _floats(value, name)
    bad = ~(np.isfinite(arr) & (arr >= 0.0))
    if bad.any():
        raise ValueError(f"{name} must be finite and >= 0, got {_first_bad(arr, bad)!r}")
    return arr


def _positive(value, name: str) -> np.ndarray:
    arr = _floats(value, name)
    bad = ~(np.isfinite(arr) & (arr > 0.0))
    if bad.any():
        raise ValueError(f"{name} must be finite and > 0, got {_first_bad(arr, bad)!r}")
    return arr


def _verify_cost(verify_cost: VerifyCost, gamma: np.ndarray) -> np.ndarray:
    """v at each gamma; a callable is evaluated once per distinct gamma."""
    if callable(verify_cost):
        out = np.empty(gamma.shape, dtype=np.float64)
        for idx, g in np.ndenumerate(gamma):
            v = _positive(verify_cost(int(g)), f"verify_cost({int(g)})")
            if v.ndim != 0:
                raise ValueError(f"verify_cost({int(g)}) must return one number, got shape {v.shape}")
            out[idx] = v
        return out
    return _positive(verify_cost, "verify_cost")


def _finite(arr: np.ndarray, what: str) -> np.ndarray:
    """Refuse a result that overflowed: legal but extreme inputs must not turn into inf."""
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} overflows the float range for these inputs")
    return arr


def _result(arr: np.ndarray, *inputs):
    """Float if every input was a scalar, else an array."""
    if all(np.ndim(x) == 0 for x in inputs):
        return float(arr)
    return np.asarray(arr, dtype=np.float64)


# --------------------------------------------------------------------------- yield and speedup

def expected_tokens(alpha, gamma):
    """Expected tokens produced per verification pass (Leviathan et al. 2023, Eq. 1).

        E[tokens] = (1 - alpha^(gamma+1)) / (1 - alpha)   =  1 + alpha + ... + alpha^gamma

    The ``+1`` in the exponent is the bonus token sampled from the target when all
    gamma drafts are accepted.  At alpha = 1 the limit gamma + 1 is returned exactly;
    near 1 the numerator is computed as ``-expm1((gamma+1) * log1p(alpha-1))`` so
    there is no cancellation.  Always lies in [1, gamma + 1] and never above
    :func:`expected_tokens_limit`, also in floating point.
    """
    return _result(_yield(_alpha(alpha), _gamma(gamma)), alpha, gamma)


def _yield(a: np.ndarray, g: np.ndarray) -> np.ndarray:
    """:func:`expected_tokens` on checked float64 arrays (g a count kept as a float)."""
    a, g = np.broadcast_arrays(a, g)
    with np.errstate(divide="ignore", invalid="ignore"):
        numerator = -np.expm1((g + 1.0) * np.log1p(a - 1.0))  # 1 - alpha^(gamma+1), in [0, 1]: so <= 1/(1 - a)
        out = np.where(a == 1.0, g + 1.0, numerator / (1.0 - a))
    return np.clip(out, 1.0, g + 1.0)  # rounding at gamma = 0 would leave 1 by an ulp either way


def expected_tokens_limit(alpha):
    """Limit of :func:`expected_tokens` as gamma -> infinity: 1 / (1 - alpha).

    The ceiling on yield per pass no matter how far one drafts; ``inf`` at alpha = 1.
    """
    a = _alpha(alpha)
    with np.errstate(divide="ignore"):
        out = np.where(a == 1.0, np.inf, 1.0 / (1.0 - a))
    return _result(out, alpha)


def speedup(alpha, gamma, c, verify_cost: VerifyCost = 1.0):
    """Expected wall-clock speedup over plain decoding (Leviathan et al. 2023, Thm 3.8).

        speedup = E[tokens] / (gamma * c + v)

    The denominator is the cost of one speculation round in units of one ordinary
    target step: gamma draft steps at cost c each plus one verification pass of
    cost v.  The paper's formula is the special case v = 1.  Values below 1 mean
    speculation is *slower* than not speculating (the output is still exact).
    """
    a = _alpha(alpha)
    g = _gamma(gamma)
    cost = _nonneg(c, "c")
    v = _verify_cost(verify_cost, g)
    with np.errstate(over="ignore"):
        out = _finite(_yield(a, g) / (g * cost + v), f"speedup with verify_cost={verify_cost!r}")
    return _result(out, alpha, gamma, c, verify_cost if not callable(verify_cost) else 0.0)


def relative_gain(new, old):
    """Fractional improvement ``new / old - 1`` (0.48 means "48% more")."""
    n = _floats(new, "new")
    o = _positive(old, "old")
    if not np.all(np.isfinite(n)):
        raise ValueError(f"new must be finite, got {new!r}")
    with np.errstate(over="ignore"):
        gain = _finite(n / o - 1.0, f"relative_gain({new!r}, {old!r})")
    return _result(gain, new, old)


def yield_table(alphas, gammas) -> np.ndarray:
    """E[tokens] for every (alpha, gamma) pair: array of shape (A, G)."""
    a = _alpha(np.atleast_1d(alphas), "alphas")
    g = _gamma(np.atleast_1d(gammas), "gammas")
    if a.ndim != 1 or g.ndim != 1:
        raise ValueError(f"alphas and gammas must be 1-D, got shapes {a.shape} and {g.shape}")
    return _yield(a[:, None], g[None, :])  # (A, G)


def break_even_alpha(gamma, c, verify_cost: VerifyCost = 1.0) -> float:
    """Smallest acceptance rate at which speculation stops losing: speedup == 1.

    Solves (1 - alpha^(gamma+1)) / (1 - alpha) = gamma * c + v for alpha in [0, 1]
    by bisection (E[tokens] is strictly increasing in alpha for gamma >= 1).

    Speculation pays exactly when ``alpha > break_even_alpha(...)``, and the two
    edge cases keep that reading:

    * returns ``0.0`` when the round costs no more than one target step
      (gamma * c + v <= 1): every alpha breaks even or wins;
    * returns ``math.inf`` when even alpha = 1 cannot pay for the round
      (gamma * c + v > gamma + 1): no acceptance rate breaks even.
    """
    if np.ndim(c) != 0 or np.ndim(gamma) != 0 or (not callable(verify_cost) and np.ndim(verify_cost) != 0):
        raise ValueError(f"break_even_alpha takes scalar gamma, c and verify_cost, got gamma={gamma!r}, c={c!r}")
    g = int(_gamma(gamma))
    cost = float(_nonneg(c, "c"))
    v = float(_verify_cost(verify_cost, np.asarray(g)))
    target = g * cost + v
    if target <= 1.0:
        return 0.0
    if target > g + 1.0:
        return math.inf
    lo, hi = 0.0, 1.0
    while True:  # bisection to full float precision; E(lo) < target <= E(hi)
        mid = 0.5 * (lo + hi)
        if mid <= lo or mid >= hi:
            return hi
        if float(_yield(np.float64(mid), np.float64(g))) < target:
            lo = mid
        else:
            hi = mid


def break_even_cost(alpha, gamma, verify_cost: VerifyCost = 1.0):
    """Largest draft cost c at which speculation still breaks even: speedup == 1.

        c* = (E[tokens] - v) / gamma

    Speculation pays exactly when ``c < break_even_cost(...)``.  The exact value is
    returned even when it is negative: a negative c* means that even a free draft
    (c = 0) loses, because verification costs more than the expected yield.
    gamma must be >= 1 (with no drafts the draft cost is irrelevant).
    """
    g = _gamma(gamma)
    if np.any(g < 1):
        raise ValueError(f"gamma must be >= 1 for break_even_cost, got {gamma!r}")
    a = _alpha(alpha)
    v = _verify_cost(verify_cost, g)
    out = (_yield(a, g) - v) / g
    return _result(out, alpha, gamma, verify_cost if not callable(verify_cost) else 0.0)


def optimal_gamma(alpha, c, verify_cost: VerifyCost = 1.0, max_gamma: int = 64) -> tuple[int, float]:
    """Draft length in 0..max_gamma that maximises :func:`speedup`.

    Returns ``(best_gamma, best_speedup)``.  gamma = 0 stands for plain decoding,
    whose speedup is 1 by definition, so ``(0, 1.0)`` means "do not speculate".
    ``verify_cost`` may be a callable ``gamma -> v`` (a measured verify-cost curve);
    it is called for gamma = 1..max_gamma.  Ties go to the shorter draft.  With
    alpha = 1 and a cheap draft the speedup keeps rising, so the answer is max_gamma.
    """
    if np.ndim(alpha) != 0 or np.ndim(c) != 0:
        raise ValueError(f"optimal_gamma takes scalar alpha and c, got alpha={alpha!r}, c={c!r}")
    a = float(_alpha(alpha))
    cost = float(_nonneg(c, "c"))
    m = int(_gamma(max_gamma, "max_gamma"))
    if not 1 <= m <= MAX_GAMMA_SEARCH:
        raise ValueError(f"max_gamma must be in [1, {MAX_GAMMA_SEARCH}] (every gamma is tried), got {max_gamma!r}")
    gammas = np.arange(1, m + 1)
    values = np.asarray(speedup(a, gammas, cost, verify_cost))
    best = int(np.argmax(values))  # first maximum: ties go to the shorter draft
    if values[best] > 1.0:
        return int(gammas[best]), float(values[best])
    return 0, 1.0

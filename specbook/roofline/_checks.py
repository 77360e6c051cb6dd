"""The roofline's argument checks: each returns the value as a float or int, or raises
``ValueError`` naming the argument and the value it got (never clamps, never guesses)."""
from __future__ import annotations

import math


def _number(value, name: str, *, zero_ok: bool) -> float:
    """A finite float, > 0 (or >= 0 when ``zero_ok``); bools and strings are refused."""
    bound = ">= 0" if zero_ok else "> 0"
    bad = ValueError(f"{name} must be a finite number {bound}, got {value!r}")
    if isinstance(value, bool):
        raise bad
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        raise bad from None
    if not (math.isfinite(x) and (x >= 0 if zero_ok else x > 0)):
        raise bad
    return x


def _positive(value, name: str) -> float:
    return _number(value, name, zero_ok=False)


def _nonneg(value, name: str) -> float:
    return _number(value, name, zero_ok=True)


def _int(value, name: str, low: int) -> int:
    if (isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value)
            or value != int(value) or value < low):
        raise ValueError(f"{name} must be an integer >= {low}, got {value!r}")
    return int(value)


def _items(values, name: str, what: str) -> list:
    """The values of a non-empty sequence, in the order given; ``what`` says what they should be."""
    try:
        items = list(values)
    except TypeError:
        items = []
    if not items:
        raise ValueError(f"{name} must be a non-empty sequence of {what}, got {values!r}")
    return items


def _ints(values, name: str, low: int) -> list[int]:
    """A non-empty sequence of integers >= low, in the order given."""
    return [_int(v, name, low) for v in _items(values, name, f"integers >= {low}")]


def _alpha(value) -> float:
    a = _nonneg(value, "alpha")
    if a > 1:
        raise ValueError(f"alpha must lie in [0, 1], got {value!r}")
    return a


def _fraction(value, name: str) -> float:
    x = _positive(value, name)
    if x > 1:
        raise ValueError(f"{name} must lie in (0, 1], got {value!r}")
    return x

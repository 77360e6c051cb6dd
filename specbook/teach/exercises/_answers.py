"""Reading the reader's answers, and the concept checks written as data.

Every lesson's graders read answers with the same few functions: :func:`number`, :func:`whole`,
:func:`pair`, :func:`call` (the reader's function, whose exception becomes the verdict) and
:func:`choice` (a letter among lettered options).  Each raises :class:`~specbook.teach.exercises.Wrong`
with a message that says what was expected, never what is right.

A concept check is one question with one answer, so a lesson writes its concept checks as a table
of what is right and what to say when it is not, and registers them in one call::

    register({
        "03.c1": near(lambda: theory.expected_tokens_limit(0.8), "the limit", tol=0.01,
                      traps={4.0: "that counts the accepted guesses only: ..."},
                      hint="E[tokens] = 1 + α + α² + …: the sum of an endless geometric series"),
        "03.c3": pick("b", a="a checked guess survives ...", c="the formula assumes ..."),
    })

:func:`pick` grades a lettered choice, :func:`near` a number within a tolerance and :func:`count`
a whole number; each returns the grader, which takes the reader's answer.
"""
from __future__ import annotations

import math
import numbers
from typing import Callable, Mapping

from . import Wrong

Value = float | Callable[[], float]  # a number, or how to compute it when the answer is graded
Traps = Mapping[float, str] | Callable[[float], Mapping[float, str]]
Hint = str | Callable[[float], str]

# ---------------------------------------------------------------------------- reading an answer


def number(answer, what: str) -> float:
    """``answer`` as a float, or :class:`Wrong` saying that a finite number was expected."""
    if isinstance(answer, bool) or not isinstance(answer, numbers.Real) or not math.isfinite(float(answer)):
        raise Wrong(f"{what} should be a finite number, got {answer!r}")
    return float(answer)


def whole(answer, what: str) -> int:
    """``answer`` as an int (a float such as 3.0 is accepted), or :class:`Wrong`."""
    value = number(answer, what)
    if value != int(value):
        raise Wrong(f"{what} is a whole number, got {answer!r}")
    return int(value)


def pair(answer, what: str) -> tuple[int, int]:
    """Two whole numbers, ``(first, second)``, or :class:`Wrong`."""
    if not isinstance(answer, (tuple, list)) or len(answer) != 2:
        raise Wrong(f"{what}: answer with two numbers in parentheses, (first, second); got {answer!r}")
    return whole(answer[0], f"{what}'s first number"), whole(answer[1], f"{what}'s second number")


def call(fn, *args):
    """The reader's function called on ``args``; an exception it raises becomes the verdict.

    ``NotImplementedError`` (the student edition's stub) and ``AssertionError`` pass through, so
    that :func:`specbook.teach.exercises.check` reports "not answered" or "wrong".
    """
    if not callable(fn):
        raise Wrong(f"expected a function, got {type(fn).__name__}")
    try:
        return fn(*args)
    except (NotImplementedError, AssertionError):
        raise
    except Exception as err:  # the reader's code failing is an answer too
        shown = ", ".join(short(a) for a in args)
        raise Wrong(f"calling it with ({shown}) raised {type(err).__name__}: {err}") from None


def short(value) -> str:
    """``repr(value)``, or only its type's name when that is long (for messages)."""
    text = repr(value)
    return text if len(text) <= 60 else f"<{type(value).__name__}>"


def choice(answer, options: Mapping[str, str | None]) -> None:
    """Grade a lettered choice. ``options``: letter -> None for the right one, else what to think about."""
    letters = ", ".join(f'"{k}"' for k in options)
    picked = answer.strip().strip("()").lower() if isinstance(answer, str) else None
    if picked not in options:
        raise Wrong(f"answer with one letter in quotes, one of {letters}; got {answer!r}")
    if options[picked] is not None:
        raise Wrong(options[picked])


# ---------------------------------------------------------------------------- concept checks as data


def pick(right: str | Callable[[], str | set[str]], **why: str) -> Callable[[object], None]:
    """The grader of a lettered choice: ``right`` is the right letter (or a function that computes the
    right letter, or the set of them, when the answer is graded); ``why[letter]`` is what a reader who
    picked that wrong letter should think about.  The options are ``right`` and the letters of ``why``.
    """
    def grade(answer) -> None:
        good = right() if callable(right) else right
        good = {good} if isinstance(good, str) else set(good)
        letters = sorted(set(why) | good)
        choice(answer, {k: None if k in good else why[k] for k in letters})
    return grade


def near(right: Value, what: str, *, tol: float, hint: Hint, traps: Traps | None = None, rel: bool = False):
    """The grader of a number: right within ``tol`` (a share of the value with ``rel``).

    ``right`` is the value, or a function that computes it when the answer is graded; ``traps``
    maps common wrong answers (matched with the same tolerance) to what each one means, or is a
    function of the right value that returns that map; ``hint`` says what to do for any other
    answer, or is a function of the answer that says it.
    """
    return _grade_number(right, what, tol, hint, traps, rel, number)


def count(right: Value, what: str, *, hint: Hint, traps: Traps | None = None):
    """The grader of a whole number, exactly ``right``; ``traps`` and ``hint`` as in :func:`near`."""
    return _grade_number(right, what, 0.0, hint, traps, False, whole)


def _grade_number(right, what, tol, hint, traps, rel, read):
    def close(value: float, target: float) -> bool:
        return abs(value - target) <= (tol * abs(target) if rel else tol)

    def grade(answer) -> None:
        value = read(answer, what)
        target = float(right() if callable(right) else right)
        if close(value, target):
            return
        for wrong, why in (traps(target) if callable(traps) else traps or {}).items():
            if close(value, float(wrong)):
                raise Wrong(why)
        raise Wrong(hint(value) if callable(hint) else hint)
    return grade

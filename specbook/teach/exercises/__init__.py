"""Exercises and concept checks that grade the reader's own answer.

A lesson's exercise is three cells: the question (markdown), the answer cell (tagged
``solution``) and a check cell that calls :func:`check` with the reader's answer::

    # %% tags=["solution"]
    e = 1 + 0.6 + 0.6**2 + 0.6**3 + 0.6**4        # scaffolding the reader keeps
    ### BEGIN SOLUTION
    speedup_by_hand = e / 1.4
    ### END SOLUTION

    # %%
    exercises.check("03.1", speedup_by_hand)

The instructor's edition runs the solution; the student edition (``python -m specbook
student-edition``) replaces every ``BEGIN/END SOLUTION`` region by a stub: ``name = ...`` for
each name the region binds at top level, or ``raise NotImplementedError(...)`` inside a function
body.  :func:`check` then says "not answered yet" instead of failing obscurely.

The expected answers are not in the notebook: each lesson's graders live in
``specbook/teach/exercises/lesson_<NN>.py`` (``03.1`` is graded by ``lesson_03``), computed from
the library where they can be.  A grader takes the reader's answers and raises
:class:`Wrong` (or ``AssertionError``) with a message that helps; it returns nothing when
the answer is right.  Concept checks (multiple choice, numbers) are graded the same way, with
keys such as ``03.c1``; a lesson writes them as one table of what is right and what to say when
it is not (:mod:`._answers`, where the helpers that read an answer live too).

:func:`results` lists what was checked in this kernel, so a lesson's last cell can assert that
every exercise passed (the instructor's edition does; the student edition reports).
"""
from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Callable

from ... import _lazy_submodules

__all__ = ["Wrong", "Result", "grader", "register", "check", "results", "not_answered"]

__getattr__, __dir__ = _lazy_submodules(globals())  # sb.teach.exercises.lesson_03 resolves on first use

_GRADERS: dict[str, Callable] = {}
_RESULTS: dict[str, "Result"] = {}


class Wrong(AssertionError):
    """An answer that is not right, with a message that says why (without giving the answer)."""


@dataclass(frozen=True)
class Result:
    key: str
    status: str  # "right", "wrong" or "not answered"
    message: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "right"

    def __str__(self) -> str:
        mark = {"right": "✓", "wrong": "✗", "not answered": "·"}[self.status]
        return f"{mark} {self.key}: {self.status}" + (f". {self.message}" if self.message else "")


def grader(key: str):
    """Register ``fn(*answers)`` as the grader of exercise ``key`` (used by the lesson modules)."""
    def add(fn):
        if key in _GRADERS:
            raise ValueError(f"exercise {key!r} already has a grader")
        _GRADERS[key] = fn
        return fn
    return add


def register(table: dict[str, Callable]) -> None:
    """Register every grader of ``{key: grader}`` (a lesson's concept checks, written as one table)."""
    for key, fn in table.items():
        grader(key)(fn)


def _lesson_of(key: str) -> str:
    if not isinstance(key, str) or "." not in key:
        raise ValueError(f"key must look like '03.1' or '03.c1' (lesson, then exercise), got {key!r}")
    return key.split(".", 1)[0]


def not_answered(answer) -> bool:
    """True for the stub's ``...`` (and for ``None``, a common way to leave a cell unanswered)."""
    return answer is ... or answer is None


def check(key: str, *answers, show: bool = True) -> Result:
    """Grade the reader's answer(s) to exercise ``key`` and say what is wrong, if anything.

    Never raises for a wrong or missing answer (the lesson keeps running); the result is
    printed and returned, and recorded for :func:`results`.
    """
    lesson = _lesson_of(key)
    if key not in _GRADERS:
        importlib.import_module(f"{__name__}.lesson_{lesson}")
    if key not in _GRADERS:
        raise ValueError(f"no grader for exercise {key!r} in specbook.teach.exercises.lesson_{lesson}")
    if any(not_answered(a) for a in answers):
        result = Result(key, "not answered", "replace the ... in the cell above with your answer, then run both cells")
    else:
        try:
            _GRADERS[key](*answers)
            result = Result(key, "right")
        except NotImplementedError:
            result = Result(key, "not answered", "write the function in the cell above, then run both cells")
        except AssertionError as err:  # Wrong included
            result = Result(key, "wrong", str(err) or "not the expected answer")
    _RESULTS[key] = result
    if show:
        print(result)
    return result


def results(lesson: str | None = None) -> list[Result]:
    """The results checked in this kernel so far, for one lesson (``"03"``) or all."""
    return [r for k, r in sorted(_RESULTS.items()) if lesson is None or _lesson_of(k) == lesson]

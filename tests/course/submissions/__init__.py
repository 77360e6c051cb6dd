"""Broken submissions to the assignments, one module per assignment: ``BROKEN`` in ``<name>.py``.

``BROKEN`` maps a label to (answers: grade_id -> code, cells that must lose all their points, words
the feedback must show).  A broken submission that is the reference solution with a mistake put in
is written as ``mutated(name, grade_id, old, new)``, not as a copy of the solution: it shows the
mistake and nothing else, and it follows the solution when the solution changes.  Code that is
genuinely other than the solution (a call into the library, another algorithm) is written out.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("course", Path(__file__).resolve().parents[3] / "assignments" / "course.py")
course = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(course)


def mutated(name: str, grade_id: str, old: str, new: str, *more: str) -> str:
    """The reference solution of cell ``grade_id`` of assignment ``name`` with ``old`` replaced by ``new``.

    ``more`` holds further old, new pairs, applied in turn.  Each old text must occur exactly once,
    so that a change of the solution that moves or doubles it fails here, not in a puzzling grade.
    """
    if len(more) % 2:
        raise ValueError("more must hold old, new pairs")
    code = course.solutions(name)[grade_id]
    pairs = [(old, new), *zip(more[::2], more[1::2])]
    for before, after in pairs:
        found = code.count(before)
        if found != 1:
            raise AssertionError(f"{name}:{grade_id}: {before!r} occurs {found} times in the solution, not once")
        code = code.replace(before, after)
    return code

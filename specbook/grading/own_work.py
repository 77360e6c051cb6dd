"""Did a student's function do the work itself, or hand it to specbook's own implementation?

The assignments grade what the student wrote, so a graded function that calls the library's
version of what it is asked to write (``verify_chain`` for a chain verifier, ``theory.speedup``
for a speedup formula) scores nothing.  The check runs the function on a few inputs with a
profiler that watches for calls into the named library functions *made while the student's
function is on the stack*, however they were imported (``from specbook.verify import ...``,
``import specbook.verify as v``, a helper of the student's that calls them).  The checker's own
calls into the library, outside the student's function, do not count.

    assert_own_work(verify_row, forbidden=("specbook.verify.verify_chain",), calls=[(p, q, x, g)])
"""
from __future__ import annotations

import importlib
import sys
from typing import Callable, Iterable

__all__ = ["library_calls", "assert_own_work", "VERIFIERS"]


def _code_of(dotted):
    """The code object of ``package.module.function`` (or ``package.module.Class.method``), or of
    a function object given directly (a reference defined in a notebook cannot be imported)."""
    if callable(dotted):
        code = getattr(getattr(dotted, "__wrapped__", dotted), "__code__", None)
        if code is None:
            raise ValueError(f"forbidden and allowed must name Python functions, got {dotted!r}")
        return code
    parts = dotted.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        try:
            for attr in parts[cut:]:
                obj = getattr(obj, attr)
        except AttributeError:
            raise ValueError(f"forbidden: cannot import {dotted!r}") from None
        obj = getattr(obj, "__wrapped__", obj)
        code = getattr(obj, "__code__", None)
        if code is None:
            raise ValueError(f"forbidden must name Python functions; {dotted!r} is {type(obj).__name__}")
        return code
    raise ValueError(f"forbidden: cannot import {dotted!r}")


def library_calls(fn: Callable, forbidden: Iterable[str], calls: Iterable[tuple],
                  allowed: Iterable[str] = ()) -> list[str]:
    """The names in ``forbidden`` that ``fn`` called (directly or not) on any of ``calls``.

    ``calls`` holds positional-argument tuples.  ``allowed`` names library functions the grader
    itself hands to ``fn`` (a reference version of an earlier part, so that one mistake costs
    points once): what they call inside is not counted.  Exceptions raised by ``fn`` are swallowed: a
    function that fails is graded by the other tests, this one only asks who did the work.
    """
    if not callable(fn):
        raise ValueError(f"fn must be callable, got {type(fn).__name__}")
    forbidden = tuple(forbidden)
    if not forbidden:
        raise ValueError("forbidden must name at least one library function")
    watched = {_code_of(name): name if isinstance(name, str) else name.__qualname__ for name in forbidden}
    exempt = {_code_of(name) for name in allowed}
    own = getattr(getattr(fn, "__wrapped__", fn), "__code__", None)
    seen: list[str] = []

    def profile(frame, event, arg):
        if event != "call" or frame.f_code not in watched:
            return
        if own is not None:  # count the call only if the student's function is below it on the stack
            outer = frame.f_back
            while outer is not None and outer.f_code is not own:
                if outer.f_code in exempt:
                    return
                outer = outer.f_back
            if outer is None:
                return
        name = watched[frame.f_code]
        if name not in seen:
            seen.append(name)

    previous = sys.getprofile()
    for args in calls:
        sys.setprofile(profile)
        try:
            fn(*args)
        except Exception:  # noqa: BLE001 - other tests grade failures
            pass
        finally:
            sys.setprofile(previous)
    return seen


def assert_own_work(fn: Callable, forbidden: Iterable[str], calls: Iterable[tuple], what: str | None = None,
                    allowed: Iterable[str] = ()) -> None:
    """Raise ``AssertionError`` naming the library functions ``fn`` handed its work to."""
    used = library_calls(fn, forbidden, calls, allowed)
    if used:
        name = what or getattr(fn, "__name__", "your function")
        raise AssertionError(
            f"{name} calls specbook's own {', '.join(u.rsplit('.', 1)[-1] for u in used)} "
            f"({', '.join(used)}): the assignment grades the code you write, so write it yourself. "
            "The library is the reference to check your work against, not the answer.")


#: specbook's verifiers: what an assignment that asks for a verifier must not call.
VERIFIERS = tuple(f"specbook.{name}" for name in (
    "verify.verify_token", "verify.accept_chain", "verify.verify_chain", "verify.accept_greedy", "verify.verify_greedy",
    "verify_serving.verify_chain_serving", "verify_block.accept_block", "verify_block.verify_block",
    "verify_tree.accept_tree", "verify_tree.verify_tree", "verify_tree.accept_tree_greedy",
    "verify_tree.verify_tree_greedy"))

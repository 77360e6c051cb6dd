"""Training the drafters that ship with specbook (distilled draft, Medusa heads, EAGLE head)."""
from __future__ import annotations

import sys

from .. import _lazy_submodules


def recorded_command(module: str, argv: list[str] | None) -> str:
    """The command line to write into a weights file's metadata, without ``--out``.

    Where the files were written does not change them, and a path of the machine that
    trained them means nothing elsewhere: the recorded command rewrites the shipped files.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    kept, skip = [], False
    for a in args:
        if skip:
            skip = False
        elif a == "--out":
            skip = True
        elif not a.startswith("--out="):
            kept.append(a)
    return " ".join([f"python -m {module}", *kept])


__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use

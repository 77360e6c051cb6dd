"""Training the drafters that ship with specbook (distilled draft, Medusa heads, EAGLE head)."""
from __future__ import annotations

import sys

from .. import _lazy_submodules


NOT_RECORDED = {"--out": 1, "--checkpoint": 1, "--checkpoint-every": 1, "--resume": 0}  # flag: values it takes


def recorded_command(module: str, argv: list[str] | None) -> str:
    """The command line to write into a weights file's metadata, without ``--out`` and the
    checkpoint flags.

    Where the files were written does not change them, and a path of the machine that
    trained them means nothing elsewhere: the recorded command rewrites the shipped files.
    A resumed run writes the weights of the uninterrupted one, so its command is that one's.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    kept, skip = [], 0
    for a in args:
        flag = a.split("=", 1)[0]
        if skip:
            skip -= 1
        elif flag in NOT_RECORDED:
            skip = NOT_RECORDED[flag] if "=" not in a else 0
        else:
            kept.append(a)
    return " ".join([f"python -m {module}", *kept])


__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use

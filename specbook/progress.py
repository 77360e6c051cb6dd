"""Progress bars for long work: one rule for when they show.

A bar shows on a terminal and nowhere else: not in a log file, a pipe or a test run.  It is
also off when asked, by a command's ``--no-progress`` flag or, for everything at once (a
notebook, a library call, a script), by the environment variable ``SPECBOOK_PROGRESS=0``.

    for x in progress_bar(items, desc="null simulation"):
        ...
"""
from __future__ import annotations

import os
import sys
from collections.abc import Iterable

ENV = "SPECBOOK_PROGRESS"
_OFF = {"0", "false", "no", "off"}


def progress_enabled(disable: bool = False, stream=None) -> bool:
    """True when a bar should show: not ``disable``d, not turned off by ``SPECBOOK_PROGRESS=0``,
    and ``stream`` (default: stderr, where tqdm draws) is a terminal."""
    if disable or os.environ.get(ENV, "").strip().lower() in _OFF:
        return False
    stream = sys.stderr if stream is None else stream
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty())


def progress_bar(iterable: Iterable | None = None, *, disable: bool = False, **tqdm_kwargs):
    """``tqdm(iterable, **tqdm_kwargs)``, shown only when :func:`progress_enabled` says so."""
    from tqdm.auto import tqdm

    return tqdm(iterable, disable=not progress_enabled(disable), **tqdm_kwargs)

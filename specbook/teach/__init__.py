"""Teaching helpers for the lessons, one concept per module (layer 3: above the core, the
models, the drafters and the checker; nothing below imports it).

* :mod:`~specbook.teach.trace`       step-by-step traces, recorded on the decode loop's ``on_step`` hook
* :mod:`~specbook.teach.html`        the traces as coloured HTML
* :mod:`~specbook.teach.rules`       one position, many acceptance rules (exact law + sampler each)
* :mod:`~specbook.teach.buggy`       a drafter with the sampling-parameter bug
* :mod:`~specbook.teach.acceptance`  constant-acceptance pairs, accepted-count law, per-context overlap
* :mod:`~specbook.teach.plots`       the lessons' matplotlib figures (tree drawing included)
* :mod:`~specbook.teach.widgets`     the ipywidgets explorers
* :mod:`~specbook.teach.tour`        ``python -m specbook tour``

Submodules are imported on first use (matplotlib and ipywidgets are not loaded by ``import
specbook.teach``).
"""
from __future__ import annotations

import importlib

_SUBMODULES = {"trace", "html", "rules", "buggy", "acceptance", "plots", "widgets", "tour"}


def __getattr__(name: str):
    if name in _SUBMODULES:
        return importlib.import_module(f".{name}", __name__)
    raise AttributeError(f"module 'specbook.teach' has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | _SUBMODULES)

"""Teaching helpers for the lessons, one concept per module (layer 3: above the core, the
models, the drafters and the checker; nothing below imports it).

* :mod:`~specbook.teach.trace`       step-by-step traces, recorded on the decode loop's ``on_step`` hook
* :mod:`~specbook.teach.html`        the traces as coloured HTML
* :mod:`~specbook.teach.rules`       one position, many acceptance rules (exact law + sampler each)
* :mod:`~specbook.teach.buggy`       a drafter with the sampling-parameter bug
* :mod:`~specbook.teach.acceptance`  constant-acceptance pairs, accepted-count law, per-context overlap
* :mod:`~specbook.teach.plots`       the lessons' matplotlib figures (tree drawing included)
* :mod:`~specbook.teach.diagrams`    Medusa and EAGLE drawn side by side
* :mod:`~specbook.teach.widgets`     the ipywidgets explorers
* :mod:`~specbook.teach.batching`    lesson 6's batching explorer (a widget)
* :mod:`~specbook.teach.batching_plots`  lesson 6's roofline, ridge/crossover and SLO figures (``docs_figures``)
* :mod:`~specbook.teach.exercises`   the graders of the lessons' exercises and concept checks
* :mod:`~specbook.teach.edition`     the student edition (``python -m specbook student-edition``)
* :mod:`~specbook.teach.tour`        ``python -m specbook tour``
* :mod:`~specbook.teach.streamer`    tokens shown as they are accepted, coloured by kind (``on_step``)

Submodules are imported on first use (matplotlib and ipywidgets are not loaded by ``import
specbook.teach``).
"""
from __future__ import annotations

from .. import _lazy_submodules

__getattr__, __dir__ = _lazy_submodules(globals())  # every submodule resolves on first use

"""Markdown for the docs from the JSON reports committed beside them: plain text, no torch.

The table scripts (``scripts/bench_tables.py``, ``batch_tables.py``, ``docs_tables.py``) and the
checker's own tables (:mod:`specbook.grading.tables`) read a report and write its tables the
same way, here.
"""
from __future__ import annotations

import json
from pathlib import Path


def read_json(path: str | Path):
    """The JSON at ``path``; ValueError naming the file when it cannot be read as JSON."""
    path = Path(path)
    try:
        return json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise ValueError(f"{path}: cannot read it as JSON ({err})") from err


def markdown_table(head: list, rows: list[list], align: str = "l") -> str:
    """A Markdown table: the ``head`` line, its rule, a line per row (every cell through ``str``).

    ``align``: a letter per column, ``l`` (text, left) or ``r`` (numbers, right); columns past
    the last letter take the last letter, so ``"lr"`` is text then numbers.
    """
    letters = [align[min(i, len(align) - 1)] for i in range(len(head))]
    rule = "|" + "|".join("---:" if a == "r" else "---" for a in letters) + "|"

    def line(cells) -> str:
        return "| " + " | ".join(str(c) for c in cells) + " |"

    return "\n".join([line(head), rule] + [line(row) for row in rows])

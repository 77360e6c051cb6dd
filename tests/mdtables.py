"""Markdown tables read back into cells, for tests that check rendered reports."""
from __future__ import annotations


def md_tables(text: str) -> list[list[list[str]]]:
    """Each markdown table of ``text`` as rows of cells, header and rule line dropped."""
    tables, current = [], None
    for line in text.splitlines():
        if line.startswith("|"):
            if current is None:
                current = []
                tables.append(current)
            current.append([c.strip() for c in line.strip("|").split("|")])
        else:
            current = None
    return [t[2:] for t in tables]

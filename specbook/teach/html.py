"""HTML for the lessons' traces: each token coloured by its fate in the speculative step.

Fates (one colour each, shared with :func:`specbook.teach.plots.plot_trace`): ``accepted``
(a draft the verifier kept), ``rejected`` (the first draft it refused), ``unverified`` (drafts
after a rejection, never checked), ``corrected`` (drawn from the residual max(0, p - q) after a
rejection) and ``bonus`` (drawn from p when every draft was accepted), following the step of
Leviathan et al. 2023, Algorithm 1.

Works on anything shaped like :class:`specbook.teach.trace.Trace` (``prompt``, ``steps`` with
``kinds()``, ``emitted``, ``target_probs``, ``draft_probs``, ``accept_probs``); it imports no
trace code, so the trace can use it for its own ``_repr_html_``.
"""
from __future__ import annotations

import html
from typing import Sequence

KIND_COLOURS = {  # background, text decoration
    "accepted": ("#b7e4c7", "none"),
    "rejected": ("#f4a3a3", "line-through"),
    "unverified": ("#e0e0e0", "line-through"),
    "corrected": ("#ffd6a5", "none"),
    "bonus": ("#a9d6f5", "none"),
    "prompt": ("#ffffff", "none"),
}


def _token_span(token: int, kind: str, names: Sequence[str] | None, title: str = "") -> str:
    bg, deco = KIND_COLOURS[kind]
    label = html.escape(names[token] if names is not None else str(token))
    tip = f' title="{html.escape(title)}"' if title else ""
    return (f'<span class="specbook-token specbook-{kind}" data-kind="{kind}"{tip} style="background:{bg};'
            f'text-decoration:{deco};padding:1px 5px;margin:1px;border-radius:3px;'
            f'font-family:monospace;display:inline-block;color:#111">{label}</span>')


def legend_html() -> str:
    """One coloured chip per fate, with what it means."""
    items = [("accepted", "draft accepted"), ("rejected", "draft rejected"),
             ("unverified", "after a rejection: never checked"), ("corrected", "drawn from the residual"),
             ("bonus", "bonus token from p")]
    return '<div class="specbook-legend">' + " ".join(
        _token_span(0, k, [label]) for k, label in items) + "</div>"


def trace_html(trace, token_names: Sequence[str] | None = None, max_steps: int | None = None) -> str:
    """An HTML table, one row per target pass, colouring each token by its fate.

    ``trace``: a :class:`specbook.teach.trace.Trace`; ``token_names`` default to its own.
    """
    names = token_names if token_names is not None else trace.token_names
    rows = []
    for i, step in enumerate(trace.steps[:max_steps]):
        cells = []
        for j, (tok, kind) in enumerate(step.kinds()):
            title = ""
            if kind in ("accepted", "rejected"):
                title = (f"p(x)={float(step.target_probs[j, tok]):.3f}, q(x)={float(step.draft_probs[j, tok]):.3f}, "
                         f"accept prob {step.accept_probs[j]:.3f}")
            cells.append(_token_span(tok, kind, names, title))
        rows.append(f'<tr><td style="text-align:right;padding-right:8px">{i + 1}</td>'
                    f'<td style="text-align:left">{"".join(cells)}</td>'
                    f'<td style="text-align:right">{len(step.emitted)}</td></tr>')
    prompt = "".join(_token_span(t, "prompt", names) for t in trace.prompt)
    return (legend_html() + f'<div>prompt: {prompt}</div>'
            '<table class="specbook-trace"><tr><th>pass</th><th style="text-align:left">drafts and verdicts</th>'
            '<th>emitted</th></tr>' + "".join(rows) + "</table>")

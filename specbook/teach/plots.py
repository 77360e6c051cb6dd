"""Matplotlib figures for the lessons.

Every function draws into ``ax`` when given one, otherwise into a fresh
:class:`matplotlib.figure.Figure` attached to the Agg canvas (no pyplot, so
nothing is shown or kept alive behind the caller's back; widgets render these
to PNG with :func:`figure_to_png`).  Each returns the figure it drew on.

Shape legend: V vocab, A number of alphas, G number of gammas, N tree nodes, T cached context.
"""
from __future__ import annotations

import io
from typing import Mapping, Sequence

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .. import theory
from ..tree import check_parents, children, depths
from ..tree_attention import attention_mask
from ..tree_paths import path_to
from .html import KIND_COLOURS
from .trace import Trace

__all__ = [
    "LessonFigure", "new_figure", "figure_to_png", "plot_trace", "plot_laws", "plot_bias", "plot_emission", "plot_yield",
    "plot_speedup", "plot_break_even", "plot_roofline", "plot_explorer", "plot_curves", "plot_cost_curves", "draw_tree",
]


class LessonFigure(Figure):
    """A Figure that shows itself as PNG in Jupyter even when pyplot was never imported."""

    def _repr_png_(self) -> bytes:
        return figure_to_png(self)


def new_figure(width: float = 6.4, height: float = 4.0) -> Figure:
    """A figure on the Agg canvas, not registered with pyplot (displays inline as PNG)."""
    fig = LessonFigure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def lesson_axes(ax, width=6.4, height=4.0):
    if ax is None:
        fig = new_figure(width, height)
        return fig, fig.add_subplot()
    return ax.figure, ax


def figure_to_png(fig: Figure, dpi: int = 100) -> bytes:
    """The figure as PNG bytes (for an ``ipywidgets.Image`` or a file)."""
    if not isinstance(fig, Figure):
        raise ValueError(f"fig must be a matplotlib Figure, got {type(fig).__name__}")
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, metadata={"Software": None})
    return buf.getvalue()


def _vector(x, name: str) -> np.ndarray:
    arr = np.asarray(x.detach().cpu() if hasattr(x, "detach") else x, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0 or not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be a non-empty 1-D vector of non-negative numbers, got {arr!r}")
    return arr


def _names(token_names, V: int) -> list[str]:
    if token_names is None:
        return [str(i) for i in range(V)]
    if len(token_names) < V:
        raise ValueError(f"token_names has {len(token_names)} names for a vocabulary of {V}")
    return list(token_names[:V])


# ----------------------------------------------------------------------------- lesson 1

def plot_trace(trace: Trace, token_names: Sequence[str] | None = None, max_steps: int = 12, ax=None) -> Figure:
    """One row per target pass: each drafted token coloured by its fate, then the corrected/bonus token."""
    if not isinstance(trace, Trace):
        raise ValueError(f"trace must be a specbook.teach.trace.Trace, got {type(trace).__name__}")
    steps = trace.steps[:max_steps]
    width = max((len(s.kinds()) for s in steps), default=1)
    fig, ax = lesson_axes(ax, max(4.8, 1.2 + 0.62 * width), 1.3 + 0.36 * len(steps))
    names = token_names if token_names is not None else trace.token_names
    for row, step in enumerate(steps):
        y = len(steps) - 1 - row
        for col, (tok, kind) in enumerate(step.kinds()):
            colour, deco = KIND_COLOURS[kind]
            ax.add_patch(Rectangle((col + 0.05, y + 0.1), 0.9, 0.8, facecolor=colour, edgecolor="#555", lw=0.6))
            label = names[tok] if names is not None else str(tok)
            txt = ax.text(col + 0.5, y + 0.5, label, ha="center", va="center", fontsize=9, family="monospace")
            if deco == "line-through":
                ax.plot([col + 0.2, col + 0.8], [y + 0.5, y + 0.5], color="#333", lw=1)
            txt.set_gid(kind)
    ax.set_xlim(0, width)
    ax.set_ylim(0, max(len(steps), 1))
    ax.set_yticks([len(steps) - 1 - r + 0.5 for r in range(len(steps))], [f"pass {r + 1}" for r in range(len(steps))])
    ax.set_xticks([])
    for side in ("top", "right", "bottom"):
        ax.spines[side].set_visible(False)
    handles = [Rectangle((0, 0), 1, 1, facecolor=KIND_COLOURS[k][0], edgecolor="#555")
               for k in ("accepted", "rejected", "unverified", "corrected", "bonus")]
    ax.legend(handles, ["accepted", "rejected", "not checked", "corrected", "bonus"], loc="upper center",
              bbox_to_anchor=(0.5, 0.0), ncol=3, fontsize=8, frameon=False)
    emitted = sum(len(s.emitted) for s in steps)
    ax.set_title(f"{emitted} tokens from {len(steps)} target passes")
    return fig


# ----------------------------------------------------------------------------- lesson 2

def plot_laws(target_probs, laws: Mapping[str, object], token_names: Sequence[str] | None = None,
              ax=None, title: str | None = None) -> Figure:
    """Grouped bars: the target p next to each rule's exact emitted law."""
    p = _vector(target_probs, "target_probs")
    V = p.size
    vectors = {name: _vector(law, f"laws[{name!r}]") for name, law in laws.items()}
    for name, vec in vectors.items():
        if vec.size != V:
            raise ValueError(f"laws[{name!r}] has {vec.size} entries, target_probs has {V}")
    fig, ax = lesson_axes(ax, 7.5, 3.8)
    series = {"target p": p, **vectors}
    width = 0.8 / len(series)
    x = np.arange(V)
    for i, (name, vec) in enumerate(series.items()):
        style = dict(color="black") if i == 0 else dict(color=f"C{i - 1}")
        ax.bar(x - 0.4 + width * (i + 0.5), vec, width, label=name, **style)
    ax.set_xticks(x, _names(token_names, V))
    ax.set_ylabel("probability of emitting the token")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return fig


def plot_bias(target_probs, laws: Mapping[str, object], token_names: Sequence[str] | None = None,
              ax=None, title: str | None = None) -> Figure:
    """Grouped bars of each rule's exact law minus p: zero everywhere for a lossless rule."""
    p = _vector(target_probs, "target_probs")
    fig, ax = lesson_axes(ax, 7.5, 3.2)
    width = 0.8 / max(len(laws), 1)
    x = np.arange(p.size)
    for i, (name, law) in enumerate(laws.items()):
        vec = _vector(law, f"laws[{name!r}]")
        if vec.size != p.size:
            raise ValueError(f"laws[{name!r}] has {vec.size} entries, target_probs has {p.size}")
        ax.bar(x - 0.4 + width * (i + 0.5), vec - p, width, label=name, color=f"C{i}")
    ax.axhline(0.0, color="black", lw=0.8)
    ax.set_xticks(x, _names(token_names, p.size))
    ax.set_ylabel("emitted law − p")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title)
    return fig


def plot_emission(target_probs, counts, law=None, token_names: Sequence[str] | None = None, ax=None,
                  title: str | None = None) -> Figure:
    """Observed frequencies (bars) against p (black ticks) and, if given, the rule's exact law (red dots)."""
    p = _vector(target_probs, "target_probs")
    c = _vector(counts, "counts")
    if c.size != p.size:
        raise ValueError(f"counts has {c.size} entries, target_probs has {p.size}")
    if c.sum() <= 0:
        raise ValueError("counts must contain at least one observation")
    fig, ax = lesson_axes(ax, 6.4, 3.4)
    x = np.arange(p.size)
    ax.bar(x, c / c.sum(), 0.7, color="#8fb8de", label=f"emitted (n = {int(c.sum())})")
    ax.scatter(x, p, marker="_", s=600, color="black", linewidths=2.5, label="target p", zorder=3)
    if law is not None:
        lw = _vector(law, "law")
        if lw.size != p.size:
            raise ValueError(f"law has {lw.size} entries, target_probs has {p.size}")
        ax.scatter(x, lw, marker="o", s=22, color="#c0392b", label="rule's exact law", zorder=4)
    ax.set_xticks(x, _names(token_names, p.size))
    ax.set_ylabel("frequency")
    ax.legend(fontsize=8)
    if title:
        ax.set_title(title, fontsize=10)
    return fig


# ----------------------------------------------------------------------------- lesson 3

def plot_yield(alphas: Sequence[float] = (0.5, 0.6, 0.7, 0.8, 0.9), max_gamma: int = 16, ax=None,
               show_limits: bool = True) -> Figure:
    """E[tokens] per target pass against gamma, one curve per alpha, with the limits 1/(1 - alpha)."""
    if not isinstance(max_gamma, int) or max_gamma < 1:
        raise ValueError(f"max_gamma must be an int >= 1, got {max_gamma!r}")
    gammas = np.arange(max_gamma + 1)
    table = theory.yield_table(alphas, gammas)  # (A, G)
    fig, ax = lesson_axes(ax)
    for alpha, row in zip(np.atleast_1d(alphas), table):
        line, = ax.plot(gammas, row, marker="o", ms=3, label=f"α = {alpha:g}")
        if show_limits and alpha < 1:
            ax.axhline(float(theory.expected_tokens_limit(alpha)), color=line.get_color(), ls=":", lw=1)
    ax.set_xlabel("draft length γ")
    ax.set_ylabel("expected tokens per target pass")
    ax.set_title("Yield saturates at 1/(1-α) (dotted)")
    ax.legend(fontsize=8)
    return fig


def plot_speedup(alpha: float, cs: Sequence[float] = (0.05, 0.15, 0.3), max_gamma: int = 16,
                 verify_cost: float = 1.0, ax=None) -> Figure:
    """Speedup over plain decoding against gamma, one curve per draft cost c; optimum marked."""
    gammas = np.arange(1, max_gamma + 1)
    fig, ax = lesson_axes(ax)
    for c in cs:
        s = np.asarray(theory.speedup(alpha, gammas, c, verify_cost))
        line, = ax.plot(gammas, s, marker="o", ms=3, label=f"c = {c:g}")
        g_best, s_best = theory.optimal_gamma(alpha, c, verify_cost, max_gamma=max_gamma)
        if g_best:
            ax.scatter([g_best], [s_best], s=90, facecolors="none", edgecolors=line.get_color(), lw=2, zorder=3)
    ax.axhline(1.0, color="black", lw=1, ls="--")
    ax.set_xlabel("draft length γ")
    ax.set_ylabel("speedup")
    ax.set_title(f"Speedup at α = {alpha:g}, verify cost {verify_cost:g} (circles: best γ)")
    ax.legend(fontsize=8)
    return fig


def plot_break_even(gammas: Sequence[int] = (1, 2, 4, 8), verify_cost: float = 1.0, ax=None,
                    points: Sequence[tuple[float, float]] = ()) -> Figure:
    """The break-even line c*(alpha) = (E[tokens] - v) / gamma in the (alpha, c) plane.

    Below a line, speculation with that gamma is faster than plain decoding; above it, slower.
    ``points`` are (alpha, c) pairs to mark (for example the lesson's worked cases).
    """
    alphas = np.linspace(0.0, 0.99, 200)
    fig, ax = lesson_axes(ax)
    for g in gammas:
        ax.plot(alphas, np.asarray(theory.break_even_cost(alphas, g, verify_cost)), label=f"γ = {g}")
    for a, c in points:
        ax.scatter([a], [c], color="black", zorder=3, s=18)
        ax.annotate(f"{float(theory.speedup(a, 4, c, verify_cost)):.2f}x at γ=4", (a, c), fontsize=7,
                    xytext=(4, 4), textcoords="offset points")
    ax.set_ylim(0, 1)
    ax.set_xlim(0, 1)
    ax.set_xlabel("acceptance rate α")
    ax.set_ylabel("draft cost c (fraction of a target pass)")
    ax.set_title("Break-even: speculation wins below the line")
    ax.legend(fontsize=8, loc="upper left")
    return fig


def plot_roofline(rows: Sequence[Mapping], ax=None) -> Figure:
    """Arithmetic intensity of each (batch, gamma) pass against the ridge point (log scale)."""
    if not rows:
        raise ValueError("rows must not be empty")
    fig, ax = lesson_axes(ax, 6.4, 3.2)
    labels = [f"batch {r['batch']}, γ={r['gamma']}" for r in rows]
    vals = [r["intensity"] for r in rows]
    colours = ["#c0392b" if r["compute_bound"] else "#27ae60" for r in rows]
    ax.barh(labels, vals, color=colours)
    ridge = rows[0]["ridge"]
    ax.axvline(ridge, color="black", ls="--", lw=1)
    ax.text(ridge, len(rows) - 0.5, f" ridge {ridge:.0f}", va="center", fontsize=8)
    ax.set_xscale("log")
    ax.invert_yaxis()
    ax.set_xlabel("FLOP per weight byte (tokens per pass)")
    ax.set_title("Memory-bound (green) vs compute-bound (red)")
    return fig


def plot_explorer(alpha: float, gamma: int, c: float, verify_cost: float = 1.0, max_gamma: int = 16,
                  ax=None) -> Figure:
    """The yield explorer's picture: E[tokens] and speedup against gamma, current gamma marked."""
    gammas = np.arange(max_gamma + 1)
    fig, ax = lesson_axes(ax, 6.0, 3.4)
    e = np.asarray(theory.expected_tokens(alpha, gammas))
    s = np.asarray(theory.speedup(alpha, gammas, c, verify_cost))
    ax.plot(gammas, e, marker="o", ms=3, color="#1f77b4", label="E[tokens] per pass")
    ax.plot(gammas, s, marker="s", ms=3, color="#ff7f0e", label="speedup")
    if alpha < 1:
        ax.axhline(float(theory.expected_tokens_limit(alpha)), color="#1f77b4", ls=":", lw=1,
                   label="limit 1/(1-α)")
    ax.axhline(1.0, color="black", ls="--", lw=0.8)
    ax.axvline(gamma, color="grey", lw=1)
    ax.scatter([gamma], [float(theory.expected_tokens(alpha, gamma))], color="#1f77b4", s=50, zorder=3)
    ax.set_xlabel("draft length γ")
    ax.set_title(f"α = {alpha:.2f}, c = {c:.2f}, verify cost {verify_cost:.2f}", fontsize=10)
    ax.legend(fontsize=8, loc="upper left")
    return fig


def plot_curves(x: Sequence[float], curves: Mapping[str, Sequence[float]], xlabel: str, ylabel: str,
                title: str | None = None, ax=None, styles: Mapping[str, Mapping] | None = None) -> Figure:
    """A few labelled curves over a shared x (measured against predicted, for example)."""
    xs = np.asarray(x, dtype=np.float64)
    fig, ax = lesson_axes(ax)
    for name, ys in curves.items():
        ys = np.asarray(ys, dtype=np.float64)
        if ys.shape != xs.shape:
            raise ValueError(f"curve {name!r} has {ys.size} points, x has {xs.size}")
        ax.plot(xs, ys, label=name, **dict(dict(marker="o", ms=4), **((styles or {}).get(name, {}))))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.legend(fontsize=8)
    return fig


def plot_cost_curves(sizes: Sequence[int], curves: Mapping[str, Mapping], xlabel: str, *, what: str,
                     flat_label: str = "v = 1") -> Figure:
    """A measured verify-cost curve, side by side: milliseconds of one pass, and ``v(n)``, the same
    times over the time of one position, with the flat line ``v = 1`` of a pass that costs nothing
    extra.  ``curves`` maps a name (a dtype) to a curve of :func:`specbook.bench.timing.verify_cost_curve`
    (its ``"seconds"`` and ``"v"``); ``what`` names one pass in the titles ("one forward")."""
    fig = new_figure(10.0, 3.6)
    ax_t, ax_v = fig.subplots(1, 2)
    plot_curves(sizes, {name: [1000 * s for s in cv["seconds"]] for name, cv in curves.items()},
                xlabel, "milliseconds", title=f"Time of {what}", ax=ax_t)
    plot_curves(sizes, {**{f"v(n), {name}": cv["v"] for name, cv in curves.items()}, flat_label: [1.0] * len(sizes)},
                xlabel, "time / time of n = 1", title=f"Verify cost of {what}", ax=ax_v)
    return fig

def draw_tree(parents: torch.Tensor, tokens: Sequence | None = None, context_length: int = 2,
              accepted: Sequence[int] | None = None, ax=None):
    """Draw the tree (left) and its attention mask over ``context_length`` cached tokens (right).

    tokens:   optional labels per node (ints or strings); otherwise nodes are labelled by index.
    accepted: optional root-to-node path (node indices) to highlight, e.g. a verifier's ``path``.
    ax:       optional pair of axes to draw into; otherwise a new figure.  Returns the figure.
    """
    check_parents(parents)
    N = len(parents)
    labels = [str(t) for t in tokens] if tokens is not None else [str(i) for i in range(N)]
    if len(labels) != N:
        raise ValueError(f"tokens has {len(labels)} labels for {N} nodes")
    on_path = set(int(i) for i in (accepted or []))
    if accepted is not None and accepted and list(accepted) != path_to(parents, int(accepted[-1])):
        raise ValueError(f"accepted={list(accepted)} is not a root-to-node path of this tree")
    if ax is None:
        fig = new_figure(9.0, max(2.5, 0.45 * N + 1.0))
        ax_tree, ax_mask = fig.subplots(1, 2, gridspec_kw={"width_ratios": [1, 1.2]})
    else:
        ax_tree, ax_mask = ax
        fig = ax_tree.figure

    # tree: x = depth, y = order of first leaf below (leaves spread out evenly)
    d = depths(parents).tolist()
    kids = children(parents)
    y: dict[int, float] = {}
    next_leaf = [0.0]

    def place(node: int) -> float:
        below = kids[node]
        y[node] = next_leaf[0] if not below else sum(place(c) for c in below) / len(below)
        if not below:
            next_leaf[0] += 1
        return y[node]

    roots = kids[N]
    root_y = sum(place(r) for r in roots) / len(roots) if roots else 0.0
    for i in range(N):
        par = int(parents[i])
        px, py = (-1, root_y) if par < 0 else (d[par], y[par])
        lit = i in on_path and (par < 0 or par in on_path)
        ax_tree.plot([px, d[i]], [py, y[i]], color="tab:green" if lit else "0.6", lw=2.5 if lit else 1, zorder=1)
    ax_tree.scatter([-1], [root_y], s=500, color="0.85", edgecolor="k", zorder=2)
    ax_tree.text(-1, root_y, "ctx", ha="center", va="center", fontsize=8, zorder=3)
    for i in range(N):
        ax_tree.scatter([d[i]], [y[i]], s=500, zorder=2, edgecolor="k",
                        color="tab:green" if i in on_path else "white")
        ax_tree.text(d[i], y[i], labels[i], ha="center", va="center", fontsize=8, zorder=3)
        ax_tree.text(d[i] + 0.22, y[i] + 0.22, f"#{i}", fontsize=6, color="0.4")
    ax_tree.set_xticks(range(-1, max(d, default=-1) + 1),
                       ["ctx"] + [f"depth {k}" for k in range(max(d, default=-1) + 1)], fontsize=7)
    ax_tree.set_yticks([])
    ax_tree.margins(0.15)
    ax_tree.invert_yaxis()
    ax_tree.set_title("draft tree (siblings tried top to bottom)", fontsize=9)
    for side in ("top", "right", "left"):
        ax_tree.spines[side].set_visible(False)

    mask = attention_mask(parents, context_length).cpu().numpy()  # (N, T + N)
    ax_mask.imshow(mask, cmap="Greens", vmin=0, vmax=1.4, aspect="auto")
    cols = [f"c{j}" for j in range(context_length)] + [f"#{i}" for i in range(N)]
    ax_mask.set_xticks(range(context_length + N), cols, fontsize=7, rotation=90)
    ax_mask.set_yticks(range(N), [f"#{i} {labels[i]}" for i in range(N)], fontsize=7)
    if context_length:
        ax_mask.axvline(context_length - 0.5, color="k", lw=1)
    ax_mask.set_title("attention mask (row attends to column)", fontsize=9)
    return fig

"""Diagrams of the drafters' architectures (lesson 5): Medusa's heads and EAGLE's head side by side.

Drawn with matplotlib patches on a :class:`~specbook.teach.plots.LessonFigure`, like the other
lesson figures; no data, only the picture of what reads what.
"""
from __future__ import annotations

from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from .plots import lesson_axes

__all__ = ["draw_medusa_eagle"]


def draw_medusa_eagle(num_heads: int = 3, ax=None) -> Figure:
    """Medusa (Cai et al., 2024) and EAGLE (Li et al., 2024) side by side, as block diagrams.

    Left: the target reads x_1..x_t; its last feature z_t feeds ``num_heads`` Medusa heads at once,
    head k guessing x_{t+k+1} (k tokens after the target's own next token x_{t+1}), none seeing
    another's guess.  Right: EAGLE's one-layer head reads the pair (z_t, x_{t+1}) and predicts the
    next feature, which with the token drafted from it forms the next pair: an autoregressive chain.
    """
    if not isinstance(num_heads, int) or not 1 <= num_heads <= 6:
        raise ValueError(f"num_heads must be an int in 1..6, got {num_heads!r}")
    fig, ax = lesson_axes(ax, 10.0, 4.2)
    ax.set_xlim(0, 20)
    ax.set_ylim(0, 9)
    ax.axis("off")

    def box(x, y, w, h, text, colour):
        ax.add_patch(Rectangle((x, y), w, h, facecolor=colour, edgecolor="black", lw=0.8))
        ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=7)

    def arrow(x0, y0, x1, y1):
        ax.annotate("", (x1, y1), (x0, y0), arrowprops=dict(arrowstyle="->", lw=0.8))

    for left, title in ((0.0, "Medusa: K heads on one feature, in parallel"),
                        (10.5, "EAGLE: one head, autoregressive on features")):
        ax.text(left + 4.5, 8.6, title, ha="center", fontsize=9, weight="bold")
        box(left + 0.5, 0.4, 8.0, 1.2, "target (frozen): x_1 … x_t  →  30 blocks", "#dddddd")
        box(left + 0.5, 2.2, 3.0, 1.0, "z_t (last feature)", "#cfe3f7")
        box(left + 5.5, 2.2, 3.0, 1.0, "LM head → x_{t+1}", "#dddddd")
        arrow(left + 2.0, 1.6, left + 2.0, 2.2)
        arrow(left + 7.0, 1.6, left + 7.0, 2.2)
    for k in range(1, num_heads + 1):  # Medusa: every head reads z_t
        x = 0.3 + (k - 1) * 8.6 / num_heads
        box(x, 4.6, 8.6 / num_heads - 0.3, 1.1, f"head {k}\n→ x_{{t+{k + 1}}}", "#fde2c8")
        arrow(2.0, 3.2, x + 4.3 / num_heads, 4.6)
    ax.text(4.5, 6.4, "guesses cannot see each other:\ntop-s of each head form a tree", ha="center", fontsize=7)
    for j in range(3):  # EAGLE: the pair (feature, next token) -> next feature, fed back
        y = 4.0 + 1.5 * j
        box(11.0, y, 3.6, 1.0, f"[ẑ_{{t+{j}}} ; e(x_{{t+{j + 1}}})]" if j else "[z_t ; e(x_{t+1})]", "#cfe3f7")
        box(15.3, y, 3.6, 1.0, f"1 layer → ẑ_{{t+{j + 1}}} → x_{{t+{j + 2}}}", "#d5f0d5")
        arrow(14.6, y + 0.5, 15.3, y + 0.5)
        if j < 2:
            arrow(17.1, y + 1.0, 12.8, y + 1.5)
    arrow(12.5, 3.2, 12.8, 4.0)
    arrow(17.0, 3.2, 12.8, 4.0)
    return fig

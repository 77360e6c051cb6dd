"""specbook.teach.plots: each figure draws the library's numbers, refuses bad input, renders to PNG;
scripts/make_figures.py writes one picture per lesson."""
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from matplotlib.collections import PathCollection
from matplotlib.figure import Figure
from matplotlib.patches import Rectangle

from specbook import roofline, theory
from specbook.drafters import DraftModelDrafter
from specbook.teach import plots, rules
from specbook.teach.trace import trace_speculative
from specbook.toy import make_toy_pair
from specbook.tree_attention import attention_mask
from specbook.tree_paths import from_paths

REPO = Path(__file__).resolve().parents[2]
PNG = b"\x89PNG\r\n\x1a\n"


def bar_heights(ax):
    return [p.get_height() for p in ax.patches if isinstance(p, Rectangle)]


def test_figures_render_to_png_and_show_themselves_in_jupyter():
    fig = plots.plot_yield()
    assert isinstance(fig, plots.LessonFigure)
    png = plots.figure_to_png(fig)
    assert png.startswith(PNG) and fig._repr_png_().startswith(PNG)
    assert plots.figure_to_png(plots.plot_yield()) == png  # deterministic bytes (figures are committed)
    with pytest.raises(ValueError, match="Figure"):
        plots.figure_to_png("not a figure")


def test_plot_yield_draws_the_yield_table():
    alphas = (0.5, 0.7, 0.9)
    fig = plots.plot_yield(alphas, max_gamma=10)
    ax = fig.axes[0]
    curves = [line for line in ax.lines if line.get_marker() == "o"]
    table = theory.yield_table(alphas, np.arange(11))
    assert len(curves) == 3
    for line, row in zip(curves, table):
        np.testing.assert_allclose(line.get_ydata(), row)
    limits = sorted(line.get_ydata()[0] for line in ax.lines if line.get_linestyle() == ":")
    np.testing.assert_allclose(limits, [2.0, 1 / 0.3, 10.0])
    with pytest.raises(ValueError, match="max_gamma"):
        plots.plot_yield(max_gamma=0)
    with pytest.raises(ValueError, match="alpha"):
        plots.plot_yield(alphas=(1.5,))


def test_plot_speedup_marks_the_optimal_gamma():
    fig = plots.plot_speedup(0.8, cs=(0.05, 0.3), max_gamma=16)
    ax = fig.axes[0]
    marks = [c.get_offsets()[0].tolist() for c in ax.collections if isinstance(c, PathCollection)]
    want = [list(theory.optimal_gamma(0.8, c, max_gamma=16)) for c in (0.05, 0.3)]
    np.testing.assert_allclose(marks, want)


def test_plot_break_even_draws_break_even_cost():
    fig = plots.plot_break_even(gammas=(2, 4))
    ax = fig.axes[0]
    # the count first: a zip over no lines would check nothing and pass
    assert [line.get_label() for line in ax.lines] == ["γ = 2", "γ = 4"]
    for line, g in zip(ax.lines, (2, 4), strict=True):
        assert len(line.get_xdata()) > 1
        np.testing.assert_allclose(line.get_ydata(), theory.break_even_cost(line.get_xdata(), g))


def test_plot_laws_and_bias_bars_are_the_laws():
    setup = rules.position_setup()
    laws = {name: r.law(setup) for name, r in rules.RULES.items()}
    heights = bar_heights(plots.plot_laws(setup.target_probs, laws).axes[0])
    V, k = len(setup.target_probs), len(laws) + 1
    np.testing.assert_allclose(heights[:V], setup.target_probs)
    for i, law in enumerate(laws.values(), start=1):
        np.testing.assert_allclose(heights[i * V:(i + 1) * V], law)
    assert len(heights) == k * V
    bias = bar_heights(plots.plot_bias(setup.target_probs, laws).axes[0])
    np.testing.assert_allclose(bias[:V], 0.0, atol=1e-15)  # the correct rule: no bias at all
    with pytest.raises(ValueError, match="entries"):
        plots.plot_laws(setup.target_probs, {"short": [0.5, 0.5]})
    with pytest.raises(ValueError, match="non-negative"):
        plots.plot_bias([0.5, -0.5], {})


def test_plot_emission_shows_frequencies():
    fig = plots.plot_emission([0.5, 0.25, 0.25], [10, 30, 60], law=[0.2, 0.3, 0.5], title="t")
    np.testing.assert_allclose(bar_heights(fig.axes[0]), [0.1, 0.3, 0.6])
    with pytest.raises(ValueError, match="counts"):
        plots.plot_emission([0.5, 0.5], [1, 2, 3])
    with pytest.raises(ValueError, match="observation"):
        plots.plot_emission([0.5, 0.5], [0, 0])
    with pytest.raises(ValueError, match="law"):
        plots.plot_emission([0.5, 0.5], [1, 1], law=[1.0])


def test_plot_trace_colours_every_token():
    target, draft = make_toy_pair(8, 1, match=0.7, seed=0)
    trace = trace_speculative(target, DraftModelDrafter(draft), [0], 40, gamma=4,
                              generator=torch.Generator().manual_seed(1))
    fig = plots.plot_trace(trace, token_names="abcdefgh", max_steps=6)
    ax = fig.axes[0]
    boxes = [p for p in ax.patches if isinstance(p, Rectangle)]
    kinds = [k for s in trace.steps[:6] for _, k in s.kinds()]
    assert len(boxes) == len(kinds)
    colours = {tuple(np.round(b.get_facecolor()[:3], 3)) for b in boxes}
    assert len(colours) == len(set(kinds))
    assert [t.get_gid() for t in ax.texts] == kinds
    with pytest.raises(ValueError, match="Trace"):
        plots.plot_trace([1, 2, 3])


def test_plot_roofline_and_explorer_and_curves():
    rows = roofline.roofline_rows()
    ax = plots.plot_roofline(rows).axes[0]
    np.testing.assert_allclose([p.get_width() for p in ax.patches], [r["intensity"] for r in rows])
    with pytest.raises(ValueError, match="rows"):
        plots.plot_roofline([])
    ax = plots.plot_explorer(0.8, 4, 0.05, 1.0).axes[0]
    np.testing.assert_allclose(ax.lines[0].get_ydata(), theory.expected_tokens(0.8, np.arange(17)))
    np.testing.assert_allclose(ax.lines[1].get_ydata(), theory.speedup(0.8, np.arange(17), 0.05))
    fig = plots.plot_curves([1, 2], {"a": [3, 4]}, "x", "y", title="t")
    assert isinstance(fig, Figure)
    with pytest.raises(ValueError, match="points"):
        plots.plot_curves([1, 2], {"a": [3]}, "x", "y")


def test_make_figures_writes_one_png_per_lesson(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["make_figures.py", "--out", str(tmp_path)])
    runpy.run_path(str(REPO / "scripts" / "make_figures.py"), run_name="__main__")
    written = sorted(p.name for p in tmp_path.glob("*.png"))
    assert written == ["lesson1_loop.png", "lesson2_rules.png", "lesson3_yield.png"]
    for name in written:
        assert (tmp_path / name).read_bytes().startswith(PNG)
        assert (REPO / "docs" / "figures" / name).exists(), f"docs/figures/{name} is not committed"


def test_draw_tree_shows_tree_and_mask():
    tree = from_paths([[0], [1], [0, 0], [0, 1], [1, 0], [0, 0, 0]])
    fig = plots.draw_tree(tree.parents, tokens=["the", "a", "cat", "dog", "big", "sat"], context_length=2,
                          accepted=[0, 2, 5])
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    shown = fig.axes[1].images[0].get_array()
    assert (shown == attention_mask(tree.parents, 2).numpy()).all()
    with pytest.raises(ValueError, match="accepted"):
        plots.draw_tree(tree.parents, accepted=[0, 4])
    with pytest.raises(ValueError, match="labels"):
        plots.draw_tree(tree.parents, tokens=["x"])

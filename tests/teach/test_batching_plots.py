"""Lesson 6's pictures (specbook.teach.batching_plots): each checks its input, docs_figures writes the page's three."""
import pytest

from specbook import roofline
from specbook.teach.batching_plots import (docs_figures, plot_classic_roofline, plot_frontier, plot_ridge_and_crossover,
                                           plot_speedup_curves, plot_throughput_curves)


def test_curve_and_frontier_pictures_check_their_input():
    fig = plot_throughput_curves([1, 2, 4], {"plain": [1, 2, 3], "γ=4": [2, 3, 2]}, marks={"crossover": 4})
    assert fig.axes[0].get_xscale() == "log"
    with pytest.raises(ValueError, match="curves"):
        plot_throughput_curves([1, 2, 4], {"plain": [1, 2]})
    with pytest.raises(ValueError, match="batch_sizes"):
        plot_throughput_curves([], {})
    fig = plot_frontier({"plain": ([10, 12], [100, 180], [1, 2])}, slo_ms=11)
    assert len(fig.axes[0].lines) == 2


def test_lesson_pictures_check_their_input(tmp_path):
    hw = roofline.PRESETS["H100 SXM"]
    fig = plot_classic_roofline(hw, "bfloat16", {"plain": (8.96e11, 1.4e10), "verify": (4.48e12, 1.4e10)})
    ax = fig.axes[0]
    assert ax.get_xscale() == "log" and len(ax.get_legend().get_texts()) == 2
    assert "4.53 ms" in ax.get_legend().get_texts()[1].get_text()  # the step time max(FLOPs/peak, bytes/bandwidth)
    with pytest.raises(ValueError, match="steps"):
        plot_classic_roofline(hw, "bfloat16", {})
    with pytest.raises(ValueError, match="steps"):
        plot_classic_roofline(hw, "bfloat16", {"plain": (0, 1e9)})
    fig = plot_ridge_and_crossover([1, 64, 256], [1.0, 1.08, 4.3], [2.8, 2.6, 0.7], ridge_batch=60, crossover=187,
                                   threshold=3.16)
    assert len(fig.axes) == 2
    with pytest.raises(ValueError, match="verify_costs"):
        plot_ridge_and_crossover([1, 2], [1.0], [1.0, 1.0], ridge_batch=1, crossover=None, threshold=1.0)
    fig = plot_speedup_curves([1, 2, 4], {"a": [2, 1.5, 0.9]}, {"a": 4})
    assert fig.axes[0].get_xscale() == "log"
    with pytest.raises(ValueError, match="curves"):
        plot_speedup_curves([1, 2, 4], {"a": [2, 1.5]})
    with pytest.raises(ValueError, match="folder"):
        docs_figures(tmp_path / "missing")
    written = docs_figures(tmp_path)
    assert sorted(p.name for p in written) == ["lesson6_ridge_crossover.png", "lesson6_roofline.png",
                                               "lesson6_terms.png"]
    assert all(p.read_bytes().startswith(b"\x89PNG") for p in written)

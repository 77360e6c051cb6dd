"""Lesson 6's pictures, batching versus speculation: the roofline of one step, the ridge batch
against the crossover, speedup and throughput against batch size, the latency-throughput
frontier; and :func:`docs_figures`, the pictures ``docs/batching.md`` shows.

Every number drawn comes from :mod:`specbook.roofline` or from the caller; these functions only
draw.  :class:`specbook.teach.batching.BatchingExplorer` draws its figure with two of them.

Shape legend: N number of batch sizes on a curve.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np
from matplotlib.ticker import FuncFormatter

from .. import roofline
from ..theory import expected_tokens as theory_expected_tokens
from .plots import figure_to_png, new_figure

__all__ = ["plot_roofline_steps", "plot_classic_roofline", "plot_ridge_and_crossover", "plot_speedup_curves",
           "plot_throughput_curves", "plot_frontier", "docs_figures"]

PLAIN, SPEC = "#4c72b0", "#dd8452"
# Plain-text tick labels: the default 10^k labels go through mathtext, which costs about a
# second per redraw of the explorer.
_PLAIN_TICKS = FuncFormatter(lambda v, _pos: f"{v:.0e}" if v >= 1e5 or v < 0.01 else f"{v:g}")


def _plain_ticks(ax) -> None:
    ax.minorticks_off()  # minor ticks over many decades also make the picture slow to draw
    ax.xaxis.set_major_formatter(_PLAIN_TICKS)
    ax.yaxis.set_major_formatter(_PLAIN_TICKS)


def _axes(ax, width: float, height: float):
    """``ax``, or the one axes of a new figure of that size."""
    return new_figure(width, height).add_subplot() if ax is None else ax


def _batch_sizes(batch_sizes) -> np.ndarray:
    """The x values of a curve against batch size, (N,) floats; ValueError unless sizes >= 1."""
    bs = np.asarray(list(batch_sizes), dtype=np.float64)  # (N,)
    if bs.ndim != 1 or bs.size == 0 or np.any(bs < 1):
        raise ValueError(f"batch_sizes must be a non-empty list of sizes >= 1, got {batch_sizes!r}")
    return bs


def _curves(bs: np.ndarray, curves: dict) -> dict[str, np.ndarray]:
    """{label: (N,) values}, one value per batch size each; ValueError naming the curve otherwise."""
    out = {}
    for label, ys in curves.items():
        ys = np.asarray(ys, dtype=np.float64)
        if ys.shape != bs.shape:
            raise ValueError(f"curves[{label!r}] must have one value per batch size, got shape {ys.shape}")
        out[label] = ys
    return out


def _against_batch(ax, *, xlabel: str, ylabel: str, title: str = "") -> None:
    """The x axis of a picture against batch size (log2), its labels, title and legend."""
    ax.set_xscale("log", base=2)
    _plain_ticks(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)


def plot_roofline_steps(hw: roofline.Hardware, dtype: str, batch: int, gamma: int, params: float,
                        dtype_bytes: float, ax=None):
    """Attainable flop/s against intensity (log-log) with the plain and the verify step marked."""
    ax = _axes(ax, 5.2, 3.6)
    peak, ridge = hw.peak(dtype), roofline.ridge(hw, dtype)
    xs = np.logspace(-1, np.log10(max(8 * ridge, 4 * batch * (gamma + 1))), 200)  # (N,)
    ax.loglog(xs, np.minimum(peak, hw.bandwidth * xs), color="0.2", lw=2, label=f"{hw.name}, {dtype}")
    ax.axvline(ridge, color="0.5", ls=":", lw=1)
    ax.annotate(f"ridge {ridge:.0f}", (ridge, peak), textcoords="offset points", xytext=(4, -12), fontsize=8)
    for g, colour, label in ((0, PLAIN, f"plain, B={batch}"), (gamma, SPEC, f"verify, B={batch}, γ={gamma}")):
        x = roofline.step_intensity(batch, g, params, dtype_bytes)
        ax.plot([x], [min(peak, hw.bandwidth * x)], "o", color=colour, ms=8, label=f"{label}: {x:.0f} FLOP/B")
    _plain_ticks(ax)
    ax.set_xlabel("arithmetic intensity (FLOP per byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.legend(fontsize=7, loc="lower right")
    return ax.figure


def plot_classic_roofline(hw: roofline.Hardware, dtype: str, steps: dict, ax=None, *, title: str = ""):
    """The roofline picture: attainable FLOP/s against arithmetic intensity (log-log).

    The bandwidth slope (FLOP/s = bandwidth x intensity) meets the compute roof (peak FLOP/s) at the
    ridge, peak / bandwidth.  ``steps`` = {label: (flops, bytes)} marks each step at its intensity
    flops / bytes, on the roof, with its time max(flops / peak, bytes / bandwidth).
    """
    if not isinstance(steps, dict) or not steps:
        raise ValueError(f"steps must be a non-empty dict {{label: (flops, bytes)}}, got {steps!r}")
    for label, pair in steps.items():
        if (not isinstance(pair, (tuple, list)) or len(pair) != 2
                or not all(isinstance(v, (int, float)) and v > 0 for v in pair)):
            raise ValueError(f"steps[{label!r}] must be (flops > 0, bytes > 0), got {pair!r}")
    ax = _axes(ax, 6.4, 4.2)
    peak, bandwidth, ridge = hw.peak(dtype), hw.bandwidth, roofline.ridge(hw, dtype)
    points = {label: flops / nbytes for label, (flops, nbytes) in steps.items()}
    low = min(0.1, min(points.values()) / 2)
    high = max(10 * ridge, 2 * max(points.values()))
    xs = np.logspace(np.log10(low), np.log10(high), 200)  # (N,)
    ax.loglog(xs, np.minimum(peak, bandwidth * xs), color="0.15", lw=2.5)
    ax.loglog(xs[xs > ridge], bandwidth * xs[xs > ridge], color="0.6", lw=1, ls="--")  # the slope, were there no roof
    ax.axvline(ridge, color="crimson", ls=":", lw=1.2)
    ax.annotate(f"ridge = peak / bandwidth\n= {ridge:.0f} FLOP per byte", (ridge, peak / 30), xytext=(6, 0),
                textcoords="offset points", fontsize=8, color="crimson")
    ax.annotate(f"compute roof: {peak / 1e12:g} TFLOP/s", (ridge * 1.4, peak), xytext=(0, 4),
                textcoords="offset points", fontsize=8)
    slope_x = max(low * 4, ridge / 300)
    ax.annotate(f"memory-bound:\nbandwidth x intensity\n({bandwidth / 1e12:g} TB/s)", (slope_x, bandwidth * slope_x),
                xytext=(-2, 10), textcoords="offset points", fontsize=8, rotation=28, rotation_mode="anchor")
    colours = [PLAIN, SPEC, "#55a868", "#8172b2", "#937860"]
    for i, (label, (flops, nbytes)) in enumerate(steps.items()):
        x = points[label]
        seconds = max(flops / peak, nbytes / bandwidth)
        ax.plot([x], [min(peak, bandwidth * x)], "o", color=colours[i % len(colours)], ms=8,
                label=f"{label}: {x:.0f} FLOP/B, {1e3 * seconds:.2f} ms")
    _plain_ticks(ax)
    ax.set_xlabel("arithmetic intensity (FLOP per byte moved)")
    ax.set_ylabel("attainable FLOP/s")
    ax.set_title(title or f"{hw.name}, {dtype}", fontsize=9)
    ax.legend(fontsize=7, loc="lower right")
    return ax.figure


def plot_ridge_and_crossover(batch_sizes: Sequence[int], verify_costs: Sequence[float], speedups: Sequence[float], *,
                             ridge_batch: int, crossover: int | None, threshold: float, title: str = ""):
    """Two panels against batch size: the verify cost v_B(gamma + 1) with the line E - gamma c it must
    stay under, and the speedup with the line 1.  The ridge batch (where v_B leaves 1) and the
    crossover (where v_B passes E - gamma c, the speedup 1) are marked as the two different points they are.
    """
    bs = _batch_sizes(batch_sizes)  # (N,)
    v = np.asarray(list(verify_costs), dtype=np.float64)  # (N,)
    s = np.asarray(list(speedups), dtype=np.float64)  # (N,)
    if v.shape != bs.shape or s.shape != bs.shape:
        raise ValueError(f"verify_costs and speedups need one value per batch size, got {v.shape}, {s.shape}")
    fig = new_figure(10.0, 3.6)
    left, right = fig.subplots(1, 2)
    left.plot(bs, v, color=SPEC, lw=2, label="v_B(γ+1): verify step / plain step")
    left.axhline(threshold, color="0.3", ls="--", lw=1, label=f"E − γc = {threshold:.2f}")
    right.plot(bs, s, color=SPEC, lw=2, label="speedup")
    right.axhline(1.0, color="0.3", ls="--", lw=1, label="plain decoding")
    for ax in (left, right):
        ax.axvline(ridge_batch, color="0.5", ls=":", lw=1.2)
        ax.annotate(f"ridge batch {ridge_batch}", (ridge_batch, 0.97), xycoords=("data", "axes fraction"),
                    xytext=(3, -10), textcoords="offset points", fontsize=8)
        if crossover is not None:
            ax.axvline(crossover, color="crimson", ls=":", lw=1.2)
            ax.annotate(f"crossover {crossover}", (crossover, 0.85), xycoords=("data", "axes fraction"),
                        xytext=(3, -10), textcoords="offset points", fontsize=8, color="crimson")
        ax.set_xscale("log", base=2)
        _plain_ticks(ax)
        ax.set_xlabel("batch size B")
        ax.legend(fontsize=7, loc="upper left" if ax is left else "lower left")
    left.set_ylabel("verify cost (plain steps)")
    right.set_ylabel("speculative / plain throughput")
    if title:
        fig.suptitle(title, fontsize=9)
    return fig


def plot_speedup_curves(batch_sizes: Sequence[int], curves: dict, crossovers: dict | None = None, ax=None, *,
                        title: str = ""):
    """Speedup against batch size, one line per model variant (``curves`` = {label: (N,) speedups}),
    the line 1 (plain decoding), and a dot where each variant's ``crossovers[label]`` lies."""
    bs = _batch_sizes(batch_sizes)  # (N,)
    ax = _axes(ax, 6.4, 4.0)
    ax.axhline(1.0, color="0.3", ls="--", lw=1)
    for label, ys in _curves(bs, curves).items():
        line, = ax.plot(bs, ys, lw=1.6, label=label)
        cross = (crossovers or {}).get(label)
        if cross is not None:
            ax.plot([cross], [1.0], "o", color=line.get_color(), ms=6)
    _against_batch(ax, xlabel="batch size B", ylabel="speedup over plain decoding", title=title)
    return ax.figure


def plot_throughput_curves(batch_sizes: Sequence[int], curves: dict, ax=None, *, ylabel="tokens/s, all rows",
                           marks: dict | None = None, title: str = "", logy: bool = False):
    """Throughput against batch size (log2 x): ``curves`` = {label: (N,) values}, one line each.

    ``marks`` = {label: batch} draws a vertical line (the current batch, a crossover).
    """
    bs = _batch_sizes(batch_sizes)  # (N,)
    ax = _axes(ax, 5.2, 3.6)
    for label, ys in _curves(bs, curves).items():
        style = "--" if "predicted" in label else "-"
        ax.plot(bs, ys, style, marker="o", ms=3, label=label)
    for label, b in (marks or {}).items():
        if b is not None:
            ax.axvline(b, color="0.4", ls=":", lw=1)
            ax.annotate(label, (b, ax.get_ylim()[1]), textcoords="offset points", xytext=(3, -12), fontsize=8)
    if logy:
        ax.set_yscale("log")
    _against_batch(ax, xlabel="batch size (live rows)", ylabel=ylabel, title=title)
    return ax.figure


def plot_frontier(points: dict, ax=None, *, slo_ms: float | None = None):
    """Latency-throughput frontier: ``points`` = {label: (ms_per_token (N,), tokens_per_s (N,), batches (N,))}.

    With ``slo_ms`` a vertical line marks the latency budget: the best point left of it wins.
    """
    ax = _axes(ax, 5.2, 3.6)
    for label, (ms, tps, batches) in points.items():
        ax.plot(ms, tps, marker="o", ms=4, label=label)
        for x, y, b in zip(ms, tps, batches):
            ax.annotate(f"{b}", (x, y), textcoords="offset points", xytext=(3, 3), fontsize=7)
    if slo_ms is not None:
        ax.axvline(slo_ms, color="crimson", ls="--", lw=1, label=f"SLO {slo_ms:g} ms/token")
    ax.set_xlabel("latency: ms between a row's tokens")
    ax.set_ylabel("throughput: tokens/s, all rows")
    ax.legend(fontsize=7)
    return ax.figure


# ----------------------------------------------------------------------------- the pictures of docs/batching.md

def docs_figures(folder) -> list:
    """Write lesson 6's three roofline pictures of the 7B example on an H100 (``lesson6_*.png``) into ``folder``:

        python -c "from specbook.teach.batching_plots import docs_figures; docs_figures('docs/figures')"

    Pure arithmetic on the presets (no measurement), so a rerun writes the same pictures.
    """
    from pathlib import Path

    out = Path(folder)
    if not out.is_dir():
        raise ValueError(f"folder must be an existing directory, got {folder!r}")
    hw, model, gamma, alpha, c = roofline.PRESETS["H100 SXM"], roofline.MODELS["7B"], 4, 0.8, 0.05
    steps = {f"{label}, B = 64": (2 * model.params * 64 * n, 2 * model.params)
             for label, n in (("plain step", 1), (f"verify step, γ = {gamma}", gamma + 1))}
    sizes = sorted({round(2 ** (k / 8)) for k in range(8 * 10 + 1)})  # 1..1024, eight per doubling
    plain = [roofline.predict(hw, "bfloat16", b, gamma, alpha, c, model.params, 2) for b in sizes]
    search = range(1, 4097)
    ladder = [("weights only (the plain roofline)", dict(draft=c)),
              ("+ KV cache, 512 tokens per row", dict(draft=c, context=512)),
              ("+ the draft's own step", dict(draft=roofline.MODELS["draft 0.35B"], context=512)),
              ("+ a static batch of 256 tokens per row", dict(draft=roofline.MODELS["draft 0.35B"], context=512,
                                                              new_tokens=256)),
              ("+ kernels at 60% / 90% of the peaks", dict(draft=roofline.MODELS["draft 0.35B"], context=512,
                                                          new_tokens=256, compute_efficiency=0.6,
                                                          bandwidth_efficiency=0.9))]
    curves = {name: [roofline.serving_predict(hw, "bfloat16", b, gamma, alpha, model, kv_reads="per_position",
                                              **terms).speedup for b in sizes] for name, terms in ladder}
    crossings = {name: roofline.serving_crossover(hw, "bfloat16", gamma, alpha, model, search, kv_reads="per_position",
                                                  **terms) for name, terms in ladder}
    figures = {
        "lesson6_roofline.png": plot_classic_roofline(hw, "bfloat16", steps,
                                                      title="H100 SXM, bfloat16: a 7B model at batch 64"),
        "lesson6_ridge_crossover.png": plot_ridge_and_crossover(
            sizes, [p.verify_cost for p in plain], [p.speedup for p in plain],
            ridge_batch=roofline.ridge_batch(hw, "bfloat16", gamma, 2),
            crossover=roofline.predicted_crossover(hw, "bfloat16", model.params, 2, alpha, gamma, c, search),
            threshold=float(theory_expected_tokens(alpha, gamma)) - gamma * c,
            title="H100 SXM, bfloat16, 7B, γ = 4, α = 0.8, c = 0.05: the plain roofline"),
        "lesson6_terms.png": plot_speedup_curves(
            sizes, curves, crossings, title="H100, 7B, γ = 4, α = 0.8: the terms one after another (cache read per "
                                            "position)"),
    }
    written = []
    for name, fig in figures.items():
        (out / name).write_bytes(figure_to_png(fig))
        written.append(out / name)
    return written

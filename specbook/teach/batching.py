"""Lesson 6, batching versus speculation: the roofline explorer and its pictures.

:class:`BatchingExplorer` puts :mod:`specbook.roofline` under sliders: batch size B, draft
length gamma, acceptance alpha, draft cost c, a hardware preset and a dtype give the verify
step's arithmetic intensity, its share of the ridge, and the predicted throughput and
per-token latency with and without speculation (Leviathan et al. 2023, Thm 3.8, with the
verify cost v_B(gamma + 1) read off the roofline at that batch), plus the predicted crossover
batch.  Like the explorers in :mod:`specbook.teach.widgets`, setting a control from Python
recomputes synchronously, and the figure is an Agg PNG in an ``ipywidgets.Image``.

Out-of-range values are refused, never clamped: the constructor, :meth:`BatchingExplorer.set`
and a direct ``explorer.batch.value = ...`` all raise ``ValueError`` naming the control.

Shape legend: N number of batch sizes on a curve.
"""
from __future__ import annotations

import html
from typing import Sequence

import ipywidgets as w
import numpy as np
from matplotlib.ticker import FuncFormatter
from traitlets import validate

from .. import roofline
from ..theory import expected_tokens as theory_expected_tokens
from .plots import figure_to_png, new_figure

__all__ = ["BatchingExplorer", "plot_roofline_steps", "plot_classic_roofline", "plot_ridge_and_crossover",
           "plot_speedup_curves", "plot_throughput_curves", "plot_frontier", "docs_figures"]

_CSS = ("<style>.specbook-batching-table td{font-family:monospace;text-align:right;padding:2px 8px}"
        ".specbook-batching-table th{text-align:left;padding:2px 8px}</style>")
PLAIN, SPEC = "#4c72b0", "#dd8452"
# Plain-text tick labels: the default 10^k labels go through mathtext, which costs about a
# second per redraw of the explorer.
_PLAIN_TICKS = FuncFormatter(lambda v, _pos: f"{v:.0e}" if v >= 1e5 or v < 0.01 else f"{v:g}")


def _plain_ticks(ax) -> None:
    ax.minorticks_off()  # minor ticks over many decades also make the picture slow to draw
    ax.xaxis.set_major_formatter(_PLAIN_TICKS)
    ax.yaxis.set_major_formatter(_PLAIN_TICKS)


# ----------------------------------------------------------------------------- controls that refuse

def _refuse_outside(name: str):
    @validate("value")
    def _validate_value(self, proposal):
        value = proposal["value"]
        if not self.min <= value <= self.max:
            raise ValueError(f"{name} must lie in [{self.min}, {self.max}], got {value!r}")
        return value
    return _validate_value


def _strict(base, name: str, value, lo, hi, **kwargs):
    """A ``base`` slider over [lo, hi] holding ``value``; ValueError naming ``name`` if outside."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not lo <= value <= hi:
        raise ValueError(f"{name} must lie in [{lo}, {hi}], got {value!r}")
    if base is w.IntSlider and value != int(value):
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")
    cls = type(f"Strict{base.__name__}", (base,), {"_validate_value": _refuse_outside(name)})
    return cls(value=value, min=lo, max=hi, **kwargs)


# ----------------------------------------------------------------------------- pictures

def plot_roofline_steps(hw: roofline.Hardware, dtype: str, batch: int, gamma: int, params: float,
                        dtype_bytes: float, ax=None):
    """Attainable flop/s against intensity (log-log) with the plain and the verify step marked."""
    if ax is None:
        fig = new_figure(5.2, 3.6)
        ax = fig.add_subplot()
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
    if ax is None:
        fig = new_figure(6.4, 4.2)
        ax = fig.add_subplot()
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
    bs = np.asarray(list(batch_sizes), dtype=np.float64)  # (N,)
    v = np.asarray(list(verify_costs), dtype=np.float64)  # (N,)
    s = np.asarray(list(speedups), dtype=np.float64)  # (N,)
    if bs.ndim != 1 or bs.size == 0 or np.any(bs < 1):
        raise ValueError(f"batch_sizes must be a non-empty list of sizes >= 1, got {batch_sizes!r}")
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
    bs = np.asarray(list(batch_sizes), dtype=np.float64)  # (N,)
    if bs.ndim != 1 or bs.size == 0 or np.any(bs < 1):
        raise ValueError(f"batch_sizes must be a non-empty list of sizes >= 1, got {batch_sizes!r}")
    if ax is None:
        fig = new_figure(6.4, 4.0)
        ax = fig.add_subplot()
    ax.axhline(1.0, color="0.3", ls="--", lw=1)
    for label, ys in curves.items():
        ys = np.asarray(ys, dtype=np.float64)
        if ys.shape != bs.shape:
            raise ValueError(f"curves[{label!r}] must have one value per batch size, got shape {ys.shape}")
        line, = ax.plot(bs, ys, lw=1.6, label=label)
        cross = (crossovers or {}).get(label)
        if cross is not None:
            ax.plot([cross], [1.0], "o", color=line.get_color(), ms=6)
    ax.set_xscale("log", base=2)
    _plain_ticks(ax)
    ax.set_xlabel("batch size B")
    ax.set_ylabel("speedup over plain decoding")
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return ax.figure


def plot_throughput_curves(batch_sizes: Sequence[int], curves: dict, ax=None, *, ylabel="tokens/s, all rows",
                           marks: dict | None = None, title: str = "", logy: bool = False):
    """Throughput against batch size (log2 x): ``curves`` = {label: (N,) values}, one line each.

    ``marks`` = {label: batch} draws a vertical line (the current batch, a crossover).
    """
    bs = np.asarray(list(batch_sizes), dtype=np.float64)  # (N,)
    if bs.ndim != 1 or bs.size == 0 or np.any(bs < 1):
        raise ValueError(f"batch_sizes must be a non-empty list of sizes >= 1, got {batch_sizes!r}")
    if ax is None:
        fig = new_figure(5.2, 3.6)
        ax = fig.add_subplot()
    for i, (label, ys) in enumerate(curves.items()):
        ys = np.asarray(ys, dtype=np.float64)
        if ys.shape != bs.shape:
            raise ValueError(f"curves[{label!r}] must have one value per batch size, got shape {ys.shape}")
        style = "--" if "predicted" in label else "-"
        ax.plot(bs, ys, style, marker="o", ms=3, label=label)
    for label, b in (marks or {}).items():
        if b is not None:
            ax.axvline(b, color="0.4", ls=":", lw=1)
            ax.annotate(label, (b, ax.get_ylim()[1]), textcoords="offset points", xytext=(3, -12), fontsize=8)
    ax.set_xscale("log", base=2)
    if logy:
        ax.set_yscale("log")
    _plain_ticks(ax)
    ax.set_xlabel("batch size (live rows)")
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7)
    return ax.figure


def plot_frontier(points: dict, ax=None, *, slo_ms: float | None = None):
    """Latency-throughput frontier: ``points`` = {label: (ms_per_token (N,), tokens_per_s (N,), batches (N,))}.

    With ``slo_ms`` a vertical line marks the latency budget: the best point left of it wins.
    """
    if ax is None:
        fig = new_figure(5.2, 3.6)
        ax = fig.add_subplot()
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


# ----------------------------------------------------------------------------- the explorer

class BatchingExplorer:
    """Sliders ``batch``, ``gamma``, ``alpha``, ``c``; dropdowns ``hardware`` and ``dtype``; an HTML
    table (``table``, class ``specbook-batching-table``) and a figure (``plot``).

    Table cells carry ``data-key`` = intensity, ridge, ridge_fraction, plain_tokens_per_s,
    plain_ms_per_token, spec_tokens_per_s, spec_ms_per_token, speedup, verify_cost,
    wasted_fraction, ridge_batch, crossover; each number is :func:`specbook.roofline.predict` (or
    ``ridge_batch``, or ``predicted_crossover`` over batch sizes 1..max_batch) formatted by
    :meth:`format_row`.  The ridge batch and the crossover are two different batches: the first is
    where extra verify positions start to cost time, the second where speculation starts to lose.

    hardware: extra :class:`~specbook.roofline.Hardware` (e.g. this machine, measured) to offer
    beside the presets; params: weights of the model (default 7e9, the course's 7B example).
    """

    KEYS = ("intensity", "ridge", "ridge_fraction", "plain_tokens_per_s", "plain_ms_per_token",
            "spec_tokens_per_s", "spec_ms_per_token", "speedup", "verify_cost", "wasted_fraction", "ridge_batch",
            "crossover")
    MAX_BATCH, MAX_GAMMA = 256, 16

    def __init__(self, batch: int = 1, gamma: int = 4, alpha: float = 0.8, c: float = 0.05,
                 hardware: str = "H100 SXM", dtype: str = "bfloat16", params: float = 7e9,
                 extra_hardware: Sequence[roofline.Hardware] = ()):
        if isinstance(params, bool) or not isinstance(params, (int, float)) or not 0 < params < float("inf"):
            raise ValueError(f"params must be a finite number > 0, got {params!r}")
        self.params = float(params)
        self.machines = dict(roofline.PRESETS)
        for hw in extra_hardware:
            if not isinstance(hw, roofline.Hardware):
                raise ValueError(f"extra_hardware must hold Hardware instances, got {hw!r}")
            self.machines[hw.name] = hw
        if hardware not in self.machines:
            raise ValueError(f"hardware must be one of {sorted(self.machines)}, got {hardware!r}")
        if dtype not in self.machines[hardware].flops or dtype not in roofline.DTYPE_BYTES:
            raise ValueError(f"dtype must be one of {sorted(self.machines[hardware].flops)}, got {dtype!r}")
        style = {"description_width": "130px"}
        layout = w.Layout(width="400px")
        self.batch = _strict(w.IntSlider, "batch", batch, 1, self.MAX_BATCH, step=1, description="batch size B",
                             style=style, layout=layout)
        self.gamma = _strict(w.IntSlider, "gamma", gamma, 0, self.MAX_GAMMA, step=1, description="draft length γ",
                             style=style, layout=layout)
        self.alpha = _strict(w.FloatSlider, "alpha", alpha, 0.0, 1.0, step=0.01, description="acceptance α",
                             readout_format=".2f", style=style, layout=layout)
        self.c = _strict(w.FloatSlider, "c", c, 0.0, 1.0, step=0.01, description="draft cost c",
                         readout_format=".2f", style=style, layout=layout)
        self.hardware = w.Dropdown(options=list(self.machines), value=hardware, description="hardware",
                                   style=style, layout=layout)
        self.dtype = w.Dropdown(options=self._dtypes(hardware), value=dtype, description="dtype",
                                style=style, layout=layout)
        self.table = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(width="820px"))
        controls = w.VBox([self.batch, self.gamma, self.alpha, self.c, self.hardware, self.dtype])
        self.widget = w.VBox([w.HBox([controls, self.table]), self.plot])
        self._values: dict = {}
        self._holding = False  # set() changes several sliders and redraws once
        self.hardware.observe(self._hardware_changed, names="value")
        for control in (self.batch, self.gamma, self.alpha, self.c, self.dtype):
            control.observe(self._changed, names="value")
        self.update()

    def _changed(self, change) -> None:
        if not self._holding:
            self.update()

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)

    def _dtypes(self, name: str) -> list[str]:
        return [d for d in self.machines[name].flops if d in roofline.DTYPE_BYTES]

    def _hardware_changed(self, change) -> None:
        dtypes = self._dtypes(change["new"])
        keep = self.dtype.value if self.dtype.value in dtypes else dtypes[0]
        self._holding = True  # options first (that resets the value), then the dtype we keep
        try:
            self.dtype.options = dtypes
            self.dtype.value = keep
        finally:
            self._holding = False
        self.update()

    def set(self, **values) -> None:
        """Set several controls at once (one redraw); unknown names or bad values raise ValueError."""
        controls = dict(batch=self.batch, gamma=self.gamma, alpha=self.alpha, c=self.c)
        for name, value in values.items():
            if name not in controls:
                raise ValueError(f"set() takes {sorted(controls)}, got {name!r}")
            slider = controls[name]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not slider.min <= value <= slider.max:
                raise ValueError(f"{name} must lie in [{slider.min}, {slider.max}], got {value!r}")
        self._holding = True
        try:
            for name, value in values.items():
                controls[name].value = value
        finally:
            self._holding = False
        self.update()

    def values(self) -> dict:
        """The inputs and every number in the table (floats; batch, gamma, ridge_batch and crossover ints or None)."""
        return dict(self._values)

    def inputs(self) -> dict:
        return dict(batch=int(self.batch.value), gamma=int(self.gamma.value), alpha=float(self.alpha.value),
                    c=float(self.c.value), hardware=self.hardware.value, dtype=self.dtype.value)

    @staticmethod
    def compute(batch, gamma, alpha, c, hw: roofline.Hardware, dtype: str, params: float,
                max_batch: int = MAX_BATCH) -> dict:
        """The table's numbers for these inputs, straight from :mod:`specbook.roofline`."""
        nbytes = roofline.DTYPE_BYTES[dtype]
        p = roofline.predict(hw, dtype, batch, gamma, alpha, c, params, nbytes)
        out = {k: getattr(p, k) for k in BatchingExplorer.KEYS if k not in ("ridge_batch", "crossover")}
        out["ridge_batch"] = roofline.ridge_batch(hw, dtype, gamma, nbytes)
        out["crossover"] = roofline.predicted_crossover(hw, dtype, params, nbytes, alpha, gamma, c,
                                                        range(1, max_batch + 1))
        return out

    @staticmethod
    def format_row(vals: dict) -> dict[str, str]:
        """How each number is written in the table (the browser test compares these strings)."""
        cross = vals["crossover"]
        return {
            "intensity": f"{vals['intensity']:.1f}", "ridge": f"{vals['ridge']:.1f}",
            "ridge_fraction": f"{vals['ridge_fraction']:.1%}",
            "plain_tokens_per_s": f"{vals['plain_tokens_per_s']:.1f}",
            "plain_ms_per_token": f"{vals['plain_ms_per_token']:.3f}",
            "spec_tokens_per_s": f"{vals['spec_tokens_per_s']:.1f}",
            "spec_ms_per_token": f"{vals['spec_ms_per_token']:.3f}",
            "speedup": f"{vals['speedup']:.3f}", "verify_cost": f"{vals['verify_cost']:.3f}",
            "wasted_fraction": f"{vals['wasted_fraction']:.1%}", "ridge_batch": f"{vals['ridge_batch']:d}",
            "crossover": "none" if cross is None else f"{cross:d}",
        }

    def update(self) -> None:
        ins = self.inputs()
        hw = self.machines[ins["hardware"]]
        vals = self.compute(ins["batch"], ins["gamma"], ins["alpha"], ins["c"], hw, ins["dtype"], self.params)
        self._values = {**ins, **vals}
        self.table.value = self._table_html(vals, hw)
        self.plot.value = figure_to_png(self.figure(), dpi=80)

    def figure(self):
        """Left: the roofline with this step's two points. Right: predicted throughput against batch."""
        ins = self.inputs()
        hw, dtype = self.machines[ins["hardware"]], ins["dtype"]
        nbytes = roofline.DTYPE_BYTES[dtype]
        fig = new_figure(10.0, 3.6)
        left, right = fig.subplots(1, 2)
        plot_roofline_steps(hw, dtype, ins["batch"], ins["gamma"], self.params, nbytes, ax=left)
        sizes = [2 ** k for k in range(9)]  # 1..256
        ridge_at = self._values.get("ridge_batch")
        ridge_mark = ridge_at if ridge_at is not None and ridge_at <= sizes[-1] else None
        preds = [roofline.predict(hw, dtype, b, ins["gamma"], ins["alpha"], ins["c"], self.params, nbytes)
                 for b in sizes]
        plot_throughput_curves(sizes, {"plain (predicted)": [p.plain_tokens_per_s for p in preds],
                                       f"γ={ins['gamma']} (predicted)": [p.spec_tokens_per_s for p in preds]},
                               ax=right, logy=True, marks={"B": ins["batch"], "crossover": self._values.get("crossover"),
                                                            "ridge": ridge_mark},
                               title=f"{hw.name}, {dtype}, {self.params / 1e9:g}B parameters, α={ins['alpha']:.2f}")
        return fig

    def _table_html(self, vals: dict, hw: roofline.Hardware) -> str:
        text = self.format_row(vals)
        labels = {
            "intensity": "intensity of the verify step (FLOP/byte)", "ridge": "ridge of this hardware",
            "ridge_fraction": "share of the ridge used", "plain_tokens_per_s": "plain: tokens/s (all rows)",
            "plain_ms_per_token": "plain: ms per token (one row)", "spec_tokens_per_s": "speculative: tokens/s",
            "spec_ms_per_token": "speculative: ms per token", "speedup": "speedup",
            "verify_cost": "verify cost v_B(γ+1)", "wasted_fraction": "rejected share of computed positions",
            "ridge_batch": "verify step reaches the ridge at batch",
            "crossover": "speculation loses from batch (crossover)",
        }
        body = "".join(f'<tr><th>{html.escape(labels[k])}</th><td data-key="{k}">{text[k]}</td></tr>'
                       for k in self.KEYS)
        bound = "compute-bound: extra positions cost time" if vals["ridge_fraction"] >= 1 else \
            "memory-bound: extra positions ride along"
        return (_CSS + f'<table class="specbook-batching-table">{body}</table>'
                f'<div class="specbook-verdict">{html.escape(hw.name)}: {bound}</div>')


# ----------------------------------------------------------------------------- the pictures of docs/batching.md

def docs_figures(folder) -> list:
    """Write lesson 6's three roofline pictures of the 7B example on an H100 (``lesson6_*.png``) into ``folder``:

        python -c "from specbook.teach.batching import docs_figures; docs_figures('docs/figures')"

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

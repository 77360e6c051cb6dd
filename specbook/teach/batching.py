"""Lesson 6, batching versus speculation: the roofline explorer (sliders, a table, a figure).

:class:`BatchingExplorer` puts :mod:`specbook.roofline` under sliders: batch size B, draft
length gamma, acceptance alpha, draft cost c, a hardware preset and a dtype give the verify
step's arithmetic intensity, its share of the ridge, and the predicted throughput and
per-token latency with and without speculation (Leviathan et al. 2023, Thm 3.8, with the
verify cost v_B(gamma + 1) read off the roofline at that batch), plus the predicted crossover
batch.  Like the explorers in :mod:`specbook.teach.widgets`, setting a control from Python
recomputes synchronously, and the figure is an Agg PNG in an ``ipywidgets.Image``.  The figure's
two pictures, and the lesson's others, are drawn by :mod:`specbook.teach.batching_plots`.

Out-of-range values are refused, never clamped: the constructor, :meth:`BatchingExplorer.set`
and a direct ``explorer.batch.value = ...`` all raise ``ValueError`` naming the control.
"""
from __future__ import annotations

import html
from typing import Sequence

import ipywidgets as w
from traitlets import validate

from .. import roofline
from .batching_plots import plot_roofline_steps, plot_throughput_curves
from .plots import figure_to_png, new_figure

__all__ = ["BatchingExplorer"]

_CSS = ("<style>.specbook-batching-table td{font-family:monospace;text-align:right;padding:2px 8px}"
        ".specbook-batching-table th{text-align:left;padding:2px 8px}</style>")


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

"""Interactive explorers for the lessons (ipywidgets 8).

Each explorer is a plain Python object whose controls are public ``ipywidgets``
attributes.  Setting a control from Python (``explorer.alpha.value = 0.8``)
recomputes everything synchronously, so tests drive the widgets without a
browser: set a slider, read :meth:`values` or the HTML table.  Figures are drawn
on the Agg canvas and shown as PNG in an ``ipywidgets.Image``, which renders the
same in JupyterLab, in a saved notebook and in a headless browser.

* :class:`YieldExplorer`  E[tokens], speedup, limit, break-even and optimal gamma
  (:mod:`specbook.theory`) for chosen alpha, gamma, draft cost c and verify cost v.
* :class:`ProofExplorer`  the modified rejection sampler against the naive rules
  and the sampling-parameter bug, at one position of a toy pair: exact laws,
  sampled histograms and chi-square p-values (:mod:`specbook.stats`).
"""
from __future__ import annotations

import html
import math
import numbers

import ipywidgets as w
import torch
import traitlets

from .. import stats, theory
from . import plots, rules

__all__ = ["YieldExplorer", "ProofExplorer"]

MAX_GAMMA = 256  # the widest gamma slider YieldExplorer draws

_CSS = ("<style>.specbook-yield-table td,.specbook-chi2-table td{font-family:monospace;text-align:right;"
        "padding:2px 8px}.specbook-yield-table th,.specbook-chi2-table th{text-align:left;padding:2px 8px}"
        "</style>")


def _check(name: str, value, lo: float, hi: float, *, integer: bool = False, hint: str = ""):
    """``value`` as a float (an int if ``integer``) if it is a number in [lo, hi]; else a clear error.

    The explorers never clamp: a number the user typed is either shown as given or refused.
    """
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind):
        raise TypeError(f"{name} must be {'a whole number' if integer else 'a number'}, got {value!r}")
    if not (lo <= value <= hi):  # also refuses NaN
        span = f"[{lo}, {hi}]" if integer else f"[{lo:g}, {hi:g}]"
        raise ValueError(f"{name} must be in {span}, got {value!r}{hint}")
    return int(value) if integer else float(value)


class _Strict:
    """Mixin for a bounded slider: a value outside [min, max] set from Python raises a ValueError
    naming the control (``argument``) instead of being clamped silently, as ipywidgets would."""

    argument = "value"

    @traitlets.validate("value")
    def _validate_value(self, proposal):
        value = proposal["value"]
        if not (self.min <= value <= self.max):
            raise ValueError(f"{self.argument} must be in [{self.min:g}, {self.max:g}], got {value!r} "
                             "(the slider's range)")
        return value


class StrictFloatSlider(_Strict, w.FloatSlider):
    pass


class StrictIntSlider(_Strict, w.IntSlider):
    pass


def _slider(cls, argument: str, value, lo, hi, *, hint: str = "", **kwargs):
    """A strict slider on [lo, hi] for the constructor argument ``argument``, its ``value`` checked first."""
    value = _check(argument, value, lo, hi, integer=cls is StrictIntSlider, hint=hint)
    slider = cls(value=value, min=lo, max=hi, **kwargs)
    slider.argument = argument
    return slider


class _Explorer:
    widget: w.Widget

    def _repr_mimebundle_(self, **kwargs):
        return self.widget._repr_mimebundle_(**kwargs)


# ----------------------------------------------------------------------------- lesson 3

class YieldExplorer(_Explorer):
    """Sliders ``alpha``, ``gamma``, ``c``, ``v``; an HTML table (``table``) and a plot (``plot``).

    Table cells carry ``data-key`` = expected_tokens, speedup, limit, break_even_alpha,
    optimal_gamma (and optimal_speedup), formatted ``f"{x:.4f}"`` (optimal gamma as an int).
    """

    KEYS = ("expected_tokens", "speedup", "limit", "break_even_alpha", "optimal_gamma", "optimal_speedup")

    def __init__(self, alpha: float = 0.8, gamma: int = 4, c: float = 0.05, v: float = 1.0, max_gamma: int = 16):
        self.max_gamma = _check("max_gamma", max_gamma, 1, MAX_GAMMA, integer=True)
        style = {"description_width": "150px"}
        layout = w.Layout(width="420px")
        self.alpha = _slider(StrictFloatSlider, "alpha", alpha, 0.0, 0.99, step=0.01, description="acceptance α",
                             readout_format=".2f", style=style, layout=layout,
                             hint=" (at alpha = 1 every draft is accepted and E[tokens] = gamma + 1)")
        self.gamma = _slider(StrictIntSlider, "gamma", gamma, 0, self.max_gamma, step=1, description="draft length γ",
                             style=style, layout=layout,
                             hint=f"; pass max_gamma (up to {MAX_GAMMA}) to widen the slider")
        self.c = _slider(StrictFloatSlider, "c", c, 0.0, 1.0, step=0.01, description="draft cost c",
                         readout_format=".2f", style=style, layout=layout)
        self.v = _slider(StrictFloatSlider, "v", v, 1.0, 3.0, step=0.05, description="verify cost ratio v",
                         readout_format=".2f", style=style, layout=layout)
        self.table = w.HTML()
        self.plot = w.Image(format="png", layout=w.Layout(width="600px"))
        self.widget = w.VBox([w.HBox([w.VBox([self.alpha, self.gamma, self.c, self.v]), self.table]), self.plot])
        self._values: dict = {}
        for slider in (self.alpha, self.gamma, self.c, self.v):
            slider.observe(self._changed, names="value")
        self.update()

    def _changed(self, change) -> None:
        self.update()

    def values(self) -> dict:
        """The current inputs and every number in the table (floats; optimal_gamma an int)."""
        return dict(self._values)

    def update(self) -> None:
        a, g, c, v = float(self.alpha.value), int(self.gamma.value), float(self.c.value), float(self.v.value)
        best_g, best_s = theory.optimal_gamma(a, c, v, max_gamma=max(self.max_gamma, 64))
        vals = dict(alpha=a, gamma=g, c=c, v=v,
                    expected_tokens=float(theory.expected_tokens(a, g)),
                    speedup=float(theory.speedup(a, g, c, v)),
                    limit=float(theory.expected_tokens_limit(a)),
                    break_even_alpha=float(theory.break_even_alpha(g, c, v)),
                    optimal_gamma=int(best_g), optimal_speedup=float(best_s))
        self._values = vals
        self.table.value = self._table_html(vals)
        self.plot.value = plots.figure_to_png(plots.plot_explorer(a, g, c, v, max_gamma=self.max_gamma), dpi=90)

    @staticmethod
    def _table_html(vals: dict) -> str:
        rows = [
            ("expected_tokens", "E[tokens] per target pass", f"{vals['expected_tokens']:.4f}"),
            ("speedup", "speedup = E / (γc + v)", f"{vals['speedup']:.4f}"),
            ("limit", "limit 1/(1 − α) as γ → ∞", f"{vals['limit']:.4f}"),
            ("break_even_alpha", "break-even α at this γ, c, v", f"{vals['break_even_alpha']:.4f}"),
            ("optimal_gamma", "best γ at this α, c, v (0 = don't speculate)", f"{vals['optimal_gamma']:d}"),
            ("optimal_speedup", "speedup at the best γ", f"{vals['optimal_speedup']:.4f}"),
        ]
        body = "".join(f'<tr><th>{html.escape(label)}</th><td data-key="{key}">{text}</td></tr>'
                       for key, label, text in rows)
        verdict = "faster" if vals["speedup"] > 1 else ("break-even" if vals["speedup"] == 1 else "SLOWER")
        return (_CSS + f'<table class="specbook-yield-table">{body}</table>'
                f'<div class="specbook-verdict">speculation here is <b>{verdict}</b> than plain decoding</div>')


# ----------------------------------------------------------------------------- lesson 2

class ProofExplorer(_Explorer):
    """Controls ``match`` (draft quality), ``temperature``, ``sample_size``, ``rule``, ``seed``, ``auto``
    and a ``run_button``; a histogram (``plot``) of the selected rule's emitted tokens against p,
    and a p-value table (``table``, class ``specbook-chi2-table``, one row per rule with
    ``data-rule`` and cells ``data-key`` = tv, statistic, dof, pvalue, power, verdict).

    Every rule is sampled ``sample_size`` times at the same position of a toy pair and tested
    against the target p with a chi-square goodness-of-fit test on raw counts; the verdicts use
    Holm's correction over the family at level ``level``, and the power is computed at the level
    of Holm's first and strictest step, ``level`` over the number of rules.
    """

    def __init__(self, match: float = 0.3, temperature: float = 0.6, sample_size: int = 5000,
                 rule: str = rules.CORRECT, seed: int = 0, level: float = 0.01, vocab_size: int = 8,
                 context_seed: int = 2, auto: bool = True):
        rules.rule(rule)  # validates the name
        if isinstance(level, bool) or not isinstance(level, numbers.Real) or not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1), got {level!r}")
        _check("vocab_size", vocab_size, 2, 1 << 16, integer=True)
        self.level, self.vocab_size, self.context_seed = level, vocab_size, context_seed
        style = {"description_width": "130px"}
        layout = w.Layout(width="400px")
        self.match = _slider(StrictFloatSlider, "match", match, 0.0, 1.0, step=0.05, description="draft quality",
                             readout_format=".2f", continuous_update=False, style=style, layout=layout)
        self.temperature = _slider(StrictFloatSlider, "temperature", temperature, 0.1, 2.0, step=0.05,
                                   description="temperature", readout_format=".2f", continuous_update=False,
                                   style=style, layout=layout,
                                   hint=" (temperature 0 is greedy decoding: one token, nothing to test)")
        self.sample_size = _slider(StrictIntSlider, "sample_size", sample_size, 100, 20000, step=100,
                                   description="sample size", continuous_update=False, style=style, layout=layout)
        self.rule = w.Dropdown(options=list(rules.RULES), value=rule, description="histogram of",
                               style=style, layout=layout)
        self.seed = w.IntText(value=_check("seed", seed, 0, 2**31 - 1, integer=True), description="seed",
                              style=style, layout=w.Layout(width="220px"))
        self.auto = w.Checkbox(value=auto, description="update on every change")
        self.run_button = w.Button(description="Run", button_style="primary")
        self.plot = w.Image(format="png", layout=w.Layout(width="560px"))
        self.table = w.HTML()
        controls = w.VBox([self.match, self.temperature, self.sample_size, self.rule,
                           w.HBox([self.seed, self.run_button]), self.auto])
        self.widget = w.VBox([w.HBox([controls, self.plot]), self.table])
        self._values: dict = {}
        for control in (self.match, self.temperature, self.sample_size, self.rule, self.seed):
            control.observe(self._changed, names="value")
        self.run_button.on_click(lambda _: self.update())
        self.update()

    def _changed(self, change) -> None:
        if self.auto.value:
            self.update()

    def values(self) -> dict:
        """Inputs, and per rule: pvalue, statistic, dof, tv (total variation from p), power, rejected."""
        return {k: (dict(v) if isinstance(v, dict) else v) for k, v in self._values.items()}

    def setup(self) -> rules.PositionSetup:
        return rules.position_setup(float(self.match.value), float(self.temperature.value),
                                      self.vocab_size, self.context_seed)

    def update(self) -> None:
        setup = self.setup()
        n = int(self.sample_size.value)
        p = setup.target_probs.numpy()
        results = {}
        strictest = self.level / len(rules.RULES)  # Holm's first step: the power holds at every step
        for i, (name, r) in enumerate(rules.RULES.items()):
            g = torch.Generator().manual_seed(int(self.seed.value) * 1000 + i)
            law = r.law(setup)
            counts = stats.counts_of(r.sample(setup, n, g), self.vocab_size)
            gof = stats.chisquare_gof(counts, p)
            results[name] = dict(law=law, counts=counts, pvalue=gof.pvalue, statistic=gof.statistic, dof=gof.dof,
                                 tv=0.5 * float((law - setup.target_probs).abs().sum()),
                                 power=stats.chisquare_power(p, (law / law.sum()).numpy(), n, alpha=strictest))
        rejected = dict(zip(results, stats.holm([r["pvalue"] for r in results.values()], self.level)))
        selected = self.rule.value
        sel = results[selected]
        title = f"{selected}: chi-square p = {sel['pvalue']:.3g}"
        fig = plots.plot_emission(setup.target_probs, sel["counts"], sel["law"], ax=None, title=title)
        self.plot.value = plots.figure_to_png(fig, dpi=90)
        self.table.value = self._table_html(results, rejected, selected, n)
        self._values = dict(
            match=float(self.match.value), temperature=float(self.temperature.value), sample_size=n,
            rule=selected, seed=int(self.seed.value), selected_pvalue=sel["pvalue"],
            pvalues={k: r["pvalue"] for k, r in results.items()},
            statistics={k: r["statistic"] for k, r in results.items()},
            tv={k: r["tv"] for k, r in results.items()},
            power={k: r["power"] for k, r in results.items()},
            rejected={k: bool(v) for k, v in rejected.items()},
        )

    def _table_html(self, results: dict, rejected: dict, selected: str, n: int) -> str:
        rows = []
        for name, r in results.items():
            mark = ' style="background:#fff3cd"' if name == selected else ""
            verdict = "rejected" if rejected[name] else "consistent with p"
            rows.append(
                f'<tr data-rule="{html.escape(name)}"{mark}><th>{html.escape(name)}</th>'
                f'<td data-key="tv">{r["tv"]:.4f}</td>'
                f'<td data-key="statistic">{r["statistic"]:.2f}</td>'
                f'<td data-key="dof">{r["dof"]}</td>'
                f'<td data-key="pvalue">{_fmt_p(r["pvalue"])}</td>'
                f'<td data-key="power">{r["power"]:.3f}</td>'
                f'<td data-key="verdict">{verdict}</td></tr>')
        head = ("<tr><th>rule</th><th>exact bias (TV)</th><th>X²</th><th>dof</th><th>p-value</th>"
                f"<th>power at n (level {self.level / len(rules.RULES):g})</th>"
                f"<th>verdict (Holm, {self.level:g})</th></tr>")
        return (_CSS + f'<div>n = {n} draws per rule, target p at temperature {self.temperature.value:.2f}</div>'
                f'<table class="specbook-chi2-table">{head}{"".join(rows)}</table>')


def _fmt_p(p: float) -> str:
    if p == 0 or (p < 1e-4 and math.isfinite(p)):
        return f"{p:.2e}"
    return f"{p:.4f}"

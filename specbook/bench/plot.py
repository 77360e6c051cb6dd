"""The benchmark's speedups as a chart: one group of bars per workload category, one bar per drafter.

Shape legend: none (lists of floats from the JSON report; no tensors).

``python -m specbook bench --plot speedup.png`` draws it after a run, and
``python -m specbook bench --from-json RUN.json --plot speedup.png`` draws it from a report
already written, without loading a model.  The bars are exactly the report's
``speedup_vs_autoregressive`` values (median over prompts of plain seconds / drafter seconds,
same engine; :mod:`specbook.bench.results`); plain decoding (``none``) is 1.0 by definition, so
it is drawn as the horizontal line at 1.0, not as bars.  The last group, ``all``, is the
report's ``overall`` rows.  Speculative decoding is worth it where a bar rises above that line
(Leviathan et al. 2023, "Fast Inference from Transformers via Speculative Decoding", Sec. 3.4:
the wall-time improvement is tokens per pass over the cost of a verifying pass).

Drawn with matplotlib's Agg backend on a :class:`matplotlib.figure.Figure` (no pyplot state),
so it works on a machine with no display.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import matplotlib
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from .arguments import PLOT_SUFFIXES
BASELINE = "none"  # the drafter every speedup is relative to


@dataclass(frozen=True)
class SpeedupBars:
    """What the chart draws: ``categories`` on x; per series (label), one speedup or None per category."""

    categories: list[str]
    series: dict[str, list[float | None]]
    title: str


def speedup_bars(result: dict) -> SpeedupBars:
    """The bars of a bench JSON report (a dict as :func:`specbook.bench.cli.run_bench` returns).

    Series are ``drafter`` when the report holds one engine, ``engine/drafter`` when several (with
    `` [block]`` after the drafter for rows of block verification);
    categories keep the report's order, with ``all`` (the ``overall`` rows) last.  A missing
    combination (e.g. a drafter transformers cannot run) is None: no bar.  Raises ValueError when
    the report has no ``runs`` rows with the fields the chart needs.
    """
    runs = result.get("runs") if isinstance(result, dict) else None
    if not isinstance(runs, list) or not runs:
        raise ValueError("not a bench report: it has no 'runs' list (write one with bench --json)")
    need = ("engine", "drafter", "category", "speedup_vs_autoregressive")
    rows = runs + list(result.get("overall") or [])
    for r in rows:
        if not isinstance(r, dict) or any(k not in r for k in need):
            raise ValueError(f"not a bench report: a row lacks one of {need}: {str(r)[:120]}")
    rows = [r for r in rows if r["drafter"] != BASELINE]
    if not rows:
        raise ValueError("the report holds plain decoding only ('none'): there is no speedup to draw")
    categories = list(dict.fromkeys(r["category"] for r in rows if r["category"] != "all"))
    if any(r["category"] == "all" for r in rows):
        categories.append("all")
    engines = list(dict.fromkeys(r["engine"] for r in rows))

    def label(r: dict) -> str:  # block verification is a series of its own: "ngram [block]"
        name = r["drafter"] if r.get("verifier") in (None, "token") else f"{r['drafter']} [{r['verifier']}]"
        return name if len(engines) == 1 else f"{r['engine']}/{name}"

    series: dict[str, list[float | None]] = {}
    for r in rows:
        series.setdefault(label(r), [None] * len(categories))[categories.index(r["category"])] = (
            r["speedup_vs_autoregressive"])
    return SpeedupBars(categories, series, _title(result))


def _title(result: dict) -> str:
    machine = result.get("machine") or {}
    settings = result.get("settings") or {}
    where = machine.get("gpu") or machine.get("cpu") or machine.get("device") or "unknown machine"
    n_threads = machine.get("torch_threads")
    threads = f", {_count(n_threads, 'torch thread')}" if n_threads and not machine.get("gpu") else ""
    dtype = settings.get("dtype") or next((r.get("dtype") for r in result["runs"] if r.get("dtype")), "dtype ?")
    run = []
    if settings.get("limit") is not None:
        run.append(f"{_count(settings['limit'], 'prompt')} per category" if settings["limit"] else "all prompts")
    if settings.get("max_new_tokens"):
        run.append(f"up to {settings['max_new_tokens']} new tokens")
    if settings.get("temperature") is not None:
        run.append("greedy" if settings["temperature"] == 0 else f"temperature {settings['temperature']}")
    return (f"Speedup over plain decoding: {result.get('target', 'target ?')}, {dtype}\n"
            f"{where}{threads}" + (f"; {', '.join(run)}" if run else ""))


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def draw_speedups(result: dict) -> Figure:
    """A grouped bar chart of :func:`speedup_bars`, with a dashed line at 1.0 (plain decoding)."""
    bars = speedup_bars(result)
    n_cat, n_ser = len(bars.categories), len(bars.series)
    width = 0.8 / n_ser
    many = n_ser > 6  # a dozen drafters: a wide page at most, taller, labels turned upright
    fig = Figure(figsize=(min(16.0, max(7.0, 1.4 * n_cat * max(1.0, n_ser / 3))), 6.4 if many else 4.6),
                 layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    for j, (name, values) in enumerate(bars.series.items()):
        xs = [i - 0.4 + width * (j + 0.5) for i, v in enumerate(values) if v is not None]
        heights = [v for v in values if v is not None]
        colour = matplotlib.colormaps["tab20" if n_ser > 10 else "tab10"](j % (20 if n_ser > 10 else 10))
        drawn = ax.bar(xs, heights, width=width * 0.92, label=name, color=colour)
        ax.bar_label(drawn, fmt="%.2f", fontsize=6 if many else 7, padding=1, rotation=90 if many else 0)
    ax.axhline(1.0, color="black", linestyle="--", linewidth=1, label="plain decoding (1.0)")
    if bars.categories[-1] == "all" and n_cat > 1:  # the overall rows are not one more category
        ax.axvline(n_cat - 1.5, color="grey", linestyle=":", linewidth=1)
    ax.set_xticks(range(n_cat), bars.categories)
    ax.set_ylabel("speedup vs plain decoding (x)")
    ax.set_ylim(0, max(1.2, (1.25 if many else 1.15) * max(v for vs in bars.series.values() for v in vs if v is not None)))
    ax.set_title(bars.title, fontsize=10)
    fig.legend(fontsize=8, ncols=min(n_ser + 1, 4), loc="outside lower center")
    ax.grid(axis="y", alpha=0.3)
    return fig


def check_plot_path(path: str) -> str:
    """ValueError unless ``path`` ends in a format the chart is written as (.png, .svg, .pdf)."""
    if Path(path).suffix.lower() not in PLOT_SUFFIXES:
        raise ValueError(f"must end in {', '.join(PLOT_SUFFIXES)}, got {path!r}")
    return path


def save_speedup_plot(result: dict, path: str | Path) -> Figure:
    """Draw the chart of a bench report and write it to ``path`` (format from its suffix), making
    its directory if needed (``--plot`` accepts a directory that can be made)."""
    check_plot_path(str(path))
    fig = draw_speedups(result)
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=130)
    return fig


def save_report_plot(json_path: str | Path, path: str | Path) -> Figure:
    """:func:`save_speedup_plot` of a finished run's report, read from ``json_path`` (``bench --from-json``);
    a ValueError that names the file when it cannot be read or drawn."""
    try:
        result = json.loads(Path(json_path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ValueError(f"--from-json {str(json_path)!r} is not a readable JSON file ({err})") from None
    try:
        return save_speedup_plot(result, path)
    except ValueError as err:
        raise ValueError(f"--from-json {str(json_path)!r}: {err}") from None

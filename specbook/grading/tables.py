"""Markdown for the checker's measurements, from plain data (the ``--json`` report's sections).

``python -m specbook.grading`` measures (``detection``, the null simulation, the catalogue) and
prints these tables; with ``--json`` it also writes the data they are made of.  Both go through
the functions here, so a table rendered later from the JSON (``scripts/docs_tables.py``) is
the table the run printed, character for character.

The sections, as ``__main__.measure`` builds them (every number raw, not rounded):

* ``audit``: ``{"transformers", "seeds", "rows": [{"sampler", "ensemble_weight", "seeds",
  "lossless_passed", "standard_passed", "failures_first_seed", "seconds_per_check"}]}``
* ``timings``: ``{"repeats", "rows": [{"checker", "implementation", "calls", "wall_s", "cpu_s",
  "slowest_case", "slowest_case_wall_s", "wall_s_runs"}]}``
* ``calibration``: per checker ``{"checker", "null_simulation": {...} or None, "seeds",
  "rows": [{"name", "description", "kind", "seeds", "failed", "failed_lossless", "failed_seeds", ...}]}``
  (the same row fields as ``detection``, powers None)
* ``engine_bugs``: ``{"seeds", "rows": [{...the detection row fields, "source", "lives_in", "checker",
  "hint_words", "hint_named", "hint_first_seed", "first_failures"}]}``: the engines' bugs of
  ``catalogue.ENGINE_BUGS``; ``hint_named`` counts the seeds whose first failure's hint holds ``hint_words``
* ``detection``: per checker ``{"checker", "seeds", "full_seeds", "rows": [{"name",
  "description", "seeds", "failed", "failed_lossless", "failed_seeds", "failed_lossless_seeds", "power",
  "lossless_power", "margin", "lossless_margin", "caught_by", "seconds_per_check"}]}`` (a power or margin
  that was not computed is None; calibration rows also have ``first_failures``: seed -> first failing check)
"""
from __future__ import annotations

import math

from ..markdown import markdown_table


def fmt_power(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "-"
    return "> 0.999999" if x > 0.999999 else f"{x:.4f}"


def fmt_margin(x: float | None) -> str:
    if x is None or math.isnan(x):
        return "-"
    if x >= 1000:  # needed_scale searches down to 1e-4; beyond 1000x the figure says nothing more
        return "> 1000x"
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"


def null_line(checker: str, sim: dict) -> str:
    """One sentence: how many simulated null reports failed, and the rejections at larger levels."""
    return (f"`{checker}`: null simulation, {sim['reps']} replicates of the {sim['family']}-test family "
            f"({sim['seconds']:.0f} s): standard failed {sim['failed']}, lossless failed "
            f"{sim['failed_lossless']}, at alpha = {sim['alpha']:g}; "
            f"Bonferroni-adjusted smallest p <= 0.01 / 0.05 / 0.1 in "
            f"{sim['at_0.01']:.4f} / {sim['at_0.05']:.4f} / {sim['at_0.1']:.4f} of replicates")


def calibration_text(blocks: list[dict]) -> str:
    """Per checker: the null simulation's sentence, then the correct and lossless-only implementations."""
    lines = []
    for b in blocks:
        if b.get("null_simulation"):
            lines.append("\n" + null_line(b["checker"], b["null_simulation"]))
        if not b.get("rows"):
            continue
        rows = [[f"{r['name']} ({r['description']})", r["kind"], f"{r['seeds'] - r['failed_lossless']}/{r['seeds']}",
                 f"{r['seeds'] - r['failed']}/{r['seeds']}", f"{r['seconds_per_check']:.2f}"] for r in b["rows"]]
        lines += [f"\n`{b['checker']}`: {b['seeds']} seeds per implementation\n",
                  markdown_table(["implementation", "kind", "lossless=True", "standard=True", "s/check"], rows)]
    return "\n".join(lines)


def detection_text(blocks: list[dict]) -> str:
    """Per checker: how often each lossy implementation failed each verdict, and the predicted power."""
    lines = []
    for b in blocks:
        rows = [[f"{r['name']} ({r['description']})", f"{r['failed_lossless']}/{r['seeds']}",
                 f"{r['failed']}/{r['seeds']}", f"{fmt_power(r['lossless_power'])} / {fmt_power(r['power'])}",
                 fmt_margin(r["margin"]), r["caught_by"], f"{r['seconds_per_check']:.2f}"] for r in b["rows"]]
        head = ["bug", "lossless=False", "standard=False", "predicted power (lossless tests only / all)",
                "n margin (all)", "first failing check", "s/check (fail_fast)"]
        lines += [f"\n`{b['checker']}`: {len(b['rows'])} lossy implementations, {b['seeds']} seeds each\n",
                  markdown_table(head, rows)]
    return "\n".join(lines)


def engine_bugs_text(section: dict) -> str:
    """The engines' bugs: where each came from and lived, how often it was caught, and the hint it got."""
    rows = [[f"{r['name']} ({r['description']})", r["source"], r["lives_in"], f"{r['failed_lossless']}/{r['seeds']}",
             r["caught_by"] or "-", r["hint_first_seed"] or "-", f"{r['hint_named']}/{r['seeds']}"]
            for r in section["rows"]]
    head = ["bug", "source", "where it lives", "caught (lossless=False)", "first failing check",
            "hint shown (first seed)", "hint names it"]
    return (f"\nEngine bugs: {len(rows)} samplers, {section['seeds']} seeds each (fail_fast, require='lossless')\n\n"
            + markdown_table(head, rows))


def timings_text(timings: dict) -> str:
    """Wall and CPU seconds of one full check per correct implementation (the best of the repeats)."""
    rows = [[r["checker"], r["implementation"], r["calls"], f"{r['wall_s']:.2f}", f"{r['cpu_s']:.2f}",
             f"{r['slowest_case']} ({r['slowest_case_wall_s']:.2f})"] for r in timings["rows"]]
    return markdown_table(["checker", "implementation", "calls", "wall s", "CPU s", "slowest case (wall s)"], rows)


def audit_text(audit: dict) -> str:
    """Both verdicts of each audited sampler over the seeds, and the first seed's failures."""
    seeds = audit["seeds"]
    rows = []
    for r in audit["rows"]:
        first = r["failures_first_seed"]
        shown = "; ".join(first[:3]) + (f" (+{len(first) - 3} more)" if len(first) > 3 else "")
        rows.append([r["sampler"], f"{r['lossless_passed']}/{seeds}", f"{r['standard_passed']}/{seeds}", shown or "-",
                     f"{r['seconds_per_check']:.2f}"])
    head = ["sampler", "lossless=True", "standard=True", "failures (first seed)", "s/check"]
    return f"transformers {audit['transformers']}, check_verifier over {seeds} seed(s)\n\n" + markdown_table(head, rows)


def body(results: dict) -> str:
    """The tables a run printed between its header and footer lines, in the order it printed them (with
    a blank line between sections, so that two tables never run together as Markdown)."""
    parts = []
    if results.get("audit"):
        parts.append(audit_text(results["audit"]))
    if results.get("timings"):
        parts.append(timings_text(results["timings"]))
    if results.get("calibration") is not None:
        parts.append(calibration_text(results["calibration"]))
    if results.get("detection") is not None:
        parts.append(detection_text(results["detection"]))
    if results.get("engine_bugs") is not None:
        parts.append(engine_bugs_text(results["engine_bugs"]))
    return "\n".join(p if i == 0 or p.startswith("\n") else "\n" + p for i, p in enumerate(parts))

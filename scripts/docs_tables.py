"""Markdown tables for docs/grading.md and docs/statistics.md from the JSON committed beside them.

    python scripts/docs_tables.py docs/data/grading_timings.json docs/data/power_report.json [...]

Reads two kinds of report and prints, for each, a caption naming the file, the command that
wrote it and the machine it ran on (threads, niceness, load: timings depend on them), then its
tables:

* ``python -m specbook.grading ... --json PATH`` (format ``specbook.grading/1``): the audit,
  timings, calibration, detection and engine-bug tables, exactly as that run printed them (both go through
  :mod:`specbook.grading.tables`);
* ``python scripts/power_report.py --json PATH`` (format ``specbook.power_report/1``): detection
  rate and analytic power of the statistical suite against each broken twin.

Every number is the report's, only rounded.  Bench reports have their own renderer,
``scripts/bench_tables.py``.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's specbook, as the other scripts do
from specbook.markdown import read_json  # noqa: E402
GRADING = "specbook.grading/1"
POWER = "specbook.power_report/1"
POWER_ROW_FIELDS = ("implementation", "case", "seeds", "pvalues", "detection_rate", "analytic_power", "median_pvalue")


def load(path: str | Path) -> dict:
    """The report at ``path``; ValueError naming the file when it is neither kind of report."""
    path = Path(path)
    report = read_json(path)
    fmt = report.get("format") if isinstance(report, dict) else None
    if fmt not in (GRADING, POWER):
        raise ValueError(f"{path}: not a grading or power report (format {fmt!r}; write one with "
                         "python -m specbook.grading ... --json or python scripts/power_report.py --json)")
    for key in ("command", "machine", "settings"):
        if key not in report:
            raise ValueError(f"{path}: a {fmt} report without {key!r}")
    if fmt == POWER:
        for row in report.get("rows") or [None]:
            missing = [k for k in POWER_ROW_FIELDS if not isinstance(row, dict) or k not in row]
            if missing:
                raise ValueError(f"{path}: a power report row lacks {missing}: {str(row)[:100]}")
    elif not any(k in report for k in ("audit", "timings", "calibration", "detection", "engine_bugs")):
        raise ValueError(f"{path}: a grading report with no results (no audit, timings, calibration, detection or "
                         "engine bugs)")
    return report


def caption(path: str | Path, report: dict) -> str:
    """Where the numbers come from: the file, the command, and the machine as the run found it."""
    m = report["machine"]
    threads = m.get("torch_threads")
    machine = [m.get("cpu"), f"torch {m.get('torch')}", m.get("python"),
               f"{threads} thread{'s' if threads != 1 else ''}"]
    if m.get("niceness"):
        machine.append(f"nice {m['niceness']}")
    if m.get("load_average_start") is not None:
        machine.append(f"load average {m['load_average_start']:.1f} at the start, "
                       f"{m.get('load_average_end', float('nan')):.1f} at the end")
    took = f"; took {report['seconds']:.0f} s" if "seconds" in report else ""
    return (f"*From `{Path(path).as_posix()}`, written by `{report['command']}` "
            f"({', '.join(str(x) for x in machine if x)}{took}).*")


def power_header(seeds: int) -> str:
    return (f"| implementation | case | detection rate over {seeds} seeds | analytic power | median p-value |\n"
            "|---|---|---|---|---|")


def power_row(r: dict) -> str:
    return (f"| {r['implementation']} | {r['case']} | {r['detection_rate']:.2f} | {r['analytic_power']:.4f} | "
            f"{r['median_pvalue']:.1e} |")


def power_footer(settings: dict) -> str:
    return f"\nper-test level {settings['per_test_alpha']:.1e}; rows per test N = {settings['rows_per_test']}"


def power_text(report: dict) -> str:
    """The table ``scripts/power_report.py`` prints, from its report."""
    lines = [power_header(report["settings"]["seeds"])] + [power_row(r) for r in report["rows"]]
    return "\n".join(lines + [power_footer(report["settings"])])


def render(path: str | Path, report: dict) -> str:
    if report["format"] == POWER:
        text = power_text(report)
    else:
        from specbook.grading.tables import body  # only grading reports need torch

        text = body(report).strip("\n")
    return caption(path, report) + "\n\n" + text


def _existing(text: str) -> str:
    if not Path(text).is_file():
        raise argparse.ArgumentTypeError(f"no such file: {text!r}")
    return text


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("reports", nargs="+", metavar="REPORT.json", type=_existing,
                    help="written by python -m specbook.grading ... --json or python scripts/power_report.py --json")
    args = ap.parse_args(argv)
    try:
        reports = [(p, load(p)) for p in args.reports]
    except ValueError as err:  # not a report: say which file and why, as a usage error
        ap.error(str(err))
    print("\n\n".join(render(p, report) for p, report in reports))
    return 0


if __name__ == "__main__":
    sys.exit(main())

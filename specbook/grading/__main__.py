"""Measure the checker: ``python -m specbook.grading --detection-table`` (markdown for docs/grading.md).

    --detection-table   every broken implementation in the catalogue, over --seeds seeds (fail_fast),
                        with a predicted power from --full-seeds full runs
    --calibration       the null simulation (--null-reps replicates) and every correct implementation
                        over --seeds seeds
    --timings           wall time of one full check of each correct implementation
"""
from __future__ import annotations

import argparse
import math
import platform
import sys
import time

import torch

from . import check_token_rule, check_verifier
from .catalogue import BROKEN_TOKEN_RULES, BROKEN_VERIFIERS, CORRECT_TOKEN_RULES, CORRECT_VERIFIERS
from .detection import null_simulation, run_entries
from .token_rule import PLAN as TOKEN_PLAN
from .verifier import PLAN as CHAIN_PLAN

CHECKERS = (("check_token_rule", check_token_rule, TOKEN_PLAN, CORRECT_TOKEN_RULES, BROKEN_TOKEN_RULES),
            ("check_verifier", check_verifier, CHAIN_PLAN, CORRECT_VERIFIERS, BROKEN_VERIFIERS))


def _fmt_power(x: float) -> str:
    if math.isnan(x):
        return "-"
    return "> 0.999999" if x > 0.999999 else f"{x:.4f}"


def _fmt_margin(x: float) -> str:
    if math.isnan(x):
        return "-"
    if x >= 1000:  # needed_scale searches down to 1e-4; beyond 1000x the figure says nothing more
        return "> 1000x"
    return f"{x:.0f}x" if x >= 10 else f"{x:.1f}x"


def detection_table(seeds: int, full_seeds: int) -> str:
    lines = []
    for name, checker, _, _, broken in CHECKERS:
        rows = run_entries(checker, broken, range(seeds), full_seeds=full_seeds)
        lines += [f"\n`{name}`: {len(rows)} broken implementations, {seeds} seeds each\n",
                  "| bug | detected | predicted power | n margin | first failing check | s/check (fail_fast) |",
                  "|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r.name} ({r.description}) | {r.failed}/{r.seeds} | {_fmt_power(r.power)} | "
                         f"{_fmt_margin(r.margin)} | {r.caught_by} | {r.seconds:.2f} |")
    return "\n".join(lines)


def calibration(seeds: int, null_reps: int) -> str:
    lines = []
    for name, checker, plan, correct, _ in CHECKERS:
        sim = null_simulation(plan, null_reps)
        lines += [f"\n`{name}`: null simulation, {sim['reps']} replicates of the {sim['family']}-test family "
                  f"({sim['seconds']:.0f} s): {sim['failed']} failed at alpha = {sim['alpha']:g}; "
                  f"Bonferroni-adjusted smallest p <= 0.01 / 0.05 / 0.1 in "
                  f"{sim['at_0.01']:.4f} / {sim['at_0.05']:.4f} / {sim['at_0.1']:.4f} of replicates\n",
                  "| correct implementation | passed | s/check |", "|---|---|---|"]
        for r in run_entries(checker, correct, range(seeds), fail_fast=False):
            lines.append(f"| {r.name} ({r.description}) | {r.seeds - r.failed}/{r.seeds} | {r.seconds:.2f} |")
    return "\n".join(lines)


def timings(repeats: int = 3) -> str:
    lines = ["| checker | implementation | calls | wall s | CPU s | slowest case (wall s) |", "|---|---|---|---|---|---|"]
    for name, checker, _, correct, _ in CHECKERS:
        for e in correct:
            runs = []
            for s in range(repeats):
                c0 = time.process_time()
                rep = checker(e.fn, seed=s)
                runs.append((rep.seconds, time.process_time() - c0, rep))
            wall, cpu, best = min(runs, key=lambda r: r[0])
            slow = max(best.timings, key=best.timings.get)
            lines.append(f"| {name} | {e.name} | {best.calls} | {wall:.2f} | {cpu:.2f} | {slow} ({best.timings[slow]:.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specbook.grading", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--detection-table", action="store_true")
    ap.add_argument("--calibration", action="store_true")
    ap.add_argument("--timings", action="store_true")
    ap.add_argument("--seeds", type=int, default=100)
    ap.add_argument("--full-seeds", type=int, default=3)
    ap.add_argument("--null-reps", type=int, default=10_000)
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if not (args.detection_table or args.calibration or args.timings):
        ap.error("choose at least one of --detection-table, --calibration, --timings")
    t0 = time.perf_counter()
    print(f"<!-- python -m specbook.grading {' '.join(argv)}; torch {torch.__version__}, "
          f"{platform.python_implementation()} {platform.python_version()}, {torch.get_num_threads()} threads -->")
    if args.timings:
        print(timings())
    if args.calibration:
        print(calibration(args.seeds, args.null_reps))
    if args.detection_table:
        print(detection_table(args.seeds, args.full_seeds))
    print(f"\n<!-- total {time.perf_counter() - t0:.0f} s -->")


if __name__ == "__main__":
    main()

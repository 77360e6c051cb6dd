"""Measure the checker, or audit a real sampler (markdown for docs/grading.md).

    python -m specbook.grading --detection-table   every lossy implementation in the catalogue, both verdicts
    python -m specbook.grading --calibration       null simulation; correct and lossless-only implementations
    python -m specbook.grading --timings           wall time of one full check of each correct implementation
    python -m specbook.grading audit               transformers' own _speculative_sampling, and its ensemble mode
"""
from __future__ import annotations

import argparse
import math
import platform
import shlex
import sys
import time

import torch

try:
    import resource  # POSIX: CPU time of finished child processes
except ImportError:  # Windows
    resource = None

from . import check_token_rule, check_verifier
from .audit import audit
from .catalogue import (BROKEN_TOKEN_RULES, BROKEN_VERIFIERS, CORRECT_TOKEN_RULES, CORRECT_VERIFIERS,
                        LOSSLESS_TOKEN_RULES, LOSSLESS_VERIFIERS)
from .detection import null_simulation, run_entries
from .token_rule import PLAN as TOKEN_PLAN
from .verifier import PLAN as CHAIN_PLAN

CHECKERS = (("check_token_rule", check_token_rule, TOKEN_PLAN, CORRECT_TOKEN_RULES, BROKEN_TOKEN_RULES,
             LOSSLESS_TOKEN_RULES),
            ("check_verifier", check_verifier, CHAIN_PLAN, CORRECT_VERIFIERS, BROKEN_VERIFIERS, LOSSLESS_VERIFIERS))


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def _non_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be a non-negative integer, got {text}")
    return value


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


def _chosen(which: str):
    return [c for c in CHECKERS if which in ("both", c[0])]


def detection_table(seeds: int, full_seeds: int, which: str = "both", names=()) -> str:
    lines = []
    for name, checker, _, _, broken, _ in _chosen(which):
        if not _only(broken, names):
            continue
        rows = run_entries(checker, _only(broken, names), range(seeds), full_seeds=full_seeds)
        lines += [f"\n`{name}`: {len(rows)} lossy implementations, {seeds} seeds each\n",
                  "| bug | lossless=False | standard=False | predicted power (lossless tests only / all) | "
                  "n margin (all) | first failing check | s/check (fail_fast) |",
                  "|---|---|---|---|---|---|---|"]
        for r in rows:
            lines.append(f"| {r.name} ({r.description}) | {r.failed_lossless}/{r.seeds} | {r.failed}/{r.seeds} | "
                         f"{_fmt_power(r.lossless_power)} / {_fmt_power(r.power)} | {_fmt_margin(r.margin)} | "
                         f"{r.caught_by} | {r.seconds:.2f} |")
    return "\n".join(lines)


def _only(entries, names):
    return [e for e in entries if not names or any(n in e.name for n in names)]


def calibration(seeds: int, null_reps: int, which: str = "both", names=()) -> str:
    lines = []
    for name, checker, plan, correct, _, lossless in _chosen(which):
        if null_reps:
            sim = null_simulation(plan, null_reps)
            lines.append(f"\n`{name}`: null simulation, {sim['reps']} replicates of the {sim['family']}-test family "
                         f"({sim['seconds']:.0f} s): standard failed {sim['failed']}, lossless failed "
                         f"{sim['failed_lossless']}, at alpha = {sim['alpha']:g}; "
                         f"Bonferroni-adjusted smallest p <= 0.01 / 0.05 / 0.1 in "
                         f"{sim['at_0.01']:.4f} / {sim['at_0.05']:.4f} / {sim['at_0.1']:.4f} of replicates")
        chosen = [(kind, _only(entries, names)) for kind, entries in (("correct", correct),
                                                                       ("lossless, not standard", lossless))]
        if not seeds or not any(e for _, e in chosen):
            continue
        lines += [f"\n`{name}`: {seeds} seeds per implementation\n",
                  "| implementation | kind | lossless=True | standard=True | s/check |", "|---|---|---|---|---|"]
        for kind, entries in chosen:
            for r in run_entries(checker, entries, range(seeds), fail_fast=False):
                lines.append(f"| {r.name} ({r.description}) | {kind} | {r.seeds - r.failed_lossless}/{r.seeds} | "
                             f"{r.seeds - r.failed}/{r.seeds} | {r.seconds:.2f} |")
    return "\n".join(lines)


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the checker's worker processes)."""
    if resource is None:
        return time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timings(repeats: int = 3, which: str = "both") -> str:
    lines = ["| checker | implementation | calls | wall s | CPU s | slowest case (wall s) |", "|---|---|---|---|---|---|"]
    for name, checker, _, correct, _, _ in _chosen(which):
        for e in correct:
            runs = []
            for s in range(repeats):
                c0 = _cpu_seconds()
                rep = checker(e.fn, seed=s)
                runs.append((rep.seconds, _cpu_seconds() - c0, rep))
            wall, cpu, best = min(runs, key=lambda r: r[0])
            slow = max(best.timings, key=best.timings.get)
            lines.append(f"| {name} | {e.name} | {best.calls} | {wall:.2f} | {cpu:.2f} | {slow} ({best.timings[slow]:.2f}) |")
    return "\n".join(lines)


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(prog="python -m specbook.grading", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("command", nargs="?", choices=["audit"],
                    help="audit: check transformers' _speculative_sampling (standard and ensemble mode) and print "
                         "both verdicts over --seeds seeds (default 1 for audit)")
    ap.add_argument("--detection-table", action="store_true",
                    help="run every lossy implementation of the catalogue over --seeds seeds (fail_fast) and print "
                         "how often each verdict failed, with a predicted power from --full-seeds full runs")
    ap.add_argument("--calibration", action="store_true",
                    help="run the null simulation (--null-reps replicates), then every correct and every lossless "
                         "but non-standard implementation over --seeds seeds, both verdicts")
    ap.add_argument("--timings", action="store_true", help="wall and CPU time of one full check of each correct "
                                                           "implementation (best of 3)")
    ap.add_argument("--seeds", type=_non_negative, default=None,
                    help="seeds per implementation (default 100; 1 for audit; 0 with --calibration: the null "
                         "simulation alone)")
    ap.add_argument("--entry", action="append", default=[], metavar="NAME",
                    help="with --calibration or --detection-table: only the implementations whose name contains "
                         "NAME (repeatable), e.g. to run them in parallel processes")
    ap.add_argument("--full-seeds", type=_positive, default=3,
                    help="full (not fail_fast) runs per lossy implementation for the power calculation (default 3)")
    ap.add_argument("--null-reps", type=_non_negative, default=10_000,
                    help="replicates of the null simulation (default 10000; 0 skips it)")
    ap.add_argument("--checker", choices=["both", "check_token_rule", "check_verifier"], default="both",
                    help="measure only this checker (default both), e.g. to run the two in parallel processes")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if not (args.command or args.detection_table or args.calibration or args.timings):
        ap.error("choose audit, or at least one of --detection-table, --calibration, --timings")
    seeds = args.seeds if args.seeds is not None else (1 if args.command == "audit" else 100)
    if seeds == 0 and (args.command or args.detection_table):
        ap.error("--seeds 0 only makes sense with --calibration (the null simulation alone)")
    t0 = time.perf_counter()
    print(f"<!-- python -m specbook.grading {shlex.join(argv)}; torch {torch.__version__}, "
          f"{platform.python_implementation()} {platform.python_version()}, {torch.get_num_threads()} threads -->")
    if args.command == "audit":
        print(audit(seeds))
    if args.timings:
        print(timings(which=args.checker))
    if args.calibration:
        print(calibration(seeds, args.null_reps, args.checker, args.entry))
    if args.detection_table:
        print(detection_table(seeds, args.full_seeds, args.checker, args.entry))
    print(f"\n<!-- total {time.perf_counter() - t0:.0f} s -->")


if __name__ == "__main__":
    main()

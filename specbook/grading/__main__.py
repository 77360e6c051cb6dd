"""Measure the checker, or audit a real sampler (markdown for docs/grading.md).

    python -m specbook.grading --detection-table   every lossy implementation in the catalogue, both verdicts
    python -m specbook.grading --calibration       null simulation; correct and lossless-only implementations
    python -m specbook.grading --timings           wall time of one full check of each correct implementation
    python -m specbook.grading --engine-bugs       the engines' verifier bugs: how often each is caught, and its hint
    python -m specbook.grading audit               transformers' own _speculative_sampling, and its ensemble mode

Any of them with ``--json PATH`` also writes the numbers behind the printed tables (layout:
:mod:`specbook.grading.tables`); ``python scripts/docs_tables.py PATH`` prints the tables again
from it.
"""
from __future__ import annotations

import argparse
import json
import math
import platform
import shlex
import sys
import time
from pathlib import Path

import torch

try:
    import resource  # POSIX: CPU time of finished child processes
except ImportError:  # Windows
    resource = None

from ..cliargs import writable_file
from ..machine import load_average, machine_info
from . import check_token_rule, check_verifier, tables
from .audit import audit_results
from .catalogue import (BROKEN_TOKEN_RULES, BROKEN_VERIFIERS, CORRECT_TOKEN_RULES, CORRECT_VERIFIERS, ENGINE_BUGS,
                        LOSSLESS_TOKEN_RULES, LOSSLESS_VERIFIERS)
from .detection import null_simulation, run_entries
from .token_rule import PLAN as TOKEN_PLAN
from .verifier import PLAN as CHAIN_PLAN

CHECKERS = (("check_token_rule", check_token_rule, TOKEN_PLAN, CORRECT_TOKEN_RULES, BROKEN_TOKEN_RULES,
             LOSSLESS_TOKEN_RULES),
            ("check_verifier", check_verifier, CHAIN_PLAN, CORRECT_VERIFIERS, BROKEN_VERIFIERS, LOSSLESS_VERIFIERS))
JSON_FORMAT = "specbook.grading/1"  # the "format" key of a --json report (sections: specbook.grading.tables)


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


def _chosen(which: str):
    return [c for c in CHECKERS if which in ("both", c[0])]


def _only(entries, names):
    return [e for e in entries if not names or any(n in e.name for n in names)]


def _finite(x: float) -> float | None:
    """JSON has no NaN: a power or margin that was not computed becomes None."""
    return None if x is None or not math.isfinite(x) else x


def _row(r, **extra) -> dict:
    """A :class:`detection.Row` as plain data: raw numbers, NaN as None, and which seeds failed each verdict."""
    return {"name": r.name, "description": r.description, **extra, "seeds": r.seeds, "failed": r.failed,
            "failed_lossless": r.failed_lossless, "failed_seeds": r.failed_seeds,
            "failed_lossless_seeds": r.failed_lossless_seeds, "power": _finite(r.power),
            "lossless_power": _finite(r.lossless_power), "margin": _finite(r.margin),
            "lossless_margin": _finite(r.lossless_margin), "caught_by": r.caught_by,
            "seconds_per_check": r.seconds}


def detection(seeds: int, full_seeds: int, which: str = "both", names=()) -> list[dict]:
    """Every chosen lossy implementation over ``seeds`` seeds (fail_fast), with ``full_seeds`` full runs for power."""
    blocks = []
    for name, checker, _, _, broken, _ in _chosen(which):
        if not _only(broken, names):
            continue
        rows = run_entries(checker, _only(broken, names), range(seeds), full_seeds=full_seeds)
        blocks.append({"checker": name, "seeds": seeds, "full_seeds": full_seeds, "rows": [_row(r) for r in rows]})
    return blocks


def calibration(seeds: int, null_reps: int, which: str = "both", names=()) -> list[dict]:
    """Per checker: the null simulation (``null_reps`` replicates, 0 skips it), then every chosen correct
    and lossless-only implementation over ``seeds`` full checks, both verdicts."""
    blocks = []
    for name, checker, plan, correct, _, lossless in _chosen(which):
        block = {"checker": name, "null_simulation": null_simulation(plan, null_reps) if null_reps else None,
                 "seeds": seeds, "rows": None}
        chosen = [(kind, _only(entries, names)) for kind, entries in (("correct", correct),
                                                                       ("lossless, not standard", lossless))]
        if seeds and any(e for _, e in chosen):
            # a correct implementation's rare failures are worth reading: each failed seed's first failing check
            block["rows"] = [{**_row(r, kind=kind), "first_failures": {str(s): f for s, f in r.first_failures.items()}}
                             for kind, entries in chosen
                             for r in run_entries(checker, entries, range(seeds), fail_fast=False)]
        blocks.append(block)
    return blocks


def engine_bugs(seeds: int, names=()) -> dict:
    """Every chosen bug of ``catalogue.ENGINE_BUGS`` over ``seeds`` seeds (fail_fast, require="lossless"), both
    verdicts, and the hint of each seed's first failure: at how many seeds it carries the words that name the bug."""
    checkers = {"check_token_rule": check_token_rule, "check_verifier": check_verifier}
    rows = []
    for e in _only(ENGINE_BUGS, names):
        (r,) = run_entries(checkers[e.checker], [e], range(seeds))
        first_seed = min(r.first_hints, default=None)
        rows.append({**_row(r), "source": e.source, "lives_in": e.lives_in, "checker": e.checker,
                     "hint_words": e.hint, "hint_named": sum(e.hint in h for h in r.first_hints.values()),
                     "hint_first_seed": "" if first_seed is None else r.first_hints[first_seed],
                     "first_failures": {str(s): f for s, f in r.first_failures.items()}})
    return {"seeds": seeds, "rows": rows}


def _cpu_seconds() -> float:
    """CPU time of this process and of its finished children (the checker's worker processes)."""
    if resource is None:
        return time.process_time()
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def timings(repeats: int = 3, which: str = "both", names=()) -> dict:
    """Wall and CPU seconds of one full check of each chosen correct implementation, best of ``repeats``."""
    rows = []
    for name, checker, _, correct, _, _ in _chosen(which):
        for e in _only(correct, names):
            runs = []
            for s in range(repeats):
                c0 = _cpu_seconds()
                rep = checker(e.fn, seed=s)
                runs.append((rep.seconds, _cpu_seconds() - c0, rep))
            wall, cpu, best = min(runs, key=lambda r: r[0])
            slow = max(best.timings, key=best.timings.get)
            rows.append({"checker": name, "implementation": e.name, "calls": best.calls, "wall_s": wall,
                         "cpu_s": cpu, "slowest_case": slow, "slowest_case_wall_s": best.timings[slow],
                         "wall_s_runs": [r[0] for r in runs]})
    return {"repeats": repeats, "rows": rows}


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
    ap.add_argument("--engine-bugs", action="store_true",
                    help="run every engine bug of the catalogue (ENGINE_BUGS) over --seeds seeds (fail_fast) and "
                         "print how often each is caught and the hint its first failure shows")
    ap.add_argument("--seeds", type=_non_negative, default=None,
                    help="seeds per implementation (default 100; 1 for audit; 0 with --calibration: the null "
                         "simulation alone)")
    ap.add_argument("--entry", action="append", default=[], metavar="NAME",
                    help="with --calibration, --detection-table, --timings or --engine-bugs: only the implementations whose name "
                         "contains NAME (repeatable), e.g. to run them in parallel processes")
    ap.add_argument("--full-seeds", type=_positive, default=3,
                    help="full (not fail_fast) runs per lossy implementation for the power calculation (default 3)")
    ap.add_argument("--null-reps", type=_non_negative, default=10_000,
                    help="replicates of the null simulation (default 10000; 0 skips it)")
    ap.add_argument("--checker", choices=["both", "check_token_rule", "check_verifier"], default="both",
                    help="measure only this checker (default both), e.g. to run the two in parallel processes")
    ap.add_argument("--json", dest="json_path", type=writable_file, metavar="PATH",
                    help="also write the results as JSON to PATH: the command, the machine, the settings and the "
                         "raw numbers of every table printed (scripts/docs_tables.py renders the tables from it)")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    if not (args.command or args.detection_table or args.calibration or args.timings or args.engine_bugs):
        ap.error("choose audit, or at least one of --detection-table, --calibration, --timings, --engine-bugs")
    seeds = args.seeds if args.seeds is not None else (1 if args.command == "audit" else 100)
    if seeds == 0 and (args.command or args.detection_table or args.engine_bugs):
        ap.error("--seeds 0 only makes sense with --calibration (the null simulation alone)")
    t0 = time.perf_counter()
    command = f"python -m specbook.grading {shlex.join(argv)}"
    results = {"format": JSON_FORMAT, "command": command, "machine": machine_info(),
               "settings": {"seeds": seeds, "null_reps": args.null_reps, "full_seeds": args.full_seeds,
                            "checker": args.checker, "entries": args.entry, "audit": args.command == "audit",
                            "timings": args.timings, "calibration": args.calibration,
                            "detection_table": args.detection_table, "engine_bugs": args.engine_bugs}}
    print(f"<!-- {command}; torch {torch.__version__}, "
          f"{platform.python_implementation()} {platform.python_version()}, {torch.get_num_threads()} threads -->")
    if args.command == "audit":
        results["audit"] = audit_results(seeds)
        print(tables.audit_text(results["audit"]))
    if args.timings:
        results["timings"] = timings(which=args.checker, names=args.entry)
        print(tables.timings_text(results["timings"]))
    if args.calibration:
        results["calibration"] = calibration(seeds, args.null_reps, args.checker, args.entry)
        print(tables.calibration_text(results["calibration"]))
    if args.detection_table:
        results["detection"] = detection(seeds, args.full_seeds, args.checker, args.entry)
        print(tables.detection_text(results["detection"]))
    if args.engine_bugs:
        results["engine_bugs"] = engine_bugs(seeds, args.entry)
        print(tables.engine_bugs_text(results["engine_bugs"]))
    results["seconds"] = time.perf_counter() - t0
    print(f"\n<!-- total {results['seconds']:.0f} s -->")
    if args.json_path:
        results["machine"]["load_average_end"] = load_average()
        Path(args.json_path).expanduser().write_text(json.dumps(results, indent=1) + "\n")

if __name__ == "__main__":
    main()

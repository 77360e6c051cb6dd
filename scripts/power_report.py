"""Power of the statistical suite against each broken twin, and the family's false-alarm rate.

    python scripts/power_report.py [--seeds 20] [--no-progress] [--json PATH]

For every broken twin in specbook/grading/twins.py, runs the same chi-square test as
tests/test_verify_stats.py over many seeds and reports the detection rate, plus the
noncentral-chi-square power computed from the twin's law (estimated from 10^6 draws).
Writes a Markdown table to stdout; a progress bar over the rows goes to stderr on a terminal
(hidden by ``--no-progress`` or ``SPECBOOK_PROGRESS=0``).  ``--json PATH`` also writes the
command, the machine, the settings and every row's raw p-values (format
``specbook.power_report/1``); ``python scripts/docs_tables.py PATH`` prints the table from it.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import shlex
import sys
import time

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]  # this checkout's specbook, and scripts

from docs_tables import POWER, power_footer, power_header, power_row  # noqa: E402
from specbook.cliargs import positive_int, writable_file  # noqa: E402
from specbook.grading.twins import (BROKEN_TWINS, N, PER_TEST_ALPHA, TWIN_CASES, chain_verifier,  # noqa: E402
                                    fit_pvalue, law_and_counts, run)
from specbook.machine import load_average, machine_info  # noqa: E402
from specbook.progress import progress_bar  # noqa: E402
from specbook.stats import chisquare_power  # noqa: E402
from specbook.verify import verify_chain  # noqa: E402


SEED_BASE = 1000  # the detection seeds are SEED_BASE + 0 .. seeds - 1
LAW_SEED_BASE, LAW_BATCHES = 5000, 25  # the twin's own law: LAW_BATCHES runs of N rows, seeds from LAW_SEED_BASE


def measure_row(name: str, case: str, verifier, seeds: int) -> dict:
    """One implementation on one case: the test's p-value at each seed, and the analytic power at N."""
    pvals = []
    for seed in range(seeds):
        law, observed = run(verifier, case, seed=SEED_BASE + seed)
        pvals.append(fit_pvalue(law, observed))
    pvals = np.array(pvals)
    # analytic power: the twin's own law estimated from many draws (LAW_BATCHES batches of N)
    observed_all = []
    for seed in range(LAW_BATCHES):
        observed_all += run(verifier, case, seed=LAW_SEED_BASE + seed)[1]
    counts, null, _ = law_and_counts(law, observed_all)
    power = chisquare_power(null, counts / counts.sum(), N, alpha=PER_TEST_ALPHA)
    return {"implementation": name, "case": case, "seeds": seeds, "pvalues": [float(p) for p in pvals],
            "detection_rate": float(np.mean(pvals <= PER_TEST_ALPHA)), "analytic_power": float(power),
            "median_pvalue": float(np.median(pvals))}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=positive_int, default=20, help="seeds per implementation (default 20)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    ap.add_argument("--json", dest="json_path", type=writable_file, metavar="PATH",
                    help="also write the command, machine, settings and every row's p-values as JSON to PATH")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    report = {"format": POWER, "command": f"python scripts/power_report.py {shlex.join(argv)}".rstrip(),
              "machine": machine_info(),
              "settings": {"seeds": args.seeds, "rows_per_test": N, "per_test_alpha": PER_TEST_ALPHA,
                           "seed_base": SEED_BASE, "law_seed_base": LAW_SEED_BASE, "law_batches": LAW_BATCHES},
              "rows": []}
    print(power_header(args.seeds))
    rows = [("correct verify_chain", case, verify_chain) for case in sorted(set(TWIN_CASES.values()))]
    rows += [(twin, TWIN_CASES[twin], chain_verifier(**cfg)) for twin, cfg in BROKEN_TWINS.items()]
    for name, case, verifier in progress_bar(rows, disable=args.no_progress, desc="power report", unit="row"):
        report["rows"].append(measure_row(name, case, verifier, args.seeds))
        print(power_row(report["rows"][-1]), flush=True)
    print(power_footer(report["settings"]))
    if args.json_path:
        report["seconds"] = time.perf_counter() - t0
        report["machine"]["load_average_end"] = load_average()
        pathlib.Path(args.json_path).expanduser().write_text(json.dumps(report, indent=1) + "\n")

if __name__ == "__main__":
    main()

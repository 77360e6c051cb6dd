"""Power of the statistical suite against each broken twin, and the family's false-alarm rate.

    python scripts/power_report.py [--seeds 20] [--no-progress]

For every broken twin in tests/chain_variants.py, runs the same chi-square test as
tests/test_verify_stats.py over many seeds and reports the detection rate, plus the
noncentral-chi-square power computed from the twin's law (estimated from 10^6 draws).
Writes a Markdown table to stdout; a progress bar over the rows goes to stderr on a terminal
(hidden by ``--no-progress`` or ``SPECBOOK_PROGRESS=0``).
"""
from __future__ import annotations

import argparse
import pathlib
import sys

import numpy as np

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "tests")]  # this checkout's specbook and its test modules

from chain_variants import BROKEN_TWINS, chain_verifier  # noqa: E402
from statfamily import PER_TEST_ALPHA, fit_pvalue, law_and_counts  # noqa: E402
from test_verify_stats import N, TWIN_CASES, run  # noqa: E402

from specbook.cliargs import positive_int  # noqa: E402
from specbook.progress import progress_bar  # noqa: E402
from specbook.stats import chisquare_power  # noqa: E402
from specbook.verify import verify_chain  # noqa: E402


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=positive_int, default=20, help="seeds per implementation (default 20)")
    ap.add_argument("--no-progress", action="store_true", help="no progress bar")
    args = ap.parse_args(argv)
    print(f"| implementation | case | detection rate over {args.seeds} seeds | analytic power | median p-value |")
    print("|---|---|---|---|---|")
    rows = [("correct verify_chain", case, verify_chain) for case in sorted(set(TWIN_CASES.values()))]
    rows += [(twin, TWIN_CASES[twin], chain_verifier(**cfg)) for twin, cfg in BROKEN_TWINS.items()]
    for name, case, verifier in progress_bar(rows, disable=args.no_progress, desc="power report", unit="row"):
        pvals = []
        for seed in range(args.seeds):
            law, observed = run(verifier, case, seed=1000 + seed)
            pvals.append(fit_pvalue(law, observed))
        pvals = np.array(pvals)
        # analytic power: the twin's own law estimated from many draws (25 batches of N)
        observed_all = []
        for seed in range(25):
            observed_all += run(verifier, case, seed=5000 + seed)[1]
        counts, null, _ = law_and_counts(law, observed_all)
        power = chisquare_power(null, counts / counts.sum(), N, alpha=PER_TEST_ALPHA)
        print(f"| {name} | {case} | {np.mean(pvals <= PER_TEST_ALPHA):.2f} | {power:.4f} | {np.median(pvals):.1e} |")
    print(f"\nper-test level {PER_TEST_ALPHA:.1e}; rows per test N = {N}")


if __name__ == "__main__":
    main()

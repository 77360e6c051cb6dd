"""The assignments' hidden statistical tests, called directly on the instructor's solutions at many seeds.

    python scripts/assignment_seeds.py --seeds 100 --json docs/data/assignment_seeds.json

Each assignment's notebook (assignments/src/NN_name.py) is run up to its first graded cell with
the solution regions filled in, which defines the graded functions and the given code; then each
statistical family its hidden tests run is called at seeds 0..N-1, once per seed, with no second
seed, and the passes are counted.  A correct solution must pass every family at every seed (the
bound is one failure per 1,000 runs of a family, so 100 in a row fail with probability below 0.1).
"""
from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import platform
import re
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SRC = ROOT / "assignments" / "src"


def namespace(name: str) -> dict:
    """The notebook's globals after every cell that is not a graded test, solutions filled in."""
    import jupytext

    ns: dict = {}
    for cell in jupytext.read(SRC / f"{name}.py").cells:
        meta = cell.metadata.get("nbgrader", {})
        if cell.cell_type != "code" or meta.get("grade") or meta.get("grade_id") == "check_your_work":
            continue
        source = re.sub(r"^[ \t]*%.*$", "", cell.source, flags=re.M)  # IPython magics
        source = re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*$", "", source, flags=re.M)
        with contextlib.redirect_stdout(io.StringIO()):  # the notebooks' own prints (the evidence reports)
            exec(compile(source, f"{name}:{meta.get('grade_id')}", "exec"), ns)  # noqa: S102 - the course's own notebooks
    return ns


def _tree_family(ns: dict, seed: int) -> bool:
    """06's tree_law: three trees against the exact law, Holm across them (the hidden cell's own family)."""
    from specbook import stats

    tree_c = dict(parents=torch.tensor([-1, -1, 1, 1]),
                  target_probs=torch.tensor([[0.3, 0.3, 0.4, 0.0], [0.2, 0.2, 0.3, 0.3], [0.5, 0.1, 0.1, 0.3],
                                             [0.1, 0.1, 0.1, 0.7], [0.4, 0.4, 0.1, 0.1]], dtype=torch.float64),
                  draft_probs=torch.tensor([[0.7, 0.1, 0.1, 0.1], [0.1, 0.1, 0.2, 0.6], [0.1, 0.8, 0.05, 0.05],
                                            [0.1, 0.8, 0.05, 0.05]], dtype=torch.float64))
    trees = {"A": ns["TREE_A"], "B": ns["TREE_B"], "C": tree_c}
    results = {k: ns["tree_law_check"](ns["verify_tree_row"], **t, n=4000, seed=3 * seed + i)
               for i, (k, t) in enumerate(trees.items())}
    return stats.run_family({k: r.pvalue for k, r in results.items()}, 1e-3).passed


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return f"{line.split(':', 1)[1].strip()}, {os.cpu_count()} cores"
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _loop_law(ns: dict, seed: int) -> bool:
    """08's sampling_law: 800 sequences of 3 tokens at temperature 0.7 against the toy target's exact law."""
    from collections import Counter

    from specbook import stats

    target, draft = ns["make_toy_pair"](vocab_size=5, order=2, match=0.3, seed=2)
    warm = ns["SamplingParams"](temperature=0.7)
    law = target.sequence_law([1, 2], 3, warm)
    g = torch.Generator().manual_seed(seed)
    seen = Counter(tuple(int(x) for x in ns["speculative_decode"](target, ns["DraftModelDrafter"](draft), [1, 2], 3, 2,
                                                                  warm, g)) for _ in range(800))
    outcomes = sorted(set(law) | set(seen))
    return stats.chisquare_gof([seen.get(o, 0) for o in outcomes], [law.get(o, 0.0) for o in outcomes]).pvalue >= 1e-3


def families() -> dict[str, dict]:
    """assignment -> {family name: fn(namespace, seed) -> passed}."""
    from specbook.grading import check_token_rule, check_verifier

    return {
        "01_acceptance_rule": {"check_token_rule(accept_token)":
                               lambda ns, s: check_token_rule(ns["accept_token"], seed=s).passed},
        "02_chain_verifier": {"check_verifier(verify_row)": lambda ns, s: check_verifier(ns["verify_row"], seed=s).passed},
        "05_find_the_bug": {
            f"check_token_rule(speculative_token at T = {t})":
                (lambda t: lambda ns, s: check_token_rule(ns["as_token_rule"](ns["speculative_token"], t), seed=s).passed)(t)
            for t in (0.6, 1.7)},
        "06_tree_verifier": {
            "check_verifier(as_chain_verifier(verify_tree_row))":
                lambda ns, s: check_verifier(ns["as_chain_verifier"](ns["verify_tree_row"]), seed=s).passed,
            "tree_law (three trees, Holm)": _tree_family},
        "07_engine_bugs": {"check_verifier(fixed_engine_a, require='lossless')":
                           lambda ns, s: check_verifier(ns["fixed_engine_a"], seed=s, require="lossless").passed},
        "08_write_the_loop": {"sampling_law (chi-square against the toy target's sequence law)": _loop_law},
    }


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seeds", type=int, default=100, help="seeds 0..N-1 per family (default 100)")
    ap.add_argument("--only", nargs="*", help="assignment names (default: every one with a statistical test)")
    ap.add_argument("--json", type=Path, help="write the counts and the failing seeds here")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        ap.error(f"--seeds must be >= 1, got {args.seeds}")
    from tqdm.auto import tqdm

    table = families()
    unknown = set(args.only or ()) - set(table)
    if unknown:
        ap.error(f"--only: no statistical hidden tests in {sorted(unknown)}; choose from {sorted(table)}")
    rows, started = [], time.time()
    for name in args.only or table:
        ns = namespace(name)
        for family, run in table[name].items():
            t0, failed = time.time(), []
            for seed in tqdm(range(args.seeds), desc=f"{name}: {family}", leave=False):
                if not run(ns, seed):
                    failed.append(seed)
            rows.append({"assignment": name, "family": family, "seeds": args.seeds, "passed": args.seeds - len(failed),
                         "failed_seeds": failed, "seconds": round(time.time() - t0, 1)})
            print(f"{name:20s} {family:55s} {args.seeds - len(failed)}/{args.seeds} passed  ({rows[-1]['seconds']} s)",
                  flush=True)
    if args.json:
        args.json.write_text(json.dumps({
            "command": "python scripts/assignment_seeds.py " + " ".join(sys.argv[1:] if argv is None else argv),
            "machine": _cpu(), "torch": torch.__version__,
            "threads": torch.get_num_threads(), "seconds": round(time.time() - started, 1), "rows": rows}, indent=1) + "\n")
    return 0 if all(r["passed"] == r["seeds"] for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())

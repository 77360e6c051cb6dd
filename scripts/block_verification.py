"""Block verification against token-wise verification: exact expectations, then SmolLM2 side by side.

    python scripts/block_verification.py laws --json laws.json          # exact, seconds
    python scripts/block_verification.py run --json run.json ...         # the real model, minutes
    python scripts/block_verification.py table run.json                  # the doc's Markdown tables

``laws``: on random context-free (p, q) tables (V = 4..8, K = 2..4), the expected number of drafts
one step keeps, token-wise (:mod:`specbook.verify`) and block (:mod:`specbook.verify_block`), both
exact from :func:`specbook.block_laws.step_law` and :func:`~specbook.block_laws.expected_kept`
(float64); and the same with one-hot drafts (prompt lookup), where the two are equal.

``run``: ``python -m specbook bench --engines specbook --verifier token,block`` once per
temperature and seed (the bench rotates the order of plain decoding, token-wise and block runs
from prompt to prompt, so both verifiers meet the same load), then, per temperature, drafter and
verifier, the medians over seeds of the overall rows' tau, mean acceptance length, draft
acceptance rate and tokens/s, and the paired block / token ratios: per (seed, prompt) of tokens/s,
per seed of tau.  The laws are rerun and stored beside the runs, so one JSON holds the doc's tables.
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))  # this checkout's specbook, as the other scripts do
from specbook.markdown import markdown_table, read_json  # noqa: E402

FIGURES = ("tau", "mean_acceptance_length", "draft_acceptance_rate", "tokens_per_s")
FAMILIES = ("independent", "close")  # q drawn apart from p; q = 0.7 p + 0.3 r (a draft that imitates)


# ---------------------------------------------------------------- exact laws

def random_law(rng: random.Random, V: int) -> list[float]:
    """A random law on V tokens with some exact zeros (never all zero)."""
    weights = [rng.random() if rng.random() > 0.2 else 0.0 for _ in range(V)]
    weights[rng.randrange(V)] += 0.1
    return [w / sum(weights) for w in weights]


def kept_pair(p_rows, q_rows, K: int, drafts=None) -> tuple[float, float]:
    """(token-wise, block) expected drafts kept per step; ``drafts``: fixed one-hot drafts instead of q."""
    from specbook.block_laws import expected_kept, step_law, table

    draft = None if drafts is not None else table(q_rows)
    return tuple(float(expected_kept(step_law(table(p_rows), draft, K, rule, drafts=drafts)))
                 for rule in ("token", "block"))


def laws(draws: int, seed: int) -> dict:
    """Per (family, K) and for one-hot drafts: the mean, min and max of block / token kept drafts."""
    rng = random.Random(seed)
    out: dict[str, dict] = {}
    for n in range(draws):
        V, K, family = rng.randint(4, 8), rng.randint(2, 4), FAMILIES[n % 2]
        p_rows = [random_law(rng, V) for _ in range(K + 1)]
        if family == "independent":
            q_rows = [random_law(rng, V) for _ in range(K)]
        else:
            q_rows = [[0.7 * a + 0.3 * b for a, b in zip(p_rows[j], random_law(rng, V))] for j in range(K)]
        drafts = [rng.randrange(V) for _ in range(K)]
        for key, pair in ((f"{family}, K={K}", kept_pair(p_rows, q_rows, K)),
                          (f"one-hot drafts, K={K}", kept_pair(p_rows, None, K, drafts))):
            out.setdefault(key, []).append(pair)
    return {key: summary(pairs) for key, pairs in sorted(out.items())}


def summary(pairs: list[tuple[float, float]]) -> dict:
    ratios = [b / t for t, b in pairs if t > 0]
    return {"draws": len(pairs), "token_kept_mean": round(statistics.mean(t for t, _ in pairs), 4),
            "block_kept_mean": round(statistics.mean(b for _, b in pairs), 4),
            "ratio_mean": round(statistics.mean(ratios), 4), "ratio_min": round(min(ratios), 4),
            "ratio_max": round(max(ratios), 4),
            "block_never_below_token": all(b >= t - 1e-12 for t, b in pairs)}


# ---------------------------------------------------------------- the real model

def bench_argv(args, temperature: float, seed: int) -> list[str]:
    argv = ["--engines", "specbook", "--drafters", args.drafters, "--verifier", "token,block",
            "--temperature", str(temperature), "--seed", str(seed), "--limit", str(args.limit),
            "--max-new-tokens", str(args.max_new_tokens), "--gamma", str(args.gamma), "--dtype", args.dtype,
            "--curve-reps", "0", "--no-progress"]
    return argv + (["--ignore-eos"] if args.ignore_eos else []) + (["--threads", str(args.threads)] if args.threads else [])


def run(args) -> dict:
    from specbook.bench import cli as bench
    from specbook.models.dtype import cpu_flags

    reports = []
    for seed in range(args.seeds):
        for temperature in args.temperatures:  # temperatures alternate too, seed by seed
            argv = bench_argv(args, temperature, seed)
            bench_args = bench.parse_args(argv)
            bench_args.argv = argv
            t0 = time.perf_counter()
            report = bench.run_bench(bench_args)
            print(f"temperature {temperature} seed {seed}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
            reports.append({"temperature": temperature, "seed": seed, "machine": report["machine"],
                            "settings": report["settings"], "overall": report["overall"],
                            "per_prompt": [{k: r[k] for k in ("drafter", "verifier", "id", "new_tokens", "seconds",
                                                              "passes", "emitted", "proposed", "accepted")}
                                           for r in report["per_prompt"]]})
    machine = dict(reports[0]["machine"], load_average_end=reports[-1]["machine"].get("load_average_end"),
                   amx="amx_bf16" in cpu_flags(), avx512_bf16="avx512_bf16" in cpu_flags())
    return {"command": command(args.argv), "machine": machine, "rows": rows(reports), "laws": laws(args.draws, 0),
            "runs": reports}


def command(argv: list[str]) -> str:
    """The command line as the report records it: without ``--json PATH`` (where it was written)."""
    kept = [a for i, a in enumerate(argv) if a != "--json" and (i == 0 or argv[i - 1] != "--json")]
    return "python scripts/block_verification.py " + " ".join(kept)


def pooled_tau_ratio(reports: list[dict], temperature: float, drafter: str, resamples: int = 2000,
                     seed: int = 0) -> tuple[float, float, float]:
    """Block tau / token tau with every (seed, prompt) pooled (emitted over passes, summed), and its 95%
    bootstrap interval from resampling the (seed, prompt) pairs: the precision the run can claim."""
    pairs = []
    for r in reports:
        if r["temperature"] != temperature:
            continue
        by = {(p["verifier"], p["id"]): p for p in r["per_prompt"] if p["drafter"] == drafter}
        pairs += [(by[("token", i)], by[("block", i)]) for v, i in by if v == "token"]

    def ratio(sample):
        tau = [sum(pair[j]["emitted"] for pair in sample) / sum(pair[j]["passes"] for pair in sample) for j in (0, 1)]
        return tau[1] / tau[0]

    rng = random.Random(seed)
    boot = sorted(ratio([rng.choice(pairs) for _ in pairs]) for _ in range(resamples))
    return ratio(pairs), boot[int(0.025 * resamples)], boot[int(0.975 * resamples) - 1]


def rows(reports: list[dict]) -> list[dict]:
    """Per (temperature, drafter, verifier): medians over seeds of the overall rows, and paired block / token ratios."""
    out = []
    for temperature in dict.fromkeys(r["temperature"] for r in reports):
        mine = [r for r in reports if r["temperature"] == temperature]
        drafters = dict.fromkeys(row["drafter"] for r in mine for row in r["overall"] if row["drafter"] != "none")
        for drafter in drafters:
            by = {v: [next(o for o in r["overall"] if o["drafter"] == drafter and o["verifier"] == v) for r in mine]
                  for v in ("token", "block")}
            pairs = [(t["seconds"] / t["new_tokens"]) / (b["seconds"] / b["new_tokens"]) for r in mine
                     for t, b in zip(*[[p for p in r["per_prompt"] if p["drafter"] == drafter and p["verifier"] == v]
                                       for v in ("token", "block")])]
            for v, overall in by.items():
                row = {"temperature": temperature, "drafter": drafter, "verifier": v, "seeds": len(overall)}
                for f in FIGURES:
                    values = [o[f] for o in overall if o[f] is not None]
                    row[f] = round(statistics.median(values), 4) if values else None
                    row[f + "_range"] = [min(values), max(values)] if values else None
                if v == "block":
                    taus = [b["tau"] / t["tau"] for t, b in zip(by["token"], overall)]
                    row["tau_ratio_median"] = round(statistics.median(taus), 4)
                    row["tokens_per_s_ratio_median"] = round(statistics.median(pairs), 4)
                    row["tokens_per_s_ratio_range"] = [round(min(pairs), 4), round(max(pairs), 4)]
                    row["pairs"] = len(pairs)
                out.append(row)
    return out


# ---------------------------------------------------------------- the doc's tables

def render(report: dict) -> str:
    """The measured table and the exact-law table, as docs/block_verification.md shows them."""
    def num(x, nd=2):
        return "-" if x is None else f"{x:.{nd}f}"

    measured = []
    for r in report["rows"]:
        ratio = ""
        if r["verifier"] == "block":
            tau, lo, hi = pooled_tau_ratio(report["runs"], r["temperature"], r["drafter"])
            ratio = (f"{num(r['tau_ratio_median'], 3)} / {tau:.3f} [{lo:.2f}, {hi:.2f}] / "
                     f"{num(r['tokens_per_s_ratio_median'], 3)} ({num(r['tokens_per_s_ratio_range'][0])}-"
                     f"{num(r['tokens_per_s_ratio_range'][1])})")
        measured.append([r["temperature"], r["drafter"], r["verifier"], num(r["tau"], 3),
                         num(r["mean_acceptance_length"], 3), num(r["draft_acceptance_rate"], 3),
                         num(r["tokens_per_s"], 1), ratio])
    exact = [[key, s["draws"], num(s["token_kept_mean"], 3), num(s["block_kept_mean"], 3), num(s["ratio_mean"], 4),
              f"{num(s['ratio_min'], 4)}-{num(s['ratio_max'], 4)}", "yes" if s["block_never_below_token"] else "NO"]
             for key, s in report["laws"].items()]
    return "\n\n".join([
        f"*Measured: medians over seeds. From `docs/data/{Path(report.get('path', 'block_verification.json')).name}`, "
        f"written by `{report['command']}`.*",
        markdown_table(["temperature", "drafter", "verifier", "tau", "mean acceptance length", "draft acceptance rate",
                        "tokens/s", "block / token: tau (median of seeds / pooled [95% interval]) / "
                        "tokens/s (median of pairs (range))"],
                       measured, "rllrrrrl"),
        "*Exact: expected drafts kept per step on random (p, q) tables, float64.*",
        markdown_table(["draws", "n", "token-wise kept", "block kept", "block / token, mean", "range",
                        "block >= token in every draw"], exact, "lrrrrll")])


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    p = argparse.ArgumentParser(prog="python scripts/block_verification.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="what", required=True)
    lp = sub.add_parser("laws", help="exact expected drafts kept, token-wise and block, on random tables")
    rp = sub.add_parser("run", help="the real model: bench runs with --verifier token,block, then the summary")
    for q in (lp, rp):
        q.add_argument("--draws", type=int, default=400, help="random tables (default 400)")
        q.add_argument("--json", dest="json_path", help="write the report here")
    rp.add_argument("--temperatures", type=lambda t: [float(x) for x in t.split(",")], default=[1.0, 0.7])
    rp.add_argument("--seeds", type=int, default=3, help="bench runs per temperature, seeds 0..n-1")
    rp.add_argument("--drafters", default="draft,ngram")
    rp.add_argument("--limit", type=int, default=1, help="prompts per category (bench --limit)")
    rp.add_argument("--max-new-tokens", type=int, default=64)
    rp.add_argument("--gamma", type=int, default=4)
    rp.add_argument("--dtype", default="auto")
    rp.add_argument("--threads", type=int, default=None)
    rp.add_argument("--ignore-eos", action="store_true", help="every reply exactly --max-new-tokens long")
    tp = sub.add_parser("table", help="print the doc's tables from a report written by run")
    tp.add_argument("report")
    args = p.parse_args(argv)
    args.argv = argv
    if args.what == "table":
        report = read_json(args.report)
        report["path"] = args.report
        print(render(report))
        return 0
    report = {"command": command(argv), "laws": laws(args.draws, 0)} if args.what == "laws" else run(args)
    text = json.dumps(report, indent=1) + "\n"
    if args.json_path:
        Path(args.json_path).write_text(text)
        print(f"wrote {args.json_path}", file=sys.stderr)
    if args.what == "run":
        print(render(report))
    else:
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())

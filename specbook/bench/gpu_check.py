"""``python -m specbook gpu-check``: the real-model cross-checks and the core benchmark figures, on CUDA.

One command for the occasions a GPU is at hand (a course machine, a cloud notebook): in
under five minutes it

1. decodes a few benchmark prompts greedily four ways (specbook plain, specbook with
   prompt lookup, transformers ``generate``, transformers prompt lookup) and reports any
   difference with its top-2 logit gap (:mod:`specbook.bench.crosscheck`);
2. samples the first two tokens of many rows with speculative decoding (T = 1, and
   T = 1 with top-p 0.9) and with plain sampling, and tests them against the exact
   joint law by chi-square, plus a deliberately broken drafter that must be caught;
3. runs the benchmark's core figures (``specbook.bench``: 2 prompts per category, plain
   and prompt lookup, both engines, the verify-cost curve);

and prints one short table.  Exit status 0 when every check passes, 1 otherwise.

    python -m specbook gpu-check                       # CUDA device 0
    python -m specbook gpu-check --json gpu.json
    python -m specbook gpu-check --device cpu --allow-cpu --quick   # a small dry run without a GPU
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch

from .. import cliargs
from ..drafters import DraftModelDrafter
from ..models.chat import chat_ids
from ..progress import progress_bar
from ..sampling import SamplingParams
from .crosscheck import (TIE_GAP, GreedyDraftSoftmaxReported, explain_divergence, greedy_four_ways, joint_law,
                         law_pvalue, sample_first_two)
from .workloads import load_prompts

LEVEL = 1e-3  # per chi-square check; with 3 correct checks the chance of a false alarm is < 0.3%
CUDA_TIE_GAP = 1e-3  # GPU kernels reorder float32 sums more than a CPU does
SAMPLE_PROMPT = "My favourite fruit is"


def _row(check: str, ok: bool, detail: str, seconds: float) -> dict:
    return {"check": check, "ok": bool(ok), "detail": detail, "seconds": round(seconds, 1)}


def greedy_checks(model, hf, tokenizer, device: str, new_tokens: int, n_prompts: int) -> dict:
    t0 = time.perf_counter()
    wanted = ["code_edit", "rag_qa", "chat", "math"][:n_prompts]
    prompts = [next(p for p in load_prompts() if p.category == c) for c in wanted]
    tie_gap = CUDA_TIE_GAP if torch.device(device).type == "cuda" else TIE_GAP
    ties, failures = [], []
    for p in prompts:
        ids = chat_ids(tokenizer, p.prompt)
        out = greedy_four_ways(model, hf, tokenizer, ids, new_tokens)
        for name, other in out.items():
            d = explain_divergence(model, ids, out["specbook"], other, tie_gap)
            if d is not None:
                (ties if d.is_tie else failures).append(f"{p.id} / {name}: {d.describe()}")
    detail = (f"{len(prompts)} prompts x 4 decoders x {new_tokens} tokens: "
              + ("identical" if not ties and not failures else f"{len(ties)} near-tie(s), {len(failures)} real difference(s)"))
    row = _row("greedy: specbook == speculative == transformers", not failures, detail, time.perf_counter() - t0)
    row["notes"] = ties + failures
    return row


def sampling_checks(model, tokenizer, device: str, rows: int) -> list[dict]:
    prompt = tokenizer.encode(SAMPLE_PROMPT, add_special_tokens=False)
    cases = [("speculative T=1, gamma=2", SamplingParams(temperature=1.0), 2, 0.6, DraftModelDrafter, False),
             ("speculative T=1 top-p 0.9, gamma=1", SamplingParams(temperature=1.0, top_p=0.9), 1, 0.6,
              DraftModelDrafter, False),
             ("plain sampling T=1 top-p 0.9", SamplingParams(temperature=1.0, top_p=0.9), 0, None, DraftModelDrafter,
              False),
             ("broken twin: greedy draft, softmax q", SamplingParams(temperature=1.0), 1, 0.6,
              GreedyDraftSoftmaxReported, True)]
    out = []
    for i, (name, params, gamma, scale, cls, broken) in enumerate(cases):
        t0 = time.perf_counter()
        law, outcome = joint_law(model, prompt, params)
        g = torch.Generator(device=device).manual_seed(1000 + i)
        pairs = sample_first_two(model, prompt, params, rows=rows, chunk=rows, gamma=gamma, generator=g,
                                 drafter_cls=cls, draft_scale=scale)
        p = law_pvalue(law, [outcome(a, b) for a, b in pairs])
        ok = p <= LEVEL if broken else p > LEVEL
        verdict = ("caught" if ok else "NOT caught") if broken else ("fits" if ok else "does NOT fit")
        out.append(_row(f"sampling: {name}", ok, f"{rows} rows, first two tokens vs exact law: chi-square "
                                                  f"p = {p:.3g} ({verdict} at level {LEVEL:g})",
                        time.perf_counter() - t0))
    return out


def bench_checks(device: str, limit: int, max_new_tokens: int, curve_reps: int,
                 categories: str | None = None) -> tuple[list[dict], dict]:
    from .cli import parse_args, run_bench

    t0 = time.perf_counter()
    argv = ["--device", device, "--limit", str(limit), "--max-new-tokens", str(max_new_tokens),
            "--curve-reps", str(curve_reps), "--no-progress"] + (["--categories", categories] if categories else [])
    args = parse_args(argv)
    args.argv = argv
    result = run_bench(args)
    seconds = time.perf_counter() - t0
    rows = []
    overall = {(r["engine"], r["drafter"]): r for r in result["overall"]}
    for engine in ("specbook", "transformers"):
        plain, ngram = overall[(engine, "none")], overall[(engine, "ngram")]
        same = ngram["outputs_identical_to_autoregressive"]
        rows.append(_row(f"bench: {engine}", bool(same),
                         f"plain {plain['tokens_per_s']:.1f} tok/s; prompt lookup {ngram['tokens_per_s']:.1f} tok/s, "
                         f"tau {ngram['tau']:.2f}, speedup {ngram['speedup_vs_autoregressive']:.2f}x, "
                         f"outputs identical: {same}", seconds / 2))
        v = result["verify_cost"].get(engine, {}).get("v")
        if v:
            rows.append(_row(f"verify cost: {engine}", True,
                             f"v(2) {v[1]:.2f}, v(5) {v[4]:.2f}, v(9) {v[8]:.2f}, v(17) {v[16]:.2f}", 0.0))
    ratio = result["engine_ratio"]
    if ratio:
        rows.append(_row("bench: specbook / transformers plain tok/s", True,
                         f"{ratio['specbook_over_transformers_tokens_per_s_median']:.2f} (median of {ratio['prompts']} "
                         f"prompts); identical greedy outputs {ratio['identical_plain_outputs']}/{ratio['prompts']}",
                         0.0))
    return rows, result


def format_rows(rows: list[dict]) -> str:
    width = max(len(r["check"]) for r in rows)
    lines = [f"{'check':<{width}}  {'':4}  {'s':>6}  detail", "-" * (width + 60)]
    for r in rows:
        lines.append(f"{r['check']:<{width}}  {'ok' if r['ok'] else 'FAIL':4}  {r['seconds']:>6.1f}  {r['detail']}")
        for note in r.get("notes", []):
            lines.append(f"{'':<{width}}        {'':>6}  - {note}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="specbook gpu-check", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", type=cliargs.device, default="cuda",
                        help="torch device to check (default cuda; refused at once if this machine lacks it)")
    parser.add_argument("--allow-cpu", action="store_true", help="run on a non-CUDA device anyway")
    parser.add_argument("--quick", action="store_true", help="tiny sizes (a dry run of the command itself)")
    parser.add_argument("--threads", type=cliargs.threads, default=None,
                        help="torch CPU threads (default: torch's own)")
    parser.add_argument("--json", dest="json_path", type=cliargs.writable_file,
                        help="write the table and the bench result here")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar (also: SPECBOOK_PROGRESS=0)")
    try:  # a refused flag ends here, as exit status 2, before anything loads
        args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
        device = torch.device(args.device)
        if device.type != "cuda" and not args.allow_cpu:
            parser.error(f"argument --device: {args.device!r} is not CUDA; pass --allow-cpu to run there anyway")
    except SystemExit as stop:  # --help (0) or a refused flag (2): returned, like every other outcome
        return int(stop.code or 0)
    if args.threads:
        torch.set_num_threads(args.threads)
    from transformers import LlamaForCausalLM

    from ..models.smollm2 import load_smollm2, model_dir

    started = time.perf_counter()
    sizes = dict(new_tokens=6, n_prompts=1, rows=100, limit=1, max_new=4, reps=1, categories="code_edit") \
        if args.quick else dict(new_tokens=32, n_prompts=4, rows=4000, limit=2, max_new=64, reps=5, categories=None)
    model, tokenizer = load_smollm2(args.device, torch.float32)  # the exactness checks: float32 on both sides
    hf = LlamaForCausalLM.from_pretrained(str(model_dir()), dtype=torch.float32, local_files_only=True).to(args.device).eval()
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu"
    print(f"gpu-check on {name}, torch {torch.__version__}", flush=True)
    bar = progress_bar(total=3, desc="gpu-check", unit="stage", disable=args.no_progress)
    bar.set_postfix_str("greedy")
    rows = [greedy_checks(model, hf, tokenizer, args.device, sizes["new_tokens"], sizes["n_prompts"])]
    bar.update()
    bar.set_postfix_str("sampling")
    rows += sampling_checks(model, tokenizer, args.device, sizes["rows"])
    del hf
    bar.update()
    bar.set_postfix_str("bench")
    bench_rows, bench_result = bench_checks(args.device, sizes["limit"], sizes["max_new"], sizes["reps"],
                                            sizes["categories"])
    rows += bench_rows
    bar.update()
    bar.close()
    print(format_rows(rows))
    total = time.perf_counter() - started
    failed = [r["check"] for r in rows if not r["ok"]]
    print(f"\n{len(rows) - len(failed)}/{len(rows)} checks passed in {total:.0f} s"
          + (f"; FAILED: {', '.join(failed)}" if failed else ""))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"device": name, "seconds": round(total, 1), "checks": rows,
                                                    "bench": bench_result}, indent=1) + "\n")
    return 1 if failed else 0

"""``python -m specbook batch``: batching versus speculation, measured on this machine.

Shape legend: B batch (rows decoded together), K draft length, n positions per row in one pass.

Speculation spends the arithmetic a memory-bound decode step leaves idle; batching spends the same
idle arithmetic (Leviathan et al. 2023, sec. 3.4; the roofline of Williams et al. 2009).  So at
some batch size fixed-gamma speculation stops paying: that batch size is the *crossover*.  This
command decodes the same prompts (of different lengths) at every batch size with plain decoding,
fixed-gamma speculation and the load-aware adaptive policy (:class:`~specbook.drafters.adaptive.AdaptiveGamma`
as :func:`batch_policy` sets it, its steps priced by the loop itself: :mod:`specbook.bench.batch_calibration`),
and reports, per run::

    tokens_per_s        all rows' new tokens over the run's time (throughput)
    ms_per_token        mean over rows of (time the row finished / its new tokens) (latency)
    tau                 tokens per target pass per row
    positions_per_pass  positions one target forward computed, B (K + 1), averaged over passes
    wasted_fraction     computed draft positions that were rejected or padding (a row whose
                        drafter found fewer tokens is padded to the batch's K), over all positions
    padding_fraction    the padding alone (drafters that report ``match_lengths``: prompt lookup)
    mean_acceptance_length, draft_acceptance_rate, ...  vLLM's and SGLang's acceptance figures
                        (:func:`specbook.metrics.engine_metrics`), like tau from the first repeat

and the crossover per drafter, the measured roofline of this machine with its prediction of the
crossover from each drafter's measured acceptance, and (``--traces``) acceptance along
step-by-step reasoning traces (:mod:`specbook.bench.batch_traces`).

Timing side by side.  On a shared machine a run can be 20-30% slower than its twin a second later.
So the policies of one repeat are not timed one after the other: their generations are stepped in
turns, one target pass at a time, the run furthest behind on its own clock first
(:mod:`specbook.bench.batch_runs`), each on its own cache and drafter; a run's time is the sum of its own
passes (prefill excluded).  A slow spell then lands on every policy alike, and
``adaptive_vs_best_paired`` divides it out repeat by repeat.

    python -m specbook batch --batch-sizes 1,2,4,8,16 --max-new-tokens 32 --drafters none,ngram,draft
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import cycle, islice

import torch
from tqdm.auto import tqdm

from ..costs import BatchCosts
from ..drafters.adaptive import AdaptiveGamma, GammaPolicy
from ..machine import machine_info
from ..models import LlamaTarget
from ..models.chat import chat_ids
from ..models.dtype import dtype_name, resolve_dtype
from ..sampling import SamplingParams
from . import batch_costs
from .batch_calibration import LoopCosts, PinnedGamma, loop_priced, measure_loop_costs
from .batch_costs import adaptive_vs_best, crossovers
from .batch_runs import PrefillOnce, Run, side_by_side
from .batch_traces import format_traces, run_traces
from .crosscheck import differences_are_near_ties
from .timing import rotated
from .registry import DRAFTERS, get_drafter
from .workloads import load_prompts, select

BATCH_DRAFTERS = ("none", "ngram", "draft", "eagle")  # chain drafters (EAGLE as a chain of gamma drafts)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m specbook batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", help="JSON lines with id, category, prompt (default: the built-in workloads; "
                   "specbook/data/heldout_prompts.jsonl holds 18 others, never tuned on)")
    p.add_argument("--categories", help="comma-separated categories of the prompts to keep (default: all)")
    p.add_argument("--drafters", default="none,ngram,draft", help=f"comma-separated, from: {', '.join(BATCH_DRAFTERS)}")
    p.add_argument("--batch-sizes", default="1,2,4,8,16,32,64", help="comma-separated batch sizes")
    p.add_argument("--gamma", type=int, default=4, help="draft tokens per pass for fixed speculation, the "
                   "adaptive policy's ceiling (default 4)")
    p.add_argument("--policy", default="fixed,adaptive", help="comma-separated: fixed,adaptive")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16"],
                   help="auto (default): bfloat16 where the CPU multiplies it natively, else float32")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's own)")
    p.add_argument("--repeats", type=int, default=3, help="timed repetitions per run; medians reported (default 3)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--forward-costs", action="store_true", help="price the adaptive policy's steps from the "
                   "timed forwards alone (gamma c_B + v_B(gamma+1)), not from steps of the loop itself")
    p.add_argument("--traces", action="store_true", help="also decode the reasoning workload (batch <= 8)")
    p.add_argument("--traces-only", action="store_true", help="decode only the reasoning workload")
    p.add_argument("--trace-tokens", type=int, default=512, help="new tokens per reasoning trace (default 512)")
    p.add_argument("--trace-window", type=int, default=64, help="window of the acceptance curve (default 64)")
    p.add_argument("--json", dest="json_path", help="write the results here")
    p.add_argument("--no-progress", action="store_true")
    args = p.parse_args(argv)
    try:
        check_args(args)
    except ValueError as err:
        p.error(str(err))  # exits with status 2 before any model is loaded
    return args


def _ints(text: str, flag: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"{flag} must be comma-separated integers, got {text!r}") from None
    if not values or any(v < 1 for v in values):
        raise ValueError(f"{flag} must list integers >= 1, got {text!r}")
    return sorted(set(values))


def _names(text: str, allowed, flag: str) -> list[str]:
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    bad = [n for n in names if n not in allowed]
    if not names or bad:
        raise ValueError(f"{flag} must list names from {', '.join(allowed)}, got {text!r}")
    return names


def check_args(args) -> None:
    """Every number and name on the command line, refused with the flag's name before the model loads."""
    args.batch_sizes = _ints(args.batch_sizes, "--batch-sizes")
    args.drafters = _names(args.drafters, [d for d in BATCH_DRAFTERS if d in DRAFTERS], "--drafters")
    args.policy = _names(args.policy, ("fixed", "adaptive"), "--policy")
    for flag, value, low in (("--gamma", args.gamma, 1), ("--max-new-tokens", args.max_new_tokens, 1),
                             ("--repeats", args.repeats, 1), ("--trace-tokens", args.trace_tokens, 1),
                             ("--trace-window", args.trace_window, 1)):
        if value < low:
            raise ValueError(f"{flag} must be >= {low}, got {value}")
    if not args.temperature >= 0:
        raise ValueError(f"--temperature must be >= 0, got {args.temperature}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1, got {args.threads}")
    if args.prompts or args.categories:  # a missing or malformed file, an unknown category: refused now
        select(load_prompts(args.prompts), args.categories.split(",") if args.categories else None)


def interleave(prompts: list) -> list:
    """Prompts ordered round-robin over categories, so that every batch mixes lengths and kinds."""
    by_cat: dict[str, list] = {}
    for p in prompts:
        by_cat.setdefault(p.category, []).append(p)
    order, queues = [], [iter(v) for v in by_cat.values()]
    while queues:
        for q in list(queues):
            nxt = next(q, None)
            if nxt is None:
                queues.remove(q)
            else:
                order.append(nxt)
    return order


def _median_run(reps: list[dict]) -> dict:
    """One run's figures: medians over the repeats, plus every repeat's tokens/s and the fastest."""
    keys = ("seconds", "prefill_seconds", "tokens_per_s", "ms_per_token")
    run = dict(reps[0])
    for k in keys:
        run[k] = statistics.median(r[k] for r in reps)
    run["repeats"] = len(reps)
    run["tokens_per_s_each"] = [r["tokens_per_s"] for r in reps]
    run["tokens_per_s_fastest"] = max(run["tokens_per_s_each"])
    run["gammas"] = [g for r in reps for g in r["gammas"]]  # every repeat's steps, in the order they ran
    return run


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    args.command = "python -m specbook batch " + " ".join(sys.argv[1:] if argv is None else argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    result = run_batch(args)
    print(format_table(result) if "runs" in result else format_traces(result["traces"]))
    if args.json_path:
        with open(args.json_path, "w", encoding="utf-8") as f:
            json.dump(result, f, indent=1)
        print(f"wrote {args.json_path}")
    return 0


def run_batch(args) -> dict:
    """Every run the command line asks for (or the reasoning traces alone), as the report."""
    params = SamplingParams(temperature=args.temperature)
    model, tokenizer, ids, target, drafters = load(args)
    eos, progress = tokenizer.eos_token_id, not args.no_progress
    if args.traces_only:
        return {"machine": machine_info("cpu"), "command": args.command, "settings": settings(args),
                "traces": run_traces(target, drafters, tokenizer, args, params, progress)}
    costs = measure_costs(model, target, drafters, args, progress)
    combos = [("none", "fixed")] + [(d, p) for d in args.drafters if d != "none" for p in args.policy]
    priced = {d: BatchCosts(costs["v"], costs["c"].get(d, 0.0), costs["catch_up"].get(d, 0.0),
                            costs["t1_seconds"])
              for d in args.drafters if d != "none"}
    loop_timed = bool(priced) and "adaptive" in args.policy and not args.forward_costs
    # one cache per run stepped side by side: the combos, and gammas 0..gamma when the loop is timed
    targets = [PrefillOnce(t) for t in [target] + [LlamaTarget(model, max_length=target.max_length) for _ in
                                                   range(max(len(combos), args.gamma + 1 if loop_timed else 0) - 1)]]
    batches = {B: list(islice(cycle(ids), B)) for B in args.batch_sizes}  # prompts of different lengths

    def policy(d: str, pinned: int | None = None) -> AdaptiveGamma:
        # Each policy wraps a drafter of its own: runs stepped side by side must not share one.
        drafter, shadow = make_drafter(d, model, tokenizer, target, args.gamma), d.startswith("ngram")
        if pinned is None:
            return AdaptiveGamma(drafter, batch_policy(priced[d], args), shadow)
        return PinnedGamma(drafter, batch_policy(priced[d], args), pinned, shadow=shadow)

    if loop_timed:  # price each step as the loop itself runs it
        pinned = {d: [policy(d, g) for g in range(args.gamma + 1)] for d in priced}
        costs["loop"] = measure_loop_costs(targets, pinned, batches, max_new_tokens=args.max_new_tokens,
                                           seed=args.seed, params=params, eos=eos, progress=progress)
        del pinned
        priced = {d: loop_priced(c, costs["loop"][d], costs["t1_seconds"]) for d, c in priced.items()}
    adaptive = {d: policy(d) for d in priced if "adaptive" in args.policy}
    runs = compare(args, model, combos, targets, batches, drafters, adaptive, params, eos, progress)
    result = {"machine": machine_info("cpu"), "command": args.command, "settings": settings(args),
              "costs": costs, "runs": runs, "crossover": crossovers(runs, args.drafters),
              "adaptive_vs_best": adaptive_vs_best(runs),
              "adaptive_vs_best_paired": adaptive_vs_best(runs, paired=True),
              "adaptive_vs_best_fastest": adaptive_vs_best(runs, "tokens_per_s_fastest")}
    result["roofline"] = roofline_section(model, drafters, runs, costs, args)
    if args.traces:
        result["traces"] = run_traces(target, drafters, tokenizer, args, params, progress)
    return result


def batch_policy(costs, args) -> GammaPolicy:
    """The command's adaptive policy, priced by this machine's ``costs``.

    Prompt lookup drafts in the shadow (free, so acceptance stays observable at gamma 0); a model drafter
    may stop drafting (min_gamma 0) and probes after 4 idle steps, but only where its catch-up costs at
    most one target pass: often at a small batch, where a wrong "off" costs the most.  Measured on a
    2-core CPU (SmolLM2-135M):

    * decay 0.95 (about the last 20 steps): with 0.8 (about 5) a few rejections in a row had dropped the
      estimate near 0.2 and switched the draft model off at batch 1 (0.88 of fixed gamma 4's throughput,
      against 0.96 with 0.95);
    * margin 0.2 where the costs are the forwards' (``--forward-costs``): they price the target pass and
      the draft steps, not the loop's per-row work (drafting in Python row by row, rows padded to the
      longest draft, masks for rows out of step), which a small predicted gain cannot pay for once several
      rows share a pass (prompt lookup: at B = 8, gamma 1 predicted at S_B = 1.03 ran at 0.86 of plain
      decoding; with a margin of 0.1, B = 16 still ran at 0.78).
    * no margin where the costs are the loop's own (:class:`~specbook.bench.batch_calibration.LoopCosts`,
      the default): a step timed in the loop already includes that work, and a margin on top counted it
      twice (prompt lookup on prompts never tuned on, 32 tokens, float32: with 0.2 the policy reached
      0.94 and 0.91 of fixed gamma 4 at B = 2 and 4, declining steps it predicted at S_B = 1.07-1.12)."""
    margin = 0.0 if isinstance(costs, LoopCosts) else 0.2
    return GammaPolicy(costs=costs, decay=0.95, min_gamma=0, margin=margin, probe_every=4,
                       horizon=args.max_new_tokens)


def load(args):
    """(model, tokenizer, prompt ids, the target, {drafter name: drafter}) for this command line; records
    the dtype used in ``args.dtype`` (the requested one in ``args.dtype_requested``)."""
    from ..models.smollm2 import load_smollm2

    dtype = resolve_dtype(args.dtype)
    args.dtype_requested, args.dtype = args.dtype, dtype_name(dtype)  # the report records the dtype used
    model, tokenizer = load_smollm2("cpu", dtype)
    prompts = interleave(select(load_prompts(args.prompts), args.categories.split(",") if args.categories else None))
    ids = [chat_ids(tokenizer, p.prompt) for p in prompts]
    room = args.max_new_tokens if args.traces_only else args.max_new_tokens + args.gamma + 2
    if args.traces or args.traces_only:  # the reasoning prompts are short; their traces are long
        room = max(room, args.trace_tokens + args.gamma + 2)
    target = LlamaTarget(model, max_length=max(len(i) for i in ids) + room)
    drafters = {d: make_drafter(d, model, tokenizer, target, args.gamma) for d in args.drafters}
    return model, tokenizer, ids, target, drafters


def settings(args) -> dict:
    return {k: v for k, v in vars(args).items() if k not in ("json_path", "command")}


def compare(args, model, combos, targets, batches, fixed: dict, adaptive: dict, params, eos,
            progress: bool) -> list[dict]:
    """Every (drafter, policy) run at every batch size, ``--repeats`` times: the runs of one repeat stepped
    side by side (:func:`side_by_side`), ties broken in an order rotated each repeat.  ``fixed`` and
    ``adaptive``: the drafters of the two policies, by name."""
    runs = []
    bar = tqdm(total=len(args.batch_sizes) * args.repeats, desc="batch", disable=not progress)
    for B in args.batch_sizes:
        reps: dict = {c: [] for c in combos}
        for r in range(args.repeats):
            started = {(d, pol): Run(targets[i], None if d == "none" else (adaptive if pol == "adaptive" else fixed)[d],
                                     batches[B], max_new_tokens=args.max_new_tokens, gamma=args.gamma, seed=args.seed,
                                     params=params, eos=eos)
                       for i, (d, pol) in enumerate(combos)}
            side_by_side([started[c] for c in rotated(combos, r)])
            for c, run in started.items():
                reps[c].append(run.figures())
            bar.update(1)
        runs += summarise(model, B, batches[B], reps, args.gamma, params.greedy)
    bar.close()
    return runs


def summarise(model, B: int, batch, reps: dict, gamma: int, greedy: bool) -> list[dict]:
    """One report row per combo at batch size B: medians over the repeats, outputs checked against plain's."""
    plain = reps[("none", "fixed")][0]["sequences"]
    rows = []
    for (d, pol), rr in reps.items():
        run = _median_run(rr)
        seqs = run.pop("sequences")
        ties = differences_are_near_ties(model, batch, plain, seqs) if greedy else None
        run.update(drafter=d, policy=pol if d != "none" else "plain", batch_size=B, gamma=0 if d == "none" else gamma,
                   outputs_identical_to_plain=(seqs == plain) if greedy else None, differences_are_near_ties=ties)
        rows.append(run)
    return rows


def make_drafter(name: str, model, tokenizer, target, gamma: int):
    """The registry's drafter; EAGLE as a chain of ``gamma`` drafts (the batch loop verifies chains)."""
    if name == "eagle":
        from .registry import make_eagle

        return make_eagle(model, tokenizer, tree=None)
    return get_drafter(name).make(model, tokenizer, gamma=gamma, target=target)


def measure_costs(model, target, drafters, args, progress: bool) -> dict:
    """v_B for every batch size, c_B of the draft model, and the measured roofline."""
    if progress:
        print("measuring v_B(n), c_B and the roofline ...", file=sys.stderr)
    draft_target = None
    if "draft" in drafters:
        inner = drafters["draft"].model  # the draft model's own LlamaTarget: time a copy with its own cache
        draft_target = LlamaTarget(inner.model, max_length=128)
    probe = LlamaTarget(model, max_length=128)
    measured = batch_costs.batch_verify_costs(probe, args.batch_sizes, args.gamma + 1, draft=draft_target)
    costs = {"v": measured["v"], "v_raw": measured["v_raw"], "t1_seconds": measured["seconds"],
             "c": {"draft": measured["c"]} if draft_target is not None else {},
             "catch_up": {"draft": measured["catch_up"]} if draft_target is not None else {},
             "roofline": batch_costs.measure_roofline(resolve_dtype(args.dtype), dim=model.config.dim,
                                                      hidden=model.config.intermediate_size)}
    return costs


def roofline_section(model, drafters, runs, costs, args) -> dict:
    """The measured peaks, the ridge, and the crossover each drafter's measured acceptance predicts."""
    roof = costs["roofline"]
    hw = batch_costs.measured_hardware(roof)
    params = sum(p.numel() for p in model.parameters())
    dtype_bytes = torch.finfo(resolve_dtype(args.dtype)).bits // 8
    predicted = {}
    for d in args.drafters:
        fixed = [r for r in runs if r["drafter"] == d and r["policy"] == "fixed"]
        if d == "none" or not fixed:
            continue
        alpha = min(max(fixed[0]["acceptance_rate"], 0.0), 0.999)  # measured at the smallest batch
        draft_params = (sum(p.numel() for p in drafters[d].model.model.parameters()) if d == "draft" else 0)
        predicted[d] = {"alpha": alpha, "draft_params": draft_params,
                        "crossover": batch_costs.roofline_crossover(alpha, args.gamma, hw, roof["dtype"], params,
                                                                    dtype_bytes, draft_params)}
    return {**roof, "params": params, "dtype_bytes": dtype_bytes, "predicted": predicted}


def format_table(result: dict) -> str:
    lines = [f"{'drafter':<8} {'policy':<9} {'B':>3} {'tok/s':>8} {'ms/tok':>8} {'tau':>5} {'pos/pass':>8} "
             f"{'wasted':>6} {'pad':>5} {'=plain':>6}"]
    for r in result["runs"]:
        same = {True: "yes", False: "NO", None: "-"}[r["outputs_identical_to_plain"]]
        if r["outputs_identical_to_plain"] is False and r.get("differences_are_near_ties"):
            same = "ties"  # every difference starts at a near tie for the dtype
        lines.append(f"{r['drafter']:<8} {r['policy']:<9} {r['batch_size']:>3} {r['tokens_per_s']:>8.1f} "
                     f"{r['ms_per_token']:>8.1f} {r['tau']:>5.2f} {r['positions_per_pass']:>8.1f} "
                     f"{r['wasted_fraction']:>6.2f} {r['padding_fraction']:>5.2f} {same:>6}")
    roof = result["roofline"]
    lines.append(f"roofline: {roof['matmul_flop_per_s'] / 1e9:.0f} GFLOP/s, {roof['memory_bytes_per_s'] / 1e9:.1f} GB/s, "
                 f"ridge {roof['ridge_flop_per_byte']:.1f} flop/byte")
    for d, B in result["crossover"].items():
        pred = roof["predicted"].get(d, {})
        lines.append(f"crossover {d}: measured {B}, predicted {pred.get('crossover')} (alpha {pred.get('alpha', 0):.2f})")
    for key, what in (("adaptive_vs_best", "medians"), ("adaptive_vs_best_paired", "paired repeats"),
                      ("adaptive_vs_best_fastest", "fastest repeats")):
        for d, ratios in result.get(key, {}).items():
            lines.append(f"adaptive {d} / best of plain and fixed ({what}): "
                         + "  ".join(f"B={B} {x:.2f}" for B, x in ratios.items()))
    if "traces" in result:
        lines.append(format_traces(result["traces"]))
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())

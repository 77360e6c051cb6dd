"""``python -m specbook bench``: drafters x engines x workload categories on SmolLM2-135M-Instruct.

Every prompt is decoded by every (engine, drafter) pair back to back, in an order rotated
from one prompt to the next, so that a busy machine slows all of them alike; speedups are
medians of per-prompt ratios measured side by side.  Plain decoding (``none``) is always
run, because every speedup is relative to the same engine's plain decoding.

    python -m specbook bench                                   # 2 prompts per category, 64 tokens
    python -m specbook bench --limit 0 --json bench.json       # all 66 prompts
    python -m specbook bench --prompts mine.jsonl --drafters none,ngram --engines specbook
    python -m specbook bench --engines specbook,transformers,llamacpp  # llama.cpp too, when llama_cpp is installed
    python -m specbook bench --ignore-eos --max-new-tokens 96  # fixed-length runs, past the end of the reply
    python -m specbook bench --dtype float32 --gamma 4         # a fixed dtype and draft length
    python -m specbook bench --json run.json --plot speedup.png  # the report and its chart
    python -m specbook bench --temperature 1 --drafters draft --verifier token,block  # block verification, side by side
    python -m specbook bench --from-json run.json --plot speedup.png  # the chart of a finished run, no model

``--plot`` draws speedup_vs_autoregressive per category (x) and drafter (one bar each, per engine
when there are several), with plain decoding as the line at 1.0 (:mod:`specbook.bench.plot`);
``--from-json`` takes the numbers from a report written by ``--json`` instead of running, and
then accepts no flag of a run.

Each reply stops right after its end-of-turn token (at most ``--max-new-tokens``), in every
engine; ``--ignore-eos`` makes every run exactly ``--max-new-tokens`` long instead.  ``llamacpp``
(greedy only; :mod:`specbook.bench.llamacpp`) runs when ``llama_cpp`` is installed, else it is skipped.
``--dtype auto`` (default) is bfloat16 where the device multiplies it natively, else float32
(:func:`specbook.models.auto_dtype`).  ``--gamma auto`` (default) sizes chains and trees from
the verify-cost curve measured first and a short pilot of each drafter (:mod:`specbook.bench.sizing`);
the ``compiled`` engine is then compiled at the widths ``COMPILED_WIDTHS`` (a pass of n positions runs
at the narrowest width >= n), its own curve timed at those widths, and the same pilots sized again for
it (``compiled_draft_sizes``: its passes cost differently from the eager model's).
``--verifier`` judges the specbook engine's sampled chain drafts token by token (``token``, default:
:func:`specbook.verify.accept_chain`) or as a block (``block``: :func:`specbook.verify_block.accept_block`,
Sun et al., ICLR 2025); ``token,block`` runs every drafter with both, side by side, one row each.

JSON layout (``--json``)::

    {"machine": {...}, "target": "...", "settings": {..., "dtype", "stop_at_eos"},
     "roofline": {"bandwidth_bytes_per_s", "sum_read_bandwidth_bytes_per_s", "weights_bytes", ...},
     "draft_sizes": {drafter: {...}}, "compiled_draft_sizes": {drafter: {...}} (when the compiled engine ran),
     "runs": [{"engine", "drafter", "verifier", "verified_by", "category", "dtype", "gamma", "tree_budget", "prompts",
               "new_tokens", "seconds", "tokens_per_s", "tokens_per_s_total", "tau", "draft_efficiency",
               "drafting_steps", "draft_tokens", "accepted_tokens", "accepted_tokens_per_position",
               "mean_acceptance_length", "draft_acceptance_rate", "alpha", "acceptance_per_position",
               "acceptance_per_position_unconditional", "accepted_length_histogram",
               "speedup_vs_autoregressive", "roofline_fraction", "roofline_fraction_sum_read",
               "weight_streaming_limit_tokens_per_s",
               "outputs_identical_to_autoregressive", "differences_are_near_ties", "lookup_share",
               "output_ids_sha256": [...]}, ...],
     "overall": [...same fields over all categories...],
     "engine_ratio": {...}, "engine_ratios": [{"engine", "drafter", "specbook_over_engine_tokens_per_s_median", ...}],
     "verify_cost": {engine: {"n", "seconds", "v"}}, "skipped": [...], "per_prompt": [...]}

Definitions: ``tokens_per_s`` = median over prompts of new tokens / seconds;
``tokens_per_s_total`` = new_tokens / seconds; ``tau`` = emitted tokens / target passes;
``draft_efficiency`` = accepted / proposed drafts (docs/glossary.md); ``drafting_steps`` through
``accepted_length_histogram`` are :func:`specbook.metrics.engine_metrics` of the counters summed over
the run's prompts (vLLM's and SGLang's names in that module and docs/glossary.md; None where there is
nothing to divide by); ``verifier``: the chain verifier asked for (None for plain decoding;
transformers' own rule is ``"token"``), ``verified_by``: what judged the drafts (``"greedy"`` at
temperature 0, ``"tree"`` for tree drafts); ``speedup_vs_autoregressive`` = median over prompts
of (plain seconds / this drafter's seconds), same engine; ``roofline_fraction`` = median over
prompts of tokens/s over the weight-streaming limit (bandwidth / bytes one decode step streams:
every weight once plus the KV cache at the run's mean context; above 1 only by speculation),
where the bandwidth is what the LM head's matrix-vector product reaches here (the model's dtype,
batch 1, median of repeats: :func:`specbook.bench.timing.matvec_read_bandwidth`), and
``roofline_fraction_sum_read`` the same over the faster rate of summing a large float32 buffer
(:func:`specbook.bench.timing.memory_read_bandwidth`); ``alpha`` = accepted / verified drafts
(docs/glossary.md; None where nothing was verified or the per-depth counters are unknown);
``lookup_share`` = the share of a two-way drafter's drafts (:class:`specbook.drafters.LookupFirst`) that
prompt lookup made rather than its fallback, over the run's prompts (None for other drafters);
``output_ids_sha256`` = SHA-256
of the generated ids written as comma-separated decimals (``"12,7,512"``), per prompt.
Greedy runs whose output differs from plain decoding get a ``divergence`` entry in
``per_prompt`` (first differing token, the target's top-2 logit gap there, near tie or not);
``differences_are_near_ties`` is true when every difference of a row starts at a near tie.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

from .. import cliargs
from ..machine import machine_info
from ..models.chat import chat_ids
from ..models.dtype import DTYPE_NAMES, dtype_name, resolve_dtype
from ..sampling import SamplingParams
from .combos import engine_combos
from .engines import VERIFIERS, CompiledEngine, RunResult, SpecbookEngine
from .arguments import check_device, check_json_path, parse_gamma, plot_path
from .registry import DRAFTERS, get_drafter
from .results import (aggregate, draft_split, engine_ratio, explain_differences, format_table, ids_sha256,
                      split_since, versus_specbook)
from .sizing import padded_curve, resize, size_chain, size_replay, size_tree
from .timing import add_roofline, matvec_read_bandwidth, memory_read_bandwidth, verify_cost_curve
from .workloads import first_of_each_category, load_prompts, select

TARGET_NAME = "SmolLM2-135M-Instruct"
ENGINES = ("specbook", "compiled", "transformers", "llamacpp")  # llamacpp: optional (specbook.bench.llamacpp)
TREE_ROOM = 72  # cache slots past the text kept free for a verified tree (largest shipped tree: 64 nodes)
CURVE_CONTEXT = 128  # cached tokens before the timed forward of the verify-cost curve
CURVE_POSITIONS = 17  # n = 1..17 new positions
DEFAULT_GAMMA = 4  # chains when the verify-cost curve is skipped (--curve-reps 0)
MAX_GAMMA = 16  # the longest chain --gamma auto may choose (17 positions: the curve's end)
COMPILED_WIDTHS = (1, 2, 3, 5, 9, 17)  # the compiled engine's pass widths when it is sized by its own curve


def parse_args(argv):
    return _parser().parse_args(argv)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m specbook bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", help="JSON lines with id, category, prompt (default: the built-in 66 prompts)")
    p.add_argument("--categories", help="comma-separated categories to keep (default: all)")
    p.add_argument("--limit", type=int, default=2, help="prompts per category, 0 = all (default 2)")
    p.add_argument("--drafters", default="none,ngram", help=f"comma-separated, from: {', '.join(DRAFTERS)}")
    p.add_argument("--engines", default="specbook,transformers",
                   help="comma-separated: specbook,compiled (plain greedy decoding, torch.compile),transformers,llamacpp")
    p.add_argument("--max-new-tokens", type=int, default=64, help="at most this many new tokens per reply (default 64)")
    p.add_argument("--ignore-eos", action="store_true",
                   help="do not stop at the end-of-turn token: every run makes exactly --max-new-tokens tokens "
                        "(default: each reply stops right after its end token)")
    p.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    p.add_argument("--top-p", type=float, default=1.0)
    p.add_argument("--verifier", default="token",
                   help="how the specbook engine judges sampled chain drafts: token (default, token by token), block "
                        "(block verification), or token,block (both, side by side)")
    p.add_argument("--gamma", default="auto",
                   help="draft tokens per verification, or 'auto' (default): chains and trees sized from the "
                        "measured verify-cost curve and a pilot of each drafter")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] (default cpu)")
    p.add_argument("--dtype", default="auto", choices=list(DTYPE_NAMES),
                   help="auto (default): bfloat16 where the device multiplies it natively, else float32")
    p.add_argument("--threads", type=int, default=None, help="torch CPU threads, >= 1 (default: torch's own)")
    p.add_argument("--batch-invariant", action="store_true",
                   help="specbook's target scores every token with the same bits whatever else shares its pass "
                        "(LlamaModel.batch_invariant): bfloat16 chains then emit plain decoding's exact tokens; "
                        "slower, see docs/bench.md")
    p.add_argument("--seed", type=int, default=0, help="seed of specbook's sampling generators")
    p.add_argument("--curve-reps", type=int, default=5,
                   help="repetitions per n of the verify-cost curve, 0 = skip (then --gamma auto falls back to 4)")
    p.add_argument("--json", dest="json_path", help="write the results here")
    p.add_argument("--no-progress", action="store_true")
    p.add_argument("--plot", type=plot_path, metavar="PATH.png",
                   help="also draw the speedup per category and drafter to this .png (.svg, .pdf)")
    p.add_argument("--from-json", type=cliargs.existing_file, metavar="RUN.json",
                   help="do not run: draw --plot from a report written earlier by --json")
    return p


def _names(text: str, allowed, what: str) -> list[str]:
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--{what} is empty")
    bad = [n for n in names if n not in allowed]
    if bad:
        raise ValueError(f"unknown {what} {bad}; available: {', '.join(allowed)}")
    return list(dict.fromkeys(names))


def _settings(args) -> tuple[SamplingParams, list[str], list[str]]:
    """Check the command line's numbers, names, device and output path before anything loads;
    (sampling params, engines, drafters with "none" first); the verifiers go to ``args.verifiers``.
    Also sets the thread count and warns when a busy machine will make multi-threaded timings noisy."""
    if args.max_new_tokens < 1:
        raise ValueError(f"--max-new-tokens must be >= 1, got {args.max_new_tokens}")
    args.fixed_gamma = parse_gamma(args.gamma)
    if args.curve_reps < 0:
        raise ValueError(f"--curve-reps must be >= 0 (0 = skip the curve), got {args.curve_reps}")
    if args.threads is not None and args.threads < 1:
        raise ValueError(f"--threads must be >= 1 (omit it for torch's default), got {args.threads}")
    if args.limit < 0:
        raise ValueError(f"--limit must be >= 0 (0 = all prompts), got {args.limit}")
    check_device(args.device)
    check_json_path(args.json_path)
    params = SamplingParams(temperature=args.temperature, top_p=args.top_p)
    engines = _names(args.engines, ENGINES, "engines")
    args.verifiers = _verifiers(args.verifier, params, engines)
    for name in args.drafters.split(","):
        if name.strip():
            get_drafter(name.strip())  # a clear error for misspelt names
    drafters = _names("none," + args.drafters, list(DRAFTERS), "drafters")
    if args.plot and drafters == ["none"]:
        raise ValueError(f"--plot {args.plot!r} draws speedups over plain decoding: add a drafter to --drafters")
    if args.threads:
        torch.set_num_threads(args.threads)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    if torch.device(args.device).type == "cpu" and torch.get_num_threads() > 1 and load > (os.cpu_count() or 1):
        print(f"bench: the machine is busy (load {load:.1f} on {os.cpu_count()} cores); with "
              f"{torch.get_num_threads()} threads every op waits for descheduled threads: consider --threads 1",
              file=sys.stderr)
    return params, engines, drafters


def _verifiers(text: str, params: SamplingParams, engines: list[str]) -> list[str]:
    """--verifier's names; both at once only when sampling (at temperature 0 both are greedy matching),
    block only with the specbook engine (transformers has its own token-wise rule)."""
    verifiers = _names(text, list(VERIFIERS), "verifier")
    if len(verifiers) > 1 and params.greedy:
        raise ValueError(f"--verifier {text}: at temperature 0 both verifiers are greedy matching, so there is "
                         "nothing to compare; sample (--temperature > 0)")
    if "block" in verifiers and "specbook" not in engines:
        raise ValueError(f"--verifier {text}: block verification runs in the specbook engine only; "
                         "add specbook to --engines")
    return verifiers


def size_drafters(args, sb: SpecbookEngine, model, tokenizer, drafters, pilot_ids, curve, dtype, eos) -> dict:
    """{drafter: Sizing} for every drafter the registry marks as sized, when --gamma is auto and a
    verify-cost curve was measured (:mod:`specbook.bench.sizing`)."""
    sizes = {}
    if args.fixed_gamma is not None or curve is None:
        return sizes
    v = curve["v"]
    for d in drafters:
        spec = get_drafter(d)

        def make(spec=spec, **kw):
            return spec.make(model, tokenizer, device=args.device, dtype=dtype, target=sb.target, **kw)

        if spec.sizing in ("chain", "replay"):
            size = size_chain if spec.sizing == "chain" else size_replay
            sizes[d] = size(sb.target, make(gamma=MAX_GAMMA), pilot_ids, v, max_gamma=MAX_GAMMA, eos_token_id=eos)
        elif spec.sizing == "tree":
            sizes[d] = size_tree(sb.target, lambda n: make(gamma=MAX_GAMMA, tree=n), spec.budgets, pilot_ids, v,
                                 eos_token_id=eos, step_seconds=curve["seconds"][0])
    return sizes


def size_compiled(args, model, max_length: int, context: list[int], sizes: dict, eager_curve: dict):
    """(the compiled engine, compiled at every width of COMPILED_WIDTHS; its verify-cost curve at those
    widths; {drafter: Sizing} for it): the eager pilots of ``sizes`` chosen again under the compiled
    passes' costs (:func:`specbook.bench.sizing.resize`).  A pass of n positions runs at the narrowest
    width >= n, so the compiled v(n) is the curve's value at that width (:func:`padded_curve`)."""
    engine = CompiledEngine(model, max_length, COMPILED_WIDTHS)
    engine.target.warm_up(progress=not args.no_progress)
    curve = verify_cost_curve(engine.target, context, COMPILED_WIDTHS[-1], args.curve_reps, sizes=COMPILED_WIDTHS,
                              progress=not args.no_progress)
    curve["kernels"] = engine.target.kernel_report()  # the product kernels each width runs, as timed in warm_up
    v = padded_curve(curve, COMPILED_WIDTHS[-1])
    ratio = eager_curve["seconds"][0] / curve["seconds"][0]  # t(1) eager over compiled
    longest = min(MAX_GAMMA, COMPILED_WIDTHS[-1] - 1)  # a chain's pass fits the widest width
    return engine, curve, {d: resize(z, v, ratio, longest) for d, z in sizes.items()}


def run_bench(args) -> dict:
    from ..models.smollm2 import load_smollm2

    params, engines, drafters = _settings(args)
    prompts = select(load_prompts(args.prompts), args.categories.split(",") if args.categories else None, args.limit)
    dtype = resolve_dtype(args.dtype, args.device)
    model, tokenizer = load_smollm2(args.device, dtype)
    model.batch_invariant(args.batch_invariant)
    eos = None if args.ignore_eos else tokenizer.eos_token_id
    prompt_ids = [chat_ids(tokenizer, p.prompt) for p in prompts]
    longest = max(map(len, prompt_ids))
    room = max(args.fixed_gamma or MAX_GAMMA, TREE_ROOM)
    max_length = min(model.config.max_position_embeddings,
                     max(longest + args.max_new_tokens + room + 2, min(longest, CURVE_CONTEXT) + CURVE_POSITIONS + 1))
    machine = machine_info(args.device)
    sb = SpecbookEngine(model, max_length)  # also times the curve and runs the pilots

    # The machine first: its verify cost v(n) and its read bandwidth, then drafts sized by them.
    curves = {}
    context = prompt_ids[0][:CURVE_CONTEXT]
    if args.curve_reps:
        curves["specbook"] = verify_cost_curve(sb.target, context, CURVE_POSITIONS, args.curve_reps)
    bandwidth = [matvec_read_bandwidth(model)]  # what decoding's own product streams: the roofline's bandwidth
    sum_read = [memory_read_bandwidth(device=args.device)]  # summing a large buffer, kept for comparison
    sizes = size_drafters(args, sb, model, tokenizer, drafters, first_of_each_category(prompts, prompt_ids),
                          curves.get("specbook"), dtype, eos)
    compiled, by_engine = None, {}
    if "compiled" in engines and sizes:  # the compiled engine sized by its own passes' costs
        compiled, curves["compiled"], by_engine["compiled"] = size_compiled(args, model, max_length, context, sizes,
                                                                            curves["specbook"])

    def gamma_of(d, engine="specbook"):
        z = by_engine.get(engine, sizes).get(d)
        return z.chosen if z is not None and z.kind == "chain" else (args.fixed_gamma or DEFAULT_GAMMA)

    def tree_of(d, engine="specbook"):
        z = by_engine.get(engine, sizes).get(d)
        return z.chosen if z is not None and z.kind == "tree" else None

    combos, skipped, hf = engine_combos(args, engines, drafters, sb, model, tokenizer, dtype, gamma_of, tree_of,
                                        compiled)
    for engine, d, obj, verifier in combos:  # warm-up: first calls allocate caches and pick kernels
        engine.run(prompt_ids[0][:32], obj, params, 4, gamma_of(d, engine.name), _gen(args, 0),
                   verifier=verifier or "token")
    records, outputs = [], {}
    bar = tqdm(total=len(prompts) * len(combos), desc="bench", disable=args.no_progress, file=sys.stderr)
    for i, (prompt, ids) in enumerate(zip(prompts, prompt_ids)):
        shift = i % len(combos)
        for engine, d, obj, verifier in combos[shift:] + combos[:shift]:
            gamma, tree = gamma_of(d, engine.name), tree_of(d, engine.name)
            split = draft_split(obj)
            res: RunResult = engine.run(ids, obj, params, args.max_new_tokens, gamma, _gen(args, i), eos,
                                        verifier=verifier or "token")
            records.append({"engine": engine.name, "drafter": d, "verifier": verifier, "verified_by": res.verified_by,
                            "id": prompt.id, "category": prompt.category,
                            "dtype": dtype_name(dtype), "gamma": None if tree or d == "none" else gamma,
                            "tree_budget": tree, "prompt_tokens": len(ids), "new_tokens": len(res.new_ids),
                            "seconds": res.seconds, "passes": res.passes, "emitted": res.emitted,
                            "proposed": res.proposed, "accepted": res.accepted, **res.counters(),
                            **split_since(obj, split), "sha256": ids_sha256(res.new_ids)})
            outputs[(engine.name, d, verifier, prompt.id)] = res.new_ids
            bar.update(1)
    bar.close()
    bandwidth.append(matvec_read_bandwidth(model))
    sum_read.append(memory_read_bandwidth(device=args.device))
    roofline = add_roofline(records, model, statistics.mean(bandwidth), statistics.mean(sum_read))
    roofline["bandwidth_samples_bytes_per_s"] = [round(b) for b in bandwidth]
    roofline["sum_read_bandwidth_samples_bytes_per_s"] = [round(b) for b in sum_read]
    by_id = dict(zip((p.id for p in prompts), prompt_ids))
    if params.greedy:
        explain_differences(model, records, outputs, by_id)
    versus = versus_specbook(records, params.greedy, model, outputs, by_id)

    if args.curve_reps and hf is not None:
        curves["transformers"] = verify_cost_curve(hf, context, CURVE_POSITIONS, args.curve_reps)
    if hasattr(os, "getloadavg"):
        machine["load_average_end"] = round(os.getloadavg()[0], 2)
    runs, overall = aggregate(records, params.greedy)
    return {"machine": machine, "target": TARGET_NAME,
            "settings": {"max_new_tokens": args.max_new_tokens, "temperature": args.temperature, "top_p": args.top_p,
                         "gamma": args.gamma, "verifier": args.verifiers, "dtype": dtype_name(dtype),
                         "dtype_requested": args.dtype, "batch_invariant": args.batch_invariant,
                         "limit": args.limit, "engines": engines, "drafters": drafters,
                         "prompts_file": args.prompts or "built-in", "seed": args.seed, "stop_at_eos": eos is not None,
                         "eos_token_id": eos, "command": "python -m specbook bench " + " ".join(args.argv)},
            "roofline": roofline, "draft_sizes": {d: z.as_json() for d, z in sizes.items()},
            **{f"{e}_draft_sizes": {d: z.as_json() for d, z in zs.items()} for e, zs in by_engine.items()},
            "runs": runs, "overall": overall, "skipped": skipped, "engine_ratio": engine_ratio(records, params.greedy),
            "engine_ratios": versus, "verify_cost": curves, "per_prompt": records}


def _gen(args, i: int) -> torch.Generator | None:
    if args.temperature == 0:
        return None
    return torch.Generator(device=args.device).manual_seed(args.seed * 100_003 + i)


def replot(args) -> int:
    """``--from-json``: draw ``--plot`` from a finished run's report; refuse every flag of a run."""
    defaults = _parser().parse_args([])
    ignored = [f"--{k.replace('_', '-')}" for k, v in vars(args).items()
               if k not in ("plot", "from_json", "no_progress", "argv") and v != getattr(defaults, k)]
    if args.plot is None:
        raise ValueError(f"--from-json {args.from_json!r} needs --plot PATH.png: drawing is all it does")
    if ignored:
        raise ValueError(f"--from-json draws a finished run; {', '.join(ignored)} would not apply (leave it out)")
    from .plot import save_report_plot

    save_report_plot(args.from_json, args.plot)
    print(f"wrote {args.plot}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    args.argv = argv
    try:
        if args.from_json:
            return replot(args)
        result = run_bench(args)
    except ValueError as err:
        print(f"bench: error: {err}", file=sys.stderr)
        return 2
    print(format_table(result["runs"], result["overall"], result["engine_ratio"], result["verify_cost"],
                       result["engine_ratios"]))
    for r in result["per_prompt"]:
        if "divergence" in r:
            print(f"{r['engine']}/{r['drafter']} on {r['id']}: {r['divergence']['description']}")
        if "divergence_vs_specbook" in r:
            d = r["divergence_vs_specbook"]["description"]
            print(f"{r['engine']}/{r['drafter']} on {r['id']}, against specbook's plain: {d}")
    if result["skipped"]:
        print("skipped: " + "; ".join(f"{s['engine']}/{s['drafter']} ({s['reason']})" for s in result["skipped"]))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(result, indent=1) + "\n")
        print(f"wrote {args.json_path}")
    if args.plot:
        from .plot import save_speedup_plot

        save_speedup_plot(result, args.plot)
        print(f"wrote {args.plot}")
    return 0

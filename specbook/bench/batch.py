"""``python -m specbook batch``: batching versus speculation, measured on this machine.

Shape legend: B batch (rows decoded together), K draft length, n positions per row in one pass.

Speculation spends the arithmetic a memory-bound decode step leaves idle; batching spends the same
idle arithmetic (Leviathan et al. 2023, sec. 3.4; the roofline of Williams et al. 2009).  So at
some batch size fixed-gamma speculation stops paying: that batch size is the *crossover*.  This
command decodes the same prompts (of different lengths) at every batch size with plain decoding,
fixed-gamma speculation and the load-aware :class:`~specbook.drafters.scheduler.BatchScheduler`,
and reports, per run::

    tokens_per_s        all rows' new tokens over the run's time (throughput)
    ms_per_token        mean over rows of (time the row finished / its new tokens) (latency)
    tau                 tokens per target pass per row
    positions_per_pass  positions one target forward computed, B (K + 1), averaged over passes
    wasted_fraction     computed draft positions that were rejected or padding (a row whose
                        drafter found fewer tokens is padded to the batch's K), over all positions
    padding_fraction    the padding alone (drafters that report ``match_lengths``: prompt lookup)

and the crossover per drafter, the measured roofline of this machine with its prediction of the
crossover from each drafter's measured acceptance, and (``--traces``) acceptance along
step-by-step reasoning traces (:mod:`specbook.bench.batch_traces`).

Timing side by side.  On a shared machine a run can be 20-30% slower than its twin a second later.
So the policies of one repeat are not timed one after the other: their generations are stepped in
turns, one target pass at a time, the run furthest behind on its own clock first (:class:`Run`,
:func:`side_by_side`), each on its own cache and drafter; a run's time is the sum of its own
passes (prefill excluded).  A slow spell then lands on every policy alike, and
``adaptive_vs_best_paired`` divides it out repeat by repeat.

    python -m specbook batch --batch-sizes 1,2,4,8,16 --max-new-tokens 32 --drafters none,ngram,draft
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
from itertools import cycle, islice

import torch
from tqdm.auto import tqdm

from ..decode import DecodeStep, generate_steps, speculative_generate, speculative_steps
from ..drafters.scheduler import BatchCosts, BatchScheduler
from ..models import LlamaTarget
from ..models.chat import chat_ids
from ..models.dtype import dtype_name, resolve_dtype
from ..sampling import SamplingParams
from . import batch_costs
from .batch_costs import adaptive_vs_best, crossovers  # the runs read back (tests use these names)
from .batch_traces import format_traces, run_traces
from .crosscheck import differences_are_near_ties
from .results import machine_info
from .timing import rotated
from .registry import DRAFTERS, get_drafter
from .workloads import load_prompts, select

BATCH_DRAFTERS = ("none", "ngram", "draft", "eagle")  # chain drafters (EAGLE as a chain of gamma drafts)


def parse_args(argv):
    p = argparse.ArgumentParser(prog="python -m specbook batch", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", help="JSON lines with id, category, prompt (default: the built-in workloads)")
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


class StepLog:
    """An ``on_step`` hook that counts positions, waste and per-row finishing times of one run."""

    def __init__(self, drafter, start: float = 0.0, clock=None):
        self.drafter, self.start, self.clock = drafter, start, clock or batch_costs.now
        self.passes = self.positions = self.wasted = self.padding = 0
        self.finished: dict[int, float] = {}  # row -> seconds since start at its last step
        self.steps: list[tuple[tuple[int, ...], list[int], list[int], int]] = []  # (rows, accepted, kept, K)

    def __call__(self, step: DecodeStep) -> None:
        B, K = step.tokens.shape[0], step.draft.num_tokens
        accepted = (step.num_emitted - 1).tolist()
        self.passes += 1
        self.positions += B * (K + 1)
        self.wasted += sum(K - a for a in accepted)
        matches = list(getattr(self.drafter, "match_lengths", None) or [])
        if K and len(matches) == B:  # a row without a match drafted nothing: its K positions are padding
            self.padding += K * sum(m == 0 for m in matches)
        t = self.clock() - self.start
        for r in step.rows:
            self.finished[r] = t
        self.steps.append((step.rows, accepted, step.kept.tolist(), K))


class PrefillClock:
    """Times ``target.prefill`` while installed, and computes each distinct prefill once.

    The prompts' prefill is the same work for every policy at one batch size and, on a CPU, can
    outweigh a short decode: the run's ``seconds`` exclude it (reported apart), and a repeated
    prefill of the same tokens restores the cache saved the first time instead of recomputing it.
    """

    memo: dict = {}  # id(target) -> (key, k, v, lengths) of the last prefill

    def __init__(self, target):
        self.target, self.seconds = target, 0.0

    def __enter__(self):
        inner, target = self.target.prefill, self.target

        def prefill(tokens):
            t0 = batch_costs.now()
            key = (tuple(tokens.shape), hash(tuple(tokens.flatten().tolist())))
            saved = self.memo.get(id(target))
            cache = target.cache
            if saved is not None and saved[0] == key and saved[1].shape == cache.k.shape and not cache.length_list()[0]:
                cache.k.copy_(saved[1])
                cache.v.copy_(saved[2])
                cache._set_lengths(list(saved[3]))
            else:
                inner(tokens)
                self.memo[id(target)] = (key, cache.k.clone(), cache.v.clone(), list(cache.length_list()))
            self.seconds += batch_costs.now() - t0

        self.target.prefill = prefill  # an instance attribute shadows the method for this run only
        return self

    def __exit__(self, *exc):
        del self.target.prefill


class Run:
    """One generation of a batch, advanced one pass at a time; its clock counts its own passes only.

    Runs stepped in turns by :func:`side_by_side` share every slow spell of a shared machine, so the
    ratio of their times is far steadier than that of runs timed one after the other.  Each run needs
    its own target (cache) and drafter instance.  The prefill is timed apart and excluded."""

    def __init__(self, target, drafter, prompts, args, params, eos):
        if hasattr(drafter, "reset") and not isinstance(drafter, BatchScheduler):
            drafter.reset()  # a scheduler keeps the acceptance it learnt on the run's earlier generations
        self.drafter, self.rows = drafter, len(prompts)
        self.logged = len(getattr(drafter, "steps", []))
        self.seconds = 0.0  # inside this run's own passes (its prefill included)
        self.passes: list[float] = []  # each pass's seconds, in order (the first pays the prefill)
        self.log = StepLog(drafter, clock=lambda: self.seconds)
        self.prefill = PrefillClock(target).__enter__()
        g = torch.Generator().manual_seed(args.seed)
        if drafter is None:
            self.steps = generate_steps(target, prompts, args.max_new_tokens, params=params, generator=g, eos_token_id=eos)
        else:
            self.steps = speculative_steps(target, drafter, prompts, args.max_new_tokens, params=params, gamma=args.gamma, generator=g,
                                           eos_token_id=eos)
        self.result = None

    def advance(self) -> bool:
        """One pass (the first also prefills); False once the generation has ended."""
        t0 = batch_costs.now()
        try:
            step = next(self.steps)
        except StopIteration as stop:
            self.seconds += batch_costs.now() - t0
            self.result = stop.value
            self.close()
            return False
        dt = batch_costs.now() - t0
        self.seconds += dt
        self.passes.append(dt)
        self.log(step)
        return True

    def close(self) -> None:
        self.prefill.__exit__(None, None, None)

    def figures(self) -> dict:
        """The run's figures, prefill excluded from the times."""
        out, log, prefill = self.result, self.log, self.prefill.seconds
        seconds = self.seconds - prefill
        lengths = out.lengths.tolist()
        finished = [log.finished.get(r, self.seconds) - prefill for r in range(self.rows)]  # its last pass
        total = sum(lengths)
        positions = log.positions
        return {"seconds": seconds, "prefill_seconds": prefill, "new_tokens": total,
                "tokens_per_s": total / seconds,
                "ms_per_token": 1000 * statistics.mean(f / max(n, 1) for f, n in zip(finished, lengths)),
                "tau": out.stats.tau, "acceptance_rate": out.stats.acceptance_rate,
                "positions_per_pass": (log.positions / log.passes) if log.passes else self.rows,
                "wasted_fraction": log.wasted / positions if positions else 0.0,
                "padding_fraction": log.padding / positions if positions else 0.0,
                "sequences": out.sequences(),
                "gammas": [s.gamma for s in getattr(self.drafter, "steps", [])[self.logged:]]}


def side_by_side(runs: list[Run]) -> None:
    """Advance ``runs`` until every one has ended, one pass at a time, always the run whose own clock is
    furthest behind (the first listed among equals).

    So the runs' clocks stay within one pass of each other: second s of one run's time and second s of
    another's fall at about the same moment, and a slow spell of the machine lands on all the runs
    alive then.  (Round after round of one pass each would not do that: a run with short passes
    would fall behind and spend its last seconds alone.)"""
    live = list(runs)
    try:
        while live:
            run = min(live, key=lambda r: r.seconds)  # min keeps the first of equals: the listed order
            if not run.advance():
                live.remove(run)
    finally:
        for r in live:
            r.close()


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
    from ..models.smollm2 import load_smollm2

    params = SamplingParams(temperature=args.temperature)
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
    eos = tokenizer.eos_token_id

    progress = not args.no_progress
    if args.traces_only:
        return {"machine": machine_info("cpu"), "command": args.command,
                "settings": {k: v for k, v in vars(args).items() if k not in ("json_path", "command")},
                "traces": run_traces(target, drafters, tokenizer, args, params, progress)}
    costs = measure_costs(model, target, drafters, args, progress)
    priced = {d: BatchCosts(costs["v"], costs["c"].get(d, 0.0), costs["catch_up"].get(d, 0.0))
              for d in args.drafters if d != "none"}

    def scheduler(d: str) -> BatchScheduler:
        # Prompt lookup drafts in the shadow (free, so acceptance stays observable at gamma 0); a model
        # drafter probes after 4 idle steps, but only where its catch-up costs at most one target pass
        # (BatchScheduler's docstring): often at a small batch, where a wrong "off" costs the most.
        # Each scheduler wraps a drafter of its own: runs stepped side by side must not share one.
        return BatchScheduler(make_drafter(d, model, tokenizer, target, args.gamma), priced[d],
                              shadow=d.startswith("ngram"), probe_every=4, horizon=args.max_new_tokens)

    combos = [("none", "fixed")] + [(d, p) for d in args.drafters if d != "none" for p in args.policy]
    loop_timed = bool(priced) and "adaptive" in args.policy and not args.forward_costs
    # one cache per run stepped side by side: the combos, and gammas 0..gamma when the loop is timed
    targets = [target] + [LlamaTarget(model, max_length=target.max_length)
                          for _ in range(max(len(combos), args.gamma + 1 if loop_timed else 0) - 1)]
    schedulers = {d: scheduler(d) for d in priced if "adaptive" in args.policy}
    batches = {B: list(islice(cycle(ids), B)) for B in args.batch_sizes}  # prompts of different lengths
    if loop_timed:  # price each step as the loop itself runs it
        pinned = {d: [scheduler(d) for _ in range(args.gamma + 1)] for d in priced}
        costs["loop"] = measure_loop_costs(targets, pinned, batches, args, params, eos, progress=progress)
        del pinned
        for d, sched in schedulers.items():
            sched.costs = loop_priced(sched.costs, costs["loop"][d], costs["t1_seconds"])
    runs = []
    bar = tqdm(total=len(args.batch_sizes) * args.repeats, desc="batch", disable=not progress)
    for B in args.batch_sizes:
        batch = batches[B]
        reps: dict = {c: [] for c in combos}
        for r in range(args.repeats):
            # every policy's run stepped side by side (side_by_side); ties broken in an order rotated each repeat
            started = {}
            for i, (d, pol) in enumerate(combos):
                drafter = None if d == "none" else (schedulers[d] if pol == "adaptive" else drafters[d])
                started[(d, pol)] = Run(targets[i], drafter, batch, args, params, eos)
            side_by_side([started[c] for c in rotated(combos, r)])
            for c, run in started.items():
                reps[c].append(run.figures())
            bar.update(1)
        plain = reps[("none", "fixed")][0]["sequences"]
        for (d, pol), rr in reps.items():
            run = _median_run(rr)
            seqs = run.pop("sequences")
            ties = differences_are_near_ties(model, batch, plain, seqs) if params.greedy else None
            run.update(drafter=d, policy=pol if d != "none" else "plain", batch_size=B,
                       gamma=0 if d == "none" else args.gamma,
                       outputs_identical_to_plain=(seqs == plain) if params.greedy else None,
                       differences_are_near_ties=ties)
            runs.append(run)
    bar.close()
    result = {"machine": machine_info("cpu"), "command": args.command,
              "settings": {k: v for k, v in vars(args).items() if k not in ("json_path", "command")},
              "costs": costs, "runs": runs, "crossover": crossovers(runs, args),
              "adaptive_vs_best": adaptive_vs_best(runs),
              "adaptive_vs_best_paired": adaptive_vs_best(runs, paired=True),
              "adaptive_vs_best_fastest": adaptive_vs_best(runs, "tokens_per_s_fastest")}
    result["roofline"] = roofline_section(model, drafters, runs, costs, args)
    if args.traces:
        result["traces"] = run_traces(target, drafters, tokenizer, args, params, progress)
    return result


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


def measure_loop_costs(targets: list, pinned: dict, batches: dict, args, params, eos, *, new_tokens: int = 16,
                       rounds: int = 3, progress: bool = False) -> dict:
    """{drafter: {"step": {B: [T_B(1) / T_B(0), ..., T_B(gamma) / T_B(0)]} (fitted with :func:`straight`),
    "step_raw": {B: the same ratios as timed}, "seconds": {B: T_B(0)}}}.

    ``pinned``: {drafter: [scheduler 0, ..., scheduler gamma]}, one scheduler (each with its own
    drafter instance) per gamma; ``targets``: at least gamma + 1 targets (caches) of the model.
    T_B(g) is one step of the real decode loop, drafter and scheduler included, with scheduler g
    pinned to draft g tokens at every step, on the run's own batch of B prompts.  The gamma + 1
    runs are stepped side by side (:func:`side_by_side`, in a rotated order each round), so a slow
    spell of the machine lands on all of them; a step is the median of a run's passes (the first,
    which pays a model drafter's catch-up on the prompt, excluded), and T_B(g) / T_B(0) is the
    median over ``rounds`` rounds of the ratio within a round.
    :class:`~specbook.drafters.scheduler.BatchCosts` prices a step with it (``step_cost``)."""
    new_tokens = min(new_tokens, args.max_new_tokens)
    gammas = list(range(args.gamma + 1))
    if len(targets) < len(gammas):
        raise ValueError(f"need {len(gammas)} targets to time gammas 0..{args.gamma} side by side, got {len(targets)}")
    short = argparse.Namespace(**{**vars(args), "max_new_tokens": new_tokens})
    out: dict = {}
    bar = tqdm(total=len(pinned) * len(batches) * rounds, desc="loop costs", disable=not progress)
    for d, scheds in pinned.items():
        if len(scheds) != len(gammas):
            raise ValueError(f"pinned[{d!r}] must hold one scheduler per gamma 0..{args.gamma}, got {len(scheds)}")
        out[d] = {"step": {}, "step_raw": {}, "seconds": {}}
        for B, batch in batches.items():
            steps: dict = {g: [] for g in gammas}
            for r in range(rounds):
                runs = {}
                for g in gammas:
                    scheds[g].pinned = g
                    runs[g] = Run(targets[g], scheds[g], batch, short, params, eos)
                side_by_side([runs[g] for g in rotated(gammas, r)])
                if any(len(run.passes) < 2 for run in runs.values()):
                    raise ValueError(f"too few steps to time the loop at batch {B}: raise --max-new-tokens "
                                     f"(got {args.max_new_tokens})")
                for g, run in runs.items():
                    steps[g].append(statistics.median(run.passes[1:]))
                bar.update(1)
            out[d]["seconds"][B] = statistics.median(steps[0])
            out[d]["step_raw"][B] = [statistics.median(a / b for a, b in zip(steps[g], steps[0])) for g in gammas[1:]]
            out[d]["step"][B] = straight(out[d]["step_raw"][B])
        for sched in scheds:
            sched.pinned = None
    bar.close()
    return out


def straight(ratios: list[float]) -> list[float]:
    """The least-squares line a + b gamma through T(1), ..., T(G), kept above 1 and non-decreasing.

    Each further draft adds one draft-model step and one verified position, so the loop's step cost
    is close to a line in gamma; fitting one through all the gammas pools their timings, where the
    fastest round of each alone still wanders by 10-20% on a shared 2-core host."""
    n = len(ratios)
    if n < 2:
        return [max(r, 1.0) for r in ratios]
    xs = range(1, n + 1)
    mx, my = (n + 1) / 2, sum(ratios) / n
    b = max(sum((x - mx) * (y - my) for x, y in zip(xs, ratios)) / sum((x - mx) ** 2 for x in xs), 0.0)
    return [max(my + b * (x - mx), 1.0) for x in xs]


def loop_priced(costs: BatchCosts, loop: dict, t1_seconds: dict) -> BatchCosts:
    """``costs`` with the loop's measured step ratios; the catch-up (timed on forwards, in target
    passes) converted to loop steps."""
    catch_up = costs.catch_up
    if isinstance(catch_up, dict):
        catch_up = {B: c * t1_seconds[B] / loop["seconds"][B] for B, c in catch_up.items() if B in loop["seconds"]}
    return dataclasses.replace(costs, step_cost=dict(loop["step"]), catch_up=catch_up)


def roofline_section(model, drafters, runs, costs, args) -> dict:
    """The measured peaks, the ridge, and the crossover each drafter's measured acceptance predicts."""
    roof = costs["roofline"]
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
                        "crossover": batch_costs.roofline_crossover(alpha, args.gamma, roof, params, dtype_bytes,
                                                                    draft_params)}
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

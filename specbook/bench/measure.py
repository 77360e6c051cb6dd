"""Measured draft cost c, acceptance alpha and verify cost v, and the speedup theory predicts from them.

Shape legend: K draft tokens in one step, n = K + 1 positions verified.

Leviathan et al. (2023, Thm 3.8) predict the speedup of speculative decoding from three
numbers: alpha (per-token acceptance), c (one draft step / one target step) and, on real
hardware, v(n) (one target pass over n positions / over one).  This module measures all
three on the real loop and compares the prediction with the stopwatch:

* every ``propose`` and every target ``forward`` is timed by thin wrappers, so c is the
  drafter's own seconds per draft pass over the seconds of one plain decoding step (the
  same prompt decoded without a drafter, loop overhead included on both sides);
* v(n) is the target's verify-cost curve (:func:`specbook.bench.timing.verify_cost_curve`);
* alpha is the acceptance rate (accepted / verified drafts).

Predictions, per step s with K_s drafts (variable for prompt lookup and adaptive gamma):

    predicted   = sum_s E(alpha, K_s) / sum_s (K_s c + v(K_s + 1))     E = (1 - alpha^(K+1)) / (1 - alpha)
    cost model  = tokens emitted / sum_s (K_s c + v(K_s + 1))          (the realized tau instead of E)

``predicted`` is the theory; ``cost model`` replaces only its i.i.d. acceptance model by
the realized tokens per step, which separates "acceptance is not i.i.d." (n-gram matches
come in bursts) from "the costs are not what we measured" when the realized speedup
departs from the prediction.

    python -m specbook.bench.measure --drafters ngram,draft --limit 2 --max-new-tokens 64
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from ..costs import CostCurve
from ..decode import generate, speculative_generate
from ..models import LlamaTarget
from ..models.chat import chat_ids
from ..protocols import Draft
from ..sampling import GREEDY, SamplingParams
from ..theory import expected_tokens
from .registry import get_drafter
from .timing import verify_cost_curve
from .workloads import load_prompts, select


class _Timed:
    """Wrap a target or drafter; record (width, seconds) of every forward / (K, seconds) of every propose."""

    def __init__(self, inner, method: str):
        self.inner, self.method, self.log = inner, method, []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def _call(self, *args, **kwargs):
        t0 = time.perf_counter()
        out = getattr(self.inner, self.method)(*args, **kwargs)
        width = out.num_tokens if isinstance(out, Draft) else out.shape[1]
        self.log.append((width, time.perf_counter() - t0))
        return out


class TimedTarget(_Timed):
    def __init__(self, target):
        super().__init__(target, "forward")

    def forward(self, tokens, parents=None):
        return self._call(tokens, parents)

    @property
    def cache_lengths(self):
        return self.inner.cache_lengths


class TimedDrafter(_Timed):
    def __init__(self, drafter):
        super().__init__(drafter, "propose")

    def propose(self, contexts, gamma, params, generator=None):
        return self._call(contexts, gamma, params, generator)

    @property
    def passes(self):
        return int(getattr(self.inner, "passes", 0))


def measure_prompt(target, drafter, prompt_ids: list[int], max_new_tokens: int, gamma: int,
                   params: SamplingParams = GREEDY, generator: torch.Generator | None = None) -> dict:
    """Plain then speculative decoding of one prompt, timed piece by piece."""
    prompt = torch.tensor([prompt_ids])
    t0 = time.perf_counter()
    plain = generate(target, prompt, max_new_tokens, params=params, generator=generator)
    t_plain = time.perf_counter() - t0
    timed_target, timed_drafter = TimedTarget(target), TimedDrafter(drafter)
    passes_before = timed_drafter.passes
    t0 = time.perf_counter()
    spec = speculative_generate(timed_target, timed_drafter, prompt, max_new_tokens, params=params, gamma=gamma, generator=generator)
    t_spec = time.perf_counter() - t0
    s = spec.stats
    steps = [w - 1 for w, _ in timed_target.log[1:]] if prompt.shape[1] > 1 else [w - 1 for w, _ in timed_target.log]
    return {"plain_seconds": t_plain, "spec_seconds": t_spec, "new_tokens": max_new_tokens,
            "step_seconds": t_plain / max_new_tokens, "draft_seconds": sum(t for _, t in timed_drafter.log),
            "draft_passes": timed_drafter.passes - passes_before, "drafts_per_step": steps,
            "accepted": s.accepted, "verified": s.verified, "proposed": s.proposed, "emitted": s.emitted,
            "same_as_plain": bool(torch.equal(plain.tokens, spec.tokens)) if params.greedy else None}


def predict(records: list[dict], verify_cost: list[float]) -> dict:
    """Pool per-prompt records (one drafter, one category) into alpha, c, and the predicted vs realized speedup."""
    v = CostCurve(verify_cost)
    verified = sum(r["verified"] for r in records)
    alpha = sum(r["accepted"] for r in records) / verified if verified else 0.0
    passes = sum(r["draft_passes"] for r in records)
    step = statistics.median(r["step_seconds"] for r in records)
    c = (sum(r["draft_seconds"] for r in records) / passes) / step if passes else 0.0
    if not passes:  # a drafter without a model (prompt lookup): its whole propose time, per step
        c_step = sum(r["draft_seconds"] for r in records) / sum(len(r["drafts_per_step"]) for r in records) / step
    steps = [k for r in records for k in r["drafts_per_step"]]
    draft_cost = [c * k if passes else c_step for k in steps]
    cost = sum(dc + v(k + 1) for dc, k in zip(draft_cost, steps))
    predicted = sum(float(expected_tokens(min(alpha, 1.0), k)) for k in steps) / cost
    cost_model = sum(r["emitted"] for r in records) / cost
    realized = statistics.median(r["plain_seconds"] / r["spec_seconds"] for r in records)
    return {"prompts": len(records), "alpha": round(alpha, 4), "c": round(c if passes else c_step, 4),
            "mean_drafts": round(statistics.mean(steps), 3), "tau": round(sum(r["emitted"] for r in records) / len(steps), 3),
            "predicted": round(predicted, 3), "cost_model": round(cost_model, 3), "realized": round(realized, 3),
            "realized_over_predicted": round(realized / predicted, 3),
            "identical": all(r["same_as_plain"] is not False for r in records)}


def simulate_greedy(drafter, prompt_ids: list[int], reference: list[int], gamma: int, verify_cost: list[float],
                    c: float = 0.0, max_new_tokens: int | None = None) -> dict:
    """Replay greedy speculative decoding against a known greedy continuation, without the target.

    Under greedy verification the output is ``reference`` whatever the drafter does, and a draft
    is accepted exactly while it agrees with it; so the whole run (drafts per step, accepted per
    step) follows from the drafter alone.  Cost in plain-step units: sum_s (K_s c + v(K_s + 1)),
    with ``verify_cost`` = [v(1), v(2), ...] (read past its end as
    :class:`specbook.costs.CostCurve` says).  Used to tune draft-length policies on training
    trajectories (prompt lookup costs nothing to replay).  The run stops after ``max_new_tokens``
    (default: all of ``reference``); as in the real loop, no drafts are asked for past that budget.
    """
    stop = len(reference) if max_new_tokens is None else max_new_tokens
    ctx, done, steps, accepted = list(prompt_ids), 0, [], 0
    while done < stop:
        # like the loop: no drafts past the budget, and nothing past it emitted or counted
        draft = drafter.propose([torch.tensor(ctx)], min(gamma, stop - done - 1), GREEDY).tokens[0].tolist()
        a = 0
        while a < len(draft) and done + a < len(reference) and draft[a] == reference[done + a]:
            a += 1
        take = min(a + 1, len(reference) - done, stop - done)
        ctx += reference[done:done + take]
        done += take
        steps.append(len(draft))
        accepted += min(a, take)
    v = CostCurve(verify_cost)
    cost = sum(k * c + v.after(k) for k in steps)
    return {"steps": len(steps), "drafted": sum(steps), "accepted": accepted,
            "tau": done / len(steps), "speedup": stop / cost}


def main(argv: list[str] | None = None) -> int:
    from ..models.smollm2 import load_smollm2

    p = argparse.ArgumentParser(prog="python -m specbook.bench.measure", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--drafters", default="ngram", help="comma-separated names from the bench registry")
    p.add_argument("--categories", default=None)
    p.add_argument("--limit", type=int, default=2, help="prompts per category (0 = all)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--gamma", type=int, default=4)
    p.add_argument("--threads", type=int, default=0)
    p.add_argument("--curve-reps", type=int, default=5)
    p.add_argument("--json", dest="json_path", default=None)
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    prompts = select(load_prompts(), args.categories.split(",") if args.categories else None, args.limit)
    ids = [chat_ids(tokenizer, q.prompt) for q in prompts]
    target = LlamaTarget(model, max_length=max(map(len, ids)) + args.max_new_tokens + args.gamma + 16)
    curve = verify_cost_curve(target, ids[0][:128], max_positions=17, reps=args.curve_reps)
    names = [n for n in args.drafters.split(",") if n]
    drafters = {n: get_drafter(n).make(model, tokenizer, gamma=args.gamma, device="cpu", dtype=torch.float32,
                                       target=target) for n in names}
    records: dict[tuple[str, str], list[dict]] = {}
    for i, (q, prompt_ids) in enumerate(zip(prompts, ids)):
        for n in names[i % len(names):] + names[:i % len(names)]:  # rotate the order: load drifts hit all alike
            rec = measure_prompt(target, drafters[n], prompt_ids, args.max_new_tokens, args.gamma)
            records.setdefault((n, q.category), []).append(rec)
            print(f"{q.id:22s} {n:12s} speedup {rec['plain_seconds'] / rec['spec_seconds']:.2f}", file=sys.stderr)
    rows = []
    for n in names:
        cats = [c for (m, c) in records if m == n]
        for cat in cats + ["all"]:
            recs = records[(n, cat)] if cat != "all" else [r for (m, _), rs in records.items() if m == n for r in rs]
            rows.append({"drafter": n, "category": cat, **predict(recs, curve["v"])})
    w = max(12, max(len(n) for n in names) + 2)
    head = (f"{'drafter':<{w}}{'category':<17}{'alpha':>7}{'c':>7}{'K':>6}{'tau':>6}{'predicted':>10}"
            f"{'cost model':>11}{'realized':>9}{'ratio':>7}")
    print(head)
    for r in rows:
        print(f"{r['drafter']:<{w}}{r['category']:<17}{r['alpha']:>7.3f}{r['c']:>7.3f}{r['mean_drafts']:>6.2f}"
              f"{r['tau']:>6.2f}{r['predicted']:>10.2f}{r['cost_model']:>11.2f}{r['realized']:>9.2f}"
              f"{r['realized_over_predicted']:>7.2f}" + ("" if r["identical"] else "  OUTPUT DIFFERS"))
    print("verify cost " + "  ".join(f"v({n})={curve['v'][n - 1]:.2f}" for n in (2, 3, 5, 9, 17)))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps({"rows": rows, "verify_cost": curve, "args": vars(args)}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())

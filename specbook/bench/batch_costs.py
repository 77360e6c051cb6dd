"""What one decode step costs on this machine, by batch size: the stopwatches of ``python -m specbook batch``.

Shape legend: B batch (rows), n new positions per row in one forward, T context length.

* :func:`batch_verify_costs`: v_B(n) = t(B, n) / t(B, 1) for each batch size B, the curve the
  adaptive policy (:class:`specbook.costs.BatchCosts`) prices a draft with; and c_B, one
  draft-model step over one target step at the same B.
* :func:`measure_roofline`: this machine's matmul flop/s (at the model's own projection shape) and
  memory-read bytes/s, and so its ridge point (flop per byte) in the sense of Williams, Waterman and Patterson (2009, "Roofline").
* :func:`crossovers` / :func:`adaptive_vs_best`: the runs of ``python -m specbook batch`` read back (where
  fixed speculation falls below plain decoding; the adaptive policy against the better of the two).
* :func:`roofline_speedup` / :func:`roofline_crossover`: the roofline's prediction of where
  speculation stops paying, on this machine's measured peaks (:func:`measured_hardware`): a step
  over B rows and n positions takes :func:`specbook.roofline.step_time`,
  t(B, n) = max(weight bytes / bandwidth, 2 * params * B * n / flop/s), and speculation beats plain
  decoding at batch B while E(alpha, gamma) / (gamma c_B + t(B, gamma+1) / t(B, 1)) > 1
  (Leviathan et al. 2023, Thm 3.8).

Every timing goes through :func:`specbook.bench.timing.interleaved_medians` (settings visited in a
rotated order), because the machine is shared; the cost curves keep each setting's fastest round,
the roofline's peaks their medians.
"""
from __future__ import annotations

import statistics
import time

import torch

from .. import theory
from ..models import LlamaTarget
from ..roofline import Hardware, step_time
from .timing import interleaved_medians


@torch.no_grad()
def batch_verify_costs(target: LlamaTarget, batch_sizes: list[int], max_positions: int, *, context: int = 64,
                       draft: LlamaTarget | None = None, reps: int = 7) -> dict:
    """{"v": {B: [v_B(1), ..., v_B(max_positions)]}, "c": {B: c_B} and "catch_up": {B: target passes per
    token of a draft-model prefill} (when ``draft`` is given), "seconds": {B: t(B, 1)}} measured now
    after a ``context``-token context in every row.  "v" is the measured curve made non-decreasing;
    "v_raw" is the curve as measured.

    ``target`` and ``draft`` are reset (their caches are overwritten): pass ones the caller owns."""
    if not batch_sizes or any(not isinstance(b, int) or b < 1 for b in batch_sizes):
        raise ValueError(f"batch_sizes must be ints >= 1, got {batch_sizes!r}")
    if not isinstance(max_positions, int) or max_positions < 1:
        raise ValueError(f"max_positions must be an int >= 1, got {max_positions!r}")
    models = {"target": target} if draft is None else {"target": target, "draft": draft}
    out = {"v": {}, "v_raw": {}, "c": {}, "catch_up": {}, "seconds": {}, "context": context, "reps": reps}
    for B in batch_sizes:
        ctx = (torch.arange(context, device=target.device) % 1000 + 1000).repeat(B, 1)  # (B, T) any tokens
        base = torch.full((B,), context, dtype=torch.long)
        for m in models.values():
            m.reset(B)
            m.forward(ctx)
        fresh = ctx[:, :max_positions]  # (B, n_max)
        keys = [("target", n) for n in range(1, max_positions + 1)]
        if draft is not None:  # one draft step, and the draft model's prefill of a whole context
            keys += [("draft", 1), ("draft_prefill", context)]

        def run(key):
            if key[0] == "draft_prefill":
                models["draft"].rollback(torch.zeros(B, dtype=torch.long))
                return models["draft"].forward(ctx)
            return models[key[0]].forward(fresh[:, :key[1]])

        # the fastest of the rounds: on a shared host other work only ever adds time, and a burst
        # during one setting would otherwise skew the whole curve the adaptive policy prices with
        med = interleaved_medians(keys, run, reps=reps, warmup=1, device=target.device, reduce=min,
                                  after=lambda k: models["draft" if k[0] != "target" else "target"].rollback(base))
        t1 = med[("target", 1)]
        raw = [med[("target", n)] / t1 for n in range(1, max_positions + 1)]
        out["v_raw"][B] = raw
        # more positions never cost less: a dip in the measured curve is noise, and would price a
        # longer draft below a shorter one
        out["v"][B] = [max(raw[:n]) for n in range(1, max_positions + 1)]
        out["seconds"][B] = t1
        if draft is not None:
            out["c"][B] = med[("draft", 1)] / t1
            out["catch_up"][B] = med[("draft_prefill", context)] / t1 / context  # target passes per token
    return out


@torch.no_grad()
def measure_roofline(dtype: torch.dtype = torch.float32, device: str = "cpu", *, rows: int = 64, dim: int = 576,
                     hidden: int = 1536, size: int = 1536, read_mb: int = 256, reps: int = 5) -> dict:
    """This machine's measured peaks in ``dtype``: matmul flop/s, memory-read bytes/s, and the ridge point.

    The compute roof is the flop/s of the model's own projection shape, a (rows, dim) x (dim, hidden)
    product (SmolLM2-135M's MLP at ``rows`` rows, a decode step's B (gamma + 1) positions near the
    crossover), not of a large square product: a step near the crossover multiplies a few dozen rows,
    and on a CPU those reach about half of the square product's rate (measured on a 2-core AMD EPYC
    at 64 rows: 143 of 229 GFLOP/s in float32, 457 of 944 in bfloat16).  The square product's rate
    is reported beside it (``square_matmul_flop_per_s``).
    """
    for name, value in (("rows", rows), ("dim", dim), ("hidden", hidden), ("size", size)):
        if not isinstance(value, int) or value < 1:
            raise ValueError(f"{name} must be an int >= 1, got {value!r}")
    x_in = torch.randn(rows, dim, dtype=dtype, device=device)  # (rows, dim) a step's activations
    w = torch.randn(dim, hidden, dtype=dtype, device=device)  # (dim, hidden) one projection
    a = torch.randn(size, size, dtype=dtype, device=device)  # (size, size)
    x = torch.ones(read_mb * 2**20 // 4, dtype=torch.float32, device=device)  # read_mb MiB, streamed once per sum
    work = {"step": lambda: x_in @ w, "square": lambda: a @ a, "read": lambda: x.sum()}
    med = interleaved_medians(list(work), lambda k: work[k](), reps=reps, warmup=1, device=device)
    flops = 2 * rows * dim * hidden / med["step"]
    bandwidth = x.numel() * x.element_size() / med["read"]
    return {"matmul_flop_per_s": flops, "memory_bytes_per_s": bandwidth, "ridge_flop_per_byte": flops / bandwidth,
            "square_matmul_flop_per_s": 2 * size**3 / med["square"], "dtype": str(dtype).replace("torch.", ""),
            "matmul_shape": [rows, dim, hidden], "matmul_size": size, "read_bytes": x.numel() * 4}


def measured_hardware(roofline: dict) -> Hardware:
    """This machine as a roofline :class:`~specbook.roofline.Hardware`, from :func:`measure_roofline`'s peaks."""
    return Hardware.measured({roofline.get("dtype", "float32"): roofline["matmul_flop_per_s"]},
                             roofline["memory_bytes_per_s"])


def roofline_speedup(alpha: float, gamma: int, batch: int, hw: Hardware, dtype: str, params: int, dtype_bytes: int,
                     draft_params: int = 0) -> float:
    """Predicted throughput of fixed-gamma speculation over plain decoding at ``batch`` rows, each step
    timed by :func:`specbook.roofline.step_time` (a draft step: a ``draft_params`` model's)."""
    t1 = step_time(hw, dtype, batch, 1, params, dtype_bytes)
    v = step_time(hw, dtype, batch, gamma + 1, params, dtype_bytes) / t1
    c = step_time(hw, dtype, batch, 1, draft_params, dtype_bytes) / t1 if draft_params else 0.0
    return float(theory.speedup(alpha, gamma, c, v))


def roofline_crossover(alpha: float, gamma: int, hw: Hardware, dtype: str, params: int, dtype_bytes: int,
                       draft_params: int = 0, max_batch: int = 1024) -> int | None:
    """The smallest batch size at which the roofline predicts speculation slower than plain decoding."""
    for B in range(1, max_batch + 1):
        if roofline_speedup(alpha, gamma, B, hw, dtype, params, dtype_bytes, draft_params) < 1:
            return B
    return None


def now() -> float:
    return time.perf_counter()


def crossovers(runs: list[dict], drafters: list[str]) -> dict:
    """Per drafter: the smallest batch size where fixed speculation's throughput falls below plain's."""
    plain = {r["batch_size"]: r["tokens_per_s"] for r in runs if r["drafter"] == "none"}
    out = {}
    for d in drafters:
        if d == "none":
            continue
        fixed = {r["batch_size"]: r["tokens_per_s"] for r in runs if r["drafter"] == d and r["policy"] == "fixed"}
        out[d] = next((B for B in sorted(fixed) if fixed[B] < plain[B]), None) if fixed else None
    return out


def adaptive_vs_best(runs: list[dict], figure: str = "tokens_per_s", paired: bool = False) -> dict:
    """{drafter: {B: adaptive tokens/s over the better of plain and fixed speculation at B}} (goal: >= 0.95).

    ``figure``: "tokens_per_s" (medians over the repeats) or "tokens_per_s_fastest" (each policy's
    fastest repeat: on a shared host other work only ever slows a run down).
    ``paired``: the median over repeats of that ratio within each repeat (``tokens_per_s_each``): the
    policies of one repeat ran side by side, so a slow spell of the machine divides out."""
    key = "tokens_per_s_each" if paired else figure
    tps = {(r["drafter"], r["policy"], r["batch_size"]): r[key] for r in runs}
    out: dict = {}
    for (d, pol, B), value in tps.items():
        if pol == "adaptive" and (d, "fixed", B) in tps and ("none", "plain", B) in tps:
            plain, fixed = tps[("none", "plain", B)], tps[(d, "fixed", B)]
            if paired:
                out.setdefault(d, {})[B] = statistics.median(a / max(p, f) for a, p, f in zip(value, plain, fixed))
            else:
                out.setdefault(d, {})[B] = value / max(plain, fixed)
    return out

"""What one matrix product costs before it streams: a decode step's products timed by the size of their weight.

    python scripts/product_overhead.py                          # bfloat16 where native, 2 threads
    python scripts/product_overhead.py --dtype float32 --json products.json

A decode step multiplies one row by each of SmolLM2's 121 weight matrices, through oneDNN's prepacked
kernel (:class:`specbook.models.linear.Linear`, and the compiled pass's "library" kernels).  This times that
kernel alone, one row times a (O x I) weight, for output widths O from 64 to 24576 at the model's input width
I = 576, each weight read from memory (a pool of copies larger than the CPU's caches, cycled; the sizes taken in
turn, round after round), and fits
t = a + bytes / B by least squares: ``a`` is what a call costs before its weight streams (the call, the
threads' start and end, the first misses), ``B`` the rate it then streams at.  Then the model's own matrices,
timed the same way, against that fit: the small ones (a layer's 576 x 576 output projection) stream at a
fraction of B, and the 121 calls' fixed cost is a visible share of a step.  Timed from Python, so ``a``
includes a few microseconds of dispatch that a compiled pass does not pay.  Figures depend on the machine and
its load: say which.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from specbook.machine import machine_info  # noqa: E402
from specbook.markdown import markdown_table  # noqa: E402
from specbook.models.dtype import dtype_name, resolve_dtype  # noqa: E402
from specbook.models.linear import Linear, _packed_product, packed_kernels_available  # noqa: E402

WIDTHS = (64, 256, 576, 960, 1536, 3072, 6144, 12288, 24576)  # output widths O of the size sweep
MODEL = {"qkv (960 x 576)": (960, 576), "output (576 x 576)": (576, 576), "gate and up (3072 x 576)": (3072, 576),
         "down (576 x 1536)": (576, 1536), "LM head (49152 x 576)": (49152, 576)}  # SmolLM2-135M's: 4 a block, 1 head
BLOCKS = 30  # SmolLM2-135M's: a step runs BLOCKS * 4 + 1 = 121 products


class Pool:
    """Copies of one prepacked (out x in) weight filling at least ``pool_mb`` MB, cycled so that each call reads
    its weight from memory, not from a cache; ``times`` collects the calls' seconds over every :meth:`run`."""

    def __init__(self, out_features: int, in_features: int, dtype: torch.dtype, pool_mb: float):
        nbytes = out_features * in_features * torch.finfo(dtype).bits // 8
        self.weights = [Linear.frozen(torch.randn(out_features, in_features).to(dtype))._packed()  # as a step packs
                        for _ in range(max(3, int(pool_mb * 1e6 // nbytes) + 1))]
        self.x, self.times = torch.randn(1, in_features).to(dtype), []

    def run(self) -> None:
        with torch.no_grad():
            for w in self.weights:
                t0 = time.perf_counter()
                _packed_product(self.x, w, None)
                self.times.append(time.perf_counter() - t0)

    def median_us(self) -> float:
        return 1e6 * statistics.median(self.times)


def time_pools(pools: list[Pool], rounds: int) -> list[float]:
    """Median microseconds of a call per pool, the pools taken in turn round after round (a machine whose
    memory is busier for a while then slows every size alike)."""
    for _ in range(rounds):
        for pool in pools:
            pool.run()
    return [pool.median_us() for pool in pools]


def fit(points: list[tuple[float, float]]) -> tuple[float, float]:
    """Least-squares (a us, B GB/s) of t = a + bytes / B over (bytes, us) points."""
    n = len(points)
    mx, my = sum(b for b, _ in points) / n, sum(t for _, t in points) / n
    slope = sum((b - mx) * (t - my) for b, t in points) / sum((b - mx) ** 2 for b, _ in points)  # us per byte
    return my - slope * mx, 1e-3 / slope


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="auto", help="auto (bfloat16 where native), bfloat16 or float32")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--pool-mb", type=float, default=300.0,
                    help="MB of weight copies cycled per size (all 14 sizes are held at once: 14 times this)")
    ap.add_argument("--rounds", type=int, default=5, help="passes over every pool, the sizes taken in turn")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    for name in ("threads", "rounds"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.pool_mb <= 0:
        ap.error(f"--pool-mb must be > 0, got {args.pool_mb}")
    dtype = resolve_dtype(args.dtype, "cpu")
    if not packed_kernels_available(dtype):
        ap.error(f"this torch build or CPU has no prepacked oneDNN product for {dtype_name(dtype)}")
    torch.set_num_threads(args.threads)
    size = torch.finfo(dtype).bits // 8
    shapes = [(o, 576) for o in WIDTHS] + list(MODEL.values())
    us = time_pools([Pool(o, i, dtype, args.pool_mb) for o, i in shapes], args.rounds)
    sweep = [{"out": o, "in": 576, "mb": o * 576 * size / 1e6, "us": t} for o, t in zip(WIDTHS, us)]
    a, rate = fit([(r["mb"] * 1e6, r["us"]) for r in sweep])
    model = [{"matrix": name, "mb": o * i * size / 1e6, "us": t}
             for (name, (o, i)), t in zip(MODEL.items(), us[len(WIDTHS):])]
    for r in sweep + model:
        r["gb_per_s"] = r["mb"] * 1e6 / (r["us"] * 1e-6) / 1e9
        r["fit_us"] = a + r["mb"] * 1e6 / (rate * 1e9) * 1e6
    per_layer = sum(r["us"] for r in model[:4])
    calls = BLOCKS * 4 + 1
    step_ms = (BLOCKS * per_layer + model[4]["us"]) / 1000
    stream_ms = (BLOCKS * sum(r["mb"] for r in model[:4]) + model[4]["mb"]) / 1e3 / rate * 1e3
    print(f"one row times a prepacked {dtype_name(dtype)} weight read from memory, {args.threads} threads "
          f"(median over {args.rounds} rounds of {args.pool_mb:g} MB pools, the sizes in turn); "
          f"fit t = {a:.1f} us + bytes / {rate:.1f} GB/s\n")
    print(markdown_table(["weight (O x 576)", "MB", "us", "GB/s", "fit us"],
                         [[str(r["out"]), f"{r['mb']:.2f}", f"{r['us']:.1f}", f"{r['gb_per_s']:.1f}",
                           f"{r['fit_us']:.1f}"] for r in sweep], "rrrrr") + "\n")
    print(markdown_table(["SmolLM2-135M matrix", "MB", "us", "GB/s", "fit us"],
                         [[r["matrix"], f"{r['mb']:.2f}", f"{r['us']:.1f}", f"{r['gb_per_s']:.1f}",
                           f"{r['fit_us']:.1f}"] for r in model], "lrrrr") + "\n")
    print(f"a step's {calls} products, each timed alone: {step_ms:.2f} ms; the same bytes at {rate:.1f} GB/s: "
          f"{stream_ms:.2f} ms; {calls} x {a:.1f} us of fixed cost: {calls * a / 1000:.2f} ms")
    if args.json:
        Path(args.json).write_text(json.dumps({
            "machine": machine_info("cpu"), "dtype": dtype_name(dtype), "threads": args.threads,
            "pool_mb": args.pool_mb, "rounds": args.rounds, "fixed_us": round(a, 2),
            "stream_gb_per_s": round(rate, 2),
            "sweep": sweep, "model": model, "step_products_ms": round(step_ms, 3),
            "step_streaming_ms": round(stream_ms, 3)}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

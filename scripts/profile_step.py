"""Where one decode step's time goes: the eager model against the compiled pass, kernel by kernel.

    python scripts/profile_step.py                       # bfloat16 where native, 128 cached tokens
    python scripts/profile_step.py --dtype float32 --steps 20 --json step.json
    python scripts/profile_step.py --dtype float32 --width 5    # a verify pass of 5 chained tokens
    python scripts/profile_step.py --products library           # MKL's and oneDNN's products only

Times one-token steps after ``--context`` cached tokens (median of ``--steps``, each rolled back,
so every step sees the same cache), for the eager :class:`~specbook.models.LlamaTarget` and the
compiled :class:`~specbook.models.compiled.CompiledTarget` (compiled at ``--width``, mode
"max-autotune", on the product kernels ``--products`` names; the first compile takes about a
minute); ``--width`` > 1 times passes of that many chained tokens instead (a verify pass).  Then
profiles ``--steps`` compiled steps with ``torch.profiler``, inductor's generated kernels named
(``cpp.enable_kernel_profile``), and prints the time per step of each group of operations (matrix
products, attention, fused elementwise kernels, the Python call and guard checks around the
graph), then the operations that took the most: the products by shape (``gemm_m1n3072k576``: one
row times a 576 x 3072 weight; a library kernel with the shapes of its input and weight after
it), ``Call CompiledFxGraph`` (the Python around the graph), ``TorchDynamo Cache Lookup`` (its
guards).  The profiler adds its own overhead, so the per-operation figures add up to more than
the median step.  Figures depend on the machine and its load: say which.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._inductor.config as inductor_config

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))
from specbook.machine import machine_info  # noqa: E402
from specbook.markdown import markdown_table  # noqa: E402
from specbook.models import LlamaTarget  # noqa: E402
from specbook.models.compiled import CompiledTarget  # noqa: E402
from specbook.models.dtype import dtype_name, resolve_dtype  # noqa: E402
from specbook.models.smollm2 import load_smollm2  # noqa: E402


def after_context(target, context: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Reset ``target`` and run ``context`` through it; return (its length to roll back to, the
    ``width`` tokens of each timed pass)."""
    target.reset(1)
    target.forward(context)
    return torch.tensor([context.shape[1]]), context[:, -width:]


def step_ms(target, context: torch.Tensor, steps: int, width: int = 1) -> float:
    """Median milliseconds of one forward of ``width`` tokens (a chain) after ``context``, each rolled back."""
    base, one = after_context(target, context, width)
    times = []
    for _ in range(steps + 1):  # the first is a warm-up
        t0 = time.perf_counter()
        target.forward(one)
        times.append(time.perf_counter() - t0)
        target.rollback(base)
    return 1000 * statistics.median(times[1:])


GROUPS = (  # (group, test on an operation's name), first match wins
    ("matrix products", lambda name: "_gemm_" in name or name.startswith(("aten::linear", "mkl::", "mkldnn::"))),
    ("attention", lambda name: "scaled_dot_product" in name),
    ("fused elementwise kernels (norms, rotary, cache writes, ...)", lambda name: "cpp_fused" in name),
    ("the graph's Python call and guard checks", lambda name: "CompiledFxGraph" in name or "TorchDynamo" in name
     or "Torch-Compiled Region" in name),
)


def group_of(name: str) -> str:
    return next((group for group, test in GROUPS if test(name)), "everything else")


def named(event) -> str:
    """A profiled operation's name, and for a library product the shapes of its input and weight, the largest
    of its arguments (``mkldnn::_linear_pointwise [1, 576] x [3072, 576]``; the residual a fused add reads is not
    named)."""
    shapes = [list(s) for s in (event.input_shapes or []) if s]
    if group_of(event.key) != "matrix products" or "_gemm_" in event.key or len(shapes) < 2:
        return event.key
    weight = max(shapes[1:], key=lambda s: torch.Size(s).numel())
    return f"{event.key} {shapes[0]} x {weight}"


def kernel_table(target, context: torch.Tensor, steps: int, width: int = 1) -> list[dict]:
    """Every operation of ``steps`` profiled passes of ``width`` tokens, most self time first: ms and calls
    per step, and its group."""
    base, one = after_context(target, context, width)
    with torch.profiler.profile(record_shapes=True) as prof:  # shapes: the library's products told apart
        for _ in range(steps):
            target.forward(one)
            target.rollback(base)
    events = sorted(prof.key_averages(group_by_input_shape=True), key=lambda e: -e.self_cpu_time_total)
    return [{"operation": named(e), "group": group_of(e.key),
             "ms_per_step": round(e.self_cpu_time_total / steps / 1000, 3), "calls_per_step": e.count / steps}
            for e in events]


def group_table(table: list[dict]) -> list[dict]:
    """The operations summed by group: ms per step and how many kernels (operations) each group holds."""
    order = [g for g, _ in GROUPS] + ["everything else"]
    sums = {g: [0.0, 0] for g in order}
    for r in table:
        sums[r["group"]][0] += r["ms_per_step"]
        sums[r["group"]][1] += 1
    return [{"group": g, "ms_per_step": round(ms, 3), "operations": n} for g, (ms, n) in sums.items()]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="auto", help="auto (bfloat16 where native), bfloat16 or float32")
    ap.add_argument("--context", type=int, default=128, help="cached tokens before each timed step")
    ap.add_argument("--max-length", type=int, default=600, help="cache slots (the compiled pass attends over all)")
    ap.add_argument("--steps", type=int, default=20, help="timed steps per median, and steps profiled")
    ap.add_argument("--width", type=int, default=1,
                    help="tokens per pass (a chain; 1 = a decode step, gamma + 1 = a verify pass)")
    ap.add_argument("--rows", type=int, default=12, help="operations listed")
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--products", choices=("autotuned", "library"), default="autotuned",
                    help="the compiled pass's product kernels (CompiledTarget's products=)")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    for name in ("context", "steps", "width", "rows", "threads"):
        if getattr(args, name) < 1:
            ap.error(f"--{name} must be >= 1, got {getattr(args, name)}")
    if args.max_length <= args.context + args.width:
        ap.error(f"--max-length must exceed --context + --width, got {args.max_length}")
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype, "cpu")
    model, _ = load_smollm2("cpu", dtype)
    context = torch.randint(100, 10_000, (1, args.context), generator=torch.Generator().manual_seed(0))
    inductor_config.cpp.enable_kernel_profile = True  # the generated kernels by name in the profile
    compiled = CompiledTarget(model, args.max_length, (args.width,), products=args.products)
    compiled.warm_up(progress=True)
    eager_ms = step_ms(LlamaTarget(model, args.max_length), context, args.steps, args.width)
    compiled_ms = step_ms(compiled, context, args.steps, args.width)
    table = kernel_table(compiled, context, args.steps, args.width)
    groups = group_table(table)
    print(f"one pass of {args.width} token(s), {dtype_name(dtype)}, {args.context} cached tokens, "
          f"median of {args.steps}: "
          f"eager {eager_ms:.2f} ms, compiled {compiled_ms:.2f} ms ({eager_ms / compiled_ms:.2f}x)\n")
    print(markdown_table(["compiled step, profiled: group", "ms per step", "operations"],
                         [[g["group"], f"{g['ms_per_step']:.2f}", str(g["operations"])] for g in groups], "lr") + "\n")
    print(markdown_table(["operation (compiled step, profiled)", "ms per step", "calls per step"],
                         [[r["operation"][:90], f"{r['ms_per_step']:.3f}", f"{r['calls_per_step']:g}"]
                          for r in table[:args.rows]], "lr"))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_info("cpu"), "dtype": dtype_name(dtype),
                                               "context": args.context, "width": args.width, "steps": args.steps,
                                               "products": args.products,
                                               "eager_step_ms": round(eager_ms, 3),
                                               "compiled_step_ms": round(compiled_ms, 3), "groups": groups,
                                               "kernels": table},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What the compiled pass's cuts around its products buy, side by side: attention's span and form, the C++ call.

    python scripts/compiled_overheads.py                          # bfloat16 where native, one token a pass
    python scripts/compiled_overheads.py --dtype float32 --width 5 --json overheads.json

Builds six :class:`~specbook.models.compiled.CompiledTarget` of the same model:

* "every slot": attention over every cache slot (``span_block=None``, the graph's shapes all
  static), through torch's fused kernel (``attention="fused"``), the graph called from Python;
* "span": attention over the slots written so far rounded up to 64 (``span_block=64``, the
  default), otherwise the same;
* "span, C++ call": the graph called from inductor's generated C++ wrapper (``cpp_wrapper=True``);
* "span, products": attention as two matrix products compiled with the rest of the pass
  (``attention="products"``, the default for float32 weights in passes wider than 5 tokens),
* "span, loops": attention as products and sums that inductor writes as its own loops
  (``attention="loops"``, the default for passes of up to 5 tokens),
* "loops, ahead of time": as "span, loops", exported and compiled by AOTInductor and called as one
  C++ function (``ahead_of_time=True``: no guards, no Python between the kernels),

compiles each at ``--width`` (mode "max-autotune": about a minute each), then times passes of
``--width`` chained tokens after each of ``--contexts`` cached tokens: the six targets take
turns, ``--steps`` passes each (every pass rolled back, so each sees the same cache), for
``--rounds`` rounds; a cell is the median of its ``rounds x steps`` passes.  The cache holds
``--max-length`` slots, as the benchmark's does for its longest prompt.  Figures depend on the
machine and its load: say which.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specbook.bench.timing import rotated  # noqa: E402
from specbook.cliargs import int_list, positive_int, threads  # noqa: E402
from specbook.machine import machine_info  # noqa: E402
from specbook.markdown import markdown_table  # noqa: E402
from specbook.models.compiled import SPAN_BLOCK, CompiledTarget  # noqa: E402
from specbook.models.dtype import dtype_name, resolve_dtype  # noqa: E402
from specbook.models.smollm2 import load_smollm2  # noqa: E402
from specbook.progress import progress_bar  # noqa: E402

VARIANTS = {  # name: (span_block, cpp_wrapper, attention, ahead_of_time)
    "every slot": (None, False, "fused", False),
    "span": (SPAN_BLOCK, False, "fused", False),
    "span, C++ call": (SPAN_BLOCK, True, "fused", False),
    "span, products": (SPAN_BLOCK, False, "products", False),
    "span, loops": (SPAN_BLOCK, False, "loops", False),
    "loops, ahead of time": (SPAN_BLOCK, False, "loops", True),
}


def time_passes(target: CompiledTarget, context: int, tokens: torch.Tensor, steps: int) -> list[float]:
    """``steps`` passes of ``tokens`` after ``context`` cached tokens, each rolled back: seconds each."""
    seconds = []
    for _ in range(steps):
        t0 = time.perf_counter()
        target(tokens)
        seconds.append(time.perf_counter() - t0)
        target.rollback([context])
    return seconds


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", default="auto", help="auto (bfloat16 where native), bfloat16 or float32")
    ap.add_argument("--width", type=positive_int, default=1,
                    help="tokens per pass (1 = a decode step, gamma + 1 = a verify pass)")
    ap.add_argument("--contexts", type=int_list, default=(60, 128, 300, 500), help="cached tokens, e.g. 60,128,300")
    ap.add_argument("--max-length", type=positive_int, default=600, help="cache slots")
    ap.add_argument("--steps", type=positive_int, default=10, help="passes per target per round")
    ap.add_argument("--rounds", type=positive_int, default=5, help="rounds of turns")
    ap.add_argument("--threads", type=threads, default=2, help="torch threads")
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args(argv)
    if min(args.contexts) < 1:
        ap.error(f"--contexts must be cached token counts >= 1, got {args.contexts}")
    if args.max_length <= max(args.contexts) + args.width:
        ap.error(f"--max-length must exceed the longest context plus --width, got {args.max_length}")
    torch.set_num_threads(args.threads)
    dtype = resolve_dtype(args.dtype, "cpu")
    model, _ = load_smollm2("cpu", dtype)
    targets = {}
    for name in progress_bar(VARIANTS, desc="compiling six targets (about a minute each)"):
        span_block, cpp_wrapper, attention, ahead = VARIANTS[name]
        targets[name] = CompiledTarget(model, args.max_length, (args.width,), span_block=span_block,
                                       cpp_wrapper=cpp_wrapper, attention=attention, ahead_of_time=ahead)
        targets[name].warm_up()
    tokens = torch.randint(100, 10_000, (1, args.width), generator=torch.Generator().manual_seed(1))
    rows = []
    for context in progress_bar(args.contexts, desc="timing"):
        ids = torch.randint(100, 10_000, (1, context), generator=torch.Generator().manual_seed(0))
        for target in targets.values():
            target.reset(1)
            target.prefill(ids)
            time_passes(target, context, tokens, 2)  # warm
        seconds = {name: [] for name in targets}
        for r in range(args.rounds):
            for name in rotated(list(targets), r):  # each goes first in turn
                seconds[name] += time_passes(targets[name], context, tokens, args.steps)
        rows.append({"context": context, **{name: round(statistics.median(s) * 1e3, 3) for name, s in seconds.items()}})
    print(f"one pass of {args.width} token(s), {dtype_name(dtype)}, ms (median of {args.rounds} x {args.steps}), "
          f"{args.max_length} cache slots:\n")
    print(markdown_table(["cached tokens", *VARIANTS], [[str(r["context"]), *(f"{r[n]:.2f}" for n in VARIANTS)]
                                                        for r in rows], "l" + "r" * len(VARIANTS)))
    if args.json:
        Path(args.json).write_text(json.dumps({"machine": machine_info("cpu"), "dtype": dtype_name(dtype),
                                               "width": args.width, "max_length": args.max_length,
                                               "steps": args.steps, "rounds": args.rounds, "ms_per_pass": rows},
                                              indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What speculation switched off costs: the speculative loop with the batch command's adaptive
policy pinned to gamma 0 (prompt lookup still drafting in the shadow every step, its proposals
scored, nothing verified) against plain decoding, at each batch size (docs/batching.md).

    python scripts/speculation_off.py --prompts specbook/data/heldout_prompts.jsonl --json docs/data/speculation_off.json

The two runs of each repetition are stepped side by side, one target pass at a time
(:func:`specbook.bench.batch_runs.side_by_side`), each on its own cache, so a slow spell of the
machine lands on both; the figure is plain decoding's seconds over the switched-off loop's (its
throughput over plain decoding's: 1.00 = speculation off costs nothing), prefill excluded.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from itertools import cycle, islice
from pathlib import Path

import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specbook.bench import batch as batch_cmd  # noqa: E402
from specbook.bench.batch_calibration import PinnedGamma  # noqa: E402
from specbook.bench.batch_runs import PrefillOnce, Run, side_by_side  # noqa: E402
from specbook.costs import BatchCosts  # noqa: E402
from specbook.drafters.adaptive import GammaPolicy  # noqa: E402
from specbook.machine import machine_info  # noqa: E402
from specbook.models import LlamaTarget  # noqa: E402
from specbook.sampling import GREEDY  # noqa: E402


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompts", help="JSON lines with id, category, prompt (default: the built-in workloads)")
    p.add_argument("--batch-sizes", default="1,2,4,8,16")
    p.add_argument("--max-new-tokens", type=int, default=32)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--dtype", default="float32", choices=["auto", "float32", "bfloat16"])
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--json", dest="json_path")
    args = p.parse_args(argv)
    sizes = batch_cmd._ints(args.batch_sizes, "--batch-sizes")
    for flag, value in (("--max-new-tokens", args.max_new_tokens), ("--repeats", args.repeats),
                        ("--threads", args.threads)):
        if value < 1:
            p.error(f"{flag} must be >= 1, got {value}")
    torch.set_num_threads(args.threads)
    batch_args = batch_cmd.parse_args(["--drafters", "none,ngram", "--dtype", args.dtype,
                                       "--max-new-tokens", str(args.max_new_tokens)]
                                      + (["--prompts", args.prompts] if args.prompts else []))
    model, tokenizer, ids, target, _ = batch_cmd.load(batch_args)
    eos = tokenizer.eos_token_id
    targets = [PrefillOnce(target), PrefillOnce(LlamaTarget(model, max_length=target.max_length))]
    out = {"machine": machine_info("cpu"), "command": "python scripts/speculation_off.py " + " ".join(sys.argv[1:]),
           "dtype": batch_args.dtype, "ratio": {}, "ratios": {}}
    bar = tqdm(total=len(sizes) * args.repeats, desc="speculation off")
    for B in sizes:
        batch, ratios = list(islice(cycle(ids), B)), []
        for r in range(args.repeats):
            off = PinnedGamma(batch_cmd.make_drafter("ngram", model, tokenizer, target, 4),
                              GammaPolicy(costs=BatchCosts({1: (1.0,)}), min_gamma=0), 0, shadow=True)
            runs = [Run(t, d, batch, max_new_tokens=args.max_new_tokens, gamma=4, seed=0, params=GREEDY, eos=eos)
                    for t, d in zip(targets, (None, off))]
            side_by_side(runs if r % 2 == 0 else runs[::-1])  # who goes first alternates
            plain, spec_off = (run.seconds - run.prefill_seconds for run in runs)
            ratios.append(plain / spec_off)
            bar.update(1)
        out["ratio"][B], out["ratios"][B] = statistics.median(ratios), ratios
    bar.close()
    for B in sizes:
        print(f"B={B}: speculation off / plain decoding throughput {out['ratio'][B]:.3f} "
              f"(median of {args.repeats}; each: {', '.join(f'{x:.3f}' for x in out['ratios'][B])})")
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(out, indent=1), encoding="utf-8")
        print(f"wrote {args.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

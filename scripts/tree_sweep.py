"""Tokens per pass and wall-clock speedup of Medusa and EAGLE tree sizes on this machine.

    python scripts/tree_sweep.py [--limit 1] [--max-new-tokens 96] [--eagle 2:2:3,3:2:4,...] [--medusa 4,8,16]

Registers one benchmark drafter per tree size (EAGLE: depth:top_k:num_nodes of the dynamic
tree; Medusa: a size of the shipped measured trees), plus both chains, and runs them through
``python -m specbook bench`` (specbook engine, greedy, every drafter back to back with plain
decoding on each prompt).  The table it prints is the bench's; pick the size with the best
"all" speedup for this machine's verify-cost curve.  Extra arguments go to the bench
(e.g. ``--json sweep.json``).
"""
from __future__ import annotations

import argparse
import sys

from specbook.bench import cli as bench
from specbook.bench.registry import make_eagle, make_medusa, register_drafter
from specbook.drafters.eagle import DynamicTree

EAGLE_SIZES = "2:2:2,2:2:3,2:3:3,2:3:4,3:2:3,3:2:4,3:3:4,3:2:5,4:2:5,3:3:6,4:3:8,5:4:12,6:4:16,6:4:24,7:6:40,8:8:64"
MEDUSA_SIZES = "4,8,16,24,64"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", default="1", help="prompts per category (default 1)")
    ap.add_argument("--max-new-tokens", default="96")
    ap.add_argument("--eagle", default=EAGLE_SIZES, help="depth:top_k:num_nodes, comma-separated")
    ap.add_argument("--medusa", default=MEDUSA_SIZES, help="tree sizes, comma-separated")
    args, rest = ap.parse_known_args(argv)
    names = []
    for spec in filter(None, args.eagle.split(",")):
        depth, top_k, nodes = (int(x) for x in spec.split(":"))
        name = f"eagle-d{depth}k{top_k}n{nodes}"
        tree = DynamicTree(depth, top_k, nodes)
        register_drafter(name, lambda model, tokenizer=None, tree=tree, **_: make_eagle(model, tree=tree))
        names.append(name)
    for size in filter(None, args.medusa.split(",")):
        name = f"medusa-n{size}"
        register_drafter(name, lambda model, tokenizer=None, size=int(size), **_: make_medusa(model, tree=size))
        names.append(name)
    names += ["eagle-chain", "medusa-chain"]
    return bench.main(["--limit", args.limit, "--max-new-tokens", args.max_new_tokens, "--engines", "specbook",
                       "--curve-reps", "0", "--drafters", ",".join(names), *rest])


if __name__ == "__main__":
    sys.exit(main())

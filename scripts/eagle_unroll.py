"""What training-time test buys an EAGLE head: heads trained with 1, 2, 3, ... unroll steps
(``python -m specbook.train.eagle --unroll U``), scored side by side (docs/heads.md).

    python scripts/eagle_unroll.py HEAD [HEAD ...] --json docs/data/heads_unroll.json

HEAD is a weights path without its suffix (``HEAD.safetensors`` + ``HEAD.json``, as the trainer
writes them). For each head the report keeps what the trainer measured along the target's own
replies to its held-out prompts (acceptance by depth of a greedy chain: the share of positions
whose first d drafts are all right) and adds tau, tokens per target pass, of EAGLE-2 dynamic
trees of 16 and 64 nodes on prompts none of the heads trained on (the benchmark's held-out file
by default), greedy, decoding stopped at the end of the reply. Every speculative reply is checked
against plain decoding's: greedy speculation must emit the same tokens (float32).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
from tqdm.auto import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specbook.bench.registry import EAGLE_TREES, LARGE_EAGLE_TREE  # noqa: E402
from specbook.bench.workloads import load_prompts  # noqa: E402
from specbook.decode import generate, speculative_generate  # noqa: E402
from specbook.drafters.eagle import DynamicTree, EagleDrafter, load_eagle  # noqa: E402
from specbook.machine import machine_info  # noqa: E402
from specbook.markdown import markdown_table, read_json  # noqa: E402
from specbook.models import LlamaTarget  # noqa: E402
from specbook.models.chat import chat_ids  # noqa: E402
from specbook.sampling import GREEDY  # noqa: E402

TREES = {"16": EAGLE_TREES[16], "64": LARGE_EAGLE_TREE}  # label -> tree; a label is its node count


def tree_shapes(text: str) -> dict:
    """--trees "16:5x4,64:8x8,64:12x6" -> {label: DynamicTree}: NODES:DEPTHxTOPK each; a shape other
    than the default one of its node count is labelled "NODES (DEPTHxTOPK)"."""
    trees = {}
    for item in text.split(","):
        try:
            nodes, shape = item.strip().split(":")
            depth, top_k = shape.split("x")
            tree = DynamicTree(depth=int(depth), top_k=int(top_k), num_nodes=int(nodes))
        except ValueError as e:
            raise ValueError(f"--trees wants NODES:DEPTHxTOPK items such as 64:8x8, got {item!r} ({e})") from None
        label = str(tree.num_nodes)
        if TREES.get(label) != tree:
            label = f"{tree.num_nodes} ({tree.depth}x{tree.top_k})"
        if label in trees:
            raise ValueError(f"--trees names {item!r} twice")
        trees[label] = tree
    return trees


def head_row(path: str, model, target, prompts: list, ids: list, refs: list, max_new_tokens: int, eos: int,
             bar, trees: dict = TREES) -> dict:
    head, meta = load_eagle(path)
    training = meta["training"]
    survival = meta["heldout"]["chain_survival_heldout"]
    row = {"head": Path(path).name, "unroll": training.get("unroll"), "feature_layers": list(head.config.feature_layers),
           "epochs": training.get("epochs"),
           "steps": training.get("steps"), "train_minutes": round(training["train_seconds"] / 60, 1)
           if "train_seconds" in training else None,
           "train_sequences": training.get("train_sequences"), "validation_tau_per_epoch":
           training.get("validation_tau_per_epoch"), "acceptance_by_depth": survival[1:],
           "tau_chain_6": meta["heldout"]["tau_chain_heldout"]["6"], "tau_tree": {}, "tau_tree_by_category": {},
           "equal_to_plain": 0, "replies": 0}
    for label, tree in trees.items():
        drafter = EagleDrafter(head, model, tree=tree)
        per_cat: dict[str, list[int]] = {}
        for p, prompt, ref in zip(prompts, ids, refs):
            out = speculative_generate(target, drafter, prompt, max_new_tokens, params=GREEDY, eos_token_id=eos)
            emitted, passes = per_cat.setdefault(p.category, [0, 0])
            per_cat[p.category] = [emitted + out.stats.emitted, passes + out.stats.target_passes]
            row["equal_to_plain"] += int(torch.equal(out.new_tokens, ref))
            row["replies"] += 1
            bar.update(1)
        taus = {cat: e / n for cat, (e, n) in per_cat.items()}
        row["tau_tree_by_category"][label] = {cat: round(t, 3) for cat, t in taus.items()}
        row["tau_tree"][label] = round(statistics.mean(taus.values()), 3)  # averaged over categories
    return row


def render(report: dict) -> str:
    """The report's table in Markdown (docs/heads.md shows it; a test holds the two together)."""
    labels = list(report["trees"])
    head = ["head", "unroll steps", "training steps", "1st draft", "2nd", "3rd", "4th", "τ chain of 6",
            *(f"τ tree of {label}" for label in labels), "equal to plain"]
    rows = [[r["head"], r["unroll"], r["steps"], *(f"{x:.3f}" for x in r["acceptance_by_depth"][:4]),
             f"{r['tau_chain_6']:.2f}", *(f"{r['tau_tree'][label]:.2f}" for label in labels),
             f"{r['equal_to_plain']}/{r['replies']}"] for r in report["heads"]]
    return markdown_table(head, rows, "lr")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("heads", nargs="*", help="weights paths without suffix")
    p.add_argument("--table", metavar="JSON", help="print the table of a report written before, run nothing")
    p.add_argument("--prompts", default="specbook/data/heldout_prompts.jsonl")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--trees", default="16:5x4,64:8x8",
                   help="the dynamic trees scored, NODES:DEPTHxTOPK each (default: the benchmark's 16 and 64)")
    p.add_argument("--json", dest="json_path")
    args = p.parse_args(argv)
    try:
        trees = tree_shapes(args.trees)
    except ValueError as e:
        p.error(str(e))
    if args.table:
        print(render(read_json(args.table)))
        return 0
    if not args.heads:
        p.error("name at least one head (or --table JSON)")
    if args.max_new_tokens < 1 or args.threads < 1:
        p.error(f"--max-new-tokens and --threads must be >= 1, got {args.max_new_tokens} and {args.threads}")
    for h in args.heads:
        if not Path(h + ".safetensors").is_file():
            p.error(f"no weights at {h}.safetensors")
    from specbook.models.smollm2 import load_smollm2

    torch.set_num_threads(args.threads)
    model, tok = load_smollm2(dtype=torch.float32)
    target = LlamaTarget(model, max_length=1024)
    prompts = load_prompts(args.prompts)
    ids = [torch.tensor(chat_ids(tok, q.prompt)) for q in prompts]
    eos = tok.eos_token_id
    refs = [generate(target, i, args.max_new_tokens, params=GREEDY, eos_token_id=eos).new_tokens
            for i in tqdm(ids, desc="plain decoding")]
    bar = tqdm(total=len(args.heads) * len(trees) * len(prompts), desc="EAGLE trees")
    rows = [head_row(h, model, target, prompts, ids, refs, args.max_new_tokens, eos, bar, trees) for h in args.heads]
    bar.close()
    report = {"machine": machine_info("cpu"), "threads": args.threads,
              "command": "python scripts/eagle_unroll.py " + " ".join(sys.argv[1:]),
              "prompts": args.prompts, "max_new_tokens": args.max_new_tokens, "dtype": "float32",
              "trees": {label: vars(t) for label, t in trees.items()}, "heads": rows}
    print(render(report))
    if args.json_path:
        Path(args.json_path).write_text(json.dumps(report, indent=1), encoding="utf-8")
        print(f"wrote {args.json_path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

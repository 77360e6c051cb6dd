"""The measured data that assignments 9 (prompt lookup) and 10 (token tree) ship in their notebooks.

    python scripts/measure_assignment_data.py            # measure, print both tables as Python literals
    python scripts/measure_assignment_data.py --check    # measure, and exit 1 unless the notebooks ship exactly these

(With the defaults, 2 threads: about 35 minutes on the course's 2-core CPU while other jobs shared it,
most of it the 66 replies with features for assignment 10.)

Both tables come from SmolLM2-135M-Instruct (float32, CPU, greedy; ``python -m specbook fetch-model``
once) on the benchmark prompts, ``specbook/data/bench_prompts.jsonl``, which no shipped head was
trained on.  Greedy decoding is deterministic, so a rerun gives the same tokens and the same
table (the only source of change would be a float32 near tie that another torch build or thread
count breaks the other way).

* Assignment 9, ``WORKLOADS``: for the first ``--per-category`` prompts of each workload in
  ``WORKLOADS_09``, the prompt's chat-template token ids and SmolLM2's greedy reply to it (at most
  ``--max-new-tokens`` tokens, the end-of-turn token included when the reply reaches it), made by
  ``specbook.decode.generate``, one target pass per token.
* Assignment 10, ``ACCEPTANCE``: the shipped Medusa heads (``specbook/weights/medusa_smollm2-135m``)
  read the target's features along its greedy replies to all 66 prompts
  (``specbook.train.features.features_from_ids``); at every reply position whose four labels exist,
  ``specbook.train.medusa.head_ranks`` gives the rank of the right token under each head (head
  d + 1 = tree depth d).  ``ACCEPTANCE[d][r]`` is the share of positions where that rank is r, for
  ranks 0..``RANKS - 1``: the chance that a depth-d node taking the head's r-th candidate holds the
  right token.  The script also prints, for the best tree of each budget under the independence
  model, the expected accepted drafts by that model and as measured on the same positions
  (``specbook.train.medusa.tokens_per_pass``, which counts each position's ranks jointly), so the
  error of the independence assumption can be read off.

The verify-cost curves and Medusa's draft cost are not measured here: they are copied from committed
benchmark reports, which this script prints beside the tables: assignment 9's from
``docs/data/bench_float32_limit1.json`` (``verify_cost``, float32), assignment 10's from
``docs/data/bench_all.json`` (``verify_cost`` and ``draft_sizes.medusa.draft_cost``, bfloat16).
"""
from __future__ import annotations

import argparse
import ast
import json
import math
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
SRC_09 = ROOT / "assignments" / "src" / "09_prompt_lookup.py"
SRC_10 = ROOT / "assignments" / "src" / "10_token_tree.py"
BENCH_REPORTS = {9: ROOT / "docs" / "data" / "bench_float32_limit1.json", 10: ROOT / "docs" / "data" / "bench_all.json"}
WORKLOADS_09 = ("code_edit", "summarize_quote", "chat")
RANKS = 5
DECIMALS = 3


def workloads(model, tokenizer, categories, per_category: int, max_new_tokens: int) -> dict:
    """{category: [{"id", "prompt": ids, "reply": ids}, ...]}: SmolLM2's greedy replies, one target pass per token."""
    from specbook.bench.workloads import load_prompts, select
    from specbook.decode import generate
    from specbook.models import LlamaTarget
    from specbook.models.chat import chat_ids
    from specbook.sampling import GREEDY

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    out: dict[str, list] = {}
    for p in select(load_prompts(), list(categories), per_category):
        ids = chat_ids(tokenizer, p.prompt)
        target = LlamaTarget(model, max_length=len(ids) + max_new_tokens + 2)
        reply = generate(target, torch.tensor([ids]), max_new_tokens, params=GREEDY, eos_token_id=end).sequences()[0]
        out.setdefault(p.category, []).append({"id": p.id, "prompt": ids, "reply": [int(t) for t in reply]})
    return out


def head_acceptance(model, tokenizer, max_new_tokens: int) -> tuple[list[list[float]], int, torch.Tensor]:
    """(ACCEPTANCE (K, RANKS) rounded, positions counted, the ranks (n, K) themselves)."""
    from specbook.bench.workloads import load_prompts
    from specbook.drafters.medusa import load_medusa
    from specbook.models.chat import chat_ids
    from specbook.train.features import features_from_ids
    from specbook.train.medusa import head_ranks, medusa_examples

    end = tokenizer.convert_tokens_to_ids("<|im_end|>")
    heads, _ = load_medusa()
    prompts = [chat_ids(tokenizer, p.prompt) for p in load_prompts()]
    fs = features_from_ids(model, prompts, max_new_tokens=max_new_tokens, eos_id=end)
    seqs = list(range(fs.num_sequences))
    ranks = head_ranks(heads, model, fs, seqs, top_s=RANKS)  # (n, K); RANKS = not in the top RANKS
    _, labels = medusa_examples(fs, seqs, heads.config.num_heads)
    ranks = ranks[(labels >= 0).all(-1)]  # positions where every head has a label
    table = [[round(float((ranks[:, d] == r).double().mean()), DECIMALS) for r in range(RANKS)]
             for d in range(ranks.shape[1])]
    return table, int(ranks.shape[0]), ranks


def path_value(table: list[list[float]], path) -> float:
    """The independence model's chance that a path of ranks is right: the product of its depths' shares."""
    return math.prod(table[d][r] for d, r in enumerate(path))


def independence_trees(table: list[list[float]], budgets) -> dict[int, list[tuple[int, ...]]]:
    """The best tree of each budget under the independence model (best-first on path values)."""
    out, chosen, frontier = {}, [], [(r,) for r in range(len(table[0]))]
    for n in range(1, max(budgets) + 1):
        best = max(frontier, key=lambda p: path_value(table, p))
        frontier.remove(best)
        chosen.append(best)
        if len(best) < len(table):
            frontier += [best + (r,) for r in range(len(table[len(best)]))]
        if n in budgets:
            out[n] = list(chosen)
    return out


def format_workloads(work: dict, width: int = 104) -> str:
    """``WORKLOADS = {...}`` as the notebook ships it: one entry per reply, token lists wrapped at ``width``."""
    def ints(values: list[int], indent: int) -> str:
        lines, line = [], ""
        for text in (str(v) for v in values):
            if line and len(line) + len(text) + 2 + indent > width:
                lines.append(line + ",")
                line = ""
            line = f"{line}, {text}" if line else text
        return "[" + ("\n" + " " * indent).join(lines + [line]) + "]"

    out = ["WORKLOADS = {"]
    for category, items in work.items():
        out.append(f"    {category!r}: [")
        for item in items:
            out.append(f"        {{'id': {item['id']!r},")
            out.append(f"         'prompt': {ints(item['prompt'], 20)},")
            out.append(f"         'reply': {ints(item['reply'], 19)}}},")
        out.append("    ],")
    out.append("}")
    return "\n".join(out)


def shipped_literal(path: Path, name: str):
    """The literal a notebook source assigns to ``name`` (None if the file or the name is missing)."""
    if not path.exists():
        return None
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == name for t in node.targets):
            return ast.literal_eval(node.value)
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--categories", default=",".join(WORKLOADS_09),
                    help=f"workloads for assignment 9 (default {','.join(WORKLOADS_09)})")
    ap.add_argument("--per-category", type=int, default=3, help="prompts per workload for assignment 9 (default 3)")
    ap.add_argument("--max-new-tokens", type=int, default=96, help="reply budget (default 96)")
    ap.add_argument("--threads", type=int, default=2, help="torch threads (default 2)")
    ap.add_argument("--check", action="store_true", help="exit 1 unless the notebooks ship exactly what was measured")
    args = ap.parse_args(argv)

    from specbook.models.smollm2 import load_smollm2
    from specbook.train.medusa import tokens_per_pass

    torch.set_num_threads(args.threads)
    t0 = time.perf_counter()
    model, tokenizer = load_smollm2(dtype="float32")
    work = workloads(model, tokenizer, args.categories.split(","), args.per_category, args.max_new_tokens)
    print(f"# assignment 9: {sum(len(v) for v in work.values())} replies in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    table, positions, ranks = head_acceptance(model, tokenizer, args.max_new_tokens)
    print(f"# assignment 10: {positions} positions, {time.perf_counter() - t0:.0f} s in all", file=sys.stderr)

    print(format_workloads(work))
    print(f"ACCEPTANCE = {json.dumps(table)}  # {positions} positions")

    budgets = list(range(1, 17))
    trees = independence_trees(table, budgets)
    print("# budget: expected accepted drafts under independence / as measured jointly on the same positions")
    for n in budgets:
        model_e = sum(path_value(table, p) for p in trees[n])
        joint_e = tokens_per_pass(ranks, [list(p) for p in trees[n]]) - 1
        print(f"#   N = {n:2d}: {model_e:.3f} / {joint_e:.3f}")
    for number, path in BENCH_REPORTS.items():
        report = json.loads(path.read_text())
        costs = report["draft_sizes"].get("medusa", {}).get("draft_cost", "not in this report")
        print(f"# assignment {number}, {path.relative_to(ROOT)} ({report['settings']['dtype']}): verify_cost.specbook.v = "
              f"{[round(x, 3) for x in report['verify_cost']['specbook']['v']]}; medusa draft_cost: {costs}")

    if args.check:
        ok = shipped_literal(SRC_09, "WORKLOADS") == work and shipped_literal(SRC_10, "ACCEPTANCE") == table
        print("the notebooks ship exactly these tables" if ok else "the notebooks' tables differ from this measurement",
              file=sys.stderr)
        return 0 if ok else 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

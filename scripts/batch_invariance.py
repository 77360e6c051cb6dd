"""Which kernels give a token other bits in a verify pass than in a one-token step, and what
making them agree costs (docs/bench.md, "Bit for bit in bfloat16").

    python scripts/batch_invariance.py --prompts 12 --reps 9 --json docs/data/batch_invariance.json

For each of the first ``--prompts`` benchmark prompts, SmolLM2 in bfloat16 scores its last
5 tokens in one pass and one by one after the same cached prefix, and the script counts:
* attention outputs per (layer, position) that differ, for torch's CPU attention
  (``F.scaled_dot_product_attention``) and for :func:`specbook.models.llama.matmul_attention`,
  both fed the same queries, keys and values (the pass's own);
* rows of each projection shape that differ between one row alone and 64 rows together;
* prompts whose 5 logits rows differ, default kernels and ``LlamaModel.batch_invariant()``.
Then it times a decode step and a 5-token pass, both ways, interleaved (median of ``--reps``).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from specbook.bench.workloads import load_prompts  # noqa: E402
from specbook.machine import machine_info  # noqa: E402
from specbook.models import llama  # noqa: E402
from specbook.models.chat import chat_ids  # noqa: E402
from specbook.models.linear import Linear  # noqa: E402
from specbook.models.smollm2 import load_smollm2  # noqa: E402

N = 5  # tokens per verify pass


def attention_inputs(model, ids):
    """The (q, k, v, mask) each layer's attention sees in a 5-token pass after ids[:-5]."""
    seen, original = [], llama.F.scaled_dot_product_attention

    def capture(q, k, v, attn_mask=None, is_causal=False):
        seen.append((q.clone(), k.clone(), v.clone(), attn_mask))
        return original(q, k, v, attn_mask=attn_mask, is_causal=is_causal)

    cache = model.make_cache(1, len(ids) + 8)
    model(torch.tensor([ids[:-N]]), cache, logits_to_keep=0)
    F.scaled_dot_product_attention = capture
    try:
        model(torch.tensor([ids[-N:]]), cache)
    finally:
        F.scaled_dot_product_attention = original
    return seen


def attention_mismatches(model, prompts) -> dict:
    """(layer, position) pairs whose pass output differs from the same query attended alone."""
    forms = {"scaled_dot_product_attention": lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m),
             "matmul_attention": lambda q, k, v, m: llama.matmul_attention(q, k, v, m, False)}
    counts, total = dict.fromkeys(forms, 0), 0
    for ids in prompts:
        for q, k, v, mask in attention_inputs(model, ids):
            B, Hkv, GN, Dh = q.shape
            G, S = GN // N, k.shape[2]
            for name, form in forms.items():
                together = form(q, k, v, mask).view(B, Hkv, G, N, Dh)
                for j in range(N):  # query j alone sees its own prefix, as in a decode step
                    qj = q.view(B, Hkv, G, N, Dh)[:, :, :, j].contiguous()
                    alone = form(qj, k[:, :, :S - N + j + 1], v[:, :, :S - N + j + 1], None)
                    counts[name] += not torch.equal(alone, together[:, :, :, j])
            total += N  # this layer's positions
    return {"pairs": total, "differ": counts}


def projection_mismatches(model) -> dict:
    """Per projection shape: of 64 random rows, how many differ alone vs together."""
    out = {}
    layer = model.layers[0]
    for name, lin in (("wqkv", layer.attn.wqkv), ("wo", layer.attn.wo), ("w_gate_up", layer.mlp.w_gate_up),
                      ("w_down", layer.mlp.w_down), ("lm_head", model.lm_head)):
        x = torch.randn(64, lin.in_features, generator=torch.Generator().manual_seed(0)).to(lin.weight.dtype)
        row = {}
        for flag in (False, True):
            lin.one_row_as_two = flag
            alone = torch.cat([lin(x[i:i + 1]) for i in range(64)])
            row["one_row_as_two" if flag else "default"] = int((alone != lin(x)).any(-1).sum())
        lin.one_row_as_two = False
        out[name] = {"in": lin.in_features, "out": lin.out_features, "rows_differ_of_64": row}
    return out


def chains_agree(model, prompts) -> int:
    agree = 0
    for ids in prompts:
        cache = model.make_cache(1, len(ids) + 8)
        model(torch.tensor([ids[:-N]]), cache, logits_to_keep=0)
        start = cache.clone()
        chain = model(torch.tensor([ids[-N:]]), cache)
        cache.copy_from(start)
        steps = torch.cat([model(torch.tensor([[t]]), cache) for t in ids[-N:]], dim=1)
        agree += torch.equal(chain, steps)
    return agree


def step_times(model, ids, reps: int) -> dict:
    """Median ms of a decode step and of a 5-token pass, default and batch-invariant, interleaved."""
    cache = model.make_cache(1, len(ids) + 40)
    model(torch.tensor([ids]), cache, logits_to_keep=0)
    start = len(ids)
    times = {(mode, n): [] for mode in ("default", "batch_invariant") for n in (1, N)}
    for r in range(reps):
        order = ("default", "batch_invariant") if r % 2 == 0 else ("batch_invariant", "default")
        for mode in order:
            model.batch_invariant(mode == "batch_invariant")
            for n in (1, N):
                tokens = torch.tensor([ids[-n:]])
                model(tokens, cache)  # warm
                cache.rollback([start])
                t0 = time.perf_counter()
                for _ in range(10):
                    model(tokens, cache)
                    cache.rollback([start])
                times[(mode, n)].append((time.perf_counter() - t0) / 10 * 1e3)
    model.batch_invariant(False)
    med = {f"{mode}_{'decode' if n == 1 else 'pass5'}_ms": round(statistics.median(v), 2) for (mode, n), v in times.items()}
    for n, key in ((1, "decode"), (N, "pass5")):
        ratios = [a / b for a, b in zip(times[("batch_invariant", n)], times[("default", n)])]
        med[f"{key}_ratio"] = round(statistics.median(ratios), 3)
    return med


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--prompts", type=int, default=12, help="first this many benchmark prompts (default 12)")
    ap.add_argument("--reps", type=int, default=9, help="interleaved timing repetitions (default 9)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--json", dest="json_path")
    args = ap.parse_args(argv)
    if args.prompts < 1 or args.reps < 1 or args.threads < 1:
        raise ValueError(f"--prompts, --reps and --threads must be >= 1, got {args.prompts}, {args.reps}, {args.threads}")
    torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2("cpu", torch.bfloat16)
    prompts = [chat_ids(tokenizer, p.prompt) for p in load_prompts()[:args.prompts]]
    with torch.no_grad():
        report = {"machine": {**machine_info("cpu"), "threads": args.threads},
                  "prompts": len(prompts), "attention": attention_mismatches(model, prompts),
                  "projections": projection_mismatches(model),
                  "chains_bit_identical": {"default": chains_agree(model, prompts)}}
        model.batch_invariant()
        report["chains_bit_identical"]["batch_invariant"] = chains_agree(model, prompts)
        model.batch_invariant(False)
        report["times"] = step_times(model, prompts[0], args.reps)
    text = json.dumps(report, indent=1)
    print(text)
    if args.json_path:
        Path(args.json_path).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

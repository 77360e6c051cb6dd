"""Self-distillation data with the target's features, generated once and cached on disk.

Shape legend: B batch, T tokens of one sequence, Ntot tokens of all sequences, D width,
k stored top-k entries, V vocab.

For each prompt the frozen target writes its greedy reply (temperature 0, the setting the
heads are judged in), and while doing so we keep what the heads learn from:

* ``tokens``  the prompt (chat template) followed by the reply, EOS included;
* ``hidden``  f_t, the last block's output before the final norm at every position but the
  last (the features Medusa heads read and EAGLE regresses; Li et al., EAGLE, 2024, sec. 3);
* ``topk_ids`` / ``topk_logprobs``  the target's k most likely next tokens at each of those
  positions (temperature 1), the soft labels of EAGLE's token loss.

The features come out of the same forward that generates the reply, so the cost is one
target pass per token.  Shards are written as they finish (an interrupted run resumes) to
``$SPECBOOK_CACHE/heads/<key>/`` (default ``~/.cache/specbook``), never into the repository.

A prompt set (the exact prompts a shipped head was trained on, as chat-template token ids)
is drawn from the training mix of :mod:`specbook.train.heads_data` and written by

    python -m specbook.train.features --out specbook/data/eagle_prompts.jsonl \
        --train-prompts 2400 --heldout-prompts 48 --shared-per-category 400

which also generates (and caches) SmolLM2's replies to them.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from ..cliargs import nonnegative_int, positive_int, threads, writable_file
from ..models.chat import chat_ids
from ..models.smollm2 import cache_root
from .heads_data import SHARED_PER_CATEGORY, training_mix
from .prompts import Prompt, is_heldout

TOPK = 8


@dataclass
class FeatureSet:
    """Every sequence concatenated.  Sequence s occupies rows ``starts[s]:starts[s+1]`` of
    ``tokens`` and rows ``starts[s] - s : starts[s+1] - s - 1`` of the feature tensors
    (one feature fewer than tokens: the last token was never fed)."""

    tokens: torch.Tensor  # (Ntot,) long
    hidden: torch.Tensor  # (Ntot - S, D) float16
    topk_ids: torch.Tensor  # (Ntot - S, k) long
    topk_logprobs: torch.Tensor  # (Ntot - S, k) float16
    starts: torch.Tensor  # (S + 1,) long
    prompt_lengths: torch.Tensor  # (S,) long
    prompt_ids: list[str]
    categories: list[str]
    layers: torch.Tensor | None = None  # (Ntot - S, n * D) float16, earlier hidden states (layer_features.py)

    @property
    def num_sequences(self) -> int:
        return len(self.prompt_ids)

    def sequence(self, s: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """(tokens (T,), hidden (T-1, D), topk_ids (T-1, k), topk_logprobs (T-1, k)) of sequence s."""
        a, b = int(self.starts[s]), int(self.starts[s + 1])
        fa, fb = a - s, b - s - 1
        return self.tokens[a:b], self.hidden[fa:fb], self.topk_ids[fa:fb], self.topk_logprobs[fa:fb]

    def sequence_layers(self, s: int) -> torch.Tensor:
        """(T-1, n * D) the earlier hidden states of sequence s (``layers`` must be set)."""
        return self.layers[int(self.starts[s]) - s : int(self.starts[s + 1]) - s - 1]

    def select(self, keep: list[int]) -> "FeatureSet":
        parts = [self.sequence(s) for s in keep]
        lengths = torch.tensor([len(p[0]) for p in parts], dtype=torch.long)
        return FeatureSet(
            tokens=torch.cat([p[0] for p in parts]),
            hidden=torch.cat([p[1] for p in parts]),
            topk_ids=torch.cat([p[2] for p in parts]),
            topk_logprobs=torch.cat([p[3] for p in parts]),
            starts=torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
            prompt_lengths=self.prompt_lengths[keep],
            prompt_ids=[self.prompt_ids[s] for s in keep],
            categories=[self.categories[s] for s in keep],
            layers=None if self.layers is None else torch.cat([self.sequence_layers(s) for s in keep]),
        )


def _file_name(prompt_id: str) -> str:
    return prompt_id.replace("/", "_") + ".pt"


@torch.no_grad()
def _generate_batch(target, prompt_ids: list[list[int]], max_new_tokens: int, eos_id: int) -> list[dict]:
    """Greedy replies of ``target`` (a LlamaTarget) for one batch, with features at every fed token."""
    B = len(prompt_ids)
    lengths = [len(p) for p in prompt_ids]
    Tmax = max(lengths)
    padded = torch.full((B, Tmax), eos_id, dtype=torch.long)
    for b, p in enumerate(prompt_ids):
        padded[b, : len(p)] = torch.tensor(p)
    target.reset(B)
    logits = target.forward(padded)  # (B, Tmax, V); padding comes after each prompt, so it is never seen
    hid = target.last_hidden  # (B, Tmax, D)
    rows = []
    for b in range(B):
        lp = logits[b, : lengths[b]].log_softmax(-1)  # (T_b, V)
        top = lp.topk(TOPK, dim=-1)
        rows.append({"tokens": list(prompt_ids[b]), "hidden": [hid[b, : lengths[b]].half()],
                     "topk_ids": [top.indices], "topk_logprobs": [top.values.half()], "done": False})
    target.rollback(torch.tensor(lengths))
    nxt = torch.stack([logits[b, lengths[b] - 1].argmax() for b in range(B)])  # (B,)
    for step in range(max_new_tokens):
        for b in range(B):
            if not rows[b]["done"]:
                rows[b]["tokens"].append(int(nxt[b]))
                rows[b]["done"] = int(nxt[b]) == eos_id or step == max_new_tokens - 1
        if all(r["done"] for r in rows):
            break
        logits = target.forward(nxt[:, None])[:, -1]  # (B, V)
        hid = target.last_hidden[:, -1]  # (B, D)
        lp = logits.log_softmax(-1)
        top = lp.topk(TOPK, dim=-1)
        for b in range(B):
            if not rows[b]["done"]:
                rows[b]["hidden"].append(hid[b : b + 1].half())
                rows[b]["topk_ids"].append(top.indices[b : b + 1])
                rows[b]["topk_logprobs"].append(top.values[b : b + 1].half())
        nxt = logits.argmax(-1)
    out = []
    for b, r in enumerate(rows):
        hidden = torch.cat(r["hidden"])
        n_feat = len(r["tokens"]) - 1
        out.append({"tokens": torch.tensor(r["tokens"], dtype=torch.int32),
                    "hidden": hidden[:n_feat].clone(),
                    "topk_ids": torch.cat(r["topk_ids"])[:n_feat].int().clone(),
                    "topk_logprobs": torch.cat(r["topk_logprobs"])[:n_feat].clone(),
                    "prompt_length": lengths[b]})
    return out


def build_features(prompts: list[Prompt], *, max_new_tokens: int = 160, batch_size: int = 16,
                   cache: str | Path | None = None, model=None, tokenizer=None, model_tag: str | None = None,
                   progress: bool = True) -> FeatureSet:
    """Generate (or load from the cache) the self-distillation set for ``prompts``.

    One file per prompt under ``<cache>/<model_tag>-new<max_new_tokens>/``: a longer prompt list
    reuses every reply already made, and an interrupted run resumes.  ``model``/``tokenizer``
    default to SmolLM2-135M-Instruct; a different model needs its own ``model_tag``.
    """
    if max_new_tokens < 1 or batch_size < 1:
        raise ValueError(f"max_new_tokens and batch_size must be >= 1, got {max_new_tokens}, {batch_size}")
    if not prompts:
        raise ValueError("prompts is empty")
    if len({p.id for p in prompts}) != len(prompts):
        raise ValueError("prompts contains a repeated prompt id")
    if model is None:
        from ..models.smollm2 import load_smollm2

        model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
        model_tag = model_tag or smollm2_tag()
    if model_tag is None:
        raise ValueError("model_tag is required with a custom model (it keys the cache)")
    root = (Path(cache) if cache is not None else cache_root() / "heads") / f"{model_tag}-new{max_new_tokens}-top{TOPK}"
    items = [(p.id, p.category, None if (root / _file_name(p.id)).exists() else chat_ids(tokenizer, p.text))
             for p in prompts]  # prompts already cached need no tokenising
    return _cached_features(items, root, model, tokenizer.eos_token_id, max_new_tokens, batch_size, progress)


def _cached_features(items: list[tuple[str, str, list[int] | None]], root: Path, model, eos_id: int,
                     max_new_tokens: int, batch_size: int, progress: bool) -> FeatureSet:
    """Rows for ``items`` = (prompt id, category, prompt token ids), in that order: read from ``root``,
    or generated in batches of similar lengths and written there first."""
    from ..models import LlamaTarget

    root.mkdir(parents=True, exist_ok=True)
    missing = [it for it in items if not (root / _file_name(it[0])).exists()]
    missing.sort(key=lambda it: len(it[2]))  # similar lengths share a batch
    batches = [missing[i : i + batch_size] for i in range(0, len(missing), batch_size)]
    target = None
    t0, made = time.perf_counter(), 0
    bar = tqdm(total=len(batches), disable=not progress or not batches, desc="target replies + features")
    for batch in batches:
        if target is None:
            longest = max(len(it[2]) for it in missing) + max_new_tokens + 1
            target = LlamaTarget(model, max_length=min(longest, model.config.max_position_embeddings))
        rows = _generate_batch(target, [it[2] for it in batch], max_new_tokens, eos_id)
        for (pid, category, _), r in zip(batch, rows):
            r["prompt_id"], r["category"] = pid, category
            tmp = root / (_file_name(pid) + ".tmp")
            torch.save(r, tmp)
            tmp.rename(root / _file_name(pid))  # a file is either complete or absent
            made += len(r["tokens"])
        bar.set_postfix(tok_s=f"{made / (time.perf_counter() - t0):.1f}")
        bar.update(1)
    bar.close()
    rows = [torch.load(root / _file_name(pid), weights_only=True) for pid, _, _ in items]
    for (pid, _, ids), r in zip(items, rows):
        if ids is not None and r["tokens"][: r["prompt_length"]].tolist() != list(ids):
            raise ValueError(f"cached reply {root / _file_name(pid)} was made for a different prompt than {pid!r}; "
                             "delete it to regenerate")
    return _assemble(rows)


def prompt_set_line(prompt_id: str, category: str, ids: list[int]) -> str:
    """One prompt of a prompt-set file, as a JSON line (read back by ``load_prompt_set``)."""
    import json

    return json.dumps({"id": prompt_id, "category": category, "prompt_token_ids": ids})


def write_prompt_lines(path: str | Path, lines: list[str]) -> int:
    """Write ``prompt_set_line`` lines as a prompt-set file, sorted (the order never depends on how they
    were gathered).  Returns the count."""
    Path(path).write_text("\n".join(sorted(lines)) + "\n")
    return len(lines)


def extend_prompt_set(prog: str, doc: str, make, what: str, argv: list[str] | None = None) -> None:
    """The command line of a prompt writer: --base's lines, then ``make(--count, --seed)``'s
    prompts in the target's chat template, written to --out."""
    import argparse

    from ..cliargs import existing_file, nonnegative_int, writable_file
    from ..models.chat import chat_ids
    from ..models.smollm2 import load_smollm2

    ap = argparse.ArgumentParser(prog=prog, description=doc.split("\n\n")[0])
    ap.add_argument("--base", type=existing_file, required=True, help="a prompt set to extend (JSON lines)")
    ap.add_argument("--count", type=nonnegative_int, required=True, help=f"{what} prompts to add")
    ap.add_argument("--seed", type=nonnegative_int, default=0)
    ap.add_argument("--out", type=writable_file, required=True, help="the prompt set to write")
    args = ap.parse_args(argv)
    tok = load_smollm2(dtype="float32")[1]
    lines = [line for line in Path(args.base).read_text().splitlines() if line.strip()]
    lines += [prompt_set_line(p.id, p.category, chat_ids(tok, p.text)) for p in make(args.count, args.seed)]
    n = write_prompt_lines(args.out, lines)
    print(f"wrote {args.out}: {n} prompts ({args.count} {what})")


def write_prompt_set(path: str | Path, features: list[FeatureSet]) -> int:
    """Write the prompts of ``features`` (id, category, chat-template token ids) as JSON lines: the
    exact training data of a shipped head, reproducible with ``load_prompt_set``.  Returns the count."""
    lines = []
    for fs in features:
        for s in range(fs.num_sequences):
            start = int(fs.starts[s])
            ids = fs.tokens[start : start + int(fs.prompt_lengths[s])].tolist()
            lines.append(prompt_set_line(fs.prompt_ids[s], fs.categories[s], ids))
    return write_prompt_lines(path, lines)


def load_prompt_set(path: str | Path, heldout: bool, *, max_new_tokens: int = 160, batch_size: int = 48,
                    progress: bool = True, model=None, tokenizer=None) -> FeatureSet:
    """The self-distillation set for one split of a prompt-set file (``write_prompt_set``), in prompt-id
    order: SmolLM2's greedy replies, read from the cache or generated (and cached) where missing.
    ``model``/``tokenizer``: SmolLM2-135M-Instruct, loaded here unless the caller has it already."""
    import json

    rows = [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]
    items = sorted((r["id"], r["category"], r["prompt_token_ids"]) for r in rows if is_heldout(r["id"]) == heldout)
    if not items:
        raise ValueError(f"{path} has no {'held-out' if heldout else 'training'} prompts")
    if model is None:
        from ..models.smollm2 import load_smollm2

        model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    return _cached_features(items, default_root(max_new_tokens), model, tokenizer.eos_token_id, max_new_tokens,
                            batch_size, progress)


def heads_training_data(model, tokenizer, *, prompt_set: str | Path | None, train_prompts: int,
                        heldout_prompts: int, max_new_tokens: int,
                        shared_per_category: int = SHARED_PER_CATEGORY) -> tuple[FeatureSet, FeatureSet]:
    """(held-out, training) features for the Medusa and EAGLE trainers, from SmolLM2 ``model``: the
    exact prompts of a prompt-set file, or else the seeded training mix of ``heads_data`` (with
    ``shared_per_category`` prompts per category of :mod:`specbook.train.data`)."""
    if prompt_set:
        return tuple(load_prompt_set(prompt_set, heldout, max_new_tokens=max_new_tokens, model=model,
                                     tokenizer=tokenizer) for heldout in (True, False))
    return tuple(build_features(training_mix(n, heldout=heldout, shared_per_category=shared_per_category),
                                max_new_tokens=max_new_tokens, model=model, tokenizer=tokenizer, model_tag=smollm2_tag())
                 for n, heldout in ((heldout_prompts, True), (train_prompts, False)))


def smollm2_tag() -> str:
    """The cache key of SmolLM2-135M-Instruct's replies: the model name and its GGUF digest."""
    from ..models.smollm2 import GGUF_SHA256

    return f"smollm2-135m-instruct-{GGUF_SHA256[:12]}"


def default_root(max_new_tokens: int, cache: str | Path | None = None) -> Path:
    base = Path(cache) if cache is not None else cache_root() / "heads"
    return base / f"{smollm2_tag()}-new{max_new_tokens}-top{TOPK}"


def _assemble(rows: list[dict]) -> FeatureSet:
    lengths = torch.tensor([len(r["tokens"]) for r in rows], dtype=torch.long)
    return FeatureSet(
        tokens=torch.cat([r["tokens"] for r in rows]).long(),
        hidden=torch.cat([r["hidden"] for r in rows]),
        topk_ids=torch.cat([r["topk_ids"] for r in rows]).long(),
        topk_logprobs=torch.cat([r["topk_logprobs"] for r in rows]),
        starts=torch.cat([torch.zeros(1, dtype=torch.long), lengths.cumsum(0)]),
        prompt_lengths=torch.tensor([r["prompt_length"] for r in rows], dtype=torch.long),
        prompt_ids=[r.get("prompt_id", str(i)) for i, r in enumerate(rows)],
        categories=[r.get("category", "") for r in rows],
    )


def features_from_ids(model, prompt_ids: list[list[int]], *, max_new_tokens: int, eos_id: int,
                      batch_size: int = 8) -> FeatureSet:
    """The same data for already tokenised prompts, in memory (no cache): for tests and toy models."""
    from ..models import LlamaTarget

    if not prompt_ids or any(len(p) == 0 for p in prompt_ids):
        raise ValueError("prompt_ids must be a non-empty list of non-empty token lists")
    longest = max(len(p) for p in prompt_ids) + max_new_tokens + 1
    target = LlamaTarget(model, max_length=min(longest, model.config.max_position_embeddings))
    rows = []
    for i in range(0, len(prompt_ids), batch_size):
        rows.extend(_generate_batch(target, prompt_ids[i : i + batch_size], max_new_tokens, eos_id))
    return _assemble(rows)


def draft_vocabulary(features: FeatureSet, size: int, always: tuple[int, ...] = ()) -> torch.Tensor:
    """The ``size`` target tokens the heads may draft: the most frequent next tokens of the data.

    Counts every token of every sequence and the target's top-1 guess at every position, so
    both what the target wrote and what it expects are covered; ``always`` (e.g. EOS) is kept
    regardless.  Returns (size,) long target ids, most frequent first.
    """
    V = int(max(features.tokens.max(), features.topk_ids.max())) + 1
    counts = torch.bincount(features.tokens, minlength=V) + torch.bincount(features.topk_ids[:, 0], minlength=V)
    counts = counts.double()
    for t in always:
        if t < V:
            counts[t] = float("inf")
    order = counts.argsort(descending=True, stable=True)
    order = order[counts[order] > 0] if (counts > 0).sum() >= size else order
    if len(order) < size:
        raise ValueError(f"size={size} exceeds the {len(order)} tokens known to the data's vocabulary")
    return order[:size].clone()


def validation_indices(features: FeatureSet, every: int = 20) -> tuple[list[int], list[int]]:
    """(fit, validation) sequence indices: every ``every``-th training sequence is kept out of the
    gradient steps and used to choose trees and watch for overfitting (the held-out split is
    never touched during training)."""
    seqs = list(range(features.num_sequences))
    return [s for s in seqs if s % every], [s for s in seqs if s % every == 0]


def main(argv: list[str] | None = None) -> None:
    import argparse

    from ..models.smollm2 import load_smollm2

    ap = argparse.ArgumentParser(prog="specbook train features",
                                 description="Draw a prompt set from the training mix, generate SmolLM2's "
                                             "replies to it (cached) and write it as JSON lines.")
    ap.add_argument("--out", type=writable_file, required=True, help="the prompt-set file to write")
    ap.add_argument("--train-prompts", type=positive_int, required=True, help="prompts of the training mix")
    ap.add_argument("--heldout-prompts", type=positive_int, default=24, help="held-out prompts")
    ap.add_argument("--shared-per-category", type=nonnegative_int, default=SHARED_PER_CATEGORY,
                    help="prompts per category drawn from the shared training prompts")
    ap.add_argument("--max-new-tokens", type=positive_int, default=160, help="length of each target reply")
    ap.add_argument("--threads", type=threads, default=None, help="torch threads (default: torch's own)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model, tokenizer = load_smollm2(dtype=torch.float32)  # float32: training and recorded figures
    model.requires_grad_(False)
    sets = heads_training_data(model, tokenizer, prompt_set=None, train_prompts=args.train_prompts,
                               heldout_prompts=args.heldout_prompts, max_new_tokens=args.max_new_tokens,
                               shared_per_category=args.shared_per_category)  # (held-out, training)
    n = write_prompt_set(args.out, sets)
    print(f"wrote {args.out}: {n} prompts ({sets[0].num_sequences} held out), "
          f"{int(sets[1].tokens.numel())} training tokens")


if __name__ == "__main__":
    main()

"""Train Medusa heads for SmolLM2-135M on CPU, target frozen (Medusa-1, Cai et al. 2024, sec. 2.2.1).

Shape legend: n training positions, K heads, D width, Vd draft vocabulary, S top-k ranks.

    python -m specbook.train.medusa                 # default run (data generation cached), writes
                                                    # specbook/weights/medusa_smollm2-135m.{safetensors,json}
    python -m specbook.train.medusa --help
    torchrun --standalone --nproc_per_node 2 -m specbook.train.medusa ...   # data-parallel, the same run
                                    # (:mod:`specbook.train.distributed`; --checkpoint, --resume)

Loss (Medusa eq. 2): sum_k 0.8^k * CE(head k at position t, x_{t+k+1}) over the reply
positions of the self-distilled data (:mod:`specbook.train.features`), with the target's
features z_t read from the cache.  After training, the rank of the right token under every
head is measured on a validation slice of the training split; those ranks give the
expected accepted length of any choice tree, and :func:`best_choices` builds the best tree
of each size (Medusa sec. 2.1.2 builds its "optimized tree" the same way, from accuracies).
The held-out split is only scored, after everything is fixed.
"""
from __future__ import annotations

import math
import time
from collections import Counter

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..cliargs import positive_int
from ..drafters.medusa import MedusaConfig, MedusaHeads
from .distributed import Checkpoints, World, launched, restore, training_state
from .features import FeatureSet
from .heads_cli import checkpoints_from, heads_parser, load_heads_data, parse_heads_args, training_record, write_heads
from .schedule import warmup_cosine

DEFAULT_NAME = "medusa_smollm2-135m"
TREE_SIZES = (4, 8, 16, 24, 32, 48, 64)


def to_draft_ids(tokens: torch.Tensor, vocab: torch.Tensor, target_vocab_size: int) -> torch.Tensor:
    """Target ids -> draft ids; tokens outside the draft vocabulary (and -100) -> -100."""
    lookup = torch.full((target_vocab_size + 1,), -100, dtype=torch.long, device=tokens.device)
    lookup[vocab.to(tokens.device)] = torch.arange(len(vocab), device=tokens.device)
    return lookup[tokens.clamp(min=-1)]  # -1 / -100 index the last slot, which is -100


def medusa_examples(fs: FeatureSet, seqs: list[int], num_heads: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(feature rows (n,), target-id labels (n, K)) for every reply position t of ``seqs``:
    head k's label is x_{t+k+1}, or -100 past the end."""
    rows, labels = [], []
    for s in seqs:
        a, b = int(fs.starts[s]), int(fs.starts[s + 1])
        T, P, first_feature = b - a, int(fs.prompt_lengths[s]), a - s
        tok = fs.tokens[a:b]
        t = torch.arange(P - 1, T - 1)  # positions whose next token is part of the reply
        idx = t[:, None] + torch.arange(2, num_heads + 2)  # (n_s, K)
        lab = torch.where(idx < T, tok[idx.clamp(max=T - 1)], torch.full_like(idx, -100))
        rows.append(first_feature + t)
        labels.append(lab)
    return torch.cat(rows), torch.cat(labels)


def target_features(model, hidden: torch.Tensor) -> torch.Tensor:
    """z = the target's final norm of its last hidden state (what its LM head reads), float32."""
    with torch.no_grad():
        return model.norm(hidden.float())


def train_medusa(fs: FeatureSet, model, seqs: list[int], *, num_heads: int = 4, vocab: torch.Tensor,
                 epochs: float = 2.0, batch_size: int = 256, lr: float = 2e-3, seed: int = 0,
                 progress: bool = True, time_limit_s: float | None = None, max_steps: int | None = None,
                 world: World | None = None, checkpoints: Checkpoints | None = None) -> tuple[MedusaHeads, dict]:
    """Fit Medusa heads on the reply positions of sequences ``seqs``; return (heads, log).

    The heads train on the device of ``model``.  Training stops after ``time_limit_s`` seconds
    or ``max_steps`` steps (the schedule still spans ``epochs``).  ``world``: this process's
    place among data-parallel ranks (:mod:`specbook.train.distributed`; each takes its slice of
    every global batch of ``batch_size`` positions); ``checkpoints``: where to save and resume.
    """
    if epochs <= 0 or batch_size < 1:
        raise ValueError(f"epochs must be > 0 and batch_size >= 1, got {epochs}, {batch_size}")
    world = world or World()
    V, device = model.config.vocab_size, model.lm_head.weight.device
    config = MedusaConfig(dim=model.config.dim, num_heads=num_heads, draft_vocab_size=len(vocab), target_vocab_size=V)
    gen = torch.Generator().manual_seed(seed)
    heads = MedusaHeads(config, vocab).to(device)
    lm = model.lm_head.weight[vocab.to(device)].detach().float()  # (Vd, D) frozen
    rows, labels = medusa_examples(fs, seqs, num_heads)
    labels = to_draft_ids(labels, vocab, V)  # (n, K)
    n = len(rows)
    steps = max(1, math.ceil(epochs * n / batch_size))
    opt = torch.optim.AdamW(heads.parameters(), lr=lr, weight_decay=0.0)
    warmup = min(50, steps // 10 + 1)
    sched = warmup_cosine(opt, steps, warmup)
    weights = torch.tensor([0.8 ** k for k in range(num_heads)]).to(device)
    log = {"positions": n, "steps": steps, "loss": []}
    order = torch.randperm(n, generator=gen)
    run = {"trainer": "medusa", "positions": n, "steps": steps, "batch_size": batch_size, "lr": lr, "seed": seed,
           "num_heads": num_heads, "draft_vocab": len(vocab)}
    first, seconds = 0, 0.0
    if checkpoints is not None and checkpoints.resume:
        first, loop = restore(checkpoints, heads, opt, sched, gen, run)
        order, log, seconds = loop["order"], loop["log"], loop["seconds"]
    trained = world.wrap(heads)
    t0 = time.perf_counter()
    bar = tqdm(range(first, steps), disable=not (progress and world.main), desc="medusa heads")
    for step in bar:
        start = (step * batch_size) % n
        if start + batch_size > n:
            order = torch.randperm(n, generator=gen)
            start = 0
        idx = world.shard(order[start : start + batch_size])  # this rank's slice of the global batch
        loss, per_head = medusa_loss(trained, model, fs.hidden[rows[idx]], labels[idx], lm, weights, world)
        opt.zero_grad()
        loss.backward()  # DDP averages the ranks' gradients here
        opt.step()
        sched.step()
        if step % 10 == 0 or step == steps - 1:
            shown = world.mean(torch.stack([loss.detach(), per_head[0].detach()]))  # the global batch's
            log["loss"].append((step, float(shown[0])))
            bar.set_postfix(loss=f"{float(shown[0]):.3f}", head1=f"{float(shown[1]):.2f}")
        stop = ((time_limit_s is not None and world.any(time.perf_counter() - t0 > time_limit_s))
                or (max_steps is not None and step + 1 >= max_steps and step + 1 < steps))
        if checkpoints is not None and checkpoints.due(step + 1, stopping=stop):
            checkpoints.save(world, training_state(step + 1, heads, opt, sched, gen, run, order=order, log=log,
                                                   seconds=seconds + time.perf_counter() - t0))
        if stop:
            log["stopped_early_at_step"] = step + 1
            break
    log["train_seconds"] = seconds + time.perf_counter() - t0
    return heads.eval(), log


def medusa_loss(heads, model, hidden: torch.Tensor, y: torch.Tensor, lm: torch.Tensor, weights: torch.Tensor,
                world: World) -> tuple[torch.Tensor, torch.Tensor]:
    """Medusa eq. 2 on one rank's positions: (sum_k weights[k] * CE_k, the K per-head terms).

    hidden (b, D): the target's last hidden states; y (b, K): draft-id labels (-100: none).
    Each head's mean is scaled by its share of the global batch's labels (:meth:`World.share`)."""
    device = lm.device
    z = target_features(model, hidden.to(device))  # (b, D)
    logits = heads(z, lm)  # (b, K, Vd)
    y = y.to(device)
    K = y.shape[1]
    per_head = torch.stack([F.cross_entropy(logits[:, k], y[:, k], ignore_index=-100) for k in range(K)])
    per_head = torch.nan_to_num(per_head)  # a head with no label in this batch contributes 0
    per_head = per_head * world.share((y != -100).sum(0))  # (K,), exactly itself in one process
    return (weights * per_head).sum(), per_head


@torch.no_grad()
def head_ranks(heads: MedusaHeads, model, fs: FeatureSet, seqs: list[int], top_s: int = 10,
               batch_size: int = 1024) -> torch.Tensor:
    """(n, K) rank of the right token x_{t+k+1} among head k's candidates at every reply position
    (0 = top-1); ``top_s`` when it is not in the top ``top_s`` (or not draftable, or past the end)."""
    rows, labels = medusa_examples(fs, seqs, heads.config.num_heads)
    labels = to_draft_ids(labels, heads.vocab, heads.config.target_vocab_size)
    lm = model.lm_head.weight[heads.vocab].float()
    labels = labels.to(lm.device)
    out = []
    for i in range(0, len(rows), batch_size):
        logits = heads(target_features(model, fs.hidden[rows[i : i + batch_size]].to(lm.device)), lm)  # (b, K, Vd)
        top = logits.topk(top_s, dim=-1).indices  # (b, K, S)
        y = labels[i : i + batch_size]
        hit = top == y[..., None]  # (b, K, S)
        rank = torch.where(hit.any(-1), hit.float().argmax(-1), torch.full_like(y, top_s))
        out.append(torch.where(y < 0, torch.full_like(y, top_s), rank))
    return torch.cat(out).cpu()


def best_choices(ranks: torch.Tensor, num_nodes: int, top_s: int | None = None) -> list[list[int]]:
    """The choice tree of ``num_nodes`` paths that accepts the most drafts on the measured ``ranks``.

    ranks (n, K): the rank of the right token under each head at n positions.  A tree whose
    paths include (r_0, ..., r_d) accepts at least d+1 drafts at a position whose ranks start
    with (r_0, ..., r_d), so the expected accepted length is the sum, over the tree's nodes, of
    the share of positions whose ranks start with that path.  The share never grows along a
    path, so best-first search (always add the frontier path with the largest share) gives the
    best tree of every size.  Unlike Medusa's independence assumption, this uses the heads'
    joint behaviour as measured.
    """
    if ranks.ndim != 2:
        raise ValueError(f"ranks must be (n, K), got shape {tuple(ranks.shape)}")
    n, K = ranks.shape
    top_s = int(ranks.max()) if top_s is None else top_s
    counts: Counter = Counter()
    for row in ranks.tolist():
        for d in range(K):
            if row[d] >= top_s:
                break
            counts[tuple(row[: d + 1])] += 1
    chosen: list[list[int]] = []
    frontier = {p for p in counts if len(p) == 1}
    while frontier and len(chosen) < num_nodes:
        best = min(frontier, key=lambda p: (-counts[p], p))
        frontier.remove(best)
        chosen.append(list(best))
        frontier.update(p for p in counts if len(p) == len(best) + 1 and p[:-1] == best)
    return chosen


def tokens_per_pass(ranks: torch.Tensor, choices: list[list[int]] | None, chain: int = 0) -> float:
    """Mean tokens per target pass (accepted drafts + 1) that a tree (or a top-1 chain of ``chain``
    drafts) would give on measured head ``ranks``, greedy.  Not :func:`specbook.theory.expected_tokens`,
    which is the i.i.d. formula in alpha and gamma."""
    if choices is None:
        ok = (ranks[:, :chain] == 0).long()
        return float(ok.cumprod(-1).sum(-1).float().mean() + 1)
    paths = {tuple(c) for c in choices}
    acc = []
    for row in ranks.tolist():
        d = 0
        while d < len(row) and tuple(row[: d + 1]) in paths:
            d += 1
        acc.append(d)
    return sum(acc) / max(1, len(acc)) + 1


def main(argv: list[str] | None = None) -> None:
    ap = heads_parser("specbook train medusa", __doc__, [
        "--train-prompts", "--heldout-prompts", "--max-new-tokens",
        ("--heads", dict(type=positive_int, default=4, help="number of Medusa heads")), "--draft-vocab", "--epochs",
        ("--batch-size", dict(type=positive_int, default=256, help="positions per step (all processes together)")),
        "--lr", "--time-limit", "--max-steps",
    ], shipped="heads", default_name=DEFAULT_NAME)
    args = parse_heads_args(ap, argv)
    with launched(args.device) as world:
        data = load_heads_data(args, world)
        model, fs, held = data.model, data.fs, data.held
        heads, log = train_medusa(fs, model, data.fit, num_heads=args.heads, vocab=data.vocab, epochs=args.epochs,
                                  batch_size=args.batch_size, lr=args.lr, time_limit_s=args.time_limit,
                                  max_steps=args.max_steps, world=world, checkpoints=checkpoints_from(args))
        if not world.main:
            return
        val_ranks = head_ranks(heads, model, fs, data.val)
        held_ranks = head_ranks(heads, model, held, list(range(held.num_sequences)))
        trees = {str(n): best_choices(val_ranks, n, top_s=10) for n in TREE_SIZES}
        report = {
            "top1_accuracy_heldout": [(held_ranks[:, k] == 0).float().mean().item() for k in range(args.heads)],
            "top5_accuracy_heldout": [(held_ranks[:, k] < 5).float().mean().item() for k in range(args.heads)],
            "tau_chain_heldout": {g: tokens_per_pass(held_ranks, None, g) for g in range(1, args.heads + 1)},
            "tau_tree_heldout": {n: tokens_per_pass(held_ranks, trees[n]) for n in trees},
        }
        training = training_record("specbook.train.medusa", argv, args, data, log, "positions",
                                   processes=world.world_size)
        write_heads(heads, args.out, {"trees": trees, "default_tree": "16", "training": training, "heldout": report})

if __name__ == "__main__":
    main()

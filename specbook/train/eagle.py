"""Train an EAGLE head for SmolLM2-135M on CPU, target frozen (Li et al., EAGLE, 2024, sec. 4.2).

Shape legend: B sequences per batch, L pairs per sequence (padded), D width, Vd draft
vocabulary, k stored top-k labels, U unrolled steps.

    python -m specbook.train.eagle                  # default run (data generation cached), writes
                                                    # specbook/weights/eagle_smollm2-135m.{safetensors,json}
    python -m specbook.train.eagle --help
    torchrun --standalone --nproc_per_node 2 -m specbook.train.eagle ...   # data-parallel, the same run
                                    # (:mod:`specbook.train.distributed`; --checkpoint, --resume)

Pair t of a sequence is (z_t, x_{t+1}) at position t; the head predicts zhat_{t+1}.  Loss
(EAGLE eq. 3-5): a feature regression SmoothL1(zhat_{t+1}, z_{t+1}) plus ``w_cls`` times the
token loss, the cross-entropy of the draft distribution softmax(W_lm zhat_{t+1}) against the
target's own next-token distribution at t+1 (its stored top-k, renormalised on the draft
vocabulary).  Uniform noise on the input features (EAGLE sec. 4.2) makes the head tolerate
its own prediction errors.  ``--w-reg 0`` drops the regression, as EAGLE-3 does: zhat is then
whatever state the LM head reads best, and later drafts feed on that state.

Unrolling (:func:`unroll`): at drafting time the head feeds on its own predictions.  Step j
of the unroll runs every position t at once as the j-th draft after t: input
(zhat^(j-1)_t, x_{t+j+1}), attending to the true pairs up to t and to its own earlier steps.
With ``--unroll 2`` the loss includes the second step (in the spirit of EAGLE-3's
"training-time test"); at validation the unroll measures chain acceptance exactly, because
the data are the target's greedy replies: a chain drafted after t is accepted up to its
first token that differs from the reply.
"""
from __future__ import annotations

import math
import time

import torch
import torch.nn.functional as F
from tqdm.auto import tqdm

from ..cliargs import int_list, nonnegative_float, positive_int
from ..drafters.eagle import EagleConfig, EagleHead, HeadCache
from .distributed import Checkpoints, World, launched, restore, training_state
from .features import FeatureSet, default_root
from .heads_cli import checkpoints_from, heads_parser, load_heads_data, parse_heads_args, training_record, write_heads
from .medusa import target_features, to_draft_ids
from .schedule import warmup_cosine

DEFAULT_NAME = "eagle_smollm2-135m"


def unroll(head: EagleHead, embed, z: torch.Tensor, next_tokens: torch.Tensor, steps: int,
           layers: torch.Tensor | None = None) -> list[torch.Tensor]:
    """Run the head ``steps`` times over every position at once; returns [zhat^(0), ..., zhat^(U-1)].

    z (B, L, D): true features z_0..z_{L-1} (noisy ones in training, :func:`feature_noise`);
    next_tokens (B, L + steps - 1): x_1..x_{L+U-1}.  zhat^(j)[:, t] is the head's guess of
    z_{t+j+1} after j steps of feeding on itself (step 0 is teacher-forced).  layers (B, L, n * D):
    the earlier hidden states of the true pairs, for a head with ``feature_layers`` (step 0 only).
    """
    B, L, D = z.shape
    cache = HeadCache()  # grows by one step of every branch per unroll step
    t = torch.arange(L, device=z.device)
    causal = t[None, :] <= t[:, None]  # (L, L) true pairs up to t
    out, feed = [], z
    for j in range(steps):
        own = torch.eye(L, dtype=torch.bool, device=z.device)  # step i of branch t sees only branch t
        mask = torch.cat([causal] + [own] * j, dim=1)[None]  # (1, L, (j+1) L)
        positions = (t + j).expand(B, L)
        zhat = head(feed, embed(next_tokens[:, j : j + L]), positions, cache, mask,
                    layers if j == 0 else None)  # (B, L, D)
        out.append(zhat)
        feed = zhat
    return out


def feature_noise(z: torch.Tensor, noise: float, generator: torch.Generator, batch: int, rows: range) -> torch.Tensor:
    """z (b, L, D) plus uniform noise of half-width ``noise`` (EAGLE sec. 4.2).  The noise is drawn
    on the CPU for the whole global batch of ``batch`` sequences and ``rows`` of it are kept, so
    the ranks of a data-parallel run add exactly the noise one process would."""
    if not noise:
        return z
    u = torch.rand((batch, *z.shape[1:]), generator=generator)[rows.start : rows.stop]  # (b, L, D)
    return z + (u.to(z.device) * 2 - 1) * noise


def _batch(fs: FeatureSet, model, seqs: list[int], steps: int, vocab: torch.Tensor, length: int | None = None):
    """Padded tensors for sequences ``seqs`` on the model's device: z (B, L, D), next tokens, targets,
    soft labels, masks, L, and the earlier layers' states (B, L, n * D) or None where ``fs`` has
    none.  L: ``length``, or the longest sequence's number of pairs."""
    V, device = model.config.vocab_size, model.lm_head.weight.device
    parts = [fs.sequence(s) for s in seqs]
    L = max(len(p[0]) - 2 for p in parts) if length is None else length
    B, D = len(seqs), fs.hidden.shape[1]
    z = torch.zeros(B, L + steps, D, device=device)
    toks = torch.zeros(B, L + steps, dtype=torch.long)
    lab_ids = torch.full((B, L + steps, fs.topk_ids.shape[1]), -100, dtype=torch.long)
    lab_lp = torch.full((B, L + steps, fs.topk_ids.shape[1]), -math.inf)
    valid = torch.zeros(B, L + steps, dtype=torch.bool)  # position has a true feature
    reply = torch.zeros(B, L + steps, dtype=torch.bool)  # position's next token is part of the reply
    for b, (s, (tok, hid, ti, tl)) in enumerate(zip(seqs, parts)):
        n = len(hid)  # T - 1 features
        z[b, :n] = target_features(model, hid.to(device))
        toks[b, : len(tok) - 1] = tok[1:]
        lab_ids[b, :n] = to_draft_ids(ti, vocab, V)
        lab_lp[b, :n] = tl.float()
        valid[b, :n] = True
        reply[b, max(0, int(fs.prompt_lengths[s]) - 1) : n] = True
    lab_lp = lab_lp.masked_fill(lab_ids < 0, -math.inf)
    on = [t.to(device) for t in (toks, lab_ids.clamp(min=0), lab_lp, valid, reply)]
    layers = None
    if fs.layers is not None:
        layers = torch.zeros(B, L, fs.layers.shape[1], device=device)
        for b, s in enumerate(seqs):
            h = fs.sequence_layers(s)[:L]
            layers[b, : len(h)] = h.to(device)
    return z, *on, L, layers


def _losses(zhats, z, lab_ids, lab_lp, valid, lm, L):
    """Per step: (regression loss, token loss, top-1 agreement, number of positions with a target)."""
    out = []
    for j, zhat in enumerate(zhats):
        tgt = z[:, j + 1 : j + 1 + L]  # z_{t+j+1}
        m = valid[:, j + 1 : j + 1 + L]
        ids, lp = lab_ids[:, j + 1 : j + 1 + L], lab_lp[:, j + 1 : j + 1 + L]
        m = m & torch.isfinite(lp).any(-1)
        if not m.any():
            out.append((zhat.sum() * 0, zhat.sum() * 0, zhat.new_zeros(()), m.sum()))
            continue
        reg = F.smooth_l1_loss(zhat[m], tgt[m])
        logq = (zhat[m] @ lm.T).log_softmax(-1)  # (n, Vd)
        p = lp[m].softmax(-1)  # (n, k) the target's distribution on its top-k, renormalised
        cls = -(p * logq.gather(-1, ids[m])).sum(-1).mean()
        agree = (logq.argmax(-1) == ids[m][:, 0]).float().mean().detach()
        out.append((reg, cls, agree, m.sum()))
    return out


def eagle_loss(head, model, fs: FeatureSet, batch: list[int], vocab: torch.Tensor, lm: torch.Tensor,
               generator: torch.Generator, world: World, *, unroll_steps: int, noise: float, w_cls: float,
               step_weights: tuple[float, ...], w_reg: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
    """This rank's loss on its slice of the global ``batch`` of sequences, and the top-1 agreement
    of each unroll step (U,).  Sequences are padded to the global batch's length so that the
    noise of every rank's rows is one process's; each step's means are scaled by the rank's
    share of the global batch's positions (:meth:`World.share`), so DDP's gradient average is
    the global batch's gradient."""
    rows = world.shard(range(len(batch)))
    L = max(int(fs.starts[s + 1] - fs.starts[s]) - 2 for s in batch)  # the global batch's pairs
    z, toks, ids, lp, valid, _, _, layers = _batch(fs, model, [batch[i] for i in rows], unroll_steps, vocab, length=L)
    zhats = unroll(head, model.embed, feature_noise(z[:, :L], noise, generator, len(batch), rows), toks, unroll_steps,
                   layers)
    per_step = _losses(zhats, z, ids, lp, valid, lm, L)
    shares = world.share(torch.stack([n for *_, n in per_step]))  # (U,), ones in one process
    loss = sum(w * ((w_reg * reg + w_cls * cls) * share)
               for w, (reg, cls, _, _), share in zip(step_weights, per_step, shares))
    return loss, torch.stack([a for _, _, a, _ in per_step]) * shares


def _epoch(lengths: torch.Tensor, batch_sequences: int, generator: torch.Generator) -> list[list[int]]:
    """One epoch's batches (indices into the sequences): similar lengths (less padding), random order."""
    perm = torch.randperm(len(lengths), generator=generator)
    by_len = perm[lengths[perm].argsort(stable=True)].tolist()
    chunks = [by_len[i : i + batch_sequences] for i in range(0, len(by_len), batch_sequences)]
    return [chunks[i] for i in torch.randperm(len(chunks), generator=generator).tolist()]


def train_eagle(fs: FeatureSet, model, seqs: list[int], *, vocab: torch.Tensor, epochs: float = 2.0,
                batch_sequences: int = 8, lr: float = 1e-3, w_cls: float = 0.1, noise: float = 0.1,
                unroll_steps: int = 1, step_weights: tuple[float, ...] | None = None, seed: int = 0,
                intermediate_size: int | None = None, weight_decay: float = 0.0,
                val_seqs: list[int] | None = None, val_gamma: int = 5, progress: bool = True,
                time_limit_s: float | None = None, max_steps: int | None = None, world: World | None = None,
                checkpoints: Checkpoints | None = None, autocast: torch.dtype | None = None,
                feature_layers: tuple[int, ...] = (), w_reg: float = 1.0) -> tuple[EagleHead, dict]:
    """Fit an EAGLE head on sequences ``seqs``, on the device of ``model``; return (head, log).

    With ``val_seqs``, the greedy chain tau (``val_gamma`` drafts) on those sequences is
    measured after every epoch and the best epoch's weights are returned (early stopping:
    a few hundred replies are little data for a head of four million weights).  Training stops
    after ``time_limit_s`` seconds or ``max_steps`` steps (the learning-rate schedule still
    spans ``epochs``), whichever comes first; the step count is the reproducible one.
    ``step_weights``: the loss weight of each unroll step, one per step (default 0.5 ** j for step j).
    ``world`` and ``checkpoints``: data-parallel ranks and checkpoints, as in :func:`train_medusa`.
    ``autocast``: run the training passes' products in this dtype (``torch.bfloat16``) under
    ``torch.autocast``; the weights, the optimizer and validation stay in float32.  On a CPU with
    bfloat16 matrix units (Intel AMX) a step took 1.6x less time (docs/heads.md).
    ``feature_layers``: the head also reads the target's residual stream after these blocks
    (EAGLE-3's fused features; ``fs.layers`` must hold them, :mod:`specbook.train.layer_features`).
    ``w_reg``: the weight of the feature regression (EAGLE: 1; EAGLE-3 drops it, 0: the token loss alone).
    """
    if autocast not in (None, torch.bfloat16, torch.float16):
        raise ValueError(f"autocast must be None, torch.bfloat16 or torch.float16, got {autocast!r}")
    if not (w_reg >= 0 and w_cls >= 0 and w_reg + w_cls > 0):
        raise ValueError(f"w_reg and w_cls must be >= 0 and not both 0, got {w_reg}, {w_cls}")
    if epochs <= 0 or batch_sequences < 1 or unroll_steps < 1:
        raise ValueError(f"need epochs > 0, batch_sequences >= 1, unroll_steps >= 1; got {epochs}, "
                         f"{batch_sequences}, {unroll_steps}")
    step_weights = tuple(0.5**j for j in range(unroll_steps)) if step_weights is None else tuple(step_weights)
    if len(step_weights) != unroll_steps or any(not w >= 0 for w in step_weights):
        raise ValueError(f"step_weights needs one weight >= 0 per unroll step ({unroll_steps}), got {step_weights}")
    world = world or World()
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the head's initial weights (nn.Linear draws from the global generator)
    device = model.lm_head.weight.device
    if bool(feature_layers) != (fs.layers is not None):
        raise ValueError(f"feature_layers {tuple(feature_layers)} and the data's earlier layers "
                         f"({'present' if fs.layers is not None else 'absent'}) must come together")
    head = EagleHead(EagleConfig.for_target(model.config, len(vocab), intermediate_size, feature_layers),
                     vocab).to(device)
    lm = model.lm_head.weight[vocab.to(device)].detach().float()
    steps = max(1, math.ceil(epochs * len(seqs) / batch_sequences))
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    warmup = min(20, steps // 10 + 1)
    sched = warmup_cosine(opt, steps, warmup)
    lengths = torch.tensor([int(fs.starts[s + 1] - fs.starts[s]) for s in seqs])
    log = {"steps": steps, "pairs": int((lengths - 2).clamp(min=0).sum()), "loss": [], "validation": []}
    best, order, first, seconds = (-1.0, None), [], 0, 0.0
    epoch_steps = math.ceil(len(seqs) / batch_sequences)
    run = {"trainer": "eagle", "sequences": len(seqs), "steps": steps, "batch_sequences": batch_sequences, "lr": lr,
           "seed": seed, "unroll_steps": unroll_steps, "noise": noise, "w_cls": w_cls, "weight_decay": weight_decay,
           "draft_vocab": len(vocab), **({"feature_layers": list(feature_layers)} if feature_layers else {}),
           **({"w_reg": w_reg} if w_reg != 1.0 else {}),
           **({"autocast": str(autocast).removeprefix("torch.")} if autocast else {})}  # older checkpoints resume
    if checkpoints is not None and checkpoints.resume:
        first, loop = restore(checkpoints, head, opt, sched, gen, run)
        order, log, seconds, best = loop["order"], loop["log"], loop["seconds"], tuple(loop["best"])
    trained, t0 = world.wrap(head), time.perf_counter()
    bar = tqdm(range(first, steps), disable=not (progress and world.main), desc="eagle head")
    for step in bar:
        order = order or _epoch(lengths, batch_sequences, gen)
        with torch.autocast(device.type, dtype=autocast or torch.bfloat16, enabled=autocast is not None):
            loss, agree = eagle_loss(trained, model, fs, [seqs[i] for i in order.pop()], vocab, lm, gen, world,
                                     unroll_steps=unroll_steps, noise=noise, w_cls=w_cls, step_weights=step_weights,
                                     w_reg=w_reg)
        opt.zero_grad()
        loss.backward()  # DDP averages the ranks' gradients here
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        shown = world.mean(torch.cat([loss.detach()[None], agree])).tolist()  # the global batch's
        log["loss"].append((step, shown[0], shown[1:]))
        bar.set_postfix(loss=f"{shown[0]:.3f}", top1=f"{shown[1]:.2f}")
        stop = ((time_limit_s is not None and world.any(time.perf_counter() - t0 > time_limit_s))
                or (max_steps is not None and step + 1 >= max_steps))
        epoch_end = (step + 1) % epoch_steps == 0 or step + 1 == steps
        if val_seqs and epoch_end:
            best = _validate(head, model, fs, val_seqs, val_gamma, step + 1, log, best, world)
        if checkpoints is not None and checkpoints.due(step + 1, stopping=stop):
            checkpoints.save(world, training_state(step + 1, head, opt, sched, gen, run, order=order, log=log,
                                                   best=list(best), seconds=seconds + time.perf_counter() - t0))
        if stop:
            if val_seqs and not epoch_end:
                best = _validate(head, model, fs, val_seqs, val_gamma, step + 1, log, best, world)
            log["stopped_early_at_step"] = step + 1
            break
    log["train_seconds"] = seconds + time.perf_counter() - t0
    if best[1] is not None:
        head.load_state_dict(best[1])
        log["best_validation_tau"] = best[0]
    return head.eval(), log


def _validate(head: EagleHead, model, fs: FeatureSet, val_seqs: list[int], gamma: int, steps_done: int, log: dict,
              best: tuple, world: World) -> tuple:
    """Score the chain tau on ``val_seqs`` (sharded over the ranks, who all get the same figure),
    record it in ``log`` and return the (tau, weights) of the best so far."""
    head.eval()
    tau = chain_tau(chain_acceptance(head, model, fs, val_seqs, gamma=gamma, world=world), gamma)
    head.train()
    log["validation"].append((steps_done, round(tau, 4)))
    if world.main:
        tqdm.write(f"step {steps_done}: validation chain tau ({gamma} drafts) {tau:.3f}")
    if tau > best[0]:
        return tau, {k: v.clone() for k, v in head.state_dict().items()}
    return best


@torch.no_grad()
def chain_acceptance(head: EagleHead, model, fs: FeatureSet, seqs: list[int], gamma: int = 6,
                     batch_sequences: int = 8, world: World | None = None) -> torch.Tensor:
    """(gamma + 1,) share of reply positions whose greedy chain of drafts is accepted for at least
    0..gamma tokens; tau_chain(g) = sum of the first g+1 entries... see :func:`chain_tau`.
    With ``world``, each rank scores its slice of ``seqs`` and all get the summed counts."""
    world = world or World()
    vocab, V = head.vocab, model.config.vocab_size
    lm = model.lm_head.weight[vocab].float()
    counts = torch.zeros(gamma + 1, device=lm.device)
    seqs = world.shard(seqs)
    for i in range(0, len(seqs), batch_sequences):
        batch = seqs[i : i + batch_sequences]
        z, toks, _, _, valid, reply, L, layers = _batch(fs, model, batch, gamma + 1, vocab)
        zhats = unroll(head, model.embed, z[:, :L], toks, gamma, layers)
        truth = to_draft_ids(toks, vocab, V)  # toks[:, m] = x_{m+1}
        ok = torch.ones(len(batch), L, dtype=torch.bool, device=lm.device)
        # branch t drafts x_{t+2}, x_{t+3}, ...; count it where x_{t+2} is a reply token
        branch = reply[:, 1 : 1 + L] & valid[:, 1 : 1 + L]
        counts[0] += branch.sum()
        for j, zhat in enumerate(zhats):
            pred = (zhat @ lm.T).argmax(-1)  # (B, L) guess of x_{t+j+2}
            ok &= (pred == truth[:, j + 1 : j + 1 + L]) & (truth[:, j + 1 : j + 1 + L] >= 0) & valid[:, j + 1 : j + 1 + L]
            counts[j + 1] += (ok & branch).sum()
    counts = world.sum(counts)
    return (counts / counts[0]).cpu()


def chain_tau(survival: torch.Tensor, gamma: int) -> float:
    """Mean tokens per pass of a greedy chain of ``gamma`` drafts: 1 + sum_j P(first j accepted)."""
    return float(survival[1 : gamma + 1].sum() + 1)


def main(argv: list[str] | None = None) -> None:
    ap = heads_parser("specbook train eagle", __doc__, [
        "--train-prompts", "--heldout-prompts", "--max-new-tokens", "--draft-vocab", "--epochs",
        ("--batch-sequences", dict(type=positive_int, default=8, help="sequences per step (all processes together)")),
        "--lr", ("--w-cls", dict(type=nonnegative_float, default=0.5, help="weight of the token loss (EAGLE: 0.1)")),
        ("--w-reg", dict(type=nonnegative_float, default=1.0,
                         help="weight of the feature regression (EAGLE: 1; EAGLE-3 trains on the token loss alone: 0)")),
        ("--noise", dict(type=nonnegative_float, default=0.1, help="half-width of the uniform feature noise")),
        ("--unroll", dict(type=positive_int, default=2,
                          help="training steps of the head feeding on itself (step j weighs 0.5 ** j in the loss)")),
        ("--weight-decay", dict(type=nonnegative_float, default=0.01, help="AdamW weight decay")),
        ("--autocast", dict(choices=("none", "bfloat16"), default="none",
                            help="the training passes' products in bfloat16 (torch.autocast; weights and "
                                 "optimizer stay float32): 1.6x faster a step on a 2-core CPU with AMX")),
        ("--feature-layers", dict(type=int_list, default=(),
                                  help="also read the target's residual stream after these blocks, e.g. 2,15 "
                                       "(EAGLE-3's fused features; recomputed once and cached beside the replies)")),
        "--time-limit",
        "--max-steps",
    ], shipped="head", default_name=DEFAULT_NAME)
    args = parse_heads_args(ap, argv)
    with launched(args.device) as world:
        data = load_heads_data(args, world)
        model, fs, held, fit, val = data.model, data.fs, data.held, data.fit, data.val
        if args.feature_layers:
            from .layer_features import layer_features

            with world.main_first():  # rank 0 computes and caches them, the others read the file
                for f in (fs, held):
                    f.layers = layer_features(f, model, args.feature_layers, progress=world.main,
                                              cache_dir=default_root(args.max_new_tokens))
        head, log = train_eagle(fs, model, fit, vocab=data.vocab, epochs=args.epochs,
                                batch_sequences=args.batch_sequences, lr=args.lr, w_cls=args.w_cls, noise=args.noise,
                                unroll_steps=args.unroll, weight_decay=args.weight_decay, val_seqs=val,
                                time_limit_s=args.time_limit, max_steps=args.max_steps, world=world,
                                checkpoints=checkpoints_from(args),
                                autocast=None if args.autocast == "none" else torch.bfloat16,
                                feature_layers=args.feature_layers, w_reg=args.w_reg)
        if not world.main:
            return
        surv_val = chain_acceptance(head, model, fs, val)
        surv_held = chain_acceptance(head, model, held, list(range(held.num_sequences)))
        report = {
            "chain_survival_heldout": [round(x, 4) for x in surv_held.tolist()],
            "tau_chain_heldout": {g: round(chain_tau(surv_held, g), 3) for g in range(1, len(surv_held))},
            "tau_chain_validation": {g: round(chain_tau(surv_val, g), 3) for g in range(1, len(surv_val))},
        }
        training = training_record("specbook.train.eagle", argv, args, data, log, "pairs",
                                   validation_tau_per_epoch=log["validation"], processes=world.world_size)
        write_heads(head, args.out, {"default_tree": {"depth": 6, "top_k": 4, "num_nodes": 24},
                                     "training": training, "heldout": report})

if __name__ == "__main__":
    main()

"""Train an EAGLE head for SmolLM2-135M on CPU, target frozen (Li et al., EAGLE, 2024, sec. 4.2).

Shape legend: B sequences per batch, L pairs per sequence (padded), D width, Vd draft
vocabulary, k stored top-k labels, U unrolled steps.

    python -m specbook.train.eagle                  # default run (data generation cached), writes
                                                    # specbook/weights/eagle_smollm2-135m.{safetensors,json}
    python -m specbook.train.eagle --help

Pair t of a sequence is (z_t, x_{t+1}) at position t; the head predicts zhat_{t+1}.  Loss
(EAGLE eq. 3-5): a feature regression SmoothL1(zhat_{t+1}, z_{t+1}) plus ``w_cls`` times the
token loss, the cross-entropy of the draft distribution softmax(W_lm zhat_{t+1}) against the
target's own next-token distribution at t+1 (its stored top-k, renormalised on the draft
vocabulary).  Uniform noise on the input features (EAGLE sec. 4.2) makes the head tolerate
its own prediction errors.

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

from ..cliargs import nonnegative_float, positive_int
from ..drafters.eagle import EagleConfig, EagleHead, HeadCache
from .features import FeatureSet
from .heads_cli import heads_parser, load_heads_data, training_record, write_heads
from .medusa import target_features, to_draft_ids
from .schedule import warmup_cosine

DEFAULT_NAME = "eagle_smollm2-135m"


def unroll(head: EagleHead, embed, z: torch.Tensor, next_tokens: torch.Tensor, steps: int,
           noise: float = 0.0, generator: torch.Generator | None = None) -> list[torch.Tensor]:
    """Run the head ``steps`` times over every position at once; returns [zhat^(0), ..., zhat^(U-1)].

    z (B, L, D): true features z_0..z_{L-1}; next_tokens (B, L + steps - 1): x_1..x_{L+U-1}.
    zhat^(j)[:, t] is the head's guess of z_{t+j+1} after j steps of feeding on itself
    (step 0 is teacher-forced).  ``noise``: half-width of the uniform noise on true features.
    """
    B, L, D = z.shape
    if noise:
        z = z + (torch.rand(z.shape, generator=generator, device=z.device) * 2 - 1) * noise
    cache = HeadCache()  # grows by one step of every branch per unroll step
    t = torch.arange(L, device=z.device)
    causal = t[None, :] <= t[:, None]  # (L, L) true pairs up to t
    out, feed = [], z
    for j in range(steps):
        own = torch.eye(L, dtype=torch.bool, device=z.device)  # step i of branch t sees only branch t
        mask = torch.cat([causal] + [own] * j, dim=1)[None]  # (1, L, (j+1) L)
        positions = (t + j).expand(B, L)
        zhat = head(feed, embed(next_tokens[:, j : j + L]), positions, cache, mask)  # (B, L, D)
        out.append(zhat)
        feed = zhat
    return out


def _batch(fs: FeatureSet, model, seqs: list[int], steps: int, vocab: torch.Tensor):
    """Padded tensors for sequences ``seqs``: z (B, L, D), next tokens, targets, soft labels, masks."""
    V = model.config.vocab_size
    parts = [fs.sequence(s) for s in seqs]
    L = max(len(p[0]) - 2 for p in parts)
    B, D = len(seqs), fs.hidden.shape[1]
    z = torch.zeros(B, L + steps, D)
    toks = torch.zeros(B, L + steps, dtype=torch.long)
    lab_ids = torch.full((B, L + steps, fs.topk_ids.shape[1]), -100, dtype=torch.long)
    lab_lp = torch.full((B, L + steps, fs.topk_ids.shape[1]), -math.inf)
    valid = torch.zeros(B, L + steps, dtype=torch.bool)  # position has a true feature
    reply = torch.zeros(B, L + steps, dtype=torch.bool)  # position's next token is part of the reply
    for b, (s, (tok, hid, ti, tl)) in enumerate(zip(seqs, parts)):
        n = len(hid)  # T - 1 features
        z[b, :n] = target_features(model, hid)
        toks[b, : len(tok) - 1] = tok[1:]
        lab_ids[b, :n] = to_draft_ids(ti, vocab, V)
        lab_lp[b, :n] = tl.float()
        valid[b, :n] = True
        reply[b, max(0, int(fs.prompt_lengths[s]) - 1) : n] = True
    lab_lp = lab_lp.masked_fill(lab_ids < 0, -math.inf)
    return z, toks, lab_ids.clamp(min=0), lab_lp, valid, reply, L


def _losses(zhats, z, lab_ids, lab_lp, valid, lm, L):
    """Per step: (regression loss, token loss, top-1 agreement) over positions with a target."""
    out = []
    for j, zhat in enumerate(zhats):
        tgt = z[:, j + 1 : j + 1 + L]  # z_{t+j+1}
        m = valid[:, j + 1 : j + 1 + L]
        ids, lp = lab_ids[:, j + 1 : j + 1 + L], lab_lp[:, j + 1 : j + 1 + L]
        m = m & torch.isfinite(lp).any(-1)
        if not m.any():
            out.append((zhat.sum() * 0, zhat.sum() * 0, 0.0))
            continue
        reg = F.smooth_l1_loss(zhat[m], tgt[m])
        logq = (zhat[m] @ lm.T).log_softmax(-1)  # (n, Vd)
        p = lp[m].softmax(-1)  # (n, k) the target's distribution on its top-k, renormalised
        cls = -(p * logq.gather(-1, ids[m])).sum(-1).mean()
        agree = (logq.argmax(-1) == ids[m][:, 0]).float().mean().item()
        out.append((reg, cls, agree))
    return out


def train_eagle(fs: FeatureSet, model, seqs: list[int], *, vocab: torch.Tensor, epochs: float = 2.0,
                batch_sequences: int = 8, lr: float = 1e-3, w_cls: float = 0.1, noise: float = 0.1,
                unroll_steps: int = 1, step_weights: tuple[float, ...] = (1.0, 0.5, 0.25), seed: int = 0,
                intermediate_size: int | None = None, weight_decay: float = 0.0,
                val_seqs: list[int] | None = None, val_gamma: int = 5, progress: bool = True,
                time_limit_s: float | None = None, max_steps: int | None = None) -> tuple[EagleHead, dict]:
    """Fit an EAGLE head on sequences ``seqs``; return (head, log).

    With ``val_seqs``, the greedy chain tau (``val_gamma`` drafts) on those sequences is
    measured after every epoch and the best epoch's weights are returned (early stopping:
    a few hundred replies are little data for a head of four million weights).  Training stops
    after ``time_limit_s`` seconds or ``max_steps`` steps (the learning-rate schedule still
    spans ``epochs``), whichever comes first; the step count is the reproducible one.
    """
    if epochs <= 0 or batch_sequences < 1 or unroll_steps < 1:
        raise ValueError(f"need epochs > 0, batch_sequences >= 1, unroll_steps >= 1; got {epochs}, "
                         f"{batch_sequences}, {unroll_steps}")
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)  # the head's initial weights (nn.Linear draws from the global generator)
    head = EagleHead(EagleConfig.for_target(model.config, len(vocab), intermediate_size), vocab)
    lm = model.lm_head.weight[vocab].detach().float()
    steps = max(1, math.ceil(epochs * len(seqs) / batch_sequences))
    opt = torch.optim.AdamW(head.parameters(), lr=lr, weight_decay=weight_decay, betas=(0.9, 0.95))
    warmup = min(20, steps // 10 + 1)
    sched = warmup_cosine(opt, steps, warmup)
    lengths = torch.tensor([int(fs.starts[s + 1] - fs.starts[s]) for s in seqs])
    log = {"steps": steps, "pairs": int((lengths - 2).clamp(min=0).sum()), "loss": [], "validation": []}
    best = (-1.0, None)
    epoch_steps = math.ceil(len(seqs) / batch_sequences)
    t0 = time.perf_counter()
    bar = tqdm(range(steps), disable=not progress, desc="eagle head")
    order: list[int] = []
    for step in bar:
        if not order:
            # batches of similar lengths (less padding), in random order
            perm = torch.randperm(len(seqs), generator=gen)
            by_len = perm[lengths[perm].argsort(stable=True)].tolist()
            chunks = [by_len[i : i + batch_sequences] for i in range(0, len(by_len), batch_sequences)]
            order = [chunks[i] for i in torch.randperm(len(chunks), generator=gen).tolist()]
        batch = [seqs[i] for i in order.pop()]
        z, toks, ids, lp, valid, _, L = _batch(fs, model, batch, unroll_steps, vocab)
        zhats = unroll(head, model.embed, z[:, :L], toks, unroll_steps, noise, gen)
        per_step = _losses(zhats, z, ids, lp, valid, lm, L)
        loss = sum(w * (reg + w_cls * cls) for w, (reg, cls, _) in zip(step_weights, per_step))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(head.parameters(), 1.0)
        opt.step()
        sched.step()
        log["loss"].append((step, float(loss.detach()), [a for _, _, a in per_step]))
        bar.set_postfix(loss=f"{float(loss.detach()):.3f}", top1=f"{per_step[0][2]:.2f}")
        out_of_time = ((time_limit_s is not None and time.perf_counter() - t0 > time_limit_s)
                       or (max_steps is not None and step + 1 >= max_steps))
        if val_seqs and ((step + 1) % epoch_steps == 0 or step + 1 == steps or out_of_time):
            head.eval()
            tau = chain_tau(chain_acceptance(head, model, fs, val_seqs, gamma=val_gamma), val_gamma)
            head.train()
            log["validation"].append((step + 1, round(tau, 4)))
            if tau > best[0]:
                best = (tau, {k: v.clone() for k, v in head.state_dict().items()})
            bar.write(f"step {step + 1}: validation chain tau ({val_gamma} drafts) {tau:.3f}")
        if out_of_time:
            log["stopped_early_at_step"] = step + 1
            break
    log["train_seconds"] = time.perf_counter() - t0
    if best[1] is not None:
        head.load_state_dict(best[1])
        log["best_validation_tau"] = best[0]
    return head.eval(), log


@torch.no_grad()
def chain_acceptance(head: EagleHead, model, fs: FeatureSet, seqs: list[int], gamma: int = 6,
                     batch_sequences: int = 8) -> torch.Tensor:
    """(gamma + 1,) share of reply positions whose greedy chain of drafts is accepted for at least
    0..gamma tokens; tau_chain(g) = sum of the first g+1 entries... see :func:`chain_tau`."""
    vocab, V = head.vocab, model.config.vocab_size
    lm = model.lm_head.weight[vocab].float()
    counts = torch.zeros(gamma + 1)
    for i in range(0, len(seqs), batch_sequences):
        batch = seqs[i : i + batch_sequences]
        z, toks, _, _, valid, reply, L = _batch(fs, model, batch, gamma + 1, vocab)
        zhats = unroll(head, model.embed, z[:, :L], toks, gamma)
        truth = to_draft_ids(toks, vocab, V)  # toks[:, m] = x_{m+1}
        ok = torch.ones(len(batch), L, dtype=torch.bool)
        # branch t drafts x_{t+2}, x_{t+3}, ...; count it where x_{t+2} is a reply token
        branch = reply[:, 1 : 1 + L] & valid[:, 1 : 1 + L]
        counts[0] += branch.sum()
        for j, zhat in enumerate(zhats):
            pred = (zhat @ lm.T).argmax(-1)  # (B, L) guess of x_{t+j+2}
            ok &= (pred == truth[:, j + 1 : j + 1 + L]) & (truth[:, j + 1 : j + 1 + L] >= 0) & valid[:, j + 1 : j + 1 + L]
            counts[j + 1] += (ok & branch).sum()
    return counts / counts[0]


def chain_tau(survival: torch.Tensor, gamma: int) -> float:
    """Mean tokens per pass of a greedy chain of ``gamma`` drafts: 1 + sum_j P(first j accepted)."""
    return float(survival[1 : gamma + 1].sum() + 1)


def main(argv: list[str] | None = None) -> None:
    ap = heads_parser("specbook train eagle", __doc__, [
        "--train-prompts", "--heldout-prompts", "--max-new-tokens", "--draft-vocab", "--epochs",
        ("--batch-sequences", dict(type=positive_int, default=8, help="sequences per step")), "--lr",
        ("--w-cls", dict(type=nonnegative_float, default=0.5, help="weight of the token loss (EAGLE: 0.1)")),
        ("--noise", dict(type=nonnegative_float, default=0.1, help="half-width of the uniform feature noise")),
        ("--unroll", dict(type=positive_int, default=2, help="training steps of the head feeding on itself")),
        ("--weight-decay", dict(type=nonnegative_float, default=0.01, help="AdamW weight decay")), "--time-limit",
        ("--max-steps", dict(type=positive_int, default=None,
                             help="stop training after this many steps (the schedule still spans --epochs)")),
    ], shipped="head", default_name=DEFAULT_NAME)
    args = ap.parse_args(argv)

    data = load_heads_data(args)
    model, fs, held, fit, val = data.model, data.fs, data.held, data.fit, data.val
    head, log = train_eagle(fs, model, fit, vocab=data.vocab, epochs=args.epochs,
                            batch_sequences=args.batch_sequences, lr=args.lr, w_cls=args.w_cls, noise=args.noise,
                            unroll_steps=args.unroll, weight_decay=args.weight_decay, val_seqs=val,
                            time_limit_s=args.time_limit, max_steps=args.max_steps)
    surv_val = chain_acceptance(head, model, fs, val)
    surv_held = chain_acceptance(head, model, held, list(range(held.num_sequences)))
    report = {
        "chain_survival_heldout": [round(x, 4) for x in surv_held.tolist()],
        "tau_chain_heldout": {g: round(chain_tau(surv_held, g), 3) for g in range(1, len(surv_held))},
        "tau_chain_validation": {g: round(chain_tau(surv_val, g), 3) for g in range(1, len(surv_val))},
    }
    training = training_record("specbook.train.eagle", argv, args, data, log, "pairs",
                               validation_tau_per_epoch=log["validation"])
    write_heads(head, args.out, {"default_tree": {"depth": 6, "top_k": 4, "num_nodes": 24},
                                 "training": training, "heldout": report})

if __name__ == "__main__":
    main()

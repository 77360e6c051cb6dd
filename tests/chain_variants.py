"""A configurable chain verifier whose defaults equal specbook.verify.verify_chain draw for draw.

Each keyword switches on one bug that real implementations shipped (see DESIGN.md's
pitfalls); the statistical tests use them as *broken twins* that must be caught.
"""
from __future__ import annotations

import torch

from specbook.sampling import sample
from specbook.verify import residual


def chain_verifier(*, accept="min(1,p/q)", resample="residual", bonus_offset=0, stop_at_first=True,
                   shared_uniform=False, target_shift=0):
    def verify(target_probs, draft_probs, draft_tokens, generator=None):
        B, K1, V = target_probs.shape
        K = K1 - 1
        p = target_probs.to(torch.float64)
        q = torch.nn.functional.one_hot(draft_tokens, V).double() if draft_probs is None else draft_probs.double()
        judge = p[:, target_shift : target_shift + K] if K else p[:, :0]  # target_shift=1: off by one
        if judge.shape[1] < K:
            judge = torch.cat([judge, p[:, -1:].expand(B, K - judge.shape[1], V)], 1)
        p_x = judge.gather(-1, draft_tokens[..., None]).squeeze(-1)
        q_x = q.gather(-1, draft_tokens[..., None]).squeeze(-1)
        u = torch.rand((B, 1 if shared_uniform else K), generator=generator, dtype=torch.float64).expand(B, K)
        if accept == "min(1,p/q)":
            ok = u * q_x < p_x
        elif accept == "p(x)":
            ok = u < p_x
        elif accept == "p>=q":
            ok = p_x >= q_x
        else:
            raise ValueError(accept)
        n_acc = ok.long().cumprod(-1).sum(-1) if stop_at_first else ok.long().sum(-1)
        q_pad = torch.cat([q, q.new_zeros(B, 1, V)], 1)  # (B, K+1, V)
        rows = torch.arange(B)
        pos = torch.where(n_acc == K, K + bonus_offset, n_acc).clamp(0, K)  # where the last token's p is read
        if resample == "residual":
            dist = residual(p[rows, pos], q_pad[rows, n_acc])
        elif resample == "p":
            dist = p[rows, pos]
        elif resample == "q-p":  # the two sides of the residual swapped (the bonus is left right)
            dist = torch.where((n_acc < K)[:, None], residual(q_pad[rows, n_acc], p[rows, pos]), p[rows, pos])
        else:
            raise ValueError(resample)
        last = sample(dist, generator)
        if stop_at_first:
            kept = [draft_tokens[b, : n_acc[b]].tolist() for b in range(B)]
        else:  # keeps every individually accepted draft, skipping rejected ones
            kept = [draft_tokens[b][ok[b]].tolist() for b in range(B)]
        tokens = torch.full((B, K1), -1, dtype=torch.long)
        for b in range(B):
            row = kept[b] + [int(last[b])]
            tokens[b, : len(row)] = torch.tensor(row)
        return tokens, n_acc + 1

    return verify


BROKEN_TWINS = {
    "resample from p, not the residual": dict(resample="p"),
    "residual max(0, q - p) (sides swapped)": dict(resample="q-p"),
    "bonus token from position K-1": dict(bonus_offset=-1),
    "no stop at the first rejection": dict(stop_at_first=False),
    "one uniform shared by all positions": dict(shared_uniform=True),
    "target position off by one": dict(target_shift=1),
    "naive: accept w.p. p(x), resample from p": dict(accept="p(x)", resample="p"),
    "naive: accept iff p(x) >= q(x)": dict(accept="p>=q"),
}

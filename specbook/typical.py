"""Medusa's typical acceptance: a tree verifier that is lossy by design, kept as the baseline it is
in the literature (lesson 5 shows it failing the equivalence test next to the lossless rule).

Shape legend: B batch, N tree nodes, V vocab, D longest root-to-leaf path.

Same conventions as :mod:`specbook.verify_tree`: ``target_probs`` (B, N+1, V) holds the root's law
and the law after each node, ``parents`` (N,) the tree; the result is ``(tokens, num_emitted, path)``.
"""
from __future__ import annotations

import math

import torch

from .sampling import sample
from .tree import depths, max_path_length
from .validate import check_block
from .verify import emit, work_dtype


def typical_acceptance(
    target_probs: torch.Tensor,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
    epsilon: float = 0.09,
    delta: float = 0.3,
    generator: torch.Generator | None = None,
    final: str = "sample",
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Medusa's typical acceptance (Cai et al. 2024, arXiv:2401.10774, sec. 2.3.1): LOSSY by design.

    The exact rule implemented here:

    1. a node with token x whose parent position has target law p is *typical* iff
       ``p(x) > min(epsilon, delta * exp(-H(p)))``, H the entropy in nats (0 log 0 = 0);
       defaults epsilon = 0.09, delta = 0.3 are the Medusa code's ``posterior_threshold`` and
       ``posterior_alpha``;
    2. a node is accepted iff it and all its ancestors are typical; the accepted path ends at
       the deepest accepted node, ties broken by the largest path log-likelihood
       sum log p(x) (as the Medusa code does), then by the smallest node index;
    3. one more token is emitted from the target's law after the path: sampled
       (``final="sample"``, the default) or its argmax (``final="greedy"``, the paper's choice
       for the token the base model contributes each step).

    Acceptance ignores the draft's distribution and is a deterministic function of p, so the
    output is biased towards whatever the heads proposed (and, at any temperature, against
    the low-probability tokens that fall under the threshold).  ``draft_probs`` are not needed.
    Returns ``(tokens, num_emitted, path)`` like :func:`verify_tree`.
    """
    check_block(target_probs, None, draft_tokens, parents)
    for name, val in (("epsilon", epsilon), ("delta", delta)):
        if not isinstance(val, (int, float)) or isinstance(val, bool) or not math.isfinite(val) or val < 0:
            raise ValueError(f"{name} must be a finite number >= 0, got {val!r}")
    if final not in ("sample", "greedy"):
        raise ValueError(f"final must be 'sample' or 'greedy', got {final!r}")
    B, N1, V = target_probs.shape
    N = N1 - 1
    device = target_probs.device
    dtype = work_dtype(target_probs)
    p_all = target_probs.to(dtype)  # (B, N+1, V)
    x_all = draft_tokens.long()  # (B, N)
    entropy = torch.special.entr(p_all).sum(-1)  # (B, N+1)
    threshold = torch.clamp(delta * torch.exp(-entropy), max=epsilon)  # (B, N+1)
    plist = parents.tolist()
    parent_slot = torch.tensor([par + 1 for par in plist], dtype=torch.long, device=device)  # (N,)
    p_x = p_all[:, parent_slot].gather(-1, x_all[..., None]).squeeze(-1) if N else p_all[:, :0, 0]  # (B, N)
    typical = p_x > threshold[:, parent_slot]  # (B, N)

    accepted = torch.zeros(B, N, dtype=torch.bool, device=device)
    loglik = torch.zeros(B, N, dtype=dtype, device=device)
    for i, par in enumerate(plist):  # topological order: parents first
        above = accepted[:, par] if par >= 0 else torch.ones(B, dtype=torch.bool, device=device)
        accepted[:, i] = typical[:, i] & above
        loglik[:, i] = p_x[:, i].log() + (loglik[:, par] if par >= 0 else 0)
    length = (depths(parents).to(device) + 1).expand(B, N)  # (B, N) path length ending at each node
    num_accepted = torch.where(accepted, length, 0).amax(-1) if N else torch.zeros(B, dtype=torch.long, device=device)
    best = accepted & (length == num_accepted[:, None])  # (B, N)
    end = torch.where(best, loglik, -math.inf).argmax(-1) if N else num_accepted  # (B,) first max
    end = torch.where(num_accepted > 0, end, -1)  # -1: nothing accepted, stay at the root

    table = torch.full((N + 1, max_path_length(parents)), -1, dtype=torch.long)
    for i in range(N):  # table[i + 1] = root-to-node path of node i, -1 padded
        node, chain = i, []
        while node >= 0:
            chain.append(node)
            node = plist[node]
        table[i + 1, : len(chain)] = torch.tensor(chain[::-1])
    path = table.to(device)[end + 1]  # (B, D)
    last_law = p_all[torch.arange(B, device=device), end + 1]  # (B, V)
    last = last_law.argmax(-1) if final == "greedy" else sample(last_law, generator)
    path_tokens = torch.where(path >= 0, x_all.gather(1, path.clamp_min(0)), -1)  # (B, D)
    tokens, num_emitted = emit(path_tokens, num_accepted, last)
    return tokens, num_emitted, path

"""Tree verification: one target pass scores every node; walk down the tree accepting one child per level.

Shape legend: B batch, N tree nodes, V vocab, D longest root-to-leaf path, C most children of a node.

``parents`` (N,): topological order, -1 = child of the root (the pending token).  ``target_probs``
(B, N+1, V): the law at the root, then after each node.  ``draft_probs`` (B, N, V) or None: the law
each node was drawn from (None: deterministic candidates, e.g. top-k lists).  Every verifier
returns ``tokens`` (B, D+1) (the accepted path, one corrected or bonus token, then -1),
``num_emitted`` (B,) and ``path`` (B, D), the accepted nodes root first, -1 padded.

The lossless rule is multi-candidate rejection sampling (Miao et al., SpecInfer, ASPLOS 2024;
Yang et al., arXiv:2401.06706).  At a node with target law p and children c_1, c_2, ...:

    for each child c_j (token x_j drawn from q_j):
        accept c_j with probability min(1, p(x_j) / q_j(x_j)) -> move to c_j, start over there
        on rejection: p <- max(0, p - q_j) / sum(max(0, p - q_j))      (the residual)
    no child accepted (or a leaf): emit one token from the current p and stop.

After sibling j is rejected the next sibling is an independent draw, so the one-position proof
applies again to (residual, q_{j+1}); by induction the block is a sample from the target (exactly:
:mod:`specbook.tree_laws`).  With q_j one-hot the rule samples the top-k without replacement; a q
row reported for candidates that were not independent draws from it biases the output (tested).
``verify_*`` check their arguments; ``accept_*`` run on checked inputs, as the decode loop calls
them.  Medusa's lossy typical acceptance: :mod:`specbook.typical`.
"""
from __future__ import annotations

import torch

from .sampling import sample
from .tree import check_parents, children, depths
from .validate import check_block
from .verify import emit, residual, work_dtype

def child_table(parents: torch.Tensor) -> torch.Tensor:
    """(N+1, C) long: row 0 lists the root's children, row i+1 node i's, in node order, -1 padded."""
    N = len(check_parents(parents))
    kids = children(parents)
    slots = [kids[N]] + kids[:N]  # slot 0 = root, slot i+1 = node i
    table = torch.full((N + 1, max(len(k) for k in slots)), -1, dtype=torch.long)
    for s, k in enumerate(slots):
        table[s, : len(k)] = torch.tensor(k, dtype=torch.long)
    return table.to(parents.device)


def keep_indices(path: torch.Tensor, num_emitted: torch.Tensor) -> list[list[int]]:
    """What ``Target.keep`` needs after a tree pass over ``[pending] + draft_tokens``: per row,
    the root (index 0) and the accepted nodes shifted by one."""
    return [[0] + [i + 1 for i in row[: n - 1]] for row, n in zip(path.tolist(), num_emitted.tolist())]


def _path_tokens(x: torch.Tensor, path: torch.Tensor) -> torch.Tensor:
    """(B, D) the tokens of the accepted nodes, -1 past the path's end."""
    return torch.where(path >= 0, x.gather(1, path.clamp_min(0)), -1)


def accept_tree(target_probs, draft_probs, draft_tokens, parents, generator=None):
    """:func:`verify_tree` on inputs already checked."""
    B, V, device = target_probs.shape[0], target_probs.shape[-1], target_probs.device
    dtype = work_dtype(target_probs, draft_probs)
    p_all = target_probs.to(dtype)  # (B, N+1, V)
    q_all = None if draft_probs is None else draft_probs.to(dtype)  # (B, N, V)
    x_all = draft_tokens.long()  # (B, N)
    kids = child_table(parents.to(device))  # (N+1, C)
    D = int(depths(parents).max()) + 1 if len(parents) else 0
    rows = torch.arange(B, device=device)
    u = torch.rand(x_all.shape, generator=generator, device=device, dtype=dtype)  # (B, N) one per node

    slot = torch.zeros(B, dtype=torch.long, device=device)  # current node + 1 (0 = root)
    p = p_all[:, 0]  # (B, V) the target law at the current node, shrunk to residuals on rejections
    path = torch.full((B, D), -1, dtype=torch.long, device=device)  # (B, D)
    final = torch.zeros_like(p)  # (B, V) the law the last token is drawn from
    done = torch.zeros(B, dtype=torch.bool, device=device)
    for depth in range(D + 1):
        chosen = torch.full((B,), -1, dtype=torch.long, device=device)
        for j in range(kids.shape[1]):
            child = kids[slot, j]  # (B,)
            live = ~done & (chosen < 0) & (child >= 0)
            if not live.any():
                break  # child lists are left-packed: no row has a (j+1)-th child to try either
            c = child.clamp_min(0)
            x = x_all[rows, c]  # (B,)
            q = torch.nn.functional.one_hot(x, V).to(dtype) if q_all is None else q_all[rows, c]  # (B, V)
            # u * q(x) < p(x): accept w.p. min(1, p/q); never a p(x) = 0 token; q(x) = 0 < p(x) accepts
            ok = live & (u[rows, c] * q.gather(1, x[:, None])[:, 0] < p.gather(1, x[:, None])[:, 0])
            p = torch.where((live & ~ok)[:, None], residual(p, q), p)
            chosen = torch.where(ok, child, chosen)
        advance = chosen >= 0
        stop = ~done & ~advance
        final = torch.where(stop[:, None], p, final)
        done = done | stop
        if depth < D:
            path[:, depth] = torch.where(advance, chosen, -1)
        slot = torch.where(advance, chosen + 1, slot)
        p = torch.where(advance[:, None], p_all[rows, slot], p)
        if bool(done.all()):
            break
    num_accepted = (path >= 0).sum(-1)  # (B,)
    tokens, num_emitted = emit(_path_tokens(x_all, path), num_accepted, sample(final, generator))
    return tokens, num_emitted, path


def verify_tree(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lossless tree verification (see the module doc for the arguments and the result).  Every draw
    comes from ``generator``: one uniform per node (drawn up front, used at most once), then one
    categorical per row for the final token."""
    check_block(target_probs, draft_probs, draft_tokens, parents)
    return accept_tree(target_probs, draft_probs, draft_tokens, parents, generator)


def accept_tree_greedy(target_logits, draft_tokens, parents):
    """:func:`verify_tree_greedy` on inputs already checked."""
    B, device = target_logits.shape[0], target_logits.device
    best = target_logits.argmax(-1)  # (B, N+1)
    x_all = draft_tokens.long().to(device)  # (B, N)
    kids = child_table(parents.to(device))  # (N+1, C)
    D = int(depths(parents).max()) + 1 if len(parents) else 0
    rows = torch.arange(B, device=device)
    slot = torch.zeros(B, dtype=torch.long, device=device)
    path = torch.full((B, D), -1, dtype=torch.long, device=device)
    for depth in range(D):
        want = best[rows, slot]  # (B,) the token the target would emit here
        chosen = torch.full((B,), -1, dtype=torch.long, device=device)
        for j in range(kids.shape[1]):
            child = kids[slot, j]  # (B,)
            hit = (chosen < 0) & (child >= 0) & (x_all[rows, child.clamp_min(0)] == want)
            chosen = torch.where(hit, child, chosen)
        path[:, depth] = chosen
        slot = torch.where(chosen >= 0, chosen + 1, slot)
        if not bool((chosen >= 0).any()):
            break
    num_accepted = (path >= 0).sum(-1)  # (B,)
    tokens, num_emitted = emit(_path_tokens(x_all, path), num_accepted, best[rows, slot])
    return tokens, num_emitted, path


def verify_tree_greedy(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy tree verification: follow the first child equal to the argmax of target_logits (B, N+1, V).
    Every emitted token is the argmax after the tokens before it, so the output equals greedy decoding
    token for token; the tree only decides how many come out of one pass."""
    check_block(target_logits, None, draft_tokens, parents, "target_logits", logits=True)
    return accept_tree_greedy(target_logits, draft_tokens, parents)

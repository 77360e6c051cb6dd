"""Tree verification: one target pass scores every node; walk down the tree accepting one child per level.

Shape legend: B batch, N tree nodes, V vocab, D = max depth + 1 (the longest root-to-leaf path),
C = most children of any node.

Index conventions (the same as :mod:`specbook.tree` and ``Target.forward(tokens, parents)``):

* ``parents`` (N,) long, topological order, ``-1`` = child of the root.  The *root* is the
  position whose next-token distribution is the first new token's: in the decoding loop,
  the pending token.  Siblings are tried in node order.
* ``target_probs`` (B, N+1, V): index 0 is the root's distribution (the first new token);
  index ``i+1`` is the distribution after node i (for node i's children, or the bonus
  token if node i is a leaf).  This is exactly what a target returns for the tokens
  ``[pending] + draft_tokens`` with parents ``[-1] + (parents + 1, -1 -> 0)``.
* ``draft_probs`` (B, N, V) or None: row i is the distribution node i's token was drawn
  from.  Siblings drawn i.i.d. from one distribution share the same row; siblings drawn
  from different rows must still be drawn *independently* of each other.  ``None`` means
  deterministic candidates (q one-hot on the token): top-k lists, n-gram guesses.
* ``draft_tokens`` (B, N) long.

Every verifier returns ``(tokens, num_emitted, path)``:

* ``tokens`` (B, D+1) long: the accepted path's tokens, then one corrected or bonus token,
  then -1 padding;  ``num_emitted`` (B,) in 1..D+1;
* ``path`` (B, D) long: the accepted node indices, root first, padded with -1 (row b has
  ``num_emitted[b] - 1`` of them).  After the target pass, keep the root and nodes
  ``path + 1`` in the KV cache (``Target.keep``).

The lossless rule, :func:`verify_tree`, is multi-candidate rejection sampling ("multi-step
speculative sampling", Miao et al., SpecInfer, ASPLOS 2024; Yang et al., "Multi-candidate
speculative decoding", arXiv:2401.06706, 2024).  At the current node, with target
distribution p and children c_1, c_2, ... in node order:

    for each child c_j (token x_j drawn from q_j):
        accept c_j with probability min(1, p(x_j) / q_j(x_j)) -> move to c_j, start over there
        on rejection: p <- max(0, p - q_j) / sum(max(0, p - q_j))      (the residual)
    no child accepted (or a leaf): emit one token from the current p and stop.

Why it is exact: after sibling j is rejected, the next sibling is an independent draw, so
the single-position proof (:mod:`specbook.laws`) applies again to (residual, q_{j+1}); by
induction over siblings P(emit z here) = p(z), and by induction over depth the whole block
is a sample from the target (checked exactly in :mod:`specbook.tree_laws`).  With
deterministic candidates q_j is one-hot, so "accept with probability p(x_j)", and the
residual is p with x_j zeroed and renormalised: sampling the top-k *without replacement*.

Two consequences a drafter must respect (both tested):

* ``draft_probs=None`` is exact for *any* candidates that do not depend on the verifier's
  randomness, even sampled ones; passing the true q only raises acceptance
  (sum min(p, q) >= sum p q).
* Passing a q row for candidates that were *not* independent draws from it (a head's top-k,
  or siblings drawn without replacement to avoid duplicates) biases the output.

:func:`verify_tree_greedy` is the temperature-0 rule (follow the child equal to the
target's argmax).  :func:`typical_acceptance` is Medusa's lossy rule, kept as the baseline
it is in the literature.
"""
from __future__ import annotations

import math

import torch

from .sampling import sample
from .tree import check_parents, children, depths, max_path_length
from .verify import work_dtype, check_probs, check_tokens, residual

__all__ = ["verify_tree", "verify_tree_greedy", "typical_acceptance", "child_table", "keep_indices"]


def child_table(parents: torch.Tensor) -> torch.Tensor:
    """(N+1, C) long: row 0 lists the root's children, row i+1 node i's, in node order, -1 padded."""
    check_parents(parents)
    N = len(parents)
    kids = children(parents)
    slots = [kids[N]] + kids[:N]  # slot 0 = root, slot i+1 = node i
    C = max((len(k) for k in slots), default=0)
    table = torch.full((N + 1, C), -1, dtype=torch.long)
    for s, k in enumerate(slots):
        table[s, : len(k)] = torch.tensor(k, dtype=torch.long)
    return table.to(parents.device)


def keep_indices(path: torch.Tensor, num_emitted: torch.Tensor) -> list[list[int]]:
    """What ``Target.keep`` needs after a tree pass over ``[pending] + draft_tokens``: per row,
    the root (index 0) and the accepted nodes shifted by one."""
    return [[0] + [i + 1 for i in row[: n - 1]] for row, n in zip(path.tolist(), num_emitted.tolist())]


def _check_tree_inputs(target_probs, draft_probs, draft_tokens, parents, probs_name="target_probs") -> None:
    if not isinstance(parents, torch.Tensor) or parents.ndim != 1:
        raise ValueError(f"parents must be a 1-D (N,) tensor, got {getattr(parents, 'shape', parents)!r}")
    check_parents(parents)
    N = len(parents)
    if not isinstance(target_probs, torch.Tensor) or target_probs.ndim != 3:
        raise ValueError(f"{probs_name} must be a (B, N+1, V) tensor, got {getattr(target_probs, 'shape', target_probs)!r}")
    B, N1, V = target_probs.shape
    if N1 != N + 1:
        raise ValueError(f"{probs_name} has {N1} positions but the tree has {N} nodes: it needs N+1 = {N + 1} "
                         "(the root, then one per node)")
    if not isinstance(draft_tokens, torch.Tensor) or tuple(draft_tokens.shape) != (B, N):
        raise ValueError(f"draft_tokens must have shape {(B, N)}, got {tuple(getattr(draft_tokens, 'shape', ()))}")
    check_tokens("draft_tokens", draft_tokens, V)
    if draft_probs is not None:
        if not isinstance(draft_probs, torch.Tensor) or tuple(draft_probs.shape) != (B, N, V):
            raise ValueError(f"draft_probs has shape {tuple(getattr(draft_probs, 'shape', ()))}, expected {(B, N, V)} "
                             "(one row per node: the distribution it was drawn from)")
        check_probs("draft_probs", draft_probs, ndim=3)


def _emit(path_tokens: torch.Tensor, num_accepted: torch.Tensor, last: torch.Tensor) -> torch.Tensor:
    """(B, D) accepted tokens (-1 padded) + (B,) last token -> (B, D+1) block."""
    B = path_tokens.shape[0]
    tokens = torch.cat([path_tokens, path_tokens.new_full((B, 1), -1)], dim=1)  # (B, D+1)
    return tokens.scatter(1, num_accepted[:, None], last[:, None])


def verify_tree(
    target_probs: torch.Tensor,
    draft_probs: torch.Tensor | None,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Lossless tree verification (multi-candidate rejection sampling over siblings; see module doc).

    Args:
        target_probs: (B, N+1, V) p at the root and after every node.
        draft_probs:  (B, N, V) the distribution each node was drawn from, or None (deterministic).
        draft_tokens: (B, N) long.
        parents:      (N,) long, topological order, -1 = child of the root.
        generator: source of every random draw: one uniform per node (drawn up front, used at
            most once), then one categorical per row for the final token.

    Returns ``(tokens (B, D+1), num_emitted (B,), path (B, D))`` as described in the module doc.
    """
    _check_tree_inputs(target_probs, draft_probs, draft_tokens, parents)
    check_probs("target_probs", target_probs, ndim=3)
    B, N1, V = target_probs.shape
    N = N1 - 1
    device = target_probs.device
    dtype = work_dtype(target_probs, draft_probs)
    p_all = target_probs.to(dtype)  # (B, N+1, V)
    q_all = None if draft_probs is None else draft_probs.to(dtype)  # (B, N, V)
    x_all = draft_tokens.long()  # (B, N)
    kids = child_table(parents.to(device))  # (N+1, C)
    D = max_path_length(parents)
    rows = torch.arange(B, device=device)
    u = torch.rand((B, N), generator=generator, device=device, dtype=dtype)  # (B, N)

    slot = torch.zeros(B, dtype=torch.long, device=device)  # current node + 1 (0 = root)
    p = p_all[:, 0]  # (B, V) the target law at the current node, shrunk to residuals on rejections
    path = torch.full((B, D), -1, dtype=torch.long, device=device)
    num_accepted = torch.zeros(B, dtype=torch.long, device=device)
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
            p_x = p.gather(1, x[:, None]).squeeze(1)  # (B,)
            q_x = q.gather(1, x[:, None]).squeeze(1)  # (B,)
            # u * q(x) < p(x): accept w.p. min(1, p/q); never a p(x) = 0 token; q(x) = 0 < p(x) accepts
            ok = live & (u[rows, c] * q_x < p_x)
            rejected = live & ~ok
            p = torch.where(rejected[:, None], residual(p, q), p)
            chosen = torch.where(ok, child, chosen)
        advance = chosen >= 0
        stop = ~done & ~advance
        final = torch.where(stop[:, None], p, final)
        done = done | stop
        if depth < D:
            path[:, depth] = torch.where(advance, chosen, -1)
        num_accepted = num_accepted + advance.long()
        slot = torch.where(advance, chosen + 1, slot)
        p = torch.where(advance[:, None], p_all[rows, slot], p)
        if bool(done.all()):
            break
    last = sample(final, generator)  # (B,)
    path_tokens = torch.where(path >= 0, x_all.gather(1, path.clamp_min(0)), -1)  # (B, D)
    return _emit(path_tokens, num_accepted, last), num_accepted + 1, path


def verify_tree_greedy(
    target_logits: torch.Tensor,
    draft_tokens: torch.Tensor,
    parents: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Greedy (temperature 0) tree verification: follow the first child equal to the target's argmax.

    target_logits: (B, N+1, V) logits or probabilities (only the argmax matters; first index on
    ties, as in greedy autoregressive decoding).  Every emitted token is the argmax after the
    tokens before it, so the output equals greedy decoding token for token; the tree only
    decides how many come out of one pass.  No randomness.  Returns ``(tokens, num_emitted, path)``.
    """
    if isinstance(target_logits, torch.Tensor) and target_logits.ndim == 3 and torch.isnan(target_logits).any():
        raise ValueError("target_logits contain NaN")
    _check_tree_inputs(target_logits, None, draft_tokens, parents, probs_name="target_logits")
    B, N1, V = target_logits.shape
    N = N1 - 1
    device = target_logits.device
    best = target_logits.argmax(-1)  # (B, N+1)
    x_all = draft_tokens.long().to(device)  # (B, N)
    kids = child_table(parents.to(device))  # (N+1, C)
    D = max_path_length(parents)
    rows = torch.arange(B, device=device)
    slot = torch.zeros(B, dtype=torch.long, device=device)
    path = torch.full((B, D), -1, dtype=torch.long, device=device)
    num_accepted = torch.zeros(B, dtype=torch.long, device=device)
    for depth in range(D):
        want = best[rows, slot]  # (B,) the token the target would emit here
        chosen = torch.full((B,), -1, dtype=torch.long, device=device)
        for j in range(kids.shape[1]):
            child = kids[slot, j]  # (B,)
            hit = (chosen < 0) & (child >= 0) & (x_all[rows, child.clamp_min(0)] == want)
            chosen = torch.where(hit, child, chosen)
        advance = chosen >= 0
        path[:, depth] = chosen
        num_accepted = num_accepted + advance.long()
        slot = torch.where(advance, chosen + 1, slot)
        if not bool(advance.any()):
            break
    path_tokens = torch.where(path >= 0, x_all.gather(1, path.clamp_min(0)), -1)  # (B, D)
    return _emit(path_tokens, num_accepted, best[rows, slot]), num_accepted + 1, path


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
    _check_tree_inputs(target_probs, None, draft_tokens, parents)
    check_probs("target_probs", target_probs, ndim=3)
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
    return _emit(path_tokens, num_accepted, last), num_accepted + 1, path

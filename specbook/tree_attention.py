"""Tree attention: where each node of a token tree sits and what it may attend to in one pass.

Shape legend: N tree nodes, T cached context length, B batch.

Flattened into one sequence after T cached tokens, node i of a tree (``parents``, see
:mod:`specbook.tree`) sits at position ``T + depth(i)`` and attends to the whole context and to its
own ancestors only: the causal mask of each root-to-node path at once (Miao et al., SpecInfer,
2024; Cai et al., Medusa, 2024, sec. 2.1.2 "tree attention").
"""
from __future__ import annotations

import torch

from .tree import check_parents, depths


def position_ids(parents: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
    """Position of each node: ``offset + depth``; siblings share a position (alternatives for one slot).

    offset: an int (the cached length) -> (N,); or (B,) per-row cached lengths -> (B, N).
    """
    d = depths(parents)  # (N,)
    if isinstance(offset, torch.Tensor) and offset.ndim == 1:
        return offset.to(d.device).long()[:, None] + d  # (B, N)
    return d + int(offset)  # (N,)


def tree_mask(parents: torch.Tensor) -> torch.Tensor:
    """(N, N) bool: mask[i, j] is True iff node j is node i or one of its ancestors."""
    plist = check_parents(parents)
    mask = torch.eye(len(plist), dtype=torch.bool)
    for i, par in enumerate(plist):
        if par >= 0:
            mask[i] |= mask[par]
    return mask.to(parents.device)


def attention_mask(parents: torch.Tensor, context_length: int = 0) -> torch.Tensor:
    """(N, T + N) bool: what each node attends to when T tokens are already cached: the whole
    context, and among the N new columns itself and its ancestors only."""
    if isinstance(context_length, bool) or not isinstance(context_length, int) or context_length < 0:
        raise ValueError(f"context_length must be an int >= 0, got {context_length!r}")
    new = tree_mask(parents)  # (N, N)
    ctx = torch.ones(len(parents), context_length, dtype=torch.bool, device=new.device)  # (N, T)
    return torch.cat([ctx, new], dim=1)  # (N, T + N)

"""Token trees: the bookkeeping that lets one forward pass verify many candidate continuations.

Shape legend: N tree nodes, P root-to-leaf paths, D max depth.

A tree is given by ``parents`` (N,): ``parents[i]`` is the index of node i's parent,
or -1 when node i hangs directly off the already-cached context.  Nodes are in
topological order (every parent before its children), so a chain of K drafts is
``parents = [-1, 0, 1, ..., K-2]``.  With the tree flattened into one sequence,
node i must attend to the cached context and to its ancestors only, and sit at
position ``cache_length + depth(i)`` (Miao et al., SpecInfer, 2024; Cai et al.,
Medusa, 2024, "tree attention").
"""
from __future__ import annotations

import torch


def check_parents(parents: torch.Tensor) -> None:
    if not isinstance(parents, torch.Tensor) or parents.ndim != 1:
        raise ValueError(f"parents must be a 1-D tensor, got {getattr(parents, 'shape', parents)!r}")
    for i, par in enumerate(parents.tolist()):
        if not -1 <= par < i:
            raise ValueError(f"parents[{i}] = {par}: each parent must be -1 or an earlier node (topological order)")


def chain_parents(k: int, device=None) -> torch.Tensor:
    """The parents of a plain chain of k nodes: [-1, 0, 1, ..., k-2]."""
    return torch.arange(-1, k - 1, device=device)


def ancestors(parents: torch.Tensor, node: int) -> list[int]:
    """Indices of node's ancestors, root first (the node itself excluded)."""
    out = []
    par = int(parents[node])
    while par >= 0:
        out.append(par)
        par = int(parents[par])
    return out[::-1]


def depths(parents: torch.Tensor) -> torch.Tensor:
    """Depth of each node (0 for children of the context): (N,)."""
    check_parents(parents)
    d = torch.zeros(len(parents), dtype=torch.long)
    for i, par in enumerate(parents.tolist()):
        d[i] = 0 if par < 0 else d[par] + 1
    return d.to(parents.device)


def tree_mask(parents: torch.Tensor) -> torch.Tensor:
    """(N, N) bool: mask[i, j] is True iff node j is node i or one of its ancestors."""
    check_parents(parents)
    N = len(parents)
    mask = torch.eye(N, dtype=torch.bool)
    for i, par in enumerate(parents.tolist()):
        if par >= 0:
            mask[i] |= mask[par]
    return mask.to(parents.device)


def children(parents: torch.Tensor) -> list[list[int]]:
    """children[i] = the nodes whose parent is i; index N holds the roots (parent -1)."""
    N = len(parents)
    out: list[list[int]] = [[] for _ in range(N + 1)]
    for i, par in enumerate(parents.tolist()):
        out[par if par >= 0 else N].append(i)
    return out


def leaf_paths(parents: torch.Tensor) -> list[list[int]]:
    """Every root-to-leaf path as a list of node indices."""
    kids = children(parents)
    return [ancestors(parents, i) + [i] for i in range(len(parents)) if not kids[i]]

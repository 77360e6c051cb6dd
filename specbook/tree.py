"""Token trees: the bookkeeping that lets one forward pass verify many candidate continuations.

Shape legend: N tree nodes.

A tree is ``parents`` (N,): ``parents[i]`` is node i's parent, or -1 when node i hangs directly off
the cached context; nodes are in topological order (parents first), so a chain of K drafts is
``[-1, 0, 1, ..., K-2]`` (Miao et al., SpecInfer, 2024; Cai et al., Medusa, 2024, sec. 2.1.2).
:func:`check_parents` is the one check of parent links in specbook.  Positions and attention masks
of a tree pass: :mod:`specbook.tree_attention`; paths and Medusa choice lists: :mod:`specbook.tree_paths`.
"""
from __future__ import annotations

import torch


def check_parents(parents, name: str = "parents", length: int | None = None, ordered: bool = True) -> list[int]:
    """Check parent links and return them as a list of ints.

    ``parents``: a 1-D integer tensor or a sequence of ints; ``length``: the node count it must
    have.  ``ordered`` (the default, what verification needs): every parent is -1 or an earlier
    node.  ``ordered=False``: any node order, but every link is -1 or a node, and following links
    from any node reaches -1 (no node is its own ancestor), so no walk can go round forever.
    """
    if isinstance(parents, torch.Tensor):
        if parents.ndim != 1 or parents.is_floating_point() or parents.is_complex() or parents.dtype == torch.bool:
            raise ValueError(f"{name} must be a 1-D integer tensor, got shape {tuple(parents.shape)} "
                             f"and dtype {parents.dtype}")
        plist = [int(x) for x in parents.tolist()]
    elif isinstance(parents, (list, tuple)) and all(isinstance(x, int) and not isinstance(x, bool) for x in parents):
        plist = list(parents)
    else:
        raise ValueError(f"{name} must be a 1-D integer tensor or a sequence of ints, got {parents!r}"[:200])
    N = len(plist)
    if length is not None and N != length:
        raise ValueError(f"{name} has shape ({N},), expected ({length},): one parent per node")
    for i, par in enumerate(plist):
        if ordered and not -1 <= par < i:
            raise ValueError(f"{name}[{i}] = {par}: each parent must be -1 or an earlier node (topological order)")
        if not -1 <= par < N:
            raise ValueError(f"{name}[{i}] = {par}: not a tree (a parent must be -1 or a node in [0, {N}))")
    if not ordered:
        reaches_root = [False] * N
        for i in range(N):
            walk, j = [], i
            while j >= 0 and not reaches_root[j]:
                if j in walk:
                    raise ValueError(f"{name}[{j}] = {plist[j]}: the links from node {i} form a cycle, not a tree")
                walk.append(j)
                j = plist[j]
            for k in walk:
                reaches_root[k] = True
    return plist


def chain_parents(k: int, device=None) -> torch.Tensor:
    """The parents of a plain chain of k nodes: [-1, 0, 1, ..., k-2]."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 0:
        raise ValueError(f"k must be an int >= 0 (the number of nodes), got {k!r}")
    return torch.arange(-1, k - 1, device=device)


def children(parents: torch.Tensor) -> list[list[int]]:
    """children[i] = the nodes whose parent is i, in node order; index N holds the roots (parent -1)."""
    plist = check_parents(parents, ordered=False)
    out: list[list[int]] = [[] for _ in range(len(plist) + 1)]
    for i, par in enumerate(plist):
        out[par if par >= 0 else len(plist)].append(i)
    return out


def depths(parents: torch.Tensor) -> torch.Tensor:
    """Depth of each node (0 for children of the context): (N,)."""
    d: list[int] = []
    for par in check_parents(parents):
        d.append(0 if par < 0 else d[par] + 1)
    return torch.tensor(d, dtype=torch.long, device=parents.device)


def max_path_length(parents: torch.Tensor) -> int:
    """D = the number of nodes on the longest root-to-leaf path (0 for an empty tree)."""
    return int(depths(parents).max()) + 1 if len(parents) else 0

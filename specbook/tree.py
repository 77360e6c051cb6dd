"""Token trees: the bookkeeping that lets one forward pass verify many candidate continuations.

Shape legend: N tree nodes, T cached context length, B batch.

A tree is given by ``parents`` (N,): ``parents[i]`` is the index of node i's parent, or -1 when
node i hangs directly off the already-cached context.  Nodes are in topological order (every
parent before its children), so a chain of K drafts is ``parents = [-1, 0, 1, ..., K-2]``.  With
the tree flattened into one sequence, node i attends to the cached context and to its ancestors
only, and sits at position ``cache_length + depth(i)`` (Miao et al., SpecInfer, 2024; Cai et al.,
Medusa, 2024, sec. 2.1.2 "tree attention").

:func:`check_parents` is the one check of parent links in specbook.  Reading an accepted branch
back as paths, and Medusa-style choice lists, live in :mod:`specbook.tree_paths`; the picture of a
tree next to its mask is :func:`specbook.teach.plots.draw_tree`.
"""
from __future__ import annotations

import operator

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


def _node(node, n: int) -> int:
    try:
        index = operator.index(node)
    except TypeError:
        index = None
    if index is None or isinstance(node, bool) or not 0 <= index < n:
        raise ValueError(f"node must be an int in [0, {n}), got {node!r}")
    return index


def ancestors(parents: torch.Tensor, node: int) -> list[int]:
    """Indices of node's ancestors, root first (the node itself excluded); any node order."""
    plist = check_parents(parents, ordered=False)
    out, par = [], plist[_node(node, len(plist))]
    while par >= 0:
        out.append(par)
        par = plist[par]
    return out[::-1]


def path_to(parents: torch.Tensor, node: int) -> list[int]:
    """The root-to-node path ending at ``node``: its ancestors, root first, then the node."""
    return ancestors(parents, node) + [node]


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

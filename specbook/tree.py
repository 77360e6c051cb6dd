"""Token trees: the bookkeeping that lets one forward pass verify many candidate continuations.

Shape legend: N tree nodes, P root-to-leaf paths, D longest path (max depth + 1), T cached
context length, B batch.

A tree is given by ``parents`` (N,): ``parents[i]`` is the index of node i's parent,
or -1 when node i hangs directly off the already-cached context.  Nodes are in
topological order (every parent before its children), so a chain of K drafts is
``parents = [-1, 0, 1, ..., K-2]``.  With the tree flattened into one sequence,
node i must attend to the cached context and to its ancestors only, and sit at
position ``cache_length + depth(i)`` (Miao et al., SpecInfer, 2024; Cai et al.,
Medusa, 2024, sec. 2.1.2 "tree attention").

Everything a tree-verifying step needs, from one ``parents`` vector:

* :func:`depths` and :func:`position_ids`  where each node sits;
* :func:`tree_mask` / :func:`attention_mask`  what each node may attend to;
* :func:`children`, :func:`path_to`, :func:`leaf_paths`, :func:`path_table`  how to read an
  accepted branch back (``path_table`` is Medusa's "retrieve indices" without the root);
* :func:`topological_order`  renumber arbitrary parent links into the order above
  (breadth first; siblings keep their relative order, which is the order a verifier tries them);
* :func:`from_paths`  a Medusa-style list of choice paths -> parents, plus, per node, the
  depth (which draft head proposes it) and the rank (which of that head's top-k it takes);

The picture of a tree next to its mask, for the lessons, is :func:`specbook.teach.plots.draw_tree`.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Sequence

import torch


def check_parents(parents: torch.Tensor) -> None:
    if not isinstance(parents, torch.Tensor) or parents.ndim != 1:
        raise ValueError(f"parents must be a 1-D tensor, got {getattr(parents, 'shape', parents)!r}")
    if parents.is_floating_point() or parents.dtype == torch.bool:
        raise ValueError(f"parents must be an integer tensor, got dtype {parents.dtype}")
    for i, par in enumerate(parents.tolist()):
        if not -1 <= par < i:
            raise ValueError(f"parents[{i}] = {par}: each parent must be -1 or an earlier node (topological order)")


def chain_parents(k: int, device=None) -> torch.Tensor:
    """The parents of a plain chain of k nodes: [-1, 0, 1, ..., k-2]."""
    return torch.arange(-1, k - 1, device=device)


def _parent_list(parents) -> list[int]:
    """``parents`` as a list of ints after checking that the links form a forest.

    Any node order is accepted (unlike :func:`check_parents`), but every link must be -1 or
    another node's index, and following links from any node must reach -1: a node that is
    its own parent, or a cycle, raises ValueError instead of sending a walk round forever.
    """
    if isinstance(parents, torch.Tensor):
        if parents.ndim != 1 or parents.is_floating_point() or parents.is_complex() or parents.dtype == torch.bool:
            raise ValueError(f"parents must be a 1-D integer tensor, got shape {tuple(parents.shape)} "
                             f"and dtype {parents.dtype}")
        plist = [int(x) for x in parents.tolist()]
    else:
        plist = list(parents)
        if not all(isinstance(x, int) and not isinstance(x, bool) for x in plist):
            raise ValueError(f"parents must be a sequence of ints, got {plist!r}")
    N = len(plist)
    reaches_root = [False] * N
    for i in range(N):
        walk, seen, j = [], set(), i
        while j >= 0 and not reaches_root[j]:
            if not -1 <= plist[j] < N:
                raise ValueError(f"parents[{j}] = {plist[j]}: a parent must be -1 or a node in [0, {N})")
            if j in seen:
                raise ValueError(f"parents[{j}] = {plist[j]}: the links from node {i} form a cycle, not a tree")
            seen.add(j)
            walk.append(j)
            j = plist[j]
        for k in walk:
            reaches_root[k] = True
    return plist


def _node(node, n: int) -> int:
    if isinstance(node, bool) or (isinstance(node, torch.Tensor) and node.dtype == torch.bool):
        raise ValueError(f"node must be an int in [0, {n}), got {node!r}")
    try:
        index = operator.index(node)
    except TypeError:
        raise ValueError(f"node must be an int in [0, {n}), got {node!r}") from None
    if not 0 <= index < n:
        raise ValueError(f"node must be an int in [0, {n}), got {node!r}")
    return index


def ancestors(parents: torch.Tensor, node: int) -> list[int]:
    """Indices of node's ancestors, root first (the node itself excluded).

    Raises ValueError for a node outside [0, N) or links that are not a forest (a node that
    is its own parent, a cycle, a parent out of range) instead of looping.
    """
    plist = _parent_list(parents)
    out = []
    par = plist[_node(node, len(plist))]
    while par >= 0:
        out.append(par)
        par = plist[par]
    return out[::-1]


def path_to(parents: torch.Tensor, node: int) -> list[int]:
    """The root-to-node path ending at ``node``: its ancestors, root first, then the node."""
    return ancestors(parents, node) + [node]


def depths(parents: torch.Tensor) -> torch.Tensor:
    """Depth of each node (0 for children of the context): (N,)."""
    check_parents(parents)
    d = torch.zeros(len(parents), dtype=torch.long)
    for i, par in enumerate(parents.tolist()):
        d[i] = 0 if par < 0 else d[par] + 1
    return d.to(parents.device)


def max_path_length(parents: torch.Tensor) -> int:
    """D = the number of nodes on the longest root-to-leaf path (0 for an empty tree)."""
    return int(depths(parents).max()) + 1 if len(parents) else 0


def position_ids(parents: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
    """Position of each node: ``offset + depth``.

    offset: an int (the cached length) -> (N,); or (B,) per-row cached lengths -> (B, N).
    Siblings share a position: they are alternatives for the same token slot.
    """
    d = depths(parents)  # (N,)
    if isinstance(offset, torch.Tensor) and offset.ndim == 1:
        return offset.to(d.device).long()[:, None] + d  # (B, N)
    return d + int(offset)  # (N,)


def tree_mask(parents: torch.Tensor) -> torch.Tensor:
    """(N, N) bool: mask[i, j] is True iff node j is node i or one of its ancestors."""
    check_parents(parents)
    N = len(parents)
    mask = torch.eye(N, dtype=torch.bool)
    for i, par in enumerate(parents.tolist()):
        if par >= 0:
            mask[i] |= mask[par]
    return mask.to(parents.device)


def attention_mask(parents: torch.Tensor, context_length: int = 0) -> torch.Tensor:
    """(N, T + N) bool: what each node attends to when T tokens are already cached.

    Every node sees the whole cached context (the first T columns) and, among the N new
    columns, itself and its ancestors only: the causal mask of each root-to-node path.
    """
    if not isinstance(context_length, int) or context_length < 0:
        raise ValueError(f"context_length must be an int >= 0, got {context_length!r}")
    new = tree_mask(parents)  # (N, N)
    ctx = torch.ones(len(parents), context_length, dtype=torch.bool, device=new.device)  # (N, T)
    return torch.cat([ctx, new], dim=1)  # (N, T + N)


def children(parents: torch.Tensor) -> list[list[int]]:
    """children[i] = the nodes whose parent is i; index N holds the roots (parent -1).

    Raises ValueError when the links are not a forest (see :func:`ancestors`).
    """
    plist = _parent_list(parents)
    N = len(plist)
    out: list[list[int]] = [[] for _ in range(N + 1)]
    for i, par in enumerate(plist):
        out[par if par >= 0 else N].append(i)
    return out


def leaf_paths(parents: torch.Tensor) -> list[list[int]]:
    """Every root-to-leaf path as a list of node indices."""
    kids = children(parents)
    return [ancestors(parents, i) + [i] for i in range(len(parents)) if not kids[i]]


def path_table(parents: torch.Tensor) -> torch.Tensor:
    """(P, D) long: the root-to-leaf paths, one per row, padded with -1 (leaves in node order)."""
    paths = leaf_paths(parents)
    D = max((len(p) for p in paths), default=0)
    table = torch.full((len(paths), D), -1, dtype=torch.long)
    for r, p in enumerate(paths):
        table[r, : len(p)] = torch.tensor(p, dtype=torch.long)
    return table.to(parents.device)


def topological_order(parents: Sequence[int] | torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Renumber a tree given by arbitrary parent links (any node order, -1 = root child).

    Returns ``(order, new_parents)``: ``order[k]`` is the old index of new node k, and
    ``new_parents`` (N,) are the parent links in the new numbering.  Nodes are sorted by
    depth, ties by old index, so siblings keep their relative order (the order in which
    a verifier tries them).  Raises ValueError on a cycle or an out-of-range parent.
    """
    plist = [int(x) for x in (parents.tolist() if isinstance(parents, torch.Tensor) else parents)]
    N = len(plist)
    depth: list[int | None] = [None] * N
    for i in range(N):
        chain, j = [], i
        while j >= 0 and depth[j] is None:
            if not -1 <= plist[j] < N or plist[j] == j or j in chain:
                raise ValueError(f"parents[{j}] = {plist[j]}: not a tree (cycle or parent outside [-1, {N}))")
            chain.append(j)
            j = plist[j]
        base = -1 if j < 0 else depth[j]
        for k in reversed(chain):
            base += 1
            depth[k] = base
    order = sorted(range(N), key=lambda i: (depth[i], i))
    new_index = {old: new for new, old in enumerate(order)}
    new_parents = [-1 if plist[old] < 0 else new_index[plist[old]] for old in order]
    return torch.tensor(order, dtype=torch.long), torch.tensor(new_parents, dtype=torch.long)


@dataclass(frozen=True)
class ChoiceTree:
    """A tree built from choice paths (Medusa's ``medusa_choices``; EAGLE's static trees).

    choices: the paths in node order, sorted by (length, path) as Medusa does.  Path
             ``(r_0, ..., r_d)`` is the node reached by taking the r_0-th candidate at depth 0,
             then the r_1-th candidate below it, ... .
    parents: (N,) long parent links (-1 = child of the context).
    depth:   (N,) long.  For Medusa this says which head proposes the node.  In the decoding
             loop the root is the pending token (sampled, not yet cached), and the newest
             hidden state is the one that predicted it; a node at depth d is the token d + 1
             positions after the pending one, i.e. Medusa head d + 1 (head k predicting k
             tokens beyond the base model's next token) read at that hidden state.
    rank:    (N,) long, the last entry of each path: which of that head's top-k candidates
             (0 = most likely) the node takes.  For EAGLE-style drafters, which of the draft
             model's top-k continuations of the parent node.
    """

    choices: tuple[tuple[int, ...], ...]
    parents: torch.Tensor
    depth: torch.Tensor
    rank: torch.Tensor

    @property
    def num_nodes(self) -> int:
        return len(self.choices)

    @property
    def max_rank(self) -> int:
        """The largest rank used, + 1: how many top-k candidates a drafter must compute."""
        return int(self.rank.max()) + 1 if len(self.choices) else 0


def from_paths(choices: Sequence[Sequence[int]]) -> ChoiceTree:
    """Build a :class:`ChoiceTree` from Medusa-style choice paths, e.g. ``[[0], [1], [0, 0], [0, 1]]``.

    Every proper prefix of a path must itself be listed (a node needs its parent), no path may
    repeat, and ranks must be ints >= 0.  Nodes are ordered by (length, path), as in Medusa's
    ``generate_medusa_buffers``, so parents come before children and siblings by rank.
    """
    paths = []
    for c in choices:
        path = tuple(c)
        if len(path) == 0 or not all(isinstance(r, int) and not isinstance(r, bool) and r >= 0 for r in path):
            raise ValueError(f"choices: each path must be a non-empty sequence of ints >= 0, got {c!r}")
        paths.append(path)
    if len(set(paths)) != len(paths):
        dup = next(p for p in paths if paths.count(p) > 1)
        raise ValueError(f"choices: path {list(dup)} is listed twice")
    ordered = sorted(paths, key=lambda p: (len(p), p))
    index = {p: i for i, p in enumerate(ordered)}
    parents = []
    for p in ordered:
        if len(p) > 1 and p[:-1] not in index:
            raise ValueError(f"choices: path {list(p)} needs its prefix {list(p[:-1])}, which is not listed")
        parents.append(-1 if len(p) == 1 else index[p[:-1]])
    return ChoiceTree(
        choices=tuple(ordered),
        parents=torch.tensor(parents, dtype=torch.long),
        depth=torch.tensor([len(p) - 1 for p in ordered], dtype=torch.long),
        rank=torch.tensor([p[-1] for p in ordered], dtype=torch.long),
    )

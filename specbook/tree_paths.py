"""Reading a token tree back as paths, renumbering one, and Medusa-style choice lists.

Shape legend: N tree nodes, P root-to-leaf paths, D longest path (max depth + 1).

* :func:`ancestors`, :func:`path_to`: the nodes above one node (any node order);
* :func:`leaf_paths`, :func:`path_table`: every root-to-leaf path (``path_table`` is Medusa's
  "retrieve indices" without the root);
* :func:`topological_order`: renumber arbitrary parent links into the order :mod:`specbook.tree`
  requires (breadth first; siblings keep their relative order, which is the order a verifier
  tries them);
* :func:`from_paths`: a Medusa-style list of choice paths -> parents, plus, per node, the depth
  (which draft head proposes it) and the rank (which of that head's top-k it takes).
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Sequence

import torch

from .tree import check_parents, children


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
    plist = check_parents(parents, ordered=False)
    depth: list[int] = []
    for i in range(len(plist)):
        depth.append(len(ancestors(plist, i)))
    order = sorted(range(len(plist)), key=lambda i: (depth[i], i))
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

"""Exact laws of tree verification, by enumeration (float64, or exactly with ``fractions.Fraction``).

Shape legend: N tree nodes, V vocab, D longest root-to-leaf path, L sequence length.

Two questions, two kinds of function.

*What does a verifier emit for one tree?*  :func:`tree_block_law` follows the rule of
:func:`specbook.verify_tree.verify_tree` through every accept/reject branch, with one fixed
target row per tree position and one draft row per node; either conditional on the drafted
tokens, or marginal over drafts drawn independently from their rows.
:func:`typical_block_law` does the same for Medusa's typical acceptance.

*Is that the target's law?*  A block is a random-length prefix of the output.  A verifier
is lossless iff "emit the block, then keep sampling from the target" gives the target's own
law for the first L tokens, for every L: ``extend_law(block, target_fn, L) ==
autoregressive_law(target_fn, L)``.  For that the rows must be *consistent*: computed by a
target model and a draft model along each node's path.  :func:`tree_model_law` builds the
block law that way from two functions of the prefix, and marginalises over the drafts.

The recursion (Miao et al., SpecInfer, 2024, multi-step speculative sampling): at a node with
target law p and children c_1.. c_m tried in order,

    law(p, j) = sum_x P(c_j drawn = x and accepted) * [x, then law below c_j]
              + P(c_j rejected) * law(residual(p, q_j), j + 1),        law(p, m) = p

where, for c_j drawn from q_j, P(draw x and accept) = min(p(x), q_j(x)) and P(reject) =
sum max(0, p - q_j), so that by the single-position identity law(p, j) emits p at this node.
"""
from __future__ import annotations

import math
from typing import Callable, Sequence

import torch

from .laws import Number, accept_prob, as_list, residual_list
from .tree import check_parents, children

__all__ = ["tree_block_law", "tree_model_law", "typical_block_law", "extend_law", "autoregressive_law",
           "total_variation"]

Law = dict[tuple[int, ...], Number]


def _rows(x, name: str) -> list[list]:
    if isinstance(x, torch.Tensor):
        if x.ndim != 2:
            raise ValueError(f"{name} must be (positions, V), got shape {tuple(x.shape)}")
        return x.to(torch.float64).tolist()
    return [list(r) for r in x]


def _merge(out: dict, law: dict, weight) -> None:
    for k, v in law.items():
        out[k] = out.get(k, 0) + weight * v


def _slots(parents) -> list[list[int]]:
    """kids[0] = the root's children, kids[i+1] = node i's children (node order)."""
    parents = torch.as_tensor(parents, dtype=torch.long)
    check_parents(parents)
    kids = children(parents)
    return [kids[len(parents)]] + kids[: len(parents)]


def _tree_law(kids, target_row, draft_of) -> Law:
    """target_row(slot, block) -> p;  draft_of(node, block) -> ("sampled", q) or ("fixed", x, q or None)."""

    def at(slot: int, block: tuple) -> Law:
        return siblings(kids[slot], 0, target_row(slot, block), block)

    def siblings(sibs: list[int], j: int, p: list, block: tuple) -> Law:
        if j == len(sibs):
            return {block + (z,): pz for z, pz in enumerate(p) if pz > 0}
        node = sibs[j]
        spec = draft_of(node, block)
        out: Law = {}
        if spec[0] == "sampled":
            q = spec[1]
            for x, qx in enumerate(q):
                take = min(p[x], qx)  # = q(x) * min(1, p(x)/q(x)) for q(x) > 0
                if qx > 0 and take > 0:
                    _merge(out, at(node + 1, block + (x,)), take)
            reject = sum(max(pv - qv, 0 * pv) for pv, qv in zip(p, q))
        else:
            x, q = spec[1], spec[2]
            if q is None:
                q = [int(v == x) for v in range(len(p))]
            a = accept_prob(p[x], q[x])
            if a > 0:
                _merge(out, at(node + 1, block + (x,)), a)
            reject = 1 - a
        if reject > 0:
            _merge(out, siblings(sibs, j + 1, residual_list(p, q), block), reject)
        return out

    return at(0, ())


def tree_block_law(target_probs, draft_probs, parents, draft_tokens: Sequence[int] | None = None) -> Law:
    """Exact law of the block :func:`specbook.verify_tree.verify_tree` emits for one row.

    target_probs: (N+1, V) rows (tensor, or lists of floats / Fractions): root, then after each node.
    draft_probs:  (N, V) the row each node is drawn from, or None (deterministic candidates;
                  then ``draft_tokens`` is required).
    parents:      (N,) parent links, -1 = child of the root.
    draft_tokens: (N,) if given, the law conditional on these tokens; if None, the marginal over
                  tokens drawn independently, node i from draft_probs[i].
    Returns {block (1..D+1 tokens): probability}, zero-probability blocks omitted.
    """
    kids = _slots(parents)
    N = len(kids) - 1
    p_rows = _rows(target_probs, "target_probs")
    if len(p_rows) != N + 1:
        raise ValueError(f"target_probs has {len(p_rows)} rows, the tree needs N+1 = {N + 1}")
    q_rows = None if draft_probs is None else _rows(draft_probs, "draft_probs")
    if q_rows is not None and len(q_rows) != N:
        raise ValueError(f"draft_probs has {len(q_rows)} rows, the tree has N = {N} nodes")
    if draft_tokens is None:
        if q_rows is None:
            raise ValueError("draft_probs=None (deterministic candidates) needs draft_tokens")

        def draft_of(node, block):
            return ("sampled", q_rows[node])
    else:
        toks = [int(t) for t in draft_tokens]
        if len(toks) != N:
            raise ValueError(f"draft_tokens has {len(toks)} entries, the tree has N = {N} nodes")

        def draft_of(node, block):
            return ("fixed", toks[node], None if q_rows is None else q_rows[node])

    return _tree_law(kids, lambda slot, block: p_rows[slot], draft_of)


def tree_model_law(target_fn: Callable, parents, draft_fn: Callable, deterministic: bool = False) -> Law:
    """Exact block law when the rows come from models evaluated along each node's path.

    target_fn(prefix) -> (V,) the target's law after the block prefix (a tuple of tokens).
    draft_fn(prefix, node) -> (V,) the law node ``node`` is drawn from when its parent's path
        spells ``prefix`` (siblings are independent draws); or, with ``deterministic=True``,
        node's token itself (an int), e.g. the rank-th most likely token of a draft model.
    Marginal over the drafts.  Cost grows like V**depth per node; keep trees small.
    """
    kids = _slots(parents)
    if deterministic:
        def draft_of(node, block):
            return ("fixed", int(draft_fn(block, node)), None)
    else:
        def draft_of(node, block):
            return ("sampled", as_list(draft_fn(block, node)))
    return _tree_law(kids, lambda slot, block: as_list(target_fn(block)), draft_of)


def typical_block_law(target_probs, draft_tokens: Sequence[int], parents, epsilon: float = 0.09,
                      delta: float = 0.3, final: str = "sample") -> dict[tuple[int, ...], float]:
    """Exact law of :func:`specbook.typical.typical_acceptance` for one row (floats only).

    Written independently of the tensor code, from the rule in its docstring: typical iff
    p(x) > min(epsilon, delta exp(-H(p))); the deepest node whose whole path is typical wins
    (ties: larger path log-likelihood, then smaller index); then one token from the target row
    after it (its law, or a point mass on its argmax for ``final="greedy"``).
    """
    kids = _slots(parents)
    N = len(kids) - 1
    p = _rows(target_probs, "target_probs")
    toks = [int(t) for t in draft_tokens]
    if len(p) != N + 1 or len(toks) != N:
        raise ValueError(f"need N+1 = {N + 1} target rows and N = {N} tokens, got {len(p)} and {len(toks)}")
    par = [-1] * N
    for slot, sibs in enumerate(kids):
        for c in sibs:
            par[c] = slot - 1
    best = (0, 0.0, 1)  # (path length, log-likelihood, -index) of the winner; root = nothing accepted
    end = -1
    ok = [False] * N
    loglik = [0.0] * N
    length = [0] * N
    for i in range(N):
        row = p[par[i] + 1]
        entropy = -sum(v * math.log(v) for v in row if v > 0)
        px = row[toks[i]]
        above = par[i] < 0 or ok[par[i]]
        ok[i] = above and px > min(epsilon, delta * math.exp(-entropy))
        if not ok[i]:
            continue
        loglik[i] = math.log(px) + (loglik[par[i]] if par[i] >= 0 else 0.0)
        length[i] = 1 + (length[par[i]] if par[i] >= 0 else 0)
        if (length[i], loglik[i], -i) > best:
            best, end = (length[i], loglik[i], -i), i
    path = []
    node = end
    while node >= 0:
        path.append(toks[node])
        node = par[node]
    block = tuple(path[::-1])
    row = p[end + 1]
    if final == "greedy":
        return {block + (max(range(len(row)), key=lambda z: (row[z], -z)),): 1.0}
    return {block + (z,): pz for z, pz in enumerate(row) if pz > 0}


def extend_law(law: Law, target_fn: Callable, length: int) -> Law:
    """Law of the first ``length`` tokens when each block is continued by sampling from the target.

    Blocks longer than ``length`` are truncated; shorter ones are extended with target_fn(prefix)
    (the target's law after ``prefix``, as in :func:`tree_model_law`).
    """
    if not isinstance(length, int) or length < 0:
        raise ValueError(f"length must be an int >= 0, got {length!r}")
    out: Law = {}
    frontier: Law = {}
    for blk, w in law.items():
        if len(blk) >= length:
            out[blk[:length]] = out.get(blk[:length], 0) + w
        else:
            frontier[blk] = frontier.get(blk, 0) + w
    while frontier:
        grown: Law = {}
        for seq, w in frontier.items():
            for z, pz in enumerate(as_list(target_fn(seq))):
                if pz > 0:
                    grown[seq + (z,)] = grown.get(seq + (z,), 0) + w * pz
        frontier = {}
        for seq, w in grown.items():
            if len(seq) == length:
                out[seq] = out.get(seq, 0) + w
            else:
                frontier[seq] = w
    return out


def autoregressive_law(target_fn: Callable, length: int) -> Law:
    """The target's own law of its first ``length`` tokens."""
    return extend_law({(): 1}, target_fn, length)


def total_variation(a: dict, b: dict) -> float:
    """Total variation distance between two laws {outcome: probability}: 1/2 sum |a - b|."""
    return 0.5 * sum(abs(float(a.get(k, 0)) - float(b.get(k, 0))) for k in set(a) | set(b))

"""Graders of lesson 5 (trees, Medusa, EAGLE): exercises ``05.1``-``05.3``, concept checks ``05.c1``-``05.c5``.

What is right is computed with :mod:`specbook.tree_paths` and :mod:`specbook.tree_attention`
(trees and masks), from the Medusa trainer's own labels (which the lesson's check cell hands
over), from the lesson's measured tree verify-cost curves, and exactly with
:mod:`specbook.tree_laws`.
"""
from __future__ import annotations

from fractions import Fraction as F

from . import Wrong, grader, register
from ._answers import call, count, near, pick, whole

CHOICES = [[0], [1], [2], [0, 0], [0, 1], [1, 0], [0, 0, 0]]  # exercise 1's choice list


@grader("05.1")
def tree_from_choices(nodes, paths, mask_row) -> None:
    """Nodes, root-to-leaf paths, and True entries of the mask row of node [0, 0, 0]."""
    from specbook.tree_attention import tree_mask
    from specbook.tree_paths import from_paths, leaf_paths

    tree = from_paths(CHOICES)
    nodes, paths, mask_row = whole(nodes, "the number of nodes"), whole(paths, "the number of paths"), \
        whole(mask_row, "the number of True entries")
    if nodes != len(tree.parents):
        raise Wrong("nodes: every entry of the choice list names one node")
    if paths != len(leaf_paths(tree.parents)):
        raise Wrong("paths: a root-to-leaf path ends at a node with no children; count those nodes")
    row = int(tree_mask(tree.parents)[CHOICES.index([0, 0, 0])].sum())
    if mask_row != row:
        if mask_row == row - 1:
            raise Wrong("a node also attends to itself")
        raise Wrong("the mask row of a node is True for the node itself and for each of its ancestors; the cached "
                    "context is not part of this node-by-node mask")


@grader("05.2")
def medusa_labels(fn, tokens, prompt_length, labels) -> None:
    """``fn(tokens, t, K)`` against the trainer's labels at every reply position of the lesson's sequence."""
    want = labels.tolist()
    K = len(want[0])
    first = int(prompt_length) - 1
    got = []
    for i, t in enumerate(range(first, first + len(want))):
        row = call(fn, tokens, t, K)
        try:
            row = [int(x) for x in row]
        except TypeError:
            raise Wrong(f"medusa_labels should return a list of {K} token ids, got {row!r}") from None
        got.append(row)
        if len(row) != K:
            raise Wrong(f"medusa_labels(tokens, t, {K}) should return {K} labels, one per head, got {len(row)}")
    if got == want:
        return
    if got[:-1] == want[1:]:
        raise Wrong("your labels are one position ahead of the trainer's: head 1 predicts the token right after "
                    "the target's own next token")
    if got[1:] == want[:-1]:
        raise Wrong("your labels are one position behind the trainer's: the target's own LM head already "
                    "predicts the next token, and head 1 predicts the one after it")
    bad = [(g, w) for g, w in zip(got, want) if g != w]
    if all(-100 in w for _, w in bad):
        raise Wrong("right inside the sequence, wrong at its end: past the last token a head has no label, and "
                    "the trainer writes -100 there")
    raise Wrong("the labels differ from the trainer's: which token does head k predict after the target read "
                "tokens[: t + 1]?")


@grader("05.3")
def tree_budget(budget, bigger, tree_curves) -> None:
    """The largest timed node count with v(n) <= 1.5, per dtype; then which dtype allows the bigger tree."""
    right = {name: max(n for n, x in zip(cv["n"], cv["v"]) if x <= 1.5) for name, cv in tree_curves.items()}
    if not isinstance(budget, dict) or set(budget) != set(right):
        raise Wrong(f"give a dict with one entry per dtype, {sorted(right)}, each a node count")
    for name, n in right.items():
        got = whole(budget[name], f"the {name} budget")
        if got != n:
            cv = tree_curves[name]
            if got not in cv["n"]:
                raise Wrong(f"{name}: {got} is not one of the timed sizes {cv['n']}")
            raise Wrong(f"{name}: v({got}) = {cv['v'][cv['n'].index(got)]:.2f}; you want the largest timed n "
                        "whose v(n) is at most 1.5")
    f32, bf16 = right["float32"], right["bfloat16"]
    measured = "a" if f32 > bf16 else "b" if bf16 > f32 else "c"
    hint = (f"on this machine the budgets are {f32} nodes in float32 and {bf16} in bfloat16: which dtype does "
            "this processor multiply fastest?")
    pick(measured, **dict.fromkeys("abc", hint))(bigger)


# ---------------------------------------------------------------------------- concept check


def _mask_row_at_depth_two() -> int:
    """c1: True entries in the mask row of a node at depth 2 (the root's children are at depth 0)."""
    from specbook.tree_attention import tree_mask
    from specbook.tree_paths import from_paths

    return int(tree_mask(from_paths([[0], [0, 0], [0, 0, 0]]).parents)[2].sum())


def _top_k_with_q_is_lossless() -> str:
    """c4: a top-2 list of distinct tokens, verified with the head's q reported: lossless (a) or not (b)?"""
    from specbook.tree_laws import tree_block_law
    from specbook.tree_paths import from_paths

    p_root = [F(1, 10), F(3, 10), F(6, 10)]
    q_head = [F(1, 2), F(3, 10), F(1, 5)]
    law = tree_block_law([p_root] * 3, [q_head] * 2, from_paths([[0], [1]]).parents, [0, 1])
    first = [F(0)] * 3
    for block, pr in law.items():
        first[block[0]] += pr
    return "a" if first == p_root else "b"


_C5 = dict(nodes=64, bytes_per_weight=2)  # a 64-node verify pass in bfloat16

register({
    "05.c1": count(_mask_row_at_depth_two, "the number of True entries",
                   hint="a node sees itself and each of its ancestors: how many ancestors has a node at depth 2?"),
    "05.c2": pick("b", a="x_{t+1} is already the target's own prediction from z_t; head 1 predicts the token after it",
                  c="that is the off-by-one the course once taught; count from the target's own next token"),
    "05.c3": pick("b", a="section 6 tests it by chi-square against p: what did it find?",
                  c="nothing in typical acceptance depends on the temperature being 1; section 6 ran it at 1"),
    "05.c4": pick(_top_k_with_q_is_lossless, **dict.fromkeys("ab", (
        "the tree rule's proof needs each sibling to be an independent draw from the q reported for it, or fixed "
        "candidates verified as one-hot; the lesson's last exact table shows which case this is"))),
    # Flop per weight byte of a 64-node verify pass in bfloat16: one multiply-add (2 flop) per node and weight.
    "05.c5": near(2 * _C5["nodes"] / _C5["bytes_per_weight"], "the intensity", tol=1e-9, traps={
        2 * _C5["nodes"] / 4: "that is float32, 4 bytes per weight; bfloat16 has 2",
    }, hint="each weight fetched does one multiply-add (2 flop) per node; divide by the bytes of one weight"),
})

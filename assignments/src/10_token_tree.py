# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 10: choose a token tree from measured acceptance, under a node budget
#
# Medusa (Cai et al., 2024; lesson 5) drafts a tree: head d + 1 reads the target's last feature
# and ranks candidates for the token d + 1 places after the pending one, and the tree takes some of
# those candidates at every depth.  A node is named by its **path of ranks** `(r_0, ..., r_d)`: the
# r_0-th candidate of head 1 at depth 0, then the r_1-th candidate of head 2 below it, and so on
# (Medusa's "choice list").  One target pass verifies every node; under greedy verification a node's
# token is kept when its whole path is right.
#
# Which nodes are worth a place?  A bigger tree keeps more tokens per pass, but the pass over it
# costs more (lesson 5 measured that a 64-node pass is not free on a CPU).  You will:
#
# 1. compute the expected number of accepted drafts of a tree from a table of measured acceptance
#    by (depth, rank), under an independence model;
# 2. build the best tree of N nodes;
# 3. choose the node budget N that maximises the speedup on a measured verify-cost curve.
#
# **Grading.** 10 points: the expected length (3), the best tree (3), the speedup and the budget
# (2) and your answers (2).  Hidden tests compare your functions with a reference on random and
# adversarial tables, and with specbook's own tree search on ranks whose depths are independent;
# the tests of parts 2 and 3 use the reference version of the parts before them while they run, so
# one mistake costs points once.  Write each function yourself: one that calls
# specbook's Medusa tree search (`specbook.train.medusa.best_choices`, `tokens_per_pass`) scores
# nothing on that part.  Plain Python (`math.prod`) is enough.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import math

# What the library already does, so the graded functions must not call it.
_TREE_LIBRARY = ("specbook.train.medusa.best_choices", "specbook.train.medusa.tokens_per_pass")

# %% [markdown] nbgrader={"grade": false, "grade_id": "data_text", "locked": true, "schema_version": 3, "solution": false}
# ## The measurements
#
# `ACCEPTANCE[d][r]` is the share of positions at which the r-th candidate of head d + 1 (0 = its
# top candidate) was the token the target wrote d + 1 places after the pending token.  It was
# measured with the Medusa heads that ship with specbook (`specbook/weights/medusa_smollm2-135m`, 4
# heads) on SmolLM2-135M-Instruct's greedy replies to the 66 benchmark prompts
# (`specbook/data/bench_prompts.jsonl`, which the heads were not trained on), at every reply
# position where all four heads have a token to guess, by `python scripts/measure_assignment_data.py`
# (`specbook.train.medusa.head_ranks` gives each position's ranks).  A row sums to less than 1:
# the rest of the time the right token was not among the head's top 5.
#
# `VERIFY_COST[n]` is the cost of one target pass over n positions relative to one position, and
# `DRAFT_COST` the Medusa heads' drafting time per pass relative to a plain target step, both from
# the committed benchmark report `docs/data/bench_all.json` (SmolLM2 in bfloat16 on the course's
# 2-core CPU; `verify_cost` and `draft_sizes.medusa.draft_cost`, which was 0.051-0.054 at budgets
# 4, 8 and 16).  A tree of N nodes is verified in one pass over N + 1 positions: the pending token
# and the N nodes.  The curve is one measurement, noise included; use it as it is.

# %% nbgrader={"grade": false, "grade_id": "data", "locked": true, "schema_version": 3, "solution": false}
ACCEPTANCE = [[0.27, 0.082, 0.051, 0.032, 0.026],
              [0.143, 0.057, 0.042, 0.028, 0.027],
              [0.099, 0.043, 0.031, 0.025, 0.022],
              [0.07, 0.041, 0.026, 0.022, 0.021]]  # [depth][rank], 5125 positions
VERIFY_COST = {1: 1.0, 2: 1.081, 3: 1.12, 4: 1.123, 5: 1.3, 6: 1.193, 7: 1.291, 8: 1.269, 9: 1.325,
               10: 1.372, 11: 1.443, 12: 1.481, 13: 1.509, 14: 1.553, 15: 1.59, 16: 1.605, 17: 1.635}  # n -> v(n)
DRAFT_COST = 0.053

# %% [markdown] nbgrader={"grade": false, "grade_id": "expected_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: the expected accepted length of a tree
#
# A tree is a list of paths, e.g. `[[0], [1], [0, 0]]`: two candidates at depth 0 and, below the
# first, the top candidate at depth 1.  At most one node per depth can be right (siblings hold
# different candidates, and a node is right only if its parent is), so the number of accepted
# drafts is the number of nodes whose path is right, and its expectation is the sum over nodes of
# P(the node's path is right).
#
# **The independence model.**  Assume that whether head d + 1's right token is its r-th candidate
# does not depend on what happened at the other depths.  Then a path's chance is the product of
# its depths' shares:
#
# $$E[\text{accepted}] = \sum_{(r_0, \dots, r_d) \in \text{tree}} \ \prod_{j=0}^{d} \text{ACCEPTANCE}[j][r_j].$$
#
# Write `expected_accepted(tree, acceptance)`.  Raise `ValueError` when a path is empty, deeper
# than the table or uses a rank the table does not have, when a path is listed twice, or when a
# path's parent (the path without its last rank) is not in the tree.

# %% nbgrader={"grade": false, "grade_id": "expected_accepted", "locked": false, "schema_version": 3, "solution": true}
def expected_accepted(tree: list[list[int]], acceptance: list[list[float]]) -> float:
    """Sum over the tree's nodes of the product of acceptance along the node's path."""
    ### BEGIN SOLUTION
    paths = [tuple(p) for p in tree]
    listed = set(paths)
    if len(listed) != len(paths):
        raise ValueError("tree: a path is listed twice")
    total = 0.0
    for path in paths:
        if not path or len(path) > len(acceptance) or not all(0 <= r < len(acceptance[d]) for d, r in enumerate(path)):
            raise ValueError(f"tree: path {list(path)} is empty or outside the acceptance table")
        if len(path) > 1 and path[:-1] not in listed:
            raise ValueError(f"tree: path {list(path)} needs its parent {list(path[:-1])}")
        total += math.prod(acceptance[d][r] for d, r in enumerate(path))
    return total
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "expected_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
### BEGIN HIDDEN TESTS
# A failing visible test shows its own line only, not the hidden lines above it.
# %xmode Plain
# The references of every hidden test of this notebook, defined before a test calls your code: a failing
# assertion cannot leave them undefined for the later parts (one mistake costs points once).
import itertools as _itertools
import random as _random

import torch as _torch

from specbook.grading.own_work import assert_own_work


def _ref_expected(tree, acceptance):
    return sum(math.prod(acceptance[d][r] for d, r in enumerate(p)) for p in tree)


def _ref_nodes(acceptance):
    """Every path of the table, as tuples."""
    return [p for d in range(1, len(acceptance) + 1)
            for p in _itertools.product(*(range(len(row)) for row in acceptance[:d]))]


def _ref_best_tree(acceptance, num_nodes):
    """The num_nodes nodes of highest value, a parent before its children of the same value: a child's value
    never exceeds its parent's, so every parent is in (part 2's first statement, not its greedy search)."""
    ranked = sorted(_ref_nodes(acceptance), key=lambda p: (-_ref_expected([p], acceptance), len(p)))
    return [list(p) for p in ranked[:num_nodes]]


def _ref_speedup(accepted, num_nodes, verify_cost, draft_cost):
    return (1 + accepted) / (draft_cost + verify_cost[num_nodes + 1])


def _ref_budget(acceptance, verify_cost, draft_cost, budgets):
    scores = {n: _ref_speedup(_ref_expected(_ref_best_tree(acceptance, n), acceptance), n, verify_cost, draft_cost)
              for n in budgets}
    best = max(scores, key=lambda n: (scores[n], -n))
    return best, scores[best]


def _random_table(rng, depth, ranks):
    table = []
    for _ in range(depth):
        weights = [rng.random() for _ in range(ranks + 1)]  # the last share: not among the candidates
        table.append([w / sum(weights) for w in weights[:ranks]])
    return table


def _product_ranks(counts):
    """(table, ranks): ranks (n, depth) hold every combination of ranks as often as the product of its counts."""
    table = [[c / sum(row) for c in row[:-1]] for row in counts]  # the last count: not among the candidates
    columns = [[r for r, c in enumerate(row) for _ in range(c)] for row in counts]
    return table, _torch.tensor(list(_itertools.product(*columns)), dtype=_torch.long)
### END HIDDEN TESTS
_table = [[0.5, 0.2], [0.4, 0.1]]
assert abs(expected_accepted([[0]], _table) - 0.5) < 1e-12, "one node: its own share"
assert abs(expected_accepted([[0], [1], [0, 0]], _table) - (0.5 + 0.2 + 0.5 * 0.4)) < 1e-12
try:
    expected_accepted([[0, 0]], _table)
except ValueError:
    pass
else:
    raise AssertionError("a node whose parent is missing should raise ValueError")
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal


def _random_tree(rng, depth, ranks, size):
    paths, frontier = [], [(r,) for r in range(ranks)]
    while frontier and len(paths) < size:
        node = frontier.pop(rng.randrange(len(frontier)))
        paths.append(list(node))
        if len(node) < depth:
            frontier += [node + (r,) for r in range(ranks)]
    rng.shuffle(paths)  # any order of the paths is a tree
    return paths


assert_own_work(expected_accepted, forbidden=_TREE_LIBRARY, calls=[([[0], [1], [0, 0]], _table)])
_rng = _random.Random(21)
for _ in range(200):
    _depth, _ranks = _rng.randint(1, 4), _rng.randint(1, 5)
    _acc = _random_table(_rng, _depth, _ranks)
    _tree = _random_tree(_rng, _depth, _ranks, _rng.randint(1, 25))
    try:
        _got = expected_accepted(_tree, _acc)
    except ValueError as _err:
        raise AssertionError(f"expected_accepted({_tree}, table) raised ValueError({_err}) on a valid tree: the paths "
                             "of a tree may come in any order, a child before its parent included") from None
    assert abs(_got - _ref_expected(_tree, _acc)) < 1e-9, (
        f"expected_accepted({_tree}, table) = {_got!r}, expected {_ref_expected(_tree, _acc)!r}: each node "
        "contributes the product of the shares along its whole path, root first")
# specbook's tokens_per_pass counts trees on measured ranks; on ranks whose every combination appears as often as
# the product of its depths' counts, its expected accepted length is the independence model's, exactly.
from specbook.train.medusa import tokens_per_pass as _tokens_per_pass

for _counts in ([[3, 2, 1, 2], [2, 1, 1, 4], [1, 1, 0, 2]], [[5, 1, 2], [4, 3, 1], [2, 2, 4]]):
    _acc, _ranks = _product_ranks(_counts)
    for _size in (1, 3, 6, 10):
        _tree = _random_tree(_rng, len(_acc), len(_acc[0]), _size)
        _library = _tokens_per_pass(_ranks, _tree) - 1
        assert abs(_ref_expected(_tree, _acc) - _library) < 1e-9, "the course's reference disagrees with specbook's"
        assert abs(expected_accepted(_tree, _acc) - _library) < 1e-9, (
            f"expected_accepted({_tree}, {_acc}) = {expected_accepted(_tree, _acc)!r}, but counting the tree on ranks "
            f"whose depths are independent gives {_library!r}: each node adds the product of the shares on its path")
_deep = [[0.9, 0.05], [0.8, 0.1], [0.7, 0.1]]
_got = expected_accepted([[0], [0, 0], [0, 0, 0], [0, 1]], _deep)
assert abs(_got - (0.9 + 0.72 + 0.504 + 0.09)) < 1e-9, (
    f"expected_accepted on a chain with a side branch = {_got!r}: a node deep in the tree is right only if "
    "every node above it is")
for _bad, _why in (([[0], [0]], "a path listed twice"), ([[0], [0, 0, 0]], "a missing parent"),
                   ([[0], []], "an empty path"), ([[2]], "a rank the table does not have"),
                   ([[0], [0, 0], [0, 0, 0], [0, 0, 0, 0]], "a path deeper than the table")):
    try:
        expected_accepted(_bad, _deep)
    except ValueError:
        pass
    else:
        raise AssertionError(f"expected_accepted({_bad}, table) should raise ValueError: {_why}")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "best_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: the best tree of N nodes
#
# Call a node's path probability its *value*.  A child's value is its parent's times a share of at
# most 1, so it never exceeds its parent's: the best tree of N nodes takes the N highest-value nodes
# whose parents are in it.  One way to find them: start from the empty tree, and N times add the
# node of highest value among those that may be added (a depth-0 node, or a child of a node already
# in the tree).
#
# Write `best_tree(acceptance, num_nodes)`: a tree (a list of paths) of `num_nodes` nodes, every
# parent included, with the largest `expected_accepted` (ties may go any way; if the table has fewer
# nodes than `num_nodes`, all of them).  Raise `ValueError` when `num_nodes` is not an int >= 0.

# %% nbgrader={"grade": false, "grade_id": "best_tree", "locked": false, "schema_version": 3, "solution": true}
def best_tree(acceptance: list[list[float]], num_nodes: int) -> list[list[int]]:
    """The num_nodes paths, parents included, with the largest sum of path probabilities."""
    ### BEGIN SOLUTION
    if isinstance(num_nodes, bool) or not isinstance(num_nodes, int) or num_nodes < 0:
        raise ValueError(f"num_nodes must be an int >= 0, got {num_nodes!r}")
    value = lambda path: math.prod(acceptance[d][r] for d, r in enumerate(path))  # noqa: E731
    chosen, frontier = [], [(r,) for r in range(len(acceptance[0]))]
    while frontier and len(chosen) < num_nodes:
        best = max(frontier, key=value)
        frontier.remove(best)
        chosen.append(list(best))
        if len(best) < len(acceptance):
            frontier += [best + (r,) for r in range(len(acceptance[len(best)]))]
    return chosen
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "best_tests", "locked": true, "points": 3, "schema_version": 3, "solution": false}
_table = [[0.5, 0.2], [0.6, 0.1]]
assert sorted(map(tuple, best_tree(_table, 1))) == [(0,)], "one node: the top candidate at depth 0"
assert sorted(map(tuple, best_tree(_table, 2))) == [(0,), (0, 0)], "0.5 * 0.6 = 0.3 beats the second candidate's 0.2"
assert sorted(map(tuple, best_tree(_table, 3))) == [(0,), (0, 0), (1,)]
### BEGIN HIDDEN TESTS
# %xmode Minimal


def _valid_tree(tree, acceptance):
    paths = [tuple(p) for p in tree]
    return (len(set(paths)) == len(paths) and all(
        0 < len(p) <= len(acceptance) and all(0 <= r < len(acceptance[d]) for d, r in enumerate(p))
        and (len(p) == 1 or p[:-1] in set(paths)) for p in paths))


assert_own_work(best_tree, forbidden=_TREE_LIBRARY, calls=[(_table, 3), ([[0.6, 0.3], [0.5, 0.2], [0.4, 0.2]], 5)])


def _check(acceptance, num_nodes, hint):
    # Graded on their own: the value of your tree is computed by the reference, not by your expected_accepted.
    got = best_tree(acceptance, num_nodes)
    want = _ref_best_tree(acceptance, num_nodes)
    assert isinstance(got, list) and _valid_tree(got, acceptance), (
        f"best_tree(table, {num_nodes}) = {got}: not a tree of the table (every path non-empty, listed once, "
        "inside the table, its parent in the tree)")
    assert len(got) == len(want), f"best_tree(table, {num_nodes}) has {len(got)} nodes, expected {len(want)}"
    assert _ref_expected(got, acceptance) >= _ref_expected(want, acceptance) - 1e-12, (
        f"best_tree({acceptance}, {num_nodes}) = {got} keeps {_ref_expected(got, acceptance):.6f} drafts per pass in "
        f"expectation, but a tree of {num_nodes} nodes can keep {_ref_expected(want, acceptance):.6f}: {hint}")


_check([[0.3, 0.29, 0.28], [0.9, 0.05, 0.01]], 4,
       "a node's value is the product along its path, so a deep node below a strong parent can beat a sibling")
_check([[0.6, 0.1], [0.15, 0.1], [0.9, 0.05]], 4,
       "a node's value is the product along its whole path, not the share of its own depth")
_check([[0.5, 0.3], [1.0, 0.0], [1.0, 0.0]], 5, "shares of 1 make a child as valuable as its parent; its parent must come first")
_check([[0.7, 0.0, 0.0], [0.0, 0.0, 0.0]], 6, "zero-value nodes still need their parents in the tree")
_check([[0.4, 0.3], [0.2, 0.1]], 9, "a budget larger than the table (6 nodes): every node, parents first")
_check([[0.4, 0.3], [0.2, 0.1]], 0, "no budget, no nodes")
_rng = _random.Random(23)
for _ in range(120):
    _depth, _ranks = _rng.randint(1, 4), _rng.randint(1, 5)
    _check(_random_table(_rng, _depth, _ranks), _rng.randint(1, 20),
           "grow the tree one node at a time, always taking the addable node with the largest path probability")


def _brute(acceptance, num_nodes):
    best = 0.0
    for subset in _itertools.combinations(_ref_nodes(acceptance), num_nodes):
        if all(len(p) == 1 or p[:-1] in subset for p in subset):
            best = max(best, _ref_expected(subset, acceptance))
    return best


# specbook's best_choices searches trees on measured ranks; on ranks whose every combination appears as often as the
# product of its depths' counts, its best tree is the best tree of the independence model.
from specbook.train.medusa import best_choices as _best_choices

for _counts in ([[3, 2, 1, 2], [2, 1, 1, 4], [1, 1, 0, 2]], [[5, 1, 2], [4, 3, 1], [2, 2, 4]], [[2, 2, 1], [1, 0, 3]]):
    _acc, _ranks = _product_ranks(_counts)
    for _n in (1, 2, 4, 7, 11):
        _library = _best_choices(_ranks, _n, top_s=len(_acc[0]))
        if len(_library) == _n:  # best_choices leaves out paths no position takes
            assert abs(_ref_expected(_library, _acc) - _ref_expected(_ref_best_tree(_acc, _n), _acc)) < 1e-9, (
                "the course's reference disagrees with specbook's best_choices")
        _check(_acc, _n, "compare your tree's value with what the best tree of this size keeps")
for _ in range(10):  # your tree against the best of every tree of small tables (brute force)
    _acc = _random_table(_rng, 3, 2)
    _n = _rng.randint(1, 5)
    assert abs(_ref_expected(best_tree(_acc, _n), _acc) - _brute(_acc, _n)) < 1e-12, (
        f"best_tree({_acc}, {_n}) is not the best of all trees of {_n} nodes")
for _bad in (-1, 2.0, True):
    try:
        best_tree(_table, _bad)
    except ValueError:
        pass
    else:
        raise AssertionError(f"best_tree(table, {_bad!r}) should raise ValueError")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "budget_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 3: the budget that pays most
#
# A pass with a tree of N nodes emits its accepted drafts plus one token of the target's own, and
# costs the drafting plus one verify pass over N + 1 positions (the pending token and the N nodes),
# in plain decoding steps:
#
# $$\text{speedup}(N) = \frac{1 + E[\text{accepted}]}{c + v(N + 1)}$$
#
# with c = `DRAFT_COST` (the heads run once per pass, whatever the tree's size) and v = `VERIFY_COST`.
#
# * `tree_speedup(accepted, num_nodes, verify_cost, draft_cost)`: that formula, for a tree of
#   `num_nodes` nodes with `accepted` expected accepted drafts.
# * `best_budget(acceptance, verify_cost, draft_cost, budgets)`: `(N, speedup)` for the N in
#   `budgets` whose best tree (your `best_tree`) has the largest speedup; ties go to the smaller N.

# %% nbgrader={"grade": false, "grade_id": "budget", "locked": false, "schema_version": 3, "solution": true}
def tree_speedup(accepted: float, num_nodes: int, verify_cost: dict[int, float], draft_cost: float) -> float:
    """(1 + accepted) / (draft_cost + v(num_nodes + 1))."""
    ### BEGIN SOLUTION
    return (1 + accepted) / (draft_cost + verify_cost[num_nodes + 1])
    ### END SOLUTION


def best_budget(acceptance: list[list[float]], verify_cost: dict[int, float], draft_cost: float,
                budgets) -> tuple[int, float]:
    """(N, speedup) of the budget in ``budgets`` whose best tree is fastest; ties to the smaller N."""
    ### BEGIN SOLUTION
    scores = {n: tree_speedup(expected_accepted(best_tree(acceptance, n), acceptance), n, verify_cost, draft_cost)
              for n in budgets}
    best = max(scores, key=lambda n: (scores[n], -n))
    return best, scores[best]
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "budget_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
_flat = {n: 1.0 for n in range(1, 20)}
assert abs(tree_speedup(1.5, 4, _flat, 0.0) - 2.5) < 1e-12, "free drafting and v = 1: the tokens per pass"
assert abs(tree_speedup(0.0, 1, {1: 1.0, 2: 1.25}, 0.0) - 0.8) < 1e-12, "nothing accepted: one token for a pass of v(2)"
### BEGIN HIDDEN TESTS
# %xmode Minimal
_curve = {1: 1.0, 2: 1.05, 3: 1.1, 4: 1.3, 5: 1.32, 6: 1.6, 7: 1.62, 8: 1.9, 9: 2.4}
for _args in ((0.0, 1, _curve, 0.1), (1.2, 3, _curve, 0.05), (2.5, 8, _curve, 0.0), (0.7, 5, _curve, 0.2)):
    assert abs(tree_speedup(*_args) - _ref_speedup(*_args)) < 1e-9, (
        f"tree_speedup{_args[:2] + ('v',) + _args[3:]} = {tree_speedup(*_args)!r}: the pass emits the accepted drafts "
        "plus one token, and verifies the pending token and every node")
# best_budget is graded on its own: while it runs, best_tree and expected_accepted are the reference's.
_yours = best_tree, expected_accepted
best_tree, expected_accepted = _ref_best_tree, _ref_expected
try:
    _rng = _random.Random(29)
    _tables = [[[0.5, 0.2, 0.1], [0.4, 0.2, 0.1]], [[0.9, 0.05], [0.9, 0.05], [0.9, 0.05]],
               [[0.2, 0.1], [0.1, 0.1]]]
    for _ in range(20):
        _tables.append([[_rng.random() / 3 for _ in range(3)] for _ in range(3)])
    for _acc in _tables:
        for _c in (0.0, 0.05, 0.3):
            _got, _want = best_budget(_acc, _curve, _c, range(1, 9)), _ref_budget(_acc, _curve, _c, range(1, 9))
            assert _got[0] == _want[0] and abs(_got[1] - _want[1]) < 1e-9, (
                f"best_budget({_acc}, v, {_c}, 1..8) = {_got}, expected {_want}: score each budget's best tree with "
                "tree_speedup and keep the largest (ties to the smaller budget)")
    _got = best_budget([[0.0, 0.0], [0.0, 0.0]], _curve, 0.0, [3, 1, 2])
    assert _got[0] == 1 and abs(_got[1] - 1 / _curve[2]) < 1e-9, (
        f"best_budget with nothing ever accepted = {_got}: every budget ties on tokens, the smallest pass costs least")
finally:
    best_tree, expected_accepted = _yours
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "answers_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 4: the budget for this machine
#
# With your functions, the measurements above and `BUDGETS = range(1, 17)`, set:
#
# * `BEST_BUDGET`, `BEST_SPEEDUP`: the budget with the largest speedup on the measured curve, and
#   that speedup;
# * `FLAT_BUDGET`: the budget you would choose if a tree pass cost one plain pass whatever its size
#   (v = 1 everywhere, the same `DRAFT_COST`), and `FLAT_BUDGET_SPEEDUP`: what that budget gives on
#   the measured curve;
# * `ASSUMPTION`: the statement of `ASSUMPTION_OPTIONS` that the expected length of part 1 relies on.
#
# Before you compute: predict whether the flat curve asks for a bigger or a smaller tree.

# %% nbgrader={"grade": false, "grade_id": "assumption_options", "locked": true, "schema_version": 3, "solution": false}
BUDGETS = range(1, 17)
ASSUMPTION_OPTIONS = (
    "the siblings of a node are independent draws from the head's distribution",
    "whether one head's right token is its r-th candidate does not depend on how the other heads did at that position",
    "each node is accepted independently of whether its parent is accepted",
    "the target's next token does not depend on the tokens the tree drafted",
)

# %% nbgrader={"grade": false, "grade_id": "answers", "locked": false, "schema_version": 3, "solution": true}
### BEGIN SOLUTION
BEST_BUDGET, BEST_SPEEDUP = best_budget(ACCEPTANCE, VERIFY_COST, DRAFT_COST, BUDGETS)
FLAT_BUDGET, _ = best_budget(ACCEPTANCE, {n: 1.0 for n in VERIFY_COST}, DRAFT_COST, BUDGETS)
FLAT_BUDGET_SPEEDUP = tree_speedup(expected_accepted(best_tree(ACCEPTANCE, FLAT_BUDGET), ACCEPTANCE), FLAT_BUDGET,
                                   VERIFY_COST, DRAFT_COST)
ASSUMPTION = ASSUMPTION_OPTIONS[1]
### END SOLUTION
print(f"best budget {BEST_BUDGET} nodes: {BEST_SPEEDUP:.3f}x; with v = 1 you would pick {FLAT_BUDGET} nodes, "
      f"which gives {FLAT_BUDGET_SPEEDUP:.3f}x here")
print("the best tree:", best_tree(ACCEPTANCE, BEST_BUDGET))

# %% nbgrader={"grade": true, "grade_id": "answers_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
assert BEST_BUDGET in BUDGETS and FLAT_BUDGET in BUDGETS
assert BEST_SPEEDUP >= FLAT_BUDGET_SPEEDUP - 1e-12, "the best budget on this curve cannot lose to another budget on it"
assert ASSUMPTION in ASSUMPTION_OPTIONS, "ASSUMPTION must be one of ASSUMPTION_OPTIONS"
### BEGIN HIDDEN TESTS
# %xmode Minimal


def _answers(expected_fn, tree_fn, speedup_fn):
    def score(n, curve):
        return speedup_fn(expected_fn(tree_fn(ACCEPTANCE, n), ACCEPTANCE), n, curve, DRAFT_COST)
    measured = {n: score(n, VERIFY_COST) for n in BUDGETS}
    flat = {n: score(n, {m: 1.0 for m in VERIFY_COST}) for n in BUDGETS}
    best = max(measured, key=lambda n: (measured[n], -n))
    flat_best = max(flat, key=lambda n: (flat[n], -n))
    return best, measured[best], flat_best, measured[flat_best]


def _matches(answer):
    return (BEST_BUDGET == answer[0] and abs(BEST_SPEEDUP - answer[1]) < 1e-6 and FLAT_BUDGET == answer[2]
            and abs(FLAT_BUDGET_SPEEDUP - answer[3]) < 1e-6)


_reference = _answers(_ref_expected, _ref_best_tree, _ref_speedup)
# Your answers must be the reference's, or what your own functions give: a mistake in parts 1 to 3 has
# already cost its points there, so it is not counted again here.
try:
    _own = _answers(expected_accepted, best_tree, tree_speedup)
except Exception:  # noqa: BLE001 - your functions are graded above
    _own = None
assert _matches(_reference) or (_own is not None and _matches(_own)), (
    "BEST_BUDGET, BEST_SPEEDUP, FLAT_BUDGET, FLAT_BUDGET_SPEEDUP: score every budget of BUDGETS with its best tree, "
    "once on VERIFY_COST and once with v = 1 (the same DRAFT_COST), and evaluate the flat choice on the measured curve")
assert ASSUMPTION == ASSUMPTION_OPTIONS[1], (
    "ASSUMPTION: which statement turns the chance that a whole path is right into a product of one share per depth? "
    "Siblings never matter to a path, and a node cannot be accepted without its parent")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "closing", "locked": true, "schema_version": 3, "solution": false}
# **How good is the independence model?**  The script that measured `ACCEPTANCE` also counted, on
# the same 5125 positions, how many drafts the best trees of part 2 actually keep when each
# position's ranks are read together: 0.467 for the best tree of 4 nodes and 0.635 for 16 nodes,
# against 0.442 and 0.577 by the independence model.  The heads tend to be right at the same
# positions (a path's joint count exceeds the product of its depths' shares), so the product
# under-counts the deeper nodes.
# That is why specbook's trainer chooses Medusa's trees from those joint counts
# (`specbook.train.medusa.best_choices`), not from the product, and why EAGLE-2 grows its tree
# every step from the draft's own confidence instead of using one fixed tree.
#
# The verify-cost curve decides the size: while a pass over more positions costs almost nothing
# (a GPU, or bfloat16 on a CPU with native bfloat16 arithmetic), large trees pay; on a curve like
# this one a few well-chosen nodes do, and the slogan "a tree pass costs one pass" picks a tree
# that loses.  `python -m specbook bench --gamma auto` makes this choice from a measured curve and a
# pilot run (`specbook/bench/sizing.py`).

# ---
# jupyter:
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown] nbgrader={"grade": false, "grade_id": "intro", "locked": true, "schema_version": 3, "solution": false}
# # Assignment 3: tree attention
#
# Tree drafters (SpecInfer, Medusa, EAGLE) propose several candidate continuations at once and
# verify all of them in **one** forward pass.  The tree is flattened into a sequence of $N$ nodes
# given by `parents`: `parents[i]` is the index of node $i$'s parent, or $-1$ when the node hangs
# directly off the cached context.  Nodes come in topological order (a parent before its children),
# so a plain chain of $K$ drafts is `parents = [-1, 0, 1, ..., K-2]`.
#
# For the single pass to compute, at every node, exactly what a plain causal pass over that node's
# own root-to-node path would compute, two things must hold (Miao et al., SpecInfer, 2024;
# Cai et al., Medusa, 2024, sec. 2.1.2):
#
# * node $i$ attends to the cached context, to its ancestors and to itself, and to nothing else
#   (siblings and cousins are alternatives, not history);
# * node $i$ sits at position `cache_length + depth(i)`, so siblings share a position.
#
# **Grading.** 10 points: the mask (4, with hidden tests), the positions (2, with hidden tests), and
# the mask over cache and tree (4): a hidden test runs attention through it and compares every node
# with plain causal attention over the cache and its own path.  Each part is graded on its own: the
# tests of parts 2 and 3 use the library's `tree_mask` (and part 3 its positions) while they run, so
# one mistake costs points once.  Write each function yourself: one that calls `specbook`'s own
# tree masks, positions or depths scores nothing on that part.

# %% nbgrader={"grade": false, "grade_id": "imports", "locked": true, "schema_version": 3, "solution": false}
import torch

import specbook.tree_attention

# What the library already does, so the graded functions must not call it.
_TREE_LIBRARY = ("specbook.tree_attention.tree_mask", "specbook.tree_attention.position_ids",
                 "specbook.tree_attention.attention_mask", "specbook.tree.depths", "specbook.tree.check_parents",
                 "specbook.tree.children", "specbook.tree_paths.ancestors")

# %% [markdown] nbgrader={"grade": false, "grade_id": "mask_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 1: the mask
#
# `tree_mask(parents)` returns an `(N, N)` boolean tensor with `mask[i, j]` True iff node $j$ is
# node $i$ or one of its ancestors.  Raise `ValueError` if some `parents[i]` is not $-1$ or an
# earlier node.

# %% nbgrader={"grade": false, "grade_id": "tree_mask", "locked": false, "schema_version": 3, "solution": true}
def tree_mask(parents: torch.Tensor) -> torch.Tensor:
    """(N, N) bool: mask[i, j] iff node j is node i or one of its ancestors."""
    ### BEGIN SOLUTION
    N = len(parents)
    mask = torch.eye(N, dtype=torch.bool)
    for i, par in enumerate(parents.tolist()):
        if not -1 <= par < i:
            raise ValueError(f"parents[{i}] = {par} must be -1 or an earlier node")
        if par >= 0:
            mask[i] |= mask[par]
    return mask
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "mask_tests", "locked": true, "points": 4, "schema_version": 3, "solution": false}
chain = torch.tensor([-1, 0, 1, 2])
assert torch.equal(tree_mask(chain), torch.ones(4, 4, dtype=torch.bool).tril()), "a chain is causal"
tree = torch.tensor([-1, -1, 0, 0, 1])  # two roots; node 0 has children 2 and 3
expected = torch.tensor([[1, 0, 0, 0, 0],
                         [0, 1, 0, 0, 0],
                         [1, 0, 1, 0, 0],
                         [1, 0, 0, 1, 0],
                         [0, 1, 0, 0, 1]], dtype=torch.bool)
assert torch.equal(tree_mask(tree), expected), tree_mask(tree)
### BEGIN HIDDEN TESTS
# Short tracebacks: the feedback shows the failure, not this cell's source.
# %xmode Minimal
from specbook.grading.own_work import assert_own_work

assert_own_work(tree_mask, forbidden=_TREE_LIBRARY, calls=[(chain,), (tree,)])
g = torch.Generator().manual_seed(3)
for n in range(1, 30):
    parents = torch.tensor([int(torch.randint(-1, i, (), generator=g)) for i in range(n)])
    assert torch.equal(tree_mask(parents), specbook.tree_attention.tree_mask(parents)), parents
for bad in ([0], [-1, 1], [-1, 0, 5], [-2]):
    try:
        tree_mask(torch.tensor(bad))
    except ValueError:
        pass
    else:
        raise AssertionError(f"parents={bad} should raise ValueError")
### END HIDDEN TESTS

# %% [markdown] nbgrader={"grade": false, "grade_id": "pos_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 2: positions
#
# `tree_position_ids(parents, cache_length)` returns the `(N,)` long tensor
# `cache_length + depth(i)`, where roots have depth 0.

# %% nbgrader={"grade": false, "grade_id": "tree_position_ids", "locked": false, "schema_version": 3, "solution": true}
def tree_position_ids(parents: torch.Tensor, cache_length: int) -> torch.Tensor:
    """(N,) long: cache_length + depth of each node."""
    ### BEGIN SOLUTION
    return cache_length + tree_mask(parents).sum(-1) - 1
    ### END SOLUTION


# %% nbgrader={"grade": true, "grade_id": "pos_tests", "locked": true, "points": 2, "schema_version": 3, "solution": false}
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
# Positions are graded alone: while this cell runs, `tree_mask` is the library's (a mistake in part 1 is not counted twice).
_your_tree_mask, tree_mask = tree_mask, specbook.tree_attention.tree_mask
try:
    assert tree_position_ids(torch.tensor([-1, 0, 1]), 10).tolist() == [10, 11, 12]
    assert tree_position_ids(torch.tensor([-1, -1, 0, 0, 1]), 7).tolist() == [7, 7, 8, 8, 8]
    ### BEGIN HIDDEN TESTS
    from specbook.grading.own_work import assert_own_work

    assert_own_work(tree_position_ids, forbidden=_TREE_LIBRARY[1:], calls=[(torch.tensor([-1, -1, 0, 0, 1]), 7)],
                    allowed=("specbook.tree_attention.tree_mask",))
    g = torch.Generator().manual_seed(4)
    for n in range(1, 30):
        parents = torch.tensor([int(torch.randint(-1, i, (), generator=g)) for i in range(n)])
        assert torch.equal(tree_position_ids(parents, 5).long(), specbook.tree_attention.position_ids(parents, 5)), (
            f"tree_position_ids({parents.tolist()}, 5) = {tree_position_ids(parents, 5).tolist()}: "
            "cache_length plus the number of ancestors")
    ### END HIDDEN TESTS
finally:
    tree_mask = _your_tree_mask

# %% [markdown] nbgrader={"grade": false, "grade_id": "attn_text", "locked": true, "schema_version": 3, "solution": false}
# ## Part 3: the mask over the cache and the tree
#
# In the real pass the $N$ tree nodes are queries, and the keys are the `cache_length` cached
# tokens followed by the $N$ nodes.  `attention_mask(parents, cache_length)` returns the
# `(N, cache_length + N)` boolean mask of that pass: every node sees the whole cache, and among
# the nodes exactly what `tree_mask` allows.  (You may call your `tree_mask`.)

# %% nbgrader={"grade": false, "grade_id": "attention_mask", "locked": false, "schema_version": 3, "solution": true}
def attention_mask(parents: torch.Tensor, cache_length: int) -> torch.Tensor:
    """(N, cache_length + N) bool: the cache columns, then the tree's own mask."""
    ### BEGIN SOLUTION
    n = len(parents)
    return torch.cat([torch.ones(n, cache_length, dtype=torch.bool), tree_mask(parents)], dim=1)
    ### END SOLUTION


# %% [markdown] nbgrader={"grade": false, "grade_id": "check_text", "locked": true, "schema_version": 3, "solution": false}
# ## Check your work: one pass over the tree equals one causal pass per path
#
# The cell below builds a toy attention layer whose queries, keys and values depend on the token
# and on its position, runs it once over the cache and the whole tree with your mask and
# positions, and compares every node with a plain causal pass over the cache and that node's own
# path.  The hidden test does the same on random trees, with the library's `tree_mask` and
# positions, so that it grades `attention_mask` alone.

# %% nbgrader={"grade": false, "grade_id": "attn_helpers", "locked": true, "schema_version": 3, "solution": false}
def toy_attention(query_tokens, query_positions, key_tokens, key_positions, mask, dim=8, seed=0):
    """Single-head attention: (N,) queries over (M,) keys with an (N, M) bool mask -> (N, dim)."""
    g = torch.Generator().manual_seed(seed)
    embed = torch.randn(50, dim, generator=g, dtype=torch.float64)
    pos = torch.randn(200, dim, generator=g, dtype=torch.float64)
    wq, wk, wv = (torch.randn(dim, dim, generator=g, dtype=torch.float64) for _ in range(3))
    hq, hk = embed[query_tokens] + pos[query_positions], embed[key_tokens] + pos[key_positions]
    scores = (hq @ wq) @ (hk @ wk).T / dim**0.5
    return scores.masked_fill(~mask, float("-inf")).softmax(-1) @ (hk @ wv)


def paths_agree(parents, tokens, cache_tokens=torch.tensor([1, 2, 3])):
    c = len(cache_tokens)
    positions = tree_position_ids(parents, c)
    out = toy_attention(tokens, positions, torch.cat([cache_tokens, tokens]),
                        torch.cat([torch.arange(c), positions]), attention_mask(parents, c))
    for i in range(len(parents)):
        path = [i]
        while parents[path[-1]] >= 0:
            path.append(int(parents[path[-1]]))
        path = path[::-1]
        n = len(path)
        causal = torch.cat([torch.ones(n, c, dtype=torch.bool), torch.ones(n, n, dtype=torch.bool).tril()], dim=1)
        keys = torch.cat([cache_tokens, tokens[path]])
        ref = toy_attention(tokens[path], torch.arange(n) + c, keys, torch.arange(c + n), causal)
        if not torch.allclose(out[i], ref[-1]):
            return False
    return True


print("tree pass == path passes:", paths_agree(torch.tensor([-1, -1, 0, 0, 1, 2]), torch.tensor([5, 6, 7, 8, 9, 10])))

# %% nbgrader={"grade": true, "grade_id": "attn_tests", "locked": true, "points": 4, "schema_version": 3, "solution": false}
# Short tracebacks: the feedback shows the assertion message, not this cell's source.
# %xmode Minimal
# The mask over cache and tree is graded alone: while this cell runs, `tree_mask` and the positions are the library's.
_yours = tree_mask, tree_position_ids
tree_mask, tree_position_ids = specbook.tree_attention.tree_mask, specbook.tree_attention.position_ids
try:
    assert attention_mask(torch.tensor([-1, 0]), 2).tolist() == [[True, True, True, False], [True, True, True, True]]
    ### BEGIN HIDDEN TESTS
    from specbook.grading.own_work import assert_own_work

    assert_own_work(attention_mask, forbidden=_TREE_LIBRARY[2:], calls=[(torch.tensor([-1, 0, 0]), 4)],
                    allowed=("specbook.tree_attention.tree_mask", "specbook.tree_attention.position_ids"))
    g = torch.Generator().manual_seed(5)
    for n in range(1, 16):
        parents = torch.tensor([int(torch.randint(-1, i, (), generator=g)) for i in range(n)])
        tokens = torch.randint(0, 50, (n,), generator=g)
        cache = torch.randint(0, 50, (int(torch.randint(0, 6, (), generator=g)),), generator=g)
        assert attention_mask(parents, len(cache)).shape == (n, len(cache) + n), (
            f"attention_mask({parents.tolist()}, {len(cache)}) has shape {tuple(attention_mask(parents, len(cache)).shape)}")
        assert paths_agree(parents, tokens, cache), (
            f"the tree pass differs from the path passes for parents={parents.tolist()}, cache_length={len(cache)}")
    ### END HIDDEN TESTS
finally:
    tree_mask, tree_position_ids = _yours
